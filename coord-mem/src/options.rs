//! `mem://` connection-string options.

use std::time::Duration;

use coord_core::raw::ConnectionString;
use coord_core::{Error, Result};

/// Options of an in-memory client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemOptions {
    /// The namespace every key lives under.
    pub namespace: String,
    /// Session time-to-live: a client that cannot reach the cluster for this long loses
    /// its session. Default 10 s; `session_ttl=…` in the connection string.
    pub session_ttl: Duration,
}

impl Default for MemOptions {
    fn default() -> Self {
        MemOptions {
            namespace: String::new(),
            session_ttl: Duration::from_secs(10),
        }
    }
}

/// The option keys `mem://` accepts.
pub const KNOWN_OPTIONS: &[&str] = &["session_ttl"];

impl MemOptions {
    /// Parses `mem://[namespace][?session_ttl=…]`. The text after `mem://` up to `?` is
    /// the namespace (`mem://myapp`, `mem://myapp/team-a`).
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for another scheme, a user name, a bad namespace, an unknown
    /// option or a TTL under 100 ms.
    pub fn from_url(url: &str) -> Result<Self> {
        let cs = ConnectionString::parse(url)?;
        if cs.scheme() != "mem" {
            return Err(Error::config_invalid(format!(
                "{url:?} is not a mem:// connection string"
            )));
        }
        if cs.user().is_some() {
            return Err(Error::config_invalid("mem:// takes no user name or password"));
        }
        let namespace = match (cs.authority(), cs.namespace()) {
            ("", ns) => ns.to_owned(),
            (first, "") => first.to_owned(),
            (first, rest) => format!("{first}/{rest}"),
        };
        if !namespace.is_empty() {
            coord_core::validate_name("namespace", &namespace)
                .map_err(|e| Error::config_invalid(format!("mem:// namespace: {}", e.message())))?;
        }
        let mut opts = cs.options();
        let session_ttl = opts.duration("session_ttl")?.unwrap_or(Duration::from_secs(10));
        opts.finish(KNOWN_OPTIONS)?;
        let o = MemOptions {
            namespace,
            session_ttl,
        };
        o.validate()?;
        Ok(o)
    }

    /// Checks the values.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for a TTL under 100 ms or a bad namespace.
    pub fn validate(&self) -> Result<()> {
        if self.session_ttl < Duration::from_millis(100) {
            return Err(Error::config_invalid(format!(
                "session_ttl {:?} is below the 100ms minimum",
                self.session_ttl
            )));
        }
        if !self.namespace.is_empty() {
            coord_core::validate_name("namespace", &self.namespace)
                .map_err(|e| Error::config_invalid(e.message().to_owned()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::ErrorKind;

    #[test]
    fn parses_namespace_and_ttl() {
        let o = MemOptions::from_url("mem://myapp/a?session_ttl=500ms").expect("valid");
        assert_eq!(o.namespace, "myapp/a");
        assert_eq!(o.session_ttl, Duration::from_millis(500));
        assert_eq!(MemOptions::from_url("mem://").expect("valid").namespace, "");
    }

    #[test]
    fn rejects_bad() {
        for bad in [
            "mem://a?x=1",
            "mem://a?session_ttl=10ms",
            "mem://u@a",
            "mem://a b",
            "zk://a",
        ] {
            assert_eq!(
                MemOptions::from_url(bad).unwrap_err().kind(),
                ErrorKind::ConfigInvalid,
                "{bad}"
            );
        }
    }
}
