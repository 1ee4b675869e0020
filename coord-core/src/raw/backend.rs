//! What a backend implements: its session ([`Backend`], with the state every backend
//! keeps in a [`ClientState`] behind [`Stateful::state`]), key-value operations with
//! guarded transactions and prefix watches ([`KvStore`]), session-bound instances and
//! reading them ([`InstanceStore`], [`RegistryStore`]), and the contender [`ContenderQueue`].
//! Every recipe is written once over these in `coord-core`.

use std::any::Any;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::raw::client_state::Stateful;
use crate::raw::instances::{InstanceStore, RegistryStore};
use crate::raw::kv::KvStore;
use crate::raw::queue::ContenderQueue;
use crate::session::SessionStatus;
use crate::stats::Stats;

/// The concrete type behind a `dyn Backend`, for a backend's own extra API (e.g. mem
/// fault hooks). Implemented for every backend type (every [`Stateful`] one), and only
/// for those: `client.backend().as_any()` on the `Arc<dyn Backend>` reaches the
/// backend, never the `Arc` itself.
pub trait AsAny {
    /// `self` as [`Any`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: Stateful + Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A backend: one participant with one session (and its successors after loss).
///
/// Implemented by `coord-mem`, `coord-zk` and `coord-etcd`; users hold a `Client`, made
/// with `Client::from_backend`. Two methods are required here ([`Backend::session_id`]
/// and [`Backend::close`]); the rest are provided from [`Stateful::state`], and a
/// backend overrides them only where its server says otherwise (ZooKeeper's negotiated
/// session timeout and its loss margin).
#[async_trait]
pub trait Backend:
    Stateful + ContenderQueue + KvStore + InstanceStore + RegistryStore + AsAny + Send + Sync + 'static
{
    /// The server's id of the current session (ZooKeeper session id, etcd lease id, mem
    /// session number), for logs and fault injection; 0 while there is none.
    fn session_id(&self) -> u64;

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

    /// The backend's scheme name: `mem`, `zk`, `etcd`.
    fn kind(&self) -> &'static str {
        self.state().session.backend()
    }

    /// The namespace this client works under.
    fn namespace(&self) -> &str {
        self.state().session.namespace()
    }

    /// Where `rel`, a path relative to the namespace (`locks/a`), lives on the server:
    /// the znode path (`/<namespace>/locks/a`) or key prefix (`<namespace>/locks/a`).
    fn path(&self, rel: &str) -> String {
        self.state().path(rel)
    }

    /// What this backend promises beyond the common contract.
    fn capabilities(&self) -> Capabilities {
        self.state().capabilities()
    }

    /// The session status channel (always holds the latest status).
    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.state().session.subscribe()
    }

    /// The client's counters.
    fn stats(&self) -> Stats {
        self.state().stats.snapshot()
    }

    /// The session timeout / lease TTL of the current session as the server granted it
    /// (ZooKeeper negotiates it within its `minSessionTimeout`..`maxSessionTimeout`);
    /// before the first session, the one asked for.
    fn session_timeout(&self) -> std::time::Duration {
        self.state().session_timeout()
    }

    /// The least time between this client reporting its session `Lost` and the earliest
    /// moment the server may expire the session and hand what it held on. Whatever a
    /// holder must stop, it must stop within this. By default a tenth of the session
    /// timeout, at least 100 ms (etcd's rule); ZooKeeper: 3/10 of the negotiated
    /// timeout; mem: a tenth.
    fn loss_margin(&self) -> std::time::Duration {
        (self.session_timeout() / 10).max(std::time::Duration::from_millis(100))
    }

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
}
