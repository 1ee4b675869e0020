//! The connection: opening a ZooKeeper session (with TLS, and a closer look at the host
//! when it cannot be opened) and asking a server for its version. The session
//! supervisor over it is `session.rs`.

use std::time::Duration;

use coord_core::raw::Backoff;
use coord_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::map;
use crate::options::ZkOptions;

/// Opens one ZooKeeper session, failing after `deadline` — or as soon as a TLS probe
/// explains why it cannot succeed (feature `tls`): the client library reports a TLS
/// mismatch only as "no hosts" after the whole deadline.
pub(crate) async fn open_session(options: &ZkOptions, deadline: Duration) -> Result<zk::Client> {
    use coord_core::raw::reach::{self, Service};
    // The client reports any other host trouble as "no hosts" after the deadline: a
    // closer look names another service on the port at once.
    let explained = reach::connect_or_explain(
        Service::ZooKeeper,
        &options.hosts,
        PROBE_AFTER,
        // Boxed: the connect's state is large, and cases run on small stacks.
        Box::pin(open_session_explained(options, reach::for_the_connect(deadline))),
    );
    // Connect and explanation together keep to the deadline.
    tokio::time::timeout(deadline, explained)
        .await
        .unwrap_or_else(|_| {
            Err(no_session_within(
                options,
                deadline,
                ErrorKind::Timeout,
                "timed out",
            ))
        })
}

/// No session with the hosts of `options` within `deadline`, because of `why`.
fn no_session_within(
    options: &ZkOptions,
    deadline: Duration,
    kind: ErrorKind,
    why: impl std::fmt::Display,
) -> Error {
    let secure = options.tls.is_some();
    Error::new(
        kind,
        format!(
            "cannot open a ZooKeeper session with {} within {deadline:?}: {why}; is the server running and reachable?{}",
            options.connect_string(),
            if secure { "" } else { " (if it serves TLS on this port, use zk+tls:// with tls_ca=…)" }
        ),
    )
    .with_operation("connect")
    .with_retryable(true)
}

async fn open_session_explained(options: &ZkOptions, deadline: Duration) -> Result<zk::Client> {
    #[cfg(feature = "tls")]
    {
        let probe = coord_core::raw::tls_probe::Probe {
            scheme: if options.tls.is_some() { "zk+tls" } else { "zk" },
            tls_scheme: "zk+tls",
            hosts: options.hosts.clone(),
            tls: options.tls.clone(),
        };
        coord_core::raw::tls_probe::connect_or_explain(
            &probe,
            PROBE_AFTER,
            try_open_session(options, deadline),
        )
        .await
    }
    #[cfg(not(feature = "tls"))]
    try_open_session(options, deadline).await
}

/// How long a connect may fail before a probe looks for the reason.
const PROBE_AFTER: Duration = Duration::from_millis(750);

async fn try_open_session(options: &ZkOptions, deadline: Duration) -> Result<zk::Client> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(options.session_timeout)
        .with_fail_eagerly();
    if let Some((user, password)) = &options.digest {
        connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
    }
    let hosts = options.connect_string();
    let secure = options.tls.is_some();
    if let Some(tls) = &options.tls {
        connector = with_tls(connector, tls)?;
    }
    let started = Instant::now();
    // Once the settings are known good: every host refused or unresolved is said now,
    // not after the deadline.
    Box::pin(coord_core::raw::reach::before_connect(
        coord_core::raw::reach::Service::ZooKeeper,
        &options.hosts,
    ))
    .await?;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let connecting = connector.clone();
        // Each attempt gets what is left of the deadline, not all of it again.
        let attempt = tokio::time::timeout(
            deadline.saturating_sub(started.elapsed()),
            Box::pin(async {
                if secure {
                    secure_connect(connecting, &hosts).await
                } else {
                    connecting.connect(&hosts).await
                }
            }),
        )
        .await;
        let err = match attempt {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e)) => map(e, "connect", false),
            Err(_) => Error::new(ErrorKind::Timeout, "ZooKeeper session establishment timed out"),
        };
        let delay = backoff.next_delay();
        if !err.is_retryable() || started.elapsed() + delay >= deadline {
            return Err(
                no_session_within(options, deadline, err.kind(), &err).with_retryable(err.is_retryable())
            );
        }
        tokio::time::sleep(delay).await;
    }
}

/// Adds the TLS settings (CA, optional client identity) read from their PEM files.
#[cfg(feature = "tls")]
fn with_tls(connector: zk::Connector, tls: &coord_core::raw::TlsFiles) -> Result<zk::Connector> {
    coord_core::raw::tls_probe::ensure_default_provider();
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|e| {
            Error::config_invalid(format!("cannot read TLS file {}: {e}", path.display()))
                .with_operation("connect")
        })
    };
    let bad =
        |e: zk::Error| Error::config_invalid(format!("invalid TLS material: {e}")).with_operation("connect");
    let mut options = zk::TlsOptions::new()
        .with_pem_ca(&read(&tls.ca_file)?)
        .map_err(bad)?;
    if let Some((cert, key)) = &tls.identity {
        options = options
            .with_pem_identity(&read(cert)?, &read(key)?)
            .map_err(bad)?;
    }
    Ok(connector.with_tls(options))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: zk::Connector, _: &coord_core::raw::TlsFiles) -> Result<zk::Connector> {
    Err(Error::new(
        ErrorKind::Unsupported,
        "zk+tls:// needs the `tls` feature of coord-zk (or of coord)",
    )
    .with_operation("connect"))
}

#[cfg(feature = "tls")]
async fn secure_connect(connector: zk::Connector, hosts: &str) -> std::result::Result<zk::Client, zk::Error> {
    connector.secure_connect(hosts).await
}

#[cfg(not(feature = "tls"))]
async fn secure_connect(connector: zk::Connector, hosts: &str) -> std::result::Result<zk::Client, zk::Error> {
    // Unreachable: `with_tls` refuses TLS options without the feature.
    connector.connect(hosts).await
}

// ---- server info ----
// The server's own version, asked with the `srvr` four-letter command (the one command
// ZooKeeper 3.5 and later allow by default) on the plaintext client port.

/// How long one server may take to answer `srvr`.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// The version of the first server in `options` that answers `srvr`; `None` for TLS
/// connections (the secure port does not take four-letter commands in plaintext).
pub(crate) async fn server_version(options: &ZkOptions) -> Result<Option<String>> {
    if options.tls.is_some() {
        return Ok(None);
    }
    let mut last = String::from("no hosts");
    for host in &options.hosts {
        let addr = (host.host.as_str(), host.port);
        match tokio::time::timeout(ANSWER_TIMEOUT, ask_srvr(addr)).await {
            Ok(Ok(answer)) => return Ok(parse_version(&answer)),
            Ok(Err(e)) => last = format!("{}:{}: {e}", host.host, host.port),
            Err(_) => last = format!("{}:{}: no answer within {ANSWER_TIMEOUT:?}", host.host, host.port),
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!("no ZooKeeper server answered `srvr` ({last}); is `srvr` in 4lw.commands.whitelist?"),
    )
    .with_operation("server_version"))
}

async fn ask_srvr(addr: (&str, u16)) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(b"srvr").await?;
    let mut answer = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// `Zookeeper version: 3.8.4-<hash>, built on …` → `3.8.4-<hash>`.
fn parse_version(answer: &str) -> Option<String> {
    let line = answer
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version:"))?;
    let version = line.split(',').next()?.trim();
    (!version.is_empty()).then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tls_problems_are_typed_errors() {
        let o = ZkOptions::from_url("zk+tls://127.0.0.1:1/x?tls_ca=/nonexistent/ca.pem").unwrap();
        let e = open_session(&o, Duration::from_secs(1)).await.unwrap_err();
        if cfg!(feature = "tls") {
            assert_eq!(e.kind(), ErrorKind::ConfigInvalid, "{e}");
            assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        } else {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert!(e.to_string().contains("`tls` feature"), "{e}");
        }
    }

    #[test]
    fn parses_the_srvr_answer() {
        let answer = "Zookeeper version: 3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c, built on 2024-02-12 22:16 UTC\nLatency min/avg/max: 0/0.0/0\n";
        assert_eq!(
            parse_version(answer).as_deref(),
            Some("3.8.4-9316c2a7a97e1666d8f4593f34dd6fc36ecc436c")
        );
        assert_eq!(
            parse_version("srvr is not executed because it is not in the whitelist."),
            None
        );
    }
}
