//! The erased client handle: one participant, one session, all four primitives.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::sync::watch;

use crate::capabilities::Capabilities;
use crate::config::{ConfigEvent, ConfigStore, Entry};
use crate::election::{Election, LeaderInfo, Leadership};
use crate::error::Result;
use crate::lock::{Lock, LockGuard};
use crate::registry::{Registration, Registry, RegistryEvent, ServiceInstance};
use crate::session::{SessionState, SessionStatus};
use crate::stats::Stats;
use crate::txn::{OpResult, Txn};
use crate::version::{Version, Versioned};

/// What a backend implements: the four primitives plus session control. Implemented by
/// `coord-mem`, `coord-zk` and `coord-etcd`; users hold a [`Client`].
#[async_trait]
pub trait Backend: Lock + Election + Registry + ConfigStore + Send + Sync + 'static {
    /// The backend's scheme name: `mem`, `zk`, `etcd`.
    fn kind(&self) -> &'static str;

    /// The namespace this client works under.
    fn namespace(&self) -> &str;

    /// What this backend promises beyond the common contract.
    fn capabilities(&self) -> Capabilities;

    /// The session status channel (always holds the latest status).
    fn session(&self) -> watch::Receiver<SessionStatus>;

    /// The server's id of the current session (ZooKeeper session id, etcd lease id, mem
    /// session number), for logs and fault injection.
    fn session_id(&self) -> u64;

    /// The client's counters.
    fn stats(&self) -> Stats;

    /// Ends the session, releasing everything bound to it, and stops background tasks.
    async fn close(&self) -> Result<()>;

    /// The concrete backend, for its own extra API (e.g. mem fault hooks).
    fn as_any(&self) -> &dyn Any;
}

/// One coordination participant: a cheap `Clone` handle over a backend.
///
/// Every method comes from the [`Lock`], [`Election`], [`Registry`] and [`ConfigStore`]
/// traits (import them, or `coord::prelude::*`), so generic code can take `impl Lock`
/// as well as a `Client`.
#[derive(Clone)]
pub struct Client {
    inner: Arc<dyn Backend>,
}

impl Client {
    /// Wraps a backend.
    pub fn new(backend: impl Backend) -> Self {
        Client {
            inner: Arc::new(backend),
        }
    }

    /// Wraps a shared backend.
    pub fn from_arc(backend: Arc<dyn Backend>) -> Self {
        Client { inner: backend }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    /// The backend's scheme name: `mem`, `zk`, `etcd`.
    pub fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    /// The namespace this client works under.
    pub fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// The current session state.
    pub fn session_state(&self) -> SessionState {
        self.inner.session().borrow().state
    }

    /// A channel that always holds the latest [`SessionStatus`].
    pub fn session(&self) -> watch::Receiver<SessionStatus> {
        self.inner.session()
    }

    /// The server's id of the current session.
    pub fn session_id(&self) -> u64 {
        self.inner.session_id()
    }

    /// The client's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Ends the session (releasing every lock, leadership and registration) and stops
    /// background work. Later calls fail with `Closed`.
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
        self.inner.close().await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("kind", &self.kind())
            .field("namespace", &self.namespace())
            .field("session", &*self.inner.session().borrow())
            .finish()
    }
}

#[async_trait]
impl Lock for Client {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        self.inner.lock(name).await
    }
    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.inner.try_lock(name).await
    }
}

#[async_trait]
impl Election for Client {
    async fn campaign(&self, name: &str, value: Vec<u8>) -> Result<Leadership> {
        self.inner.campaign(name, value).await
    }
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        self.inner.leader(name).await
    }
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<LeaderInfo>>>> {
        self.inner.observe(name).await
    }
}

#[async_trait]
impl Registry for Client {
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration> {
        self.inner.register(service, instance).await
    }
    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>> {
        self.inner.instances(service).await
    }
    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        Registry::watch(&*self.inner, service).await
    }
}

#[async_trait]
impl ConfigStore for Client {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        self.inner.list(prefix).await
    }
    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        self.inner.commit(txn).await
    }
    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        ConfigStore::watch(&*self.inner, prefix).await
    }
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Version> {
        self.inner.put(key, value).await
    }
    async fn compare_and_set(&self, key: &str, expected: Option<Version>, value: Vec<u8>) -> Result<Version> {
        self.inner.compare_and_set(key, expected, value).await
    }
    async fn delete(&self, key: &str) -> Result<bool> {
        self.inner.delete(key).await
    }
}
