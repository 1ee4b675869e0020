//! What holders *say*: no more handles of one name say they hold it at once than it
//! admits, beyond a bound.
//!
//! The [`sections`](crate::sections) checker judges the writes a resource accepted;
//! unfenced work trusts something else — a guard's or a leadership's state (`Held`,
//! `Leading`). Each [`Belief`] is one handle's interval of saying so: from the moment its
//! grant was returned to the first moment it said anything else (`Suspended`, `Lost`) or
//! its release began; an interval still open at the end of the history runs to +∞. All
//! intervals are on one clock.
//!
//! A name admits `admits` holders at once (1 for a lock, a leadership or a write lock,
//! `n` for a semaphore of `n` permits). A belief may outlast its grant by at most
//! `bound`: the time a holder needs to learn of a loss the server already acted on (a
//! grant returned just as its entry was deleted, too, is believed for about that long).
//! So each interval is judged shortened by `bound` at its end, and at no instant may
//! more than `admits` shortened intervals of one name hold.

use std::collections::BTreeMap;
use std::fmt;

use crate::report::Report;

/// One handle's interval of saying it holds a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Belief {
    /// The name held (a lock's, an election's, a semaphore's).
    pub name: String,
    /// Who held: any id unique per handle (for messages).
    pub holder: u64,
    /// The grant's fencing token (for messages).
    pub token: u64,
    /// How many holders the name admits at once.
    pub admits: usize,
    /// When the grant was returned.
    pub from: u64,
    /// When the handle first said something else, or its release began; `None` when it
    /// still said it held at the end.
    pub until: Option<u64>,
}

/// What the beliefs held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BeliefSummary {
    /// Intervals judged.
    pub intervals: usize,
    /// Intervals still open at the end.
    pub open: usize,
    /// Distinct names.
    pub names: usize,
    /// The most handles of one name that said they held at one instant, unshortened.
    pub most_at_once: usize,
    /// The longest time any handle said it held past another's grant of a name that
    /// admits one (unshortened overlap), in clock units.
    pub longest_overlap: u64,
}

/// Too many handles said they held a name at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooManyHolders {
    /// The name.
    pub name: String,
    /// An instant at which they did (after shortening by the bound).
    pub at: u64,
    /// How many it admits.
    pub admits: usize,
    /// The beliefs (indices) holding then.
    pub beliefs: Vec<usize>,
    /// (holder, token, from, until) of each, for the message.
    pub shown: Vec<(u64, u64, u64, Option<u64>)>,
}

impl fmt::Display for TooManyHolders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} handles said they held {:?} at {} (it admits {}), beyond the bound:",
            self.beliefs.len(),
            self.name,
            self.at,
            self.admits
        )?;
        for (holder, token, from, until) in &self.shown {
            match until {
                Some(u) => write!(f, " [holder {holder}, token {token}: {from}..{u}]")?,
                None => write!(f, " [holder {holder}, token {token}: {from}.. still]")?,
            }
        }
        Ok(())
    }
}

/// Judges `beliefs` with the tolerance `bound` (in the clock's units).
pub fn check(beliefs: &[Belief], bound: u64) -> Report<BeliefSummary, TooManyHolders> {
    let mut summary = BeliefSummary {
        intervals: beliefs.len(),
        open: beliefs.iter().filter(|b| b.until.is_none()).count(),
        ..BeliefSummary::default()
    };
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, b) in beliefs.iter().enumerate() {
        by_name.entry(&b.name).or_default().push(i);
    }
    summary.names = by_name.len();
    let mut violations = Vec::new();
    for (name, indices) in by_name {
        summary.most_at_once = summary.most_at_once.max(most_at_once(beliefs, &indices, 0));
        if beliefs[indices[0]].admits == 1 {
            for (k, &a) in indices.iter().enumerate() {
                for &b in &indices[k + 1..] {
                    summary.longest_overlap = summary.longest_overlap.max(overlap(&beliefs[a], &beliefs[b]));
                }
            }
        }
        let admits = indices.iter().map(|&i| beliefs[i].admits).min().unwrap_or(1);
        if let Some((at, holding)) = first_excess(beliefs, &indices, bound, admits) {
            violations.push(TooManyHolders {
                name: name.to_owned(),
                at,
                admits,
                shown: holding
                    .iter()
                    .map(|&i| {
                        let b = &beliefs[i];
                        (b.holder, b.token, b.from, b.until)
                    })
                    .collect(),
                beliefs: holding,
            });
        }
    }
    Report { summary, violations }
}

/// `[from, until - shorten)`, or `None` when that is empty.
fn span(b: &Belief, shorten: u64) -> Option<(u64, u64)> {
    let end = b.until.map_or(u64::MAX, |u| u.saturating_sub(shorten));
    (end > b.from).then_some((b.from, end))
}

fn overlap(a: &Belief, b: &Belief) -> u64 {
    match (span(a, 0), span(b, 0)) {
        (Some((a0, a1)), Some((b0, b1))) => a1.min(b1).saturating_sub(a0.max(b0)).min(u64::MAX / 2),
        _ => 0,
    }
}

/// Sweeps the spans of `indices` shortened by `shorten`: (instant, beliefs holding then)
/// of every instant a new span starts.
fn sweep(beliefs: &[Belief], indices: &[usize], shorten: u64) -> Vec<(u64, Vec<usize>)> {
    let spans: Vec<(usize, u64, u64)> = indices
        .iter()
        .filter_map(|&i| span(&beliefs[i], shorten).map(|(s, e)| (i, s, e)))
        .collect();
    let mut starts: Vec<u64> = spans.iter().map(|&(_, s, _)| s).collect();
    starts.sort_unstable();
    starts.dedup();
    starts
        .into_iter()
        .map(|t| {
            let holding = spans
                .iter()
                .filter(|&&(_, s, e)| s <= t && t < e)
                .map(|&(i, _, _)| i)
                .collect();
            (t, holding)
        })
        .collect()
}

fn most_at_once(beliefs: &[Belief], indices: &[usize], shorten: u64) -> usize {
    sweep(beliefs, indices, shorten)
        .iter()
        .map(|(_, h)| h.len())
        .max()
        .unwrap_or(0)
}

fn first_excess(
    beliefs: &[Belief],
    indices: &[usize],
    bound: u64,
    admits: usize,
) -> Option<(u64, Vec<usize>)> {
    sweep(beliefs, indices, bound)
        .into_iter()
        .find(|(_, holding)| holding.len() > admits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn belief(name: &str, holder: u64, admits: usize, from: u64, until: Option<u64>) -> Belief {
        Belief {
            name: name.into(),
            holder,
            token: holder,
            admits,
            from,
            until,
        }
    }

    #[test]
    fn successive_holders_pass() {
        let b = [
            belief("l", 1, 1, 0, Some(10)),
            belief("l", 2, 1, 10, Some(20)),
            belief("l", 3, 1, 25, None),
        ];
        let r = check(&b, 0);
        assert!(r.is_ok(), "{r}");
        assert_eq!(r.summary.most_at_once, 1);
        assert_eq!(r.summary.open, 1);
    }

    #[test]
    fn an_overlap_within_the_bound_passes_and_beyond_it_fails() {
        let b = [belief("l", 1, 1, 0, Some(15)), belief("l", 2, 1, 10, Some(20))];
        assert!(check(&b, 5).is_ok());
        let r = check(&b, 4);
        assert_eq!(r.violations.len(), 1, "{r}");
        assert_eq!(r.violations[0].beliefs, vec![0, 1]);
        assert_eq!(r.summary.longest_overlap, 5);
    }

    #[test]
    fn a_grant_believed_briefly_is_within_the_bound() {
        // Returned just as its entry went, and soon known lost: within the bound.
        let b = [belief("l", 1, 1, 0, Some(100)), belief("l", 2, 1, 10, Some(11))];
        assert!(check(&b, 5).is_ok());
        let b = [belief("l", 1, 1, 0, Some(100)), belief("l", 2, 1, 10, Some(40))];
        assert!(!check(&b, 5).is_ok());
    }

    #[test]
    fn a_belief_still_open_overlaps_every_later_grant() {
        let b = [belief("l", 1, 1, 0, None), belief("l", 2, 1, 1_000, Some(2_000))];
        assert!(!check(&b, 500).is_ok());
    }

    #[test]
    fn permits_are_counted_per_name() {
        let b = [
            belief("s", 1, 2, 0, Some(10)),
            belief("s", 2, 2, 0, Some(10)),
            belief("t", 3, 2, 0, Some(10)),
        ];
        assert!(check(&b, 0).is_ok());
        let mut more = b.to_vec();
        more.push(belief("s", 4, 2, 5, Some(10)));
        let r = check(&more, 0);
        assert_eq!(r.violations.len(), 1, "{r}");
        assert_eq!(r.violations[0].name, "s");
    }

    #[test]
    fn an_empty_interval_holds_nothing() {
        let b = [belief("l", 1, 1, 10, Some(10)), belief("l", 2, 1, 5, Some(20))];
        assert!(check(&b, 0).is_ok());
    }
}
