//! Locks on the in-memory cluster: keys `<ns>/locks/<name>/<session hex>`, ordered by
//! creation revision; token = creation revision.

use async_trait::async_trait;
use coord_core::{Lock, LockGuard, Result, validate_name};
use tracing::Instrument;

use crate::client::MemClient;
use crate::contender::acquire;

#[async_trait]
impl Lock for MemClient {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        validate_name("lock name", name).map_err(|e| e.with_operation("lock"))?;
        let span = tracing::debug_span!("coord.lock", backend = "mem", name);
        let dir = self.inner.key(&format!("locks/{name}"));
        let granted = acquire(&self.inner, &self.inner.locks, name, dir, Vec::new(), true)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("lock"))?;
        match granted {
            Some(g) => Ok(LockGuard::new(name, g.fence, g.hold, Box::new(g.contender))),
            None => Err(coord_core::Error::new(
                coord_core::ErrorKind::Unexpected,
                "a waiting lock returned without a grant",
            )),
        }
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        validate_name("lock name", name).map_err(|e| e.with_operation("try_lock"))?;
        let span = tracing::debug_span!("coord.try_lock", backend = "mem", name);
        let dir = self.inner.key(&format!("locks/{name}"));
        let granted = acquire(&self.inner, &self.inner.locks, name, dir, Vec::new(), false)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("try_lock"))?;
        Ok(granted.map(|g| LockGuard::new(name, g.fence, g.hold, Box::new(g.contender))))
    }
}
