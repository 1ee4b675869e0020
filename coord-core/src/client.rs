//! The client handle: one participant, one session, every primitive.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::Instrument;

use crate::capabilities::Capabilities;
use crate::engine::client_core::ClientCore;
use crate::error::{ErrorKind, Result};
use crate::raw::{Backend, KvStore};
use crate::session::{SessionState, SessionStatus};
use crate::stats::Stats;
use crate::txn::Txn;

/// The longest [`Client::close`] waits for the cleanups the client owes the server.
pub const CLOSE_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// One coordination participant: a cheap `Clone` handle over a backend and its session.
///
/// Every method comes from the [`Lock`](crate::Lock), [`Election`](crate::Election),
/// [`Registry`](crate::Registry) and [`ConfigStore`](crate::ConfigStore) traits (import them, or `coord::prelude::*`), so
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

impl Client {
    /// Wraps a backend in the user's client: how a backend crate's `connect` ends. The
    /// session ends when the last handle of the client is dropped (or on
    /// [`Client::close`]).
    pub fn from_backend(backend: impl Backend) -> Client {
        Client {
            core: Arc::new(ClientCore::new(Arc::new(backend))),
        }
    }

    /// The backend behind this client, for recipes written over the backend contract
    /// ([`crate::raw`]) outside `coord-core`.
    pub fn backend(&self) -> &Arc<dyn Backend> {
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
    /// use coord_core::Granted as _;
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
                if fence.granted_by(crate::engine::client_core::origin_of(&self.core.backend)) {
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
        crate::raw::AsAny::as_any(&*self.core.backend).downcast_ref::<T>()
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
    /// over at once ([`Lock::lock_with`](crate::Lock::lock_with)); dropping the last handle instead ends the
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
        crate::engine::marked_holds::release_marked(
            &*self.core.backend,
            &self.core.marked_holds,
            CLOSE_FLUSH,
        )
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
