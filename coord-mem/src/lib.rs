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

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{Backend, ClientState, Counter, Stateful};
use coord_core::{Client, Error, Result, SessionState, SessionStatus};
use tokio::time::Instant;

use crate::session::{Link, SessionSlot};
use coord_mem_cluster::State;

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

// ---- client ----
// The in-memory client: one node with one session on a [`MemCluster`].

/// Shared state of one in-memory client.
#[derive(Debug)]
pub(crate) struct Inner {
    pub cluster: MemCluster,
    pub options: MemOptions,
    pub link: tokio::sync::watch::Sender<Link>,
    slot: Mutex<SessionSlot>,
    /// Injected faults on replies.
    faults: Mutex<ReplyFaults>,
    /// When the cluster last heard from this client (a request or a keep-alive).
    heard: Mutex<Option<Instant>>,
    /// Writes sent into a silent link and never answered, in the order sent: they land
    /// when the link is back ([`Inner::call_write`]).
    late: Arc<LateWrites>,
    /// Session status, counters, registrations, closed flag.
    state: ClientState,
}

/// A write in flight over a silent link, its answer no longer awaited.
type LateWrite = Box<dyn FnOnce(&mut State) + Send>;

/// A client's [`LateWrite`]s, in the order sent.
struct LateWrites(Mutex<Vec<LateWrite>>);

impl std::fmt::Debug for LateWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LateWrites({})", lock_late(self).len())
    }
}

fn lock_late(late: &LateWrites) -> MutexGuard<'_, Vec<LateWrite>> {
    late.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request to apply to the store, answering `R`.
type Request<R> = Box<dyn FnOnce(&mut State) -> R + Send>;

/// A write sent and not yet applied: dropped unapplied (its caller timed out or went
/// away), it is handed to [`Inner::land_late`].
struct InFlight<'a, R: 'static> {
    f: Option<Request<R>>,
    inner: &'a Inner,
}

impl<R: 'static> Drop for InFlight<'_, R> {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            self.inner.land_late(Box::new(move |s| drop(f(s))));
        }
    }
}

impl std::ops::Deref for Inner {
    type Target = ClientState;

    fn deref(&self) -> &ClientState {
        &self.state
    }
}

impl Inner {
    /// The state every backend keeps (for its methods that this type shadows).
    pub(crate) fn state(&self) -> &ClientState {
        &self.state
    }

    pub(crate) fn slot(&self) -> MutexGuard<'_, SessionSlot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The full key for `rest` under the namespace.
    pub(crate) fn key(&self, rest: &str) -> String {
        if self.options.namespace.is_empty() {
            rest.to_owned()
        } else {
            format!("{}/{rest}", self.options.namespace)
        }
    }

    /// Fails unless the link is up.
    pub(crate) fn check_link(&self) -> Result<()> {
        match *self.link.borrow() {
            Link::Up => Ok(()),
            Link::Down { .. } => Err(error::cut_off()),
            Link::Closed | Link::Crashed => Err(Error::closed()),
        }
    }

    /// One request to the cluster: checks the link, counts it, expires overdue sessions.
    pub(crate) fn request<R>(&self, counter: Counter, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        self.check_link()?;
        self.heard_now();
        self.stats.incr(counter);
        // Writes still in flight from a silent spell land first, in order.
        let mut pending = lock_late(&self.late);
        Ok(self.cluster.with(|s| {
            s.sweep();
            pending.drain(..).for_each(|w| w(s));
            f(s)
        }))
    }

    /// One request to the cluster as the real servers see it: applied at once (as by
    /// [`Inner::request`]), then its reply travels back — a point where the caller's future
    /// may be dropped after the cluster applied it, delayed by the injected latency, and
    /// lost if the link went down meanwhile or a lost reply was injected (a write's
    /// outcome is then unknown).
    ///
    /// Over a silent link (a blackhole) the request waits, unanswered, until the link is
    /// back or its deadline (the session TTL) passes: then it fails with `Timeout`, its
    /// outcome unknown for a write. The recipes' writes go through [`Inner::call_write`],
    /// which lands such a request later, as a real server may (a registration's
    /// re-creation by the session task is a plain [`Inner::request`], refused on a link
    /// that is down).
    pub(crate) async fn call<R>(&self, counter: Counter, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        let write = matches!(counter, Counter::Write | Counter::Txn);
        self.through_silence(write).await?;
        let out = self.request(counter, f)?;
        self.reply(write).await?;
        Ok(out)
    }

    /// A write as [`Inner::call`] sends it, except over a silent link: the request is in
    /// flight from the moment it is sent, as one sent into a real partition is. Past its
    /// deadline the caller is told `Timeout` (outcome unknown); a caller that stops
    /// waiting drops nothing. Either way the write lands once the link is back — before
    /// any later request of this client, in the order they were sent (a session's
    /// requests are applied in order) — and never if the link is reset, closed or
    /// crashed first. Its checks (a session still alive, a fence, a version) are made
    /// when it lands.
    pub(crate) async fn call_write<R, F>(&self, counter: Counter, f: F) -> Result<R>
    where
        R: 'static,
        F: FnOnce(&mut State) -> R + Send + 'static,
    {
        let mut flight = InFlight {
            f: Some(Box::new(f)),
            inner: self,
        };
        // On a timeout, or if this future is dropped while it waits, `flight` hands the
        // write to `land_late`.
        self.through_silence(true).await?;
        let Some(f) = flight.f.take() else {
            return Err(error::no_answer(self.options.session_ttl, true));
        };
        let out = self.request(counter, f)?;
        self.reply(true).await?;
        Ok(out)
    }

    /// Queues `f` behind this client's other writes in flight over the silent link, to
    /// be applied once the link is back up (by the first request then, or by the task
    /// spawned here); dropped if the link is reset, closed or crashed first.
    fn land_late(&self, f: LateWrite) {
        lock_late(&self.late).push(f);
        let mut link = self.link.subscribe();
        let (cluster, late) = (self.cluster.clone(), self.late.clone());
        tokio::spawn(async move {
            let up = match link
                .wait_for(|l| !matches!(l, Link::Down { silent: true, .. }))
                .await
            {
                Ok(l) => matches!(*l, Link::Up),
                Err(_) => false,
            };
            let mut pending = lock_late(&late);
            if !up {
                pending.clear();
                return;
            }
            if !pending.is_empty() {
                tracing::debug!(writes = pending.len(), "coord.mem.late_landing");
                cluster.with(|s| {
                    s.sweep();
                    pending.drain(..).for_each(|w| w(s));
                });
            }
        });
    }

    /// Waits while the link is silent, for at most a request's deadline.
    async fn through_silence(&self, write: bool) -> Result<()> {
        let mut rx = self.link.subscribe();
        let silent = |l: &Link| matches!(l, Link::Down { silent: true, .. });
        if !silent(&rx.borrow()) {
            return Ok(());
        }
        let deadline = self.options.session_ttl;
        match tokio::time::timeout(deadline, rx.wait_for(|l| !silent(l))).await {
            Ok(_) => Ok(()),
            Err(_) => Err(error::no_answer(deadline, write)),
        }
    }

    /// The reply of a request the cluster applied: see [`Inner::call`].
    pub(crate) async fn reply(&self, write: bool) -> Result<()> {
        tokio::task::yield_now().await;
        self.through_silence(write).await?;
        let latency = self.faults().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let lost = write && {
            let mut faults = self.faults();
            let lose = faults.lost_replies > 0;
            faults.lost_replies = faults.lost_replies.saturating_sub(1);
            lose
        };
        if lost || self.check_link().is_err() {
            if matches!(*self.link.borrow(), Link::Closed | Link::Crashed) {
                return Err(Error::closed());
            }
            return Err(error::reply_lost(write));
        }
        Ok(())
    }

    /// Notes that the cluster hears from this client now.
    pub(crate) fn heard_now(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn faults(&self) -> MutexGuard<'_, ReplyFaults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current session unless it is lost: `(id, generation)`. A suspended session
    /// (the link down) still counts, as on the real servers, whose sessions outlive a
    /// short outage: requests on it fail (or wait) until the link is back.
    pub(crate) fn live_session(&self) -> Result<(u64, u64)> {
        if self.is_closed() {
            return Err(Error::closed());
        }
        let slot = *self.slot();
        if slot.lost
            || !matches!(
                self.session.current().state,
                SessionState::Connected | SessionState::Suspended
            )
        {
            return Err(error::session_lost());
        }
        Ok((slot.id, slot.generation))
    }

    /// Waits until the link is up (or the client is closed).
    pub(crate) async fn link_up(&self) -> Result<()> {
        let mut rx = self.link.subscribe();
        let link = *rx
            .wait_for(|l| !matches!(l, Link::Down { .. }))
            .await
            .map_err(|_| Error::closed())?;
        match link {
            Link::Up => Ok(()),
            _ => Err(Error::closed()),
        }
    }
}

/// Faults injected on a client's replies.
#[derive(Debug, Default)]
pub(crate) struct ReplyFaults {
    /// How many of the next writes are applied with their reply lost.
    lost_replies: usize,
    /// How long each reply takes.
    latency: Duration,
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
        .with_session_timeout(options.session_ttl);
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
