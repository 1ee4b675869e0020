//! Per-name local queueing: within one client, contenders for the same lock or election
//! reach the server one at a time, so a client never has two contenders for one name.
//!
//! A turn is given up when its entry is gone: removed, or gone with its session, or
//! seen deleted by someone else — then only after the backend was told
//! ([`ContenderQueue::entry_lost`](crate::raw::ContenderQueue::entry_lost): etcd moves
//! the client's later contenders to a key the lost guard's release cannot reach). Once
//! the contender's own removal has begun, the turn is given up by that removal alone. A
//! session's end needs no task per grant: a local contender waiting for the turn watches
//! the granted holder's session, and takes the turn over once that session is over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, watch};

use crate::engine::removal::{ended, over};
use crate::session::SessionStatus;

/// A map of FIFO async mutexes keyed by name; an entry is dropped when its last user
/// is (each acquire and each end of a turn costs O(1), however many names the client
/// holds).
#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    slots: Arc<Mutex<Slots>>,
}

/// Each name's slot and how many [`SlotRef`]s use it.
type Slots = HashMap<String, (Arc<Slot>, usize)>;

/// A counted use of one name's slot: the last one dropped removes the slot from the map.
#[derive(Debug)]
struct SlotRef {
    slot: Arc<Slot>,
    key: String,
    slots: Weak<Mutex<Slots>>,
}

impl std::ops::Deref for SlotRef {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.slot
    }
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        let Some(slots) = self.slots.upgrade() else { return };
        let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, users)) = slots.get_mut(&self.key)
            && Arc::ptr_eq(slot, &self.slot)
        {
            *users -= 1;
            if *users == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

/// One name's turn, and who holds it once granted.
#[derive(Debug)]
struct Slot {
    turn: Arc<AsyncMutex<()>>,
    /// The granted holder's turn and session generation; `None` while the turn is not
    /// held by a grant.
    holder: watch::Sender<Option<Holder>>,
    /// When the last turn ended because its entry vanished (its session ended, or it
    /// was deleted) rather than by a removal: lock-delay for the next local contender.
    vanished: Mutex<Option<Instant>>,
    /// Whether the turn's holder is this client's entry being removed ([`releasing`]):
    /// the name is not held by anyone local, only not free yet.
    removing: std::sync::atomic::AtomicBool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            turn: Arc::default(),
            holder: watch::channel(None).0,
            vanished: Mutex::new(None),
            removing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[derive(Debug, Clone)]
struct Holder {
    turn: Weak<Mutex<Option<LocalTurn>>>,
    generation: u64,
}

/// Holding this means the client's one remote contender for the name is yours.
#[derive(Debug)]
pub(crate) struct LocalTurn {
    slot: SlotRef,
    _guard: OwnedMutexGuard<()>,
    /// Whether the turn's entry was granted: only a grant's end says whether the next
    /// local contender holds off (lock-delay).
    granted: bool,
    /// Whether its removal has begun: the entry's deletion seen from now on is ours.
    releasing: bool,
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        // Cleared before the mutex is: the next holder's record is never overwritten.
        self.slot.holder.send_replace(None);
    }
}

/// A turn shared by a contender and whatever gives it up when the entry goes.
pub(crate) type SharedTurn = Arc<Mutex<Option<LocalTurn>>>;

/// How a turn ended, for the next local contender's lock-delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnEnd {
    /// Its entry was removed by this client: a grant's release clears the record.
    Removed,
    /// Its entry was seen gone without this client removing it (deleted by someone
    /// else), unless its removal had begun.
    Gone,
    /// Its session ended, taking the entry with it.
    WithSession,
    /// Taken over by a newcomer after its session ended unseen: the record is left as
    /// it is.
    Unseen,
}

fn end_turn(turn: &SharedTurn, how: TurnEnd) {
    let mut held = turn.lock().unwrap_or_else(|p| p.into_inner());
    // An entry seen gone once its removal began: that removal ends the turn (a delete
    // it sent may still land; no later contender of the client may hold the key then).
    if how == TurnEnd::Gone && held.as_ref().is_some_and(|t| t.releasing) {
        return;
    }
    let Some(t) = held.take() else {
        return;
    };
    drop(held);
    if !t.granted || how == TurnEnd::Unseen {
        // Only a grant's end says anything about the next grant.
        return;
    }
    let vanished = match how {
        TurnEnd::Gone => !t.releasing,
        TurnEnd::WithSession => true,
        TurnEnd::Removed | TurnEnd::Unseen => false,
    };
    *t.slot.vanished.lock().unwrap_or_else(|p| p.into_inner()) = vanished.then(Instant::now);
}

/// Gives `turn` up after this client removed its entry (once; later calls do nothing).
pub(crate) fn release_turn(turn: &SharedTurn) {
    end_turn(turn, TurnEnd::Removed);
}

/// Gives `turn` up because its entry was seen gone — deleted by someone else — unless
/// this client's removal of it had begun ([`releasing`]): then the removal gives it up.
/// The caller has told the backend first ([`ContenderQueue::entry_lost`]). A grant's
/// vanishing is recorded for the next local contender ([`vanished_at`]).
///
/// [`ContenderQueue::entry_lost`]: crate::raw::ContenderQueue::entry_lost
pub(crate) fn lose_turn(turn: &SharedTurn) {
    end_turn(turn, TurnEnd::Gone);
}

/// Whether `turn`'s removal has begun ([`releasing`]).
pub(crate) fn is_releasing(turn: &SharedTurn) -> bool {
    turn.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|t| t.releasing)
}

/// Gives `turn` up because its session ended (its entry went with it): a grant's
/// vanishing, recorded for the next local contender.
pub(crate) fn session_ended_turn(turn: &SharedTurn) {
    end_turn(turn, TurnEnd::WithSession);
}

/// Marks `turn`'s removal as begun: a deletion of its entry seen from now on is this
/// client's own, not a vanishing.
pub(crate) fn releasing(turn: &SharedTurn) {
    if let Some(t) = turn.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        t.releasing = true;
        t.slot.removing.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// When the turn before `turn` at its name ended because its entry vanished, if it did
/// (lock-delay: a local contender waiting then holds off as a remote one does).
pub(crate) fn vanished_at(turn: &SharedTurn) -> Option<Instant> {
    let guard = turn.lock().unwrap_or_else(|p| p.into_inner());
    let t = guard.as_ref()?;
    *t.slot.vanished.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that `turn` was granted on session `generation`: a local contender waiting
/// for the name takes the turn over once that session is over.
pub(crate) fn granted(turn: &SharedTurn, generation: u64) {
    let mut guard = turn.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(t) = guard.as_mut() {
        t.granted = true;
        t.slot.holder.send_replace(Some(Holder {
            turn: Arc::downgrade(turn),
            generation,
        }));
    }
}

/// Takes the turn from a holder whose session is over: its entry went with it. `seen`:
/// by a contender that waited for the turn (and saw the session end), whose hold-off
/// then counts from now; a newcomer's take-over leaves the record as it is.
fn take_over(holder: &Holder, seen: bool) {
    if let Some(turn) = holder.turn.upgrade() {
        end_turn(
            &turn,
            if seen {
                TurnEnd::WithSession
            } else {
                TurnEnd::Unseen
            },
        );
    }
}

impl LocalQueue {
    fn slot(&self, name: &str) -> SlotRef {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let (slot, users) = slots.entry(name.to_owned()).or_default();
        *users += 1;
        SlotRef {
            slot: slot.clone(),
            key: name.to_owned(),
            slots: Arc::downgrade(&self.slots),
        }
    }

    /// How many names have a slot now (users waiting or holding).
    #[cfg(test)]
    fn names(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Waits (FIFO) for this client's turn at `name`; `session` is the client's, for
    /// taking the turn over from a granted holder whose session is over.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future gives up its place in the queue.
    pub(crate) async fn turn(&self, name: &str, mut session: watch::Receiver<SessionStatus>) -> SharedTurn {
        let slot = self.slot(name);
        let mut holders = slot.holder.subscribe();
        let lock = slot.turn.clone().lock_owned();
        tokio::pin!(lock);
        loop {
            let holder = holders.borrow_and_update().clone();
            tokio::select! {
                guard = &mut lock => {
                    slot.removing.store(false, std::sync::atomic::Ordering::SeqCst);
                    return Arc::new(Mutex::new(Some(LocalTurn {
                        slot,
                        _guard: guard,
                        granted: false,
                        releasing: false,
                    })));
                }
                _ = async {
                    match &holder {
                        Some(h) => ended(&mut session, h.generation).await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let Some(h) = &holder {
                        take_over(h, true);
                    }
                }
                _ = holders.changed() => {}
            }
        }
    }

    /// Whether `name`'s turn is held only by this client's entry being removed (a
    /// released or dropped grant, a try cut short) and no other local contender waits
    /// for it: free once the removal ends.
    pub(crate) fn being_removed(&self, name: &str) -> bool {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(name).is_some_and(|(slot, users)| {
            // One user: the removing turn itself (a waiter would be a second).
            *users == 1 && slot.removing.load(std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// This client's turn at `name` if nobody else local holds it (a granted holder
    /// whose session is over does not).
    pub(crate) fn try_turn(
        &self,
        name: &str,
        session: &watch::Receiver<SessionStatus>,
    ) -> Option<SharedTurn> {
        let slot = self.slot(name);
        let holder = slot.holder.borrow().clone();
        if let Some(h) = holder.filter(|h| over(*session.borrow(), h.generation)) {
            take_over(&h, false);
        }
        let guard = slot.turn.clone().try_lock_owned().ok()?;
        slot.removing.store(false, std::sync::atomic::Ordering::SeqCst);
        Some(Arc::new(Mutex::new(Some(LocalTurn {
            slot,
            _guard: guard,
            granted: false,
            releasing: false,
        }))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionState;

    fn status(state: SessionState, generation: u64) -> SessionStatus {
        SessionStatus::new(state, generation)
    }

    /// A granted holder whose session ends hands its turn to the local contender
    /// waiting for the name, with nothing running for the holder.
    #[tokio::test]
    async fn a_waiter_takes_over_from_a_holder_whose_session_ended() {
        let (tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let queue = Arc::new(LocalQueue::default());
        let held = queue.turn("n", rx.clone()).await;
        granted(&held, 1);
        let waiter = tokio::spawn({
            let (queue, rx) = (queue.clone(), rx.clone());
            async move { queue.turn("n", rx).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the turn is still held");
        assert!(queue.try_turn("n", &rx).is_none());
        tx.send_replace(status(SessionState::Lost, 1));
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter takes the turn over")
            .expect("waiter");
        assert!(
            held.lock().expect("lock").is_none(),
            "the old holder's turn is given up"
        );
        drop(next);
        assert!(queue.try_turn("n", &rx).is_some());
    }

    /// A name's slot lives while someone waits for or holds its turn, and not after:
    /// nothing is left behind by a client that locked many names.
    #[tokio::test]
    async fn slots_go_with_their_last_user() {
        let (_tx, rx) = watch::channel(status(SessionState::Connected, 1));
        let queue = Arc::new(LocalQueue::default());
        let held: Vec<SharedTurn> = futures::future::join_all((0..100).map(|i| {
            let (queue, rx) = (queue.clone(), rx.clone());
            async move { queue.turn(&format!("n{i}"), rx).await }
        }))
        .await;
        assert_eq!(queue.names(), 100);
        let waiter = tokio::spawn({
            let (queue, rx) = (queue.clone(), rx.clone());
            async move { queue.turn("n0", rx).await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        for t in &held[1..] {
            release_turn(t);
        }
        assert_eq!(queue.names(), 1, "only n0 is held and waited for");
        release_turn(&held[0]);
        let next = waiter.await.expect("waiter");
        assert_eq!(queue.names(), 1);
        release_turn(&next);
        assert_eq!(queue.names(), 0);
        // A cancelled wait gives its use up too.
        let again = queue.turn("n1", rx.clone()).await;
        let cancelled =
            tokio::time::timeout(std::time::Duration::from_millis(10), queue.turn("n1", rx.clone())).await;
        assert!(cancelled.is_err());
        release_turn(&again);
        assert_eq!(queue.names(), 0);
    }

    /// A holder that is not granted yet (still joining) keeps its turn: only a grant's
    /// session ending frees it.
    #[tokio::test]
    async fn an_ungranted_holder_keeps_its_turn() {
        let (_tx, rx) = watch::channel(status(SessionState::Lost, 1));
        let queue = LocalQueue::default();
        let _held = queue.turn("n", rx.clone()).await;
        assert!(queue.try_turn("n", &rx).is_none());
    }
}
