//! The read/write lock: readers and writers in one queue of contenders; a reader waits
//! for the writers ahead of it, a writer for everyone ahead. The same contender algorithm
//! as the lock ([`acquire`]); the queue's classes and admission rules
//! ([`Admission::SharedWithinClass`] for readers) say who waits for whom.

use tracing::Instrument;

use crate::error::Result;
use crate::lock::LockGuard;
use crate::raw::{Admission, EntryClass, QueueSpec};
use crate::recipes::contender::acquire;
use crate::recipes::lock::no_grant;
use crate::rw_lock::RwLock;

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
    pub async fn read(&self) -> Result<LockGuard> {
        self.acquire(false, true, "read")
            .await?
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
    pub async fn write(&self) -> Result<LockGuard> {
        self.acquire(true, true, "write")
            .await?
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
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire(false, false, "try_read").await
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
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire(true, false, "try_write").await
    }

    async fn acquire(&self, write: bool, wait: bool, op: &'static str) -> Result<Option<LockGuard>> {
        let span = tracing::debug_span!("coord.rw_lock", backend = self.client.kind(), name = %self.name, op);
        let grant = acquire(&self.client, queue(&self.name, write), Vec::new(), wait)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation(op))?;
        Ok(grant.map(|g| LockGuard::new(self.name.clone(), g)))
    }
}
