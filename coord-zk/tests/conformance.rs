//! The conformance suite against a real ZooKeeper: `COORD_TEST_ZK=host:port`.
//!
//! Every client reaches the server through its own fault proxy, so a test can cut it
//! off (suspend), kill its process's network for good (crash), or hide changes from its
//! watches; sessions are expired from outside by attaching a second connection with the
//! session's id and password and closing it — a real server-side expiry.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use coord_conformance::{Factory, FaultProxy, Faults};
use coord_core::{Client, Error, ErrorKind, Result};
use coord_zk::{ZkClient, ZkOptions};

const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

struct ZkFactory {
    server: SocketAddr,
    /// Each client's proxy, by the client's address in memory, oldest first.
    proxies: Mutex<Vec<(usize, Arc<FaultProxy>)>>,
}

fn id_of(client: &Client) -> usize {
    Arc::as_ptr(client.backend()) as *const () as usize
}

fn zk(client: &Client) -> Result<&ZkClient> {
    client
        .backend()
        .as_any()
        .downcast_ref::<ZkClient>()
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "not a zk client"))
}

impl ZkFactory {
    fn proxy(&self, client: &Client) -> Result<Arc<FaultProxy>> {
        let id = id_of(client);
        self.proxies
            .lock()
            .unwrap()
            .iter()
            // An address is reused only after its client is gone: the newest entry is live.
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "client has no proxy"))
    }

    /// Expires `client`'s session on the server: attach with its id and password, then
    /// close that second connection.
    async fn expire(&self, client: &Client) -> Result<()> {
        let info = zk(client)?
            .session_info()
            .ok_or_else(|| Error::new(ErrorKind::SessionLost, "client has no session to kill"))?;
        let attached = zookeeper_client::Client::connector()
            .with_session(info)
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(&self.server.to_string())
            .await;
        match attached {
            Ok(other) => {
                // Dropping the only handle sends CloseSession; the state turns Closed once
                // the server has answered, i.e. the session and its ephemerals are gone.
                let mut state = other.state_watcher();
                drop(other);
                tokio::time::timeout(Duration::from_secs(10), async {
                    while !state.changed().await.is_terminated() {}
                })
                .await
                .map_err(|_| Error::new(ErrorKind::Timeout, "the killed session did not close"))?;
                Ok(())
            }
            // Already expired: nothing to do.
            Err(zookeeper_client::Error::SessionExpired) => Ok(()),
            Err(e) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("attach to kill session: {e}"),
            )),
        }
    }
}

#[async_trait]
impl Factory for ZkFactory {
    fn name(&self) -> &str {
        "zk"
    }

    fn faults(&self) -> Faults {
        Faults {
            kill_session: true,
            crash: true,
            suspend: true,
            watch_gap: true,
        }
    }

    fn session_timeout(&self) -> Duration {
        SESSION_TIMEOUT
    }

    async fn open(&self, namespace: &str) -> Result<Client> {
        let proxy = Arc::new(
            FaultProxy::start(self.server)
                .await
                .map_err(|e| Error::new(ErrorKind::Unavailable, format!("proxy: {e}")))?,
        );
        let url = format!(
            "zk://{}/{namespace}?session_timeout={}ms&connect_timeout=10s",
            proxy.addr(),
            SESSION_TIMEOUT.as_millis()
        );
        let client = ZkClient::connect(ZkOptions::from_url(&url)?).await?.into_client();
        self.proxies.lock().unwrap().push((id_of(&client), proxy));
        Ok(client)
    }

    fn url_base(&self) -> String {
        format!("zk://{}", self.server)
    }

    async fn connect_url(&self, url: &str) -> Result<Client> {
        coord_zk::connect(url).await
    }

    async fn kill_session(&self, client: &Client) -> Result<()> {
        self.expire(client).await
    }

    async fn crash(&self, client: &Client) -> Result<()> {
        // The process is gone: its connections die and nothing it would send arrives.
        self.proxy(client)?.refuse();
        Ok(())
    }

    async fn suspend(&self, client: &Client, duration: Duration) -> Result<()> {
        self.proxy(client)?.refuse_for(duration);
        Ok(())
    }

    async fn begin_watch_gap(&self, client: &Client) -> Result<()> {
        self.proxy(client)?.refuse();
        Ok(())
    }

    async fn end_watch_gap(&self, client: &Client) -> Result<()> {
        // ZooKeeper replays watch events across a reconnect; only a lost session leaves a
        // gap, so expire the session while the client is cut off.
        self.expire(client).await?;
        self.proxy(client)?.pass();
        Ok(())
    }
}

fn main() {
    let factory = std::env::var("COORD_TEST_ZK")
        .ok()
        .filter(|s| !s.is_empty())
        .map(|endpoint| {
            let server: SocketAddr = endpoint.parse().unwrap_or_else(|e| {
                panic!("COORD_TEST_ZK={endpoint:?} is not host:port of an IP address: {e}")
            });
            Arc::new(ZkFactory {
                server,
                proxies: Mutex::new(Vec::new()),
            }) as Arc<dyn Factory>
        });
    coord_conformance::run_main(
        "zk",
        factory,
        "set COORD_TEST_ZK=127.0.0.1:PORT (./scripts/test starts a server)",
    );
}
