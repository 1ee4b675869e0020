//! Secrets never leak: digest passwords and TLS key material appear in no `Debug`,
//! `Display`, error or tracing output (every crate's, at TRACE), over a whole
//! connect-and-use run against a real ZooKeeper, plain (`COORD_TEST_ZK`) and over TLS
//! (`COORD_TEST_ZK_TLS`, `COORD_TEST_CERTS`).

use std::sync::Arc;

use anyhow::{Context as _, ensure};
use coord_conformance::{Case, CaseResult, Ctx, Group, Needs, RealServer, UrlFactory, log_capture};
use coord_core::prelude::*;
use coord_core::{ConnectionString, ServiceInstance};

const PASSWORD: &str = "zk-secret-pw-93f1";

fn key_material(certs: &str) -> anyhow::Result<Vec<String>> {
    let key = std::fs::read_to_string(format!("{certs}/client.key"))?;
    // Every base64 line of the key's body.
    Ok(key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 20)
        .map(str::to_owned)
        .collect())
}

async fn secrets_never_leak(ctx: Ctx) -> CaseResult {
    let captured = log_capture::install();
    let addr = ctx.factory().real_server().context("not a real server")?.addr();
    let ns = ctx.namespace();
    let url = format!("zk://alice:{PASSWORD}@{addr}/{ns}?session_timeout=2s");
    let client = coord_zk::connect(&url).await?;
    let guard = client.lock("res").await?;
    client.put("k", b"v".to_vec()).await?;
    let reg = client
        .register("svc", ServiceInstance::new("i1", "10.0.0.1:80"))
        .await?;
    let mut shown = vec![
        format!("{client:?}"),
        format!("{:?}", coord_zk::ZkOptions::from_url(&url)?),
        format!("{}", ConnectionString::parse(&url)?),
        format!("{:?}", ConnectionString::parse(&url)?),
    ];
    // An error on a connection string with the password.
    let refused = coord_zk::connect(&format!(
        "zk://alice:{PASSWORD}@127.0.0.1:1/{ns}?connect_timeout=1s"
    ))
    .await
    .err()
    .context("connected to a closed port")?;
    shown.push(format!("{refused} {refused:?}"));
    reg.deregister().await?;
    guard.release().await?;
    client.close().await?;

    let mut secrets = vec![PASSWORD.to_owned()];
    let mut expected = vec!["coord.zk.connect", "alice"];
    if let (Ok(tls), Ok(certs)) = (
        std::env::var("COORD_TEST_ZK_TLS"),
        std::env::var("COORD_TEST_CERTS"),
    ) {
        let url = format!(
            "zk+tls://{tls}/{ns}?tls_ca={certs}/ca.pem&tls_cert={certs}/client.pem&tls_key={certs}/client.key"
        );
        let client = coord_zk::connect(&url).await?;
        client.put("k", b"v".to_vec()).await?;
        shown.push(format!("{client:?}"));
        client.close().await?;
        secrets.extend(key_material(&certs)?);
        expected.push("zk+tls");
    } else {
        anyhow::bail!(
            "COORD_TEST_ZK_TLS and COORD_TEST_CERTS must be set: the TLS half is part of this case"
        );
    }
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    for text in &shown {
        ensure!(!text.contains(PASSWORD), "the password shows in {text}");
    }
    let mut log = captured.text();
    log.push_str(&shown.join("\n"));
    log_capture::check(&log, &secrets, &expected)
}

fn main() {
    log_capture::install();
    let factory = RealServer::from_env("zk")
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|server| {
            Arc::new(UrlFactory {
                name: "zk",
                base: format!("zk://{}", server.addr()),
                server,
                connect: |url| Box::pin(async move { coord_zk::connect(&url).await }),
            }) as Arc<dyn coord_conformance::Factory>
        });
    coord_conformance::run_groups(vec![Group {
        backend: "zk".into(),
        factory,
        why_missing: "set COORD_TEST_ZK, COORD_TEST_ZK_TLS and COORD_TEST_CERTS (./scripts/test does)".into(),
        cases: vec![Case {
            name: "zk::secrets_never_leak",
            needs: Needs::NONE,
            run: |ctx| Box::pin(secrets_never_leak(ctx)),
        }],
    }]);
}
