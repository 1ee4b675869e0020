//! Secrets never leak: etcd passwords and TLS key material appear in no `Debug`,
//! `Display`, error or tracing output (every crate's, at TRACE), over a whole
//! connect-and-use run against a real etcd with authentication on
//! (`COORD_TEST_ETCD_AUTH`, `COORD_TEST_ETCD_AUTH_PASSWORDS`) and one serving TLS
//! (`COORD_TEST_ETCD_TLS`, `COORD_TEST_CERTS`).

use std::sync::Arc;

use anyhow::{Context as _, ensure};
use coord_conformance::{Case, CaseResult, Ctx, Group, Needs, RealServer, UrlFactory, log_capture};
use coord_core::prelude::*;
use coord_core::{ConnectionString, ServiceInstance};

async fn secrets_never_leak(ctx: Ctx) -> CaseResult {
    let captured = log_capture::install();
    let addr = ctx.factory().real_server().context("not a real server")?.addr();
    let all = std::env::var("COORD_TEST_ETCD_AUTH_PASSWORDS").context("COORD_TEST_ETCD_AUTH_PASSWORDS")?;
    let password = all.split(',').next().context("no coord-app password")?.to_owned();
    let ns = ctx.namespace();
    let url = format!("etcd://coord-app:{password}@{addr}/{ns}?lease_ttl=2s");
    let client = coord_etcd::connect(&url).await?;
    let guard = client.lock("res").await?;
    client.put("k", b"v".to_vec()).await?;
    let reg = client
        .register("svc", ServiceInstance::new("i1", "10.0.0.1:80"))
        .await?;
    let mut shown = vec![
        format!("{client:?}"),
        format!("{:?}", coord_etcd::EtcdOptions::from_url(&url)?),
        format!("{}", ConnectionString::parse(&url)?),
        format!("{:?}", ConnectionString::parse(&url)?),
    ];
    let wrong = "wrong-pw-e41c";
    let refused = coord_etcd::connect(&format!("etcd://coord-app:{wrong}@{addr}/{ns}"))
        .await
        .err()
        .context("a wrong password connected")?;
    shown.push(format!("{refused} {refused:?}"));
    reg.deregister().await?;
    guard.release().await?;
    client.close().await?;

    let tls = std::env::var("COORD_TEST_ETCD_TLS")
        .context("COORD_TEST_ETCD_TLS: the TLS half is part of this case")?;
    let certs = std::env::var("COORD_TEST_CERTS").context("COORD_TEST_CERTS")?;
    let url = format!(
        "etcd+https://{tls}/{ns}?tls_ca={certs}/ca.pem&tls_cert={certs}/client.pem&tls_key={certs}/client.key"
    );
    let client = coord_etcd::connect(&url).await?;
    client.put("k", b"v".to_vec()).await?;
    shown.push(format!("{client:?}"));
    client.close().await?;
    let key = std::fs::read_to_string(format!("{certs}/client.key"))?;
    let mut secrets: Vec<&str> = key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 20)
        .collect();
    secrets.extend([password.as_str(), wrong]);
    for text in &shown {
        for s in &secrets {
            ensure!(!text.contains(s), "a secret shows in {text}");
        }
    }
    let mut log = captured.text();
    log.push_str(&shown.join("\n"));
    log_capture::check(&log, &secrets, &["coord.etcd.connect", "coord-app", "https://"])
}

fn main() {
    log_capture::install();
    let factory = RealServer::from_env("etcd-auth")
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|server| {
            Arc::new(UrlFactory {
                name: "etcd-auth",
                base: format!("etcd://{}", server.addr()),
                server,
                connect: |url| Box::pin(async move { coord_etcd::connect(&url).await }),
            }) as Arc<dyn coord_conformance::Factory>
        });
    coord_conformance::run_groups(vec![Group {
        backend: "etcd-auth".into(),
        factory,
        why_missing: "set COORD_TEST_ETCD_AUTH, COORD_TEST_ETCD_AUTH_PASSWORDS, COORD_TEST_ETCD_TLS and \
                      COORD_TEST_CERTS (./scripts/test does)"
            .into(),
        cases: vec![Case {
            name: "etcd-auth::secrets_never_leak",
            needs: Needs::NONE,
            run: |ctx| Box::pin(secrets_never_leak(ctx)),
        }],
    }]);
}
