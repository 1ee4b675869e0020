//! Distributed counting semaphores with fencing tokens.

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::name::validate_name;

/// The most permits a semaphore may have: the one acquirer that waits watches every
/// lease ahead of it.
pub const MAX_PERMITS: u32 = 1000;

/// A fair (FIFO), herd-free counting semaphore: at most `permits` leases are held at
/// once. Made by [`Client::semaphore`]; cheap to clone.
///
/// Each lease is bound to the client's session: a holder that crashes gives its lease
/// back when its session ends (within the session timeout or lease TTL). Acquirers queue
/// in arrival order on the semaphore's internal lock; only the one at the front watches
/// the leases, and it holds the internal lock only until it has its lease — so a release
/// notifies one waiting client, however many wait. One client may hold several leases
/// at once.
///
/// The permit count is stored with every lease coord makes; a client that asks for
/// another count while leases are held gets an error instead of silently changing the
/// limit. Once no lease is held, the next acquirer's count applies.
///
/// On the server: ZooKeeper, Curator's `InterProcessSemaphoreV2` layout
/// (`semaphores/<name>/locks` for the internal lock, `semaphores/<name>/leases` for
/// `_c_<guid>-lease-<seq>` leases), so coord and Curator share a semaphore on the same
/// path when both use the same count (Curator stores no count: coord checks only the
/// counts coord wrote); etcd and mem, the same two directories of keys under the lease.
///
/// # Fencing
///
/// Every lease has a [`FencingToken`](crate::FencingToken) above every earlier lease's on
/// the semaphore; up to `permits` holders hold at once, so their tokens overlap by
/// design. A lease's [`fence`](crate::LockGuard::fence) makes a config write conditional
/// on that lease still being held.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// let client = coord_mem::connect("mem://semaphore-doc")?;
/// let slots = client.semaphore("gpu", 2)?;
/// let a = slots.acquire().await?;
/// let b = slots.acquire().await?;
/// assert!(slots.try_acquire().await?.is_none(), "both permits are held");
/// a.release().await?;
/// let c = slots.acquire().await?;
/// assert!(c.token() > b.token());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) permits: u32,
}

impl Client {
    /// The counting semaphore `name` with `permits` leases (no request; each acquisition
    /// is a few).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name, or `permits` outside `1..=`[`MAX_PERMITS`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        validate_name("semaphore name", name).map_err(|e| e.with_operation("semaphore"))?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a semaphore needs 1 to {MAX_PERMITS} permits, not {permits}"),
            )
            .with_operation("semaphore"));
        }
        Ok(Semaphore {
            client: self.clone(),
            name: name.to_owned(),
            permits,
        })
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many leases hold at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }
}
