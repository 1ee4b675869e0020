//! Access control: helpers for a backend's security cases (ZooKeeper ACLs, etcd roles),
//! which set up the credentials their own way and share the checks.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_core::prelude::*;
use coord_core::{Client, ErrorKind, ServiceInstance};

use crate::harness::CaseResult;

/// `r` must be `PermissionDenied` whose message contains every one of `mentions` (the
/// path, what to do).
///
/// # Errors
///
/// Any other outcome, naming `what`.
pub fn expect_denied<T: std::fmt::Debug>(
    what: &str,
    r: coord_core::Result<T>,
    mentions: &[&str],
) -> CaseResult {
    match r {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            for m in mentions {
                ensure!(
                    e.to_string().contains(m),
                    "{what}: the refusal does not mention {m:?}: {e}"
                );
            }
            Ok(())
        }
        Err(e) => bail!("{what}: expected PermissionDenied, got {:?}: {e}", e.kind()),
        Ok(v) => bail!("{what}: a client without the rights succeeded: {v:?}"),
    }
}

/// Every kind of write by `client` — `try_lock` and `lock` (twice) on `lock`, `try_lock` on a
/// fresh name, `campaign` on `election`, `register` in `service`, `put` of `key` and of
/// a fresh key — fails at once with `PermissionDenied` mentioning each of `mentions`.
/// Blocking calls get 5 s: a refusal must not turn into a wait.
///
/// # Errors
///
/// The first write that was not refused as described.
pub async fn writes_refused(
    client: &Client,
    lock: &str,
    election: &str,
    service: &str,
    key: &str,
    mentions: &[&str],
) -> CaseResult {
    let quick = Duration::from_secs(5);
    expect_denied(
        "try_lock",
        client.try_lock(lock).await.map(|g| g.is_some()),
        mentions,
    )?;
    expect_denied(
        "lock",
        tokio::time::timeout(quick, client.lock(lock))
            .await
            .context("lock waited instead of failing")?
            .map(|g| g.token()),
        mentions,
    )?;
    // A refused lock leaves nothing behind on the client either: the next call on the
    // same name is refused again, not queued behind the first.
    expect_denied(
        "lock again",
        tokio::time::timeout(quick, client.lock(lock))
            .await
            .context("a second lock waited behind the refused first one")?
            .map(|g| g.token()),
        mentions,
    )?;
    expect_denied(
        "try_lock of a new name",
        client.try_lock("access-fresh-lock").await.map(|g| g.is_some()),
        mentions,
    )?;
    expect_denied(
        "campaign",
        tokio::time::timeout(quick, client.campaign(election, b"intruder".to_vec()))
            .await
            .context("campaign waited instead of failing")?
            .map(|l| l.token()),
        mentions,
    )?;
    expect_denied(
        "register",
        client
            .register(service, ServiceInstance::new("intruder", "10.0.0.66:80"))
            .await
            .map(|_| ()),
        mentions,
    )?;
    expect_denied(
        "put",
        client.put(key, b"evil".to_vec()).await.map(|_| ()),
        mentions,
    )?;
    expect_denied(
        "put of a new key",
        client.put("access-fresh-key", b"evil".to_vec()).await.map(|_| ()),
        mentions,
    )?;
    Ok(())
}
