//! The server under test: a coord connection string, and the raw clients of the same
//! libraries coord uses, connected to the same servers.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use coord_core::raw::ConnectionString;
use zookeeper_client as zk;

/// Which backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Mem,
    Zk,
    Etcd,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Mem => "mem",
            Backend::Zk => "zk",
            Backend::Etcd => "etcd",
        }
    }
}

/// A coord URL and what the raw clients need to reach the same servers.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub backend: Backend,
    /// `host:port` of each member.
    pub hosts: Vec<String>,
    /// The URL's namespace.
    pub namespace: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let cs = ConnectionString::parse(url).with_context(|| format!("bad --url {url:?}"))?;
        let (backend, port) = match cs.scheme() {
            "mem" => (Backend::Mem, 0),
            "zk" => (Backend::Zk, 2181),
            "etcd" => (Backend::Etcd, 2379),
            other => bail!("coord-bench runs on mem://, zk:// and etcd:// (plaintext), not {other}://"),
        };
        let hosts = if backend == Backend::Mem {
            Vec::new()
        } else {
            cs.hosts(port)?
                .into_iter()
                .map(|h| format!("{}:{}", h.host, h.port))
                .collect()
        };
        Ok(Target {
            url: url.to_owned(),
            backend,
            hosts,
            namespace: cs.namespace().to_owned(),
        })
    }

    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// The URL with one more query option, e.g. a longer session for many clients.
    pub fn url_with(&self, option: &str) -> String {
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}{option}", self.url)
    }

    /// The URL with a session timeout (ZooKeeper) or lease TTL (etcd) of `secs`.
    pub fn url_with_session(&self, secs: u64) -> String {
        match self.backend {
            Backend::Mem => self.url.clone(),
            Backend::Zk => self.url_with(&coord_testkit::env::session_option(
                "zk",
                Duration::from_secs(secs),
            )),
            Backend::Etcd => self.url_with(&coord_testkit::env::session_option(
                "etcd",
                Duration::from_secs(secs),
            )),
        }
    }

    pub async fn coord(&self) -> Result<coord::Client> {
        coord::connect(&self.url)
            .await
            .with_context(|| format!("cannot connect to {}", self.url))
    }

    /// A raw ZooKeeper client on the same servers.
    pub async fn zk(&self) -> Result<zk::Client> {
        zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&self.hosts.join(","))
            .await
            .context("raw ZooKeeper client")
    }

    /// A raw etcd client on the same servers.
    pub async fn etcd(&self) -> Result<etcd_client::Client> {
        etcd_client::Client::connect(self.hosts.clone(), None)
            .await
            .context("raw etcd client")
    }
}

/// A name no earlier run used.
pub fn unique(what: &str) -> String {
    coord_testkit::env::unique_namespace(&format!("bench-{what}"))
}

/// Makes the persistent ZooKeeper directory `path` and its parents.
pub async fn zk_mkdir(z: &zk::Client, path: &str) -> Result<()> {
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match z.mkdir(path, &options).await {
        Ok(()) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("mkdir {path}")),
    }
}
