//! Expiring a client's session from outside — what a server-side timeout, an operator
//! or a partition longer than the timeout does to a real client — so that tests can
//! check what their code does when its locks, leaderships and registrations are gone.

use std::time::Duration;

use coord_core::{Client, Error, ErrorKind, Result};

/// Expires `client`'s session on the servers at `hosts` (`host:port,…`, as in the
/// client's URL) and returns once the server confirms it is gone: everything the
/// session held (lock and election entries, registrations) is deleted, and the client
/// sees `Lost`, then opens a new session.
///
/// - ZooKeeper: attaches a second connection with the session's id and password and
///   closes it, until an attach is refused as expired (the victim's own client can move
///   the session back while the two race, and a close sent then can be lost).
/// - etcd: revokes the client's lease with `etcdctl` (from the `etcd-client` package).
///
/// # Errors
///
/// `Unsupported` for another backend (or without the crate feature of that backend);
/// `SessionLost` when the client has no session now; `Timeout` when the session still
/// existed after 30 s of tries; `Unavailable` when `etcdctl` fails.
///
/// # Cancel safety
///
/// If dropped, the session may or may not have been expired.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use coord::{Granted as _, Lock as _};
/// use coord_testkit::{Cluster, ClusterOptions, Kind};
/// let cluster = Cluster::start(ClusterOptions::new(Kind::Zk, 1))?;
/// let client = coord::connect(&cluster.url("myapp")).await?;
/// let guard = client.lock("jobs").await?;
/// coord_testkit::expire_session(&client, &cluster.hosts()).await?;
/// guard.lost().await; // what your code must handle
/// # Ok(())
/// # }
/// ```
pub async fn expire_session(client: &Client, hosts: &str) -> Result<()> {
    #[cfg(feature = "zk")]
    if let Some(zk) = client.backend_as::<coord_zk::ZkClient>() {
        let session = zk
            .session_handle()
            .ok_or_else(|| Error::new(ErrorKind::SessionLost, "the client has no session to expire"))?;
        return expire_zk(session, hosts).await;
    }
    #[cfg(feature = "etcd")]
    if let Some(etcd) = client.backend_as::<coord_etcd::EtcdClient>() {
        let lease = etcd.lease_id();
        if lease == 0 {
            return Err(Error::new(
                ErrorKind::SessionLost,
                "the client has no lease to revoke",
            ));
        }
        return revoke_lease(lease, hosts).await;
    }
    let _ = hosts;
    Err(Error::new(
        ErrorKind::Unsupported,
        format!(
            "cannot expire a {} session from outside (coord-testkit's features: zk, etcd)",
            client.kind()
        ),
    ))
}

#[cfg(feature = "zk")]
async fn expire_zk(session: coord_zk::ZkSessionHandle, hosts: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // Each outcome and how often it happened, for the error if every attempt fails.
    let mut outcomes: std::collections::BTreeMap<String, usize> = Default::default();
    let mut failed_in_a_row = 0;
    while tokio::time::Instant::now() < deadline {
        // Reattaching renegotiates the timeout; the close follows at once. The client
        // being expired reconnects too: at once when an attach takes its settled
        // connection (and that reconnect can take the session back before the close is
        // sent), but only after a pause when an attach takes it during its handshake.
        // So a failed attach is followed at once by a second one, which lands in that
        // handshake; after two failures in a row the next pair waits a little.
        match session.close_elsewhere(hosts).await {
            // The server no longer knows the session: it and its nodes are gone.
            Ok(true) => return Ok(()),
            Ok(false) => {
                failed_in_a_row = 0;
                *outcomes
                    .entry("attached and closed, but the session still exists".into())
                    .or_default() += 1
            }
            Err(e) => {
                failed_in_a_row += 1;
                *outcomes.entry(e.to_string()).or_default() += 1
            }
        }
        if failed_in_a_row % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Err(Error::new(
        ErrorKind::Timeout,
        format!(
            "could not expire the session within 30 s ({})",
            outcomes
                .iter()
                .map(|(outcome, n)| format!("{n}x {outcome}"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    ))
}

#[cfg(feature = "etcd")]
async fn revoke_lease(lease: i64, hosts: &str) -> Result<()> {
    let out = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            hosts,
            "--dial-timeout",
            "2s",
            "--command-timeout",
            "5s",
        ])
        .args(["lease", "revoke", &format!("{lease:x}")])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| Error::new(ErrorKind::Unavailable, format!("cannot run etcdctl: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "etcdctl lease revoke failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ))
    }
}
