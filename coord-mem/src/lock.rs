//! Locks on the in-memory cluster: keys `<ns>/locks/<name>/<session hex>`, ordered by
//! creation revision; token = creation revision.

use async_trait::async_trait;
use coord_core::{Lock, LockGuard, Result, grant};

use crate::client::MemClient;
use crate::contender::acquire;

impl MemClient {
    fn lock_dir(&self, name: &str) -> String {
        self.inner.key(&format!("locks/{name}"))
    }
}

#[async_trait]
impl Lock for MemClient {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        grant::lock("mem", name, || {
            acquire(
                &self.inner,
                &self.inner.locks,
                name,
                self.lock_dir(name),
                Vec::new(),
                true,
            )
        })
        .await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        grant::try_lock("mem", name, || {
            acquire(
                &self.inner,
                &self.inner.locks,
                name,
                self.lock_dir(name),
                Vec::new(),
                false,
            )
        })
        .await
    }
}
