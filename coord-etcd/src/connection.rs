//! The connection to the cluster: one gRPC client per member, connected lazily, one of
//! them current, with failover across members; TLS and credentials; and connection
//! errors explained. The lease session over it is `session.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use coord_core::{Error, ErrorKind, Result};
use etcd_client as etcd;
use tokio::sync::{OnceCell, watch};

use crate::options::EtcdOptions;

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

/// The largest response coord's reads and watches accept (tonic's default is 4 MiB).
/// Reads of many keys come in pages far below it ([`crate::watch::range`]); one key may
/// be as large as the server's `--max-request-bytes` allows.
pub(crate) const MAX_MESSAGE: usize = 64 << 20;

impl Service for etcd::KvClient {
    fn of(client: &etcd::Client) -> Self {
        client.kv_client().max_decoding_message_size(MAX_MESSAGE)
    }
}

impl Service for etcd::MaintenanceClient {
    fn of(client: &etcd::Client) -> Self {
        client.maintenance_client()
    }
}

impl Service for etcd::WatchClient {
    fn of(client: &etcd::Client) -> Self {
        client.watch_client().max_decoding_message_size(MAX_MESSAGE)
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
