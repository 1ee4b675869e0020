//! The lock: a queue of contenders; the first holds. Implemented for [`Client`] over the
//! backend's [`Queue`](crate::raw::Queue).

use async_trait::async_trait;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::lock::{Lock, LockGuard, LockHolder};
use crate::name::{validate_name, validate_value};
use crate::raw::{Admission, EntryClass, QueueSpec};
use crate::recipes::contender::acquire;

/// A lock's contenders: Curator's `InterProcessMutex` (`lock-`) and kazoo's `Lock`
/// (`__lock__`); a kazoo reader on the same path (`__rlock__`) is waited for like any
/// contender, as kazoo's `Lock` does.
const CONTENDERS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lock-", "__lock__", "__rlock__"],
    kazoo_marker: Some("__lock__"),
}];

/// The queue of lock `name`: `locks/<name>` (Go's `concurrency.Mutex` prefix).
pub(crate) fn queue(name: &str) -> QueueSpec {
    QueueSpec::new("lock", format!("locks/{name}"), CONTENDERS, Admission::Exclusive)
}

#[async_trait]
impl Lock for Client {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_as(name, Vec::new()).await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.try_lock_as(name, Vec::new()).await
    }

    async fn lock_as<V>(&self, name: &str, holder: V) -> Result<LockGuard>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        let holder = holder.into();
        validate_name("lock name", name).map_err(|e| e.with_operation("lock"))?;
        validate_value("lock holder", &holder).map_err(|e| e.with_operation("lock"))?;
        let span = tracing::debug_span!("coord.lock", backend = self.kind(), name);
        let grant = acquire(self, queue(name), holder, true)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("lock"))?
            .ok_or_else(|| no_grant("lock"))?;
        Ok(LockGuard::new(name, grant))
    }

    async fn try_lock_as<V>(&self, name: &str, holder: V) -> Result<Option<LockGuard>>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        let holder = holder.into();
        validate_name("lock name", name).map_err(|e| e.with_operation("try_lock"))?;
        validate_value("lock holder", &holder).map_err(|e| e.with_operation("try_lock"))?;
        let span = tracing::debug_span!("coord.try_lock", backend = self.kind(), name);
        let grant = acquire(self, queue(name), holder, false)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("try_lock"))?;
        Ok(grant.map(|g| LockGuard::new(name, g)))
    }

    async fn holder(&self, name: &str) -> Result<Option<LockHolder>> {
        validate_name("lock name", name).map_err(|e| e.with_operation("holder"))?;
        let span = tracing::debug_span!("coord.lock_holder", backend = self.kind(), name);
        let head = self
            .backend()
            .head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("holder"))?;
        Ok(head.map(|h| LockHolder {
            token: h.token,
            holder: h.value,
        }))
    }
}

/// A waiting acquisition can only end with a grant or an error.
pub(crate) fn no_grant(op: &'static str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "a waiting acquisition returned without a grant",
    )
    .with_operation(op)
}
