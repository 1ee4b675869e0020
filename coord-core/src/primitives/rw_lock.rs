//! Distributed read/write locks with fencing tokens.
//!
//! The read/write lock: readers and writers in one queue of contenders; a reader waits
//! for the writers ahead of it, a writer for everyone ahead. The same contender algorithm
//! as the lock ([`acquire`]); the queue's classes and admission rules
//! ([`Admission::SharedWithinClass`] for readers) say who waits for whom.

use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::acquire;
use crate::error::Result;
use crate::name::{validate_name, validate_value};
use crate::primitives::lock::{LockGuard, guard_type, no_grant};
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView, admit_by_rule, split_role};
use crate::raw::{Admission, EntryClass, QueueSpec};

/// A fair (FIFO), herd-free distributed read/write lock: many readers or one writer.
/// Made by [`Client::rw_lock`]; cheap to clone.
///
/// Readers and writers queue in one line, in arrival order. A reader holds once no
/// writer is queued ahead of it (readers ahead do not block it); a writer holds once
/// nobody is ahead of it. A writer queued ahead of a reader therefore blocks that reader,
/// so a steady stream of readers never starves a writer. Each waiter watches only the
/// one entry that blocks it: a reader the nearest writer ahead, a writer the entry right
/// ahead. When a writer goes, the readers right behind it all wake (they hold together).
///
/// Within one client, writers on one name queue locally and reach the server one at a
/// time (like [`Lock`](crate::Lock)); readers hold at once, each with an entry of its
/// own. Neither is reentrant: a client that holds the write lock and asks for a read
/// lock on the same name waits for its own writer.
///
/// On the server: ZooKeeper, Curator's `InterProcessReadWriteLock` layout (`__READ__`
/// and `__WRIT__` contenders under one parent; kazoo's `__rlock__`/`__lock__` with
/// `lock_layout=kazoo`); etcd, Go's `recipes.RWMutex` layout (`<prefix>/read/…` and
/// `<prefix>/write/…` keys, ordered by revision), so coord and those libraries exclude
/// each other on the same path.
///
/// # Fencing
///
/// Every grant has a [`FencingToken`](crate::FencingToken); a write grant's token is
/// above every earlier grant's (read or write) on the name. Readers hold together, so
/// their tokens overlap by design: a resource guarded for writes should accept a write
/// only with a token at or above the highest it has seen. A read guard's
/// [`fence`](crate::Granted::fence) still makes a config write conditional on that read
/// being held (its entry existing), and a write guard's on the write being held.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use coord_core::Granted as _;
/// let client = coord_mem::connect("mem://rw-doc")?;
/// let rw = client.rw_lock("catalog")?;
/// let r1 = rw.read().await?;
/// let r2 = rw.read().await?; // readers share
/// assert!(rw.try_write().await?.is_none(), "a writer waits for the readers");
/// let read_token = r2.token();
/// r1.release().await?;
/// r2.release().await?;
/// let w = rw.write().await?;
/// assert!(w.token() > read_token);
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    client: Client,
    name: String,
    /// The value of each entry this handle makes (see [`RwLock::with_options`]).
    holder: Vec<u8>,
    /// See [`RwLock::with_options`].
    lock_delay: Option<std::time::Duration>,
}

impl Client {
    /// The read/write lock `name` (no request; each acquisition is one).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        validate_name("read/write lock name", name).map_err(|e| e.with_operation("rw_lock"))?;
        Ok(RwLock {
            client: self.clone(),
            name: name.to_owned(),
            holder: Vec::new(),
            lock_delay: None,
        })
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, whose holds made from now on are taken with `options`
    /// (which replace any given before):
    ///
    /// - [`LockOptions::holder`](crate::LockOptions::holder) (an address, `host:pid`) is
    ///   the value of their entries, as a lock stores it, and what [`Client::inspect`]
    ///   and Curator's tools show as the holder. Empty by default.
    /// - [`LockOptions::lock_delay`](crate::LockOptions::lock_delay): a reader or writer
    ///   whose turn comes because the hold ahead vanished (session expired, entry
    ///   deleted) takes it only after the delay; after a release at once. As
    ///   [`Lock::lock_with`](crate::Lock::lock_with) describes, including what it does
    ///   not cover.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the holder is over the value size limit, or the lock-delay
    /// over [`MAX_LOCK_DELAY`](crate::MAX_LOCK_DELAY) — before any request.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::{LockOptions, RecipeKind};
    /// let client = coord_mem::connect("mem://rw-holder-doc")?;
    /// let catalog = client.rw_lock("catalog")?.with_options(LockOptions::new().holder("host-a:41"))?;
    /// let read = catalog.read().await?;
    /// let view = client.inspect_one(RecipeKind::RwLock, "catalog").await?;
    /// assert_eq!(view.holders[0].value, b"host-a:41");
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(mut self, options: crate::LockOptions) -> Result<RwLock> {
        validate_value("read/write lock holder", &options.holder).map_err(|e| e.with_operation("rw_lock"))?;
        crate::engine::contender::check_lock_delay(options.lock_delay)
            .map_err(|e| e.with_operation("rw_lock"))?;
        self.holder = options.holder;
        self.lock_delay = options.lock_delay.filter(|d| !d.is_zero());
        Ok(self)
    }
}

guard_type!(
    /// A read hold of a read/write lock, held until released or dropped: no writer holds
    /// meanwhile; other readers may.
    ReadGuard,
    "read hold"
);

guard_type!(
    /// A write hold of a read/write lock, held until released or dropped: nobody else
    /// holds meanwhile.
    WriteGuard,
    "write hold"
);

/// A read/write lock's classes: readers (Curator's `__READ__`, kazoo's `__rlock__`; Go's
/// `read/`) and writers (Curator's `__WRIT__`, kazoo's `__lock__`; Go's `write/`).
const CLASSES: &[EntryClass] = &[
    EntryClass {
        subdir: "read",
        markers: &["__READ__", "__rlock__"],
        kazoo_marker: Some("__rlock__"),
    },
    EntryClass {
        subdir: "write",
        markers: &["__WRIT__", "__lock__"],
        kazoo_marker: Some("__lock__"),
    },
];

/// The queue of read/write lock `name` (`rwlocks/<name>`), for a reader or a writer.
pub(crate) fn queue(name: &str, write: bool) -> QueueSpec {
    let dir = format!("rwlocks/{name}");
    if write {
        QueueSpec::new("write_lock", dir, CLASSES, Admission::Exclusive).as_class(1)
    } else {
        QueueSpec::new("read_lock", dir, CLASSES, Admission::SharedWithinClass)
    }
}

impl RwLock {
    /// Waits until this client holds the lock for reading: no writer is queued ahead.
    ///
    /// # Errors
    ///
    /// `SessionLost` if the session was lost while waiting (call again to queue on the
    /// new one); `Unavailable`, `Timeout`, `Closed`, `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves no contender behind (its entry is removed in
    /// the background), and the queue behind it moves on.
    pub async fn read(&self) -> Result<ReadGuard> {
        self.acquire(false, true, "read")
            .await?
            .map(ReadGuard::from)
            .ok_or_else(|| no_grant("read"))
    }

    /// Waits until this client holds the lock for writing: nobody is queued ahead.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    pub async fn write(&self) -> Result<WriteGuard> {
        self.acquire(true, true, "write")
            .await?
            .map(WriteGuard::from)
            .ok_or_else(|| no_grant("write"))
    }

    /// Takes the lock for reading if no writer holds it or is queued; `None` otherwise.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `Unavailable` at once — before any request —
    /// while the session is suspended (connection trouble), and as soon as it becomes
    /// suspended while trying: a `try_*` never waits out an outage (retry once it
    /// reconnects; an entry the attempt may have made is removed in the background);
    /// `Timeout` (one request's deadline); `SessionLost`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        Ok(self.acquire(false, false, "try_read").await?.map(ReadGuard::from))
    }

    /// Takes the lock for writing if nobody holds it or is queued; `None` otherwise.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `Unavailable` at once — before any request —
    /// while the session is suspended (connection trouble), and as soon as it becomes
    /// suspended while trying: a `try_*` never waits out an outage (retry once it
    /// reconnects; an entry the attempt may have made is removed in the background);
    /// `Timeout` (one request's deadline); `SessionLost`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        Ok(self
            .acquire(true, false, "try_write")
            .await?
            .map(WriteGuard::from))
    }

    async fn acquire(&self, write: bool, wait: bool, op: &'static str) -> Result<Option<LockGuard>> {
        let span = tracing::debug_span!("coord.rw_lock", backend = self.client.kind(), name = %self.name, op);
        let queue = queue(&self.name, write).with_lock_delay(self.lock_delay);
        let grant = acquire(self.client.core(), queue, self.holder.clone(), wait)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation(op))?;
        Ok(grant.map(|g| LockGuard::new(self.name.clone(), g)))
    }
}

impl Client {
    /// Where read/write lock `name`'s contenders live: Curator's
    /// `InterProcessReadWriteLock` and kazoo's `ReadLock`/`Lock` path, the prefix of Go's
    /// `recipes.NewRWMutex` (readers under `read/`, writers under `write/`).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn rw_lock_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("read/write lock name", name)?;
        Ok(self.backend().path(&queue(name, false).dir))
    }
}

/// How `coord inspect` reads read/write locks: `rwlocks/<name>`, readers and writers.
pub(crate) struct RwLockLayout;

/// [`RwLockLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: RwLockLayout = RwLockLayout;

#[async_trait::async_trait]
impl Layout for RwLockLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::RwLock
    }

    fn root(&self) -> &'static str {
        "rwlocks"
    }

    fn name_and_role(&self, rel: &str, name: &str) -> Option<(String, &'static str)> {
        // Sequence-named layouts mark the class in the name; lease-named ones in the
        // directory (Go's `read/`, `write/`).
        if ["__READ__", "__rlock__"].iter().any(|m| name.contains(m)) {
            Some((rel.to_owned(), "read"))
        } else if ["__WRIT__", "__lock__"].iter().any(|m| name.contains(m)) {
            Some((rel.to_owned(), "write"))
        } else {
            split_role(rel, &[("read", "read"), ("write", "write")])
        }
    }

    /// By the lock's own rule: readers ahead of the first writer hold together; a writer
    /// first holds alone.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        let name = view.name.clone();
        admit_by_rule(view, participants, |p| queue(&name, p.role == "write"));
    }

    fn lock_delay_queue(&self, name: &str) -> Option<QueueSpec> {
        Some(queue(name, true))
    }
}
