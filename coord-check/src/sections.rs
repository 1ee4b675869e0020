//! Exclusion judged by ground truth: the log of fenced writes a resource accepted.
//!
//! Holders of a lock, a read/write lock, a semaphore or an election's leadership write
//! to a per-resource log, and the log accepts a write only with a valid grant (a fenced
//! write). A holder's *section* spans from its first to its last accepted entry (entries
//! of one holder with one token). Whatever clients believed, the log shows who actually
//! held the resource: at no position may more sections be open than the admission rule
//! allows, and exclusive grants must carry increasing fencing tokens.

use std::collections::BTreeMap;
use std::fmt;

use crate::report::Report;

/// How an entry was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Under an exclusive grant (a lock, a write lock, leadership).
    Exclusive,
    /// Under a shared grant (a read lock).
    Shared,
}

/// One accepted write of the resource's log.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LogEntry {
    /// The contender's identity.
    pub holder: String,
    /// The fencing token of its grant.
    pub token: u64,
    /// The kind of grant.
    pub mode: Mode,
}

impl LogEntry {
    /// An entry.
    pub fn new(holder: impl Into<String>, token: u64, mode: Mode) -> Self {
        LogEntry {
            holder: holder.into(),
            token,
            mode,
        }
    }
}

/// How many sections may be open at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// One holder (locks, elections); modes are ignored.
    Exclusive,
    /// At most this many holders (semaphores); modes are ignored.
    Permits(usize),
    /// One exclusive holder, or any number of shared ones, never both.
    ReadWrite,
}

/// One holder's tenure: its entries with one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The holder.
    pub holder: String,
    /// Its fencing token.
    pub token: u64,
    /// `Exclusive` if any of its entries is.
    pub mode: Mode,
    /// Log position of its first entry.
    pub first: usize,
    /// Log position of its last entry.
    pub last: usize,
    /// How many entries it wrote.
    pub entries: usize,
}

/// What the log held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectionsSummary {
    /// Entries in the log.
    pub entries: usize,
    /// Sections (holder and token pairs).
    pub sections: usize,
    /// The most sections open at one position.
    pub max_concurrent: usize,
}

/// A breach of exclusion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SectionViolation {
    /// More sections open at `position` than the rule admits.
    Overlap {
        /// The log position.
        position: usize,
        /// The open sections: holder, token and mode.
        open: Vec<(String, u64, Mode)>,
    },
    /// An exclusive section started after another with a token not greater than it.
    TokenOrder {
        /// The earlier section (holder, token) with the largest token so far.
        earlier: (String, u64),
        /// The later section (holder, token).
        later: (String, u64),
        /// Where the later section starts.
        position: usize,
    },
}

impl fmt::Display for SectionViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionViolation::Overlap { position, open } => {
                write!(f, "at log position {position}, {} sections open:", open.len())?;
                for (holder, token, mode) in open {
                    write!(f, " {holder}#{token} ({mode:?})")?;
                }
                Ok(())
            }
            SectionViolation::TokenOrder {
                earlier,
                later,
                position,
            } => write!(
                f,
                "section {}#{} starting at log position {position} follows {}#{} with a token not greater",
                later.0, later.1, earlier.0, earlier.1
            ),
        }
    }
}

/// The sections of a log, in order of their first entry.
pub fn sections(log: &[LogEntry]) -> Vec<Section> {
    let mut index: BTreeMap<(&str, u64), usize> = BTreeMap::new();
    let mut out: Vec<Section> = Vec::new();
    for (position, entry) in log.iter().enumerate() {
        match index.get(&(entry.holder.as_str(), entry.token)) {
            Some(&i) => {
                let s = &mut out[i];
                s.last = position;
                s.entries += 1;
                if entry.mode == Mode::Exclusive {
                    s.mode = Mode::Exclusive;
                }
            }
            None => {
                index.insert((entry.holder.as_str(), entry.token), out.len());
                out.push(Section {
                    holder: entry.holder.clone(),
                    token: entry.token,
                    mode: entry.mode,
                    first: position,
                    last: position,
                    entries: 1,
                });
            }
        }
    }
    out
}

fn admitted(admission: Admission, open: &[&Section]) -> bool {
    match admission {
        Admission::Exclusive => open.len() <= 1,
        Admission::Permits(k) => open.len() <= k,
        Admission::ReadWrite => {
            let exclusive = open.iter().filter(|s| s.mode == Mode::Exclusive).count();
            exclusive == 0 || open.len() == 1
        }
    }
}

/// Checks the accepted log of one resource against its admission rule.
///
/// Violations: a position where more sections are open than `admission` admits (a
/// holder whose entries resume after another's exclusive section is one), and, for
/// exclusive sections (all sections under [`Admission::Exclusive`], the exclusive ones
/// under [`Admission::ReadWrite`]), a token not greater than that of an exclusive
/// section started earlier. Semaphore tokens are not ordered.
pub fn check(admission: Admission, log: &[LogEntry]) -> Report<SectionsSummary, SectionViolation> {
    let all = sections(log);
    let mut violations = Vec::new();

    // Sweep the log: sections open at each position.
    let mut starts: BTreeMap<usize, Vec<&Section>> = BTreeMap::new();
    for s in &all {
        starts.entry(s.first).or_default().push(s);
    }
    let mut open: Vec<&Section> = Vec::new();
    let mut max_concurrent = 0;
    let mut last_reported: Option<Vec<(usize, usize)>> = None;
    for position in 0..log.len() {
        if let Some(new) = starts.get(&position) {
            open.extend(new.iter().copied());
        }
        max_concurrent = max_concurrent.max(open.len());
        if !admitted(admission, &open) {
            let id: Vec<(usize, usize)> = open.iter().map(|s| (s.first, s.last)).collect();
            if last_reported.as_ref() != Some(&id) {
                violations.push(SectionViolation::Overlap {
                    position,
                    open: open.iter().map(|s| (s.holder.clone(), s.token, s.mode)).collect(),
                });
                last_reported = Some(id);
            }
        }
        open.retain(|s| s.last != position);
    }

    // Fencing tokens of exclusive sections increase in order of section start.
    let mut highest: Option<&Section> = None;
    for s in &all {
        let ordered = match admission {
            Admission::Exclusive => true,
            Admission::ReadWrite => s.mode == Mode::Exclusive,
            Admission::Permits(_) => false,
        };
        if !ordered {
            continue;
        }
        match highest {
            Some(h) if s.token <= h.token => violations.push(SectionViolation::TokenOrder {
                earlier: (h.holder.clone(), h.token),
                later: (s.holder.clone(), s.token),
                position: s.first,
            }),
            _ => highest = Some(s),
        }
    }

    Report {
        summary: SectionsSummary {
            entries: log.len(),
            sections: all.len(),
            max_concurrent,
        },
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Mode::{Exclusive as X, Shared as S};

    fn log(entries: &[(&str, u64, Mode)]) -> Vec<LogEntry> {
        entries
            .iter()
            .map(|(h, t, m)| LogEntry::new(*h, *t, *m))
            .collect()
    }

    #[test]
    fn accepts_successive_exclusive_holders() {
        let l = log(&[("a", 1, X), ("a", 1, X), ("b", 2, X), ("c", 5, X), ("c", 5, X)]);
        let report = check(Admission::Exclusive, &l);
        assert_eq!(
            report.into_result(),
            Ok(SectionsSummary {
                entries: 5,
                sections: 3,
                max_concurrent: 1
            })
        );
    }

    #[test]
    fn rejects_interleaved_exclusive_holders() {
        // b wrote while a still held: a's entries resume after b's.
        let l = log(&[("a", 1, X), ("b", 2, X), ("a", 1, X)]);
        let report = check(Admission::Exclusive, &l);
        assert_eq!(
            report.violations,
            vec![SectionViolation::Overlap {
                position: 1,
                open: vec![("a".into(), 1, X), ("b".into(), 2, X)],
            }]
        );
        assert_eq!(report.summary.max_concurrent, 2);
        assert!(report.to_string().contains("a#1"));
    }

    #[test]
    fn rejects_token_regression() {
        let l = log(&[("a", 3, X), ("b", 3, X), ("c", 2, X), ("d", 4, X)]);
        let violations = check(Admission::Exclusive, &l).violations;
        assert_eq!(violations.len(), 2);
        assert!(
            matches!(&violations[1], SectionViolation::TokenOrder { later, position: 2, .. } if later.1 == 2)
        );
        // The same holder starting a new tenure with an old token.
        let l = log(&[("a", 3, X), ("a", 1, X)]);
        assert!(!check(Admission::Exclusive, &l).is_ok());
    }

    #[test]
    fn semaphore_admits_up_to_its_permits() {
        let l = log(&[
            ("a", 1, X),
            ("b", 2, X),
            ("a", 1, X),
            ("b", 2, X),
            ("c", 3, X),
            ("c", 3, X),
        ]);
        assert!(check(Admission::Permits(2), &l).is_ok());
        let l = log(&[("a", 1, X), ("b", 2, X), ("c", 3, X), ("a", 1, X), ("b", 2, X)]);
        let report = check(Admission::Permits(2), &l);
        assert_eq!(report.violations.len(), 1);
        assert_eq!(report.summary.max_concurrent, 3);
        // Tokens are not ordered for permits.
        let l = log(&[("a", 5, X), ("b", 2, X)]);
        assert!(check(Admission::Permits(1), &l).is_ok());
    }

    #[test]
    fn read_write_admits_readers_together_but_writers_alone() {
        let l = log(&[
            ("r1", 1, S),
            ("r2", 2, S),
            ("r1", 1, S),
            ("w", 3, X),
            ("w", 3, X),
            ("r3", 4, S),
        ]);
        let report = check(Admission::ReadWrite, &l);
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.summary.max_concurrent, 2);

        let l = log(&[("r1", 1, S), ("w", 3, X), ("r1", 1, S)]);
        assert_eq!(check(Admission::ReadWrite, &l).violations.len(), 1);
        let l = log(&[("w1", 3, X), ("w2", 4, X), ("w1", 3, X)]);
        assert_eq!(check(Admission::ReadWrite, &l).violations.len(), 1);
        // Writer tokens increase; readers' tokens are not ordered against them.
        let l = log(&[("w1", 3, X), ("r", 1, S), ("w2", 2, X)]);
        let violations = check(Admission::ReadWrite, &l).violations;
        assert!(matches!(&violations[..], [SectionViolation::TokenOrder { .. }]));
    }
}
