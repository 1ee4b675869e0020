//! Connection strings: `scheme://[user[:password]@]host[:port][,host[:port]…][/namespace][?key=value&…]`.
//!
//! ZooKeeper's multi-host form (`h1:2181,h2:2181`) is not a URL, so coord has its own
//! small parser. Passwords are never printed: `Debug` and `Display` redact them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::name::validate_name;

/// One `host:port` of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port number.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A parsed connection string.
///
/// # Examples
///
/// ```
/// use coord_core::raw::ConnectionString;
/// let cs = ConnectionString::parse("zk://h1:2181,h2/myapp?session_timeout=2s").unwrap();
/// assert_eq!(cs.scheme(), "zk");
/// assert_eq!(cs.hosts(2181).unwrap().len(), 2);
/// assert_eq!(cs.namespace(), "myapp");
/// let mut opts = cs.options();
/// assert_eq!(opts.duration("session_timeout").unwrap(), Some(std::time::Duration::from_secs(2)));
/// opts.finish(&["session_timeout"]).unwrap();
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectionString {
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    authority: String,
    namespace: String,
    options: BTreeMap<String, String>,
}

impl ConnectionString {
    /// Parses `input`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ConfigInvalid`](crate::ErrorKind::ConfigInvalid) naming what is
    /// wrong: a missing `://`, a bad namespace segment, a malformed or repeated option,
    /// bad percent-encoding, an `@` after the first `/` or `?` (an unencoded `/`, `?` or
    /// `@` in a password). The password never appears in the message.
    pub fn parse(input: &str) -> Result<Self> {
        let (scheme, rest) = input.split_once("://").ok_or_else(|| {
            Error::config_invalid(format!(
                "connection string {:?} has no '://'; expected e.g. mem://myapp, zk://host:2181/myapp or etcd://host:2379/myapp",
                redact_guess(input)
            ))
        })?;
        if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+') {
            return Err(Error::config_invalid(format!(
                "connection string scheme {scheme:?} is not valid; use mem, zk, etcd or etcd+https"
            )));
        }
        let whole = rest;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (userinfo, authority) = match authority.rsplit_once('@') {
            Some((u, a)) => (Some(u), a),
            None => (None, authority),
        };
        // An '@' after the first '/' or '?' most likely ends credentials whose password
        // holds one of those: the host, port and namespace parsed from it would be
        // fragments of the password, so say so without quoting any of it.
        if userinfo.is_none() && whole.contains('@') {
            return Err(Error::config_invalid(
                "connection string has an '@' after the first '/' or '?'; if it ends a user name \
                 and password, percent-encode '/', '?' and '@' in them (%2F, %3F, %40), and in an \
                 option value write '@' as %40",
            ));
        }
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (name, pw) = match u.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (u, None),
                };
                let name = percent_decode(name, "user name")?;
                if name.is_empty() {
                    return Err(Error::config_invalid(
                        "connection string has an empty user name before '@'",
                    ));
                }
                let pw = pw.map(|p| percent_decode(p, "password")).transpose()?;
                (Some(name), pw)
            }
        };
        // One trailing slash is allowed; empty segments are not the root namespace.
        let namespace = path.strip_suffix('/').unwrap_or(path);
        if namespace.is_empty() && !path.is_empty() {
            return Err(Error::config_invalid(
                "connection string namespace has an empty segment ('//'); write /myapp, or nothing for the root",
            ));
        }
        if !namespace.is_empty() {
            validate_name("namespace", namespace).map_err(|e| {
                Error::config_invalid(format!("connection string namespace: {}", e.message()))
            })?;
        }
        let mut options = BTreeMap::new();
        if let Some(query) = query {
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    Error::config_invalid(format!(
                        "connection string option {pair:?} has no '='; write key=value"
                    ))
                })?;
                let k = percent_decode(k, "option name")?;
                let v = percent_decode(v, "option value")?;
                if k.is_empty() {
                    return Err(Error::config_invalid(
                        "connection string has an option with an empty name",
                    ));
                }
                if options.insert(k.clone(), v).is_some() {
                    return Err(Error::config_invalid(format!(
                        "connection string option {k:?} is given twice"
                    )));
                }
            }
        }
        Ok(ConnectionString {
            scheme: scheme.to_ascii_lowercase(),
            user,
            password,
            authority: authority.to_owned(),
            namespace: namespace.to_owned(),
            options,
        })
    }

    /// The scheme, lower-cased (`mem`, `zk`, `etcd`, `etcd+https`).
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user name, if given.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, if given. Never logged by coord.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The raw text between `://` (after any `user@`) and the first `/`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The namespace path (may be empty: the root).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The hosts of the authority, with `default_port` where none is given.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for an empty host list, an empty host, or a bad port.
    pub fn hosts(&self, default_port: u16) -> Result<Vec<HostPort>> {
        if self.authority.is_empty() {
            return Err(Error::config_invalid(format!(
                "{}:// connection string names no host; write e.g. {}://127.0.0.1:{default_port}/myapp",
                self.scheme, self.scheme
            )));
        }
        let count = self.authority.split(',').count();
        if count > MAX_HOSTS {
            return Err(Error::config_invalid(format!(
                "{}:// connection string names {count} hosts; the limit is {MAX_HOSTS} (list a cluster's members, not more)",
                self.scheme
            )));
        }
        self.authority
            .split(',')
            .map(|h| parse_host(h, default_port))
            .collect()
    }

    /// The options, to be read with typed getters and checked for unknown keys.
    pub fn options(&self) -> Options {
        Options {
            scheme: self.scheme.clone(),
            remaining: self.options.clone(),
        }
    }
}

impl fmt::Display for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        if let Some(user) = &self.user {
            write!(f, "{user}")?;
            if self.password.is_some() {
                f.write_str(":***")?;
            }
            f.write_str("@")?;
        }
        write!(f, "{}", self.authority)?;
        if !self.namespace.is_empty() {
            write!(f, "/{}", self.namespace)?;
        }
        for (i, (k, v)) in self.options.iter().enumerate() {
            let v = if is_secret_key(k) { "***" } else { v };
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnectionString({self})")
    }
}

fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.contains("token")
}

/// Drops a `user:password@` part from text that failed to parse, for error messages.
fn redact_guess(input: &str) -> String {
    let shown = match input.rsplit_once('@') {
        Some((_, rest)) => format!("***@{rest}"),
        None => input.to_owned(),
    };
    // Error messages stay short whatever was passed.
    if shown.chars().count() > 80 {
        format!("{}…", shown.chars().take(80).collect::<String>())
    } else {
        shown
    }
}

/// The most hosts a connection string may name.
pub const MAX_HOSTS: usize = 64;

fn parse_host(text: &str, default_port: u16) -> Result<HostPort> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| Error::config_invalid(format!("host {text:?} has '[' without ']'")))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| {
                Error::config_invalid(format!("host {text:?}: expected ':port' after ']'"))
            })?),
        };
        (host, port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(Error::config_invalid(format!(
            "connection string has an empty host in {text:?}; separate hosts with a single ','"
        )));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    {
        return Err(Error::config_invalid(format!(
            "host {host:?} contains characters not allowed in a host name"
        )));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            Error::config_invalid(format!(
                "port {p:?} of host {host:?} is not a number from 1 to 65535"
            ))
        })?,
    };
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

fn percent_decode(text: &str, what: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::config_invalid(format!("{what} has a '%' not followed by two hex digits"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::config_invalid(format!("{what} is not UTF-8 after percent-decoding")))
}

/// The TLS files of a connection string: `tls_ca`, and `tls_cert` with `tls_key` for a
/// client certificate. Paths only; the adapters read the files when they connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of the CA certificates that sign the servers' certificates (`tls_ca`).
    pub ca_file: std::path::PathBuf,
    /// PEM certificate and key files of this client (`tls_cert`, `tls_key`), for servers
    /// that require client certificates.
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// The option keys [`Options::tls_files`] takes.
pub const TLS_OPTIONS: [&str; 3] = ["tls_ca", "tls_cert", "tls_key"];

/// The options of a connection string, consumed by typed getters. Call
/// [`Options::finish`] last: any key not consumed is an error.
#[derive(Debug, Clone)]
pub struct Options {
    scheme: String,
    remaining: BTreeMap<String, String>,
}

impl Options {
    /// Takes `key` as a raw string.
    pub fn string(&mut self, key: &str) -> Option<String> {
        self.remaining.remove(key)
    }

    /// Takes `key` as a duration: a number with unit `ms`, `s` or `m` (`500ms`, `2s`).
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for a value without a unit, a zero duration, or garbage.
    pub fn duration(&mut self, key: &str) -> Result<Option<Duration>> {
        let Some(v) = self.remaining.remove(key) else {
            return Ok(None);
        };
        parse_duration(&v)
            .filter(|d| !d.is_zero())
            .map(Some)
            .ok_or_else(|| {
                Error::config_invalid(format!(
                    "option {key}={v:?} is not a positive duration; write e.g. {key}=500ms or {key}=2s"
                ))
            })
    }

    /// Takes `key` as a boolean (`true`/`false`).
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` for anything else.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>> {
        match self.remaining.remove(key).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(Error::config_invalid(format!(
                "option {key}={v:?} must be true or false"
            ))),
        }
    }

    /// Takes `tls_ca`, `tls_cert` and `tls_key`: `Some` for a TLS scheme (`secure`), which
    /// needs `tls_ca`; `None` for a plaintext one, which takes none of them.
    /// `tls_scheme` names the TLS scheme in messages (`zk+tls`, `etcd+https`).
    ///
    /// # Errors
    ///
    /// `ConfigInvalid`: TLS files on a plaintext scheme, a TLS scheme without `tls_ca`,
    /// `tls_cert` without `tls_key` or the reverse.
    pub fn tls_files(&mut self, secure: bool, tls_scheme: &str) -> Result<Option<TlsFiles>> {
        let [ca, cert, key] = TLS_OPTIONS.map(|k| self.remaining.remove(k));
        match (secure, ca, cert, key) {
            (false, None, None, None) => Ok(None),
            (false, ..) => Err(Error::config_invalid(format!(
                "tls_ca, tls_cert and tls_key need a {tls_scheme}:// connection string"
            ))),
            (true, None, ..) => Err(Error::config_invalid(format!(
                "{tls_scheme}:// needs tls_ca=<PEM file of the CA that signs the servers' certificates>"
            ))),
            (true, Some(ca), None, None) => Ok(Some(TlsFiles {
                ca_file: ca.into(),
                identity: None,
            })),
            (true, Some(ca), Some(cert), Some(key)) => Ok(Some(TlsFiles {
                ca_file: ca.into(),
                identity: Some((cert.into(), key.into())),
            })),
            (true, Some(_), ..) => Err(Error::config_invalid(
                "tls_cert and tls_key go together (a client certificate and its key)",
            )),
        }
    }

    /// Fails if any option was not consumed, listing the `known` keys.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` naming the unknown keys.
    pub fn finish(self, known: &[&str]) -> Result<()> {
        if self.remaining.is_empty() {
            return Ok(());
        }
        let unknown: Vec<&str> = self.remaining.keys().map(String::as_str).collect();
        Err(Error::config_invalid(format!(
            "unknown option(s) {} for {}://; known options are: {}",
            unknown.join(", "),
            self.scheme,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )))
    }
}

fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unencoded_reserved_characters_in_passwords_are_not_quoted() {
        for input in [
            "etcd://app:Xq/Zr@h1:2379/ns",
            "zk://app:Xq?Zr@h1:2181/ns",
            "etcd://h1:2379/ns?tls_ca=/Xq@Zr",
        ] {
            let e = ConnectionString::parse(input).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::ConfigInvalid, "{input}");
            let msg = e.to_string();
            assert!(
                msg.contains("%2F") && !msg.contains("Xq") && !msg.contains("Zr"),
                "{input}: {msg}"
            );
        }
        let ok = ConnectionString::parse("etcd://app:pa%2Fss@h1:2379/ns?tls_ca=/a%40b").unwrap();
        assert_eq!(ok.namespace(), "ns");
    }
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn parses_multi_host_with_options_and_credentials() {
        let cs =
            ConnectionString::parse("etcd://alice:s%40cret@h1:2379,[::1]:2380,h3/a/b?lease_ttl=3s").unwrap();
        assert_eq!(cs.scheme(), "etcd");
        assert_eq!(cs.user(), Some("alice"));
        assert_eq!(cs.password(), Some("s@cret"));
        let hosts = cs.hosts(2379).unwrap();
        assert_eq!(
            hosts[1],
            HostPort {
                host: "::1".into(),
                port: 2380
            }
        );
        assert_eq!(hosts[2].port, 2379);
        assert_eq!(cs.namespace(), "a/b");
        let shown = format!("{cs} {cs:?}");
        assert!(
            !shown.contains("s@cret") && !shown.contains("s%40cret"),
            "{shown}"
        );
    }

    #[test]
    fn rejects_bad_strings_as_config_invalid() {
        for bad in [
            "",
            "zk:/h",
            "://h",
            "z k://h",
            "zk://h/ns/../x",
            "zk://h/a//b",
            "zk://h?x",
            "zk://h?=1",
            "zk://h?a=1&a=2",
            "zk://h?a=%zz",
            "zk://:pw@h",
        ] {
            let e = ConnectionString::parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConfigInvalid, "{bad}: {e}");
        }
        for bad_hosts in [
            "zk://",
            "zk://h:0",
            "zk://h:99999",
            "zk://h:x",
            "zk://a,,b",
            "zk://[::1",
            "zk://h!",
        ] {
            let cs = ConnectionString::parse(bad_hosts).unwrap();
            assert_eq!(
                cs.hosts(2181).unwrap_err().kind(),
                ErrorKind::ConfigInvalid,
                "{bad_hosts}"
            );
        }
    }

    #[test]
    fn secrets_never_in_errors() {
        let e = ConnectionString::parse("etcd//u:hunter2@h").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let cs = ConnectionString::parse("etcd://h/?password=hunter2").unwrap();
        assert!(!cs.to_string().contains("hunter2"));
    }

    #[test]
    fn options_are_typed_and_unknown_keys_fail() {
        let cs = ConnectionString::parse("mem://x?session_ttl=250ms&bogus=1").unwrap();
        let mut o = cs.options();
        assert_eq!(
            o.duration("session_ttl").unwrap(),
            Some(Duration::from_millis(250))
        );
        let e = o.finish(&["session_ttl"]).unwrap_err();
        assert!(
            e.to_string().contains("bogus") && e.to_string().contains("session_ttl"),
            "{e}"
        );
        for bad in ["5", "0s", "1h", "-1s", "s", "99999999999999999999m"] {
            let cs = ConnectionString::parse(&format!("mem://?t={bad}")).unwrap();
            assert_eq!(
                cs.options().duration("t").unwrap_err().kind(),
                ErrorKind::ConfigInvalid,
                "{bad}"
            );
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,60}") {
            if let Ok(cs) = ConnectionString::parse(&s) {
                let _ = cs.hosts(1);
                let _ = cs.options().duration("a");
                let _ = cs.to_string();
            }
        }
    }
}
