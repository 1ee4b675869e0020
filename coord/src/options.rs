//! Options built in code, for users who would rather not write connection strings.

use coord_core::{Client, Result};

/// Which backend to open, with its options.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord::Result<()> {
/// use coord::mem::MemOptions;
/// let client = coord::connect_with(MemOptions {
///     namespace: "billing".into(),
///     session_ttl: std::time::Duration::from_secs(5),
/// })
/// .await?;
/// assert_eq!(client.namespace(), "billing");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Options {
    /// The in-memory backend (on the process-wide cluster).
    Mem(coord_mem::MemOptions),
    /// ZooKeeper.
    #[cfg(feature = "zk")]
    Zk(coord_zk::ZkOptions),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(coord_etcd::EtcdOptions),
}

impl From<coord_mem::MemOptions> for Options {
    fn from(o: coord_mem::MemOptions) -> Self {
        Options::Mem(o)
    }
}

#[cfg(feature = "zk")]
impl From<coord_zk::ZkOptions> for Options {
    fn from(o: coord_zk::ZkOptions) -> Self {
        Options::Zk(o)
    }
}

#[cfg(feature = "etcd")]
impl From<coord_etcd::EtcdOptions> for Options {
    fn from(o: coord_etcd::EtcdOptions) -> Self {
        Options::Etcd(o)
    }
}

/// Opens a client from options built in code.
///
/// # Errors
///
/// `ConfigInvalid` for invalid options; the backend's connection errors.
///
/// # Cancel safety
///
/// As [`connect`](crate::connect).
pub async fn connect_with(options: impl Into<Options>) -> Result<Client> {
    match options.into() {
        Options::Mem(o) => coord_mem::MemClient::connect(&coord_mem::MemCluster::global(), o),
        #[cfg(feature = "zk")]
        Options::Zk(o) => coord_zk::ZkClient::connect(o).await,
        #[cfg(feature = "etcd")]
        Options::Etcd(o) => coord_etcd::EtcdClient::connect(o).await,
    }
}
