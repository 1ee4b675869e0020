//! Barriers: a config key whose presence holds everyone who waits on it.

use crate::client::Client;
use crate::error::Result;
use crate::name::validate_name;

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
    pub(crate) client: Client,
    pub(crate) key: String,
}

impl Client {
    /// The barrier at config key `key` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad key.
    pub fn barrier(&self, key: &str) -> Result<Barrier> {
        validate_name("barrier key", key).map_err(|e| e.with_operation("barrier"))?;
        Ok(Barrier {
            client: self.clone(),
            key: key.to_owned(),
        })
    }
}

impl Barrier {
    /// The barrier's config key.
    pub fn key(&self) -> &str {
        &self.key
    }
}
