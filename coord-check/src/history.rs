//! Recorded operations: what a process asked for, when, and how it ended.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// How a recorded operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome<O> {
    /// It returned this output: it took effect once, somewhere between its invocation and
    /// its completion.
    Ok(O),
    /// It definitely had no effect (an error that guarantees nothing was written).
    Failed,
    /// It may or may not have taken effect, at any time after its invocation: a reply that
    /// was lost, a timeout, a cancelled or dropped future, a crashed client.
    Unknown,
}

impl<O> Outcome<O> {
    /// The output of an `Ok` outcome.
    pub fn output(&self) -> Option<&O> {
        match self {
            Outcome::Ok(output) => Some(output),
            Outcome::Failed | Outcome::Unknown => None,
        }
    }
}

/// One recorded operation of a history.
///
/// `invoke` and `complete` are timestamps of one monotonic clock shared by every process
/// of the history (nanoseconds from one `Instant`, or a logical clock). Two operations are
/// ordered in real time only when one completed strictly before the other was invoked
/// ([`Op::precedes`]); equal timestamps count as concurrent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Op<I, O> {
    /// The client (thread, task, session) that issued the operation.
    pub process: u64,
    /// When the operation was invoked.
    pub invoke: u64,
    /// When it returned; `None` (read as +infinity) for an [`Outcome::Unknown`] operation.
    /// The checkers ignore it for `Unknown` operations, whose effect may land later.
    pub complete: Option<u64>,
    /// What was asked.
    pub input: I,
    /// How it ended.
    pub outcome: Outcome<O>,
}

impl<I, O> Op<I, O> {
    /// An operation that returned `output`.
    pub fn ok(process: u64, invoke: u64, complete: u64, input: I, output: O) -> Self {
        Op {
            process,
            invoke,
            complete: Some(complete),
            input,
            outcome: Outcome::Ok(output),
        }
    }

    /// An operation that definitely had no effect.
    pub fn failed(process: u64, invoke: u64, complete: u64, input: I) -> Self {
        Op {
            process,
            invoke,
            complete: Some(complete),
            input,
            outcome: Outcome::Failed,
        }
    }

    /// An operation whose effect is unknown (it never completed as far as the history
    /// knows).
    pub fn unknown(process: u64, invoke: u64, input: I) -> Self {
        Op {
            process,
            invoke,
            complete: None,
            input,
            outcome: Outcome::Unknown,
        }
    }

    /// The output, when the operation returned `Ok`.
    pub fn output(&self) -> Option<&O> {
        self.outcome.output()
    }

    /// Whether the operation returned `Ok`.
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// Whether the operation returned `Ok` or `Failed` (its effect, if any, is over),
    /// and its completion time: `None` for an `Unknown` operation.
    pub fn finished_at(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Ok(_) | Outcome::Failed => self.complete,
            Outcome::Unknown => None,
        }
    }

    /// Real-time order: `self` finished (`Ok` or `Failed`) strictly before `other` was
    /// invoked. An `Unknown` operation precedes nothing.
    pub fn precedes<J, P>(&self, other: &Op<J, P>) -> bool {
        self.finished_at().is_some_and(|done| done < other.invoke)
    }
}

/// A thread-safe recorder of a history, cheap to clone (all clones share one history).
///
/// Timestamps are nanoseconds since the recorder was created, made strictly increasing
/// across all calls, so the recorded real-time order is exactly the order of the calls.
///
/// ```
/// use coord_check::{Outcome, Recorder};
/// let rec: Recorder<&str, u32> = Recorder::new();
/// let t = rec.invoke(1, "get");
/// rec.complete(t, Outcome::Ok(7));
/// let dropped = rec.invoke(2, "get"); // its future is dropped: stays Unknown
/// drop(dropped);
/// let ops = rec.history();
/// assert_eq!(ops[0].outcome, Outcome::Ok(7));
/// assert_eq!(ops[1].outcome, Outcome::Unknown);
/// assert!(ops[0].precedes(&ops[1]));
/// ```
pub struct Recorder<I, O> {
    start: Instant,
    inner: Arc<Mutex<Inner<I, O>>>,
}

struct Inner<I, O> {
    ops: Vec<Op<I, O>>,
    last: u64,
}

/// An invoked operation waiting for [`Recorder::complete`]; dropping it leaves the
/// operation [`Outcome::Unknown`].
#[derive(Debug)]
#[must_use = "complete the operation with Recorder::complete, or it stays Unknown"]
pub struct Pending {
    index: usize,
    /// Identifies the recorder that issued it.
    owner: usize,
}

impl Pending {
    /// The operation's index in [`Recorder::history`].
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<I, O> Clone for Recorder<I, O> {
    fn clone(&self) -> Self {
        Recorder {
            start: self.start,
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<I, O> Default for Recorder<I, O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I, O> std::fmt::Debug for Recorder<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("ops", &self.len()).finish()
    }
}

impl<I, O> Recorder<I, O> {
    /// An empty recorder whose clock starts now.
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            inner: Arc::new(Mutex::new(Inner {
                ops: Vec::new(),
                last: 0,
            })),
        }
    }

    /// An identity shared by all clones of this recorder.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.inner).cast::<()>() as usize
    }

    fn lock(&self) -> MutexGuard<'_, Inner<I, O>> {
        // A panic while recording leaves the history intact: keep using it.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tick(&self, inner: &mut Inner<I, O>) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        let now = elapsed.max(inner.last.saturating_add(1));
        inner.last = now;
        now
    }

    /// A timestamp of the recorder's clock, for records kept outside the history (e.g. a
    /// two-phase vote's invocation time).
    pub fn now(&self) -> u64 {
        let mut inner = self.lock();
        self.tick(&mut inner)
    }

    /// Records the invocation of `input` by `process`.
    pub fn invoke(&self, process: u64, input: I) -> Pending {
        let mut inner = self.lock();
        let invoke = self.tick(&mut inner);
        inner.ops.push(Op::unknown(process, invoke, input));
        Pending {
            index: inner.ops.len() - 1,
            owner: self.id(),
        }
    }

    /// Records how the operation ended. An `Unknown` outcome leaves `complete` as `None`.
    /// A `pending` from another recorder is ignored.
    pub fn complete(&self, pending: Pending, outcome: Outcome<O>) {
        if pending.owner != self.id() {
            return;
        }
        let mut inner = self.lock();
        let now = self.tick(&mut inner);
        if let Some(op) = inner.ops.get_mut(pending.index) {
            op.complete = match outcome {
                Outcome::Unknown => None,
                Outcome::Ok(_) | Outcome::Failed => Some(now),
            };
            op.outcome = outcome;
        }
    }

    /// Adds an operation recorded elsewhere (its timestamps must come from [`Recorder::now`]).
    pub fn record(&self, op: Op<I, O>) {
        self.lock().ops.push(op);
    }

    /// How many operations were recorded.
    pub fn len(&self) -> usize {
        self.lock().ops.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the history so far, in invocation order.
    pub fn history(&self) -> Vec<Op<I, O>>
    where
        I: Clone,
        O: Clone,
    {
        self.lock().ops.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_increase_and_dropped_ops_stay_unknown() {
        let rec: Recorder<u8, u8> = Recorder::new();
        let a = rec.invoke(1, 10);
        let b = rec.invoke(2, 20);
        rec.complete(a, Outcome::Ok(1));
        drop(b);
        let c = rec.invoke(3, 30);
        rec.complete(c, Outcome::Unknown);
        let d = rec.invoke(4, 40);
        rec.complete(d, Outcome::Failed);
        let ops = rec.history();
        assert_eq!(ops.len(), 4);
        assert!(ops.windows(2).all(|w| w[0].invoke < w[1].invoke));
        assert!(ops[0].complete.is_some_and(|c| c > ops[1].invoke));
        assert_eq!(ops[1].outcome, Outcome::Unknown);
        assert_eq!(ops[1].complete, None);
        assert_eq!(ops[2].complete, None);
        assert_eq!(ops[3].outcome, Outcome::Failed);
        assert!(ops[0].precedes(&ops[2]));
        let other: Recorder<u8, u8> = Recorder::new();
        let foreign = other.invoke(9, 90);
        rec.complete(foreign, Outcome::Ok(0));
        assert_eq!(
            rec.history()[0].outcome,
            Outcome::Ok(1),
            "a foreign token is ignored"
        );
        assert!(!ops[1].precedes(&ops[3]), "an unknown op precedes nothing");
        assert!(!ops[0].precedes(&ops[1]), "overlapping ops are concurrent");
    }

    #[test]
    fn clones_share_one_history_across_threads() {
        let rec: Recorder<u64, u64> = Recorder::new();
        let handles: Vec<_> = (0..4)
            .map(|p| {
                let rec = rec.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let t = rec.invoke(p, i);
                        rec.complete(t, Outcome::Ok(i));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let ops = rec.history();
        assert_eq!(ops.len(), 200);
        let mut stamps: Vec<u64> = ops.iter().flat_map(|o| [o.invoke, o.complete.unwrap()]).collect();
        stamps.sort_unstable();
        stamps.dedup();
        assert_eq!(stamps.len(), 400, "every timestamp is distinct");
        assert!(rec.now() > stamps[399]);
    }
}
