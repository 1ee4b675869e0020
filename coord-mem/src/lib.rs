//! In-memory coord backend: the embedded default, and a test double with fault
//! injection.
//!
//! Several [`MemClient`]s on one [`MemCluster`] behave like separate nodes of one
//! deployment: each has its own session with a TTL and keep-alives, locks are FIFO and
//! herd-free, elections have observers, registrations are re-created after session
//! loss, and config has compare-and-set, atomic commits, guarded writes and ordered
//! watches with `Resync` on gaps. The model follows etcd: one global revision counter,
//! per-key creation and modification revisions, an event history that can be compacted.
//!
//! # Fencing
//!
//! Tokens are the creation revision of the contender's key: strictly increasing for
//! every grant on the cluster. Guarded writes check that the contender's key still
//! exists with that revision.
//!
//! # Connection strings
//!
//! `mem://[namespace][?session_ttl=<duration>]`, on the process-wide
//! [`MemCluster::global`]. `session_ttl` defaults to 10 s (minimum 100 ms).
//!
//! # Fault injection
//!
//! [`MemClient::suspend`] (partition for a while), [`MemClient::blackhole`] (a silent
//! partition: requests wait, time out with their outcome unknown, and writes land when
//! the link is back, as on a real server), [`MemClient::crash`] (die without
//! cleanup), [`MemClient::expire_session`] / [`MemCluster::expire_session`] (server-side
//! expiry), [`MemCluster::compact`] (drop history so lagging watchers `Resync`). Sessions
//! run on tokio's clock: `tokio::time::pause()` and `advance()` move through timeouts.
//!
//! # Layout
//!
//! `<ns>/locks/<name>/<session hex>`, `<ns>/elections/<name>/<session hex>`,
//! `<ns>/services/<service>/<id>`, `<ns>/config/<key>`.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> coord_core::Result<()> {
//! use coord_core::prelude::*;
//! use coord_mem::{MemClient, MemCluster, MemOptions};
//!
//! let cluster = MemCluster::new();
//! let a = MemClient::connect(&cluster, MemOptions::default())?;
//! let b = MemClient::connect(&cluster, MemOptions::default())?;
//! let guard = a.lock("jobs").await?;
//! assert!(b.try_lock("jobs").await?.is_none());
//! guard.release().await?;
//! assert!(b.try_lock("jobs").await?.is_some());
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{Backend, ClientState, Counter, Stateful};
use coord_core::{Capabilities, Client, Result, SessionState, SessionStatus};
use tokio::time::Instant;

use crate::session::{Inner, LateWrites, Link, ReplyFaults, SessionSlot};

mod config;
mod error;
mod options;
mod queue;
mod registry;
mod session;
mod watch;

pub use coord_mem_cluster::MemCluster;
pub use options::{KNOWN_OPTIONS, MemOptions};

/// Opens a client from a `mem://` connection string on the process-wide cluster.
///
/// # Errors
///
/// `ConfigInvalid` for a malformed string or unknown option.
pub fn connect(url: &str) -> coord_core::Result<coord_core::Client> {
    MemClient::connect_url(url)
}

/// The in-memory backend of one client: one node with its own session on a
/// [`MemCluster`].
///
/// [`MemClient::connect`] returns the backend-agnostic [`Client`]; reach this type with
/// `client.backend_as::<MemClient>()` for its fault-injection hooks.
#[derive(Debug, Clone)]
pub struct MemClient {
    pub(crate) inner: Arc<Inner>,
}

impl MemClient {
    /// Opens a client on `cluster` with its own session. Must be called inside a tokio
    /// runtime (the session keep-alive runs as a task). The session ends when the last
    /// handle of the returned [`Client`] is dropped, or on `close`.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for invalid options.
    pub fn connect(cluster: &MemCluster, options: MemOptions) -> Result<Client> {
        options.validate()?;
        let prefix = match options.namespace.as_str() {
            "" => String::new(),
            ns => format!("{ns}/"),
        };
        let state = ClientState::new(
            "mem",
            options.namespace.clone(),
            SessionStatus::new(SessionState::Connected, 0),
        )
        .with_path_prefix(prefix)
        .with_session_timeout(options.session_ttl)
        .with_capabilities(Capabilities::ALL);
        let inner = Arc::new(Inner {
            cluster: cluster.clone(),
            options,
            link: tokio::sync::watch::channel(Link::Up).0,
            slot: Mutex::new(SessionSlot {
                id: 0,
                generation: 0,
                lost: false,
            }),
            faults: Mutex::new(ReplyFaults::default()),
            heard: Mutex::new(None),
            late: Arc::new(LateWrites(Mutex::new(Vec::new()))),
            state,
        });
        inner.stats.incr(Counter::SessionRequest);
        let (id, expired) = cluster.with(|s| s.grant_session(inner.options.session_ttl));
        *inner.slot() = SessionSlot {
            id,
            generation: 1,
            lost: false,
        };
        inner.session.set(SessionState::Connected, 1, &inner.stats);
        tokio::spawn(inner.clone().supervise(expired));
        Ok(coord_core::Client::from_backend(MemClient { inner }))
    }

    /// Opens a client from a `mem://namespace?session_ttl=…` connection string on the
    /// process-wide [`MemCluster::global`].
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for a malformed string or unknown option.
    pub fn connect_url(url: &str) -> Result<Client> {
        MemClient::connect(&MemCluster::global(), MemOptions::from_url(url)?)
    }

    /// The cluster this client talks to.
    pub fn cluster(&self) -> &MemCluster {
        &self.inner.cluster
    }

    /// The options in force.
    pub fn options(&self) -> &MemOptions {
        &self.inner.options
    }

    /// Fault hook: cuts this client off from the cluster for `duration`, as a network
    /// partition would. Requests fail with `Unavailable`, the session is `Suspended`,
    /// keep-alives stop; past the TTL the session is `Lost` (and the server expires it).
    pub fn suspend(&self, duration: Duration) {
        let until = Instant::now() + duration;
        self.inner.link.send_if_modified(|l| match l {
            Link::Up | Link::Down { .. } => {
                *l = Link::Down { until, silent: false };
                true
            }
            _ => false,
        });
    }

    /// Fault hook: the next `n` writes (config writes and transactions, contender joins,
    /// updates and removals, registrations) are applied by the cluster, and their replies
    /// lost: the caller gets `Unavailable` with an unknown outcome, as after a connection
    /// reset between a real server's commit and its answer.
    pub fn lose_replies(&self, n: usize) {
        self.inner.faults().lost_replies = n;
    }

    /// Fault hook: every reply takes `latency` from now on (zero: none), as a slow or
    /// distant server's would; requests are still applied at once.
    pub fn delay_replies(&self, latency: Duration) {
        self.inner.faults().latency = latency;
    }

    /// Fault hook: silences this client's link for `duration` (a blackhole: nothing is
    /// refused, nothing answers). Requests and replies wait until it ends or their
    /// deadline (the session TTL) passes; a write past its deadline fails with its outcome
    /// unknown and lands once the link is back (never if the client crashed or closed
    /// meanwhile); keep-alives stop, so the session is `Suspended` and, past the TTL,
    /// `Lost`; watches deliver nothing until the link is back.
    pub fn blackhole(&self, duration: Duration) {
        let until = Instant::now() + duration;
        self.inner.link.send_if_modified(|l| match l {
            Link::Up | Link::Down { .. } => {
                *l = Link::Down { until, silent: true };
                true
            }
            _ => false,
        });
    }

    /// When the cluster last heard from this client (a request or a keep-alive): the
    /// latest moment it can count from when it expires the session.
    pub fn last_heard(&self) -> Option<Instant> {
        *self.inner.heard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fault hook: ends a suspension early.
    pub fn resume(&self) {
        self.inner.link.send_if_modified(|l| match l {
            Link::Down { .. } => {
                *l = Link::Up;
                true
            }
            _ => false,
        });
    }

    /// Fault hook: the process dies. Nothing is cleaned up and nothing more is sent; the
    /// cluster expires the session after its TTL, as it would for a crashed node.
    pub fn crash(&self) {
        self.inner.link.send_replace(Link::Crashed);
    }

    /// Fault hook: expires this client's session from the server side (like a
    /// ZooKeeper session expiry or an etcd lease revoke).
    pub fn expire_session(&self) -> bool {
        let id = self.inner.slot().id;
        self.inner.cluster.expire_session(id)
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
impl Stateful for MemClient {
    fn state(&self) -> &ClientState {
        self.inner.state()
    }
}

#[doc(hidden)]
#[async_trait]
impl Backend for MemClient {
    fn session_id(&self) -> u64 {
        self.inner.slot().id
    }

    /// Lost a tenth of the TTL before the cluster may expire the session.
    fn loss_margin(&self) -> std::time::Duration {
        self.inner.options.session_ttl / 10
    }

    async fn server_version(&self) -> Result<Option<String>> {
        Ok(Some(format!("coord-mem {}", env!("CARGO_PKG_VERSION"))))
    }

    async fn close(&self) -> Result<()> {
        if !self.inner.mark_closed() {
            return Ok(());
        }
        // A crashed client says nothing more: its session expires on the server.
        if self.inner.link.send_replace(Link::Closed) != Link::Crashed {
            let id = self.inner.slot().id;
            self.inner.stats.incr(Counter::SessionRequest);
            self.inner.cluster.with(|s| s.end_session(id));
        }
        tracing::info!(namespace = %self.inner.options.namespace, "coord.mem.closed");
        Ok(())
    }
}
