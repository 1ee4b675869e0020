//! The client handle: one participant, one session, every primitive.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tracing::Instrument;

use crate::capabilities::Capabilities;
use crate::engine::local_queue::LocalQueue;
use crate::error::{ErrorKind, Result};
use crate::name::{validate_name, validate_prefix};
use crate::primitives::config::{ConfigEvent, ConfigStore, Entry};
use crate::primitives::registry::{Registration, Registry, RegistryEvent, ServiceInstance};
use crate::raw::{Backend, KvStore};
use crate::session::{SessionState, SessionStatus};
use crate::stats::Stats;
use crate::txn::{OpResult, Txn};
use crate::version::Versioned;

/// The longest [`Client::close`] waits for the cleanups the client owes the server.
pub const CLOSE_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// One coordination participant: a cheap `Clone` handle over a backend and its session.
///
/// Every method comes from the [`Lock`](crate::Lock), [`Election`](crate::Election),
/// [`Registry`] and [`ConfigStore`] traits (import them, or `coord::prelude::*`), so
/// generic code can take `impl Lock` as well as a `Client`.
///
/// # Session lifetime
///
/// The session lives until [`Client::close`] or until the last handle of the client is
/// dropped, which ends the session in the background (as `close` would) and stops every
/// background task. Guards, leaderships and registrations do not keep the session alive:
/// they report `Lost` (or fail) when it ends.
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::{ConfigStore, SessionState};
/// assert_eq!(client.session_state(), SessionState::Connected);
/// client.put("greeting", b"hello".to_vec()).await?;
/// client.close().await?;
/// assert_eq!(client.session_state(), SessionState::Closed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    core: Arc<ClientCore>,
}

/// What every handle of one client shares: the backend and the recipes' per-client
/// state. Its drop ends the session.
pub(crate) struct ClientCore {
    pub(crate) backend: Arc<dyn Backend>,
    /// This client's contenders per queue (directory and class): an exclusive queue's
    /// take turns at its key, one on the server at a time; a shared queue's each hold a
    /// slot of their own (`<key>\0<slot>`).
    pub(crate) contenders: LocalQueue,
    /// Whether this client's registrations are re-created on every new session (started
    /// by the first registration).
    pub(crate) registrations_followed: std::sync::OnceLock<()>,
    /// Waiting contenders woken by the entry ahead of them going ([`Stats::wakeups`]).
    pub(crate) wakeups: std::sync::atomic::AtomicU64,
    /// Cleanups owed to the server (a queue take's receipt, its taker lock), finished by
    /// [`Client::close`] before it ends the session.
    pub(crate) pending: crate::engine::pending::Pending,
    /// Per queue name, held by this client's take of that queue while it settles
    /// (receipt deleted, taker lock released): a `try_take` right after a `take` waits
    /// for it instead of finding the taker lock busy with this client's own settle.
    pub(crate) settling:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    /// This client's grants held with a lock-delay, released with their marks by
    /// [`Client::close`] before it ends the session (so their waiters need not hold off).
    pub(crate) marked_holds: crate::engine::contender::MarkedHolds,
    /// Where to end the session when the last handle is dropped outside the runtime.
    runtime: Option<tokio::runtime::Handle>,
}

impl Drop for ClientCore {
    fn drop(&mut self) {
        let backend = self.backend.clone();
        let close = async move {
            if let Err(e) = backend.close().await {
                tracing::debug!(error = %e, "coord.close_on_drop_failed: the session ends by timeout");
            }
        };
        match self
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        {
            Some(rt) => {
                rt.spawn(close);
            }
            // No runtime left: the backend's tasks have stopped with it, and the server
            // ends the session by timeout.
            None => tracing::debug!("coord.close_on_drop_skipped: no runtime"),
        }
    }
}

impl Client {
    /// Wraps a backend (see `raw::into_client`).
    pub(crate) fn from_backend(backend: Arc<dyn Backend>) -> Client {
        Client {
            core: Arc::new(ClientCore {
                backend,
                contenders: LocalQueue::default(),
                registrations_followed: std::sync::OnceLock::new(),
                wakeups: Default::default(),
                pending: Default::default(),
                settling: Default::default(),
                marked_holds: Default::default(),
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.core.backend
    }

    pub(crate) fn core(&self) -> &ClientCore {
        &self.core
    }

    /// The backend's scheme name: `mem`, `zk`, `etcd`.
    pub fn kind(&self) -> &'static str {
        self.core.backend.kind()
    }

    /// The namespace this client works under.
    pub fn namespace(&self) -> &str {
        self.core.backend.namespace()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.core.backend.capabilities()
    }

    /// The current session state.
    pub fn session_state(&self) -> SessionState {
        self.core.backend.session().borrow().state
    }

    /// A channel that always holds the latest [`SessionStatus`].
    pub fn session(&self) -> watch::Receiver<SessionStatus> {
        self.core.backend.session()
    }

    /// Where lock `name`'s contenders live on the server, to point other clients at it:
    /// Curator's `InterProcessMutex` and kazoo's `Lock` path on ZooKeeper, the prefix of
    /// Go's `concurrency.NewMutex` and `etcdctl lock` on etcd.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn lock_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("lock name", name)?;
        Ok(self.core.backend.path(&crate::primitives::lock::queue(name).dir))
    }

    /// Where election `name`'s candidates live: Curator's `LeaderLatch` path, the prefix
    /// of Go's `concurrency.NewElection` and `etcdctl elect`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn election_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("election name", name)?;
        Ok(self
            .core
            .backend
            .path(&crate::primitives::election::queue(name).dir))
    }

    /// Where read/write lock `name`'s contenders live: Curator's
    /// `InterProcessReadWriteLock` and kazoo's `ReadLock`/`Lock` path, the prefix of Go's
    /// `recipes.NewRWMutex` (readers under `read/`, writers under `write/`).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn rw_lock_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("read/write lock name", name)?;
        Ok(self
            .core
            .backend
            .path(&crate::primitives::rw_lock::queue(name, false).dir))
    }

    /// Where semaphore `name` lives: Curator's `InterProcessSemaphoreV2` path (its
    /// internal lock under `locks`, its leases under `leases`).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn semaphore_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("semaphore name", name)?;
        Ok(self.core.backend.path(&crate::primitives::semaphore::dir(name)))
    }

    /// The session timeout (ZooKeeper, as the server negotiated it) or lease TTL (etcd)
    /// of the current session: how long the server keeps the session after it last heard
    /// from this client.
    pub fn session_timeout(&self) -> std::time::Duration {
        self.core.backend.session_timeout()
    }

    /// The least time between this client reporting its session `Lost` and the earliest
    /// moment the server may expire the session and grant what it held to someone else:
    /// a process that must stop when it loses a lock has this long (ZooKeeper: 3/10 of
    /// the negotiated session timeout; etcd: a tenth of the lease TTL, at least 100 ms;
    /// mem: a tenth of the TTL). `coord lock` kills its command within half of it.
    pub fn loss_margin(&self) -> std::time::Duration {
        self.core.backend.loss_margin()
    }

    /// The server's id of the current session.
    pub fn session_id(&self) -> u64 {
        self.core.backend.session_id()
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        Stats {
            wakeups: self.core.wakeups.load(std::sync::atomic::Ordering::Relaxed),
            ..self.core.backend.stats()
        }
    }

    /// Whether `fence`'s grant is still the live holder of its resource: its entry is
    /// there with the grant's token. One request that writes nothing (the check a fenced
    /// write makes, with no write); for a resource that can call back and ask before it
    /// acts. Ask a client of the cluster and namespace that granted the fence: a fence of
    /// another namespace is refused (`InvalidArgument`); one of another cluster with the
    /// same namespace cannot be told apart, and its answer means nothing.
    ///
    /// # Fencing
    ///
    /// A check, not a guarantee: `true` can be stale by the time it is used (the
    /// holder's session may end right after). Only a write the store itself checks is
    /// safe — [`Txn::fenced_by`] for coord's config store, the gates of `coord-fence`
    /// for a database or an HTTP service. A `false` is final: a grant never comes back.
    /// Asked of the client that granted it, the guard the fence came from reports
    /// [`HoldState::Lost`](crate::HoldState) from then on, as after a refused fenced
    /// write (another client's `false` leaves the guard to its own watch).
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` when no server answers (the answer is then unknown);
    /// `Closed`; `InvalidArgument` for a fence of another namespace.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (it writes nothing).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::Lock as _;
    /// let client = coord_mem::connect("mem://is-current-doc")?;
    /// let guard = client.lock("reports").await?;
    /// let fence = guard.fence();
    /// assert!(client.is_current(&fence).await?);
    /// guard.release().await?;
    /// assert!(!client.is_current(&fence).await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_current(&self, fence: &crate::Fence) -> Result<bool> {
        if self.session_state() == SessionState::Closed {
            return Err(crate::Error::closed().with_operation("is_current"));
        }
        let root = self.core.backend.path("");
        let root = root.trim_end_matches('/');
        if !fence.resource().starts_with(&format!("{root}/")) {
            return Err(crate::Error::invalid_argument(format!(
                "the fence of {:?} is not of this client's namespace ({root:?}): ask a client of the namespace that granted it",
                fence.resource()
            ))
            .with_operation("is_current"));
        }
        let span =
            tracing::debug_span!("coord.is_current", resource = fence.resource(), token = %fence.token());
        let check = Txn::new().fenced_by(fence.clone());
        match KvStore::commit(self.core.backend.as_ref(), check)
            .instrument(span)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::Fenced => {
                // Proof the entry is gone only from the store of the client that granted
                // it: another client may be of another cluster.
                if fence.granted_by(origin_of(&self.core.backend)) {
                    fence.refused();
                }
                Ok(false)
            }
            Err(e) => Err(e.with_operation("is_current")),
        }
    }

    /// The version the server reports of itself: etcd's `Status` version, ZooKeeper's
    /// answer to the `srvr` command (`None` over TLS), `coord-mem` and its version on
    /// mem.
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` when no server answers; `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn server_version(&self) -> Result<Option<String>> {
        if self.session_state() == SessionState::Closed {
            return Err(crate::Error::closed().with_operation("server_version"));
        }
        let span = tracing::debug_span!("coord.server_version", backend = self.kind());
        self.core.backend.server_version().instrument(span).await
    }

    /// The concrete backend, for its own extra API, e.g. the in-memory backend's fault
    /// hooks: `client.backend_as::<coord_mem::MemClient>()`. `None` for another backend.
    pub fn backend_as<T: 'static>(&self) -> Option<&T> {
        self.core.backend.as_any().downcast_ref::<T>()
    }

    /// Ends the session (releasing every lock, leadership and registration) and stops
    /// background work. Later calls fail with `Closed`. Dropping the last handle does
    /// the same in the background.
    ///
    /// First it finishes the cleanups this client owes the server — a queue take's
    /// receipt deleted and its taker lock released — for at most [`CLOSE_FLUSH`]; one
    /// not finished by then is left to whoever comes next (a receipt left behind puts
    /// its item back at the head of the queue: delivered again, never lost). Grants held
    /// with a lock-delay are released first too, with their marks, so their waiters take
    /// over at once ([`Client::lock_with`]); dropping the last handle instead ends the
    /// session without them, and those waiters hold off as after a crash.
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` if the server could not be told; the session then ends
    /// by timeout.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the client is marked closed but the server may not have been told.
    pub async fn close(&self) -> Result<()> {
        crate::engine::contender::release_marked(&*self.core.backend, &self.core.marked_holds, CLOSE_FLUSH)
            .await;
        if !self.core.pending.settled(CLOSE_FLUSH).await {
            tracing::debug!("coord.close_cleanups_unfinished: left to the next taker");
        }
        self.core.backend.close().await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("kind", &self.kind())
            .field("namespace", &self.namespace())
            .field("session", &*self.core.backend.session().borrow())
            .finish()
    }
}

impl Client {
    /// The backend directory of `service`'s instances.
    fn service_dir(&self, service: &str) -> String {
        self.core.backend.path(&format!("services/{service}"))
    }
}

// The user's registry: validates, opens the span, names the operation in errors and
// runs the registration lifecycle, once for every backend's raw instance store.
#[async_trait]
impl Registry for Client {
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration> {
        validate_name("service name", service).map_err(|e| e.with_operation("register"))?;
        let store = self.core.backend.instance_store();
        self.core
            .registrations_followed
            .get_or_init(|| crate::engine::registration::follow_sessions(store.clone()));
        crate::engine::registration::register(&store, service, instance, &self.service_dir(service)).await
    }

    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>> {
        validate_name("service name", service).map_err(|e| e.with_operation("instances"))?;
        let span = tracing::debug_span!("coord.instances", backend = self.kind(), service);
        self.core
            .backend
            .instances(&self.service_dir(service))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("instances"))
    }

    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        validate_name("service name", service).map_err(|e| e.with_operation("watch"))?;
        let span = tracing::debug_span!("coord.registry.watch", backend = self.kind(), service);
        self.core
            .backend
            .watch_instances(&self.service_dir(service))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("watch"))
    }
}

// The user's config store: validates, opens the span and names the operation in
// errors, once for every backend's raw key-value store.
#[async_trait]
impl ConfigStore for Client {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        validate_name("config key", key).map_err(|e| e.with_operation("get"))?;
        let span = tracing::debug_span!("coord.get", backend = self.kind(), key);
        KvStore::get(&*self.core.backend, key)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("get"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        validate_prefix("config prefix", prefix).map_err(|e| e.with_operation("list"))?;
        let span = tracing::debug_span!("coord.list", backend = self.kind(), prefix);
        KvStore::list(&*self.core.backend, prefix)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("list"))
    }

    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        txn.validate().map_err(|e| e.with_operation("commit"))?;
        let span = tracing::debug_span!("coord.commit", backend = self.kind(), ops = txn.ops().len());
        let fences = txn.fences();
        let backend = self.core.backend.clone();
        async move {
            let result = KvStore::commit(&*backend, txn).await;
            if let Err(e) = &result
                && e.kind() == ErrorKind::Fenced
            {
                // Only this client's store proves its own grants' entries gone: a fence
                // of another client may be of another cluster.
                forfeit_refused(&*backend, &fences, origin_of(&backend)).await;
            }
            result
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("commit"))
    }

    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        validate_prefix("config prefix", prefix).map_err(|e| e.with_operation("watch"))?;
        let span = tracing::debug_span!("coord.config.watch", backend = self.kind(), prefix);
        KvStore::watch(&*self.core.backend, prefix)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("watch"))
    }
}

/// Tells the guards whose fence a commit was refused for that they are lost. With one
/// fence the refusal names it; with several, each is checked on its own (a commit of
/// its fence alone, which writes nothing), so that a guard still held is not declared
/// lost. A check that cannot be made leaves its guard as it is: its entry watch and
/// session still tell it. Only fences this client granted (`origin`) are told: another
/// client's fence may be of another cluster, whose entries this store does not hold.
async fn forfeit_refused(backend: &dyn crate::raw::Backend, fences: &[crate::Fence], origin: usize) {
    let own: Vec<&crate::Fence> = fences.iter().filter(|f| f.granted_by(origin)).collect();
    match (fences, own.as_slice()) {
        (_, []) => {}
        ([_], [only]) => only.refused(),
        (_, several) => {
            for &fence in several {
                let alone = Txn::new().fenced_by(fence.clone());
                if let Err(e) = KvStore::commit(backend, alone).await
                    && e.kind() == ErrorKind::Fenced
                {
                    fence.refused();
                }
            }
        }
    }
}

/// A client's identity in this process: the address of its backend, shared by every
/// clone of the client and by every grant it makes.
pub(crate) fn origin_of(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}
