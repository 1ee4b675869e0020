//! The barrier over the config store: raise = create the key, remove = delete it, wait =
//! watch it until it is gone.

use futures::StreamExt;
use tracing::Instrument;

use crate::barrier::Barrier;
use crate::config::{ConfigEvent, ConfigStore};
use crate::error::{Error, ErrorKind, Result};

impl Barrier {
    /// Raises the barrier (creates its key; raising a raised barrier changes nothing).
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` (with `outcome_unknown` when it may be raised), `Closed`,
    /// `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the barrier may or may not be raised.
    pub async fn raise(&self) -> Result<()> {
        let span = tracing::debug_span!("coord.barrier.raise", backend = self.client.kind(), key = %self.key);
        async {
            match self.client.compare_and_set(&self.key, None, Vec::new()).await {
                Ok(_) => Ok(()),
                // Raised already.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => Ok(()),
                Err(e) => Err(e),
            }
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("barrier raise"))
    }

    /// Removes the barrier (deletes its key): every waiter goes on. Removing a barrier
    /// that is not raised changes nothing.
    ///
    /// # Errors
    ///
    /// As [`Barrier::raise`].
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the barrier may or may not be removed.
    pub async fn remove(&self) -> Result<()> {
        let span =
            tracing::debug_span!("coord.barrier.remove", backend = self.client.kind(), key = %self.key);
        self.client
            .delete(&self.key)
            .instrument(span)
            .await
            .map(drop)
            .map_err(|e| e.with_operation("barrier remove"))
    }

    /// Whether the barrier is raised now.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn is_raised(&self) -> Result<bool> {
        Ok(self
            .client
            .get(&self.key)
            .await
            .map_err(|e| e.with_operation("barrier is_raised"))?
            .is_some())
    }

    /// Waits until the barrier is not raised (at once if it is not). Watch gaps are
    /// filled by a fresh snapshot, so a removal during an outage is still seen. For a
    /// bounded wait, wrap it in `tokio::time::timeout`.
    ///
    /// # Errors
    ///
    /// `Closed`; `Unavailable`/`Timeout` if the watch cannot start.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is left on the server.
    pub async fn wait(&self) -> Result<()> {
        let span = tracing::debug_span!("coord.barrier.wait", backend = self.client.kind(), key = %self.key);
        async {
            let mut events = ConfigStore::watch(&self.client, &self.key).await?;
            let mut raised = true;
            while let Some(event) = events.next().await {
                match event? {
                    ConfigEvent::Snapshot(entries) => raised = entries.iter().any(|e| e.key == self.key),
                    ConfigEvent::Put(e) if e.key == self.key => raised = true,
                    ConfigEvent::Delete(k) if k == self.key => raised = false,
                    _ => {}
                }
                if !raised {
                    return Ok(());
                }
            }
            Err(Error::closed())
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("barrier wait"))
    }
}
