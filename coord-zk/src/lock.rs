//! Locks: Curator `InterProcessMutex` layout, `<root>/locks/<name>/_c_<guid>-lock-<seq>`.

use async_trait::async_trait;
use coord_core::{Error, ErrorKind, Lock, LockGuard, Result, validate_name};
use tracing::Instrument;

use crate::ZkClient;
use crate::contender::{Kind, acquire};

impl ZkClient {
    /// The znode a lock's contenders live under (for Curator interoperability: pass this
    /// path to `InterProcessMutex`).
    pub fn lock_path(&self, name: &str) -> String {
        self.inner.path(&format!("locks/{name}"))
    }
}

#[async_trait]
impl Lock for ZkClient {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        validate_name("lock name", name).map_err(|e| e.with_operation("lock"))?;
        let span = tracing::debug_span!("coord.lock", backend = "zk", name);
        let granted = acquire(
            &self.inner,
            &self.inner.locks,
            name,
            self.lock_path(name),
            Kind::Lock,
            Vec::new(),
            true,
        )
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("lock"))?
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "a waiting lock returned without a grant"))?;
        Ok(LockGuard::new(
            name,
            granted.fence,
            granted.hold,
            Box::new(granted.contender),
        ))
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        validate_name("lock name", name).map_err(|e| e.with_operation("try_lock"))?;
        let span = tracing::debug_span!("coord.try_lock", backend = "zk", name);
        let granted = acquire(
            &self.inner,
            &self.inner.locks,
            name,
            self.lock_path(name),
            Kind::Lock,
            Vec::new(),
            false,
        )
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("try_lock"))?;
        Ok(granted.map(|g| LockGuard::new(name, g.fence, g.hold, Box::new(g.contender))))
    }
}
