//! `etcd://` connection strings and options.

use std::time::Duration;

use coord_core::raw::{ConnectionString, HostPort, TLS_OPTIONS, TlsFiles};
use coord_core::{Error, Result};

/// Options of an etcd client.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Cluster members.
    pub endpoints: Vec<HostPort>,
    /// TLS (`etcd+https://`; needs the `tls` feature): the CA that signs the members'
    /// certificates, and this client's identity for client-certificate authentication.
    pub tls: Option<TlsFiles>,
    /// The namespace: every key starts with `<namespace>/`.
    pub namespace: String,
    /// Lease time-to-live, whole seconds, at least 1 s (etcd rounds up). Default 10 s.
    pub lease_ttl: Duration,
    /// How long [`EtcdClient::connect`](crate::EtcdClient::connect) waits for the
    /// cluster. Default 5 s.
    pub connect_timeout: Duration,
    /// Deadline of each request; a write that hits it has an unknown outcome. Default 5 s.
    pub request_timeout: Duration,
    /// User name and password for etcd authentication.
    pub credentials: Option<(String, String)>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            endpoints: vec![HostPort {
                host: "127.0.0.1".into(),
                port: DEFAULT_PORT,
            }],
            tls: None,
            namespace: String::new(),
            lease_ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            credentials: None,
        }
    }
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field("namespace", &self.namespace)
            .field("lease_ttl", &self.lease_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// etcd's client port.
pub const DEFAULT_PORT: u16 = 2379;

/// The option keys `etcd://` accepts.
pub const KNOWN_OPTIONS: &[&str] = &[
    "lease_ttl",
    "connect_timeout",
    "request_timeout",
    TLS_OPTIONS[0],
    TLS_OPTIONS[1],
    TLS_OPTIONS[2],
];

impl EtcdOptions {
    /// Parses `etcd://[user:password@]h1[:2379][,h2…][/namespace][?lease_ttl=…&connect_timeout=…&request_timeout=…]`,
    /// or `etcd+https://…?tls_ca=<ca.pem>[&tls_cert=<cert.pem>&tls_key=<key.pem>]` for TLS.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` naming the problem.
    pub fn from_url(url: &str) -> Result<Self> {
        let cs = ConnectionString::parse(url)?;
        let tls = match cs.scheme() {
            "etcd" => false,
            "etcd+https" => true,
            other => {
                return Err(Error::config_invalid(format!(
                    "expected an etcd:// or etcd+https:// connection string, got {other}://"
                )));
            }
        };
        let mut opts = cs.options();
        let tls = opts.tls_files(tls, "etcd+https")?;
        let d = EtcdOptions::default();
        let o = EtcdOptions {
            endpoints: cs.hosts(DEFAULT_PORT)?,
            tls,
            namespace: cs.namespace().to_owned(),
            lease_ttl: opts.duration("lease_ttl")?.unwrap_or(d.lease_ttl),
            connect_timeout: opts.duration("connect_timeout")?.unwrap_or(d.connect_timeout),
            request_timeout: opts.duration("request_timeout")?.unwrap_or(d.request_timeout),
            credentials: match (cs.user(), cs.password()) {
                (Some(u), Some(p)) => Some((u.to_owned(), p.to_owned())),
                (Some(u), None) => {
                    return Err(Error::config_invalid(format!(
                        "etcd:// user {u:?} has no password; write user:password@host"
                    )));
                }
                _ => None,
            },
        };
        opts.finish(KNOWN_OPTIONS)?;
        o.validate()?;
        Ok(o)
    }

    /// Checks the values.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid`.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::config_invalid("etcd:// needs at least one endpoint"));
        }
        if self.lease_ttl < Duration::from_secs(1) {
            return Err(Error::config_invalid(format!(
                "lease_ttl {:?} is below etcd's 1s minimum",
                self.lease_ttl
            )));
        }
        if !self.namespace.is_empty() {
            coord_core::validate_name("namespace", &self.namespace)
                .map_err(|e| Error::config_invalid(e.message().to_owned()))?;
        }
        Ok(())
    }

    /// The lease TTL in whole seconds, rounded up.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let ms = self.lease_ttl.as_millis();
        i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
    }

    /// Endpoint URLs for the client.
    pub(crate) fn urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.endpoints.iter().map(|h| format!("{scheme}://{h}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::ErrorKind;

    #[test]
    fn parses() {
        let o =
            EtcdOptions::from_url("etcd+https://u:p@h1,h2:2380/app?lease_ttl=1500ms&tls_ca=/ca.pem").unwrap();
        assert_eq!(o.tls.as_ref().map(|t| t.ca_file.clone()), Some("/ca.pem".into()));
        let m =
            EtcdOptions::from_url("etcd+https://h/x?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem").unwrap();
        assert!(m.tls.and_then(|t| t.identity).is_some());
        assert_eq!(o.urls(), ["https://h1:2379", "https://h2:2380"]);
        assert_eq!(o.ttl_secs(), 2);
        assert_eq!(o.namespace, "app");
        assert!(!format!("{o:?}").contains("\"p\""));
    }

    #[test]
    fn rejects() {
        for bad in [
            "etcd://",
            "etcd://h/ns?lease_ttl=500ms",
            "etcd://h/ns?session_timeout=1s",
            "etcd://u@h",
            "zk://h",
            "etcd://h/a//b",
            "etcd+https://h/ns",
            "etcd://h/ns?tls_ca=/ca.pem",
            "etcd+https://h/ns?tls_ca=/ca.pem&tls_key=/k.pem",
        ] {
            assert_eq!(
                EtcdOptions::from_url(bad).unwrap_err().kind(),
                ErrorKind::ConfigInvalid,
                "{bad}"
            );
        }
    }
}
