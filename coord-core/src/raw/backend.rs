//! What a backend implements: its session, key-value operations with guarded
//! transactions and prefix watches (the [`ConfigStore`]), session-bound registrations
//! (the [`Registry`]), and the contender [`Queue`]. Locks and elections are written once
//! over the queue in `coord-core`.

use std::any::Any;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::raw::instances::RegistryStore;
use crate::raw::kv::KvStore;
use crate::raw::queue::Queue;
use crate::session::SessionStatus;
use crate::stats::Stats;

/// A backend: one participant with one session (and its successors after loss).
///
/// Implemented by `coord-mem`, `coord-zk` and `coord-etcd`; users hold a [`Client`],
/// made with `Client::from_backend`.
#[async_trait]
pub trait Backend: Queue + KvStore + RegistryStore + Send + Sync + 'static {
    /// The backend's scheme name: `mem`, `zk`, `etcd`.
    fn kind(&self) -> &'static str;

    /// The namespace this client works under.
    fn namespace(&self) -> &str;

    /// Where `rel`, a path relative to the namespace (`locks/a`), lives on the server:
    /// the znode path (`/<namespace>/locks/a`) or key prefix (`<namespace>/locks/a`).
    fn path(&self, rel: &str) -> String;

    /// What this backend promises beyond the common contract.
    fn capabilities(&self) -> Capabilities;

    /// The session status channel (always holds the latest status).
    fn session(&self) -> watch::Receiver<SessionStatus>;

    /// The server's id of the current session (ZooKeeper session id, etcd lease id, mem
    /// session number), for logs and fault injection.
    fn session_id(&self) -> u64;

    /// The client's counters.
    fn stats(&self) -> Stats;

    /// The session timeout / lease TTL of the current session as the server granted it
    /// (ZooKeeper negotiates it within its `minSessionTimeout`..`maxSessionTimeout`);
    /// before the first session, the one asked for.
    fn session_timeout(&self) -> std::time::Duration;

    /// The least time between this client reporting its session `Lost` and the earliest
    /// moment the server may expire the session and hand what it held on (ZooKeeper:
    /// 3/10 of the negotiated timeout; etcd: a tenth of the lease TTL, at least 100 ms;
    /// mem: a tenth of the TTL). Whatever a holder must stop, it must stop within this.
    fn loss_margin(&self) -> std::time::Duration;

    /// The version the server reports of itself (e.g. `3.4.30`), or `None` when the
    /// backend cannot ask (the default).
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` when the server does not answer; `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn server_version(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// Ends the session, releasing everything bound to it, and stops background tasks.
    /// Idempotent. Also called, in the background, when the last `Client` handle is
    /// dropped.
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` if the server could not be told; the session then ends by
    /// timeout.
    ///
    /// # Cancel safety
    ///
    /// The client is marked closed at once; if dropped, the server may not have been
    /// told, and the session ends by timeout.
    async fn close(&self) -> Result<()>;

    /// The concrete backend, for its own extra API (e.g. mem fault hooks).
    fn as_any(&self) -> &dyn Any;
}
