//! A loopback TCP proxy that injects network faults for one client:
//!
//! - **refuse**: reset every connection and refuse new ones, as a crashed peer looks
//!   (detected at once);
//! - **blackhole**: a silent partition — nothing passes either way, no reset, no FIN;
//!   bytes sent meanwhile are held (as TCP retransmits them) and delivered when the
//!   blackhole ends, so only timeouts can tell;
//! - **delay**: every chunk is delivered a fixed time later, in order, both ways.
//!
//! Each for a while or until [`FaultProxy::pass`]. Factories of real-server backends route
//! each client through its own proxy.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    /// Reset and refuse until the instant (or forever).
    Refuse(Option<Instant>),
    /// Forward nothing, silently, until the instant (or forever).
    Blackhole(Option<Instant>),
    /// Forward everything this much later.
    Delay(Duration),
}

fn until_passed(until: Option<Instant>) -> bool {
    until.is_none_or(|u| Instant::now() < u)
}

fn refusing(mode: Mode) -> bool {
    matches!(mode, Mode::Refuse(until) if until_passed(until))
}

fn delay_of(mode: Mode) -> Duration {
    match mode {
        Mode::Delay(d) => d,
        _ => Duration::ZERO,
    }
}

/// Waits while the mode is a blackhole (re-checking when it ends by time).
async fn while_silent(mode: &mut watch::Receiver<Mode>) {
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Blackhole(until) if until_passed(until) => match until {
                Some(u) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(u) => {}
                        _ = mode.changed() => {}
                    }
                }
                None => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            },
            _ => return,
        }
    }
}

/// A fault-injecting TCP proxy on `127.0.0.1`. Its tasks run on the runtime that
/// started it and stop when it is dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    trip: Arc<Trip>,
    last_upstream: Arc<Mutex<Option<Instant>>>,
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
        let mode = Arc::new(mode);
        let trip = Arc::new(Trip {
            mode: mode.clone(),
            armed: Mutex::new(None),
        });
        let last_upstream = Arc::new(Mutex::new(None));
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            mode_rx,
            last_upstream.clone(),
            trip.clone(),
        ));
        Ok(FaultProxy {
            addr,
            mode,
            trip,
            last_upstream,
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

    /// Forwards nothing either way, without a reset, for `duration` (a silent
    /// partition); what was sent meanwhile arrives afterwards.
    pub fn blackhole_for(&self, duration: Duration) {
        self.mode
            .send_replace(Mode::Blackhole(Some(Instant::now() + duration)));
    }

    /// Forwards every chunk `delay` later, both ways, until [`FaultProxy::pass`].
    pub fn delay(&self, delay: Duration) {
        self.mode.send_replace(Mode::Delay(delay));
    }

    /// Cuts every connection (as [`FaultProxy::refuse_for`] `duration`) right after the
    /// next chunk from the client reaches the server: a request that arrived, whose
    /// answer is lost.
    pub fn reset_after_next_request(&self, duration: Duration) {
        *self.trip.armed.lock().unwrap_or_else(|p| p.into_inner()) = Some((Direction::Up, 1, duration));
    }

    /// Cuts every connection (as [`FaultProxy::refuse_for`] `duration`) right after the
    /// `n`th chunk from now from the server reaches the client (an answer delivered, and
    /// the link gone before the client's next request).
    pub fn reset_after_reply(&self, n: usize, duration: Duration) {
        *self.trip.armed.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Direction::Down, n.max(1), duration));
    }

    /// Whether an armed reset is still waiting for its chunk.
    pub fn reset_pending(&self) -> bool {
        self.trip
            .armed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Drops a reset armed by [`FaultProxy::reset_after_next_request`] or
    /// [`FaultProxy::reset_after_reply`] that has not fired yet.
    pub fn disarm(&self) {
        *self.trip.armed.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Lets traffic through again.
    pub fn pass(&self) {
        self.mode.send_replace(Mode::Pass);
    }

    /// When bytes from the client were last delivered to the server: the latest moment
    /// the server can have heard from this client.
    pub fn last_upstream(&self) -> Option<Instant> {
        *self.last_upstream.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// A reset armed to fire after the next chunk one way.
#[derive(Debug)]
struct Trip {
    mode: Arc<watch::Sender<Mode>>,
    /// The direction, how many more chunks, and how long to refuse then.
    armed: Mutex<Option<(Direction, usize, Duration)>>,
}

impl Trip {
    /// A chunk went `direction`: fires the reset if one is armed for it.
    fn delivered(&self, direction: Direction) {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((d, n, duration)) = *armed
            && d == direction
        {
            if n > 1 {
                *armed = Some((d, n - 1, duration));
                return;
            }
            *armed = None;
            self.mode
                .send_replace(Mode::Refuse(Some(Instant::now() + duration)));
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    last_upstream: Arc<Mutex<Option<Instant>>>,
    trip: Arc<Trip>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if refusing(*mode.borrow()) {
            drop(client);
            continue;
        }
        conns.spawn(relay(
            client,
            upstream,
            mode.clone(),
            last_upstream.clone(),
            trip.clone(),
        ));
        while conns.try_join_next().is_some() {}
    }
}

/// Relays one connection until either side closes, or resets both on a refuse.
async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    last_upstream: Arc<Mutex<Option<Instant>>>,
    trip: Arc<Trip>,
) {
    // A blackholed client's connection attempt reaches nobody until it ends.
    while_silent(&mut mode).await;
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let refused = {
        let up = pump(
            &mut cr,
            &mut sw,
            mode.clone(),
            Some(&last_upstream),
            (&trip, Direction::Up),
        );
        let down = pump(&mut sr, &mut cw, mode.clone(), None, (&trip, Direction::Down));
        tokio::select! {
            _ = futures::future::join(up, down) => false,
            _ = mode.wait_for(|m| refusing(*m)) => true,
        }
    };
    if refused {
        // Abort rather than close: both ends see a reset.
        if let Ok(c) = cr.reunite(cw) {
            let _ = c.set_zero_linger();
        }
        if let Ok(s) = sr.reunite(sw) {
            let _ = s.set_zero_linger();
        }
    }
}

/// Copies `from` to `to` under the mode: held while silent, delayed by the delay.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
    last_forward: Option<&Mutex<Option<Instant>>>,
    (trip, direction): (&Trip, Direction),
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut read_mode = mode.clone();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // A silent link stops reading: the sender's data waits in its buffers.
            while_silent(&mut read_mode).await;
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let at = Instant::now() + delay_of(*read_mode.borrow());
            if tx.send((at, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let mut write_mode = mode;
    let write = async move {
        while let Some((at, data)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            while_silent(&mut write_mode).await;
            if to.write_all(&data).await.is_err() {
                break;
            }
            if let Some(last) = last_forward {
                *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
            trip.delivered(direction);
        }
        let _ = to.shutdown().await;
    };
    futures::future::join(read, write).await;
}

/// A client's links to the servers: one [`FaultProxy`] per server address it was given
/// (per cluster member, say). The faults apply to every link at once; [`Links::member`]
/// reaches one.
#[derive(Debug, Clone)]
pub struct Links {
    proxies: Vec<Arc<FaultProxy>>,
}

impl Links {
    /// Every link, in the order of the addresses the client was given.
    pub fn all(&self) -> &[Arc<FaultProxy>] {
        &self.proxies
    }

    /// The link to the `i`th address.
    pub fn member(&self, i: usize) -> Option<&Arc<FaultProxy>> {
        self.proxies.get(i)
    }

    /// [`FaultProxy::refuse`] on every link.
    pub fn refuse(&self) {
        self.proxies.iter().for_each(|p| p.refuse());
    }

    /// [`FaultProxy::refuse_for`] on every link.
    pub fn refuse_for(&self, duration: Duration) {
        self.proxies.iter().for_each(|p| p.refuse_for(duration));
    }

    /// [`FaultProxy::blackhole_for`] on every link.
    pub fn blackhole_for(&self, duration: Duration) {
        self.proxies.iter().for_each(|p| p.blackhole_for(duration));
    }

    /// [`FaultProxy::delay`] on every link.
    pub fn delay(&self, delay: Duration) {
        self.proxies.iter().for_each(|p| p.delay(delay));
    }

    /// [`FaultProxy::pass`] on every link.
    pub fn pass(&self) {
        self.proxies.iter().for_each(|p| p.pass());
    }

    /// When any server last received bytes from the client, if ever.
    pub fn last_upstream(&self) -> Option<Instant> {
        self.proxies.iter().filter_map(|p| p.last_upstream()).max()
    }
}

/// Which links each client goes through, for harnesses that give every client its own.
#[derive(Debug, Default)]
pub struct ProxyMap {
    /// By the client's backend address, oldest first.
    entries: Mutex<Vec<(usize, Links)>>,
}

fn client_id(client: &coord_core::Client) -> usize {
    Arc::as_ptr(client.backend()) as *const () as usize
}

impl ProxyMap {
    /// Starts one proxy per address in `upstreams`, opens a client through them with
    /// `open(proxy addresses)`, and remembers the client's links.
    ///
    /// # Errors
    ///
    /// `Unavailable` if a proxy cannot start; whatever `open` returns.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the proxies (and any client being opened through them) are dropped.
    pub async fn open<F, Fut>(
        &self,
        upstreams: &[SocketAddr],
        open: F,
    ) -> coord_core::Result<coord_core::Client>
    where
        F: FnOnce(Vec<SocketAddr>) -> Fut,
        Fut: std::future::Future<Output = coord_core::Result<coord_core::Client>>,
    {
        let mut proxies = Vec::new();
        for upstream in upstreams {
            let proxy = FaultProxy::start(*upstream).await.map_err(|e| {
                coord_core::Error::new(coord_core::ErrorKind::Unavailable, format!("fault proxy: {e}"))
            })?;
            proxies.push(Arc::new(proxy));
        }
        let client = open(proxies.iter().map(|p| p.addr()).collect()).await?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((client_id(&client), Links { proxies }));
        Ok(client)
    }

    /// The links `client` goes through.
    ///
    /// # Errors
    ///
    /// `NotFound` for a client not opened by [`ProxyMap::open`].
    pub fn get(&self, client: &coord_core::Client) -> coord_core::Result<Links> {
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
