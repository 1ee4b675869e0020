//! The driver table: which backend serves which connection-string scheme.

use std::future::Future;
use std::pin::Pin;

use coord_core::raw::ConnectionString;
use coord_core::{Client, Error, ErrorKind, Result};

type Connect = fn(&str) -> Pin<Box<dyn Future<Output = Result<Client>> + Send + '_>>;

/// One backend known to the facade.
pub(crate) struct Driver {
    /// Connection-string schemes it serves.
    pub schemes: &'static [&'static str],
    /// What it is, for messages.
    pub backend: &'static str,
    /// The Cargo feature of `coord` that compiles it in.
    pub feature: Option<&'static str>,
    /// Opens a client, or `None` when the feature is off.
    pub connect: Option<Connect>,
}

pub(crate) static DRIVERS: &[Driver] = &[
    Driver {
        schemes: &["mem"],
        backend: "the in-memory backend",
        feature: None,
        connect: Some(|url| Box::pin(async move { coord_mem::connect(url) })),
    },
    Driver {
        schemes: &["zk", "zk+tls"],
        backend: "the ZooKeeper backend",
        feature: Some("zk"),
        #[cfg(feature = "zk")]
        connect: Some(|url| Box::pin(coord_zk::connect(url))),
        #[cfg(not(feature = "zk"))]
        connect: None,
    },
    Driver {
        schemes: &["etcd", "etcd+https"],
        backend: "the etcd backend",
        feature: Some("etcd"),
        #[cfg(feature = "etcd")]
        connect: Some(|url| Box::pin(coord_etcd::connect(url))),
        #[cfg(not(feature = "etcd"))]
        connect: None,
    },
];

/// Finds the driver for `url`'s scheme and opens a client.
pub(crate) async fn connect(url: &str) -> Result<Client> {
    let scheme = ConnectionString::parse(url)?.scheme().to_owned();
    let known: Vec<&str> = DRIVERS.iter().flat_map(|d| d.schemes.iter().copied()).collect();
    let driver = DRIVERS
        .iter()
        .find(|d| d.schemes.contains(&scheme.as_str()))
        .ok_or_else(|| {
            Error::config_invalid(format!(
                "unknown connection-string scheme {scheme:?}; coord knows {}",
                known.join(", ")
            ))
        })?;
    match (driver.connect, driver.feature) {
        (Some(connect), _) => connect(url).await,
        (None, Some(feature)) => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{scheme}:// needs {}, which is not compiled in: enable the `{feature}` feature of \
                 the coord-rs package (in Cargo.toml: coord-rs = {{ …, features = [\"{feature}\"] }})",
                driver.backend
            ),
        )),
        (None, None) => Err(Error::new(
            ErrorKind::Unexpected,
            format!("no driver for {scheme}://"),
        )),
    }
}
