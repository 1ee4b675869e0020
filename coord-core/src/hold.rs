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
///
/// The state follows the session at no cost: `Suspended` while the connection is in
/// trouble, `Lost` when the session ends. A grant's node or key deleted by someone else
/// (an operator) is noticed only while someone waits for a change: the first call to
/// [`HoldWatch::lost`] or [`HoldWatch::changed`] arms a watch on the entry (one request),
/// and from then on its deletion makes the hold `Lost`. A guard nobody waits on costs no
/// request beyond the lock's own; its fenced writes are refused all the same once the
/// entry is gone, and its release succeeds.
#[derive(Debug, Clone)]
pub struct HoldWatch {
    rx: watch::Receiver<HoldState>,
    interest: Arc<watch::Sender<bool>>,
}

impl HoldWatch {
    /// The current hold state (no request; see the type's docs for what it follows).
    pub fn state(&self) -> HoldState {
        *self.rx.borrow()
    }

    /// Asks the recipe to watch the grant's entry (once).
    fn arm(&self) {
        self.interest
            .send_if_modified(|wanted| !std::mem::replace(wanted, true));
    }

    /// Resolves once the hold is [`HoldState::Lost`]: the session ended, or (watched from
    /// the first call on) the grant's entry was deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses nothing; call again to wait again.
    pub async fn lost(&self) {
        self.arm();
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
        self.arm();
        if self.state() == HoldState::Lost {
            return HoldState::Lost;
        }
        match self.rx.changed().await {
            Ok(()) => *self.rx.borrow_and_update(),
            Err(_) => HoldState::Lost,
        }
    }
}

/// The sending side of a hold state, kept by the recipe that granted it. `Lost` is
/// terminal: once set, later updates are ignored.
#[derive(Debug, Clone)]
pub(crate) struct HoldSignal {
    tx: Arc<watch::Sender<HoldState>>,
    interest: watch::Receiver<bool>,
    generation: u64,
}

/// What session `generation`'s status means for a hold bound to it.
fn hold_for(status: SessionStatus, generation: u64) -> HoldState {
    if status.generation != generation {
        return HoldState::Lost;
    }
    match status.state {
        SessionState::Connected => HoldState::Held,
        SessionState::Suspended => HoldState::Suspended,
        SessionState::Lost | SessionState::Closed => HoldState::Lost,
    }
}

impl HoldSignal {
    /// A hold bound to session `generation`, starting in the state `status` gives it (a
    /// grant made while the session is suspended starts `Suspended`, one whose session
    /// has already ended starts `Lost`). Whoever keeps it calls [`HoldSignal::follow`]
    /// with each later session status.
    pub(crate) fn new(status: SessionStatus, generation: u64) -> (HoldSignal, HoldWatch) {
        let (tx, rx) = watch::channel(hold_for(status, generation));
        let (interest, interest_rx) = watch::channel(false);
        (
            HoldSignal {
                tx: Arc::new(tx),
                interest: interest_rx,
                generation,
            },
            HoldWatch {
                rx,
                interest: Arc::new(interest),
            },
        )
    }

    /// [`HoldSignal::new`] from the session's status now, with a task that mirrors the
    /// session onto it from then on: `Suspended` while suspended, `Held` when connected
    /// again, `Lost` when lost, closed or replaced by a later generation. The task ends
    /// when the hold is lost or every [`HoldWatch`] is dropped.
    #[cfg(test)]
    pub(crate) fn following(
        mut session: watch::Receiver<SessionStatus>,
        generation: u64,
    ) -> (HoldSignal, HoldWatch) {
        let (signal, watch) = HoldSignal::new(*session.borrow_and_update(), generation);
        let follower = signal.clone();
        if signal.state() != HoldState::Lost {
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        changed = session.changed() => {
                            let next = match changed {
                                Ok(()) => follower.follow(*session.borrow_and_update()),
                                Err(_) => follower.set(HoldState::Lost),
                            };
                            if next == HoldState::Lost {
                                return;
                            }
                        }
                        _ = follower.tx.closed() => return,
                    }
                }
            });
        }
        (signal, watch)
    }

    /// Applies a session status to the hold. Returns the state now in force.
    pub(crate) fn follow(&self, status: SessionStatus) -> HoldState {
        self.set(hold_for(status, self.generation))
    }

    /// The state now.
    pub(crate) fn state(&self) -> HoldState {
        *self.tx.borrow()
    }

    /// Resolves once someone waits for the hold to change ([`HoldWatch::lost`],
    /// [`HoldWatch::changed`]); never if nobody does.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub(crate) async fn wanted(&self) {
        let mut interest = self.interest.clone();
        if interest.wait_for(|w| *w).await.is_err() {
            // Every watch is gone: nobody will ever want it.
            std::future::pending::<()>().await;
        }
    }

    /// Sets the state (ignored after `Lost`). Returns the state now in force.
    pub(crate) fn set(&self, state: HoldState) -> HoldState {
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

    /// Resolves once every [`HoldWatch`] is dropped (nobody is interested any more).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: SessionState, generation: u64) -> SessionStatus {
        SessionStatus::new(state, generation)
    }

    #[tokio::test]
    async fn lost_is_terminal_and_wakes_waiters() {
        let (_tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let (signal, watch) = HoldSignal::following(rx, 1);
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
        let (tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let (_signal, mut hold) = HoldSignal::following(rx, 1);
        tx.send_replace(status(SessionState::Suspended, 1));
        assert_eq!(hold.changed().await, HoldState::Suspended);
        tx.send_replace(status(SessionState::Connected, 1));
        assert_eq!(hold.changed().await, HoldState::Held);
        // A new generation without an observed Lost still means the hold is gone.
        tx.send_replace(status(SessionState::Connected, 2));
        hold.lost().await;
    }

    /// A grant made while its session is suspended (or already gone) must not start as
    /// `Held`: the state is taken from the session before the constructor returns, with
    /// no task having run (this runtime has one thread and nothing awaits in between).
    #[tokio::test(flavor = "current_thread")]
    async fn starts_in_the_session_state_synchronously() {
        let (_tx, rx) = watch::channel(status(SessionState::Suspended, 3));
        let (_s, hold) = HoldSignal::following(rx.clone(), 3);
        assert_eq!(hold.state(), HoldState::Suspended);
        let (_s, hold) = HoldSignal::following(rx, 2);
        assert_eq!(
            hold.state(),
            HoldState::Lost,
            "an earlier generation's grant is lost"
        );
        let (_tx, rx) = watch::channel(status(SessionState::Lost, 3));
        let (_s, hold) = HoldSignal::following(rx, 3);
        assert_eq!(hold.state(), HoldState::Lost);
    }
}
