//! The backend side of a client's session status: one place that publishes transitions,
//! logs them, counts them, and lets tasks wait on them.

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::session::{SessionState, SessionStatus};
use crate::stats::StatsRecorder;

/// Publishes a client's [`SessionStatus`]. `Closed` is terminal: later updates are
/// ignored.
#[derive(Debug)]
pub struct SessionSignal {
    tx: watch::Sender<SessionStatus>,
    backend: &'static str,
    namespace: String,
}

impl SessionSignal {
    /// A signal starting at `initial`, for logs naming `backend` and `namespace`.
    pub fn new(backend: &'static str, namespace: impl Into<String>, initial: SessionStatus) -> Self {
        SessionSignal {
            tx: watch::channel(initial).0,
            backend,
            namespace: namespace.into(),
        }
    }

    /// The namespace the client works under.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The backend's scheme name, for spans and logs.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The latest status.
    pub fn current(&self) -> SessionStatus {
        *self.tx.borrow()
    }

    /// A receiver of every later status.
    pub fn subscribe(&self) -> watch::Receiver<SessionStatus> {
        self.tx.subscribe()
    }

    /// Moves to `state` of session `generation` (ignored once closed, or if unchanged);
    /// logs at INFO and counts the transition. Returns whether anything changed.
    pub fn set(&self, state: SessionState, generation: u64, stats: &StatsRecorder) -> bool {
        let changed = self.tx.send_if_modified(|s| {
            let next = SessionStatus::new(state, generation);
            if *s != next && s.state != SessionState::Closed {
                *s = next;
                true
            } else {
                false
            }
        });
        if changed {
            stats.session_transition(state);
            tracing::info!(backend = self.backend, namespace = %self.namespace, %state, generation, "coord.session");
        }
        changed
    }

    /// Moves to `Closed` (terminal).
    pub fn close(&self, generation: u64, stats: &StatsRecorder) {
        self.set(SessionState::Closed, generation, stats);
    }

    /// Resolves once session `generation` is over: lost, replaced by a later one, or
    /// closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn ended(&self, generation: u64) {
        let mut rx = self.tx.subscribe();
        let _ = rx
            .wait_for(|s| {
                s.generation != generation || matches!(s.state, SessionState::Lost | SessionState::Closed)
            })
            .await;
    }

    /// Resolves once the client is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn closed(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|s| s.state == SessionState::Closed).await;
    }

    /// Waits until some session is connected; returns its generation.
    ///
    /// # Errors
    ///
    /// `Closed` if the client is closed first.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn connected(&self) -> Result<u64> {
        let mut rx = self.tx.subscribe();
        let s = *rx
            .wait_for(|s| matches!(s.state, SessionState::Connected | SessionState::Closed))
            .await
            .map_err(|_| Error::closed())?;
        match s.state {
            SessionState::Closed => Err(Error::closed()),
            _ => Ok(s.generation),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closed_is_terminal_and_transitions_are_counted() {
        let stats = StatsRecorder::default();
        let s = SessionSignal::new("test", "ns", SessionStatus::new(SessionState::Connected, 1));
        assert!(s.set(SessionState::Suspended, 1, &stats));
        assert!(!s.set(SessionState::Suspended, 1, &stats));
        s.close(1, &stats);
        assert!(!s.set(SessionState::Connected, 2, &stats));
        assert_eq!(s.current().state, SessionState::Closed);
        assert_eq!(stats.snapshot().session_transitions, 2);
        assert!(s.connected().await.is_err());
        s.ended(1).await;
    }
}
