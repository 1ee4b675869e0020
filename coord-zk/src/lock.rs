//! Locks: Curator `InterProcessMutex` layout, `<root>/locks/<name>/_c_<guid>-lock-<seq>`.

use async_trait::async_trait;
use coord_core::{Lock, LockGuard, Result, grant};

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
        grant::lock("zk", name, || {
            let dir = self.lock_path(name);
            acquire(
                &self.inner,
                &self.inner.locks,
                name,
                dir,
                Kind::Lock,
                Vec::new(),
                true,
            )
        })
        .await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        grant::try_lock("zk", name, || {
            let dir = self.lock_path(name);
            acquire(
                &self.inner,
                &self.inner.locks,
                name,
                dir,
                Kind::Lock,
                Vec::new(),
                false,
            )
        })
        .await
    }
}
