//! The lease session: one lease per client, kept alive at TTL/3. A keep-alive that is
//! overdue ⇒ Suspended; the local deadline (last acknowledged keep-alive send + TTL −
//! margin) passing, or the server saying the lease is gone ⇒ Lost. Then the old lease is
//! revoked if it is still alive (its keys must not linger as zombies), a new lease is
//! granted, and registrations are re-created.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use coord_core::raw::{ClientState, Counter};
use coord_core::{Error, ErrorKind, Result, SessionState, SessionStatus};
use etcd_client as etcd;
use tokio::time::Instant;

use crate::connection::{MemberId, Members, Service};
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
    /// The one watch stream every wait and watch of this client shares.
    hub: crate::hub::WatchHub,
    /// Session status, counters, local queues, registrations, closed flag.
    state: ClientState,
}

impl std::ops::Deref for Inner {
    type Target = ClientState;

    fn deref(&self) -> &ClientState {
        &self.state
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
        .with_session_timeout(options.lease_ttl)
        .with_capabilities(coord_core::Capabilities::ALL);
        Arc::new(Inner {
            options,
            prefix,
            members,
            lease: RwLock::new(None),
            key_epoch: AtomicU64::new(0),
            hub: crate::hub::WatchHub::default(),
            state,
        })
    }

    /// Sets a watch of `key` on the client's one shared watch stream
    /// ([`crate::hub`]).
    ///
    /// # Errors
    ///
    /// Opening the stream: `Unavailable`, `Timeout`, `Closed`, permission errors.
    pub(crate) async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        options: etcd::WatchOptions,
    ) -> Result<crate::hub::HubWatch> {
        if self.is_closed() {
            return Err(Error::closed().with_operation("watch"));
        }
        self.hub.watch(self, key, options).await
    }

    /// The client's shared watch stream.
    pub(crate) fn hub(&self) -> &crate::hub::WatchHub {
        &self.hub
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
            let unsent = crate::connection::never_sent(&e);
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
        self.hub.stop();
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

/// How long before the server may expire a lease of `ttl` the client reports it lost:
/// a tenth of the TTL, at least 100 ms.
pub(crate) fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(100))
}
