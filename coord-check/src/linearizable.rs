//! Linearizability of a history against a sequential model, by the Wing–Gong–Lowe search.
//!
//! The search follows G. Lowe, "Testing for linearizability" (2017), itself after Wing
//! and Gong (1993): the history becomes a doubly linked list of call and return entries
//! in time order. The search walks the list from its head; at a call entry it tries to
//! linearize that operation next (the model accepts its output from the current state),
//! and if so *lifts* the call and its return out of the list and restarts from the head.
//! Reaching a return entry means that operation should already be linearized: the search
//! backtracks, *unlifting* the last linearized operation and trying the entry after it.
//! A cache of (set of linearized operations, model state) pairs already explored prunes
//! the search (Lowe's memoisation), which makes most real histories cheap.
//!
//! Operations whose outcome is [`Outcome::Unknown`] get a return
//! entry at +infinity, so they may be linearized anywhere after their invocation, and the
//! search succeeds as soon as every `Ok` operation is linearized, so they may also be
//! left out. `Failed` operations are dropped before the search.

use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Debug};
use std::hash::Hash;

use crate::history::{Op, Outcome};

/// A sequential specification: the states of one object and its legal transitions.
pub trait Model: Clone + Eq + Hash + Debug {
    /// What an operation asks.
    type Input;
    /// What an operation returns.
    type Output;

    /// The state after an operation with `input` that returned `output`, or `None` when
    /// that output is impossible in this state.
    ///
    /// `output` is `None` for an operation whose outcome is unknown: return the state
    /// after it *took effect*, or `None` if it cannot take effect here. The search
    /// explores leaving it out as well, so an operation that may either take effect or
    /// not (a compare-and-set whose reply was lost) needs only its effective transition.
    fn step(&self, input: &Self::Input, output: Option<&Self::Output>) -> Option<Self>;
}

/// The default step budget of a [`Checker`].
pub const DEFAULT_MAX_STEPS: u64 = 10_000_000;

/// Runs the search with a step budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checker {
    max_steps: u64,
}

impl Default for Checker {
    fn default() -> Self {
        Checker {
            max_steps: DEFAULT_MAX_STEPS,
        }
    }
}

/// The judgement on one history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<M> {
    /// A linearization exists.
    Linearizable {
        /// Indices (into the history) of the linearized operations, in linearization
        /// order; `Unknown` operations left out are absent.
        order: Vec<usize>,
    },
    /// No linearization exists.
    NotLinearizable(Violation<M>),
    /// The step budget ran out before an answer.
    Inconclusive {
        /// Steps taken.
        steps: u64,
    },
    /// The history itself is invalid.
    Malformed {
        /// Index of the offending operation.
        op: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// Why a history is not linearizable: the deepest point the search reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation<M> {
    /// The longest linearizable prefix found (indices into the history, in order).
    pub linearized: Vec<usize>,
    /// The model state after that prefix.
    pub state: M,
    /// The operation whose completion the search could not get past: it had to be
    /// linearized next or earlier, and no order allowed it (`None` only if the search
    /// ran past the end of the history, which a well-formed history never does).
    pub blocked: Option<usize>,
    /// The operations that could have come next at that point (invoked before `blocked`
    /// completed); none of them leads to a linearization.
    pub candidates: Vec<usize>,
}

impl<M: Model> Violation<M> {
    /// A multi-line account of the violation, with the operations of `history` (the
    /// history that was checked, so that the indices match).
    pub fn describe<I: Debug, O: Debug>(&self, history: &[Op<I, O>]) -> String {
        let show = |i: usize| match history.get(i) {
            Some(op) => format!(
                "#{i} p{} [{}..{}] {:?} -> {:?}",
                op.process,
                op.invoke,
                op.complete.map_or_else(|| "?".to_string(), |c| c.to_string()),
                op.input,
                op.outcome
            ),
            None => format!("#{i} (not in this history)"),
        };
        let mut out = format!("longest linearizable prefix ({} ops):\n", self.linearized.len());
        for &i in &self.linearized {
            out.push_str(&format!("    {}\n", show(i)));
        }
        out.push_str(&format!("  state after it: {:?}\n", self.state));
        if let Some(b) = self.blocked {
            out.push_str(&format!("  cannot place before it completes: {}\n", show(b)));
        }
        out.push_str("  no candidate could go next:\n");
        for &i in &self.candidates {
            out.push_str(&format!("    {}\n", show(i)));
        }
        out
    }
}

impl<M: Debug> fmt::Display for Verdict<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable { order } => write!(f, "linearizable ({} ops linearized)", order.len()),
            Verdict::NotLinearizable(v) => write!(
                f,
                "not linearizable: after {:?} (state {:?}), op {:?} cannot be placed; candidates {:?}",
                v.linearized, v.state, v.blocked, v.candidates
            ),
            Verdict::Inconclusive { steps } => write!(f, "inconclusive: step budget spent ({steps} steps)"),
            Verdict::Malformed { op, reason } => write!(f, "malformed history: op #{op}: {reason}"),
        }
    }
}

impl<M> Verdict<M> {
    /// Whether a linearization was found.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable { .. })
    }

    /// Whether the history was shown not to be linearizable (not merely inconclusive).
    pub fn is_violation(&self) -> bool {
        matches!(self, Verdict::NotLinearizable(_))
    }
}

/// The verdicts of a history split into independent objects (keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerKey<K, M> {
    /// One verdict per key; operation indices are those of the whole history.
    pub verdicts: BTreeMap<K, Verdict<M>>,
}

impl<K, M> PerKey<K, M> {
    /// Whether every key is linearizable (so the whole history is, by locality).
    pub fn is_linearizable(&self) -> bool {
        self.verdicts.values().all(Verdict::is_linearizable)
    }

    /// The keys whose history is not linearizable, with why.
    pub fn violations(&self) -> impl Iterator<Item = (&K, &Violation<M>)> {
        self.verdicts.iter().filter_map(|(k, v)| match v {
            Verdict::NotLinearizable(violation) => Some((k, violation)),
            _ => None,
        })
    }

    /// The keys that were neither proven linearizable nor shown not to be.
    pub fn undecided(&self) -> impl Iterator<Item = (&K, &Verdict<M>)> {
        self.verdicts
            .iter()
            .filter(|(_, v)| !v.is_linearizable() && !v.is_violation())
    }
}

/// [`Checker::check`] with the default step budget.
pub fn check<M: Model>(model: &M, history: &[Op<M::Input, M::Output>]) -> Verdict<M> {
    Checker::default().check(model, history)
}

/// [`Checker::check_per_key`] with the default step budget.
pub fn check_per_key<M, I, K>(
    model: &M,
    history: &[Op<I, M::Output>],
    split: impl Fn(&I) -> (K, M::Input),
) -> PerKey<K, M>
where
    M: Model,
    K: Ord,
{
    Checker::default().check_per_key(model, history, split)
}

impl Checker {
    /// A checker with the default step budget ([`DEFAULT_MAX_STEPS`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives up with [`Verdict::Inconclusive`] after `max_steps` steps of the search (per
    /// key, for [`Checker::check_per_key`]). A step tries one call entry or backtracks once.
    pub fn max_steps(self, max_steps: u64) -> Self {
        Checker { max_steps }
    }

    /// Whether `history` is linearizable with respect to `model` (its initial state).
    pub fn check<M: Model>(&self, model: &M, history: &[Op<M::Input, M::Output>]) -> Verdict<M> {
        match calls(history.iter().enumerate().map(|(i, op)| (i, op, &op.input))) {
            Ok(calls) => search(model, &calls, self.max_steps),
            Err((op, reason)) => Verdict::Malformed { op, reason },
        }
    }

    /// Checks each object of the history on its own: `split` maps an operation's input
    /// to its key and the input of the single-object `model`; each key starts from
    /// `model`. Linearizability is local (compositional), so the history is linearizable
    /// if and only if every key's is, and the split keeps each search small.
    pub fn check_per_key<M, I, K>(
        &self,
        model: &M,
        history: &[Op<I, M::Output>],
        split: impl Fn(&I) -> (K, M::Input),
    ) -> PerKey<K, M>
    where
        M: Model,
        K: Ord,
    {
        let mut groups: BTreeMap<K, Vec<(usize, M::Input)>> = BTreeMap::new();
        for (i, op) in history.iter().enumerate() {
            let (key, input) = split(&op.input);
            groups.entry(key).or_default().push((i, input));
        }
        let verdicts = groups
            .into_iter()
            .map(|(key, ops)| {
                let items = ops.iter().map(|(i, input)| (*i, &history[*i], input));
                let verdict = match calls(items) {
                    Ok(calls) => search(model, &calls, self.max_steps),
                    Err((op, reason)) => Verdict::Malformed { op, reason },
                };
                (key, verdict)
            })
            .collect();
        PerKey { verdicts }
    }
}

/// One operation as the search sees it.
struct Call<'a, I, O> {
    input: &'a I,
    /// `None` for an unknown outcome.
    output: Option<&'a O>,
    invoke: u64,
    /// The return time; `None` is +infinity.
    ret: Option<u64>,
    /// Whether it must be linearized (it returned `Ok`).
    required: bool,
    /// Its index in the checked history.
    index: usize,
}

type Malformed = (usize, String);

fn calls<'a, I: 'a, J: 'a, O: 'a>(
    items: impl Iterator<Item = (usize, &'a Op<J, O>, &'a I)>,
) -> Result<Vec<Call<'a, I, O>>, Malformed> {
    let mut out = Vec::new();
    for (index, op, input) in items {
        let (output, ret) = match &op.outcome {
            Outcome::Failed => continue,
            Outcome::Ok(output) => (Some(output), op.complete),
            Outcome::Unknown => (None, None),
        };
        if let Some(ret) = ret
            && ret < op.invoke
        {
            return Err((
                index,
                format!("completes at {ret}, before its invocation at {}", op.invoke),
            ));
        }
        out.push(Call {
            input,
            output,
            invoke: op.invoke,
            ret,
            required: output.is_some(),
            index,
        });
    }
    Ok(out)
}

const NIL: usize = usize::MAX;

/// The linked list of entries: entry `2i` is the call of operation `i`, `2i + 1` its
/// return; the head sentinel is entry `2n`. Lifted entries keep their own links, so
/// unlifting in reverse order restores the list exactly.
struct Entries {
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
}

impl Entries {
    fn new<I, O>(calls: &[Call<'_, I, O>]) -> Self {
        let n = calls.len();
        let mut order: Vec<usize> = (0..2 * n).collect();
        // Time order; at equal times calls come before returns (equal times are
        // concurrent); returns at +infinity last.
        order.sort_by_key(|&e| {
            let c = &calls[e / 2];
            let is_return = e % 2 == 1;
            let at = if is_return { c.ret } else { Some(c.invoke) };
            (at.is_none(), at.unwrap_or(0), is_return, e)
        });
        let head = 2 * n;
        let mut next = vec![NIL; 2 * n + 1];
        let mut prev = vec![NIL; 2 * n + 1];
        let mut last = head;
        for e in order {
            next[last] = e;
            prev[e] = last;
            last = e;
        }
        Entries { next, prev, head }
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = x;
        if n != NIL {
            self.prev[n] = x;
        }
    }

    /// Removes a call entry and its return.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(call + 1);
    }

    /// Undoes the last [`Entries::lift`].
    fn unlift(&mut self, call: usize) {
        self.relink(call + 1);
        self.relink(call);
    }

    fn first(&self) -> usize {
        self.next[self.head]
    }
}

fn search<M: Model>(model: &M, calls: &[Call<'_, M::Input, M::Output>], max_steps: u64) -> Verdict<M> {
    let mut list = Entries::new(calls);
    let mut linearized = vec![0u64; calls.len().div_ceil(64)];
    let mut cache: HashSet<(Vec<u64>, M)> = HashSet::new();
    // (call entry, state before it)
    let mut stack: Vec<(usize, M)> = Vec::new();
    let mut state = model.clone();
    let mut remaining = calls.iter().filter(|c| c.required).count();
    let mut best: Option<Violation<M>> = None;
    let mut entry = list.first();
    let mut steps = 0u64;
    loop {
        if remaining == 0 {
            let order = stack.iter().map(|(e, _)| calls[e / 2].index).collect();
            return Verdict::Linearizable { order };
        }
        if steps >= max_steps {
            return Verdict::Inconclusive { steps };
        }
        steps += 1;
        if entry != NIL && entry % 2 == 0 {
            let i = entry / 2;
            let call = &calls[i];
            if let Some(next_state) = state.step(call.input, call.output) {
                linearized[i / 64] |= 1 << (i % 64);
                if cache.insert((linearized.clone(), next_state.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, next_state)));
                    list.lift(entry);
                    if call.required {
                        remaining -= 1;
                    }
                    entry = list.first();
                    continue;
                }
                linearized[i / 64] &= !(1 << (i % 64));
            }
            entry = list.next[entry];
        } else {
            // A return entry (or the end): that operation cannot be linearized any later.
            if best.as_ref().is_none_or(|b| stack.len() > b.linearized.len()) {
                best = Some(deepest(&list, calls, &stack, &state, entry));
            }
            let Some((call_entry, before)) = stack.pop() else {
                return match best {
                    Some(violation) => Verdict::NotLinearizable(violation),
                    None => Verdict::Inconclusive { steps },
                };
            };
            let i = call_entry / 2;
            linearized[i / 64] &= !(1 << (i % 64));
            state = before;
            list.unlift(call_entry);
            if calls[i].required {
                remaining += 1;
            }
            entry = list.next[call_entry];
        }
    }
}

/// The explanation at a dead end: the prefix, the blocking return and the candidates.
fn deepest<M: Model>(
    list: &Entries,
    calls: &[Call<'_, M::Input, M::Output>],
    stack: &[(usize, M)],
    state: &M,
    entry: usize,
) -> Violation<M> {
    let mut candidates = Vec::new();
    let mut e = list.first();
    while e != entry && e != NIL {
        if e % 2 == 0 {
            candidates.push(calls[e / 2].index);
        }
        e = list.next[e];
    }
    Violation {
        linearized: stack.iter().map(|(e, _)| calls[e / 2].index).collect(),
        state: state.clone(),
        blocked: (entry != NIL).then(|| calls[entry / 2].index),
        candidates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Counter, CounterOp, CounterRet};

    /// A register of small values, for tests.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    struct Reg(u8);

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum RegOp {
        Read,
        Write(u8),
    }

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum RegRet {
        Read(u8),
        Written,
    }

    impl Model for Reg {
        type Input = RegOp;
        type Output = RegRet;
        fn step(&self, input: &RegOp, output: Option<&RegRet>) -> Option<Self> {
            match (input, output) {
                (RegOp::Read, None) => Some(self.clone()),
                (RegOp::Read, Some(RegRet::Read(v))) => (*v == self.0).then(|| self.clone()),
                (RegOp::Write(v), None | Some(RegRet::Written)) => Some(Reg(*v)),
                _ => None,
            }
        }
    }

    fn ok(p: u64, i: u64, c: u64, input: RegOp, out: RegRet) -> Op<RegOp, RegRet> {
        Op::ok(p, i, c, input, out)
    }

    #[test]
    fn concurrent_write_and_reads_linearize() {
        let h = vec![
            ok(1, 0, 10, RegOp::Write(1), RegRet::Written),
            ok(2, 1, 2, RegOp::Read, RegRet::Read(1)),
            ok(3, 3, 4, RegOp::Read, RegRet::Read(1)),
            ok(3, 5, 6, RegOp::Read, RegRet::Read(1)),
        ];
        assert_eq!(
            check(&Reg(0), &h),
            Verdict::Linearizable {
                order: vec![0, 1, 2, 3]
            }
        );
    }

    #[test]
    fn rejects_new_old_inversion_and_explains_it() {
        // Read 1 completes, then a later read sees the old 0 while the write is still open.
        let h = vec![
            ok(1, 0, 10, RegOp::Write(1), RegRet::Written),
            ok(2, 1, 2, RegOp::Read, RegRet::Read(1)),
            ok(3, 3, 4, RegOp::Read, RegRet::Read(0)),
        ];
        let Verdict::NotLinearizable(v) = check(&Reg(0), &h) else {
            panic!("accepted a new-old inversion");
        };
        // Write and first read placed; the stale read fits nowhere after them.
        assert_eq!(v.linearized, vec![0, 1]);
        assert_eq!(v.blocked, Some(2));
        assert_eq!(v.candidates, vec![2]);
        let text = v.describe(&h);
        assert!(text.contains("cannot place"), "{text}");
    }

    #[test]
    fn failed_ops_are_dropped_but_their_effects_are_not_explained() {
        let h = vec![
            Op::failed(1, 0, 1, RegOp::Write(5)),
            ok(2, 2, 3, RegOp::Read, RegRet::Read(5)),
        ];
        assert!(check(&Reg(0), &h).is_violation());
        let h = vec![
            Op::failed(1, 0, 1, RegOp::Write(5)),
            ok(2, 2, 3, RegOp::Read, RegRet::Read(0)),
        ];
        assert!(check(&Reg(0), &h).is_linearizable());
    }

    #[test]
    fn unknown_ops_may_land_late_or_never() {
        // Seen long after its invocation, after other completed operations.
        let seen = vec![
            Op::unknown(1, 0, RegOp::Write(7)),
            ok(2, 5, 6, RegOp::Read, RegRet::Read(0)),
            ok(2, 7, 8, RegOp::Read, RegRet::Read(7)),
        ];
        assert_eq!(
            check(&Reg(0), &seen),
            Verdict::Linearizable { order: vec![1, 0, 2] }
        );
        // Never seen.
        let never = vec![
            Op::unknown(1, 0, RegOp::Write(7)),
            ok(2, 5, 6, RegOp::Read, RegRet::Read(0)),
        ];
        assert_eq!(check(&Reg(0), &never), Verdict::Linearizable { order: vec![1] });
        // But not before its invocation.
        let early = vec![
            ok(2, 0, 1, RegOp::Read, RegRet::Read(7)),
            Op::unknown(1, 2, RegOp::Write(7)),
        ];
        assert!(check(&Reg(0), &early).is_violation());
    }

    #[test]
    fn malformed_history_is_reported() {
        let h = vec![ok(1, 5, 4, RegOp::Read, RegRet::Read(0))];
        assert!(matches!(check(&Reg(0), &h), Verdict::Malformed { op: 0, .. }));
    }

    #[test]
    fn step_budget_gives_inconclusive() {
        // 16 concurrent adds of distinct powers of two and a final read of a sum no
        // subset explains: the search must try many subsets before giving up.
        let mut h: Vec<Op<CounterOp, CounterRet>> = (0..16)
            .map(|i| Op::unknown(i, i, CounterOp::Add(1 << i)))
            .collect();
        h.push(Op::ok(99, 100, 101, CounterOp::Get, CounterRet::Value(-1)));
        assert_eq!(
            Checker::new().max_steps(1_000).check(&Counter::default(), &h),
            Verdict::Inconclusive { steps: 1_000 }
        );
        // With a small enough instance the full search answers.
        let h: Vec<_> = h.into_iter().skip(10).collect();
        assert!(check(&Counter::default(), &h).is_violation());
    }

    #[test]
    fn memoisation_keeps_permutations_of_concurrent_writes_cheap() {
        // 12 concurrent writes, then a read of a value none wrote: 12! orders, but only
        // (subset, last writer) states, which the cache explores once each.
        let mut h: Vec<_> = (0..12)
            .map(|i| ok(i, i, 100, RegOp::Write(i as u8), RegRet::Written))
            .collect();
        h.push(ok(99, 101, 102, RegOp::Read, RegRet::Read(99)));
        let checker = Checker::new().max_steps(2_000_000);
        assert!(checker.check(&Reg(0), &h).is_violation());
        h.pop();
        h.push(ok(99, 101, 102, RegOp::Read, RegRet::Read(5)));
        assert!(checker.check(&Reg(0), &h).is_linearizable());
    }

    #[test]
    fn per_key_checks_objects_independently() {
        let h = [
            ok(1, 0, 1, RegOp::Write(1), RegRet::Written),
            ok(1, 2, 3, RegOp::Read, RegRet::Read(1)),
            ok(2, 4, 5, RegOp::Read, RegRet::Read(0)),
            ok(2, 6, 7, RegOp::Read, RegRet::Read(2)),
        ];
        let keys = ["a", "a", "b", "b"];
        let keyed: Vec<Op<(&str, RegOp), RegRet>> = h
            .iter()
            .zip(keys)
            .map(|(op, k)| Op {
                process: op.process,
                invoke: op.invoke,
                complete: op.complete,
                input: (k, op.input.clone()),
                outcome: op.outcome.clone(),
            })
            .collect();
        let result = check_per_key(&Reg(0), &keyed, |(k, input)| (*k, input.clone()));
        assert!(!result.is_linearizable());
        assert!(result.verdicts["a"].is_linearizable());
        let violations: Vec<_> = result.violations().collect();
        assert_eq!(violations.len(), 1);
        assert_eq!(*violations[0].0, "b");
        assert_eq!(
            violations[0].1.blocked,
            Some(3),
            "indices are the whole history's"
        );
        assert_eq!(result.undecided().count(), 0);
    }
}
