//! What `coord inspect` reads, shared by every primitive: the views, the participants
//! and their origins, and the one reading loop over a primitive's declared [`Layout`].
//! Each primitive declares its own layout in its own file (its directory, its entries'
//! roles, who of them holds, what the config store adds); `inspect.rs` lists them.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::client::Client;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::raw::{QueueSpec, Surveyed};

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
    /// `queue`, `double_barrier`, `two_phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecipeKind::Lock => "lock",
            RecipeKind::RwLock => "rwlock",
            RecipeKind::Semaphore => "semaphore",
            RecipeKind::Election => "election",
            RecipeKind::Service => "service",
            RecipeKind::Queue => "queue",
            RecipeKind::DoubleBarrier => "double_barrier",
            RecipeKind::TwoPhaseCommit => "two_phase",
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
    pub(crate) fn of(name: &str) -> Origin {
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
    pub(crate) fn new(kind: RecipeKind, name: String) -> RecipeView {
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

/// What a primitive declares about its entries, for `coord inspect`: where they live,
/// what each one is, who of them holds, and what the config store adds. Implemented in
/// each primitive's own file; [`read`] is the one loop over it.
#[async_trait]
pub(crate) trait Layout: Sync {
    /// The kind of recipe.
    fn kind(&self) -> RecipeKind;

    /// The directory (relative to the namespace) its session-bound entries live under.
    fn root(&self) -> &'static str;

    /// The recipe name and role of an entry named `name` in directory `rel` (relative
    /// to [`Layout::root`]); `None` for a node that is no entry of this recipe. By
    /// default, every entry right in `<root>/<name>`, with no role.
    fn name_and_role(&self, rel: &str, name: &str) -> Option<(String, &'static str)> {
        let _ = name;
        Some((rel.to_owned(), ""))
    }

    /// Which layout made `entry`. By default, as its name tells.
    fn origin(&self, entry: &Surveyed) -> Origin {
        Origin::of(&entry.name)
    }

    /// Splits the participants (in token order) into holders and waiters by the
    /// recipe's admission rule. By default, the first holds and the rest wait.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        let mut it = participants.into_iter();
        view.holders.extend(it.next());
        view.waiters.extend(it);
    }

    /// The queue whose release mark tells a contender holding off under lock-delay;
    /// `None` (the default) for a recipe without lock-delay.
    fn lock_delay_queue(&self, name: &str) -> Option<QueueSpec> {
        let _ = name;
        None
    }

    /// The names at or below `prefix` (exactly `prefix` with `exact`) the config store
    /// holds for this recipe, with or without session-bound entries. None by default.
    async fn config_names(&self, client: &Client, prefix: &str, exact: bool) -> Result<Vec<String>> {
        let _ = (client, prefix, exact);
        Ok(Vec::new())
    }

    /// Adds what the config store holds for the recipe to its view. Nothing by default.
    async fn fill(&self, client: &Client, view: &mut RecipeView) -> Result<()> {
        let _ = (client, view);
        Ok(())
    }
}

/// The recipe name and role of an entry in directory `rel`, for a recipe whose entries
/// live in sub-directories: `<name>/<suffix>` → `(name, role)` for the first matching
/// `(suffix, role)`.
pub(crate) fn split_role(rel: &str, suffixes: &[(&str, &'static str)]) -> Option<(String, &'static str)> {
    suffixes.iter().find_map(|(suffix, role)| {
        rel.strip_suffix(suffix)
            .and_then(|n| n.strip_suffix('/'))
            .map(|n| (n.to_owned(), *role))
    })
}

/// Splits `participants` (in queue order) into holders and waiters by the queue's own
/// admission rule — the one [`QueueSpec::admit`] applies to a contender — with
/// `spec_of` giving each participant's spec (its class and rule): a participant holds
/// while fewer entries it counts are ahead of it than its rule's permits.
pub(crate) fn admit_by_rule(
    view: &mut RecipeView,
    participants: Vec<Participant>,
    spec_of: impl Fn(&Participant) -> QueueSpec,
) {
    let specs: Vec<QueueSpec> = participants.iter().map(&spec_of).collect();
    for (i, p) in participants.into_iter().enumerate() {
        let spec = &specs[i];
        let counted = specs[..i].iter().filter(|ahead| spec.counts(ahead.class)).count();
        if counted < spec.admission.permits(spec.class) as usize {
            view.holders.push(p);
        } else {
            view.waiters.push(p);
        }
    }
}

/// A name of the recipe is either `<prefix>` or below it: `names` filtered to those.
pub(crate) fn matching(names: impl IntoIterator<Item = String>, prefix: &str, exact: bool) -> Vec<String> {
    let mut names: Vec<String> = names
        .into_iter()
        .filter(|n| {
            if exact {
                n == prefix
            } else {
                crate::name::key_matches_prefix(n, prefix)
            }
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every recipe of `layout` at or below `prefix` (exactly `prefix` with `exact`) that
/// has entries now, sorted by name: one survey of its directory, then what the config
/// store holds for it.
pub(crate) async fn read(
    client: &Client,
    layout: &dyn Layout,
    prefix: &str,
    exact: bool,
) -> Result<Vec<RecipeView>> {
    let root = match prefix {
        "" => layout.root().to_owned(),
        p => format!("{}/{p}", layout.root()),
    };
    let entries = client.backend().survey(&root).await?;
    let mut groups: std::collections::BTreeMap<String, Vec<(Surveyed, &'static str)>> = Default::default();
    for entry in entries {
        let Some(rel) = entry
            .dir
            .strip_prefix(layout.root())
            .and_then(|r| r.strip_prefix('/'))
        else {
            continue;
        };
        let Some((name, role)) = layout.name_and_role(rel, &entry.name) else {
            continue;
        };
        if exact && name != prefix {
            continue;
        }
        groups.entry(name).or_default().push((entry, role));
    }
    for name in layout.config_names(client, prefix, exact).await? {
        groups.entry(name).or_default();
    }
    let mut views = Vec::new();
    for (name, mut entries) in groups {
        entries.sort_by_key(|(e, _)| e.token);
        let mut view = RecipeView::new(layout.kind(), name);
        let participants = entries
            .into_iter()
            .map(|(e, role)| participant(layout, e, role))
            .collect();
        layout.admit(&mut view, participants);
        lock_delay(client, layout, &mut view).await?;
        layout.fill(client, &mut view).await?;
        views.push(view);
    }
    Ok(views)
}

/// The recipe of `layout` named `name`; one with nothing in it when it has no entries.
pub(crate) async fn read_one(client: &Client, layout: &dyn Layout, name: &str) -> Result<RecipeView> {
    Ok(read(client, layout, name, true)
        .await?
        .into_iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| RecipeView::new(layout.kind(), name.to_owned())))
}

/// Reads the release mark of a queue-based recipe: a contender holding off under
/// lock-delay now moves from the holders to the head of the waiters.
async fn lock_delay(client: &Client, layout: &dyn Layout, view: &mut RecipeView) -> Result<()> {
    let Some(queue) = layout.lock_delay_queue(&view.name) else {
        return Ok(());
    };
    if view.holders.is_empty() {
        return Ok(());
    }
    let Some(crate::raw::ReleaseMark::Vanished {
        entry,
        waiter,
        until_ms,
    }) = client.backend().release_mark(&queue).await?
    else {
        return Ok(());
    };
    let until = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(until_ms);
    if until <= SystemTime::now() {
        return Ok(());
    }
    let backend = client.backend();
    let Some(i) = view.holders.iter().position(|p| backend.path(&p.path) == waiter) else {
        return Ok(());
    };
    let p = view.holders.remove(i);
    view.lock_delay = Some(LockDelayView {
        waiter: p.path.clone(),
        vanished: match entry.as_str() {
            crate::engine::contender::LOCAL_HOLDER => "the waiter's own client's previous holder".to_owned(),
            path => path.rsplit('/').next().unwrap_or_default().to_owned(),
        },
        until,
    });
    view.waiters.insert(0, p);
    Ok(())
}

fn participant(layout: &dyn Layout, entry: Surveyed, role: &'static str) -> Participant {
    let origin = layout.origin(&entry);
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
}
