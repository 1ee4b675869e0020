//! The lease session: one lease per client, kept alive at TTL/3. A keep-alive that is
//! overdue ⇒ Suspended; the local deadline (last acknowledged keep-alive send + TTL −
//! margin) passing, or the server saying the lease is gone ⇒ Lost. Then the old lease is
//! revoked if it is still alive (its keys must not linger as zombies), a new lease is
//! granted, and registrations are re-created.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use coord_core::raw::{ClientState, Counter};
use coord_core::{Error, ErrorKind, Result, SessionState, SessionStatus};
use etcd_client as etcd;
use tokio::sync::{OnceCell, watch};
use tokio::time::Instant;

use crate::error::map;
use crate::options::EtcdOptions;

/// The current lease and which of our sessions it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub id: i64,
    pub generation: u64,
}

/// A lease just granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub id: i64,
    pub ttl: Duration,
    /// When the grant was sent: the server's TTL cannot have started earlier.
    pub sent: Instant,
}

/// Shared state of one etcd client.
pub(crate) struct Inner {
    pub options: EtcdOptions,
    /// `<namespace>/`, or empty.
    pub prefix: String,
    members: Members,
    lease: RwLock<Option<Lease>>,
    /// Bumped whenever a removal of a contender key may still be in flight after it
    /// failed: contenders created afterwards get keys that removal can never reach.
    key_epoch: AtomicU64,
    /// Session status, counters, local queues, registrations, closed flag.
    state: ClientState,
}

impl std::ops::Deref for Inner {
    type Target = ClientState;

    fn deref(&self) -> &ClientState {
        &self.state
    }
}

/// The members' gRPC clients (no global request timeout: it would cut blocking waits),
/// connected lazily by [`Members`].
///
/// With credentials each member's client authenticates when first used, so a wrong
/// password fails the first request, and refreshes its token whenever the server says it
/// expired (etcd's simple tokens expire after `--auth-token-ttl` unused), so a long-held
/// lock outlives any token. Requests carry `require_leader`: a member cut off from the
/// cluster's leader refuses them (and ends its watches) instead of stalling, and the
/// client moves on to another member.
///
/// # Errors
///
/// `ConfigInvalid` for unreadable TLS files; `Unsupported` for TLS without the feature.
pub(crate) fn open_members(options: &EtcdOptions) -> Result<Members> {
    let mut connect = etcd::ConnectOptions::new()
        .with_connect_timeout(member_connect_timeout(options))
        .with_require_leader(true)
        // etcd refuses pings more often than every 5 s by default.
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_keep_alive_while_idle(true);
    if let Some((user, password)) = &options.credentials {
        connect = connect
            .with_user(user.clone(), password.clone())
            .with_auto_token_refresh(true);
    }
    if let Some(tls) = &options.tls {
        connect = with_tls(connect, tls)?;
    }
    Ok(Members::new(options.urls(), connect))
}

/// How long one member's connection may take: members are tried one after another, so
/// a silent one (a blackholed link: SYNs dropped) must leave the others time within
/// `connect_timeout`: its share among the members, at least 500 ms.
fn member_connect_timeout(options: &EtcdOptions) -> Duration {
    let members = u32::try_from(options.endpoints.len()).unwrap_or(u32::MAX).max(1);
    (options.connect_timeout / members)
        .max(Duration::from_millis(500))
        .min(options.connect_timeout)
}

/// Runs `establish` (connect and first lease); with the `tls` feature, a TLS probe
/// explains a failure at once instead of a bare "transport error" or a timeout — etcd's
/// client connects lazily, so a TLS mismatch shows only on the first request.
///
/// # Cancel safety
///
/// As `establish`.
pub(crate) async fn explain_failures<T>(
    options: &EtcdOptions,
    establish: impl Future<Output = Result<T>>,
) -> Result<T> {
    use coord_core::raw::reach::{self, Service};
    reach::connect_or_explain(
        Service::Etcd,
        &options.endpoints,
        Duration::from_millis(750),
        // Boxed: the connect's state is large, and cases run on small stacks.
        Box::pin(explain_tls_failures(options, Box::pin(establish))),
    )
    .await
}

async fn explain_tls_failures<T>(
    options: &EtcdOptions,
    establish: impl Future<Output = Result<T>>,
) -> Result<T> {
    #[cfg(feature = "tls")]
    {
        let probe = coord_core::raw::tls_probe::Probe {
            scheme: if options.tls.is_some() {
                "etcd+https"
            } else {
                "etcd"
            },
            tls_scheme: "etcd+https",
            hosts: options.endpoints.clone(),
            tls: options.tls.clone(),
        };
        coord_core::raw::tls_probe::connect_or_explain(&probe, Duration::from_millis(750), establish).await
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = options;
        establish.await
    }
}

/// What a failed first request of `connect` means, keeping the cause.
pub(crate) fn connect_error(mapped: Error, options: &EtcdOptions) -> Error {
    let endpoints = options.urls().join(",");
    match mapped.kind() {
        ErrorKind::Unavailable | ErrorKind::Timeout => Error::new(
            mapped.kind(),
            format!(
                "cannot connect to etcd at {endpoints} ({}): is the server running and reachable?{}",
                mapped.message(),
                plaintext_hint(options)
            ),
        )
        .with_operation("connect")
        .with_retryable(true),
        ErrorKind::PermissionDenied if mapped.message().contains("authentication failed") => Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "etcd at {endpoints} refused the credentials of user {:?}: check the user:password in the connection string",
                options.credentials.as_ref().map(|(u, _)| u.as_str()).unwrap_or("")
            ),
        )
        .with_operation("connect")
        .with_retryable(false),
        _ => mapped.with_operation("connect"),
    }
}

/// `connect` got no lease within `connect_timeout`.
pub(crate) fn connect_timeout(options: &EtcdOptions) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "no answer from etcd at {} within {:?}{}",
            options.urls().join(","),
            options.connect_timeout,
            plaintext_hint(options)
        ),
    )
    .with_operation("connect")
}

/// A hint for plaintext clients: a TLS-only server looks like a dead one to them.
fn plaintext_hint(options: &EtcdOptions) -> &'static str {
    if options.tls.is_none() {
        " (if the server serves TLS, use etcd+https:// with tls_ca=…)"
    } else {
        ""
    }
}

/// Adds the CA and the optional client identity, read from their PEM files.
#[cfg(feature = "tls")]
fn with_tls(connect: etcd::ConnectOptions, tls: &coord_core::raw::TlsFiles) -> Result<etcd::ConnectOptions> {
    coord_core::raw::tls_probe::ensure_default_provider();
    let ca = read_pem(&tls.ca_file, "tls_ca", "CERTIFICATE")?;
    let mut config = etcd::TlsOptions::new().ca_certificate(etcd::Certificate::from_pem(ca));
    if let Some((cert, key)) = &tls.identity {
        let cert = read_pem(cert, "tls_cert", "CERTIFICATE")?;
        let key = read_pem(key, "tls_key", "PRIVATE KEY")?;
        config = config.identity(etcd::Identity::from_pem(cert, key));
    }
    Ok(connect.with_tls(config))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: etcd::ConnectOptions, _: &coord_core::raw::TlsFiles) -> Result<etcd::ConnectOptions> {
    Err(Error::new(
        ErrorKind::Unsupported,
        "etcd+https:// needs the `tls` feature of coord-etcd (or of coord)",
    )
    .with_operation("connect"))
}

/// The contents of a PEM file given as `key`, which must hold a `-----BEGIN … what`
/// block. The message names the file, never its contents.
#[cfg(feature = "tls")]
fn read_pem(path: &std::path::Path, key: &str, what: &str) -> Result<Vec<u8>> {
    let data = std::fs::read(path).map_err(|e| {
        Error::config_invalid(format!("cannot read the {key} file {}: {e}", path.display()))
            .with_operation("connect")
    })?;
    let text = String::from_utf8_lossy(&data);
    let holds = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(what));
    if !holds {
        return Err(Error::config_invalid(format!(
            "the {key} file {} holds no PEM {what} block",
            path.display()
        ))
        .with_operation("connect"));
    }
    Ok(data)
}

/// The part of a member's client a request uses.
pub(crate) trait Service {
    fn of(client: &etcd::Client) -> Self;
}

impl Service for etcd::Client {
    fn of(client: &etcd::Client) -> Self {
        client.clone()
    }
}

impl Service for etcd::KvClient {
    fn of(client: &etcd::Client) -> Self {
        client.kv_client()
    }
}

impl Service for etcd::MaintenanceClient {
    fn of(client: &etcd::Client) -> Self {
        client.maintenance_client()
    }
}

impl Service for etcd::WatchClient {
    fn of(client: &etcd::Client) -> Self {
        client.watch_client()
    }
}

impl Inner {
    pub(crate) fn new(options: EtcdOptions, members: Members) -> Arc<Inner> {
        let prefix = if options.namespace.is_empty() {
            String::new()
        } else {
            format!("{}/", options.namespace)
        };
        let state = ClientState::new(
            "etcd",
            options.namespace.clone(),
            SessionStatus::new(SessionState::Lost, 0),
        )
        .with_path_prefix(prefix.clone())
        .with_session_timeout(options.lease_ttl);
        Arc::new(Inner {
            options,
            prefix,
            members,
            lease: RwLock::new(None),
            key_epoch: AtomicU64::new(0),
            state,
        })
    }

    /// The suffix of contender keys created now (0: none).
    pub(crate) fn key_epoch(&self) -> u64 {
        self.key_epoch.load(Ordering::Acquire)
    }

    /// A removal failed and may still land later: contender keys change from now on.
    pub(crate) fn bump_key_epoch(&self) {
        self.key_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// `<namespace>/<rel>`.
    pub(crate) fn key(&self, rel: &str) -> String {
        format!("{}{rel}", self.prefix)
    }

    /// The current lease, or why there is none.
    pub(crate) fn lease(&self) -> Result<Lease> {
        if self.is_closed() {
            return Err(Error::closed());
        }
        (*self.lease.read().unwrap_or_else(|p| p.into_inner())).ok_or_else(|| {
            Error::new(
                ErrorKind::SessionLost,
                "the etcd lease was lost and a new one is not granted yet; retry",
            )
        })
    }

    pub(crate) fn lease_id(&self) -> i64 {
        self.lease().map(|l| l.id).unwrap_or(0)
    }

    /// One request to the current member, with the request deadline and error mapping.
    /// When the member fails it (unreachable, no answer, no leader), the next member
    /// becomes current and, for a read or a request that provably never left, the request
    /// is sent there; a write that may have arrived is not repeated: its outcome is
    /// unknown. Each member is tried at most once.
    ///
    /// `f` gets the part of the member's client it needs ([`Service`]): a KV request
    /// clones the KV service's handle only.
    pub(crate) async fn call<T, S, F, Fut>(
        &self,
        counter: Counter,
        op: &'static str,
        write: bool,
        f: F,
    ) -> Result<T>
    where
        S: Service,
        F: Fn(S) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd::Error>>,
    {
        if self.is_closed() {
            return Err(Error::closed().with_operation(op));
        }
        self.request(counter, op, write, f).await
    }

    /// One transaction on one incarnation of `key`: `then` if its create revision is
    /// `created` (0: the key is absent), else `otherwise`. Every conditional write of a
    /// contender's or an instance's own key goes through here, so none touches a later
    /// incarnation of the same key or re-creates a key that is gone.
    pub(crate) async fn at_incarnation(
        &self,
        counter: Counter,
        op: &'static str,
        key: &str,
        created: i64,
        then: Vec<etcd::TxnOp>,
        otherwise: Vec<etcd::TxnOp>,
    ) -> Result<etcd::TxnResponse> {
        let key = key.to_owned();
        self.call(counter, op, true, move |mut c: etcd::KvClient| {
            let txn = etcd::Txn::new()
                .when([etcd::Compare::create_revision(
                    key.clone(),
                    etcd::CompareOp::Equal,
                    created,
                )])
                .and_then(then.clone())
                .or_else(otherwise.clone());
            async move { c.txn(txn).await }
        })
        .await
    }

    /// [`Inner::call`], even after `close` (for the revoke that ends the session).
    async fn request<T, S, F, Fut>(&self, counter: Counter, op: &'static str, write: bool, f: F) -> Result<T>
    where
        S: Service,
        F: Fn(S) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd::Error>>,
    {
        let deadline = self.options.request_timeout;
        let mut tries = self.members.len();
        loop {
            tries -= 1;
            let (member, client) = self.members.client().await.map_err(|e| map(e, op, write))?;
            self.stats.incr(counter);
            let e = match tokio::time::timeout(deadline, Box::pin(f(S::of(client)))).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    self.members.failed(member);
                    if !write && tries > 0 {
                        continue;
                    }
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!("no answer from etcd within {deadline:?}"),
                    )
                    .with_operation(op)
                    .with_outcome_unknown(write));
                }
            };
            if !crate::error::member_failure(&e) {
                return Err(map(e, op, write));
            }
            self.members.failed(member);
            let unsent = crate::session::never_sent(&e);
            if tries == 0 || (write && !unsent) {
                return Err(map(e, op, write && !unsent));
            }
            tracing::debug!(op, error = %e, "coord.etcd.retry_on_next_member");
        }
    }

    /// Changes whenever the client moves to another member: streams re-open there.
    pub(crate) fn member_moves(&self) -> tokio::sync::watch::Receiver<u64> {
        self.members.moves()
    }

    /// Grants a lease of the configured TTL.
    pub(crate) async fn grant(&self) -> Result<Granted> {
        let ttl = self.options.ttl_secs();
        let sent = Instant::now();
        // Sent as a read: a grant that may have been applied is sent again (on the next
        // member); the lease nobody heard of expires by its TTL.
        let resp = self
            .call(
                Counter::SessionRequest,
                "lease grant",
                false,
                |mut c: etcd::Client| async move { c.lease_grant(ttl, None).await },
            )
            .await?;
        let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1).max(1));
        Ok(Granted {
            id: resp.id(),
            ttl: granted,
            sent,
        })
    }

    /// The first lease, for `connect`: a grant that fails because no member could
    /// serve it (all down or electing a leader) is tried again until it succeeds or
    /// fails otherwise; the caller bounds it with `connect_timeout`.
    pub(crate) async fn first_grant(&self) -> Result<Granted> {
        let mut backoff = coord_core::raw::Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut tries = 0;
        loop {
            match self.grant().await {
                Err(e)
                    if e.is_retryable()
                        && matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) =>
                {
                    tries += 1;
                    // Each try asked every member: after a few, an unreachable cluster is
                    // reported rather than waited out.
                    if tries >= 5 {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "coord.etcd.connect_retry");
                    backoff.wait().await;
                }
                other => return other,
            }
        }
    }

    /// Installs a freshly granted lease as session `generation`; false (nothing
    /// installed: revoke it) if the client was closed meanwhile. Checked under the lock
    /// `close` takes the lease with, so a lease is either installed and revoked by
    /// `close`, or refused here.
    pub(crate) fn install(&self, granted: &Granted, generation: u64) -> bool {
        {
            let mut slot = self.lease.write().unwrap_or_else(|p| p.into_inner());
            if self.is_closed() {
                return false;
            }
            *slot = Some(Lease {
                id: granted.id,
                generation,
            });
        }
        self.session.set(SessionState::Connected, generation, &self.stats);
        true
    }

    /// Revokes the lease (deleting its keys) and stops supervision.
    pub(crate) async fn close(&self) -> Result<()> {
        if !self.mark_closed() {
            return Ok(());
        }
        let old = self.lease.write().unwrap_or_else(|p| p.into_inner()).take();
        tracing::info!(namespace = %self.options.namespace, "coord.etcd.closed");
        if let Some(lease) = old {
            match self
                .request(
                    Counter::SessionRequest,
                    "close",
                    true,
                    |mut c: etcd::Client| async move { c.lease_revoke(lease.id).await },
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::SessionLost => {}
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        "lease revoke timed out; the lease expires by TTL",
                    )
                    .with_operation("close"));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The supervision loop, from the lease `granted`; ends when the client is closed.
    pub(crate) async fn supervise(self: Arc<Self>, mut granted: Granted) {
        loop {
            let Ok(lease) = self.lease() else { return };
            let reason = self.keep_alive(lease, &granted).await;
            let Some(reason) = reason else { return };
            if self.is_closed() {
                return;
            }
            tracing::warn!(namespace = %self.options.namespace, generation = lease.generation, reason, "coord.etcd.session_lost");
            *self.lease.write().unwrap_or_else(|p| p.into_inner()) = None;
            self.remember_past_session(lease.id);
            self.declare_lost(lease.generation);
            // Never resume a lease we gave up on: revoke it so its keys go now.
            let inner = self.clone();
            tokio::spawn(async move {
                let _ = inner
                    .call(
                        Counter::SessionRequest,
                        "lease revoke",
                        true,
                        |mut c: etcd::Client| async move { c.lease_revoke(lease.id).await },
                    )
                    .await;
            });
            match self.regrant(lease.generation + 1).await {
                Some(g) => granted = g,
                None => return,
            }
        }
    }

    /// Keeps `lease` alive until it is lost (returns why) or the client closes (`None`).
    async fn keep_alive(&self, lease: Lease, granted: &Granted) -> Option<&'static str> {
        let ttl = granted.ttl;
        let interval = ttl / 3;
        let margin = loss_margin(ttl);
        // The server started the TTL when it handled the grant: no earlier than its send.
        let mut last_ok_sent = granted.sent;
        let mut stream: Option<(MemberId, etcd::LeaseKeeper, etcd::LeaseKeepAliveStream)> = None;
        loop {
            if self.is_closed() {
                return None;
            }
            let deadline = last_ok_sent + ttl - margin;
            if Instant::now() >= deadline {
                return Some("no keep-alive acknowledged within the lease TTL");
            }
            let sent_at = Instant::now();
            let wait = interval.min(deadline - sent_at);
            let answered = tokio::time::timeout(wait, async {
                if stream.is_none() {
                    let (member, c) = self
                        .members
                        .client()
                        .await
                        .map_err(|e| map(e, "keep-alive", false))?;
                    let (keeper, responses) = c.lease_client().keep_alive(lease.id).await.map_err(|e| {
                        self.members.failed(member);
                        map(e, "keep-alive", false)
                    })?;
                    stream = Some((member, keeper, responses));
                }
                let (_, keeper, responses) = stream
                    .as_mut()
                    .ok_or_else(|| Error::new(ErrorKind::Unexpected, "no stream"))?;
                self.stats.incr(Counter::SessionRequest);
                keeper
                    .keep_alive()
                    .await
                    .map_err(|e| map(e, "keep-alive", false))?;
                responses
                    .message()
                    .await
                    .map_err(|e| map(e, "keep-alive", false))?
                    .ok_or_else(|| Error::new(ErrorKind::Unavailable, "keep-alive stream ended"))
            });
            let outcome = tokio::select! {
                r = answered => r,
                _ = self.closed() => return None,
            };
            match outcome {
                Ok(Ok(resp)) if resp.ttl() > 0 => {
                    last_ok_sent = sent_at;
                    self.session
                        .set(SessionState::Connected, lease.generation, &self.stats);
                }
                Ok(Ok(_)) => return Some("the server says the lease is gone"),
                Ok(Err(e)) if e.kind() == ErrorKind::SessionLost => {
                    return Some("the server says the lease is gone");
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "coord.etcd.keep_alive_failed");
                    // A broken or overdue stream: the member is suspect; use another.
                    if let Some((member, ..)) = stream.take() {
                        self.members.failed(member);
                    }
                    self.session
                        .set(SessionState::Suspended, lease.generation, &self.stats);
                }
                Err(_overdue) => {
                    if let Some((member, ..)) = stream.take() {
                        self.members.failed(member);
                    }
                    self.session
                        .set(SessionState::Suspended, lease.generation, &self.stats);
                }
            }
            // Next keep-alive at TTL/3 after this one was sent (sooner after a failure).
            let next = if stream.is_some() {
                sent_at + interval
            } else {
                Instant::now() + interval / 4
            };
            // Never sleep past the local deadline: Lost is due exactly then.
            let next = next.min(deadline);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = self.closed() => return None,
            }
        }
    }

    /// Grants the next lease with backoff; `None` if closed meanwhile.
    async fn regrant(self: &Arc<Self>, generation: u64) -> Option<Granted> {
        let granted = self.retry_until_closed("lease grant", || self.grant()).await?;
        if !self.install(&granted, generation) {
            let id = granted.id;
            let _ = self
                .call(
                    Counter::SessionRequest,
                    "lease revoke",
                    true,
                    |mut c: etcd::Client| async move { c.lease_revoke(id).await },
                )
                .await;
            return None;
        }
        Some(granted)
    }
}

// ---- members ----
// Failover across the cluster's members: one gRPC client per member in the connection
// string, one of them current. Every request goes to the current member; a request that
// fails because of the member (it refuses connections, does not answer, or has lost its
// leader) makes the next member current. A member that comes back is used again when
// the rotation reaches it.
//
// `etcd-client` balances one channel over all members, but a member that is down when
// a request is routed to it fails that request; and a request can go to any member, so
// with one member down most requests fail. Pinning one member and moving on failure
// keeps a client working while any minority is down.

/// The members of one client and the one in use.
pub(crate) struct Members {
    urls: Vec<String>,
    options: etcd::ConnectOptions,
    clients: Vec<OnceCell<etcd::Client>>,
    current: AtomicUsize,
    /// Bumped on every move to another member: long-lived streams (watches) follow.
    moved: watch::Sender<u64>,
}

/// The member a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberId(usize);

impl Members {
    /// Members at `urls` (at least one), connected lazily with `options`.
    pub(crate) fn new(urls: Vec<String>, options: etcd::ConnectOptions) -> Members {
        let clients = urls.iter().map(|_| OnceCell::new()).collect();
        Members {
            urls,
            options,
            clients,
            current: AtomicUsize::new(0),
            moved: watch::Sender::new(0),
        }
    }

    /// How many members there are.
    pub(crate) fn len(&self) -> usize {
        self.urls.len()
    }

    /// The current member's client, connecting it first if needed (with credentials,
    /// connecting authenticates, which is a request). A member that cannot be connected
    /// makes the next one current; after trying each once, the last error.
    ///
    /// # Errors
    ///
    /// The etcd error of the last member tried.
    pub(crate) async fn client(&self) -> std::result::Result<(MemberId, &etcd::Client), etcd::Error> {
        let mut last = None;
        for _ in 0..self.len() {
            let i = self.current.load(Ordering::Acquire) % self.len();
            let url = &self.urls[i];
            let connected = self.clients[i]
                .get_or_try_init(|| etcd::Client::connect([url.as_str()], Some(self.options.clone())))
                .await;
            match connected {
                Ok(c) => return Ok((MemberId(i), c)),
                Err(e) if crate::error::member_failure(&e) => {
                    tracing::debug!(member = %url, error = %e, "coord.etcd.member_unreachable");
                    self.failed(MemberId(i));
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| etcd::Error::InvalidArgs("no etcd endpoints".into())))
    }

    /// `member` failed a request: if it is still current, the next one becomes current.
    pub(crate) fn failed(&self, member: MemberId) {
        let n = self.len();
        let next = (member.0 + 1) % n;
        if n > 1
            && self
                .current
                .compare_exchange(member.0, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            tracing::info!(from = %self.urls[member.0], to = %self.urls[next], "coord.etcd.member_switch");
            self.moved.send_modify(|n| *n += 1);
        }
    }

    /// Changes whenever another member becomes current.
    pub(crate) fn moves(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }
}

/// Whether the request behind `e` can never have reached a server: the connection
/// itself could not be made. Such a request is safe to send again, writes included.
pub(crate) fn never_sent(e: &etcd::Error) -> bool {
    let text = match e {
        etcd::Error::GRpcStatus(s) => s.message().to_owned(),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    };
    text.contains("tcp connect error")
        || text.contains("error trying to connect")
        || text.contains("Connection refused")
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("urls", &self.urls)
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// How long before the server may expire a lease of `ttl` the client reports it lost:
/// a tenth of the TTL, at least 100 ms.
pub(crate) fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(100))
}
