//! A real server under test — a standalone server or a cluster's members — with one set
//! of fault proxies per client (one proxy per member) and, for servers started by
//! `coord-testkit` (coord's scripts use it), control of the member processes.
//! Real-server factories hold one and hand their client-side and server-side faults to
//! it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use coord_core::{Client, Error, ErrorKind, Result};
use coord_testkit::{Cluster, Links, ProxyMap};

use crate::factory::Faults;

/// A real server or cluster, reached by every client through its own fault proxies.
#[derive(Debug)]
pub struct RealServer {
    addrs: Vec<SocketAddr>,
    proxies: ProxyMap,
    /// Set from `COORD_TEST_<BACKEND>_SERVER`: enables the server-side faults.
    cluster: Option<Arc<Cluster>>,
    ctl_var: String,
}

impl RealServer {
    /// The server or cluster named by `COORD_TEST_<BACKEND>` (`-` written `_`;
    /// `ip:port`, or a comma-separated list of a cluster's members), with process
    /// control when `COORD_TEST_<BACKEND>_SERVER` names the directory of a cluster
    /// started by `coord-testkit` (a bare name is looked up under `.coord-servers/`).
    /// `Ok(None)` when the endpoint variable is unset or empty.
    ///
    /// # Errors
    ///
    /// A message naming the variable when an endpoint is not `ip:port`, or the cluster
    /// directory cannot be read.
    pub fn from_env(backend: &str) -> std::result::Result<Option<RealServer>, String> {
        let upper = backend.to_uppercase().replace('-', "_");
        let var = format!("COORD_TEST_{upper}");
        let Some(endpoints) = std::env::var(&var).ok().filter(|s| !s.trim().is_empty()) else {
            return Ok(None);
        };
        let addrs = parse_members(&endpoints).map_err(|e| format!("{var}: {e}"))?;
        let ctl_var = format!("COORD_TEST_{upper}_SERVER");
        let cluster = match std::env::var(&ctl_var).ok().filter(|n| !n.trim().is_empty()) {
            None => None,
            Some(name) => {
                let name = name.trim();
                let dir = if name.contains('/') {
                    std::path::PathBuf::from(name)
                } else {
                    std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.coord-servers"))
                        .join(name)
                };
                Some(Arc::new(
                    Cluster::attach(&dir).map_err(|e| format!("{ctl_var}={name}: {e}"))?,
                ))
            }
        };
        Ok(Some(RealServer {
            addrs,
            proxies: ProxyMap::default(),
            cluster,
            ctl_var,
        }))
    }

    /// The first member's address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every member's address.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// `host:port,host:port,…` of every member (for an operator's tool).
    pub fn hosts(&self) -> String {
        join(&self.addrs)
    }

    /// The cluster's processes, when they can be controlled.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// The faults it can inject: every client-side fault through the proxies
    /// (`kill_session` and the operator's actions are the backend's own), and the
    /// server-side ones when the members' processes can be controlled (member faults
    /// need a cluster of at least 3).
    pub fn faults(&self, kill_session: bool, operator: bool) -> Faults {
        let members = self.cluster.as_ref().map_or(0, |c| c.len());
        Faults {
            kill_session,
            crash: true,
            suspend: true,
            watch_gap: true,
            blackhole: true,
            delay: true,
            operator,
            links: true,
            server_pause: members > 0,
            server_restart: members > 0,
            member_faults: members >= 3,
            // A lost reply is made by a link reset timed to one request, which the
            // sessions' own traffic can trip first: cases with it run on mem.
            reply_loss: false,
        }
    }

    /// Opens a client through a new fault proxy per member: `connect` gets the proxies'
    /// `host:port,…`.
    ///
    /// # Errors
    ///
    /// As [`ProxyMap::open`].
    ///
    /// # Cancel safety
    ///
    /// As [`ProxyMap::open`].
    pub async fn open<F, Fut>(&self, connect: F) -> Result<Client>
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Result<Client>>,
    {
        self.proxies
            .open(&self.addrs, |addrs| connect(join(&addrs)))
            .await
    }

    /// Opens a client through `n` links, the `i`th to member `i mod members` (so a
    /// standalone server gets `n` links to itself): `connect` gets their `host:port,…`.
    ///
    /// # Errors
    ///
    /// As [`ProxyMap::open`].
    ///
    /// # Cancel safety
    ///
    /// As [`ProxyMap::open`].
    pub async fn open_links<F, Fut>(&self, n: usize, connect: F) -> Result<Client>
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Result<Client>>,
    {
        let upstreams: Vec<SocketAddr> = (0..n).map(|i| self.addrs[i % self.addrs.len()]).collect();
        self.proxies.open(&upstreams, |addrs| connect(join(&addrs))).await
    }

    /// The links `client` goes through.
    ///
    /// # Errors
    ///
    /// `NotFound` for a client not opened by [`RealServer::open`].
    pub fn links(&self, client: &Client) -> Result<Links> {
        self.proxies.get(client)
    }

    /// Cuts `client` off until [`RealServer::reconnect`]: nothing it sends arrives, as
    /// if its process died (a crash) or its network failed (a watch gap).
    ///
    /// # Errors
    ///
    /// As [`RealServer::links`].
    pub fn cut_off(&self, client: &Client) -> Result<()> {
        self.links(client)?.refuse();
        Ok(())
    }

    /// Cuts `client` off for `duration`.
    ///
    /// # Errors
    ///
    /// As [`RealServer::links`].
    pub fn suspend(&self, client: &Client, duration: Duration) -> Result<()> {
        self.links(client)?.refuse_for(duration);
        Ok(())
    }

    /// Lets `client` through again after [`RealServer::cut_off`].
    ///
    /// # Errors
    ///
    /// As [`RealServer::links`].
    pub fn reconnect(&self, client: &Client) -> Result<()> {
        self.links(client)?.pass();
        Ok(())
    }

    /// Stops every member process and lets each continue `duration` after it stopped.
    /// Waits for the cluster's fault lock first (another injector may have a member down),
    /// so the stop can begin well after the call: returns the instant just before the
    /// first member was stopped. No member continues before that instant plus `duration`.
    ///
    /// # Errors
    ///
    /// `Unsupported` without process control; `Unavailable` if a signal fails.
    ///
    /// # Cancel safety
    ///
    /// The continue is sent by a detached process, whatever happens to the caller.
    pub async fn pause(&self, duration: Duration) -> Result<tokio::time::Instant> {
        let cluster = self.ctl()?.clone();
        let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
        // The fault lock is held until the members are back.
        tokio::task::spawn_blocking(move || {
            let outcome = cluster.fault_lock().and_then(|lock| {
                let stopped = std::time::Instant::now();
                for i in 0..cluster.len() {
                    cluster.pause_for(i, duration)?;
                }
                Ok((lock, stopped))
            });
            match outcome {
                Ok((lock, stopped)) => {
                    let _ = paused_tx.send(Ok(tokio::time::Instant::from_std(stopped)));
                    std::thread::sleep(duration);
                    drop(lock);
                }
                Err(e) => {
                    let _ = paused_tx.send(Err(e));
                }
            }
        });
        paused_rx
            .await
            .map_err(|_| Error::new(ErrorKind::Unexpected, "pause task ended"))?
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))
    }

    /// Kills every member process and starts them again on their data.
    ///
    /// # Errors
    ///
    /// `Unsupported` without process control; `Unavailable` if they do not come back.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the restart still runs to its end.
    pub async fn restart(&self) -> Result<()> {
        let cluster = self.ctl()?.clone();
        blocking(move || {
            let _lock = cluster.fault_lock()?;
            cluster.restart_all()
        })
        .await
    }

    fn ctl(&self) -> Result<&Arc<Cluster>> {
        self.cluster.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "set {} to the directory of a server started by coord-testkit",
                    self.ctl_var
                ),
            )
        })
    }
}

/// Runs a blocking cluster action on the blocking pool.
///
/// # Errors
///
/// `Unavailable` with the action's message.
///
/// # Cancel safety
///
/// If dropped, the action still runs to its end on the blocking pool (a member being
/// restarted comes back).
pub async fn blocking<T, F>(f: F) -> Result<T>
where
    F: FnOnce() -> std::result::Result<T, coord_testkit::Error> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("cluster action panicked: {e}")))?
        .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))
}

fn join(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
}

/// `ip:port[,ip:port…]`.
fn parse_members(list: &str) -> std::result::Result<Vec<SocketAddr>, String> {
    list.split(',')
        .map(|m| {
            m.trim()
                .parse()
                .map_err(|e| format!("{m:?} is not ip:port (a list is ip:port,ip:port,…): {e}"))
        })
        .collect()
}

/// A factory for cases that connect by URL themselves and need only the server's address
/// (the secrets cases): clients open directly, without fault proxies, and no faults are
/// offered.
pub struct UrlFactory {
    /// The group's name.
    pub name: &'static str,
    /// The server.
    pub server: RealServer,
    /// `scheme://[user:password@]host:port` for [`crate::Factory::open`].
    pub base: String,
    /// The backend's `connect(url)`.
    pub connect: fn(String) -> futures::future::BoxFuture<'static, Result<Client>>,
}

#[async_trait::async_trait]
impl crate::Factory for UrlFactory {
    fn name(&self) -> &str {
        self.name
    }

    fn faults(&self) -> Faults {
        Faults::default()
    }

    fn session_timeout(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn open(&self, namespace: &str) -> Result<Client> {
        (self.connect)(format!("{}/{namespace}", self.base)).await
    }

    fn url_base(&self) -> String {
        self.base.clone()
    }

    async fn connect_url(&self, url: &str) -> Result<Client> {
        (self.connect)(url.to_owned()).await
    }

    fn real_server(&self) -> Option<&RealServer> {
        Some(&self.server)
    }
}
