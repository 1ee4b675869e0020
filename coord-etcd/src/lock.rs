//! Locks: `<ns>/locks/<name>/<lease id hex>`, the layout of etcd's `concurrency.Mutex`
//! (`etcdctl lock <ns>/locks/<name>` excludes coord and vice versa).

use async_trait::async_trait;
use coord_core::{Error, ErrorKind, Lock, LockGuard, Result, validate_name};
use tracing::Instrument;

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
        validate_name("lock name", name).map_err(|e| e.with_operation("lock"))?;
        let span = tracing::debug_span!("coord.lock", backend = "etcd", name);
        let g = acquire(
            &self.inner,
            &self.inner.locks,
            name,
            self.lock_prefix(name),
            Vec::new(),
            true,
        )
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("lock"))?
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "a waiting lock returned without a grant"))?;
        Ok(LockGuard::new(name, g.fence, g.hold, Box::new(g.contender)))
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        validate_name("lock name", name).map_err(|e| e.with_operation("try_lock"))?;
        let span = tracing::debug_span!("coord.try_lock", backend = "etcd", name);
        let g = acquire(
            &self.inner,
            &self.inner.locks,
            name,
            self.lock_prefix(name),
            Vec::new(),
            false,
        )
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("try_lock"))?;
        Ok(g.map(|g| LockGuard::new(name, g.fence, g.hold, Box::new(g.contender))))
    }
}
