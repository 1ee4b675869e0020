//! The ACL every znode coord creates gets: chosen by `acl=` in the connection string, or
//! by whether credentials are given.

use std::sync::LazyLock;

use coord_core::{Error, Result};
use zookeeper_client as zk;

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
