//! A loopback TCP proxy that injects network faults for one client: refuse (reset every
//! connection and refuse new ones, as a partition or a dead peer looks to the server),
//! for a while or until told otherwise. Factories of real-server backends route each
//! client through its own proxy.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    /// Reset and refuse until the instant (or forever).
    Refuse(Option<Instant>),
}

/// A fault-injecting TCP proxy on `127.0.0.1`. Its tasks run on the runtime that
/// started it and stop when it is dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing runs until it returns.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let accept_task = tokio::spawn(accept_loop(listener, upstream, mode_rx));
        Ok(FaultProxy {
            addr,
            mode,
            accept_task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every connection now and refuses new ones until [`FaultProxy::pass`].
    pub fn refuse(&self) {
        self.mode.send_replace(Mode::Refuse(None));
    }

    /// Cuts every connection now and refuses new ones for `duration`.
    pub fn refuse_for(&self, duration: Duration) {
        self.mode
            .send_replace(Mode::Refuse(Some(Instant::now() + duration)));
    }

    /// Lets traffic through again.
    pub fn pass(&self) {
        self.mode.send_replace(Mode::Pass);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

fn refusing(mode: Mode) -> bool {
    match mode {
        Mode::Pass => false,
        Mode::Refuse(None) => true,
        Mode::Refuse(Some(until)) => Instant::now() < until,
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, mode: watch::Receiver<Mode>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if refusing(*mode.borrow()) {
            drop(client);
            continue;
        }
        let mut mode = mode.clone();
        conns.spawn(async move {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            let mut client = client;
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = mode.wait_for(|m| refusing(*m)) => {
                    // Abort rather than close: both ends see a reset.
                    let _ = client.set_zero_linger();
                    let _ = server.set_zero_linger();
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
}

/// Which proxy each client goes through, for factories that give every client its own.
#[derive(Debug, Default)]
pub struct ProxyMap {
    /// By the client's backend address, oldest first.
    entries: std::sync::Mutex<Vec<(usize, std::sync::Arc<FaultProxy>)>>,
}

fn client_id(client: &coord_core::Client) -> usize {
    std::sync::Arc::as_ptr(coord_core::raw::backend(client)) as *const () as usize
}

impl ProxyMap {
    /// Starts a proxy to `upstream`, opens a client through it with `open(proxy address)`,
    /// and remembers the pair.
    ///
    /// # Errors
    ///
    /// `Unavailable` if the proxy cannot start; whatever `open` returns.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the proxy (and any client being opened through it) is dropped.
    pub async fn open<F, Fut>(&self, upstream: SocketAddr, open: F) -> coord_core::Result<coord_core::Client>
    where
        F: FnOnce(SocketAddr) -> Fut,
        Fut: std::future::Future<Output = coord_core::Result<coord_core::Client>>,
    {
        let proxy = FaultProxy::start(upstream).await.map_err(|e| {
            coord_core::Error::new(coord_core::ErrorKind::Unavailable, format!("fault proxy: {e}"))
        })?;
        let client = open(proxy.addr()).await?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((client_id(&client), std::sync::Arc::new(proxy)));
        Ok(client)
    }

    /// The proxy `client` goes through.
    ///
    /// # Errors
    ///
    /// `NotFound` for a client not opened by [`ProxyMap::open`].
    pub fn get(&self, client: &coord_core::Client) -> coord_core::Result<std::sync::Arc<FaultProxy>> {
        let id = client_id(client);
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            // An address is reused only after its client is gone: the newest entry is live.
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| {
                coord_core::Error::new(coord_core::ErrorKind::NotFound, "client has no fault proxy")
            })
    }
}
