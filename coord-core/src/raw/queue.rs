//! The contender queue every backend implements once, in its native layout; locks,
//! elections and the recipes to come are written over it in `coord-core`.
//!
//! A queue is a directory of session-bound entries ordered by creation: ZooKeeper
//! ephemeral sequential znodes ordered by sequence (token: `czxid`), etcd keys under the
//! client's lease ordered by create revision (token: `create_revision`), mem keys ordered
//! by creation revision. The first entry holds the grant; every other contender waits
//! for the entry immediately ahead of it to go (no herd).
//!
//! What the backend does, and what it leaves to the recipes:
//!
//! | backend (this trait) | recipes (`coord-core`) |
//! |---|---|
//! | pick an entry's identity before any request ([`Queue::ticket`]) | local FIFO per client and name |
//! | create it idempotently, recovering an ambiguous create ([`Queue::join`]) | the wait loop: position, wait, grant |
//! | read the entry ahead ([`Queue::position`]) | retries while the session lives, `SessionLost` when it ends |
//! | wait until one entry is gone ([`Queue::wait_gone`]) | the hold state of a grant, and its loss |
//! | one removal attempt ([`Queue::leave`]) | removal retried until confirmed or the session ended, on drop too |
//! | the first entry and its changes ([`Queue::head`], [`Queue::watch_head`]) | leader observation: no duplicates, tokens never going back |
//! | every entry and its changes ([`Queue::watch_entries`]) | a double barrier's members |

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::election::LeaderInfo;
use crate::error::Result;
use crate::fencing::FencingToken;

/// The recipe a queue serves. Backends place its queues under [`QueueKind::dir`] and,
/// where their layout marks entries by recipe, mark them (ZooKeeper: Curator's `-lock-`,
/// `-latch-`, `__READ__` and `__WRIT__`; etcd: the `read/` and `write/` directories of
/// Go's `recipes.RWMutex`).
///
/// What an entry waits for depends on its kind: a [`QueueKind::Read`] entry only for the
/// [`QueueKind::Write`] entries ahead of it (readers share), every other kind for any
/// entry ahead of it in its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueKind {
    /// A lock (Curator `InterProcessMutex`, kazoo `Lock`, Go `concurrency.Mutex`).
    Lock,
    /// An election (Curator `LeaderLatch`, Go `concurrency.Election`).
    Election,
    /// A read/write lock's reader (Curator `InterProcessReadWriteLock.readLock()`,
    /// kazoo `ReadLock`, Go `recipes.RWMutex.RLock`). Shares the directory of
    /// [`QueueKind::Write`].
    Read,
    /// A read/write lock's writer (Curator `InterProcessReadWriteLock.writeLock()`,
    /// kazoo `Lock` on the same path, Go `recipes.RWMutex.Lock`).
    Write,
    /// A semaphore's internal lock, held only while acquiring a lease (Curator
    /// `InterProcessSemaphoreV2`'s `locks` mutex): one acquirer at a time watches the
    /// leases.
    SemaphoreLock,
    /// A semaphore's lease (Curator `InterProcessSemaphoreV2`'s `leases`): held while
    /// fewer than `permits` leases are ahead of it; otherwise it waits for any of them
    /// to go ([`Position::Among`]).
    Lease {
        /// How many leases hold at once.
        permits: u32,
    },
    /// A distributed queue's taker lock: consumers take items one at a time, in arrival
    /// order, and only the one at the front watches for items.
    Takers,
    /// A member of a double barrier: never waits ([`Position::First`] at once); the
    /// recipe watches every member ([`Queue::watch_entries`]).
    Member,
    /// A two-phase commit's coordinator lock.
    Coordinator,
    /// A two-phase commit participant's vote: never waits; the coordinator watches every
    /// vote.
    Vote,
}

impl QueueKind {
    /// The first segment of this kind's queue directories under the namespace.
    pub fn dir(self) -> &'static str {
        match self {
            QueueKind::Lock => "locks",
            QueueKind::Election => "elections",
            QueueKind::Read | QueueKind::Write => "rwlocks",
            QueueKind::SemaphoreLock | QueueKind::Lease { .. } => "semaphores",
            QueueKind::Takers => "queues",
            QueueKind::Member => "barriers",
            QueueKind::Coordinator | QueueKind::Vote => "transactions",
        }
    }

    /// Whether an entry of this kind is granted at once, whatever is ahead of it (a
    /// barrier member, a vote): its recipe watches the entries instead.
    pub fn never_waits(self) -> bool {
        matches!(self, QueueKind::Member | QueueKind::Vote)
    }

    /// Whether an entry of this kind waits for `ahead`, an entry of kind `ahead` queued
    /// before it: readers wait only for writers; everything else for everything.
    pub fn waits_for(self, ahead: QueueKind) -> bool {
        self != QueueKind::Read || ahead != QueueKind::Read
    }
}

/// One queue: a recipe and a validated name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueId {
    /// The recipe.
    pub kind: QueueKind,
    /// The user's name (already validated).
    pub name: String,
}

impl QueueId {
    /// The queue `name` of `kind`.
    pub fn new(kind: QueueKind, name: impl Into<String>) -> QueueId {
        QueueId {
            kind,
            name: name.into(),
        }
    }

    /// The queue's directory relative to the namespace: `locks/<name>`; a semaphore's
    /// `semaphores/<name>/locks` and `semaphores/<name>/leases` (Curator's layout).
    pub fn rel_dir(&self) -> String {
        match self.kind {
            QueueKind::SemaphoreLock => format!("{}/{}/locks", self.kind.dir(), self.name),
            QueueKind::Lease { .. } => format!("{}/{}/leases", self.kind.dir(), self.name),
            QueueKind::Takers => format!("{}/{}/takers", self.kind.dir(), self.name),
            QueueKind::Coordinator => format!("{}/{}/coordinator", self.kind.dir(), self.name),
            QueueKind::Vote => format!("{}/{}/votes", self.kind.dir(), self.name),
            _ => format!("{}/{}", self.kind.dir(), self.name),
        }
    }
}

/// A claim on a place in a queue, made before any request: it fixes the session the
/// entry will be bound to and how the backend finds the entry again, so that an entry
/// whose create had an unknown outcome (or whose `join` was dropped) can still be found
/// and removed, and a retried create never makes a second entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The queue.
    pub queue: QueueId,
    /// The client's session generation the entry is bound to.
    pub generation: u64,
    /// The server's id of that session (ZooKeeper session id, etcd lease id, mem session).
    pub session_id: i64,
    /// How the backend finds the entry: ZooKeeper the protected name prefix
    /// `<dir>/_c_<guid>-lock-`, etcd and mem the key itself (`<dir>/<lease hex>`).
    pub locator: String,
}

/// Which of a client's places in one queue a ticket is for. Exclusive kinds queue a
/// client's contenders locally and use slot 0 only; a client's readers hold at once,
/// each in a slot of its own, so backends that name an entry by its session (etcd, mem)
/// give each slot its own key.
pub type Slot = u32;

/// An entry of a queue on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The backend path (znode path, etcd key, mem key): the entry's identity and what a
    /// fence checks.
    pub path: String,
    /// Its creation order and the fencing token of its grant (`czxid`, create revision).
    /// `FencingToken(0)` when the read that found it does not say (a ZooKeeper listing
    /// has names only; its sequential names are never reused).
    pub token: FencingToken,
    /// The backend's cursor of the read that returned it (etcd: that read's header
    /// revision, so a watch starts right after it); 0 where unused.
    pub seen_at: u64,
}

/// Where an entry stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// First in the queue: the grant is its. `seen_at` is the read's cursor.
    First {
        /// As [`QueueEntry::seen_at`].
        seen_at: u64,
    },
    /// Behind this entry, the one immediately ahead.
    Behind(QueueEntry),
    /// Behind this entry, which is first: once it is gone this contender is first (every
    /// entry made later queues behind it), with no read to confirm it — the hand-over's
    /// round trip saved. A backend that cannot tell says [`Position::Behind`].
    Next(QueueEntry),
    /// A [`QueueKind::Lease`] with `permits` or more leases ahead, these: once any of
    /// them is gone, read again.
    Among(Vec<QueueEntry>),
}

/// What [`Queue::join`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// This contender's entry.
    pub own: QueueEntry,
    /// Its position, when the join's round trip showed it (etcd and mem read the queue
    /// in the same request); `None` otherwise (ZooKeeper lists children next).
    pub position: Option<Position>,
}

/// An entry of a queue as a watcher sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The backend path of the entry.
    pub path: String,
    /// Its creation order (`czxid`, create revision).
    pub token: FencingToken,
    /// Its value.
    pub value: Vec<u8>,
}

/// What [`Queue::watch_entries`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntriesEvent {
    /// Every entry of the queue now, in queue order. Backends may repeat an unchanged
    /// list.
    Entries(Vec<Member>),
    /// Changes may have been missed (history compacted, session lost); `Entries` follow.
    Gap,
}

/// A change of the first entry of a queue, for leader observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadEvent {
    /// The first entry and its value now (`None`: the queue is empty). Backends may
    /// repeat an unchanged head; the recipe filters duplicates.
    Head(Option<LeaderInfo>),
    /// Changes may have been missed (history compacted, session lost); a `Head` follows.
    Gap,
}

/// A backend's contender queue. Every method works on the client's current session
/// unless it takes a [`Ticket`], which pins the session the entry belongs to.
///
/// Requests are counted in the backend's stats like any other.
#[async_trait]
pub trait Queue: Send + Sync {
    /// A ticket for a new entry in `queue`, in this client's place `slot`, bound to the
    /// current session. No request.
    ///
    /// # Errors
    ///
    /// `SessionLost` when there is no live session (retry on the next one); `Closed`.
    fn ticket(&self, queue: &QueueId, slot: Slot) -> Result<Ticket>;

    /// Creates the ticket's entry holding `value`, on the ticket's session only. Retried
    /// or repeated for one ticket, it never makes a second entry: an entry already made
    /// for the ticket is returned instead.
    ///
    /// # Errors
    ///
    /// `SessionLost` if the ticket's session is gone; `PermissionDenied`; `Unavailable`,
    /// `Timeout` (the entry may exist: [`Queue::leave`] with the ticket finds it).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe by itself: a dropped join may leave an entry, which the recipe
    /// removes with [`Queue::leave`].
    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined>;

    /// Where `own` stands now.
    ///
    /// # Errors
    ///
    /// `SessionLost` when `own` is gone (its session ended or it was deleted);
    /// `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn position(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Position>;

    /// Resolves once `entry` is gone from the server (deleted, or replaced by another
    /// incarnation under the same path). Broken watches, reconnects and compacted
    /// history are handled inside: a deletion during an outage is still seen.
    ///
    /// # Errors
    ///
    /// `SessionLost` when the watch ended with this client's session (the caller decides
    /// what that means for `entry`); `Closed`; permanent errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is left on the server.
    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()>;

    /// Replaces the value of the ticket's entry `own`.
    ///
    /// # Errors
    ///
    /// `Fenced` when `own` is gone; `Unavailable`, `Timeout` (outcome unknown).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the value may or may not have been written.
    async fn update(&self, ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()>;

    /// One attempt to remove the ticket's entry (`own` when known; otherwise found by
    /// the ticket). `Ok` once the server confirms it is gone, including when it already
    /// was. The recipes retry it until that, or until the ticket's session has ended.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout` (retry); `Closed`; permanent errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal may or may not have happened.
    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()>;

    /// The first entry of `queue` and its value.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn head(&self, queue: &QueueId) -> Result<Option<LeaderInfo>>;

    /// The first entry of `queue` now, then whenever it may have changed; a
    /// [`HeadEvent::Gap`] where changes may have been missed. The stream ends after an
    /// error item (`Closed` when the client is closed).
    ///
    /// # Errors
    ///
    /// As [`Queue::head`], for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch_head(&self, queue: &QueueId) -> Result<BoxStream<'static, Result<HeadEvent>>>;

    /// Every entry of `queue` with its value now, then again whenever the entries may
    /// have changed (an entry joined, left, or changed its value); an
    /// [`EntriesEvent::Gap`] where changes may have been missed. The stream ends after an
    /// error item (`Closed` when the client is closed).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`, for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch_entries(&self, queue: &QueueId) -> Result<BoxStream<'static, Result<EntriesEvent>>>;
}
