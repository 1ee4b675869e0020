//! Security against a real ZooKeeper: digest ACLs on the plain server (`COORD_TEST_ZK`),
//! and the factory of the TLS group (`COORD_TEST_ZK_TLS`, certificates in
//! `COORD_TEST_CERTS`, both set by `./scripts/test`), whose cases are shared.

use std::sync::Arc;

use anyhow::{Context as _, bail, ensure};
use coord_conformance::cases::access::{expect_denied, writes_refused};
use coord_conformance::{Case, CaseResult, Ctx, Factory, Needs, RealServer};
use coord_core::ServiceInstance;
use coord_core::prelude::*;

use super::ZkFactory;

pub fn acl_cases() -> Vec<Case> {
    vec![
        Case {
            name: "zk::acl_refuses_other_credentials",
            needs: Needs::NONE,
            run: |ctx| Box::pin(acl_refuses_other_credentials(ctx)),
        },
        Case {
            name: "zk::acl_creator_hides_reads",
            needs: Needs::NONE,
            run: |ctx| Box::pin(acl_creator_hides_reads(ctx)),
        },
    ]
}

/// The TLS group's factory: the TLS port, with the CA and this client's certificate.
pub fn tls_factory() -> Option<Arc<dyn Factory>> {
    let server = RealServer::from_env("zk-tls").unwrap_or_else(|e| panic!("{e}"))?;
    let certs = certs_dir().ok()?;
    Some(Arc::new(ZkFactory::new(
        server,
        "zk+tls",
        format!(
            "&tls_ca={0}/ca.pem&tls_cert={0}/client.pem&tls_key={0}/client.key",
            certs
        ),
    )))
}

/// `host:port,…` of the plain server's members, reached directly (not through fault
/// proxies).
fn server_of(ctx: &Ctx) -> anyhow::Result<String> {
    Ok(ctx.factory().real_server().context("not a real server")?.hosts())
}

fn certs_dir() -> anyhow::Result<String> {
    std::env::var("COORD_TEST_CERTS").context("COORD_TEST_CERTS is not set")
}

/// With `alice`'s digest credentials coord creates every node creator-all plus
/// world-read: a client with other credentials, or none, can read but not lock, campaign,
/// register, write config, nor delete or overwrite alice's nodes with a raw client. A
/// second client with alice's credentials can do everything.
async fn acl_refuses_other_credentials(ctx: Ctx) -> CaseResult {
    let base = server_of(&ctx)?;
    let ns = ctx.namespace();
    let alice = ctx
        .factory()
        .connect_url(&format!("zk://alice:alice-pw@{base}/{ns}"))
        .await?;
    let held = alice.lock("res").await?;
    let lead = alice.campaign("el", b"alice".to_vec()).await?;
    let reg = alice
        .register("svc", ServiceInstance::new("a1", "10.0.0.1:80"))
        .await?;
    alice.put("k", b"v1".to_vec()).await?;

    for url in [
        format!("zk://mallory:mallory-pw@{base}/{ns}"),
        format!("zk://{base}/{ns}"),
    ] {
        let other = ctx.factory().connect_url(&url).await?;
        // The refusal names the path (under the namespace) and what to do.
        writes_refused(&other, "res", "el", "svc", "k", &[ns, "credentials"]).await?;
        // Reads follow the default policy: readable by all.
        let seen = other.get("k").await?.context("k is missing for a reader")?;
        ensure!(seen.value == b"v1", "reader saw {:?}", seen.value);
        ensure!(
            other.instances("svc").await?.len() == 1,
            "reader cannot list instances"
        );
        ensure!(
            other.leader("el").await?.is_some(),
            "reader cannot see the leader"
        );
        other.close().await?;
    }

    // A raw client without credentials cannot delete alice's contender or rewrite config.
    let raw = zookeeper_client::Client::connect(&base).await?;
    let lock_dir = format!("/{ns}/locks/res");
    let contenders = raw.list_children(&lock_dir).await?;
    ensure!(contenders.len() == 1, "contenders {contenders:?}");
    let node = format!("{lock_dir}/{}", contenders[0]);
    match raw.delete(&node, None).await {
        Err(zookeeper_client::Error::NoAuth) => {}
        other => bail!("a raw client without credentials deleting alice's lock node: {other:?}"),
    }
    let config_dir = format!("/{ns}/config");
    for child in raw.list_children(&config_dir).await? {
        match raw
            .set_data(&format!("{config_dir}/{child}"), b"evil", None)
            .await
        {
            Err(zookeeper_client::Error::NoAuth) => {}
            other => bail!("a raw client without credentials rewriting config: {other:?}"),
        }
    }
    ensure!(alice.get("k").await?.map(|v| v.value) == Some(b"v1".to_vec()));

    // The same credentials are the same identity: a second client of alice's may act.
    let alice2 = ctx
        .factory()
        .connect_url(&format!("zk://alice:alice-pw@{base}/{ns}"))
        .await?;
    ensure!(alice2.try_lock("res").await?.is_none(), "alice2 took a held lock");
    alice2.put("k", b"v2".to_vec()).await?;
    let g2 = alice2
        .try_lock("other")
        .await?
        .context("alice2 could not lock a new name")?;
    g2.release().await?;
    reg.deregister().await?;
    lead.resign().await?;
    held.release().await?;
    alice2.close().await?;
    alice.close().await?;
    Ok(())
}

/// `acl=creator`: other credentials cannot even read.
async fn acl_creator_hides_reads(ctx: Ctx) -> CaseResult {
    let base = server_of(&ctx)?;
    let ns = ctx.namespace();
    let alice = ctx
        .factory()
        .connect_url(&format!("zk://alice:alice-pw@{base}/{ns}?acl=creator"))
        .await?;
    alice.put("k", b"secret".to_vec()).await?;
    let other = ctx
        .factory()
        .connect_url(&format!("zk://mallory:m-pw@{base}/{ns}"))
        .await?;
    expect_denied("get", other.get("k").await, &[ns, "credentials"])?;
    expect_denied("list", other.list("").await, &[ns, "credentials"])?;
    // Under the open policy the same read would succeed: the refusal is the ACL's.
    let open = ctx
        .factory()
        .connect_url(&format!("zk://alice:alice-pw@{base}/{ns}-open?acl=open"))
        .await?;
    open.put("k", b"public".to_vec()).await?;
    let reader = ctx
        .factory()
        .connect_url(&format!("zk://{base}/{ns}-open"))
        .await?;
    ensure!(reader.get("k").await?.is_some());
    reader.put("k", b"anyone".to_vec()).await?;
    for c in [alice, other, open, reader] {
        c.close().await?;
    }
    Ok(())
}
