//! Deliberate bugs, for the negative controls of coord's history checks: each switch
//! breaks one guarantee the way a plausible regression would, so that a test can show
//! its checker catches the break. Compiled in only with the `mutants` feature (for
//! coord's own tests); without it, [`active`] is always `false` and costs nothing.
//! Switches are process-wide: a test that sets one runs alone in its process.

/// One deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mutant {
    /// The in-memory store commits a fenced transaction without checking its fence: a
    /// stale holder's writes land.
    FenceIgnored,
    /// A waiter behind the first entry is granted once that entry goes, without
    /// confirming its own entry still exists.
    OwnEntryUnchecked,
    /// The in-memory queue removes a contender's entry by key alone, not by the
    /// incarnation it created: a late removal deletes a newer contender of the client
    /// that made the same key.
    LeaveByKey,
    /// A queue's take removes its item without the taker lock's fence and without
    /// checking the item's version.
    TakeUnchecked,
    /// A queue's take removes its item without writing a receipt that holds it (and puts
    /// none back): dropped after the removal landed, or its client closed, the item is
    /// lost.
    TakeWithoutReceipt,
    /// A two-phase decision is written whether or not one exists (a plain put).
    DecisionOverwritten,
    /// The in-memory watch skips history it can no longer read (compacted) without a
    /// `Resync`: a silent gap.
    WatchGapSilent,
    /// A double barrier lets a member in before it is full.
    BarrierEnterEarly,
    /// The in-memory store's `mark` (a revocation request) writes the entry's key whether
    /// or not the incarnation it names exists, as a plain put would: a request racing the
    /// holder's release re-creates the entry with no session behind it, a ghost holder
    /// the lock never gets past.
    MarkUnchecked,
    /// ZooKeeper's compare-and-set writes at the data version without checking the
    /// incarnation marker: a node deleted and re-created up to the same data version
    /// passes (ABA).
    MarkerUnchecked,
    /// etcd's compare-and-set (a `commit` with version checks) reads the keys, checks
    /// their versions itself, then writes without a compare: a write landing between
    /// the read and the write is overwritten.
    CasReadThenWrite,
    /// ZooKeeper's re-read of more nodes than one request holds is taken as one state
    /// without checking that nothing changed between its requests: a commit landing
    /// between two of them shows up mixed with the one before.
    RereadSplitSilently,
    /// etcd's watch, resumed after its stream broke, starts from the current revision
    /// instead of the one after the last it delivered, with no `Resync`: what was
    /// written while it was broken is silently missed.
    WatchResumeFromNow,
    /// ZooKeeper's directory watch is not added again after a resumed session (a
    /// reconnect): the client library re-registers only one-shot watches, so the watch
    /// goes silent.
    WatchNotRearmed,
    /// A contender the join found first reads the queue once more before it takes the
    /// grant: one request more per uncontended lock (the benchmarks' smoke form must
    /// fail on it).
    ExtraRequestPerLock,
    /// A contender with one permit waits for every entry ahead of it, not the nearest:
    /// each release wakes the whole queue (a thundering herd the benchmarks' smoke form
    /// must fail on).
    HerdWake,
    /// The backend is not told when a granted entry is seen deleted by someone else
    /// ([`ContenderQueue::entry_lost`](crate::raw::ContenderQueue::entry_lost) skipped):
    /// on etcd the client's next contender for the name makes the same key again, and
    /// the lost guard's release — a plain delete — removes the new grant's entry.
    LossUntold,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 17] = [
        Mutant::FenceIgnored,
        Mutant::OwnEntryUnchecked,
        Mutant::LeaveByKey,
        Mutant::TakeUnchecked,
        Mutant::TakeWithoutReceipt,
        Mutant::DecisionOverwritten,
        Mutant::WatchGapSilent,
        Mutant::BarrierEnterEarly,
        Mutant::MarkUnchecked,
        Mutant::MarkerUnchecked,
        Mutant::CasReadThenWrite,
        Mutant::RereadSplitSilently,
        Mutant::WatchResumeFromNow,
        Mutant::WatchNotRearmed,
        Mutant::ExtraRequestPerLock,
        Mutant::HerdWake,
        Mutant::LossUntold,
    ];

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether `mutant` is switched on (never without the `mutants` feature).
#[inline]
pub fn active(mutant: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) & mutant.bit() != 0
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = mutant.bit();
        false
    }
}

/// Switches `mutant` on or off, process-wide.
#[cfg(feature = "mutants")]
pub fn set(mutant: Mutant, on: bool) {
    use std::sync::atomic::Ordering;
    if on {
        ACTIVE.fetch_or(mutant.bit(), Ordering::SeqCst);
    } else {
        ACTIVE.fetch_and(!mutant.bit(), Ordering::SeqCst);
    }
}

/// Mutants switched on for as long as this value lives: [`switch_on`].
#[cfg(feature = "mutants")]
#[must_use = "the mutants are switched off again when this is dropped"]
pub struct Switched(Vec<Mutant>);

/// Switches `mutants` on, process-wide, until the returned value is dropped (also on a
/// panic or an early return).
#[cfg(feature = "mutants")]
pub fn switch_on(mutants: &[Mutant]) -> Switched {
    for m in mutants {
        set(*m, true);
    }
    Switched(mutants.to_vec())
}

#[cfg(feature = "mutants")]
impl Drop for Switched {
    fn drop(&mut self) {
        for m in &self.0 {
            set(*m, false);
        }
    }
}
