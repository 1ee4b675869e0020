//! What the recipes' entries under a namespace mean: who holds each lock and who waits,
//! which semaphore leases are out, who leads each election, how deep each queue is —
//! read from the same layouts the recipes write, and Curator's, kazoo's and Go's.
//!
//! One [`Queue::survey`](crate::raw::Queue::survey) per recipe directory finds every
//! session-bound entry in it; the config store gives the queues' items and the two-phase
//! commits' plans and decisions. The admission rules here are the recipes' own: the
//! first entry of a lock or an election holds it; a read/write lock's readers ahead of
//! the first writer hold it together; a semaphore's first `permits` leases are held.

use std::time::{Duration, SystemTime};

use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::name::{key_matches_prefix, validate_name};
use crate::primitives::config::ConfigStore as _;
use crate::raw::Surveyed;

/// The kinds of recipe [`Client::inspect`] recognises, by the directory their entries
/// live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RecipeKind {
    /// A lock (`locks/<name>`): Curator's `InterProcessMutex`, kazoo's `Lock`, Go's
    /// `concurrency.Mutex` and `etcdctl lock` on the same paths.
    Lock,
    /// A read/write lock (`rwlocks/<name>`).
    RwLock,
    /// A counting semaphore (`semaphores/<name>`): leases and acquirers.
    Semaphore,
    /// An election (`elections/<name>`): Curator's `LeaderLatch`, Go's
    /// `concurrency.Election` and `etcdctl elect`.
    Election,
    /// A service of the registry (`services/<name>`): its instances.
    Service,
    /// A distributed queue: its items (config keys `<name>/items/…`) and the consumers
    /// waiting to take one (`queues/<name>/takers`).
    Queue,
    /// A double barrier (`barriers/<name>`): its members.
    DoubleBarrier,
    /// A two-phase commit (`transactions/<name>`): its coordinator, votes, plan and
    /// decision.
    TwoPhaseCommit,
}

impl RecipeKind {
    /// Every kind, in the order [`Client::inspect`] reports them.
    pub const ALL: [RecipeKind; 8] = [
        RecipeKind::Lock,
        RecipeKind::RwLock,
        RecipeKind::Semaphore,
        RecipeKind::Election,
        RecipeKind::Service,
        RecipeKind::Queue,
        RecipeKind::DoubleBarrier,
        RecipeKind::TwoPhaseCommit,
    ];

    /// The kind's name in output: `lock`, `rwlock`, `semaphore`, `election`, `service`,
    /// `queue`, `double_barrier`, `transaction`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecipeKind::Lock => "lock",
            RecipeKind::RwLock => "rwlock",
            RecipeKind::Semaphore => "semaphore",
            RecipeKind::Election => "election",
            RecipeKind::Service => "service",
            RecipeKind::Queue => "queue",
            RecipeKind::DoubleBarrier => "double_barrier",
            RecipeKind::TwoPhaseCommit => "transaction",
        }
    }

    /// The directory (relative to the namespace) the kind's session-bound entries live
    /// under.
    fn root(self) -> &'static str {
        match self {
            RecipeKind::Lock => "locks",
            RecipeKind::RwLock => "rwlocks",
            RecipeKind::Semaphore => "semaphores",
            RecipeKind::Election => "elections",
            RecipeKind::Service => "services",
            RecipeKind::Queue => "queues",
            RecipeKind::DoubleBarrier => "barriers",
            RecipeKind::TwoPhaseCommit => "transactions",
        }
    }
}

impl std::fmt::Display for RecipeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which client library's layout made an entry, as far as its name tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// coord (on ZooKeeper its protected names carry a version-8 guid).
    Coord,
    /// Curator: a protected name `_c_<guid>-…` with Curator's random (version-4) guid,
    /// or an unprotected `lock-`/`latch-`/`lease-` name.
    Curator,
    /// kazoo: `<guid hex>__lock__<seq>` with kazoo's random guid.
    Kazoo,
    /// A key named by its lease (`<prefix>/<lease hex>`): etcd's `concurrency` layout,
    /// which coord and Go's `concurrency`, `recipes` and `etcdctl lock`/`elect` share, so
    /// the name cannot tell them apart; coord's command line stores `host:pid` as the
    /// value, Go's `Mutex` stores nothing.
    Concurrency,
    /// A name none of the layouts above makes.
    Other,
}

impl Origin {
    /// `coord`, `curator`, `kazoo`, `concurrency`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Coord => "coord",
            Origin::Curator => "curator",
            Origin::Kazoo => "kazoo",
            Origin::Concurrency => "concurrency",
            Origin::Other => "other",
        }
    }

    /// Tells the origin of an entry from its name.
    fn of(name: &str) -> Origin {
        // A version-8 guid is coord's; Curator and kazoo use random (version-4) ones.
        let version_of = |guid: &str, at: usize| guid.as_bytes().get(at).copied();
        if let Some(rest) = name.strip_prefix("_c_") {
            let guid = rest.get(..36).unwrap_or("");
            return match version_of(guid, 14) {
                Some(b'8') if guid.len() == 36 => Origin::Coord,
                _ => Origin::Curator,
            };
        }
        if let Some(at) = name.find("__") {
            let guid = &name[..at];
            if guid.len() == 32 && guid.bytes().all(|b| b.is_ascii_hexdigit()) {
                return if version_of(guid, 12) == Some(b'8') {
                    Origin::Coord
                } else {
                    Origin::Kazoo
                };
            }
            return Origin::Other;
        }
        if ["lock-", "latch-", "lease-"].iter().any(|m| name.starts_with(m)) {
            return Origin::Curator;
        }
        let lease = name.split(['-', '.']).next().unwrap_or("");
        if !lease.is_empty() && lease.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Origin::Concurrency;
        }
        Origin::Other
    }
}

/// One entry of a recipe: a holder, a waiter, a candidate, a vote, an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Its fencing token (creation order).
    pub token: FencingToken,
    /// Its role where the recipe has several: `read`/`write` (read/write lock),
    /// `lease`/`acquirer` (semaphore), `coordinator`/`vote` (two-phase commit); empty
    /// otherwise.
    pub role: &'static str,
    /// Its value: the identity a lock was taken with (`host:pid` from the command line,
    /// Curator's address), an election candidate's value, a vote, a member's state.
    pub value: Vec<u8>,
    /// The session it is bound to (ZooKeeper session id, etcd lease id).
    pub session: u64,
    /// When the server created it (ZooKeeper keeps it; etcd does not).
    pub since: Option<SystemTime>,
    /// Which layout made it.
    pub origin: Origin,
    /// Its name on the server, relative to the namespace.
    pub path: String,
}

/// What one recipe looks like now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeView {
    /// The kind of recipe.
    pub kind: RecipeKind,
    /// Its name.
    pub name: String,
    /// Those who hold it: a lock's holder, a read/write lock's readers or writer, a
    /// semaphore's held leases, an election's leader, a service's instances, a double
    /// barrier's members, a transaction's coordinator and votes.
    pub holders: Vec<Participant>,
    /// Those queued behind, in order: a lock's waiters, a semaphore's acquirers, an
    /// election's other candidates, a queue's consumers.
    pub waiters: Vec<Participant>,
    /// A semaphore's permits, as coord's leases record them (`None` when no lease says,
    /// e.g. Curator's alone: then every lease counts as held).
    pub permits: Option<u32>,
    /// A queue's items now.
    pub depth: Option<usize>,
    /// A two-phase commit's plan (its participants, as stored) and decision.
    pub plan: Option<Vec<u8>>,
    /// A two-phase commit's decision, as stored (`commit:…`, `abort:…`), if made.
    pub decision: Option<Vec<u8>>,
    /// A lock, read/write lock, semaphore or election whose next contender is holding
    /// off under lock-delay ([`LockOptions::lock_delay`](crate::LockOptions::lock_delay))
    /// now: who, after which vanished entry, until when. That contender is listed first
    /// among the waiters, not as a holder.
    pub lock_delay: Option<LockDelayView>,
}

/// A contender holding off under lock-delay, as [`Client::inspect`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockDelayView {
    /// The waiting contender's name on the server, relative to the namespace (as
    /// [`Participant::path`]).
    pub waiter: String,
    /// The name of the entry that went without a release (its last path segment).
    pub vanished: String,
    /// When the waiter takes its grant, by the waiter's clock.
    pub until: SystemTime,
}

impl RecipeView {
    fn new(kind: RecipeKind, name: String) -> RecipeView {
        RecipeView {
            kind,
            name,
            holders: Vec::new(),
            waiters: Vec::new(),
            permits: None,
            depth: None,
            plan: None,
            decision: None,
            lock_delay: None,
        }
    }
}

impl Client {
    /// Every recipe with a name at or below `prefix` (segment-wise; empty for the whole
    /// namespace) that has entries now: locks, read/write locks, semaphores, elections,
    /// services, queues, double barriers and two-phase commits, with who holds and who
    /// waits — read from the layouts coord, Curator, kazoo and Go's `concurrency`
    /// write. Sorted by kind, then name. Plain barriers and counters are config keys
    /// like any other and are not listed.
    ///
    /// A snapshot for people, not for decisions: each kind is read separately (on
    /// ZooKeeper, a walk of its directories), so an entry that comes or goes meanwhile
    /// may be missed or seen; nothing is locked or changed.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad prefix; `Unavailable`, `Timeout`, `Closed`,
    /// `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (reads).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::{Lock as _, RecipeKind};
    /// let client = coord_mem::connect("mem://inspect-doc")?;
    /// let _guard = client.lock_as("reports/nightly", "host-a:41").await?;
    /// let views = client.inspect("reports").await?;
    /// assert_eq!(views[0].kind, RecipeKind::Lock);
    /// assert_eq!(views[0].holders[0].value, b"host-a:41");
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, prefix: &str) -> Result<Vec<RecipeView>> {
        if !prefix.is_empty() {
            validate_name("prefix", prefix).map_err(|e| e.with_operation("inspect"))?;
        }
        let span = tracing::debug_span!("coord.inspect", backend = self.kind(), prefix);
        async {
            let mut views = Vec::new();
            for kind in RecipeKind::ALL {
                views.extend(self.inspect_kind(kind, prefix, false).await?);
            }
            Ok(views)
        }
        .instrument(span)
        .await
        .map_err(|e: Error| e.with_operation("inspect"))
    }

    /// The recipe of kind `kind` named `name` as [`Client::inspect`] sees it; one with
    /// nothing in it when it has no entries.
    ///
    /// # Errors
    ///
    /// As [`Client::inspect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (reads).
    pub async fn inspect_one(&self, kind: RecipeKind, name: &str) -> Result<RecipeView> {
        validate_name("name", name).map_err(|e| e.with_operation("inspect"))?;
        let span = tracing::debug_span!("coord.inspect", backend = self.kind(), %kind, name);
        let views = self
            .inspect_kind(kind, name, true)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("inspect"))?;
        Ok(views
            .into_iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| RecipeView::new(kind, name.to_owned())))
    }

    async fn inspect_kind(&self, kind: RecipeKind, prefix: &str, exact: bool) -> Result<Vec<RecipeView>> {
        let root = match prefix {
            "" => kind.root().to_owned(),
            p => format!("{}/{p}", kind.root()),
        };
        let entries = self.backend().survey(&root).await?;
        let mut views: Vec<RecipeView> = Vec::new();
        let mut groups: std::collections::BTreeMap<String, Vec<(Surveyed, &'static str)>> =
            Default::default();
        for entry in entries {
            let Some((name, role)) = name_and_role(kind, &entry) else {
                continue;
            };
            if exact && name != prefix {
                continue;
            }
            groups.entry(name).or_default().push((entry, role));
        }
        if kind == RecipeKind::Queue {
            for name in self.queue_names(prefix, exact).await? {
                groups.entry(name).or_default();
            }
        }
        if kind == RecipeKind::TwoPhaseCommit {
            for name in self.transaction_names(prefix, exact).await? {
                groups.entry(name).or_default();
            }
        }
        for (name, mut entries) in groups {
            entries.sort_by_key(|(e, _)| e.token);
            let mut view = RecipeView::new(kind, name);
            self.admit(&mut view, entries).await?;
            views.push(view);
        }
        Ok(views)
    }

    /// Splits entries into holders and waiters by the recipe's admission rule, and adds
    /// what the config store holds for it.
    async fn admit(&self, view: &mut RecipeView, entries: Vec<(Surveyed, &'static str)>) -> Result<()> {
        let participants: Vec<Participant> = entries
            .into_iter()
            .map(|(e, role)| participant(view.kind, e, role))
            .collect();
        match view.kind {
            RecipeKind::Lock | RecipeKind::Election | RecipeKind::Queue => {
                let mut it = participants.into_iter();
                view.holders.extend(it.next());
                view.waiters.extend(it);
            }
            RecipeKind::RwLock => {
                let mut it = participants.into_iter().peekable();
                match it.peek() {
                    Some(p) if p.role == "write" => view.holders.extend(it.next()),
                    _ => {
                        while let Some(p) = it.next_if(|p| p.role == "read") {
                            view.holders.push(p);
                        }
                    }
                }
                view.waiters.extend(it);
            }
            RecipeKind::Semaphore => {
                let (leases, acquirers): (Vec<_>, Vec<_>) =
                    participants.into_iter().partition(|p| p.role == "lease");
                view.permits = leases
                    .first()
                    .and_then(|p| crate::primitives::semaphore::parse_lease(&p.value))
                    .map(|(count, _)| count);
                // A lease of coord's shows its holder as its value (the count is in
                // `permits`).
                let leases: Vec<Participant> = leases
                    .into_iter()
                    .map(|mut p| {
                        if let Some((_, holder)) = crate::primitives::semaphore::parse_lease(&p.value) {
                            p.value = holder.to_vec();
                        }
                        p
                    })
                    .collect();
                let held = view.permits.map_or(leases.len(), |n| n as usize);
                let mut it = leases.into_iter();
                view.holders.extend(it.by_ref().take(held));
                view.waiters.extend(it);
                // A waiting acquirer holds the acquirers' lock and a lease beyond the
                // permits at once: one waiter, shown once (by its lease).
                let waiting: std::collections::HashSet<u64> =
                    view.waiters.iter().map(|p| p.session).collect();
                view.waiters
                    .extend(acquirers.into_iter().filter(|p| !waiting.contains(&p.session)));
            }
            RecipeKind::Service | RecipeKind::DoubleBarrier | RecipeKind::TwoPhaseCommit => {
                view.holders = participants;
            }
        }
        self.lock_delay(view).await?;
        match view.kind {
            RecipeKind::Queue => {
                let items = self.list(&format!("{}/items", view.name)).await?;
                view.depth = Some(items.iter().filter(|e| is_item_key(&view.name, &e.key)).count());
            }
            RecipeKind::TwoPhaseCommit => {
                view.plan = self.get(&format!("{}/plan", view.name)).await?.map(|v| v.value);
                view.decision = self
                    .get(&format!("{}/decision", view.name))
                    .await?
                    .map(|v| v.value);
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads the release mark of a queue-based recipe: a contender holding off under
    /// lock-delay now moves from the holders to the head of the waiters.
    async fn lock_delay(&self, view: &mut RecipeView) -> Result<()> {
        let queue = match view.kind {
            RecipeKind::Lock => crate::primitives::lock::queue(&view.name),
            RecipeKind::RwLock => crate::primitives::rw_lock::queue(&view.name, true),
            RecipeKind::Semaphore => crate::primitives::semaphore::lease_queue(&view.name, 1),
            RecipeKind::Election => crate::primitives::election::queue(&view.name),
            _ => return Ok(()),
        };
        if view.holders.is_empty() {
            return Ok(());
        }
        let Some(crate::raw::ReleaseMark::Vanished {
            entry,
            waiter,
            until_ms,
        }) = self.backend().release_mark(&queue).await?
        else {
            return Ok(());
        };
        let until = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(until_ms);
        if until <= SystemTime::now() {
            return Ok(());
        }
        let backend = self.backend();
        let Some(i) = view.holders.iter().position(|p| backend.path(&p.path) == waiter) else {
            return Ok(());
        };
        let p = view.holders.remove(i);
        view.lock_delay = Some(LockDelayView {
            waiter: p.path.clone(),
            vanished: match entry.as_str() {
                crate::engine::contender::LOCAL_HOLDER => {
                    "the waiter's own client's previous holder".to_owned()
                }
                path => path.rsplit('/').next().unwrap_or_default().to_owned(),
            },
            until,
        });
        view.waiters.insert(0, p);
        Ok(())
    }

    /// The names of the queues with items or a tail in the config store.
    async fn queue_names(&self, prefix: &str, exact: bool) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .list(prefix)
            .await?
            .into_iter()
            .filter_map(|e| {
                let name = match e.key.rsplit_once('/') {
                    Some((name, "tail")) => name.to_owned(),
                    _ => {
                        let (rest, _) = e.key.rsplit_once('/')?;
                        let name = rest.strip_suffix("/items")?;
                        is_item_key(name, &e.key).then(|| name.to_owned())?
                    }
                };
                (!exact || name == prefix).then_some(name)
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The names of the two-phase commits with a plan or a decision in the config store.
    async fn transaction_names(&self, prefix: &str, exact: bool) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .list(prefix)
            .await?
            .into_iter()
            .filter_map(|e| {
                let (name, last) = e.key.rsplit_once('/')?;
                let ours = (last == "plan" || last == "decision") && (!exact || name == prefix);
                (ours && key_matches_prefix(name, prefix)).then(|| name.to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// Whether `key` is an item of queue `name`: `<name>/items/<20 digits>`.
fn is_item_key(name: &str, key: &str) -> bool {
    key.strip_prefix(name)
        .and_then(|r| r.strip_prefix("/items/"))
        .is_some_and(|seq| seq.len() == 20 && seq.bytes().all(|b| b.is_ascii_digit()))
}

/// The recipe name an entry belongs to under `kind`'s root, and its role; `None` for a
/// node that is no entry of that kind (e.g. a semaphore's stray node).
fn name_and_role(kind: RecipeKind, entry: &Surveyed) -> Option<(String, &'static str)> {
    let rel = entry.dir.strip_prefix(kind.root())?.strip_prefix('/')?;
    let split = |suffixes: &[(&str, &'static str)]| {
        suffixes.iter().find_map(|(suffix, role)| {
            rel.strip_suffix(suffix)
                .and_then(|n| n.strip_suffix('/'))
                .map(|n| (n.to_owned(), *role))
        })
    };
    match kind {
        RecipeKind::Semaphore => split(&[("leases", "lease"), ("locks", "acquirer")]),
        RecipeKind::Queue => split(&[("takers", "")]),
        RecipeKind::TwoPhaseCommit => split(&[("coordinator", "coordinator"), ("votes", "vote")]),
        RecipeKind::RwLock => {
            // Sequence-named layouts mark the class in the name; lease-named ones in the
            // directory (Go's `read/`, `write/`).
            if ["__READ__", "__rlock__"].iter().any(|m| entry.name.contains(m)) {
                Some((rel.to_owned(), "read"))
            } else if ["__WRIT__", "__lock__"].iter().any(|m| entry.name.contains(m)) {
                Some((rel.to_owned(), "write"))
            } else {
                split(&[("read", "read"), ("write", "write")])
            }
        }
        RecipeKind::Lock | RecipeKind::Election | RecipeKind::Service | RecipeKind::DoubleBarrier => {
            Some((rel.to_owned(), ""))
        }
    }
}

fn participant(kind: RecipeKind, entry: Surveyed, role: &'static str) -> Participant {
    // An instance is named by its id, which tells nothing; coord's registry writes the
    // instance in its own encoding.
    let origin = if kind == RecipeKind::Service
        && crate::primitives::registry::ServiceInstance::decode(&entry.value).is_ok()
    {
        Origin::Coord
    } else {
        Origin::of(&entry.name)
    };
    Participant {
        token: entry.token,
        role,
        origin,
        since: entry
            .created_ms
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
        path: format!("{}/{}", entry.dir, entry.name),
        value: entry.value,
        session: entry.owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_from_names() {
        let coord = "_c_0f6c5d8e-1a2b-8c3d-9e4f-5a6b7c8d9e0f-lock-0000000001";
        let curator = "_c_0f6c5d8e-1a2b-4c3d-9e4f-5a6b7c8d9e0f-lock-0000000001";
        assert_eq!(Origin::of(coord), Origin::Coord);
        assert_eq!(Origin::of(curator), Origin::Curator);
        assert_eq!(Origin::of("lock-0000000003"), Origin::Curator);
        assert_eq!(
            Origin::of("9f8e7d6c5b4a49281706f5e4d3c2b1a0__lock__0000000002"),
            Origin::Kazoo
        );
        assert_eq!(
            Origin::of("9f8e7d6c5b4a89281706f5e4d3c2b1a0__rlock__0000000002"),
            Origin::Coord
        );
        assert_eq!(Origin::of("694d7a1b2c3d4e5f"), Origin::Concurrency);
        assert_eq!(Origin::of("694d7a1b2c3d4e5f-2.1"), Origin::Concurrency);
        assert_eq!(Origin::of("node-1"), Origin::Other);
    }

    #[test]
    fn item_keys() {
        assert!(is_item_key("jobs", "jobs/items/00000000000000000001"));
        assert!(!is_item_key("jobs", "jobs/items/1"));
        assert!(!is_item_key("jobs", "jobs/x/items/00000000000000000001"));
    }
}
