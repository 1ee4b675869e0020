//! Secrets never leak: a password and TLS key material appear in no `Debug`, `Display`,
//! error or tracing output (every crate's, at TRACE, through [`log_capture`]) over a whole
//! connect-and-use run. Run from a test binary of its own that installs the capture first
//! (capturing TRACE for the whole suite would slow it down).

use anyhow::{Context as _, ensure};
use coord_core::ServiceInstance;
use coord_core::prelude::*;
use coord_core::raw::ConnectionString;

use crate::harness::{CaseResult, Ctx};
use crate::log_capture;

/// A wrong password the run also tries.
const WRONG: &str = "wrong-pw-e41c";

/// The case. The factory's `url_base` carries `user:password@` of a user that may work in
/// the case's namespace; `tls_base` is `<tls scheme>://host:port` of a TLS port that takes
/// the client certificate in `COORD_TEST_CERTS`; `options_debug` parses a URL into the
/// backend's options and formats them with `{:?}`.
///
/// # Errors
///
/// Names the first secret found and where, or a failed step.
pub async fn never_leak(
    ctx: Ctx,
    tls_base: &str,
    options_debug: fn(&str) -> coord_core::Result<String>,
) -> CaseResult {
    let captured = log_capture::install();
    let base = ctx.factory().url_base();
    let parsed = ConnectionString::parse(&base)?;
    let user = parsed.user().context("url_base names no user")?.to_owned();
    let password = parsed.password().context("url_base has no password")?.to_owned();
    let ns = ctx.namespace();
    let url = format!("{base}/{ns}");
    let client = ctx.factory().connect_url(&url).await?;
    let guard = client.lock("res").await?;
    client.put("k", b"v".to_vec()).await?;
    let reg = client
        .register("svc", ServiceInstance::new("i1", "10.0.0.1:80"))
        .await?;
    let mut shown = vec![
        format!("{client:?}"),
        options_debug(&url)?,
        format!("{parsed} {parsed:?}"),
    ];
    let kind = client.kind();
    reg.deregister().await?;
    guard.release().await?;
    client.close().await?;

    // Failing connects: a wrong password, and the right one to a closed port.
    let scheme = parsed.scheme();
    for failing in [
        url.replacen(&format!(":{password}@"), &format!(":{WRONG}@"), 1),
        format!("{scheme}://{user}:{password}@127.0.0.1:1/{ns}?connect_timeout=1s"),
    ] {
        match ctx.factory().connect_url(&failing).await {
            Ok(c) => c.close().await?,
            Err(e) => shown.push(format!("{e} {e:?}")),
        }
    }

    let certs = std::env::var("COORD_TEST_CERTS").context("COORD_TEST_CERTS is not set")?;
    let tls_url = format!(
        "{tls_base}/{ns}?tls_ca={certs}/ca.pem&tls_cert={certs}/client.pem&tls_key={certs}/client.key"
    );
    let client = ctx.factory().connect_url(&tls_url).await?;
    client.put("k", b"v".to_vec()).await?;
    shown.push(format!("{client:?}"));
    shown.push(options_debug(&tls_url)?);
    client.close().await?;

    let key = std::fs::read_to_string(format!("{certs}/client.key"))?;
    let mut secrets: Vec<&str> = key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 20)
        .collect();
    ensure!(
        !secrets.is_empty(),
        "no key material read from {certs}/client.key"
    );
    secrets.extend([password.as_str(), WRONG]);
    for text in &shown {
        for secret in &secrets {
            ensure!(!text.contains(secret), "a secret shows in {text}");
        }
    }
    // The connect spans, with their namespace field, prove the capture saw coord's own
    // output at the level where secrets would be.
    let span = format!("coord.{kind}.connect");
    log_capture::check(&captured.text(), &secrets, &[&span, ns])
}
