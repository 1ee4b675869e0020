//! Hold state of a lock guard or leadership: held, suspended or lost, with a future
//! that resolves on loss.

use std::sync::Arc;

use tokio::sync::watch;

use crate::session::{SessionState, SessionStatus};

/// Whether a guard (lock or leadership) is still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldState {
    /// Held: the session is connected and the contender node/key exists.
    Held,
    /// The connection is in trouble; the grant may still be valid, or may already have
    /// passed to someone else. Pause work that needs exclusion.
    Suspended,
    /// The grant is gone (session lost, node deleted, released). Terminal.
    Lost,
}

/// The receiving side of a guard's hold state. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HoldWatch {
    rx: watch::Receiver<HoldState>,
}

impl HoldWatch {
    /// The current hold state.
    pub fn state(&self) -> HoldState {
        *self.rx.borrow()
    }

    /// Resolves once the hold is [`HoldState::Lost`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses nothing; call again to wait again.
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        // An error means the backend dropped the signal: nothing can keep the hold.
        let _ = rx.wait_for(|s| *s == HoldState::Lost).await;
    }

    /// Waits for the next change and returns the new state. Returns `Lost` at once if
    /// the hold is already lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a change that happens while no future is pending is still seen by
    /// the next call.
    pub async fn changed(&mut self) -> HoldState {
        if self.state() == HoldState::Lost {
            return HoldState::Lost;
        }
        match self.rx.changed().await {
            Ok(()) => *self.rx.borrow_and_update(),
            Err(_) => HoldState::Lost,
        }
    }
}

/// The sending side of a hold state, kept by the backend. `Lost` is terminal: once set,
/// later updates are ignored.
#[derive(Debug, Clone)]
pub struct HoldSignal {
    tx: Arc<watch::Sender<HoldState>>,
}

impl HoldSignal {
    /// A new signal in state `Held`, and its watch.
    pub fn new() -> (HoldSignal, HoldWatch) {
        let (tx, rx) = watch::channel(HoldState::Held);
        (HoldSignal { tx: Arc::new(tx) }, HoldWatch { rx })
    }

    /// Sets the state (ignored after `Lost`). Returns the state now in force.
    pub fn set(&self, state: HoldState) -> HoldState {
        let mut now = state;
        self.tx.send_if_modified(|s| {
            if *s == HoldState::Lost || *s == state {
                now = *s;
                false
            } else {
                *s = state;
                true
            }
        });
        now
    }

    /// The current state.
    pub fn state(&self) -> HoldState {
        *self.tx.borrow()
    }

    /// Resolves once every [`HoldWatch`] is dropped (nobody is interested any more).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Spawns a task that mirrors the client's session onto this hold: `Suspended` while
    /// session `generation` is suspended, `Held` when it reconnects, `Lost` when it is
    /// lost, closed, or replaced by a later generation. The task ends when the hold is
    /// lost or every [`HoldWatch`] is dropped.
    pub fn follow_session(&self, mut session: watch::Receiver<SessionStatus>, generation: u64) {
        let signal = self.clone();
        tokio::spawn(async move {
            loop {
                let status = *session.borrow_and_update();
                let next = if status.generation != generation {
                    HoldState::Lost
                } else {
                    match status.state {
                        SessionState::Connected => HoldState::Held,
                        SessionState::Suspended => HoldState::Suspended,
                        SessionState::Lost | SessionState::Closed => HoldState::Lost,
                    }
                };
                if signal.set(next) == HoldState::Lost {
                    return;
                }
                tokio::select! {
                    changed = session.changed() => {
                        if changed.is_err() {
                            signal.set(HoldState::Lost);
                            return;
                        }
                    }
                    _ = signal.tx.closed() => return,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lost_is_terminal_and_wakes_waiters() {
        let (signal, watch) = HoldSignal::new();
        let waiter = tokio::spawn({
            let w = watch.clone();
            async move { w.lost().await }
        });
        assert_eq!(signal.set(HoldState::Suspended), HoldState::Suspended);
        assert_eq!(signal.set(HoldState::Lost), HoldState::Lost);
        assert_eq!(signal.set(HoldState::Held), HoldState::Lost);
        waiter.await.expect("waiter");
        assert_eq!(watch.state(), HoldState::Lost);
    }

    #[tokio::test]
    async fn follows_session_generation() {
        let (tx, rx) = watch::channel(SessionStatus::new(SessionState::Connected, 1));
        let (signal, mut hold) = HoldSignal::new();
        signal.follow_session(rx, 1);
        tx.send_replace(SessionStatus::new(SessionState::Suspended, 1));
        assert_eq!(hold.changed().await, HoldState::Suspended);
        tx.send_replace(SessionStatus::new(SessionState::Connected, 1));
        assert_eq!(hold.changed().await, HoldState::Held);
        // A new generation without an observed Lost still means the hold is gone.
        tx.send_replace(SessionStatus::new(SessionState::Connected, 2));
        hold.lost().await;
    }
}
