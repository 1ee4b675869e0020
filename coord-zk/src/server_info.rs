//! The server's own version, asked with the `srvr` four-letter command (the one command
//! ZooKeeper 3.5 and later allow by default) on the plaintext client port.

use std::time::Duration;

use coord_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::options::ZkOptions;

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
