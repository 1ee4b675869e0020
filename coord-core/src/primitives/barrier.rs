//! Barriers: a config key whose presence holds everyone who waits on it.
//!
//! The barrier over the config store: raise = create the key, remove = delete it, wait =
//! watch it until it is gone.

use futures::StreamExt;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::name::validate_name;
use crate::primitives::config::ConfigStore;
use crate::types::ConfigEvent;

/// A barrier (Curator's `DistributedBarrier`): while the config key `key` exists, every
/// [`Barrier::wait`] waits; once it is deleted, they all go on. Made by
/// [`Client::barrier`]; cheap to clone.
///
/// The key is persistent (not bound to a session): a barrier raised by a process that
/// then crashes stays up until someone removes it. Every waiter watches the key, so
/// removing the barrier notifies them all — that is its purpose.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// let client = coord_mem::connect("mem://barrier-doc")?;
/// let gate = client.barrier("deploy/gate")?;
/// gate.raise().await?;
/// let waiter = { let gate = gate.clone(); tokio::spawn(async move { gate.wait().await }) };
/// gate.remove().await?;
/// waiter.await.expect("the waiter ran")?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Barrier {
    client: Client,
    key: String,
}

impl Client {
    /// The barrier named `name`, kept at the config key `name` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn barrier(&self, name: &str) -> Result<Barrier> {
        validate_name("barrier name", name).map_err(|e| e.with_operation("barrier"))?;
        Ok(Barrier {
            client: self.clone(),
            key: name.to_owned(),
        })
    }
}

impl Barrier {
    /// The barrier's name (its config key), as every primitive's identifier is.
    pub fn name(&self) -> &str {
        &self.key
    }
}

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
