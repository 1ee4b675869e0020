//! etcd adapter for coord: all four primitives on etcd v3 (tested with 3.4) through the
//! `etcd-client` crate.
//!
//! # Connection string
//!
//! `etcd://[user:password@]h1[:2379][,h2[:2379]…][/namespace][?key=value&…]`, or
//! `etcd+https://…` for TLS (feature `tls`).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `lease_ttl` | `10s` | TTL of the client's lease (whole seconds, at least 1 s) |
//! | `connect_timeout` | `5s` | how long `connect` waits for the cluster |
//! | `request_timeout` | `5s` | deadline of each request; a write that hits it has an unknown outcome |
//! | `tls_ca` | — (required for `etcd+https://`) | PEM file of the CA certificates that sign the members' certificates |
//! | `tls_cert`, `tls_key` | — | PEM certificate and key of this client, for members started with `--client-cert-auth` |
//!
//! Unknown keys are errors. There is no global gRPC timeout (it would cut blocking
//! waits); each request has its own.
//!
//! # Security
//!
//! `user:password@` authenticates with etcd's auth: `connect` fails with
//! `PermissionDenied` on a wrong password (naming the user, never the password) and with
//! `ConfigInvalid` when the server has authentication off. The token is refreshed
//! whenever the server says it expired (simple tokens expire after `--auth-token-ttl`
//! unused), so a lock held for hours keeps working. What the user may touch is the
//! server's business: give its role `readwrite` on the namespace prefix
//! (`etcdctl role grant-permission ROLE --prefix=true readwrite myapp/`); a request
//! outside its roles fails with `PermissionDenied`. Leases need no permission.
//!
//! `etcd+https://` verifies the members against `tls_ca` and presents `tls_cert` when
//! given. A connect that fails is explained within about a second instead of after the
//! connect timeout: a member whose certificate the CA does not sign is `ConfigInvalid`
//! naming the CA file; a member that refuses the client certificate (or wants one) is
//! `PermissionDenied` naming `tls_cert`; `etcd://` against a TLS port is `ConfigInvalid`
//! suggesting `etcd+https://`. Passwords, tokens and key material never appear in
//! `Debug`, errors or logs.
//!
//! # Sessions
//!
//! One lease per client, granted with `lease_ttl` (the granted TTL is read back), kept
//! alive at TTL/3 by a loop that re-opens the keep-alive stream on error. An overdue
//! keep-alive ⇒ `Suspended`; the local deadline (last acknowledged keep-alive *send* +
//! TTL − max(TTL/10, 100 ms), so never later than the server's expiry — measured against
//! a silent partition: 210 ms before it with a 2 s TTL) passing, or the server saying
//! the lease is gone ⇒ `Lost`. Then the old lease is revoked (if it is still alive its
//! keys must not linger), a new lease is granted, and registrations are re-created.
//! Every lock, election and registration key is written under the lease.
//!
//! # Layout on the server
//!
//! | primitive | keys |
//! |---|---|
//! | lock | `<ns>/locks/<name>/<lease id hex>` (`-<n>` appended after a removal that may land late) — Go's `concurrency.Mutex` layout: `etcdctl lock <ns>/locks/<name>` and coord exclude each other |
//! | election | `<ns>/elections/<name>/<lease id hex>` holding the leader value (`concurrency.Election`) |
//! | read/write lock | `<ns>/rwlocks/<name>/read/<lease id hex>[.<slot>]` and `…/write/<lease id hex>` — Go's `recipes.RWMutex` layout: `recipes.NewRWMutex(s, "<ns>/rwlocks/<name>")` and coord exclude each other. A reader waits for the newest `write/` key created before its own, a writer for the newest key of either class; a client's readers beyond the first hold at once with `.<slot>` keys |
//! | semaphore | `<ns>/semaphores/<name>/locks/<lease id hex>` (the internal lock, held while acquiring) and `<ns>/semaphores/<name>/leases/<lease id hex>[.<slot>]` holding the permit count; the acquirer at the front reads every lease and watches those ahead of it |
//! | queue | items: config keys `<ns>/config/<name>/items/<seq>` and `…/<name>/tail`; takers: `<ns>/queues/<name>/takers/<lease id hex>` |
//! | double barrier | `<ns>/barriers/<name>/<lease id hex>[.<slot>]` holding `<state>:<id>` |
//! | two-phase commit | `<ns>/transactions/<name>/coordinator/<lease id hex>`, votes `<ns>/transactions/<name>/votes/<lease id hex>[.<slot>]` holding `<commit\|abort>:<id>`; plan and decision: config keys `<name>/plan`, `<name>/decision` |
//! | registry | `<ns>/services/<service>/<id>` under the lease, JSON instance |
//! | config | `<ns>/config/<key>` (persistent) |
//!
//! # Fencing
//!
//! Token = the contender key's `create_revision`, unique and increasing across the
//! cluster's history. Guarded writes are `Txn(If create_revision(own key) == token,
//! Then …)`. A release is a plain delete of the key (as Go's); a stale release can never
//! delete a newer holder's key: only this client makes keys under its lease, and its
//! later contenders take another key whenever a delete may still land (an entry lost to
//! someone else, a delete failed or cut off).
//!
//! # Capabilities
//!
//! etcd watches deliver every revision in order, so `every_watch_event` and
//! `every_leader_change` hold. A watch that cannot resume because its revision was
//! compacted reports `Resync` and a fresh snapshot.
//!
//! # Round trips
//!
//! Uncontended `lock`: one `Txn` (create if absent + read the queue); `release`: one
//! delete (with a lock-delay: one `Txn`, the delete if the create revision matches and
//! the release mark). A background watch on the holder's own key
//! (to report `Lost` if an operator deletes it) is not on the critical path.
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() -> coord_core::Result<()> {
//! use coord_core::prelude::*;
//! let client = coord_etcd::connect("etcd://127.0.0.1:2379/myapp?lease_ttl=5s").await?;
//! let guard = client.lock("jobs/nightly").await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod config;
mod connection;
mod error;
mod hub;
mod options;
mod queue;
mod registry;
mod session;
mod watch;

use std::sync::Arc;

use async_trait::async_trait;
use coord_core::raw::{Backend, ClientState, Stateful};
use coord_core::{Client, Result};

pub use options::{DEFAULT_PORT, EtcdOptions, KNOWN_OPTIONS};

use session::Inner;

/// The etcd backend of one client: one participant with one lease.
///
/// [`EtcdClient::connect`] returns the backend-agnostic [`Client`]; reach this type with
/// `client.backend_as::<EtcdClient>()` for its `concurrency`-compatible key prefixes and
/// lease id.
#[derive(Clone)]
pub struct EtcdClient {
    pub(crate) inner: Arc<Inner>,
}

impl EtcdClient {
    /// Connects, grants the lease, and starts keeping it alive. The session ends (the
    /// lease is revoked) when the last handle of the returned [`Client`] is dropped, or on
    /// `close`.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for bad options; `Unavailable`/`Timeout` when the cluster cannot
    /// be reached within `connect_timeout`; `PermissionDenied` for bad credentials;
    /// `Unsupported` for `etcd+https://` without the `tls` feature.
    ///
    /// # Cancel safety
    ///
    /// If dropped after the lease was granted, the lease expires by its TTL.
    pub async fn connect(options: EtcdOptions) -> Result<Client> {
        use tracing::Instrument as _;
        options.validate()?;
        let span = tracing::info_span!("coord.etcd.connect", endpoints = ?options.urls(), namespace = %options.namespace);
        let establish = async {
            let members = connection::open_members(&options)?;
            // Once the settings are known good: every endpoint refused or unresolved is
            // said now, per endpoint.
            Box::pin(coord_core::raw::reach::before_connect(
                coord_core::raw::reach::Service::Etcd,
                &options.endpoints,
            ))
            .await?;
            let inner = Inner::new(options.clone(), members);
            let granted = tokio::time::timeout(
                coord_core::raw::reach::for_the_connect(options.connect_timeout),
                inner.first_grant(),
            )
            .await
            .map_err(|_| connection::connect_timeout(&options))?
            .map_err(|e| connection::connect_error(e, &options))?;
            Ok((inner, granted))
        };
        // Connect and explanation together keep to connect_timeout.
        let (inner, granted) = tokio::time::timeout(
            options.connect_timeout,
            connection::explain_failures(&options, establish),
        )
        .instrument(span)
        .await
        .map_err(|_| connection::connect_timeout(&options))??;
        inner.install(&granted, 1);
        tokio::spawn(inner.clone().supervise(granted));
        Ok(coord_core::Client::from_backend(EtcdClient { inner }))
    }

    /// The options in force.
    pub fn options(&self) -> &EtcdOptions {
        &self.inner.options
    }

    /// The current lease id (0 between leases).
    pub fn lease_id(&self) -> i64 {
        self.inner.lease_id()
    }
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("options", &self.inner.options)
            .finish()
    }
}

/// Opens a client from an `etcd://` or `etcd+https://` connection string.
///
/// # Errors
///
/// As [`EtcdClient::connect`], plus `ConfigInvalid` for a malformed string.
///
/// # Cancel safety
///
/// As [`EtcdClient::connect`].
pub async fn connect(url: &str) -> Result<Client> {
    EtcdClient::connect(EtcdOptions::from_url(url)?).await
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
impl Stateful for EtcdClient {
    fn state(&self) -> &ClientState {
        &self.inner
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl Backend for EtcdClient {
    fn session_id(&self) -> u64 {
        self.inner.lease_id() as u64
    }

    async fn server_version(&self) -> Result<Option<String>> {
        let status = self
            .inner
            .call(
                coord_core::raw::Counter::Read,
                "server_version",
                false,
                |mut c: etcd_client::MaintenanceClient| async move { c.status().await },
            )
            .await?;
        Ok(Some(status.version().to_owned()))
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
