//! `zk://` connection strings and options.

use std::sync::LazyLock;
use std::time::Duration;

use coord_core::raw::{ConnectionString, HostPort, TLS_OPTIONS, TlsFiles};
use coord_core::{Error, Result};
use zookeeper_client as zk;

/// Options of a ZooKeeper client.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkOptions {
    /// Ensemble members.
    pub hosts: Vec<HostPort>,
    /// The namespace: every znode lives under `/<namespace>` (created if missing).
    pub namespace: String,
    /// Session timeout asked of the server (it may negotiate it into its
    /// `[2, 20] × tickTime` range). Default 10 s.
    pub session_timeout: Duration,
    /// How long [`ZkClient::connect`](crate::ZkClient::connect) waits for the first
    /// session. Default 15 s.
    pub connect_timeout: Duration,
    /// Deadline of each request; a write that hits it has an unknown outcome. Default:
    /// the session timeout.
    pub request_timeout: Option<Duration>,
    /// Digest credentials (`user:password@` in the connection string).
    pub digest: Option<(String, String)>,
    /// The ACL of the znodes coord creates (`acl=`); `None` picks by the credentials:
    /// [`ZkAcl::CreatorReadAll`] with them, [`ZkAcl::Open`] without. See [`ZkAcl`].
    pub acl: Option<ZkAcl>,
    /// TLS (`zk+tls://`; needs the `tls` feature): the CA that signs the servers'
    /// certificates, and this client's certificate for servers that require one.
    pub tls: Option<TlsFiles>,
    /// The names of the lock contenders coord creates (`lock_layout=`). Default
    /// [`LockLayout::Curator`]. coord waits for contenders of both layouts either way.
    pub lock_layout: LockLayout,
}

/// The node names coord gives the lock and read/write lock contenders it creates, so the
/// library an application runs beside coord on the same path sees them.
///
/// coord recognises the contenders of both layouts on a path and waits for them; Curator
/// and kazoo each recognise only their own. Pick the layout of the library coord shares
/// a path with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockLayout {
    /// `lock_layout=curator` (default): Curator's protected names,
    /// `_c_<guid>-lock-<seq>` (`InterProcessMutex`), `_c_<guid>-__READ__<seq>` and
    /// `_c_<guid>-__WRIT__<seq>` (`InterProcessReadWriteLock`).
    #[default]
    Curator,
    /// `lock_layout=kazoo`: kazoo's names, `<guid>__lock__<seq>` (`Lock`, and a
    /// read/write lock's writer) and `<guid>__rlock__<seq>` (`ReadLock`).
    Kazoo,
}

impl LockLayout {
    /// Parses the `lock_layout=` value.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` naming the accepted values.
    pub fn parse(value: &str) -> Result<LockLayout> {
        match value {
            "curator" => Ok(LockLayout::Curator),
            "kazoo" => Ok(LockLayout::Kazoo),
            other => Err(Error::config_invalid(format!(
                "lock_layout={other:?} is not a layout coord knows; use lock_layout=curator or lock_layout=kazoo"
            ))),
        }
    }
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            hosts: vec![HostPort {
                host: "127.0.0.1".into(),
                port: DEFAULT_PORT,
            }],
            namespace: String::new(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(15),
            request_timeout: None,
            digest: None,
            acl: None,
            tls: None,
            lock_layout: LockLayout::Curator,
        }
    }
}

impl std::fmt::Debug for ZkOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkOptions")
            .field("hosts", &self.hosts)
            .field("namespace", &self.namespace)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .field("acl", &self.acl_policy())
            .field("tls", &self.tls)
            .field("lock_layout", &self.lock_layout)
            .finish()
    }
}

/// ZooKeeper's client port.
pub const DEFAULT_PORT: u16 = 2181;

/// The option keys `zk://` accepts.
pub const KNOWN_OPTIONS: &[&str] = &[
    "session_timeout",
    "connect_timeout",
    "request_timeout",
    "acl",
    "lock_layout",
    TLS_OPTIONS[0],
    TLS_OPTIONS[1],
    TLS_OPTIONS[2],
];

impl ZkOptions {
    /// Parses `zk://[user:password@]h1[:port][,h2[:port]…][/namespace][?session_timeout=…&connect_timeout=…&request_timeout=…&acl=…&lock_layout=…]`,
    /// or `zk+tls://…?tls_ca=<ca.pem>[&tls_cert=<cert.pem>&tls_key=<key.pem>]`.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` naming the problem: another scheme, no host, a bad port, a bad
    /// namespace, an unknown option, a session timeout under 200 ms, an `acl` policy that
    /// needs credentials without `user:password@`.
    pub fn from_url(url: &str) -> Result<Self> {
        let cs = ConnectionString::parse(url)?;
        let tls = match cs.scheme() {
            "zk" => false,
            "zk+tls" => true,
            other => {
                return Err(Error::config_invalid(format!(
                    "expected a zk:// or zk+tls:// connection string, got {other}://"
                )));
            }
        };
        let mut opts = cs.options();
        let tls = opts.tls_files(tls, "zk+tls")?;
        let acl = opts.string("acl").map(|a| ZkAcl::parse(&a)).transpose()?;
        let lock_layout = opts
            .string("lock_layout")
            .map(|l| LockLayout::parse(&l))
            .transpose()?
            .unwrap_or_default();
        let defaults = ZkOptions::default();
        let o = ZkOptions {
            hosts: cs.hosts(DEFAULT_PORT)?,
            namespace: cs.namespace().to_owned(),
            session_timeout: opts
                .duration("session_timeout")?
                .unwrap_or(defaults.session_timeout),
            connect_timeout: opts
                .duration("connect_timeout")?
                .unwrap_or(defaults.connect_timeout),
            request_timeout: opts.duration("request_timeout")?,
            digest: match (cs.user(), cs.password()) {
                (Some(u), Some(p)) => Some((u.to_owned(), p.to_owned())),
                (Some(u), None) => {
                    return Err(Error::config_invalid(format!(
                        "zk:// user {u:?} has no password; write user:password@host"
                    )));
                }
                _ => None,
            },
            acl,
            tls,
            lock_layout,
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
        if self.hosts.is_empty() {
            return Err(Error::config_invalid("zk:// needs at least one host"));
        }
        if self.session_timeout < Duration::from_millis(200) {
            return Err(Error::config_invalid(format!(
                "session_timeout {:?} is below ZooKeeper's 200ms minimum",
                self.session_timeout
            )));
        }
        if !self.namespace.is_empty() {
            coord_core::validate_name("namespace", &self.namespace)
                .map_err(|e| Error::config_invalid(e.message().to_owned()))?;
        }
        if let Some(acl) = self.acl
            && acl.needs_credentials()
            && self.digest.is_none()
        {
            return Err(Error::config_invalid(format!(
                "acl={acl} binds nodes to the creator's credentials, but the connection string has none; \
                 add user:password@ before the hosts, or use acl=open"
            )));
        }
        Ok(())
    }

    /// The ACL policy in force: [`ZkOptions::acl`], or the default for the credentials.
    pub fn acl_policy(&self) -> ZkAcl {
        self.acl.unwrap_or(if self.digest.is_some() {
            ZkAcl::CreatorReadAll
        } else {
            ZkAcl::Open
        })
    }

    /// The request deadline in force.
    pub fn request_deadline(&self) -> Duration {
        self.request_timeout.unwrap_or(self.session_timeout)
    }

    /// The host list as ZooKeeper's connect string (`h1:p1,h2:p2`).
    pub(crate) fn connect_string(&self) -> String {
        self.hosts
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

// ---- acl ----
// The ACL every znode coord creates gets: chosen by `acl=` in the connection string, or
// by whether credentials are given.

/// Which ACL coord puts on the znodes it creates (the namespace root, directories,
/// contenders, registrations and config keys).
///
/// The default follows the credentials: with `user:password@` in the connection string
/// it is [`ZkAcl::CreatorReadAll`] — only clients with the same credentials may change
/// or delete what coord created, everyone may read it (so monitoring and read-only tools
/// keep working); without credentials it is [`ZkAcl::Open`], since ZooKeeper cannot bind
/// an ACL to an unauthenticated creator.
///
/// ZooKeeper checks the parent's ACL for creating and deleting children, and the node's
/// own for reading and writing it: a client without the credentials gets
/// `PermissionDenied` on `lock`, `campaign`, `register` and every config write, and on
/// reads too under [`ZkAcl::Creator`]. An ACL is set when a node is created; coord never
/// changes the ACL of an existing node, so a namespace created open stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkAcl {
    /// `acl=open`: `world:anyone` has every permission (ZooKeeper's `OPEN_ACL_UNSAFE`).
    Open,
    /// `acl=creator`: only the creator's credentials (`auth` scheme) may read, write,
    /// create, delete or administer (`CREATOR_ALL_ACL`).
    Creator,
    /// `acl=creator-read-all`: as [`ZkAcl::Creator`], and `world:anyone` may read.
    CreatorReadAll,
}

impl ZkAcl {
    /// Parses the `acl=` value.
    ///
    /// # Errors
    ///
    /// `ConfigInvalid` naming the accepted values.
    pub fn parse(value: &str) -> Result<ZkAcl> {
        match value {
            "open" => Ok(ZkAcl::Open),
            "creator" => Ok(ZkAcl::Creator),
            "creator-read-all" => Ok(ZkAcl::CreatorReadAll),
            other => Err(Error::config_invalid(format!(
                "acl={other:?} is not a ZooKeeper ACL policy coord knows; use acl=creator-read-all, acl=creator or acl=open"
            ))),
        }
    }

    /// The policy's name as written in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            ZkAcl::Open => "open",
            ZkAcl::Creator => "creator",
            ZkAcl::CreatorReadAll => "creator-read-all",
        }
    }

    /// Whether the policy needs credentials (it binds nodes to the creator's identity).
    pub fn needs_credentials(self) -> bool {
        !matches!(self, ZkAcl::Open)
    }

    /// The ACL list ZooKeeper receives.
    pub(crate) fn acls(self) -> zk::Acls<'static> {
        static CREATOR_READ_ALL: LazyLock<[zk::Acl; 2]> = LazyLock::new(|| {
            [
                zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("auth", "")),
                zk::Acl::new(zk::Permission::READ, zk::AuthId::new("world", "anyone")),
            ]
        });
        match self {
            ZkAcl::Open => zk::Acls::anyone_all(),
            ZkAcl::Creator => zk::Acls::creator_all(),
            ZkAcl::CreatorReadAll => zk::Acls::new(&*CREATOR_READ_ALL),
        }
    }

    /// Options for a persistent node.
    pub(crate) fn persistent(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(self.acls())
    }

    /// Options for a container node (a directory: deleted by the server once its last
    /// child is gone).
    pub(crate) fn container(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Container.with_acls(self.acls())
    }

    /// Options for an ephemeral node (a registration).
    pub(crate) fn ephemeral(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Ephemeral.with_acls(self.acls())
    }

    /// Options for an ephemeral sequential node (a contender).
    pub(crate) fn ephemeral_sequential(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::EphemeralSequential.with_acls(self.acls())
    }
}

impl std::fmt::Display for ZkAcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::ErrorKind;

    #[test]
    fn parses_hosts_namespace_and_options() {
        let o = ZkOptions::from_url("zk://u:p@h1,h2:2182/app/x?session_timeout=2s&request_timeout=500ms")
            .unwrap();
        assert_eq!(o.connect_string(), "h1:2181,h2:2182");
        assert_eq!(o.namespace, "app/x");
        assert_eq!(o.session_timeout, Duration::from_secs(2));
        assert_eq!(o.request_deadline(), Duration::from_millis(500));
        assert_eq!(o.digest, Some(("u".into(), "p".into())));
        assert!(!format!("{o:?}").contains("\"p\""));
        assert_eq!(
            o.acl_policy(),
            ZkAcl::CreatorReadAll,
            "credentials protect by default"
        );
        let open = ZkOptions::from_url("zk://h/ns").unwrap();
        assert_eq!(
            open.acl_policy(),
            ZkAcl::Open,
            "no credentials: nothing to bind an ACL to"
        );
        let creator = ZkOptions::from_url("zk://u:p@h/ns?acl=creator").unwrap();
        assert_eq!(creator.acl_policy(), ZkAcl::Creator);
        let opened = ZkOptions::from_url("zk://u:p@h/ns?acl=open").unwrap();
        assert_eq!(opened.acl_policy(), ZkAcl::Open);
        assert_eq!(open.lock_layout, LockLayout::Curator);
        let kazoo = ZkOptions::from_url("zk://h/ns?lock_layout=kazoo").unwrap();
        assert_eq!(kazoo.lock_layout, LockLayout::Kazoo);
        let t =
            ZkOptions::from_url("zk+tls://h:2281/ns?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem").unwrap();
        let tls = t.tls.expect("tls");
        assert_eq!(tls.ca_file, std::path::PathBuf::from("/ca.pem"));
        assert!(tls.identity.is_some());
    }

    #[test]
    fn rejects_bad_strings() {
        for bad in [
            "zk://",
            "zk://h/ns?session_timeout=100ms",
            "zk://h/ns?bogus=1",
            "zk://h:0/ns",
            "zk://u@h/ns",
            "etcd://h/ns",
            "zk://h/a//b",
            "zk://h/ns?tls_ca=/ca.pem",
            "zk://h/ns?acl=creator",
            "zk://h/ns?acl=creator-read-all",
            "zk://u:p@h/ns?acl=everyone",
            "zk://h/ns?lock_layout=redis",
            "zk+tls://h/ns",
            "zk+tls://h/ns?tls_ca=/ca.pem&tls_cert=/c.pem",
        ] {
            assert_eq!(
                ZkOptions::from_url(bad).unwrap_err().kind(),
                ErrorKind::ConfigInvalid,
                "{bad}"
            );
        }
    }

    #[test]
    fn policies_and_their_acls() {
        for p in [ZkAcl::Open, ZkAcl::Creator, ZkAcl::CreatorReadAll] {
            assert_eq!(ZkAcl::parse(p.as_str()).unwrap(), p);
        }
        assert!(ZkAcl::parse("world").is_err());
        let read_all: &[zk::Acl] = &ZkAcl::CreatorReadAll.acls();
        assert_eq!(read_all.len(), 2);
        assert_eq!(read_all[0].scheme(), "auth");
        assert_eq!(read_all[0].permission(), zk::Permission::ALL);
        assert_eq!(read_all[1].scheme(), "world");
        assert_eq!(read_all[1].permission(), zk::Permission::READ);
        let creator: &[zk::Acl] = &ZkAcl::Creator.acls();
        assert!(creator.iter().all(|a| a.scheme() == "auth"));
        let open: &[zk::Acl] = &ZkAcl::Open.acls();
        assert!(open.iter().all(|a| a.scheme() == "world"));
    }
}
