//! ZooKeeper adapter for coord: all four primitives on a real ZooKeeper (3.6+; tested
//! with 3.8) through the `zookeeper-client` crate.
//!
//! # Connection string
//!
//! `zk://[user:password@]h1[:2181][,h2[:2181]…][/namespace][?key=value&…]`, or
//! `zk+tls://…` for TLS (feature `tls`).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `session_timeout` | `10s` | session timeout asked of the server (it clamps it to `[2, 20] × tickTime`) |
//! | `connect_timeout` | `15s` | how long `connect` waits for the first session |
//! | `request_timeout` | the session timeout | deadline of each request; a write that hits it has an unknown outcome |
//! | `tls_ca` | — (required for `zk+tls://`) | PEM file of the CA certificates that sign the servers' certificates |
//! | `tls_cert`, `tls_key` | — | PEM certificate and key of this client, for mutual TLS |
//! | `acl` | `creator-read-all` with credentials, `open` without | the ACL of every znode coord creates: `creator-read-all`, `creator` or `open` ([`ZkAcl`]) |
//! | `lock_layout` | `curator` | the names of the lock and read/write lock contenders coord creates: `curator` or `kazoo` ([`LockLayout`]) |
//!
//! Unknown keys are errors.
//!
//! # Security
//!
//! `user:password@` adds `digest` credentials, and by default every znode coord creates
//! (the namespace root, directories, contenders, registrations, config keys) gets
//! `creator-read-all`: only clients with the same credentials may create under, change
//! or delete it, anyone may read it. A client with other credentials or none gets
//! `PermissionDenied` naming the path on `lock`, `campaign`, `register` and config
//! writes (and on reads too with `acl=creator`). Without credentials nodes are open, as
//! ZooKeeper cannot bind an ACL to an anonymous creator; `acl=creator…` without
//! credentials is `ConfigInvalid`. coord never changes the ACL of an existing node: a
//! namespace created open stays open — create it with credentials first.
//!
//! `zk+tls://` verifies the servers against `tls_ca` (their certificates must name the
//! host you connect to) and presents `tls_cert` when given; the server needs a Netty
//! secure client port. A connect that fails is explained within about a second instead
//! of after the connect timeout: a server certificate the CA does not sign is
//! `ConfigInvalid` naming the CA file, a refused or missing client certificate is
//! `PermissionDenied` naming `tls_cert`, and `zk://` against a TLS port is `ConfigInvalid`
//! suggesting `zk+tls://`. Passwords and key material never appear in `Debug`, errors or
//! logs.
//!
//! # Sessions
//!
//! One task follows the client's session: `Disconnected` ⇒ `Suspended`; `Expired`, or
//! 7/10 of the negotiated timeout T after sending the last request *the ensemble's
//! leader* answered ⇒ `Lost`, whether the connection looks fine or not. The server cannot
//! expire the session earlier than T after that send, so `Lost` comes at least 3/10 T
//! before it (measured against a silent partition: 600 ms of a 2 s timeout). Only
//! writes, `sync`s and reconnects are answered through the leader: a follower cut off
//! from the leader keeps answering pings and reads from its own copy until it gives up
//! on the leader (`syncLimit · tickTime`, 10 s with ZooKeeper's defaults), while the
//! leader expires the session after T and grants its locks to others — so those answers
//! keep nothing `Held`, and a connection with no proven answer for T/2 is `Suspended`.
//! The margin is less by the member's report of the session's activity to the leader,
//! sent with its next ping reply (every half tick): 3/10 T − tickTime/2, 550 ms with
//! 100 ms ticks and a 2 s timeout, 200 ms at ZooKeeper's smallest timeout of two ticks.
//! The price: a leader whose commits take 7/10 T or longer (a disk stalled, say) cannot
//! be told from a lost one, and its clients give up their sessions.
//! A client that only reads or idles sends a `sync` whenever nothing was proven for
//! T/10, so a reset connection has at least 7/10 T − T/10 (3/5 of T) to come back
//! before the session is given up. That much is needed with several hosts: after every
//! host refused once, the client library waits between passes over them (about 0.3 s,
//! then 0.6 s, doubling, for three hosts), so a cut of T/4 may take until about
//! T/2 + 0.2 s to heal. The probes also stand in for the library's own pings, which it
//! sends only after 0.15 T without a request.
//! After `Lost` the old client is dropped — if its session is still alive it is *closed*
//! on reconnect, deleting its nodes, never resumed — and a new session is opened with
//! backoff; registrations are re-created on it.
//!
//! # Layout on the server
//!
//! Everything lives under `/<namespace>`:
//!
//! | primitive | znodes |
//! |---|---|
//! | lock | `locks/<name>/_c_<guid>-lock-<seq>` (ephemeral sequential; Curator `InterProcessMutex` on `/<namespace>/locks/<name>` excludes coord and vice versa) |
//! | election | `elections/<name>/_c_<guid>-latch-<seq>` holding the leader value (Curator `LeaderLatch` layout) |
//! | read/write lock | `rwlocks/<name>/_c_<guid>-__READ__<seq>` and `…-__WRIT__<seq>` (Curator `InterProcessReadWriteLock` on `/<namespace>/rwlocks/<name>`); a reader waits for the nearest writer ahead, a writer for the contender right ahead |
//! | semaphore | `semaphores/<name>/locks/_c_<guid>-lock-<seq>` (the internal lock, held while acquiring) and `semaphores/<name>/leases/_c_<guid>-lease-<seq>` holding the permit count (Curator `InterProcessSemaphoreV2` on `/<namespace>/semaphores/<name>`) |
//! | queue | items: config keys `<name>/items/<seq>` and `<name>/tail`; takers: `queues/<name>/takers/_c_<guid>-lock-<seq>` |
//! | double barrier | `barriers/<name>/_c_<guid>-member-<seq>` holding `<state>:<id>` (ephemeral sequential; coord's own layout) |
//! | two-phase commit | `transactions/<name>/coordinator/_c_<guid>-lock-<seq>`, votes `transactions/<name>/votes/_c_<guid>-vote-<seq>` holding `<commit\|abort>:<id>`; plan and decision: config keys `<name>/plan`, `<name>/decision` |
//! | with `lock_layout=kazoo` | `locks/<name>/<guid>__lock__<seq>`, `rwlocks/<name>/<guid>__rlock__<seq>` and `…__lock__<seq>` (kazoo's `Lock` and `ReadLock`) |
//!
//! coord recognises the contenders of both layouts (Curator's `lock-`, `__READ__`,
//! `__WRIT__`, kazoo's `__lock__`, `__rlock__`) on a lock path and waits for them, so it
//! excludes both libraries whichever names it creates. Each library recognises only its
//! own names: Curator does not see kazoo's contenders or kazoo Curator's, so pick the
//! layout of the library coord shares a path with.
//! | registry | `services/<service>/<id>` (ephemeral, JSON instance) |
//! | config | `config/<key with '/' written as ':'>` (persistent; one flat directory), each with an empty child `i-<64 random bits>`, made in the same `multi` as the node: the incarnation marker that makes compare-and-set exact (see below) |
//!
//! The namespace root and every directory coord creates (`locks`, `locks/<name>`,
//! `elections/…`, `services/…`, `config`) are *container* nodes, as Curator creates its
//! lock parents: the server deletes a container once its last child is gone, so dynamic
//! names (`jobs/<uuid>`) do not pile up. A create that finds its directory just deleted
//! makes it again (one extra request when that happens).
//!
//! Config writes: `put` is one `setData` (for a new key, one `multi` creating the node
//! and its marker) and never fails because others write the key; compare-and-set reads
//! the node with its children (`getChildren2`, one atomic read; skipped when this client
//! already saw that incarnation's marker) and sends one `multi` checking the marker and
//! the data version, so a key deleted and recreated to the same data version in between
//! fails it. Keys without a marker (another client's, an earlier coord's) are read as
//! any other; their first compare-and-set adds a marker, then reads the node again, so
//! a recreate between those requests fails it too. An earlier coord's markers (named
//! by the `czxid`) are not trusted. A tool that copies a key's whole subtree to a new
//! node (a backup restored with its children) copies the marker too, and to coord's
//! compare-and-set that node is then the same incarnation: restore without the `i-…`
//! children to make it a new one.
//! Delete a key by hand with `deleteall`. Config and registry watches re-read in batches
//! and deliver only states that existed (or `Resync`): see [`ConfigStore`](coord_core::ConfigStore).
//!
//! A name must not nest under a session-bound node: a service `a/b` cannot coexist with
//! an instance `b` of service `a` (ZooKeeper forbids children of ephemeral nodes); the
//! failure is `InvalidArgument`.
//!
//! # Fencing
//!
//! Token = the contender znode's `czxid`, taken from the create's `Stat`: it increases
//! with every grant on the ensemble, across session loss and restarts, and unlike the
//! sequence suffix it does not restart when a parent is recreated. Guarded writes are
//! `multi[check(own node), …]`.
//!
//! # Capabilities
//!
//! ZooKeeper watches fire once and are re-armed by a read, so changes between a
//! notification and its read are coalesced: `every_watch_event` and
//! `every_leader_change` are false. Watches always end on the latest state, and a session
//! loss is reported as `Resync` followed by a fresh snapshot.
//!
//! # Round trips
//!
//! Uncontended `lock` + `release`: create, list children, arm the own-node watch, delete
//! (4 requests; 2 more when the lock's directory was swept as an empty container
//! meanwhile). Config `put` of an existing key: one `setData`; of a new key, one `multi`
//! (plus a stat of its marker on servers that return no stat from a `multi`,
//! ZOOKEEPER-4026). A session with no write answered for 1/10 of the timeout sends a
//! `sync` (counted as a session request).
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() -> coord_core::Result<()> {
//! use coord_core::prelude::*;
//! let client = coord_zk::connect("zk://127.0.0.1:2181/myapp?session_timeout=5s").await?;
//! let guard = client.lock("jobs/nightly").await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod config;
mod connection;
mod error;
mod fanout;
mod options;
mod queue;
mod registry;
mod session;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{Backend, Backoff, ClientState, Stateful};
use coord_core::{Client, Result};
use tracing::Instrument;

pub use options::ZkAcl;

/// A ZooKeeper session of a [`ZkClient`] (its id and password), to end it from another
/// connection. Its `Debug` shows the id only.
#[derive(Clone)]
pub struct ZkSessionHandle(zookeeper_client::SessionInfo);

impl ZkSessionHandle {
    /// The session id.
    pub fn id(&self) -> i64 {
        self.0.id().0
    }

    /// One attempt to end the session from a second connection to `hosts`: attach to
    /// it (with a 2 s session timeout) and close it. `Ok(true)` once the server no longer
    /// knows the session (it and its ephemeral nodes are gone); `Ok(false)` after an
    /// attach and close (attempt again to see it gone).
    ///
    /// Each host is tried once, in order, and the attempt does not retry by itself: when
    /// the session's own client takes the session back (the server moves a session to
    /// the connection that attached last), it fails at once, so the caller can attach again
    /// while that client is still in its handshake. The client then waits before its
    /// next try, which lets the next attach and close through; an attempt that retried
    /// by itself would come back only after the client is settled again.
    ///
    /// # Errors
    ///
    /// `Unavailable` when no host took the attach, or the session's own client took
    /// the session back first: attempt again, at once.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the second connection is closed, and the session may or may not
    /// have ended.
    pub async fn close_elsewhere(&self, hosts: &str) -> Result<bool> {
        let attached = zookeeper_client::Client::connector()
            .with_session(self.0.clone())
            .with_session_timeout(std::time::Duration::from_secs(2))
            .with_fail_eagerly()
            .connect(hosts)
            .await;
        match attached {
            Err(zookeeper_client::Error::SessionExpired) => Ok(true),
            Ok(other) => {
                // Dropping the only handle sends CloseSession; the state turns terminal
                // once the server answered or the library gave up.
                let mut state = other.state_watcher();
                drop(other);
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
                    while !state.changed().await.is_terminated() {}
                })
                .await;
                Ok(false)
            }
            Err(e) => Err(coord_core::Error::new(
                coord_core::ErrorKind::Unavailable,
                format!(
                    "cannot attach to the session (no host took it, or its own client took it back): {e}"
                ),
            )),
        }
    }
}

impl std::fmt::Debug for ZkSessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkSessionHandle").field("id", &self.id()).finish()
    }
}
pub use options::{DEFAULT_PORT, KNOWN_OPTIONS, LockLayout, ZkOptions};

use session::Inner;

/// The ZooKeeper backend of one client: one participant with one ZooKeeper session.
///
/// [`ZkClient::connect`] returns the backend-agnostic [`Client`]; reach this type with
/// `client.backend_as::<ZkClient>()` for its Curator-compatible paths and session info.
#[derive(Clone)]
pub struct ZkClient {
    pub(crate) inner: Arc<Inner>,
}

impl ZkClient {
    /// Opens a session and starts supervising it. The session ends when the last handle
    /// of the returned [`Client`] is dropped, or on `close`.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for bad options; `Unavailable`/`Timeout` when no session could be
    /// opened within `connect_timeout`; `PermissionDenied` for bad credentials.
    ///
    /// # Cancel safety
    ///
    /// If dropped after the session opened, the session is closed when the half-built
    /// client is dropped.
    pub async fn connect(options: ZkOptions) -> Result<Client> {
        options.validate()?;
        let span = tracing::info_span!("coord.zk.connect", hosts = %options.connect_string(), namespace = %options.namespace);
        let establish = async {
            let started = tokio::time::Instant::now();
            let first = connection::open_session(&options, options.connect_timeout).await?;
            let inner = Inner::new(options.clone(), first);
            inner.stats.incr(coord_core::raw::Counter::SessionRequest);
            if !inner.root.is_empty() {
                // Idempotent: a connection lost on the way (a member going down, the
                // ensemble electing a leader) is retried, within the connect timeout.
                let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
                loop {
                    match inner.ensure_dir(&inner.root).await {
                        Ok(()) => break,
                        Err(e) if e.is_retryable() && started.elapsed() < options.connect_timeout => {
                            tracing::debug!(error = %e, "coord.zk.connect_retry");
                            backoff.wait().await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Ok::<_, coord_core::Error>(inner)
        };
        let inner = establish.instrument(span).await?;
        tokio::spawn(inner.clone().supervise());
        Ok(coord_core::Client::from_backend(ZkClient { inner }))
    }

    /// The options in force.
    pub fn options(&self) -> &ZkOptions {
        &self.inner.options
    }

    /// The current ZooKeeper session, to end it from another connection as a server
    /// would on expiry (tests use this; see `coord_testkit::expire_session`). `None`
    /// while there is no session.
    pub fn session_handle(&self) -> Option<ZkSessionHandle> {
        self.inner.session_info().map(ZkSessionHandle)
    }
}

impl std::fmt::Debug for ZkClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkClient")
            .field("options", &self.inner.options)
            .finish()
    }
}

/// Opens a client from a `zk://` connection string.
///
/// # Errors
///
/// As [`ZkClient::connect`], plus `ConfigInvalid` for a malformed string.
///
/// # Cancel safety
///
/// As [`ZkClient::connect`].
pub async fn connect(url: &str) -> Result<Client> {
    ZkClient::connect(ZkOptions::from_url(url)?).await
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
impl Stateful for ZkClient {
    fn state(&self) -> &ClientState {
        &self.inner
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl Backend for ZkClient {
    fn session_id(&self) -> u64 {
        self.inner.session_id() as u64
    }

    /// As negotiated with the server for the current session.
    fn session_timeout(&self) -> std::time::Duration {
        self.inner
            .current()
            .map_or(self.inner.options.session_timeout, |c| c.zk.session_timeout())
    }

    /// Lost at 7/10 of the negotiated timeout (the session loop's rule).
    fn loss_margin(&self) -> std::time::Duration {
        self.session_timeout() * 3 / 10
    }

    async fn server_version(&self) -> Result<Option<String>> {
        connection::server_version(&self.inner.options).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
