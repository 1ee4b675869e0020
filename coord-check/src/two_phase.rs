//! Two-phase commit: one decision per transaction, learned by all alike, persisted, and
//! `Commit` only with every participant's commit vote.

use std::fmt;

use crate::report::Report;

/// A transaction's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Decision {
    /// Every participant voted commit.
    Commit,
    /// Some participant voted abort, or the coordinator gave up.
    Abort,
}

/// A participant's vote (any outcome of the call: an invoked vote may have landed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote {
    /// The participant.
    pub participant: String,
    /// `true` to commit.
    pub commit: bool,
    /// When the vote was invoked.
    pub invoked: u64,
}

/// A decision an actor learned: from a coordinate or vote call that returned `Ok`, or
/// from reading the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// Who learned it.
    pub actor: String,
    /// What it learned.
    pub decision: Decision,
    /// When the call that returned it completed, if recorded (enables the check that
    /// no one learns `Commit` before every participant voted).
    pub at: Option<u64>,
}

/// How a coordinator's call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorResult {
    /// It returned this decision.
    Ok(Decision),
    /// It failed with an error (named here) that claims it decided nothing.
    Definite(String),
    /// It failed in a way that may or may not have decided.
    Unknown,
}

/// One coordinator's call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coordinator {
    /// The coordinator's identity.
    pub actor: String,
    /// How its call ended.
    pub result: CoordinatorResult,
}

/// Everything recorded about one transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    /// The participants whose votes decide.
    pub participants: Vec<String>,
    /// The votes cast.
    pub votes: Vec<Vote>,
    /// The decisions actors learned.
    pub learned: Vec<Learned>,
    /// The coordinators' calls.
    pub coordinators: Vec<Coordinator>,
    /// The decision persisted in the store at the end, if any.
    pub persisted: Option<Decision>,
}

/// What a transaction's record held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TwoPhaseSummary {
    /// The persisted decision.
    pub persisted: Option<Decision>,
    /// Votes cast.
    pub votes: usize,
    /// Decisions learned.
    pub learned: usize,
    /// Coordinator calls.
    pub coordinators: usize,
}

/// A breach of two-phase commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TwoPhaseViolation {
    /// Two actors learned different decisions.
    Disagreement {
        /// One actor and what it learned.
        first: (String, Decision),
        /// Another actor and its different decision.
        second: (String, Decision),
    },
    /// An actor learned a decision other than the persisted one (or none persisted).
    LearnedNotPersisted {
        /// The actor.
        actor: String,
        /// What it learned.
        learned: Decision,
        /// What was persisted.
        persisted: Option<Decision>,
    },
    /// `Commit` persisted though these participants did not vote commit (voted abort
    /// or never voted).
    CommitWithoutVotes {
        /// The participants lacking a commit vote.
        participants: Vec<String>,
    },
    /// An actor learned `Commit` before a participant had invoked its commit vote.
    CommitBeforeVote {
        /// The actor.
        actor: String,
        /// When it learned.
        at: u64,
        /// The participant whose first commit vote was invoked later.
        participant: String,
    },
    /// A coordinator returned a decision other than the persisted one.
    CoordinatorMismatch {
        /// The coordinator.
        actor: String,
        /// What it returned.
        returned: Decision,
        /// What was persisted.
        persisted: Option<Decision>,
    },
    /// A coordinator failed claiming it decided nothing, yet `Commit` was persisted and
    /// no other coordinator could have written it (only coordinators write `Commit`).
    DefiniteButCommitted {
        /// The coordinator.
        actor: String,
        /// The error it returned.
        error: String,
    },
}

impl fmt::Display for TwoPhaseViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwoPhaseViolation::Disagreement { first, second } => write!(
                f,
                "{} learned {:?} but {} learned {:?}",
                first.0, first.1, second.0, second.1
            ),
            TwoPhaseViolation::LearnedNotPersisted {
                actor,
                learned,
                persisted,
            } => write!(f, "{actor} learned {learned:?}, persisted {persisted:?}"),
            TwoPhaseViolation::CommitWithoutVotes { participants } => {
                write!(f, "commit persisted without commit votes of {participants:?}")
            }
            TwoPhaseViolation::CommitBeforeVote {
                actor,
                at,
                participant,
            } => write!(
                f,
                "{actor} learned commit at {at}, before {participant} voted commit"
            ),
            TwoPhaseViolation::CoordinatorMismatch {
                actor,
                returned,
                persisted,
            } => write!(
                f,
                "coordinator {actor} returned {returned:?}, persisted {persisted:?}"
            ),
            TwoPhaseViolation::DefiniteButCommitted { actor, error } => write!(
                f,
                "coordinator {actor} failed with {error} (deciding nothing) but its commit landed"
            ),
        }
    }
}

/// Checks one transaction.
///
/// Violations: two actors learned different decisions; a learned decision other than
/// the persisted one; `Commit` persisted while some participant has no commit vote or
/// has an abort vote; `Commit` learned (with a time) before some participant's first
/// commit vote was invoked; a coordinator that returned `Ok(d)` while `d` is not
/// persisted; a coordinator that failed definitely while `Commit` is persisted and no
/// other coordinator returned `Ok(Commit)` or `Unknown`.
pub fn check(tx: &Transaction) -> Report<TwoPhaseSummary, TwoPhaseViolation> {
    let mut violations = Vec::new();

    if let Some(first) = tx.learned.first()
        && let Some(other) = tx.learned.iter().find(|l| l.decision != first.decision)
    {
        violations.push(TwoPhaseViolation::Disagreement {
            first: (first.actor.clone(), first.decision),
            second: (other.actor.clone(), other.decision),
        });
    }
    for l in &tx.learned {
        if tx.persisted != Some(l.decision) {
            violations.push(TwoPhaseViolation::LearnedNotPersisted {
                actor: l.actor.clone(),
                learned: l.decision,
                persisted: tx.persisted,
            });
        }
    }

    if tx.persisted == Some(Decision::Commit) {
        let lacking: Vec<String> = tx
            .participants
            .iter()
            .filter(|p| {
                let mut votes = tx.votes.iter().filter(|v| &v.participant == *p);
                let voted_abort = votes.clone().any(|v| !v.commit);
                voted_abort || !votes.any(|v| v.commit)
            })
            .cloned()
            .collect();
        if !lacking.is_empty() {
            violations.push(TwoPhaseViolation::CommitWithoutVotes {
                participants: lacking,
            });
        }
    }

    for l in &tx.learned {
        let (Decision::Commit, Some(at)) = (l.decision, l.at) else {
            continue;
        };
        for p in &tx.participants {
            let first_commit = tx
                .votes
                .iter()
                .filter(|v| &v.participant == p && v.commit)
                .map(|v| v.invoked)
                .min();
            if first_commit.is_some_and(|invoked| invoked > at) {
                violations.push(TwoPhaseViolation::CommitBeforeVote {
                    actor: l.actor.clone(),
                    at,
                    participant: p.clone(),
                });
            }
        }
    }

    for (i, c) in tx.coordinators.iter().enumerate() {
        match &c.result {
            CoordinatorResult::Ok(d) if tx.persisted != Some(*d) => {
                violations.push(TwoPhaseViolation::CoordinatorMismatch {
                    actor: c.actor.clone(),
                    returned: *d,
                    persisted: tx.persisted,
                });
            }
            CoordinatorResult::Definite(error) if tx.persisted == Some(Decision::Commit) => {
                let another_could = tx.coordinators.iter().enumerate().any(|(j, other)| {
                    j != i
                        && matches!(
                            other.result,
                            CoordinatorResult::Ok(Decision::Commit) | CoordinatorResult::Unknown
                        )
                });
                if !another_could {
                    violations.push(TwoPhaseViolation::DefiniteButCommitted {
                        actor: c.actor.clone(),
                        error: error.clone(),
                    });
                }
            }
            _ => {}
        }
    }

    Report {
        summary: TwoPhaseSummary {
            persisted: tx.persisted,
            votes: tx.votes.len(),
            learned: tx.learned.len(),
            coordinators: tx.coordinators.len(),
        },
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::{Abort, Commit};

    fn vote(p: &str, commit: bool, invoked: u64) -> Vote {
        Vote {
            participant: p.into(),
            commit,
            invoked,
        }
    }
    fn learned(actor: &str, decision: Decision, at: Option<u64>) -> Learned {
        Learned {
            actor: actor.into(),
            decision,
            at,
        }
    }
    fn coordinator(actor: &str, result: CoordinatorResult) -> Coordinator {
        Coordinator {
            actor: actor.into(),
            result,
        }
    }
    fn committed() -> Transaction {
        Transaction {
            participants: vec!["p1".into(), "p2".into()],
            votes: vec![vote("p1", true, 1), vote("p2", true, 2)],
            learned: vec![learned("p1", Commit, Some(5)), learned("p2", Commit, Some(6))],
            coordinators: vec![coordinator("c", CoordinatorResult::Ok(Commit))],
            persisted: Some(Commit),
        }
    }

    #[test]
    fn accepts_commit_and_abort() {
        let report = check(&committed());
        assert!(report.is_ok(), "{report}");
        let aborted = Transaction {
            participants: vec!["p1".into(), "p2".into()],
            votes: vec![vote("p1", true, 1)],
            learned: vec![learned("p1", Abort, None)],
            coordinators: vec![coordinator("c", CoordinatorResult::Definite("Timeout".into()))],
            persisted: Some(Abort),
        };
        assert!(check(&aborted).is_ok());
    }

    #[test]
    fn rejects_disagreement_and_unpersisted_decisions() {
        let mut tx = committed();
        tx.learned.push(learned("p3", Abort, None));
        let violations = check(&tx).violations;
        assert!(matches!(violations[0], TwoPhaseViolation::Disagreement { .. }));
        assert!(matches!(
            violations[1],
            TwoPhaseViolation::LearnedNotPersisted { .. }
        ));

        let mut tx = committed();
        tx.persisted = None;
        assert_eq!(check(&tx).violations.len(), 3, "two learners and the coordinator");
    }

    #[test]
    fn rejects_commit_without_every_commit_vote() {
        let mut tx = committed();
        tx.votes[1].commit = false;
        assert!(matches!(
            &check(&tx).violations[..],
            [TwoPhaseViolation::CommitWithoutVotes { participants }] if participants == &["p2".to_string()]
        ));
        let mut tx = committed();
        tx.votes.pop();
        assert!(!check(&tx).is_ok());
    }

    #[test]
    fn rejects_commit_learned_before_a_vote() {
        let mut tx = committed();
        tx.votes[1].invoked = 10;
        assert_eq!(
            check(&tx).violations.len(),
            2,
            "both learners learned before p2 voted"
        );
    }

    #[test]
    fn rejects_a_landed_decision_reported_as_none() {
        let mut tx = committed();
        tx.learned.clear();
        tx.coordinators = vec![coordinator("c", CoordinatorResult::Definite("Timeout".into()))];
        assert!(matches!(
            &check(&tx).violations[..],
            [TwoPhaseViolation::DefiniteButCommitted { .. }]
        ));
        // Another coordinator with an unknown result may have written it.
        tx.coordinators
            .push(coordinator("c2", CoordinatorResult::Unknown));
        assert!(check(&tx).is_ok());
        // A coordinator whose returned decision did not persist.
        tx.coordinators
            .push(coordinator("c3", CoordinatorResult::Ok(Abort)));
        assert!(matches!(
            &check(&tx).violations[..],
            [TwoPhaseViolation::CoordinatorMismatch { .. }]
        ));
    }
}
