//! For backends: the per-client state every backend keeps beside its connection —
//! session status, counters, registrations, earlier session ids, and the closed flag.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::raw::{Backoff, RegistrationBook, SessionSignal, StatsRecorder};
use crate::{Result, SessionState, SessionStatus};

/// The one accessor every backend provides for the state it keeps beside its
/// connection: the session signal, counters, registrations, capabilities, where paths
/// live and the session timeout. Every forward of
/// [`Backend`](crate::raw::Backend) is provided from it.
pub trait Stateful: Send + Sync {
    /// The backend's [`ClientState`].
    fn state(&self) -> &ClientState;
}

/// What a backend client keeps besides its connection. Backends embed it and usually
/// `Deref` to it.
#[derive(Debug)]
pub struct ClientState {
    /// The session status channel and its transitions.
    pub session: SessionSignal,
    /// Request and watch counters.
    pub stats: StatsRecorder,
    /// Registrations to re-create on a new session.
    pub registrations: RegistrationBook,
    /// Ids of this client's earlier sessions (ZooKeeper session ids, etcd lease ids):
    /// nodes they left behind are ours and go when the server expires them.
    past_sessions: Mutex<Vec<i64>>,
    closed: AtomicBool,
    /// What the backend promises beyond the common contract.
    capabilities: Capabilities,
    /// What a path relative to the namespace is prefixed with on the server.
    path_prefix: String,
    /// The session timeout / lease TTL of the current session.
    session_timeout: Mutex<Duration>,
}

impl ClientState {
    /// State for a `backend` client under `namespace`, starting at `status`.
    pub fn new(backend: &'static str, namespace: String, status: SessionStatus) -> ClientState {
        ClientState {
            session: SessionSignal::new(backend, namespace, status),
            stats: StatsRecorder::new(backend),
            registrations: RegistrationBook::default(),
            past_sessions: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            capabilities: Capabilities::NONE,
            path_prefix: String::new(),
            session_timeout: Mutex::new(Duration::ZERO),
        }
    }

    /// The same state for a backend promising `capabilities` (by default
    /// [`Capabilities::NONE`]: a backend that says nothing promises nothing beyond the
    /// common contract, and its optional operations are `Unsupported`).
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> ClientState {
        self.capabilities = capabilities;
        self
    }

    /// The same state for a backend whose paths relative to the namespace live at
    /// `prefix` + path on the server (`/<namespace>/` on ZooKeeper, `<namespace>/` on
    /// etcd): what [`Backend::path`](crate::raw::Backend::path) returns.
    pub fn with_path_prefix(mut self, prefix: impl Into<String>) -> ClientState {
        self.path_prefix = prefix.into();
        self
    }

    /// The same state with session timeout (or lease TTL) `timeout`, until
    /// [`ClientState::set_session_timeout`] says otherwise.
    pub fn with_session_timeout(self, timeout: Duration) -> ClientState {
        self.set_session_timeout(timeout);
        self
    }

    /// What the backend promises beyond the common contract.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// Where `rel`, a path relative to the namespace, lives on the server.
    pub fn path(&self, rel: &str) -> String {
        format!("{}{rel}", self.path_prefix)
    }

    /// The session timeout (or lease TTL) of the current session.
    pub fn session_timeout(&self) -> Duration {
        *self.session_timeout.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the session timeout the server granted a new session (ZooKeeper
    /// negotiates it).
    pub fn set_session_timeout(&self, timeout: Duration) {
        *self.session_timeout.lock().unwrap_or_else(|p| p.into_inner()) = timeout;
    }

    /// Whether [`ClientState::mark_closed`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the client closed, forgets its registrations and publishes `Closed`, which
    /// every background task watches; `true` only for the first call, which should then
    /// end the session on the server.
    pub fn mark_closed(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::SeqCst);
        if first {
            self.registrations.clear();
            let generation = self.session.current().generation;
            self.session.close(generation, &self.stats);
        }
        first
    }

    /// Resolves once the client is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn closed(&self) {
        self.session.closed().await
    }

    /// Session `generation` is gone (or may be): publishes `Lost` and marks every
    /// registration `Retrying` until the next session re-creates it.
    pub fn declare_lost(&self, generation: u64) {
        if self.session.set(SessionState::Lost, generation, &self.stats) {
            self.registrations.session_lost();
        }
    }

    /// Runs `attempt` until it succeeds, backing off with jitter from 100 ms to 2 s
    /// between failures (each logged at debug level as `what`); `None` once the client
    /// is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe if `attempt`'s futures are.
    pub async fn retry_until_closed<T, F, Fut>(&self, what: &'static str, mut attempt: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            if self.is_closed() {
                return None;
            }
            match attempt().await {
                Ok(v) => return Some(v),
                Err(e) => {
                    tracing::debug!(error = %e, what, "coord.session.retry");
                    tokio::select! {
                        _ = backoff.wait() => {}
                        _ = self.closed() => return None,
                    }
                }
            }
        }
    }

    /// Remembers `id` as one of this client's ended sessions.
    pub fn remember_past_session(&self, id: i64) {
        self.past_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
    }

    /// Whether `id` is one of this client's ended sessions.
    pub fn is_past_session(&self, id: i64) -> bool {
        self.past_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closes_once_and_wakes_waiters() {
        let state = std::sync::Arc::new(ClientState::new(
            "test",
            String::new(),
            SessionStatus::new(SessionState::Connected, 1),
        ));
        let waiter = tokio::spawn({
            let state = state.clone();
            async move { state.closed().await }
        });
        assert!(!state.is_closed());
        assert!(state.mark_closed());
        assert!(state.is_closed());
        assert!(
            !state.mark_closed(),
            "a second close must not end the session again"
        );
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("closed waiter woken")
            .expect("waiter");
        // A task that starts waiting after the close is not left hanging either.
        tokio::time::timeout(std::time::Duration::from_secs(1), state.closed())
            .await
            .expect("a late waiter sees the close");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_or_close() {
        let state = ClientState::new(
            "test",
            String::new(),
            SessionStatus::new(SessionState::Connected, 1),
        );
        let mut attempts = 0;
        let got = state
            .retry_until_closed("test", || {
                attempts += 1;
                let n = attempts;
                async move {
                    if n < 3 {
                        Err(crate::Error::new(crate::ErrorKind::Unavailable, "down"))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(got, Some(3));
        state.mark_closed();
        let never = state
            .retry_until_closed("test", || async { Ok::<_, crate::Error>(1) })
            .await;
        assert_eq!(never, None, "a closed client must not retry");
    }

    #[test]
    fn remembers_past_sessions() {
        let state = ClientState::new(
            "test",
            String::new(),
            SessionStatus::new(SessionState::Connected, 1),
        );
        assert!(!state.is_past_session(7));
        state.remember_past_session(7);
        assert!(state.is_past_session(7));
        assert!(!state.is_past_session(8));
    }
}
