//! Security against real etcd servers: authentication and roles
//! (`COORD_TEST_ETCD_AUTH`, users made by `./scripts/test`), and TLS with client
//! certificates (`COORD_TEST_ETCD_TLS`, certificates in `COORD_TEST_CERTS`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use coord_conformance::cases::access::{expect_denied, writes_refused};
use coord_conformance::{Case, CaseResult, Ctx, Factory, Needs, RealServer};
use coord_core::prelude::*;
use coord_core::{ErrorKind, Txn};

use super::EtcdFactory;

pub fn auth_cases() -> Vec<Case> {
    vec![
        Case {
            name: "etcd-auth::user_without_role_refused",
            needs: Needs::NONE,
            run: |ctx| Box::pin(user_without_role_refused(ctx)),
        },
        Case {
            name: "etcd-auth::wrong_password_fails_at_connect",
            needs: Needs::NONE,
            run: |ctx| Box::pin(wrong_password_fails_at_connect(ctx)),
        },
        Case {
            name: "etcd-auth::held_lock_outlives_token_expiry",
            needs: Needs::NONE,
            run: |ctx| Box::pin(held_lock_outlives_token_expiry(ctx)),
        },
        Case {
            name: "etcd-auth::waits_and_watches_set_after_token_expiry_work",
            needs: Needs::NONE,
            run: |ctx| Box::pin(waits_and_watches_set_after_token_expiry_work(ctx)),
        },
    ]
}

/// A client's watches share one stream, opened with the token of its moment; etcd checks
/// each new watch against that token. After it expired (1 s on the test server), a
/// contender that starts waiting, and a watch set anew, must still work: the refused
/// watch ends the stream, and the next one takes a fresh token. (With the stale stream
/// kept, the waiter never woke.)
async fn waits_and_watches_set_after_token_expiry_work(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut first = ConfigStore::watch(&b, "k").await?;
    coord_conformance::util::next_event(&mut first, Duration::from_secs(5), "snapshot").await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let guard = a.lock("res").await?;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("res").await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.release().await?;
    let next =
        coord_conformance::util::within(Duration::from_secs(10), "the waiter wakes", waiter).await???;
    next.release().await?;
    let mut second = ConfigStore::watch(&b, "k2").await?;
    coord_conformance::util::next_event(&mut second, Duration::from_secs(5), "snapshot").await?;
    a.put("k2", b"v".to_vec()).await?;
    coord_conformance::util::next_event(&mut second, Duration::from_secs(5), "the put").await?;
    a.put("k", b"v".to_vec()).await?;
    coord_conformance::util::next_event(&mut first, Duration::from_secs(5), "the put on the first watch")
        .await?;
    Ok(())
}

/// The passwords of the auth server's users `coord-app`, `coord-other` and `root`.
pub struct Passwords {
    pub app: String,
    pub other: String,
    pub root: String,
}

pub fn passwords() -> anyhow::Result<Passwords> {
    let all = std::env::var("COORD_TEST_ETCD_AUTH_PASSWORDS")
        .context("COORD_TEST_ETCD_AUTH_PASSWORDS is not set")?;
    let mut it = all.split(',').map(str::to_owned);
    match (it.next(), it.next(), it.next()) {
        (Some(app), Some(other), Some(root)) => Ok(Passwords { app, other, root }),
        _ => bail!("COORD_TEST_ETCD_AUTH_PASSWORDS must be <coord-app>,<coord-other>,<root>"),
    }
}

/// The auth group's factory: every client is `coord-app`, whose role covers the suite's
/// `coordtest-` namespaces.
pub fn auth_factory() -> Option<Arc<dyn Factory>> {
    let server = RealServer::from_env("etcd-auth").unwrap_or_else(|e| panic!("{e}"))?;
    let pw = passwords().ok()?;
    Some(Arc::new(EtcdFactory {
        server,
        scheme: "etcd",
        userinfo: format!("coord-app:{}@", pw.app),
        query: String::new(),
    }))
}

/// The TLS group's factory: the TLS port, with the CA and this client's certificate.
pub fn tls_factory() -> Option<Arc<dyn Factory>> {
    let server = RealServer::from_env("etcd-tls").unwrap_or_else(|e| panic!("{e}"))?;
    let certs = certs_dir().ok()?;
    Some(Arc::new(EtcdFactory {
        server,
        scheme: "etcd+https",
        userinfo: String::new(),
        query: format!(
            "&tls_ca={0}/ca.pem&tls_cert={0}/client.pem&tls_key={0}/client.key",
            certs
        ),
    }))
}

fn certs_dir() -> anyhow::Result<String> {
    std::env::var("COORD_TEST_CERTS").context("COORD_TEST_CERTS is not set")
}

fn auth_endpoint() -> anyhow::Result<String> {
    std::env::var("COORD_TEST_ETCD_AUTH").context("COORD_TEST_ETCD_AUTH is not set")
}

async fn connect_error(url: &str) -> anyhow::Result<coord_core::Error> {
    match coord_etcd::connect(url).await {
        Ok(c) => {
            let _ = c.close().await;
            bail!("connected, but should have been refused")
        }
        Err(e) => Ok(e),
    }
}

/// `coord-other` has a role on `other/` only: in the suite's namespace every write and
/// read is refused with `PermissionDenied`, and nothing is written.
async fn user_without_role_refused(ctx: Ctx) -> CaseResult {
    let pw = passwords()?;
    let endpoint = auth_endpoint()?;
    let ns = ctx.namespace();
    let url = format!("etcd://coord-other:{}@{endpoint}/{ns}?lease_ttl=2s", pw.other);
    let other = coord_etcd::connect(&url).await?;
    // The refusal says what to do: give the user a role.
    writes_refused(&other, "res", "el", "svc", "k", &["role"]).await?;
    expect_denied("get", other.get("k").await.map(|v| v.is_some()), &["role"])?;
    other.close().await?;

    // Nothing of coord-other's reached the namespace (read as root).
    let mut root = etcd_client::Client::connect(
        [format!("http://{endpoint}")],
        Some(etcd_client::ConnectOptions::new().with_user("root", pw.root)),
    )
    .await?;
    let left = root
        .get(
            format!("{ns}/"),
            Some(etcd_client::GetOptions::new().with_prefix().with_count_only()),
        )
        .await?;
    ensure!(
        left.count() == 0,
        "{} keys written by a user without a role",
        left.count()
    );
    Ok(())
}

/// A wrong password fails `connect` itself: `PermissionDenied`, not retryable, naming
/// the user and never the password.
async fn wrong_password_fails_at_connect(ctx: Ctx) -> CaseResult {
    let endpoint = auth_endpoint()?;
    let bad = "wrong-password-31ab";
    let started = Instant::now();
    let e = connect_error(&format!("etcd://coord-app:{bad}@{endpoint}/{}", ctx.namespace())).await?;
    ensure!(e.kind() == ErrorKind::PermissionDenied, "{:?}: {e}", e.kind());
    ensure!(!e.is_retryable(), "a wrong password is not worth retrying: {e}");
    ensure!(e.to_string().contains("coord-app"), "does not name the user: {e}");
    ensure!(
        !e.to_string().contains(bad) && !format!("{e:?}").contains(bad),
        "the error shows the password: {e:?}"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

/// The auth server's tokens expire after 1 s unused; a lock held for several times that
/// still guards writes, releases, and passes on.
async fn held_lock_outlives_token_expiry(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let guard = a.lock("res").await?;
    let mut watch = ConfigStore::watch(&b, "k").await?;
    coord_conformance::util::next_event(&mut watch, Duration::from_secs(5), "snapshot").await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.commit(Txn::new().fenced_by(guard.fence()).put("k", b"after".to_vec()))
        .await
        .context("a fenced write after the token expired")?;
    coord_conformance::util::next_event(&mut watch, Duration::from_secs(5), "the put").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    guard.release().await.context("release after the token expired")?;
    let next = b.try_lock("res").await?.context("the lock did not pass on")?;
    next.release().await?;
    Ok(())
}

/// Credentials against an etcd without authentication: `ConfigInvalid`, not retryable,
/// saying to remove them, with the server's answer kept as the cause.
pub async fn credentials_without_server_auth_rejected(ctx: Ctx) -> CaseResult {
    let addr = ctx.factory().real_server().context("not a real server")?.hosts();
    let e = connect_error(&format!("etcd://someone:pw-6c2d@{addr}/{}", ctx.namespace())).await?;
    ensure!(e.kind() == ErrorKind::ConfigInvalid, "{:?}: {e}", e.kind());
    ensure!(!e.is_retryable(), "{e}");
    ensure!(e.to_string().contains("authentication off"), "{e}");
    ensure!(
        std::error::Error::source(&e).is_some(),
        "the server's answer was dropped: {e:?}"
    );
    ensure!(
        !format!("{e:?}").contains("pw-6c2d"),
        "the error shows the password: {e:?}"
    );
    Ok(())
}
