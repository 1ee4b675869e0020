//! Barriers: a double barrier lets no one in before all arrive nor out before all leave;
//! a simple barrier lets no waiter through while it stays raised.
//!
//! Both checkers judge one round (one use of the barrier) in real time: an operation
//! "completed before" another was invoked when its completion timestamp is smaller.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::history::{Op, Outcome};
use crate::report::Report;

/// A double-barrier operation of a member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DoubleBarrierOp {
    /// The member enters; `Ok` once the barrier lets it in.
    Enter(String),
    /// The member leaves; `Ok` once the barrier lets it out.
    Leave(String),
}

/// One round of a double barrier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoubleBarrierHistory {
    /// How many members the barrier waits for.
    pub members: usize,
    /// Enters and leaves (a timeout is `Failed`).
    pub ops: Vec<Op<DoubleBarrierOp, ()>>,
    /// Members that crashed (their session ended): they do not hold others back from
    /// leaving.
    pub crashed: BTreeSet<String>,
}

/// What a double barrier's round held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoubleBarrierSummary {
    /// Distinct members that invoked `Enter`.
    pub arrived: usize,
    /// Members whose `Enter` returned `Ok`.
    pub entered: usize,
    /// Members whose `Leave` returned `Ok`.
    pub left: usize,
}

/// A breach of a double barrier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoubleBarrierViolation {
    /// An `Enter` returned `Ok` before `members` distinct members had invoked `Enter`.
    EnteredEarly {
        /// The operation.
        op: usize,
        /// How many distinct members had invoked `Enter` by its completion.
        arrived: usize,
    },
    /// A `Leave` returned `Ok` before these entered members had invoked `Leave` (and
    /// they had not crashed).
    LeftEarly {
        /// The operation.
        op: usize,
        /// The members still inside.
        inside: Vec<String>,
    },
}

impl fmt::Display for DoubleBarrierViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DoubleBarrierViolation::EnteredEarly { op, arrived } => {
                write!(f, "enter #{op} returned when only {arrived} members had arrived")
            }
            DoubleBarrierViolation::LeftEarly { op, inside } => {
                write!(f, "leave #{op} returned while {inside:?} had not begun to leave")
            }
        }
    }
}

/// Checks one round of a double barrier.
///
/// Violations: an `Ok` `Enter` that completed before `members` distinct members had
/// invoked `Enter` (with any outcome: a member that timed out may have been counted in
/// the meantime); an `Ok` `Leave` that completed before every member whose `Enter`
/// returned `Ok` had invoked `Leave` or was marked crashed.
pub fn check_double(history: &DoubleBarrierHistory) -> Report<DoubleBarrierSummary, DoubleBarrierViolation> {
    let mut first_enter: BTreeMap<&str, u64> = BTreeMap::new();
    let mut first_leave: BTreeMap<&str, u64> = BTreeMap::new();
    let mut entered: BTreeSet<&str> = BTreeSet::new();
    let mut left: BTreeSet<&str> = BTreeSet::new();
    for op in &history.ops {
        let (member, invoked, ok) = match &op.input {
            DoubleBarrierOp::Enter(m) => (m.as_str(), &mut first_enter, &mut entered),
            DoubleBarrierOp::Leave(m) => (m.as_str(), &mut first_leave, &mut left),
        };
        let at = invoked.entry(member).or_insert(op.invoke);
        *at = (*at).min(op.invoke);
        if op.is_ok() {
            ok.insert(member);
        }
    }

    let mut violations = Vec::new();
    for (i, op) in history.ops.iter().enumerate() {
        let Some(done) = op.finished_at().filter(|_| op.is_ok()) else {
            continue;
        };
        match &op.input {
            DoubleBarrierOp::Enter(_) => {
                let arrived = first_enter.values().filter(|&&at| at < done).count();
                if arrived < history.members {
                    violations.push(DoubleBarrierViolation::EnteredEarly { op: i, arrived });
                }
            }
            DoubleBarrierOp::Leave(_) => {
                let inside: Vec<String> = entered
                    .iter()
                    .filter(|m| !history.crashed.contains(**m))
                    .filter(|m| first_leave.get(**m).is_none_or(|&at| at >= done))
                    .map(|m| (*m).to_string())
                    .collect();
                if !inside.is_empty() {
                    violations.push(DoubleBarrierViolation::LeftEarly { op: i, inside });
                }
            }
        }
    }
    Report {
        summary: DoubleBarrierSummary {
            arrived: first_enter.len(),
            entered: entered.len(),
            left: left.len(),
        },
        violations,
    }
}

/// A simple-barrier operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierOp {
    /// Raises the barrier.
    Raise,
    /// Removes it.
    Remove,
    /// Waits until it is removed; `Ok` when it passed.
    Wait,
}

/// What a simple barrier's history held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierSummary {
    /// `Wait`s that passed.
    pub passed: usize,
    /// `Raise`s that returned `Ok`.
    pub raised: usize,
    /// `Remove`s that may have taken effect.
    pub removes: usize,
}

/// A waiter went through a barrier that was up the whole time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierViolation {
    /// The `Wait` that returned `Ok`.
    pub wait: usize,
    /// A `Raise` that completed before it began, with no `Remove` since.
    pub raise: usize,
}

impl fmt::Display for BarrierViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wait #{} passed though raise #{} completed before it and no remove could have run",
            self.wait, self.raise
        )
    }
}

/// Checks a simple barrier's history.
///
/// Violation: a `Wait` that returned `Ok` while the barrier was up the whole time: some
/// `Raise` returned `Ok` before the `Wait` was invoked, and no `Remove` that may have
/// taken effect (`Ok` or `Unknown`) was invoked before the `Wait` completed, other than
/// removes that completed before that `Raise` began.
pub fn check_barrier(ops: &[Op<BarrierOp, ()>]) -> Report<BarrierSummary, BarrierViolation> {
    let removes: Vec<&Op<BarrierOp, ()>> = ops
        .iter()
        .filter(|op| op.input == BarrierOp::Remove && op.outcome != Outcome::Failed)
        .collect();
    let mut summary = BarrierSummary {
        removes: removes.len(),
        ..BarrierSummary::default()
    };
    let mut violations = Vec::new();
    summary.raised = ops
        .iter()
        .filter(|op| op.input == BarrierOp::Raise && op.is_ok())
        .count();
    for (w, wait) in ops.iter().enumerate() {
        if wait.input != BarrierOp::Wait || !wait.is_ok() {
            continue;
        }
        summary.passed += 1;
        let Some(done) = wait.finished_at() else {
            continue;
        };
        let up_throughout = ops.iter().enumerate().find(|(_, raise)| {
            raise.input == BarrierOp::Raise
                && raise.is_ok()
                && raise.precedes(wait)
                && !removes.iter().any(|rm| rm.invoke < done && !rm.precedes(raise))
        });
        if let Some((r, _)) = up_throughout {
            violations.push(BarrierViolation { wait: w, raise: r });
        }
    }
    Report { summary, violations }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(m: &str, i: u64, c: u64) -> Op<DoubleBarrierOp, ()> {
        Op::ok(0, i, c, DoubleBarrierOp::Enter(m.into()), ())
    }
    fn leave(m: &str, i: u64, c: u64) -> Op<DoubleBarrierOp, ()> {
        Op::ok(0, i, c, DoubleBarrierOp::Leave(m.into()), ())
    }
    fn double(ops: Vec<Op<DoubleBarrierOp, ()>>) -> DoubleBarrierHistory {
        DoubleBarrierHistory {
            members: 3,
            ops,
            crashed: BTreeSet::new(),
        }
    }

    #[test]
    fn double_barrier_accepts_a_proper_round() {
        let h = double(vec![
            enter("a", 0, 10),
            enter("b", 1, 11),
            enter("c", 5, 12),
            leave("a", 20, 40),
            leave("b", 25, 41),
            leave("c", 30, 42),
        ]);
        let report = check_double(&h);
        assert!(report.is_ok(), "{report}");
        assert_eq!(
            report.summary,
            DoubleBarrierSummary {
                arrived: 3,
                entered: 3,
                left: 3
            }
        );
    }

    #[test]
    fn double_barrier_rejects_early_enter_and_early_leave() {
        let h = double(vec![enter("a", 0, 4), enter("b", 1, 11), enter("c", 5, 12)]);
        assert_eq!(
            check_double(&h).violations,
            vec![DoubleBarrierViolation::EnteredEarly { op: 0, arrived: 2 }]
        );
        let h = double(vec![
            enter("a", 0, 10),
            enter("b", 1, 11),
            enter("c", 5, 12),
            leave("a", 20, 26),
            leave("b", 25, 41),
            leave("c", 30, 42),
        ]);
        assert_eq!(
            check_double(&h).violations,
            vec![DoubleBarrierViolation::LeftEarly {
                op: 3,
                inside: vec!["c".into()]
            }]
        );
    }

    #[test]
    fn double_barrier_counts_failed_arrivals_and_ignores_crashed_members() {
        // c timed out, but had arrived: a and b may enter.
        let mut h = double(vec![
            enter("a", 0, 10),
            enter("b", 1, 11),
            Op::failed(0, 2, 9, DoubleBarrierOp::Enter("c".into())),
            enter("d", 3, 12),
            leave("a", 20, 30),
            leave("b", 21, 31),
        ]);
        // d entered but never left: a blocks on it unless it crashed.
        assert_eq!(check_double(&h).violations.len(), 2);
        h.crashed.insert("d".into());
        assert!(check_double(&h).is_ok());
    }

    fn op(input: BarrierOp, i: u64, c: u64) -> Op<BarrierOp, ()> {
        Op::ok(0, i, c, input, ())
    }

    #[test]
    fn simple_barrier_accepts_waits_released_by_a_remove() {
        let h = vec![
            op(BarrierOp::Raise, 0, 1),
            op(BarrierOp::Wait, 2, 10),
            op(BarrierOp::Remove, 8, 9),
            Op::unknown(0, 11, BarrierOp::Raise),
            op(BarrierOp::Wait, 12, 13), // the unknown raise may not have landed yet
        ];
        let report = check_barrier(&h);
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.summary.passed, 2);
    }

    #[test]
    fn simple_barrier_rejects_a_wait_through_a_raised_barrier() {
        let h = vec![
            op(BarrierOp::Remove, 0, 1),
            op(BarrierOp::Raise, 2, 3),
            Op::failed(0, 4, 5, BarrierOp::Remove),
            op(BarrierOp::Wait, 6, 10),
            op(BarrierOp::Remove, 11, 12),
        ];
        assert_eq!(
            check_barrier(&h).violations,
            vec![BarrierViolation { wait: 3, raise: 1 }]
        );
        // An unknown remove invoked during the wait may have released it.
        let mut h = h;
        h[4] = Op::unknown(0, 7, BarrierOp::Remove);
        assert!(check_barrier(&h).is_ok());
    }
}
