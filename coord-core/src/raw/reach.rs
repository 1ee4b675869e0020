//! Why nothing answers, in words a person can act on: the clients coord wraps report an
//! unreachable ensemble the same way whatever the cause (a refused port, a name that
//! does not resolve, another service on the port), and only after their whole connect
//! timeout. An adapter calls [`before_connect`] first — when every host is refused or
//! does not resolve, the connect fails at once and says so per host — and wraps its
//! connect in [`connect_or_explain`], which looks closer while the connect keeps failing:
//! a host that turns out to be the other backend (a ZooKeeper port in an `etcd://` URL,
//! or the reverse) ends the connect at once with a typed error naming it.
//!
//! The looks are plain TCP connections; a closer look sends ZooKeeper's `srvr` command
//! and an HTTP `GET /version` (what etcd answers to `etcdctl version`), reads at most a
//! few hundred bytes and closes. Nothing is sent that changes anything.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::error::{Error, ErrorKind, Result};
use crate::raw::connstr::HostPort;

/// The service a connection string names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// A ZooKeeper ensemble (`zk://`).
    ZooKeeper,
    /// An etcd cluster (`etcd://`).
    Etcd,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::ZooKeeper => "ZooKeeper",
            Service::Etcd => "etcd",
        }
    }

    fn scheme(self) -> &'static str {
        match self {
            Service::ZooKeeper => "zk://",
            Service::Etcd => "etcd://",
        }
    }

    fn client_port(self) -> u16 {
        match self {
            Service::ZooKeeper => 2181,
            Service::Etcd => 2379,
        }
    }
}

/// What a look at one host found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    /// The name does not resolve.
    Unresolved,
    /// Nothing listens: the connection was refused.
    Refused,
    /// No answer within the look's time: down, filtered, or slow. Nothing definite.
    Silent,
    /// It connects (and a closer look found nothing definite).
    Connects,
    /// It answered as this service.
    Is(Service),
    /// It answered HTTP, but not as etcd.
    Http,
}

impl Finding {
    /// A finding that no connect to this host as `service` can overcome.
    fn rules_out(&self, service: Service) -> bool {
        match self {
            Finding::Unresolved | Finding::Refused | Finding::Http => true,
            Finding::Is(other) => *other != service,
            Finding::Silent | Finding::Connects => false,
        }
    }

    fn says(&self, service: Service) -> String {
        match self {
            Finding::Unresolved => "the name does not resolve (check the host name)".into(),
            Finding::Refused => format!(
                "connection refused: nothing listens on that port (is {} running there?)",
                service.name()
            ),
            Finding::Silent => "no answer".into(),
            Finding::Connects => "connects, but no session opened".into(),
            Finding::Is(other) => format!(
                "that is {} {} server, not {} (use {}…, or {}'s client port, {} by default)",
                if *other == Service::Etcd { "an" } else { "a" },
                other.name(),
                service.name(),
                other.scheme(),
                service.name(),
                service.client_port()
            ),
            Finding::Http => format!(
                "that is an HTTP server, not {} (check the port: {}'s client port is {} by default)",
                service.name(),
                service.name(),
                service.client_port()
            ),
        }
    }
}

/// How long one look at one host may take.
const STEP: Duration = Duration::from_secs(1);

/// The part of a connect timeout the connect itself may use. The rest — a fifth, at most
/// a second — is left for explaining a failure: an adapter bounds connect and
/// explanation together by the whole timeout, so a user's `connect_timeout` holds.
pub fn for_the_connect(timeout: Duration) -> Duration {
    timeout.saturating_sub((timeout / 5).min(STEP))
}

/// Fails at once, with the reason per host, when every host of `hosts` is refused or
/// does not resolve: no connect can succeed then, and waiting out its timeout would
/// only hide why. Otherwise (a host connects, or stays silent) `Ok`: the connect goes
/// ahead.
///
/// # Errors
///
/// `Unavailable` (retryable: the server may be starting) naming each host's reason.
///
/// # Cancel safety
///
/// Cancel-safe: dropping it drops its connections.
pub async fn before_connect(service: Service, hosts: &[HostPort]) -> Result<()> {
    use futures::StreamExt as _;
    // The first host that connects ends the look at once: one silent host beside a
    // live one costs nothing.
    let mut pending: futures::stream::FuturesUnordered<_> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| async move { (i, reach(h, STEP).await) })
        .collect();
    let mut findings = vec![Finding::Silent; hosts.len()];
    while let Some((i, finding)) = pending.next().await {
        if finding == Finding::Connects {
            return Ok(());
        }
        findings[i] = finding;
    }
    match verdict(service, hosts, &findings) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What a closer look at every host says, when it rules out every one of them; `None`
/// when some host may still serve (it answered as `service`, stayed silent, or found
/// nothing definite).
///
/// # Cancel safety
///
/// Cancel-safe.
pub async fn explain(service: Service, hosts: &[HostPort]) -> Option<Error> {
    let findings = futures::future::join_all(hosts.iter().map(|h| look(h, STEP))).await;
    verdict(service, hosts, &findings)
}

/// Runs `connect`; if it has not succeeded after `after`, looks at the hosts beside it
/// (again every second) and fails at once when the look rules out every host. A connect
/// that fails sooner with `Unavailable` or `Timeout` is explained once before its error
/// is returned.
///
/// # Cancel safety
///
/// As `connect`.
pub async fn connect_or_explain<T>(
    service: Service,
    hosts: &[HostPort],
    after: Duration,
    connect: impl Future<Output = Result<T>>,
) -> Result<T> {
    explained(after, connect, || explain(service, hosts)).await
}

/// Runs `connect`; if it has not succeeded after `after`, runs `diagnose` beside it
/// (again every [`STEP`]) and fails at once with the first definite diagnosis. A
/// connect that fails sooner with `Unavailable`, `Timeout` or a protocol error
/// (`Unexpected`, `Decode`) is diagnosed once before its error is returned. The one loop behind this module's and the TLS probe's
/// explanations.
///
/// # Cancel safety
///
/// As `connect`.
pub(crate) async fn explained<T, D>(
    after: Duration,
    connect: impl Future<Output = Result<T>>,
    diagnose: impl Fn() -> D,
) -> Result<T>
where
    D: Future<Output = Option<Error>>,
{
    tokio::pin!(connect);
    let looking = async {
        tokio::time::sleep(after).await;
        loop {
            if let Some(e) = diagnose().await {
                return e;
            }
            tokio::time::sleep(STEP).await;
        }
    };
    let result = tokio::select! {
        r = &mut connect => r,
        e = looking => return Err(e.with_operation("connect")),
    };
    match result {
        // Also a protocol error (`Unexpected`, `Decode`): an HTTP server or another
        // service on the port makes the client fail that way. (`Unsupported` is said
        // before any host is asked — a feature not built in — and stands.)
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::Unavailable | ErrorKind::Timeout | ErrorKind::Unexpected | ErrorKind::Decode
            ) =>
        {
            match diagnose().await {
                Some(found) => Err(found.with_operation("connect")),
                None => Err(e),
            }
        }
        other => other,
    }
}

/// The error when `findings` rule out every host.
fn verdict(service: Service, hosts: &[HostPort], findings: &[Finding]) -> Option<Error> {
    if hosts.is_empty() || !findings.iter().all(|f| f.rules_out(service)) {
        return None;
    }
    let each = hosts
        .iter()
        .zip(findings)
        .map(|(h, f)| format!("{h}: {}", f.says(service)))
        .collect::<Vec<_>>()
        .join("; ");
    // Another service on every port is a wrong URL, not an outage.
    let wrong_service = findings
        .iter()
        .all(|f| matches!(f, Finding::Is(_) | Finding::Http));
    let (kind, retryable) = if wrong_service {
        (ErrorKind::ConfigInvalid, false)
    } else {
        (ErrorKind::Unavailable, true)
    };
    Some(
        Error::new(kind, format!("cannot reach {} — {each}", service.name()))
            .with_operation("connect")
            .with_retryable(retryable),
    )
}

/// Resolves `host` and opens (then closes) one TCP connection to it.
async fn reach(host: &HostPort, step: Duration) -> Finding {
    match connect(host, step).await {
        Ok(_) => Finding::Connects,
        Err(finding) => finding,
    }
}

async fn connect(host: &HostPort, step: Duration) -> std::result::Result<tokio::net::TcpStream, Finding> {
    let addrs: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(step, tokio::net::lookup_host((host.host.as_str(), host.port))).await {
            Ok(Ok(addrs)) => addrs.collect(),
            Ok(Err(_)) => return Err(Finding::Unresolved),
            Err(_) => return Err(Finding::Silent),
        };
    if addrs.is_empty() {
        return Err(Finding::Unresolved);
    }
    match tokio::time::timeout(step, tokio::net::TcpStream::connect(&addrs[..])).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(Finding::Refused),
        Ok(Err(_)) | Err(_) => Err(Finding::Silent),
    }
}

/// A closer look: which service answers on `host`, if any says.
async fn look(host: &HostPort, step: Duration) -> Finding {
    // ZooKeeper answers `srvr` (or says it is not allowed) and closes.
    let answer = match ask(host, step, b"srvr").await {
        Ok(answer) => answer,
        Err(finding) => return finding,
    };
    if answer.contains("Zookeeper version") || answer.contains("whitelist") {
        return Finding::Is(Service::ZooKeeper);
    }
    // etcd's client port answers HTTP/1 too: /version names etcdserver.
    match ask(host, step, b"GET /version HTTP/1.0\r\n\r\n").await {
        Ok(answer) if answer.starts_with("HTTP/") && answer.contains("etcdserver") => {
            Finding::Is(Service::Etcd)
        }
        Ok(answer) if answer.starts_with("HTTP/") => Finding::Http,
        Ok(_) => Finding::Connects,
        Err(finding) => finding,
    }
}

/// Sends `request` on a connection of its own and reads what comes back within `step`
/// (at most 512 bytes).
async fn ask(host: &HostPort, step: Duration, request: &[u8]) -> std::result::Result<String, Finding> {
    let mut stream = connect(host, step).await?;
    let exchange = async {
        stream.write_all(request).await?;
        let mut buf = vec![0u8; 512];
        let mut got = 0;
        while got < buf.len() {
            match stream.read(&mut buf[got..]).await? {
                0 => break,
                n => got += n,
            }
        }
        buf.truncate(got);
        std::io::Result::Ok(buf)
    };
    match tokio::time::timeout(step, exchange).await {
        Ok(Ok(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        // Reset, or nothing within the step: nothing definite.
        Ok(Err(_)) | Err(_) => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(h: &str, port: u16) -> HostPort {
        HostPort {
            host: h.to_owned(),
            port,
        }
    }

    /// A port nothing listens on: bound, then closed.
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    }

    #[test]
    fn the_connect_leaves_time_to_explain() {
        assert_eq!(for_the_connect(Duration::from_secs(15)), Duration::from_secs(14));
        assert_eq!(
            for_the_connect(Duration::from_secs(2)),
            Duration::from_millis(1600)
        );
    }

    #[tokio::test]
    async fn refused_and_unresolved_fail_at_once_naming_each() {
        let hosts = [
            host("127.0.0.1", closed_port()),
            host("no-such-host.invalid", 2181),
        ];
        let started = std::time::Instant::now();
        let e = before_connect(Service::ZooKeeper, &hosts).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_retryable());
        let text = e.to_string();
        assert!(text.contains("connection refused"), "{text}");
        assert!(text.contains("does not resolve"), "{text}");
    }

    #[tokio::test]
    async fn a_listening_host_lets_the_connect_go_ahead() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let hosts = [host("127.0.0.1", closed_port()), host("127.0.0.1", port)];
        assert!(before_connect(Service::Etcd, &hosts).await.is_ok());
    }

    #[tokio::test]
    async fn a_silent_host_beside_a_live_one_costs_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // 192.0.2.1 (TEST-NET-1) is never routed: its connect gets no answer.
        let hosts = [host("192.0.2.1", 2181), host("127.0.0.1", port)];
        let started = std::time::Instant::now();
        assert!(before_connect(Service::ZooKeeper, &hosts).await.is_ok());
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn another_service_is_named() {
        // A stand-in that answers `srvr` as ZooKeeper does.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).await.is_ok() && &buf == b"srvr" {
                    let _ = s.write_all(b"Zookeeper version: 3.8.0\n").await;
                }
            }
        });
        let e = explain(Service::Etcd, &[host("127.0.0.1", port)])
            .await
            .expect("a ZooKeeper port in an etcd URL is explained");
        assert_eq!(e.kind(), ErrorKind::ConfigInvalid);
        let text = e.to_string();
        assert!(text.contains("a ZooKeeper") && text.contains("zk://"), "{text}");
        assert!(
            explain(Service::ZooKeeper, &[host("127.0.0.1", port)])
                .await
                .is_none()
        );
    }
}
