//! Locks: `<ns>/locks/<name>/<lease id hex>`, the layout of etcd's `concurrency.Mutex`
//! (`etcdctl lock <ns>/locks/<name>` excludes coord and vice versa).

use async_trait::async_trait;
use coord_core::{Lock, LockGuard, Result, grant};

use crate::EtcdClient;
use crate::contender::acquire;

impl EtcdClient {
    /// The key prefix a lock's contenders live under (pass it to `etcdctl lock` or Go's
    /// `concurrency.NewMutex` to interoperate).
    pub fn lock_prefix(&self, name: &str) -> String {
        self.inner.key(&format!("locks/{name}"))
    }
}

#[async_trait]
impl Lock for EtcdClient {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        grant::lock("etcd", name, || {
            let prefix = self.lock_prefix(name);
            acquire(&self.inner, &self.inner.locks, name, prefix, Vec::new(), true)
        })
        .await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        grant::try_lock("etcd", name, || {
            let prefix = self.lock_prefix(name);
            acquire(&self.inner, &self.inner.locks, name, prefix, Vec::new(), false)
        })
        .await
    }
}
