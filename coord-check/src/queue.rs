//! Delivery of a distributed FIFO queue: nothing lost, nothing twice, nothing invented.
//!
//! The history holds pushes and takes (the process of an operation is its producer or
//! consumer), the values left in the queue at the end, and the takes whose consumer
//! crashed or was cut off after the take returned, before it could settle it (their
//! values reached a consumer that may not have acknowledged them: each may be delivered
//! once more, counted apart). Pushed values must be unique.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Debug};

use crate::history::{Op, Outcome};
use crate::report::Report;

/// A queue operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueueOp<T> {
    /// Appends a value.
    Push(T),
    /// Removes the value at the head (blocking or not).
    Take,
}

/// The output of a [`QueueOp`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueueRet<T> {
    /// `Push` succeeded.
    Pushed,
    /// `Take` removed this value.
    Took(T),
    /// A non-blocking `Take` found the queue empty.
    Empty,
}

/// A queue's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueHistory<T> {
    /// The pushes and takes.
    pub ops: Vec<Op<QueueOp<T>, QueueRet<T>>>,
    /// The values left in the queue at the end, head first.
    pub remaining: Vec<T>,
    /// Indices (in `ops`) of `Ok` takes whose consumer crashed or was cut off after the
    /// take returned, before it settled the take: their values may be delivered again.
    pub crashed: BTreeSet<usize>,
}

/// What the queue's history held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSummary {
    /// Pushes that returned `Ok`.
    pub pushes_acknowledged: usize,
    /// Pushes with an unknown outcome.
    pub pushes_unknown: usize,
    /// Pushes with an unknown outcome whose value was taken or remained.
    pub unknown_pushes_delivered: usize,
    /// Takes that returned a value.
    pub takes: usize,
    /// Takes with an unknown outcome.
    pub takes_unknown: usize,
    /// Takes that found the queue empty.
    pub empty_takes: usize,
    /// Acknowledged values neither taken nor remaining.
    pub lost: usize,
    /// Values taken by a consumer that then crashed.
    pub lost_to_crashed_takers: usize,
    /// Values taken more than once (beyond the allowed redeliveries).
    pub duplicates: usize,
    /// Values delivered again after a `crashed` take.
    pub redelivered: usize,
    /// Values left in the queue.
    pub remaining: usize,
}

/// A breach of the queue's guarantees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueViolation<T> {
    /// An operation whose output does not fit its input, or two pushes of one value.
    Malformed {
        /// The operation's index.
        op: usize,
        /// What is wrong.
        reason: String,
    },
    /// A value taken by more than one take.
    TakenTwice {
        /// The value.
        value: T,
        /// The takes that returned it.
        takes: Vec<usize>,
    },
    /// A value taken (`take: Some`) or remaining (`take: None`) that no push that could
    /// have taken effect wrote (`failed_push`: one that reported failure did).
    NotPushed {
        /// The value.
        value: T,
        /// The take that returned it, or `None` if it remained.
        take: Option<usize>,
        /// A push of it that returned `Failed`.
        failed_push: Option<usize>,
    },
    /// An acknowledged value neither taken nor remaining.
    Lost {
        /// The value.
        value: T,
        /// Its push.
        push: usize,
    },
    /// A value both taken and remaining.
    TakenAndRemaining {
        /// The value.
        value: T,
        /// The take.
        take: usize,
    },
    /// A value listed twice in `remaining`.
    RemainingTwice {
        /// The value.
        value: T,
    },
    /// Two values of one producer, the first pushed before the second was, delivered in
    /// the other order (taken in real-time order, or the first left behind while the
    /// second was taken, or the two remaining out of order).
    Fifo {
        /// The value pushed first.
        first: T,
        /// The value pushed second and delivered first.
        second: T,
    },
    /// A take found the queue empty though it surely held `value` throughout.
    EmptyWhileHolding {
        /// The take.
        take: usize,
        /// A value present for the whole take.
        value: T,
    },
}

impl<T: Debug> fmt::Display for QueueViolation<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueViolation::Malformed { op, reason } => write!(f, "op #{op}: {reason}"),
            QueueViolation::TakenTwice { value, takes } => write!(f, "{value:?} taken by takes {takes:?}"),
            QueueViolation::NotPushed {
                value,
                take,
                failed_push,
            } => {
                match take {
                    Some(t) => write!(f, "take #{t} returned {value:?}, ")?,
                    None => write!(f, "{value:?} remains, ")?,
                }
                match failed_push {
                    Some(p) => write!(f, "but its push #{p} failed"),
                    None => write!(f, "but it was never pushed"),
                }
            }
            QueueViolation::Lost { value, push } => {
                write!(
                    f,
                    "LOST: {value:?} (push #{push} acknowledged) neither taken nor remaining"
                )
            }
            QueueViolation::TakenAndRemaining { value, take } => {
                write!(f, "{value:?} taken by #{take} and still remaining")
            }
            QueueViolation::RemainingTwice { value } => write!(f, "{value:?} remains twice"),
            QueueViolation::Fifo { first, second } => {
                write!(
                    f,
                    "{second:?} delivered before {first:?}, pushed earlier by the same producer"
                )
            }
            QueueViolation::EmptyWhileHolding { take, value } => {
                write!(f, "take #{take} found the queue empty while it held {value:?}")
            }
        }
    }
}

/// Where a value ended up.
enum Fate {
    Taken(usize),
    Remaining(usize),
}

/// When the value an `Ok` take returned may have left the queue, per take index: the
/// invocation of the earliest `Unknown` take of the same consumer since its previous
/// completed take, or else the take's own invocation. A take whose future was dropped
/// may have removed a value that the consumer's next take returns (coord keeps such a
/// value for the client's next take), so FIFO is judged from the removal, not the
/// delivery.
fn removal_starts<T>(ops: &[Op<QueueOp<T>, QueueRet<T>>]) -> BTreeMap<usize, u64> {
    let mut by_consumer: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if matches!(op.input, QueueOp::Take) && !matches!(op.outcome, Outcome::Failed) {
            by_consumer.entry(op.process).or_default().push(i);
        }
    }
    let mut starts = BTreeMap::new();
    for takes in by_consumer.values_mut() {
        takes.sort_by_key(|&i| ops[i].invoke);
        let mut earliest_unknown: Option<u64> = None;
        for &i in takes.iter() {
            match &ops[i].outcome {
                Outcome::Unknown => {
                    earliest_unknown.get_or_insert(ops[i].invoke);
                }
                Outcome::Ok(QueueRet::Took(_)) => {
                    starts.insert(i, earliest_unknown.take().unwrap_or(ops[i].invoke));
                }
                _ => earliest_unknown = None,
            }
        }
    }
    starts
}

/// Checks a queue's history.
///
/// Violations: a value taken twice (unless every take of it but one is `crashed`: a
/// redelivery); a value taken or remaining that no `Ok` or
/// `Unknown` push wrote; an acknowledged value neither taken by an `Ok` take, nor
/// remaining, nor taken by a crashed consumer (LOST: an unknown or cancelled take must
/// not lose items); a value both taken and remaining; FIFO per producer in real time
/// (values a, b of one producer with push(a) complete before push(b) was invoked: take(b)
/// must not complete before a may have been removed — take(a)'s invocation, or that of
/// an unknown take of the same consumer since its previous completed take, which may
/// have removed a for it — b must not be taken while a remains, and
/// a stays ahead of b in `remaining`); an empty take while an acknowledged value was
/// surely in the queue (pushed before the take began, and remaining or taken only by a
/// take invoked after it ended).
pub fn check<T: Ord + Clone + Debug>(history: &QueueHistory<T>) -> Report<QueueSummary, QueueViolation<T>> {
    let mut summary = QueueSummary {
        remaining: history.remaining.len(),
        ..QueueSummary::default()
    };
    let mut violations = Vec::new();
    // value -> push index (pushes that may have taken effect), failed pushes apart.
    let mut pushes: BTreeMap<&T, usize> = BTreeMap::new();
    let mut failed_pushes: BTreeMap<&T, usize> = BTreeMap::new();
    let mut takes: BTreeMap<&T, Vec<usize>> = BTreeMap::new();
    let mut empty_takes = Vec::new();

    for (i, op) in history.ops.iter().enumerate() {
        match (&op.input, &op.outcome) {
            (QueueOp::Push(v), Outcome::Failed) => {
                failed_pushes.insert(v, i);
            }
            (QueueOp::Push(v), Outcome::Ok(QueueRet::Pushed) | Outcome::Unknown) => {
                if op.is_ok() {
                    summary.pushes_acknowledged += 1;
                } else {
                    summary.pushes_unknown += 1;
                }
                if let Some(first) = pushes.insert(v, i) {
                    violations.push(QueueViolation::Malformed {
                        op: i,
                        reason: format!("pushes {v:?} again (first by #{first}); values must be unique"),
                    });
                }
            }
            (QueueOp::Take, Outcome::Ok(QueueRet::Took(v))) => {
                summary.takes += 1;
                takes.entry(v).or_default().push(i);
            }
            (QueueOp::Take, Outcome::Ok(QueueRet::Empty)) => {
                summary.empty_takes += 1;
                empty_takes.push(i);
            }
            (QueueOp::Take, Outcome::Unknown) => summary.takes_unknown += 1,
            (QueueOp::Take, Outcome::Failed) => {}
            (input, outcome) => violations.push(QueueViolation::Malformed {
                op: i,
                reason: format!("{input:?} cannot return {outcome:?}"),
            }),
        }
    }

    let mut fate: BTreeMap<&T, Fate> = BTreeMap::new();
    for (value, by) in &takes {
        // Delivered again after a consumer that may not have settled its take: allowed
        // as long as every take but one is such a take.
        let unsettled = by.iter().filter(|t| history.crashed.contains(t)).count();
        if by.len() > 1 && by.len() - unsettled > 1 {
            summary.duplicates += 1;
            violations.push(QueueViolation::TakenTwice {
                value: (*value).clone(),
                takes: by.clone(),
            });
        } else if by.len() > 1 {
            summary.redelivered += 1;
        }
        if !pushes.contains_key(value) {
            violations.push(QueueViolation::NotPushed {
                value: (*value).clone(),
                take: Some(by[0]),
                failed_push: failed_pushes.get(value).copied(),
            });
        }
        fate.insert(value, Fate::Taken(by[0]));
    }
    for (position, value) in history.remaining.iter().enumerate() {
        match fate.get(value) {
            Some(Fate::Taken(take)) => violations.push(QueueViolation::TakenAndRemaining {
                value: value.clone(),
                take: *take,
            }),
            Some(Fate::Remaining(_)) => {
                violations.push(QueueViolation::RemainingTwice { value: value.clone() })
            }
            None => {
                if !pushes.contains_key(value) {
                    violations.push(QueueViolation::NotPushed {
                        value: value.clone(),
                        take: None,
                        failed_push: failed_pushes.get(value).copied(),
                    });
                }
                fate.insert(value, Fate::Remaining(position));
            }
        }
    }

    for (value, &push) in &pushes {
        let op = &history.ops[push];
        let Some(fate) = fate.get(value) else {
            if op.is_ok() {
                summary.lost += 1;
                violations.push(QueueViolation::Lost {
                    value: (*value).clone(),
                    push,
                });
            }
            continue;
        };
        if !op.is_ok() {
            summary.unknown_pushes_delivered += 1;
        }
        if let Fate::Taken(take) = fate
            && history.crashed.contains(take)
        {
            summary.lost_to_crashed_takers += 1;
        }
    }

    // FIFO per producer, between pushes ordered in real time.
    let mut by_producer: BTreeMap<u64, Vec<(&T, usize)>> = BTreeMap::new();
    for (value, &push) in &pushes {
        by_producer
            .entry(history.ops[push].process)
            .or_default()
            .push((value, push));
    }
    let removal = removal_starts(&history.ops);
    for values in by_producer.values() {
        for &(a, pa) in values {
            for &(b, pb) in values {
                if !history.ops[pa].precedes(&history.ops[pb]) {
                    continue;
                }
                let out_of_order = match (fate.get(a), fate.get(b)) {
                    (Some(Fate::Taken(ta)), Some(Fate::Taken(tb))) => {
                        history.ops[*tb].finished_at().is_some_and(|done| {
                            done < removal.get(ta).copied().unwrap_or(history.ops[*ta].invoke)
                        })
                    }
                    (Some(Fate::Remaining(_)), Some(Fate::Taken(_))) => true,
                    (Some(Fate::Remaining(ra)), Some(Fate::Remaining(rb))) => rb < ra,
                    _ => false,
                };
                if out_of_order {
                    violations.push(QueueViolation::Fifo {
                        first: a.clone(),
                        second: b.clone(),
                    });
                }
            }
        }
    }

    // An empty take while an acknowledged value was surely present.
    for &e in &empty_takes {
        let empty = &history.ops[e];
        let held = pushes.iter().find(|&(value, &push)| {
            let pushed = &history.ops[push];
            pushed.is_ok()
                && pushed.precedes(empty)
                && match fate.get(value) {
                    Some(Fate::Remaining(_)) => true,
                    Some(Fate::Taken(t)) => empty.precedes(&history.ops[*t]),
                    None => false,
                }
        });
        if let Some((value, _)) = held {
            violations.push(QueueViolation::EmptyWhileHolding {
                take: e,
                value: (*value).clone(),
            });
        }
    }

    Report { summary, violations }
}

#[cfg(test)]
mod tests {
    use super::*;

    type QOp = Op<QueueOp<u32>, QueueRet<u32>>;

    fn push(p: u64, i: u64, c: u64, v: u32) -> QOp {
        Op::ok(p, i, c, QueueOp::Push(v), QueueRet::Pushed)
    }
    fn take(p: u64, i: u64, c: u64, v: u32) -> QOp {
        Op::ok(p, i, c, QueueOp::Take, QueueRet::Took(v))
    }
    fn hist(ops: Vec<QOp>, remaining: Vec<u32>) -> QueueHistory<u32> {
        QueueHistory {
            ops,
            remaining,
            crashed: BTreeSet::new(),
        }
    }

    #[test]
    fn accepts_a_clean_history() {
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                Op::unknown(2, 4, QueueOp::Push(20)),
                take(3, 5, 6, 10),
                Op::unknown(3, 7, QueueOp::Take),
                push(1, 8, 9, 12),
                Op::failed(1, 10, 11, QueueOp::Push(13)),
            ],
            vec![11, 12],
        );
        // The unknown take removed nothing (20 never landed); 10 taken, 11 and 12 remain.
        let report = check(&h);
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.summary.pushes_acknowledged, 3);
        assert_eq!(report.summary.pushes_unknown, 1);
        assert_eq!(report.summary.unknown_pushes_delivered, 0);
        assert_eq!(report.summary.takes_unknown, 1);
        assert_eq!(report.summary.lost, 0);
    }

    #[test]
    fn rejects_an_item_lost_to_an_unknown_take() {
        let h = hist(vec![push(1, 0, 1, 10), Op::unknown(2, 2, QueueOp::Take)], vec![]);
        let violations = check(&h).violations;
        assert_eq!(violations, vec![QueueViolation::Lost { value: 10, push: 0 }]);
    }

    #[test]
    fn counts_values_of_crashed_takers_apart() {
        let mut h = hist(vec![push(1, 0, 1, 10), take(2, 2, 3, 10)], vec![]);
        h.crashed.insert(1);
        let report = check(&h);
        assert!(report.is_ok());
        assert_eq!(report.summary.lost_to_crashed_takers, 1);
    }

    #[test]
    fn rejects_duplicates_and_inventions() {
        let h = hist(
            vec![push(1, 0, 1, 10), take(2, 2, 3, 10), take(3, 2, 4, 10)],
            vec![],
        );
        let report = check(&h);
        assert_eq!(report.summary.duplicates, 1);
        assert!(matches!(
            &report.violations[..],
            [QueueViolation::TakenTwice { value: 10, .. }]
        ));

        let h = hist(vec![take(2, 2, 3, 99)], vec![98]);
        assert_eq!(check(&h).violations.len(), 2);

        let h = hist(
            vec![Op::failed(1, 0, 1, QueueOp::Push(7)), take(2, 2, 3, 7)],
            vec![],
        );
        assert_eq!(
            check(&h).violations,
            vec![QueueViolation::NotPushed {
                value: 7,
                take: Some(1),
                failed_push: Some(0)
            }]
        );

        let h = hist(vec![push(1, 0, 1, 10), take(2, 2, 3, 10)], vec![10]);
        assert!(matches!(
            &check(&h).violations[..],
            [QueueViolation::TakenAndRemaining { .. }]
        ));
    }

    #[test]
    fn a_value_removed_by_a_dropped_take_counts_from_its_removal() {
        // Consumer 3's take of 10 was dropped after it removed 10 (unknown); consumer 2
        // took 11; consumer 3's next take returned the 10 it kept: in order.
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                Op::unknown(3, 4, QueueOp::Take),
                take(2, 5, 6, 11),
                take(3, 7, 8, 10),
            ],
            vec![],
        );
        assert!(check(&h).is_ok(), "{:?}", check(&h).violations);
        // Without the dropped take, 10 came out after 11 was taken: an inversion.
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                take(2, 5, 6, 11),
                take(3, 7, 8, 10),
            ],
            vec![],
        );
        assert_eq!(check(&h).violations.len(), 1);
        // A completed take in between ends what the dropped one may have kept.
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                Op::unknown(3, 4, QueueOp::Take),
                Op::ok(3, 4, 5, QueueOp::Take, QueueRet::Empty),
                take(2, 5, 6, 11),
                take(3, 7, 8, 10),
            ],
            vec![],
        );
        assert!(!check(&h).is_ok());
    }

    #[test]
    fn rejects_fifo_inversions_of_one_producer() {
        // Taken in the wrong order.
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                take(2, 4, 5, 11),
                take(2, 6, 7, 10),
            ],
            vec![],
        );
        assert_eq!(
            check(&h).violations,
            vec![QueueViolation::Fifo {
                first: 10,
                second: 11
            }]
        );
        // Overlapping takes may complete in either order.
        let h = hist(
            vec![
                push(1, 0, 1, 10),
                push(1, 2, 3, 11),
                take(2, 4, 8, 11),
                take(3, 5, 7, 10),
            ],
            vec![],
        );
        assert!(check(&h).is_ok());
        // The first left behind while the second was taken; remaining out of order.
        let h = hist(
            vec![push(1, 0, 1, 10), push(1, 2, 3, 11), take(2, 4, 5, 11)],
            vec![10],
        );
        assert_eq!(check(&h).violations.len(), 1);
        let h = hist(vec![push(1, 0, 1, 10), push(1, 2, 3, 11)], vec![11, 10]);
        assert_eq!(check(&h).violations.len(), 1);
        // Different producers are not ordered.
        let h = hist(
            vec![push(1, 0, 1, 10), push(2, 2, 3, 11), take(3, 4, 5, 11)],
            vec![10],
        );
        assert!(check(&h).is_ok());
    }

    #[test]
    fn rejects_empty_take_while_holding_a_value() {
        let empty = |i, c| Op::ok(3, i, c, QueueOp::Take, QueueRet::Empty);
        let h = hist(vec![push(1, 0, 1, 10), empty(2, 3), take(2, 4, 5, 10)], vec![]);
        assert!(matches!(
            &check(&h).violations[..],
            [QueueViolation::EmptyWhileHolding { take: 1, value: 10 }]
        ));
        // A concurrent take may have emptied it.
        let h = hist(vec![push(1, 0, 1, 10), empty(2, 5), take(2, 3, 4, 10)], vec![]);
        assert!(check(&h).is_ok());
    }
}
