//! For backends: the per-client state every backend keeps beside its connection —
//! session status, counters, local queues, registrations, earlier session ids, and the
//! closed flag with its shutdown notice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use crate::{LocalQueue, RegistrationBook, SessionSignal, SessionStatus, StatsRecorder};

/// What a backend client keeps besides its connection. Backends embed it and usually
/// `Deref` to it.
#[derive(Debug)]
pub struct ClientState {
    /// The session status channel and its transitions.
    pub session: SessionSignal,
    /// Request and watch counters.
    pub stats: StatsRecorder,
    /// This client's contenders per lock name, queued locally.
    pub locks: LocalQueue,
    /// This client's candidates per election name, queued locally.
    pub elections: LocalQueue,
    /// Registrations to re-create on a new session.
    pub registrations: RegistrationBook,
    /// Notified once, when the client is closed: background tasks stop.
    pub shutdown: Notify,
    /// Ids of this client's earlier sessions (ZooKeeper session ids, etcd lease ids):
    /// nodes they left behind are ours and go when the server expires them.
    past_sessions: Mutex<Vec<i64>>,
    closed: AtomicBool,
}

impl ClientState {
    /// State for a `backend` client under `namespace`, starting at `status`.
    pub fn new(backend: &'static str, namespace: String, status: SessionStatus) -> ClientState {
        ClientState {
            session: SessionSignal::new(backend, namespace, status),
            stats: StatsRecorder::default(),
            locks: LocalQueue::default(),
            elections: LocalQueue::default(),
            registrations: RegistrationBook::default(),
            shutdown: Notify::new(),
            past_sessions: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Whether [`ClientState::mark_closed`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Marks the client closed and wakes [`ClientState::shutdown`] waiters; `true` only
    /// for the first call, which should then end the session.
    pub fn mark_closed(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::SeqCst);
        if first {
            self.shutdown.notify_waiters();
        }
        first
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
    use crate::SessionState;

    #[tokio::test]
    async fn closes_once_and_wakes_shutdown_waiters() {
        let state = ClientState::new(
            "test",
            String::new(),
            SessionStatus::new(SessionState::Connected, 1),
        );
        let waiter = state.shutdown.notified();
        tokio::pin!(waiter);
        waiter.as_mut().enable();
        assert!(!state.is_closed());
        assert!(state.mark_closed());
        assert!(state.is_closed());
        assert!(
            !state.mark_closed(),
            "a second close must not end the session again"
        );
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("shutdown waiter woken");
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
