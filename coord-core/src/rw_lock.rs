//! Distributed read/write locks with fencing tokens.

use crate::client::Client;
use crate::error::Result;
use crate::name::validate_name;

/// A fair (FIFO), herd-free distributed read/write lock: many readers or one writer.
/// Made by [`Client::rw_lock`]; cheap to clone.
///
/// Readers and writers queue in one line, in arrival order. A reader holds once no
/// writer is queued ahead of it (readers ahead do not block it); a writer holds once
/// nobody is ahead of it. A writer queued ahead of a reader therefore blocks that reader,
/// so a steady stream of readers never starves a writer. Each waiter watches only the
/// one entry that blocks it: a reader the nearest writer ahead, a writer the entry right
/// ahead. When a writer goes, the readers right behind it all wake (they hold together).
///
/// Within one client, writers on one name queue locally and reach the server one at a
/// time (like [`Lock`](crate::Lock)); readers hold at once, each with an entry of its
/// own. Neither is reentrant: a client that holds the write lock and asks for a read
/// lock on the same name waits for its own writer.
///
/// On the server: ZooKeeper, Curator's `InterProcessReadWriteLock` layout (`__READ__`
/// and `__WRIT__` contenders under one parent; kazoo's `__rlock__`/`__lock__` with
/// `lock_layout=kazoo`); etcd, Go's `recipes.RWMutex` layout (`<prefix>/read/…` and
/// `<prefix>/write/…` keys, ordered by revision), so coord and those libraries exclude
/// each other on the same path.
///
/// # Fencing
///
/// Every grant has a [`FencingToken`](crate::FencingToken); a write grant's token is
/// above every earlier grant's (read or write) on the name. Readers hold together, so
/// their tokens overlap by design: a resource guarded for writes should accept a write
/// only with a token at or above the highest it has seen. A read guard's
/// [`fence`](crate::LockGuard::fence) still makes a config write conditional on that read
/// being held (its entry existing), and a write guard's on the write being held.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// let client = coord_mem::connect("mem://rw-doc")?;
/// let rw = client.rw_lock("catalog")?;
/// let r1 = rw.read().await?;
/// let r2 = rw.read().await?; // readers share
/// assert!(rw.try_write().await?.is_none(), "a writer waits for the readers");
/// let read_token = r2.token();
/// r1.release().await?;
/// r2.release().await?;
/// let w = rw.write().await?;
/// assert!(w.token() > read_token);
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    pub(crate) client: Client,
    pub(crate) name: String,
}

impl Client {
    /// The read/write lock `name` (no request; each acquisition is one).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        validate_name("read/write lock name", name).map_err(|e| e.with_operation("rw_lock"))?;
        Ok(RwLock {
            client: self.clone(),
            name: name.to_owned(),
        })
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
