//! Watcher-side state shared by backends: the entries of an observed queue, and
//! the instances of a watched service, turned into the events the API promises.

use std::collections::BTreeMap;

use crate::fencing::FencingToken;
use crate::types::{Head, RegistryEvent, ServiceInstance};

/// An observer's view of a queue's entries (by key): the head is the one with the lowest
/// token (an election's leader).
#[derive(Debug, Default)]
pub struct HeadTracker {
    candidates: BTreeMap<String, (FencingToken, Vec<u8>)>,
}

impl HeadTracker {
    /// Replaces every candidate (after a snapshot).
    pub fn reset(&mut self, candidates: impl IntoIterator<Item = (String, FencingToken, Vec<u8>)>) {
        self.candidates = candidates.into_iter().map(|(k, t, v)| (k, (t, v))).collect();
    }

    /// A candidate was created or changed its value.
    pub fn put(&mut self, key: String, token: FencingToken, value: Vec<u8>) {
        self.candidates.insert(key, (token, value));
    }

    /// A candidate left.
    pub fn remove(&mut self, key: &str) {
        self.candidates.remove(key);
    }

    /// Every candidate, in token order.
    pub fn members(&self) -> Vec<crate::raw::Member> {
        let mut all: Vec<crate::raw::Member> = self
            .candidates
            .iter()
            .map(|(k, (t, v))| crate::raw::Member {
                path: k.clone(),
                token: *t,
                value: v.clone(),
            })
            .collect();
        all.sort_by_key(|m| m.token);
        all
    }

    /// The head now: the entry with the lowest token.
    pub fn head(&self) -> Option<Head> {
        self.candidates
            .values()
            .min_by_key(|(t, _)| *t)
            .map(|(t, v)| Head {
                token: *t,
                value: v.clone(),
            })
    }
}

/// A watcher's view of a service's instances, by id; turns updates into
/// [`RegistryEvent`]s.
#[derive(Debug, Default)]
pub struct InstanceTracker {
    known: BTreeMap<String, ServiceInstance>,
}

impl InstanceTracker {
    /// Replaces the view and returns the `Snapshot` event.
    pub fn snapshot(&mut self, instances: BTreeMap<String, ServiceInstance>) -> RegistryEvent {
        self.known = instances;
        RegistryEvent::Snapshot(self.known.values().cloned().collect())
    }

    /// The view as a `Snapshot` event.
    pub fn current(&self) -> RegistryEvent {
        RegistryEvent::Snapshot(self.known.values().cloned().collect())
    }

    /// An instance was written: `Joined`, `Updated`, or nothing if unchanged.
    pub fn put(&mut self, id: String, instance: ServiceInstance) -> Option<RegistryEvent> {
        match self.known.insert(id, instance.clone()) {
            None => Some(RegistryEvent::Joined(instance)),
            Some(old) if old == instance => None,
            Some(_) => Some(RegistryEvent::Updated(instance)),
        }
    }

    /// An instance was deleted: `Left`, or nothing if it was unknown.
    pub fn remove(&mut self, id: &str) -> Option<RegistryEvent> {
        self.known.remove(id).map(|_| RegistryEvent::Left(id.to_owned()))
    }

    /// The events that bring the view to `now` (for backends that re-read).
    pub fn diff_to(&mut self, now: BTreeMap<String, ServiceInstance>) -> Vec<RegistryEvent> {
        let mut out: Vec<RegistryEvent> = self
            .known
            .keys()
            .filter(|id| !now.contains_key(*id))
            .map(|id| RegistryEvent::Left(id.clone()))
            .collect();
        for (id, inst) in &now {
            match self.known.get(id) {
                None => out.push(RegistryEvent::Joined(inst.clone())),
                Some(o) if o != inst => out.push(RegistryEvent::Updated(inst.clone())),
                Some(_) => {}
            }
        }
        self.known = now;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_token_leads() {
        let mut t = HeadTracker::default();
        assert_eq!(t.head(), None);
        t.put("b".into(), FencingToken(5), b"b".to_vec());
        t.put("a".into(), FencingToken(3), b"a".to_vec());
        assert_eq!(t.head().map(|l| l.token), Some(FencingToken(3)));
        t.put("b".into(), FencingToken(5), b"b2".to_vec());
        t.remove("a");
        assert_eq!(t.head().map(|l| l.value), Some(b"b2".to_vec()));
        t.reset([]);
        assert_eq!(t.head(), None);
    }

    #[test]
    fn instances_diff() {
        let mut t = InstanceTracker::default();
        let a = ServiceInstance::new("a", "h:1");
        t.snapshot([("a".to_owned(), a.clone())].into());
        assert_eq!(t.put("a".into(), a.clone()), None);
        let b = ServiceInstance::new("b", "h:2");
        assert_eq!(
            t.diff_to([("b".to_owned(), b.clone())].into()),
            vec![RegistryEvent::Left("a".into()), RegistryEvent::Joined(b)]
        );
        assert_eq!(t.remove("b"), Some(RegistryEvent::Left("b".into())));
        assert_eq!(t.remove("b"), None);
    }
}
