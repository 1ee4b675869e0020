//! Real servers on loopback: a standalone ZooKeeper or etcd, or an ensemble / cluster of
//! several members, each a process started from the Debian packages' binaries in a
//! directory of its own; and control of each member (stop, kill, pause, restart).
//!
//! A cluster's directory holds `cluster.json` (what was started and how), one data
//! directory and log per member (`m0/`, `m1/`, …) and their PID files (`m0.pid`, …), so
//! another process can [`Cluster::attach`] to it and inject the same faults: scripts
//! start servers with the `coord-testkit` command, tests attach.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

mod etcd;
mod postgres;
mod zk;

use etcd::*;
use postgres::*;
use zk::*;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Apache ZooKeeper 3.8 (Debian package `zookeeper`; `libnetty-java` for TLS).
    Zk,
    /// etcd 3.4 (Debian packages `etcd-server` and `etcd-client`).
    Etcd,
    /// PostgreSQL 15 (Debian package `postgresql`), one member: the database a fencing
    /// gate protects (user `coord`, database `postgres`, no password; see
    /// [`Cluster::url`]). Member faults work as on the others (`pause` freezes the
    /// postmaster, not the sessions' backends).
    Postgres,
}

impl std::str::FromStr for Kind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "zk" | "zookeeper" => Ok(Kind::Zk),
            "etcd" => Ok(Kind::Etcd),
            "postgres" | "postgresql" | "pg" => Ok(Kind::Postgres),
            other => Err(Error(format!(
                "unknown server kind {other:?}: use zk, etcd or postgres"
            ))),
        }
    }
}

/// What went wrong starting or controlling a server; says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// This module's results.
pub type Result<T> = std::result::Result<T, Error>;

fn err(message: impl Into<String>) -> Error {
    Error(message.into())
}

/// What to start: see [`Cluster::start`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// ZooKeeper or etcd.
    pub kind: Kind,
    /// How many members: 1 is a standalone server, 3 a cluster surviving one member down.
    pub members: usize,
    /// The cluster's directory; `None` for a temporary one removed on drop.
    pub dir: Option<PathBuf>,
    /// A directory with `ca.pem`, `server.pem`, `server.key` and (ZooKeeper)
    /// `server-keystore.pem`: clients must then use TLS with a certificate signed by the
    /// CA. ZooKeeper keeps a plaintext port too (for probes), on the next port up.
    pub tls: Option<PathBuf>,
    /// Extra `zoo.cfg` lines (ZooKeeper) or command-line arguments (etcd).
    pub extra: Vec<String>,
    /// The first member's client port; `None` for a free one (every other port is free
    /// ports picked at start).
    pub port: Option<u16>,
    /// ZooKeeper: how often empty containers (the directories of locks, elections and
    /// services) are swept. 100 ms by default, so tests see empty ones go; ZooKeeper's
    /// own default is a minute (what benchmarks use, as deployments do).
    pub container_sweep: Duration,
    /// Run with the server's own defaults instead of the short settings above, as a
    /// deployment (or Debian's and Docker's packages) does: ZooKeeper with `tickTime=2000`
    /// (sessions of 4 s to 40 s) and the container sweep once a minute; etcd with its
    /// 100 ms heartbeat and 1 s election timeout. For running the suite as a user
    /// would against their own servers.
    pub server_defaults: bool,
}

impl ClusterOptions {
    /// `members` members of `kind` in a temporary directory, plaintext.
    pub fn new(kind: Kind, members: usize) -> ClusterOptions {
        ClusterOptions {
            kind,
            members,
            dir: None,
            tls: None,
            extra: Vec::new(),
            port: None,
            container_sweep: Duration::from_millis(100),
            server_defaults: false,
        }
    }
}

/// One member: its ports and how to run it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct MemberSpec {
    /// The port clients use (TLS when the cluster has TLS).
    client_port: u16,
    /// ZooKeeper with TLS: the plaintext port for probes.
    probe_port: u16,
    peer_port: u16,
    election_port: u16,
    argv: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    kind: Kind,
    tls: Option<PathBuf>,
    members: Vec<MemberSpec>,
}

/// A running server or cluster. Dropping a cluster started by [`Cluster::start`] stops
/// its members (SIGKILL) and removes a temporary directory; an attached one is left
/// running.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    state: State,
    owned: bool,
    _temp: Option<tempfile::TempDir>,
}

/// Picks a free loopback port for a member, released before the server binds it: below
/// the kernel's ephemeral range, where no outgoing connection takes its local port and no
/// `bind` to port 0 lands. A member killed and started again on its ports then finds
/// them free on a busy machine; one picked from the ephemeral range could be held by
/// some client's connection by then ("address already in use"). Falls back to the
/// kernel's choice when nothing below the range is free.
fn free_port() -> Result<u16> {
    use std::collections::BTreeSet;
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::Mutex;
    // Ports this process handed out already (a member not yet started holds none).
    static PICKED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let floor = 10_000u16.min(low / 2);
    if low > floor {
        let mut picked = PICKED.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..500 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            let port = floor + (h.finish() % u64::from(low - floor)) as u16;
            if !picked.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                picked.insert(port);
                return Ok(port);
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| err(format!("cannot find a free loopback port: {e}")))
}

fn need(binary: &str, package: &str) -> Result<()> {
    let found = if binary.starts_with('/') {
        Path::new(binary).exists()
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(binary).is_file()))
            .unwrap_or(false)
    };
    if found {
        Ok(())
    } else {
        Err(err(format!(
            "{binary} not found: install the Debian package {package} (apt-get install {package})"
        )))
    }
}

impl Cluster {
    /// Starts the members and returns once every one answers (ZooKeeper: in an
    /// ensemble, as leader or follower; etcd: healthy).
    ///
    /// # Errors
    ///
    /// The binaries are missing (naming the package to install), ports or directories
    /// cannot be had, or a member does not come up within 60 s (with its log's tail). A
    /// member whose free port was taken by another socket before it bound it starts the
    /// cluster again on new ports, up to 3 times in all (not when `port` is set).
    pub fn start(options: ClusterOptions) -> Result<Cluster> {
        // A port is free when picked and taken when the member binds it if another
        // socket got it meanwhile (an outgoing connection's ephemeral port, say): then
        // the cluster starts again on new ports.
        let mut attempt = 1;
        loop {
            match Self::start_once(&options) {
                Err(e) if attempt < 3 && options.port.is_none() && port_taken(&e) => attempt += 1,
                started => return started,
            }
        }
    }

    fn start_once(options: &ClusterOptions) -> Result<Cluster> {
        let options = options.clone();
        if options.members == 0 {
            return Err(err("a cluster needs at least one member"));
        }
        match options.kind {
            Kind::Zk => {
                need("java", "default-jre-headless")?;
                need(ZK_JAR, "zookeeper")?;
            }
            Kind::Etcd => {
                need("etcd", "etcd-server")?;
                need("etcdctl", "etcd-client")?;
            }
            Kind::Postgres => {
                if options.members != 1 {
                    return Err(err("PostgreSQL runs as one member here (--members 1)"));
                }
                if options.tls.is_some() {
                    return Err(err("PostgreSQL is started without TLS here"));
                }
                need(&pg_bin("postgres")?, "postgresql")?;
                need(&pg_bin("pg_isready")?, "postgresql-client")?;
            }
        }
        let (dir, temp) = match &options.dir {
            Some(d) => {
                if d.exists() {
                    std::fs::remove_dir_all(d)
                        .map_err(|e| err(format!("cannot clear {}: {e}", d.display())))?;
                }
                (d.clone(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("coord-testkit-")
                    .tempdir()
                    .map_err(|e| err(format!("cannot make a temporary directory: {e}")))?;
                (t.path().to_owned(), Some(t))
            }
        };
        let mut members = Vec::new();
        for i in 0..options.members {
            let client_port = match options.port {
                Some(p) if i == 0 => p,
                _ => free_port()?,
            };
            let tls_zk = options.tls.is_some() && options.kind == Kind::Zk;
            members.push(MemberSpec {
                client_port,
                // Without TLS, probes use the client port.
                probe_port: if tls_zk { free_port()? } else { client_port },
                peer_port: free_port()?,
                election_port: free_port()?,
                argv: Vec::new(),
            });
        }
        for i in 0..members.len() {
            let mdir = dir.join(format!("m{i}"));
            std::fs::create_dir_all(mdir.join("data"))
                .map_err(|e| err(format!("cannot create {}: {e}", mdir.display())))?;
            members[i].argv = match options.kind {
                Kind::Zk => zk_argv(&mdir, i, &members, &options)?,
                Kind::Etcd => etcd_argv(&mdir, i, &members, &options, &dir),
                Kind::Postgres => postgres_argv(&mdir, &members[i], &options)?,
            };
        }
        let state = State {
            kind: options.kind,
            tls: options.tls.clone(),
            members,
        };
        let json = serde_json::to_string_pretty(&state).map_err(|e| err(e.to_string()))?;
        std::fs::write(dir.join("cluster.json"), json)
            .map_err(|e| err(format!("cannot write {}/cluster.json: {e}", dir.display())))?;
        let cluster = Cluster {
            dir,
            state,
            owned: true,
            _temp: temp,
        };
        for i in 0..cluster.len() {
            cluster.launch(i)?;
        }
        for i in 0..cluster.len() {
            cluster.wait_ready(i)?;
        }
        Ok(cluster)
    }

    /// The cluster started in `dir` by another process (the `coord-testkit` command, say),
    /// to control it; it is left running when this handle is dropped.
    ///
    /// # Errors
    ///
    /// No readable `cluster.json` in `dir`.
    pub fn attach(dir: impl AsRef<Path>) -> Result<Cluster> {
        let dir = dir.as_ref().to_owned();
        let text = std::fs::read_to_string(dir.join("cluster.json")).map_err(|e| {
            err(format!(
                "no cluster in {} (cannot read cluster.json: {e}): start one with coord-testkit start",
                dir.display()
            ))
        })?;
        let state =
            serde_json::from_str(&text).map_err(|e| err(format!("{}/cluster.json: {e}", dir.display())))?;
        Ok(Cluster {
            dir,
            state,
            owned: false,
            _temp: None,
        })
    }

    /// Leaves the members running when this handle is dropped (a script started them).
    pub fn detach(mut self) {
        self.owned = false;
    }

    /// ZooKeeper or etcd.
    pub fn kind(&self) -> Kind {
        self.state.kind
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.state.members.len()
    }

    /// Never: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.state.members.is_empty()
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Each member's client address, in member order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..self.len()).map(|i| self.addr(i)).collect()
    }

    /// Member `i`'s client address.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.state.members[i].client_port))
    }

    /// `host:port,host:port,…`: the hosts part of a coord connection string.
    pub fn hosts(&self) -> String {
        self.addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A coord connection string for `namespace`: `zk://…/namespace` or
    /// `etcd://…/namespace`; with TLS, `zk+tls://` or `etcd+https://` and the CA (add the
    /// client certificate with `&tls_cert=…&tls_key=…`). PostgreSQL: the database URL
    /// `postgres://coord@127.0.0.1:PORT/postgres` (`namespace` is not used).
    pub fn url(&self, namespace: &str) -> String {
        let (scheme, tls_scheme) = match self.kind() {
            Kind::Zk => ("zk", "zk+tls"),
            Kind::Etcd => ("etcd", "etcd+https"),
            Kind::Postgres => return format!("postgres://{POSTGRES_USER}@{}/postgres", self.hosts()),
        };
        match &self.state.tls {
            Some(certs) => format!(
                "{tls_scheme}://{}/{namespace}?tls_ca={}",
                self.hosts(),
                certs.join("ca.pem").display()
            ),
            None => format!("{scheme}://{}/{namespace}", self.hosts()),
        }
    }

    /// [`Cluster::url`] asking for a session of `timeout` (ZooKeeper's session timeout,
    /// etcd's lease TTL; see [`crate::env::session_option`]).
    pub fn session_url(&self, namespace: &str, timeout: std::time::Duration) -> String {
        let url = self.url(namespace);
        let scheme = url.split("://").next().unwrap_or_default().to_owned();
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{}", crate::env::session_option(&scheme, timeout))
    }

    fn pidfile(&self, i: usize) -> PathBuf {
        self.dir.join(format!("m{i}.pid"))
    }

    /// Member `i`'s process id, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        let pid = std::fs::read_to_string(self.pidfile(i))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        alive(pid).then_some(pid)
    }

    fn launch(&self, i: usize) -> Result<()> {
        self.check(i)?;
        if self.pid(i).is_some() {
            return Ok(());
        }
        let spec = &self.state.members[i];
        let log_path = self.dir.join(format!("m{i}")).join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| err(format!("cannot open {}: {e}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(|e| err(format!("cannot open {}: {e}", log_path.display())))?;
        // Its own process group: a terminal's Ctrl-C to the tests does not reach it, and
        // it outlives the process that started it (scripts start, tests attach).
        use std::os::unix::process::CommandExt as _;
        let mut command = Command::new(&spec.argv[0]);
        if self.kind() == Kind::Postgres
            && let Some((uid, gid)) = postgres_owner()?
        {
            // PostgreSQL refuses to run as root.
            command.uid(uid).gid(gid);
        }
        let child = command
            .args(&spec.argv[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| err(format!("cannot run {}: {e}", spec.argv[0])))?;
        std::fs::write(self.pidfile(i), child.id().to_string())
            .map_err(|e| err(format!("cannot write {}: {e}", self.pidfile(i).display())))?;
        // Reap it whenever it exits, so a killed member is not left a zombie that still
        // looks alive.
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
        Ok(())
    }

    fn check(&self, i: usize) -> Result<()> {
        if i < self.len() {
            Ok(())
        } else {
            Err(err(format!(
                "no member {i}: the cluster has members 0..{}",
                self.len()
            )))
        }
    }

    fn wait_ready(&self, i: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.ready(i) {
                return Ok(());
            }
            if self.pid(i).is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (log, tail) = self.log_tail(i, 15);
        Err(err(format!(
            "{:?} member {i} did not come up on {}; log {}:\n{tail}",
            self.kind(),
            self.addr(i),
            log.display()
        )))
    }

    /// The last `n` lines of member `i`'s log, and the log's path.
    fn log_tail(&self, i: usize, n: usize) -> (PathBuf, String) {
        let log = self.dir.join(format!("m{i}")).join("server.log");
        let tail = std::fs::read_to_string(&log)
            .map(|t| {
                let lines: Vec<&str> = t.lines().collect();
                lines[lines.len().saturating_sub(n)..].join("\n")
            })
            .unwrap_or_default();
        (log, tail)
    }

    /// Whether member `i` answers (ZooKeeper in an ensemble: as leader or follower).
    pub fn ready(&self, i: usize) -> bool {
        match self.kind() {
            Kind::Zk => matches!(
                zk_mode(self.state.members[i].probe_port).as_deref(),
                Some("leader" | "follower" | "standalone")
            ),
            Kind::Etcd => self.etcdctl(i, &["endpoint", "health"]).is_ok(),
            Kind::Postgres => pg_bin("pg_isready").is_ok_and(|bin| {
                Command::new(bin)
                    .args([
                        "-q",
                        "-h",
                        "127.0.0.1",
                        "-U",
                        POSTGRES_USER,
                        "-d",
                        "postgres",
                        "-p",
                    ])
                    .arg(self.state.members[i].client_port.to_string())
                    .stdin(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            }),
        }
    }

    /// The member that is the cluster's leader now, if one is (a standalone server is
    /// its own leader).
    pub fn leader(&self) -> Option<usize> {
        (0..self.len()).find(|&i| self.is_leader(i))
    }

    fn is_leader(&self, i: usize) -> bool {
        if self.pid(i).is_none() {
            return false;
        }
        match self.kind() {
            Kind::Zk => self.zk_is_leader(i),
            Kind::Etcd => self.etcd_is_leader(i),
            Kind::Postgres => true,
        }
    }

    /// A member that is up and not the leader, if any.
    pub fn follower(&self) -> Option<usize> {
        let leader = self.leader();
        (0..self.len()).find(|&i| Some(i) != leader && self.pid(i).is_some())
    }

    /// Waits until some member is leader (after a member was killed, say).
    ///
    /// # Errors
    ///
    /// None within `timeout`.
    pub fn wait_leader(&self, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if Instant::now() >= deadline {
                // Say what each member is doing: a member that died (a full
                // disk, a crash) names its cause in its log.
                let members: Vec<String> = (0..self.len())
                    .map(|i| {
                        let (log, tail) = self.log_tail(i, 3);
                        let state = if self.pid(i).is_some() { "up" } else { "down" };
                        format!("member {i} {state}; {}:\n{tail}", log.display())
                    })
                    .collect();
                return Err(err(format!(
                    "no leader within {timeout:?}\n{}",
                    members.join("\n")
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, i: usize, signal: &str) -> Result<Option<u32>> {
        self.check(i)?;
        let Some(pid) = self.pid(i) else {
            return Ok(None);
        };
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .map_err(|e| err(format!("cannot run kill: {e}")))?;
        if status.success() {
            Ok(Some(pid))
        } else {
            Err(err(format!("kill {signal} {pid} failed")))
        }
    }

    fn wait_dead(&self, pid: u32, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while alive(pid) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Kills member `i` with SIGKILL (a crash: no clean shutdown) and waits until it is
    /// gone. Nothing if it is not running.
    ///
    /// # Errors
    ///
    /// No such member; the signal cannot be sent.
    pub fn kill(&self, i: usize) -> Result<()> {
        let _ = self.signal(i, "-CONT")?;
        if let Some(pid) = self.signal(i, "-KILL")? {
            self.wait_dead(pid, Duration::from_secs(10));
            self.wait_ports_free(i, Duration::from_secs(10));
        }
        let _ = std::fs::remove_file(self.pidfile(i));
        Ok(())
    }

    /// Waits until member `i`'s ports can be bound again. A killed multi-threaded server
    /// (etcd, the JVM) shows as a zombie as soon as its main thread is gone, while its
    /// other threads still hold the open sockets for a moment: started again at once,
    /// it would find its own ports in use.
    fn wait_ports_free(&self, i: usize, timeout: Duration) {
        let Some(spec) = self.state.members.get(i) else {
            return;
        };
        let deadline = Instant::now() + timeout;
        let mut ports = vec![
            spec.client_port,
            spec.probe_port,
            spec.peer_port,
            spec.election_port,
        ];
        ports.dedup();
        while !ports.iter().all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok()) {
            if Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops member `i` cleanly (SIGTERM; PostgreSQL: SIGINT, its fast shutdown, which
    /// ends open sessions; SIGKILL after 10 s).
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`].
    pub fn stop(&self, i: usize) -> Result<()> {
        let _ = self.signal(i, "-CONT")?;
        let clean = if self.kind() == Kind::Postgres {
            "-INT"
        } else {
            "-TERM"
        };
        if let Some(pid) = self.signal(i, clean)?
            && !self.wait_dead(pid, Duration::from_secs(10))
        {
            return self.kill(i);
        }
        let _ = std::fs::remove_file(self.pidfile(i));
        Ok(())
    }

    /// Starts member `i` again on its data (after [`Cluster::kill`] or
    /// [`Cluster::stop`]) and waits until it answers; nothing if it runs.
    ///
    /// # Errors
    ///
    /// As [`Cluster::start`].
    pub fn restart_member(&self, i: usize) -> Result<()> {
        self.launch(i)?;
        self.wait_ready(i)
    }

    /// Kills member `i` and starts it again: [`Cluster::kill`], then
    /// [`Cluster::restart_member`].
    ///
    /// # Errors
    ///
    /// As both.
    pub fn restart(&self, i: usize) -> Result<()> {
        self.kill(i)?;
        self.restart_member(i)
    }

    /// Freezes member `i` (SIGSTOP): its connections stay open and silent.
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`].
    pub fn pause(&self, i: usize) -> Result<()> {
        self.signal(i, "-STOP").map(drop)
    }

    /// Lets a paused member `i` go on (SIGCONT).
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`].
    pub fn resume(&self, i: usize) -> Result<()> {
        self.signal(i, "-CONT").map(drop)
    }

    /// Freezes member `i` now and lets it go on after `duration`, from a detached
    /// process: the member resumes even if the caller dies first. Returns at once.
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`].
    pub fn pause_for(&self, i: usize, duration: Duration) -> Result<()> {
        let Some(pid) = self.signal(i, "-STOP")? else {
            return Ok(());
        };
        use std::os::unix::process::CommandExt as _;
        Command::new("sh")
            .args([
                "-c",
                &format!("sleep {:.3}; kill -CONT {pid}", duration.as_secs_f64()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                let _ = self.resume(i);
                err(format!("cannot schedule the resume: {e}"))
            })?;
        Ok(())
    }

    /// Takes the cluster's fault lock (the file `faults.lock` in its directory), waiting
    /// for it: whoever takes members down holds it until they are back, so two fault
    /// injectors (a test and `scripts/member-chaos`, say) never take down a majority
    /// between them. Released when the returned handle drops.
    ///
    /// # Errors
    ///
    /// The lock file cannot be opened or locked.
    pub fn fault_lock(&self) -> Result<FaultLock> {
        let path = self.dir.join("faults.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| err(format!("cannot open {}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| err(format!("cannot lock {}: {e}", path.display())))?;
        Ok(FaultLock { _file: file })
    }

    /// Kills every member and starts them all again on their data (a whole-service
    /// crash); returns once each answers.
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`] and [`Cluster::start`].
    pub fn restart_all(&self) -> Result<()> {
        self.shutdown()?;
        for i in 0..self.len() {
            self.launch(i)?;
        }
        for i in 0..self.len() {
            self.wait_ready(i)?;
        }
        Ok(())
    }

    /// Stops every member (SIGKILL; PostgreSQL: its fast shutdown, so that no session's
    /// backend outlives it), keeping the directory.
    ///
    /// # Errors
    ///
    /// As [`Cluster::kill`].
    pub fn shutdown(&self) -> Result<()> {
        for i in 0..self.len() {
            if self.kind() == Kind::Postgres {
                self.stop(i)?;
            } else {
                self.kill(i)?;
            }
        }
        Ok(())
    }
}

/// The cluster's fault lock, held until dropped: see [`Cluster::fault_lock`].
#[derive(Debug)]
pub struct FaultLock {
    _file: std::fs::File,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.shutdown();
        }
    }
}

/// Whether a member failed to start because a port it was given is in use.
fn port_taken(e: &Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    text.contains("address already in use")
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
