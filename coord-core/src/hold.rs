//! Hold state of a lock guard or leadership: held, suspended or lost, read from the
//! session when asked, with a future that resolves on loss.

use std::sync::{Arc, Mutex};

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
/// The state follows the session at no cost (nothing runs for it): `Suspended` while the
/// connection is in trouble, `Lost` when the session ends. A grant's node or key deleted
/// by someone else (an operator) is noticed once someone asks: the first call to
/// [`HoldWatch::state`], [`HoldWatch::lost`] or [`HoldWatch::changed`] arms a watch on
/// the entry (one request), and from then on its deletion makes the hold `Lost`. A
/// guard nobody asks costs no request beyond the lock's own; its fenced writes are
/// refused all the same once the entry is gone (and such a refusal makes it `Lost`
/// too), and its release succeeds.
///
/// # What `Held` promises
///
/// Two handles of one name say `Held` at once for at most the client's
/// [`loss_margin`](crate::Client::loss_margin) (measured on one clock), whatever the
/// fault: a killed or expired session, a partition (the handle says `Suspended` once
/// its connection is in trouble, before the server can expire the session), an
/// operator's delete (noticed through the armed watch). The exception is a paused
/// process: a handle read right after the process resumes may still say `Held` until
/// the client has caught up with what happened meanwhile — only a fenced write is safe
/// then.
#[derive(Clone)]
pub struct HoldWatch {
    session: watch::Receiver<SessionStatus>,
    generation: u64,
    /// `true` once the grant's entry is known gone.
    gone: watch::Receiver<bool>,
    /// Sets `gone` from outside the entry watch: a store's refusal of the grant's fence.
    forfeit: Forfeit,
    /// Starts the entry watch (with the sender of `gone`); taken by the first waiter.
    arm: Arc<Mutex<Option<(Arm, EntryGone)>>>,
    /// The state the last [`HoldWatch::changed`] returned (at first, the initial one).
    seen: HoldState,
}

/// Starts watching a grant's entry, reporting its deletion through the [`EntryGone`].
pub(crate) type Arm = Box<dyn FnOnce(EntryGone) + Send>;

/// What a grant's entry watch reports to its [`HoldWatch`]es.
#[derive(Debug)]
pub(crate) struct EntryGone {
    tx: Arc<watch::Sender<bool>>,
}

impl EntryGone {
    /// The entry is gone: the hold is `Lost` from now on.
    pub(crate) fn set(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves once every [`HoldWatch`] is dropped (nobody is interested any more).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub(crate) async fn unwatched(&self) {
        self.tx.closed().await
    }
}

/// Makes a hold `Lost` when the store proves its entry gone outside the entry watch: a
/// guarded write refused with `Fenced` because of this grant's own fence. Carried by the
/// grant's [`Fence`](crate::Fence), so that whoever writes with it tells the guard.
#[derive(Clone)]
pub(crate) struct Forfeit {
    tx: Arc<watch::Sender<bool>>,
    /// What else the grant gives up once its entry is known gone (its local turn).
    also: Arc<dyn Fn() + Send + Sync>,
}

impl Forfeit {
    /// The grant's entry is gone (the store refused its fence): its hold is `Lost` for
    /// every clone from now on.
    pub(crate) fn entry_gone(&self) {
        if *self.tx.borrow() {
            return;
        }
        // What goes with the loss first (the local turn freed): whoever hears of the
        // loss finds it done. Done twice by two racing callers, it is idempotent.
        (self.also)();
        if self.tx.send_if_modified(|gone| !std::mem::replace(gone, true)) {
            tracing::debug!("coord.fence_refused_hold_lost");
        }
    }
}

impl std::fmt::Debug for Forfeit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forfeit")
            .field("gone", &*self.tx.borrow())
            .finish()
    }
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

impl HoldWatch {
    /// A hold bound to session `generation`, its state read from `session` when asked
    /// (a grant made while the session is suspended is `Suspended`, one whose session
    /// has already ended is `Lost`). `arm` starts the entry watch when first needed;
    /// `on_forfeit` runs once if the grant's entry is proven gone by a refused fence.
    pub(crate) fn new(
        session: watch::Receiver<SessionStatus>,
        generation: u64,
        arm: impl FnOnce(EntryGone) + Send + 'static,
        on_forfeit: impl Fn() + Send + Sync + 'static,
    ) -> HoldWatch {
        let (tx, gone) = watch::channel(false);
        let tx = Arc::new(tx);
        let forfeit = Forfeit {
            tx: tx.clone(),
            also: Arc::new(on_forfeit),
        };
        let mut hold = HoldWatch {
            session,
            generation,
            gone,
            forfeit,
            arm: Arc::new(Mutex::new(Some((Box::new(arm) as Arm, EntryGone { tx })))),
            seen: HoldState::Held,
        };
        hold.seen = hold.peek();
        hold
    }

    /// The session generation the hold is bound to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The signal that makes this hold `Lost` when a store refuses its grant's fence.
    pub(crate) fn forfeit(&self) -> Forfeit {
        self.forfeit.clone()
    }

    /// The current hold state. The first call arms the watch on the grant's entry (one
    /// request, in the background), so that from then on an operator's deletion of the
    /// entry makes the state `Lost`: unfenced work that trusts `Held` is told. Later
    /// calls cost nothing.
    pub fn state(&self) -> HoldState {
        self.arm();
        self.peek()
    }

    /// The current hold state, without arming the entry watch.
    pub(crate) fn peek(&self) -> HoldState {
        // An error: the backend dropped its session signal, so no session is left.
        if *self.gone.borrow() || self.session.has_changed().is_err() {
            return HoldState::Lost;
        }
        hold_for(*self.session.borrow(), self.generation)
    }

    /// Starts the entry watch (once; not for a hold already lost).
    fn arm(&self) {
        // The watch runs on a task: outside a runtime (a plain thread, after shutdown)
        // nothing is armed, and the state follows the session only.
        if self.peek() == HoldState::Lost || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let armed = self.arm.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((arm, gone)) = armed {
            arm(gone);
        }
    }

    /// Waits for the session or the entry to change (or for either to be gone).
    async fn wake(session: &mut watch::Receiver<SessionStatus>, gone: &mut watch::Receiver<bool>) {
        tokio::select! {
            // An error: the session signal is gone for good, and `state` says `Lost`.
            _ = session.changed() => {}
            r = gone.changed() => {
                if r.is_err() {
                    // The entry watch ended without a deletion: only the session counts.
                    let _ = session.changed().await;
                }
            }
        }
    }

    /// Resolves once the hold is [`HoldState::Lost`]: the session ended, or (watched from
    /// the first call on) the grant's entry was deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses nothing; call again to wait again.
    pub async fn lost(&self) {
        self.arm();
        let (mut session, mut gone) = (self.session.clone(), self.gone.clone());
        while self.peek() != HoldState::Lost {
            Self::wake(&mut session, &mut gone).await;
        }
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
        let (mut session, mut gone) = (self.session.clone(), self.gone.clone());
        loop {
            let now = self.peek();
            if now == HoldState::Lost || now != self.seen {
                self.seen = now;
                return now;
            }
            Self::wake(&mut session, &mut gone).await;
        }
    }
}

impl std::fmt::Debug for HoldWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldWatch")
            .field("state", &self.peek())
            .field("generation", &self.generation)
            .finish()
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
        let (tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let watch = HoldWatch::new(rx, 1, |_| {}, || {});
        let waiter = tokio::spawn({
            let w = watch.clone();
            async move { w.lost().await }
        });
        tx.send_replace(status(SessionState::Suspended, 1));
        assert_eq!(watch.state(), HoldState::Suspended);
        tx.send_replace(status(SessionState::Lost, 1));
        waiter.await.expect("waiter");
        // A later session never brings a hold back.
        tx.send_replace(status(SessionState::Connected, 2));
        assert_eq!(watch.state(), HoldState::Lost);
    }

    #[tokio::test]
    async fn follows_session_generation() {
        let (tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let mut hold = HoldWatch::new(rx, 1, |_| {}, || {});
        tx.send_replace(status(SessionState::Suspended, 1));
        assert_eq!(hold.changed().await, HoldState::Suspended);
        tx.send_replace(status(SessionState::Connected, 1));
        assert_eq!(hold.changed().await, HoldState::Held);
        // A new generation without an observed Lost still means the hold is gone.
        tx.send_replace(status(SessionState::Connected, 2));
        hold.lost().await;
    }

    #[tokio::test]
    async fn a_dropped_session_signal_is_lost() {
        let (tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let hold = HoldWatch::new(rx, 1, |_| {}, || {});
        let waiter = tokio::spawn({
            let h = hold.clone();
            async move { h.lost().await }
        });
        drop(tx);
        waiter.await.expect("waiter");
        assert_eq!(hold.state(), HoldState::Lost);
    }

    /// The entry watch starts on the first ask (`state`, a wait) only, once, and its
    /// report of a deletion makes the hold `Lost` for every clone.
    #[tokio::test]
    async fn the_entry_watch_starts_on_the_first_ask() {
        let (_tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let (armed_tx, mut armed_rx) = tokio::sync::mpsc::unbounded_channel();
        let hold = HoldWatch::new(
            rx,
            1,
            move |gone| {
                let _ = armed_tx.send(gone);
            },
            || {},
        );
        let other = hold.clone();
        assert_eq!(hold.peek(), HoldState::Held);
        assert!(armed_rx.try_recv().is_err(), "armed before anyone asked");
        assert!(format!("{hold:?}").contains("Held"));
        assert!(armed_rx.try_recv().is_err(), "armed by Debug");
        assert_eq!(hold.state(), HoldState::Held);
        let gone = armed_rx.try_recv().expect("armed by the first state()");
        let waiter = tokio::spawn(async move { hold.lost().await });
        let second = tokio::spawn({
            let o = other.clone();
            async move { o.lost().await }
        });
        tokio::task::yield_now().await;
        gone.set();
        waiter.await.expect("waiter");
        second.await.expect("second waiter");
        assert_eq!(other.state(), HoldState::Lost);
        assert!(armed_rx.try_recv().is_err(), "armed twice");
    }

    /// A refused fence makes the hold `Lost` for every clone and wakes its waiters, once,
    /// although the session is still connected and nobody armed the entry watch.
    #[tokio::test]
    async fn a_refused_fence_is_lost() {
        let (_tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let freed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let hold = HoldWatch::new(rx, 1, |_| {}, {
            let freed = freed.clone();
            move || {
                freed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let mut other = hold.clone();
        let forfeit = hold.forfeit();
        assert_eq!(hold.state(), HoldState::Held);
        let waiter = tokio::spawn(async move { other.changed().await });
        tokio::task::yield_now().await;
        forfeit.entry_gone();
        forfeit.entry_gone();
        assert_eq!(waiter.await.expect("waiter"), HoldState::Lost);
        assert_eq!(hold.state(), HoldState::Lost);
        assert_eq!(freed.load(std::sync::atomic::Ordering::SeqCst), 1, "freed once");
    }

    /// A grant made while its session is suspended (or already gone) must not start as
    /// `Held`.
    #[tokio::test(flavor = "current_thread")]
    async fn starts_in_the_session_state() {
        let (_tx, rx) = watch::channel(status(SessionState::Suspended, 3));
        assert_eq!(
            HoldWatch::new(rx.clone(), 3, |_| {}, || {}).state(),
            HoldState::Suspended
        );
        assert_eq!(
            HoldWatch::new(rx, 2, |_| {}, || {}).state(),
            HoldState::Lost,
            "an earlier generation's grant is lost"
        );
        let (_tx, rx) = watch::channel(status(SessionState::Lost, 3));
        assert_eq!(HoldWatch::new(rx, 3, |_| {}, || {}).state(), HoldState::Lost);
    }
}
