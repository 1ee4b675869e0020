//! The in-memory "server" that `coord-mem` clients talk to, as the ZooKeeper and etcd
//! backends talk to theirs: a keyspace with revisions, an event history, sessions with
//! deadlines, and one-shot key watches. Clients of one [`MemCluster`] behave like
//! separate nodes of one deployment.
//!
//! Applications use it only to give clients a cluster of their own, and for fault
//! injection (`expire_session`, `compact`, `delete_key`, the record of writes); the
//! keyspace API ([`State`]) is what the `coord-mem` client speaks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// How many events the history keeps before compacting the oldest automatically.
const HISTORY_LIMIT: usize = 10_000;

/// One stored key.
#[derive(Debug, Clone)]
pub struct KeyData {
    /// The stored value.
    pub value: Vec<u8>,
    /// The revision that created the key (its queue order and fencing token).
    pub create_rev: u64,
    /// The revision of its last write (its config version).
    pub mod_rev: u64,
    /// The session the key is bound to, for ephemeral keys.
    pub owner: Option<u64>,
}

/// One change in the history.
#[derive(Debug, Clone)]
pub struct Event {
    /// The revision of the change.
    pub revision: u64,
    /// The key changed.
    pub key: String,
    /// `None` for a delete.
    pub data: Option<KeyData>,
}

#[derive(Debug)]
struct SessionData {
    ttl: Duration,
    deadline: Instant,
    /// Told when the server expires or closes the session.
    expired: watch::Sender<bool>,
}

/// The cluster's keyspace, history and sessions, as one request sees them (through
/// [`MemCluster::with`]).
#[derive(Debug, Default)]
pub struct State {
    revision: u64,
    keys: BTreeMap<String, KeyData>,
    history: VecDeque<Event>,
    /// Events with a revision at or below this are gone from the history.
    compacted: u64,
    sessions: HashMap<u64, SessionData>,
    next_session: u64,
    delete_watches: HashMap<String, Vec<oneshot::Sender<()>>>,
    /// Every write since [`MemCluster::record_writes`], never compacted.
    audit: Option<Vec<Event>>,
}

/// Why a history read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted;

impl State {
    /// The latest revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The key, if present.
    pub fn get(&self, key: &str) -> Option<&KeyData> {
        self.keys.get(key)
    }

    /// Keys starting with `prefix` (plain string prefix), sorted.
    pub fn range(&self, prefix: &str) -> impl Iterator<Item = (&String, &KeyData)> {
        self.keys
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Whether session `id` is alive.
    pub fn session_alive(&self, id: u64) -> bool {
        self.sessions.contains_key(&id)
    }

    /// Creates or replaces `key`; returns its data.
    pub fn put(&mut self, key: &str, value: Vec<u8>, owner: Option<u64>) -> KeyData {
        self.revision += 1;
        let rev = self.revision;
        let data = match self.keys.get(key) {
            Some(old) => KeyData {
                value,
                create_rev: old.create_rev,
                mod_rev: rev,
                owner: old.owner.or(owner),
            },
            None => KeyData {
                value,
                create_rev: rev,
                mod_rev: rev,
                owner,
            },
        };
        self.keys.insert(key.to_owned(), data.clone());
        self.record(Event {
            revision: rev,
            key: key.to_owned(),
            data: Some(data.clone()),
        });
        data
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&mut self, key: &str) -> bool {
        if self.keys.remove(key).is_none() {
            return false;
        }
        self.revision += 1;
        let rev = self.revision;
        self.record(Event {
            revision: rev,
            key: key.to_owned(),
            data: None,
        });
        for tx in self.delete_watches.remove(key).unwrap_or_default() {
            let _ = tx.send(());
        }
        true
    }

    fn record(&mut self, event: Event) {
        if let Some(audit) = &mut self.audit {
            audit.push(event.clone());
        }
        self.history.push_back(event);
        while self.history.len() > HISTORY_LIMIT {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.revision;
            }
        }
    }

    /// Events after `after` whose key starts with `prefix`.
    pub fn events_after(&self, after: u64, prefix: &str) -> Result<Vec<Event>, Compacted> {
        if after < self.compacted {
            return Err(Compacted);
        }
        Ok(self
            .history
            .iter()
            .filter(|e| e.revision > after && e.key.starts_with(prefix))
            .cloned()
            .collect())
    }

    /// Arms a one-shot watch that fires when `key` is deleted; `None` if it is already
    /// gone.
    pub fn watch_delete(&mut self, key: &str) -> Option<oneshot::Receiver<()>> {
        if !self.keys.contains_key(key) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let watches = self.delete_watches.entry(key.to_owned()).or_default();
        watches.retain(|w| !w.is_closed());
        watches.push(tx);
        Some(rx)
    }

    /// A new session of `ttl`: its id, and a channel told when it ends.
    pub fn grant_session(&mut self, ttl: Duration) -> (u64, watch::Receiver<bool>) {
        self.next_session += 1;
        let id = self.next_session;
        let (tx, rx) = watch::channel(false);
        self.sessions.insert(
            id,
            SessionData {
                ttl,
                deadline: Instant::now() + ttl,
                expired: tx,
            },
        );
        (id, rx)
    }

    /// Extends the session; false if it is gone.
    pub fn keep_alive(&mut self, id: u64) -> bool {
        match self.sessions.get_mut(&id) {
            Some(s) => {
                s.deadline = Instant::now() + s.ttl;
                true
            }
            None => false,
        }
    }

    /// Ends session `id` and deletes its keys (expiry, revoke or close).
    pub fn end_session(&mut self, id: u64) -> bool {
        let Some(session) = self.sessions.remove(&id) else {
            return false;
        };
        let owned: Vec<String> = self
            .keys
            .iter()
            .filter(|(_, d)| d.owner == Some(id))
            .map(|(k, _)| k.clone())
            .collect();
        for key in owned {
            self.delete(&key);
        }
        let _ = session.expired.send(true);
        tracing::debug!(session = id, "coord.mem.session_ended");
        true
    }

    /// Expires every session whose deadline has passed.
    pub fn sweep(&mut self) {
        let now = Instant::now();
        let overdue: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in overdue {
            self.end_session(id);
        }
    }

    /// Drops the whole event history (watchers behind it must resynchronise).
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.revision;
    }
}

/// A shared in-memory cluster. Clients opened on the same cluster see each other; each
/// behaves as a separate node with its own session.
///
/// [`MemCluster::global`] is the process-wide cluster behind `mem://` connection
/// strings; tests usually create their own with [`MemCluster::new`].
///
/// # Time
///
/// Sessions expire on tokio's clock, so tests can use `tokio::time::pause()` and
/// `advance()` to move through session timeouts instantly. Expiry is checked whenever
/// any client of the cluster talks to it (and every client keeps alive at TTL/3), so a
/// crashed client's session ends within TTL + TTL/3 while any other client is running.
#[derive(Clone, Debug, Default)]
pub struct MemCluster {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// The latest revision, for watchers to wait on.
    revision: OnceLock<watch::Sender<u64>>,
}

impl MemCluster {
    /// A new, empty cluster.
    pub fn new() -> Self {
        MemCluster::default()
    }

    /// The process-wide cluster used by `mem://` connection strings.
    pub fn global() -> MemCluster {
        static GLOBAL: OnceLock<MemCluster> = OnceLock::new();
        GLOBAL.get_or_init(MemCluster::new).clone()
    }

    /// Expires session `id` from the server side, as a ZooKeeper session expiry or an
    /// etcd lease revoke would: its ephemeral keys are deleted at once and its client is
    /// told. Returns false if no such session is alive.
    pub fn expire_session(&self, id: u64) -> bool {
        self.with(|s| s.end_session(id))
    }

    /// Drops the whole event history: watchers that are behind (e.g. of a suspended
    /// client) will see a gap and report `Resync`.
    pub fn compact(&self) {
        self.with(State::compact)
    }

    /// The number of live sessions.
    pub fn session_count(&self) -> usize {
        self.with(|s| {
            s.sweep();
            s.sessions.len()
        })
    }

    /// The number of keys stored (every namespace), e.g. to check that nothing leaked.
    pub fn key_count(&self) -> usize {
        self.with(|s| s.keys.len())
    }

    /// Every key starting with `prefix`, sorted (what an operator listing the store
    /// would see).
    pub fn keys_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.with(|s| s.range(prefix).map(|(k, _)| k.clone()).collect())
    }

    /// Starts keeping every write from now on, compaction or not: the ground truth that
    /// a test judges watch streams against ([`MemCluster::writes`]).
    pub fn record_writes(&self) {
        self.with(|s| {
            s.audit.get_or_insert_with(Vec::new);
        });
    }

    /// Every write recorded since [`MemCluster::record_writes`] to a key starting with
    /// `prefix`, in commit order: its revision, key, and value (`None` for a delete).
    pub fn writes(&self, prefix: &str) -> Vec<(u64, String, Option<Vec<u8>>)> {
        self.with(|s| {
            s.audit
                .iter()
                .flatten()
                .filter(|e| e.key.starts_with(prefix))
                .map(|e| {
                    (
                        e.revision,
                        e.key.clone(),
                        e.data.as_ref().map(|d| d.value.clone()),
                    )
                })
                .collect()
        })
    }

    /// Deletes `key` from outside any client, as an operator would (watchers and a
    /// holder of that key are told). Returns whether it existed.
    pub fn delete_key(&self, key: &str) -> bool {
        self.with(|s| s.delete(key))
    }

    /// Runs `f` on the state, then publishes the new revision to watchers.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (result, rev) = {
            let mut state = self.lock_state();
            let r = f(&mut state);
            (r, state.revision)
        };
        self.revision_tx().send_if_modified(|r| {
            if *r != rev {
                *r = rev;
                true
            } else {
                false
            }
        });
        result
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way
        // that matters more than losing the cluster, so keep serving.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn revision_tx(&self) -> &watch::Sender<u64> {
        self.shared.revision.get_or_init(|| watch::channel(0).0)
    }

    /// A receiver of the latest revision.
    pub fn revisions(&self) -> watch::Receiver<u64> {
        self.revision_tx().subscribe()
    }
}
