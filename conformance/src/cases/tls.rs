//! TLS misconfiguration against a real server with a TLS client port that requires
//! client certificates, run from a backend's TLS group. The factory's `url_base` is
//! `<tls scheme>://<the TLS port>`; `COORD_TEST_CERTS` holds the throwaway PKI made by
//! `./scripts/test` (`ca.pem`, `client.*`, and `other-ca.pem`, `other-client.*` from an
//! unrelated CA).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use coord_core::{Error, ErrorKind};

use crate::harness::{Case, CaseResult, Ctx, Needs};

/// The TLS misconfiguration cases.
pub fn all() -> Vec<Case> {
    vec![
        Case {
            name: "tls::wrong_ca_is_config_invalid",
            needs: Needs::NONE,
            run: |ctx| Box::pin(wrong_ca_is_config_invalid(ctx)),
        },
        Case {
            name: "tls::missing_client_certificate_refused",
            needs: Needs::NONE,
            run: |ctx| Box::pin(missing_client_certificate_refused(ctx)),
        },
        Case {
            name: "tls::plaintext_against_tls_port_fails_fast",
            needs: Needs::NONE,
            run: |ctx| Box::pin(plaintext_against_tls_port_fails_fast(ctx)),
        },
    ]
}

/// How quickly a misconfiguration must be explained (the connect timeout is longer).
const EXPLAINED_WITHIN: Duration = Duration::from_secs(4);

fn certs() -> anyhow::Result<String> {
    std::env::var("COORD_TEST_CERTS").context("COORD_TEST_CERTS is not set")
}

/// Connects to `<url_base>/<namespace>?connect_timeout=…<query>` and returns the error it
/// must fail with, and how long that took.
async fn refused(ctx: &Ctx, base: &str, timeout: &str, query: &str) -> anyhow::Result<(Error, Duration)> {
    let url = format!("{base}/{}?connect_timeout={timeout}{query}", ctx.namespace());
    let started = Instant::now();
    match ctx.factory().connect_url(&url).await {
        Ok(c) => {
            let _ = c.close().await;
            bail!("{url}: connected, but should have been refused")
        }
        Err(e) => Ok((e, started.elapsed())),
    }
}

/// A server certificate from a CA the client does not trust: `ConfigInvalid` naming the
/// CA file, within seconds.
pub async fn wrong_ca_is_config_invalid(ctx: Ctx) -> CaseResult {
    let c = certs()?;
    let query = format!("&tls_ca={c}/other-ca.pem&tls_cert={c}/client.pem&tls_key={c}/client.key");
    let (e, took) = refused(&ctx, &ctx.factory().url_base(), "30s", &query).await?;
    ensure!(e.kind() == ErrorKind::ConfigInvalid, "{:?}: {e}", e.kind());
    ensure!(
        e.to_string().contains("other-ca.pem"),
        "does not name the CA file: {e}"
    );
    ensure!(took < EXPLAINED_WITHIN, "took {took:?}: {e}");
    Ok(())
}

/// The server requires a client certificate: without one, or with one from another CA,
/// `PermissionDenied` saying to set `tls_cert`/`tls_key`, within seconds.
pub async fn missing_client_certificate_refused(ctx: Ctx) -> CaseResult {
    let c = certs()?;
    for query in [
        format!("&tls_ca={c}/ca.pem"),
        format!("&tls_ca={c}/ca.pem&tls_cert={c}/other-client.pem&tls_key={c}/other-client.key"),
    ] {
        let (e, took) = refused(&ctx, &ctx.factory().url_base(), "30s", &query).await?;
        ensure!(
            e.kind() == ErrorKind::PermissionDenied,
            "{query}: {:?}: {e}",
            e.kind()
        );
        ensure!(
            e.to_string().contains("tls_cert"),
            "{query}: does not say what to do: {e}"
        );
        ensure!(took < EXPLAINED_WITHIN, "{query}: took {took:?}: {e}");
    }
    Ok(())
}

/// The plaintext scheme against the TLS port fails within seconds (not after the 30 s
/// connect timeout) and suggests the TLS scheme.
pub async fn plaintext_against_tls_port_fails_fast(ctx: Ctx) -> CaseResult {
    let base = ctx.factory().url_base();
    let (tls_scheme, rest) = base.split_once("://").context("url_base has no scheme")?;
    let plain = tls_scheme.split('+').next().unwrap_or(tls_scheme);
    let (e, took) = refused(&ctx, &format!("{plain}://{rest}"), "30s", "").await?;
    ensure!(
        took < Duration::from_secs(10),
        "plaintext against TLS took {took:?}: {e}"
    );
    ensure!(e.to_string().contains(tls_scheme), "no hint at {tls_scheme}: {e}");
    Ok(())
}
