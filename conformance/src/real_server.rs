//! A real server under test: its address, one fault proxy per client, and — for servers
//! started by coord's scripts — control of the server process. Real-server factories
//! hold one and hand their client-side and server-side faults to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use coord_core::{Client, Error, ErrorKind, Result};

use crate::factory::Faults;
use crate::proxy::{FaultProxy, ProxyMap};
use crate::server_ctl::ServerCtl;

/// A real server, reached by every client through its own [`FaultProxy`].
#[derive(Debug)]
pub struct RealServer {
    addr: SocketAddr,
    proxies: ProxyMap,
    /// Set from `COORD_TEST_<BACKEND>_SERVER`: enables the server-side faults.
    ctl: Option<ServerCtl>,
    ctl_var: String,
}

impl RealServer {
    /// The server named by `COORD_TEST_<BACKEND>` (`-` written `_`; `host:port` of an IP address), with
    /// process control when `COORD_TEST_<BACKEND>_SERVER` names a server started by
    /// coord's scripts. `Ok(None)` when the endpoint variable is unset or empty.
    ///
    /// # Errors
    ///
    /// A message naming the variable when the endpoint is not `ip:port`.
    pub fn from_env(backend: &str) -> std::result::Result<Option<RealServer>, String> {
        let upper = backend.to_uppercase().replace('-', "_");
        let var = format!("COORD_TEST_{upper}");
        let Some(endpoint) = std::env::var(&var).ok().filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let addr = endpoint
            .parse()
            .map_err(|e| format!("{var}={endpoint:?} is not host:port of an IP address: {e}"))?;
        let ctl_var = format!("COORD_TEST_{upper}_SERVER");
        Ok(Some(RealServer {
            addr,
            proxies: ProxyMap::default(),
            ctl: ServerCtl::from_env(&ctl_var),
            ctl_var,
        }))
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The faults it can inject: every client-side fault through the proxies
    /// (`kill_session` and the operator's actions are the backend's own), and the
    /// server-side ones when the server's process can be controlled.
    pub fn faults(&self, kill_session: bool, operator: bool) -> Faults {
        Faults {
            kill_session,
            crash: true,
            suspend: true,
            watch_gap: true,
            blackhole: true,
            delay: true,
            operator,
            server_pause: self.ctl.is_some(),
            server_restart: self.ctl.is_some(),
        }
    }

    /// Opens a client through a new fault proxy: `connect` gets the proxy's address.
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
        F: FnOnce(SocketAddr) -> Fut,
        Fut: std::future::Future<Output = Result<Client>>,
    {
        self.proxies.open(self.addr, connect).await
    }

    /// The proxy `client` goes through.
    ///
    /// # Errors
    ///
    /// `NotFound` for a client not opened by [`RealServer::open`].
    pub fn proxy(&self, client: &Client) -> Result<Arc<FaultProxy>> {
        self.proxies.get(client)
    }

    /// Cuts `client` off until [`RealServer::reconnect`]: nothing it sends arrives, as
    /// if its process died (a crash) or its network failed (a watch gap).
    ///
    /// # Errors
    ///
    /// As [`RealServer::proxy`].
    pub fn cut_off(&self, client: &Client) -> Result<()> {
        self.proxy(client)?.refuse();
        Ok(())
    }

    /// Cuts `client` off for `duration`.
    ///
    /// # Errors
    ///
    /// As [`RealServer::proxy`].
    pub fn suspend(&self, client: &Client, duration: Duration) -> Result<()> {
        self.proxy(client)?.refuse_for(duration);
        Ok(())
    }

    /// Lets `client` through again after [`RealServer::cut_off`].
    ///
    /// # Errors
    ///
    /// As [`RealServer::proxy`].
    pub fn reconnect(&self, client: &Client) -> Result<()> {
        self.proxy(client)?.pass();
        Ok(())
    }

    /// Stops the server process now and lets it continue after `duration`.
    ///
    /// # Errors
    ///
    /// `Unsupported` without process control; as [`ServerCtl::pause`].
    ///
    /// # Cancel safety
    ///
    /// The continue is sent by a detached process, whatever happens to the caller.
    pub async fn pause(&self, duration: Duration) -> Result<()> {
        self.ctl()?.pause(duration).await
    }

    /// Kills the server process and starts it again on its data.
    ///
    /// # Errors
    ///
    /// `Unsupported` without process control; as [`ServerCtl::restart`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the restart script still runs to its end.
    pub async fn restart(&self) -> Result<()> {
        self.ctl()?.restart().await
    }

    fn ctl(&self) -> Result<&ServerCtl> {
        self.ctl.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "set {} to the name of a server started by coord's scripts",
                    self.ctl_var
                ),
            )
        })
    }
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
