//! Watch streams judged against the committed writes: ordered, unique, atomic, reliable.
//!
//! The ground truth is the sequence of writes committed to the watched key range, each
//! with its revision (writes committed atomically share one). A watcher's stream holds
//! snapshots, puts, deletes and resyncs. The properties:
//!
//! - **valid**: every put or delete event is a committed write (same key, revision and
//!   value);
//! - **ordered**: per key, revisions strictly increase from event to event; a `Resync`
//!   resets this, and a `Snapshot` sets it to the snapshot's revision;
//! - **unique**: no event (key and revision) is delivered twice;
//! - **atomic**: the events of one revision are delivered together: contiguously, and
//!   all of them if any;
//! - **reliable**: between two consecutive events of a key (no `Resync` between), no
//!   committed write of that key is skipped; after a `Snapshot`, a key's first event is
//!   its first write after the snapshot's revision.
//!
//! # What a backend must report
//!
//! Puts carry their `mod_revision` and deletes their revision: with a delete's revision
//! unknown (`0`), the delete is matched to the key's next committed delete (so ordering
//! and reliability still hold), but it is exempt from uniqueness, and revisions holding
//! deletes are exempt from the completeness half of atomicity. A `Snapshot` lists the
//! whole range at one revision with each key's `mod_revision`; the checker locates that
//! revision in the ground truth, which must then be the range's full write history. A
//! stream without a leading snapshot is judged as watching from before the first write of
//! the ground truth. The watcher emits `Resync` whenever it may have lost events (a
//! compaction, a reconnect without resume); the next events are not checked for gaps
//! until a snapshot locates the stream again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Debug};

use crate::report::Report;

/// What a committed write did.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind<V> {
    /// Set the key to a value.
    Put(V),
    /// Removed the key.
    Delete,
}

/// One committed write of the ground truth.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Write<K, V> {
    /// The revision it committed at (shared by writes of one atomic commit).
    pub revision: u64,
    /// The key written.
    pub key: K,
    /// What it did.
    pub kind: WriteKind<V>,
}

/// One item of a watcher's stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WatchEvent<K, V> {
    /// The whole range at one revision: key, value, mod revision.
    Snapshot(Vec<(K, V, u64)>),
    /// A key was set.
    Put {
        /// The key.
        key: K,
        /// Its new value.
        value: V,
        /// The revision of the write.
        mod_revision: u64,
    },
    /// A key was removed.
    Delete {
        /// The key.
        key: K,
        /// The revision of the delete; `0` when the backend does not report it.
        revision: u64,
    },
    /// Events may have been lost; ordering and gap checks restart.
    Resync,
}

/// What a stream held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Items in the stream.
    pub events: usize,
    /// Snapshots.
    pub snapshots: usize,
    /// Resyncs.
    pub resyncs: usize,
    /// Deletes without a revision.
    pub unrevisioned_deletes: usize,
}

/// A breach of a watch property; `event` is a position in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchViolation {
    /// Valid: no committed write matches the event.
    Phantom {
        /// The event.
        event: usize,
    },
    /// Unique: the event repeats an earlier one.
    Duplicate {
        /// The repeat.
        event: usize,
        /// The first delivery.
        first: usize,
    },
    /// Ordered: the event's revision is not above the key's previous one.
    OutOfOrder {
        /// The event.
        event: usize,
        /// The key's previous revision (an event's, or the snapshot's).
        previous: u64,
        /// This event's revision.
        revision: u64,
    },
    /// Reliable: the key's committed write at `missed` was skipped before this event.
    Skipped {
        /// The event after the gap.
        event: usize,
        /// The revision of a skipped write.
        missed: u64,
    },
    /// Atomic: another item sits among the events of `revision`.
    Interleaved {
        /// The revision.
        revision: u64,
        /// The intruding item.
        event: usize,
    },
    /// Atomic: only part of a revision's writes were delivered.
    Torn {
        /// The revision.
        revision: u64,
        /// Keys delivered at it.
        delivered: usize,
        /// Writes committed at it.
        committed: usize,
    },
    /// The snapshot equals the range's state at no revision.
    InconsistentSnapshot {
        /// The snapshot.
        event: usize,
    },
}

impl fmt::Display for WatchViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchViolation::Phantom { event } => write!(f, "event {event} matches no committed write"),
            WatchViolation::Duplicate { event, first } => write!(f, "event {event} repeats event {first}"),
            WatchViolation::OutOfOrder {
                event,
                previous,
                revision,
            } => write!(
                f,
                "event {event} at revision {revision} follows revision {previous} of its key"
            ),
            WatchViolation::Skipped { event, missed } => {
                write!(
                    f,
                    "before event {event}, the key's write at revision {missed} was skipped"
                )
            }
            WatchViolation::Interleaved { revision, event } => {
                write!(f, "item {event} splits the events of revision {revision}")
            }
            WatchViolation::Torn {
                revision,
                delivered,
                committed,
            } => write!(
                f,
                "revision {revision}: {delivered} of {committed} writes delivered"
            ),
            WatchViolation::InconsistentSnapshot { event } => {
                write!(f, "snapshot {event} is the range's state at no revision")
            }
        }
    }
}

type State<'a, K, V> = BTreeMap<&'a K, (&'a V, u64)>;

struct Truth<'a, K, V> {
    /// Writes by revision, in commit order.
    by_revision: BTreeMap<u64, Vec<&'a Write<K, V>>>,
    /// Each key's writes, by revision.
    by_key: BTreeMap<&'a K, BTreeMap<u64, &'a Write<K, V>>>,
}

impl<'a, K: Ord, V: Eq> Truth<'a, K, V> {
    fn new(truth: &'a [Write<K, V>]) -> Self {
        let mut by_revision: BTreeMap<u64, Vec<&Write<K, V>>> = BTreeMap::new();
        let mut by_key: BTreeMap<&K, BTreeMap<u64, &Write<K, V>>> = BTreeMap::new();
        for w in truth {
            by_revision.entry(w.revision).or_default().push(w);
            by_key.entry(&w.key).or_default().insert(w.revision, w);
        }
        Truth { by_revision, by_key }
    }

    fn write(&self, key: &K, revision: u64) -> Option<&'a Write<K, V>> {
        self.by_key.get(key)?.get(&revision).copied()
    }

    /// The key's writes strictly between two revisions.
    fn between(&self, key: &K, after: u64, before: u64) -> impl Iterator<Item = &'a Write<K, V>> + '_ {
        let writes = (after < before).then(|| self.by_key.get(key)).flatten();
        writes
            .into_iter()
            .flat_map(move |w| w.range(after.saturating_add(1)..before).map(|(_, w)| *w))
    }

    /// Revisions at which the range's state equals `snapshot` (`0`: before any write).
    fn matches(&self, snapshot: &State<'_, K, V>) -> Vec<u64> {
        let mut state: BTreeMap<&K, (&V, u64)> = BTreeMap::new();
        let same = |state: &BTreeMap<&K, (&V, u64)>| {
            state.len() == snapshot.len()
                && state
                    .iter()
                    .zip(snapshot)
                    .all(|((k1, (v1, r1)), (k2, (v2, r2)))| k1 == k2 && v1 == v2 && r1 == r2)
        };
        let mut out = Vec::new();
        if same(&state) {
            out.push(0);
        }
        for (&revision, writes) in &self.by_revision {
            for w in writes {
                match &w.kind {
                    WriteKind::Put(v) => state.insert(&w.key, (v, revision)),
                    WriteKind::Delete => state.remove(&w.key),
                };
            }
            if same(&state) {
                out.push(revision);
            }
        }
        out
    }
}

/// Per-key position of the stream in the ground truth.
struct Cursors<'a, K> {
    known: BTreeMap<&'a K, Option<u64>>,
    default: Option<u64>,
}

impl<'a, K: Ord> Cursors<'a, K> {
    fn get(&self, key: &K) -> Option<u64> {
        self.known.get(key).copied().unwrap_or(self.default)
    }

    fn reset(&mut self, default: Option<u64>) {
        self.known.clear();
        self.default = default;
    }
}

/// The checker's state while it reads a stream.
struct Judge<'a, K, V> {
    truth: Truth<'a, K, V>,
    cursors: Cursors<'a, K>,
    /// Events delivered, by key and revision: the first position.
    seen: BTreeMap<(&'a K, u64), usize>,
    /// Events with a known revision: position and key, by revision.
    delivered: BTreeMap<u64, Vec<(usize, &'a K)>>,
    violations: Vec<WatchViolation>,
}

impl<'a, K: Ord, V: Eq> Judge<'a, K, V> {
    /// Valid, unique, ordered and reliable, for an event with a known revision.
    fn revisioned(&mut self, event: usize, key: &'a K, revision: u64, valid: bool) {
        self.delivered.entry(revision).or_default().push((event, key));
        if !valid {
            self.violations.push(WatchViolation::Phantom { event });
        }
        if let Some(first) = self.seen.insert((key, revision), event) {
            self.violations.push(WatchViolation::Duplicate { event, first });
            return;
        }
        match self.cursors.get(key) {
            Some(previous) if revision <= previous => {
                self.violations.push(WatchViolation::OutOfOrder {
                    event,
                    previous,
                    revision,
                });
            }
            previous => {
                if valid
                    && let Some(c) = previous
                    && let Some(missed) = self.truth.between(key, c, revision).next()
                {
                    self.violations.push(WatchViolation::Skipped {
                        event,
                        missed: missed.revision,
                    });
                }
                self.cursors.known.insert(key, Some(revision));
            }
        }
    }

    /// Ordered and reliable, for a delete without a revision: it must be the key's next
    /// committed delete.
    fn unrevisioned_delete(&mut self, event: usize, key: &'a K) {
        let Some(c) = self.cursors.get(key) else {
            return;
        };
        let next_delete = self
            .truth
            .between(key, c, u64::MAX)
            .find(|w| matches!(w.kind, WriteKind::Delete))
            .map(|w| w.revision);
        match next_delete {
            None => self.violations.push(WatchViolation::Phantom { event }),
            Some(d) => {
                if let Some(missed) = self.truth.between(key, c, d).next() {
                    self.violations.push(WatchViolation::Skipped {
                        event,
                        missed: missed.revision,
                    });
                }
                self.cursors.known.insert(key, Some(d));
            }
        }
    }

    /// Locates a snapshot in the ground truth and moves every cursor there.
    fn snapshot(&mut self, event: usize, entries: &'a [(K, V, u64)], next: Option<u64>) {
        let snapshot: State<'_, K, V> = entries.iter().map(|(k, v, r)| (k, (v, *r))).collect();
        let candidates = self.truth.matches(&snapshot);
        // The latest revision with that state before the stream's next events.
        let located = candidates
            .iter()
            .rev()
            .find(|&&r| next.is_none_or(|n| r < n))
            .or(candidates.last());
        match located {
            Some(&r) => self.cursors.reset(Some(r)),
            None => {
                self.violations
                    .push(WatchViolation::InconsistentSnapshot { event });
                self.cursors.reset(None);
                for (k, (_, r)) in snapshot {
                    self.cursors.known.insert(k, Some(r));
                }
            }
        }
    }

    /// Atomic: each delivered revision contiguous and complete.
    fn atomic(&mut self, events: &[WatchEvent<K, V>], unrevisioned_deletes: usize) {
        for (&revision, delivered) in &self.delivered {
            let (Some(&(first, _)), Some(&(last, _))) = (delivered.first(), delivered.last()) else {
                continue;
            };
            let intruder = (first..=last).find(|&i| {
                revision_of(&events[i]) != Some(revision)
                    && !matches!(events[i], WatchEvent::Delete { revision: 0, .. })
            });
            if let Some(event) = intruder {
                self.violations
                    .push(WatchViolation::Interleaved { revision, event });
            }
            let Some(committed) = self.truth.by_revision.get(&revision) else {
                continue;
            };
            let got: BTreeSet<&K> = delivered.iter().map(|(_, k)| *k).collect();
            let missing: Vec<_> = committed.iter().filter(|w| !got.contains(&w.key)).collect();
            let torn = missing.iter().any(|w| matches!(w.kind, WriteKind::Put(_)))
                || (!missing.is_empty() && unrevisioned_deletes == 0);
            if torn {
                self.violations.push(WatchViolation::Torn {
                    revision,
                    delivered: got.len(),
                    committed: committed.len(),
                });
            }
        }
    }
}

/// Checks one watcher's stream against the committed writes of its range.
pub fn check<K, V>(truth: &[Write<K, V>], events: &[WatchEvent<K, V>]) -> Report<WatchSummary, WatchViolation>
where
    K: Ord,
    V: Eq,
{
    let mut judge = Judge {
        truth: Truth::new(truth),
        cursors: Cursors {
            known: BTreeMap::new(),
            default: Some(0),
        },
        seen: BTreeMap::new(),
        delivered: BTreeMap::new(),
        violations: Vec::new(),
    };
    let mut summary = WatchSummary {
        events: events.len(),
        ..WatchSummary::default()
    };
    for (event, item) in events.iter().enumerate() {
        match item {
            WatchEvent::Resync => {
                summary.resyncs += 1;
                judge.cursors.reset(None);
            }
            WatchEvent::Snapshot(entries) => {
                summary.snapshots += 1;
                // The snapshot precedes every later event of its epoch.
                let next = events[event + 1..]
                    .iter()
                    .take_while(|e| !matches!(e, WatchEvent::Snapshot(_) | WatchEvent::Resync))
                    .filter_map(revision_of)
                    .min();
                judge.snapshot(event, entries, next);
            }
            WatchEvent::Put {
                key,
                value,
                mod_revision,
            } => {
                let valid = judge
                    .truth
                    .write(key, *mod_revision)
                    .is_some_and(|w| matches!(&w.kind, WriteKind::Put(v) if v == value));
                judge.revisioned(event, key, *mod_revision, valid);
            }
            WatchEvent::Delete { key, revision: 0 } => {
                summary.unrevisioned_deletes += 1;
                judge.unrevisioned_delete(event, key);
            }
            WatchEvent::Delete { key, revision } => {
                let valid = judge
                    .truth
                    .write(key, *revision)
                    .is_some_and(|w| matches!(w.kind, WriteKind::Delete));
                judge.revisioned(event, key, *revision, valid);
            }
        }
    }
    judge.atomic(events, summary.unrevisioned_deletes);
    Report {
        summary,
        violations: judge.violations,
    }
}

/// The known revision of a put or delete event.
fn revision_of<K, V>(event: &WatchEvent<K, V>) -> Option<u64> {
    match event {
        WatchEvent::Put { mod_revision, .. } => Some(*mod_revision),
        WatchEvent::Delete { revision, .. } if *revision != 0 => Some(*revision),
        _ => None,
    }
}

/// The watcher's view after its stream: a snapshot replaces it, puts and deletes apply.
pub fn view<K: Ord + Clone, V: Clone>(events: &[WatchEvent<K, V>]) -> BTreeMap<K, V> {
    let mut view = BTreeMap::new();
    for event in events {
        match event {
            WatchEvent::Snapshot(entries) => {
                view = entries.iter().map(|(k, v, _)| (k.clone(), v.clone())).collect();
            }
            WatchEvent::Put { key, value, .. } => {
                view.insert(key.clone(), value.clone());
            }
            WatchEvent::Delete { key, .. } => {
                view.remove(key);
            }
            WatchEvent::Resync => {}
        }
    }
    view
}

/// The range's state after the committed writes (in revision order).
pub fn store<K: Ord + Clone, V: Clone>(truth: &[Write<K, V>]) -> BTreeMap<K, V> {
    let mut sorted: Vec<&Write<K, V>> = truth.iter().collect();
    sorted.sort_by_key(|w| w.revision);
    let mut state = BTreeMap::new();
    for w in sorted {
        match &w.kind {
            WriteKind::Put(v) => state.insert(w.key.clone(), v.clone()),
            WriteKind::Delete => state.remove(&w.key),
        };
    }
    state
}

/// A key on which a watcher's final view and the store differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence<K, V> {
    /// The key.
    pub key: K,
    /// The watcher's value.
    pub view: Option<V>,
    /// The store's value.
    pub store: Option<V>,
}

/// Whether a watcher converged: once writes stop and its stream is drained, its view
/// (e.g. from [`view`]) equals the store (e.g. from [`store`] or a final read).
///
/// # Errors
///
/// The keys on which they differ.
pub fn converges<K: Ord + Clone, V: Eq + Clone>(
    view: &BTreeMap<K, V>,
    store: &BTreeMap<K, V>,
) -> Result<(), Vec<Divergence<K, V>>> {
    let keys: BTreeSet<&K> = view.keys().chain(store.keys()).collect();
    let diverged: Vec<Divergence<K, V>> = keys
        .into_iter()
        .filter(|k| view.get(*k) != store.get(*k))
        .map(|k| Divergence {
            key: k.clone(),
            view: view.get(k).cloned(),
            store: store.get(k).cloned(),
        })
        .collect();
    if diverged.is_empty() {
        Ok(())
    } else {
        Err(diverged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = WatchEvent<&'static str, u32>;

    fn put(revision: u64, key: &'static str, v: u32) -> Write<&'static str, u32> {
        Write {
            revision,
            key,
            kind: WriteKind::Put(v),
        }
    }
    fn del(revision: u64, key: &'static str) -> Write<&'static str, u32> {
        Write {
            revision,
            key,
            kind: WriteKind::Delete,
        }
    }
    /// The events a perfect watcher would see for `truth`.
    fn events(truth: &[Write<&'static str, u32>]) -> Vec<E> {
        truth
            .iter()
            .map(|w| match w.kind {
                WriteKind::Put(v) => E::Put {
                    key: w.key,
                    value: v,
                    mod_revision: w.revision,
                },
                WriteKind::Delete => E::Delete {
                    key: w.key,
                    revision: w.revision,
                },
            })
            .collect()
    }
    fn truth() -> Vec<Write<&'static str, u32>> {
        vec![
            put(2, "a", 1),
            put(3, "b", 1),
            put(3, "c", 1),
            put(4, "a", 2),
            del(5, "b"),
            put(6, "a", 3),
        ]
    }

    #[test]
    fn accepts_a_faithful_stream_and_converges() {
        let t = truth();
        let e = events(&t);
        let report = check(&t, &e);
        assert!(report.is_ok(), "{report}");
        assert_eq!(converges(&view(&e), &store(&t)), Ok(()));
        // Deletes without revisions are matched by order.
        let mut e = e;
        e[4] = E::Delete {
            key: "b",
            revision: 0,
        };
        assert!(check(&t, &e).is_ok());
    }

    #[test]
    fn rejects_out_of_order_duplicate_and_phantom_events() {
        let t = truth();
        let mut e = events(&t);
        e.swap(3, 5); // a@6 before a@4
        let v = check(&t, &e).violations;
        assert!(v.contains(&WatchViolation::OutOfOrder {
            event: 5,
            previous: 6,
            revision: 4
        }));

        let mut e = events(&t);
        e.push(e[3].clone());
        assert!(
            check(&t, &e)
                .violations
                .contains(&WatchViolation::Duplicate { event: 6, first: 3 })
        );

        let mut e = events(&t);
        e[0] = E::Put {
            key: "a",
            value: 9,
            mod_revision: 2,
        };
        assert_eq!(
            check(&t, &e).violations,
            vec![WatchViolation::Phantom { event: 0 }]
        );
    }

    #[test]
    fn rejects_torn_and_interleaved_revisions() {
        let t = truth();
        let mut e = events(&t);
        e.remove(2); // c@3 missing
        let v = check(&t, &e).violations;
        assert!(v.contains(&WatchViolation::Torn {
            revision: 3,
            delivered: 1,
            committed: 2
        }));
        let mut e = events(&t);
        e.insert(2, E::Resync);
        let v = check(&t, &e).violations;
        assert!(v.contains(&WatchViolation::Interleaved {
            revision: 3,
            event: 2
        }));
    }

    #[test]
    fn rejects_skipped_writes_but_not_after_a_resync() {
        let t = truth();
        let mut e = events(&t);
        e.remove(3); // a@4 skipped
        assert!(
            check(&t, &e)
                .violations
                .contains(&WatchViolation::Skipped { event: 4, missed: 4 })
        );
        // A delete without revision whose key's put was skipped.
        let e: Vec<E> = vec![
            E::Put {
                key: "b",
                value: 1,
                mod_revision: 3,
            },
            E::Delete {
                key: "b",
                revision: 0,
            },
        ];
        let t2 = vec![put(3, "b", 1), put(4, "b", 2), del(5, "b")];
        assert_eq!(
            check(&t2, &e).violations,
            vec![WatchViolation::Skipped { event: 1, missed: 4 }]
        );
        // Declared loss: no gap check after a resync.
        let mut e = events(&t);
        e[3] = E::Resync;
        assert!(check(&t, &e).is_ok());
    }

    #[test]
    fn snapshots_locate_the_stream() {
        let t = truth();
        // The state at revision 3, then everything after it.
        let mut e = vec![E::Snapshot(vec![("a", 1, 2), ("b", 1, 3), ("c", 1, 3)])];
        e.extend(events(&t[3..]));
        let report = check(&t, &e);
        assert!(report.is_ok(), "{report}");
        assert_eq!(converges(&view(&e), &store(&t)), Ok(()));
        // The first event after the snapshot skips a@4.
        let mut skipping = e.clone();
        skipping.remove(1);
        assert!(
            check(&t, &skipping)
                .violations
                .contains(&WatchViolation::Skipped { event: 2, missed: 4 })
        );
        // An event already inside the snapshot.
        let mut stale = e.clone();
        stale.insert(1, events(&t)[0].clone());
        assert!(matches!(
            check(&t, &stale).violations[0],
            WatchViolation::OutOfOrder { .. }
        ));
        // A snapshot that never was the state.
        let bad = vec![E::Snapshot(vec![("a", 2, 4), ("b", 1, 3)])];
        assert_eq!(
            check(&t, &bad).violations,
            vec![WatchViolation::InconsistentSnapshot { event: 0 }]
        );
    }

    #[test]
    fn divergence_is_reported() {
        let t = truth();
        let mut e = events(&t);
        e.pop();
        e.push(E::Resync);
        let diverged = converges(&view(&e), &store(&t)).unwrap_err();
        assert_eq!(
            diverged,
            vec![Divergence {
                key: "a",
                view: Some(2),
                store: Some(3)
            }]
        );
    }
}
