//! The conformance suite against a real ZooKeeper: `COORD_TEST_ZK=host:port`.
//!
//! Every client reaches the server through its own fault proxy, so a test can cut it
//! off (suspend), kill its process's network for good (crash), or hide changes from its
//! watches; sessions are expired from outside by attaching a second connection with the
//! session's id and password and closing it — a real server-side expiry.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use coord_conformance::{Case, CaseResult, Ctx, Factory, Faults, ForeignWriter, Group, Needs, RealServer};

#[path = "conformance/interop.rs"]
mod interop;
#[path = "conformance/minority.rs"]
mod minority;
#[path = "conformance/security.rs"]
mod security;
use coord_core::Granted as _;
use coord_core::{Client, Error, ErrorKind, Result};
use coord_zk::{ZkClient, ZkOptions};

const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

struct ZkFactory {
    server: RealServer,
    /// `zk` or `zk+tls`.
    scheme: &'static str,
    /// Extra query options (the TLS files), starting with `&`.
    query: String,
    /// The session timeout the server granted (ms): more than asked on a server whose
    /// `minSessionTimeout` (2 × `tickTime`) is longer.
    granted_ms: std::sync::atomic::AtomicU64,
    /// Whether the server sweeps empty containers quickly, found out once.
    fast_sweep: std::sync::OnceLock<bool>,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, format!("{what}: {e}"))
}

impl ZkFactory {
    fn new(server: RealServer, scheme: &'static str, query: String) -> ZkFactory {
        ZkFactory {
            server,
            scheme,
            query,
            granted_ms: std::sync::atomic::AtomicU64::new(0),
            fast_sweep: std::sync::OnceLock::new(),
        }
    }

    /// Whether the server deletes an emptied container node within 2 s, twice in a row:
    /// servers started by coord's scripts do (100 ms); ZooKeeper's default is once a
    /// minute. Unknown (e.g. no plaintext access) counts as yes.
    fn probe_sweep(&self) -> bool {
        if self.server.cluster().is_some() {
            return true;
        }
        // Twice: a sweep once a minute may happen to fall within one probe's window, but
        // not within two in a row.
        let probe = async {
            let zk = self.operator().await.ok()?;
            for round in 0..2 {
                let dir = format!("/coord-sweep-probe-{}-{round}", std::process::id());
                let acl =
                    zookeeper_client::CreateMode::Container.with_acls(zookeeper_client::Acls::anyone_all());
                let _ = zk.create(&dir, &[], &acl).await;
                let child = format!("{dir}/child");
                let persistent =
                    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
                zk.create(&child, &[], &persistent).await.ok()?;
                zk.delete(&child, None).await.ok()?;
                let deadline = std::time::Instant::now() + Duration::from_secs(2);
                let mut swept = false;
                while !swept && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    swept = matches!(zk.check_stat(&dir).await, Ok(None));
                }
                if !swept {
                    let _ = zk.delete(&dir, None).await;
                    return Some(false);
                }
            }
            Some(true)
        };
        let swept = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()
            .and_then(|rt| {
                rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(10), probe)
                        .await
                        .ok()
                        .flatten()
                })
            });
        if swept == Some(false) {
            eprintln!(
                "zk: the server keeps empty containers for more than 2 s (ZooKeeper's default sweep is once a minute): \
                 cases that check nothing is left behind are ignored; start it with -Dznode.container.checkIntervalMs=100 to run them"
            );
        }
        swept.unwrap_or(true)
    }

    /// A plain ZooKeeper client beside coord's, as an operator's tool would be.
    async fn operator(&self) -> Result<zookeeper_client::Client> {
        zookeeper_client::Client::connect(&self.server.hosts())
            .await
            .map_err(|e| unavailable("operator connect", e))
    }

    /// Expires `client`'s session on the server (coord-testkit's `expire_session`:
    /// attach with its id and password and close, until the server refuses an attach
    /// as expired).
    async fn expire(&self, client: &Client) -> Result<()> {
        coord_testkit::expire_session(client, &self.server.hosts()).await
    }
}

impl ZkFactory {
    async fn connect_to(&self, hosts: String, namespace: &str) -> Result<Client> {
        let url = format!(
            "{}://{hosts}/{namespace}?session_timeout={}ms&connect_timeout=10s{}",
            self.scheme,
            SESSION_TIMEOUT.as_millis(),
            self.query
        );
        ZkClient::connect(ZkOptions::from_url(&url)?).await
    }
}

/// A raw ZooKeeper client writing coord's config nodes (see [`ForeignWriter`]).
struct ZkForeign {
    zk: zookeeper_client::Client,
    client: Client,
}

impl ZkForeign {
    fn path(&self, key: &str) -> Result<String> {
        // A key's segments are one node's name, `/` written as `:`.
        coord_conformance::util::config_key_path(&self.client, &key.replace('/', ":"))
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
    }
}

fn zk_version(stat: &zookeeper_client::Stat) -> coord_core::Version {
    coord_core::raw::version(stat.czxid as u64, u64::from(stat.version as u32))
}

#[async_trait]
impl ForeignWriter for ZkForeign {
    async fn put(&self, key: &str, value: &[u8]) -> Result<coord_core::Version> {
        use zookeeper_client as zk;
        let path = self.path(key)?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        loop {
            match self.zk.set_data(&path, value, None).await {
                Ok(stat) => return Ok(zk_version(&stat)),
                Err(zk::Error::NoNode) => match self.zk.create(&path, value, &persistent).await {
                    Ok((stat, _)) => return Ok(zk_version(&stat)),
                    Err(zk::Error::NodeExists) => continue,
                    Err(e) => return Err(unavailable("foreign create", e)),
                },
                Err(e) => return Err(unavailable("foreign set", e)),
            }
        }
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        use zookeeper_client as zk;
        let path = self.path(key)?;
        // zkCli's deleteall: the children (coord's incarnation marker), then the node;
        // a marker coord adds meanwhile fails the delete: again.
        loop {
            let children = match self.zk.list_children(&path).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return Err(unavailable("foreign list", e)),
            };
            for child in children {
                let _ = self.zk.delete(&format!("{path}/{child}"), None).await;
            }
            match self.zk.delete(&path, None).await {
                Ok(()) => return Ok(true),
                Err(zk::Error::NoNode) => return Ok(false),
                Err(zk::Error::NotEmpty) => continue,
                Err(e) => return Err(unavailable("foreign delete", e)),
            }
        }
    }

    async fn read(&self, key: &str) -> Result<Option<(Vec<u8>, coord_core::Version)>> {
        let path = self.path(key)?;
        // The member this client is on may lag the leader: `sync` first.
        self.zk
            .sync(&path)
            .await
            .map_err(|e| unavailable("foreign sync", e))?;
        match self.zk.get_data(&path).await {
            Ok((data, stat)) => Ok(Some((data, zk_version(&stat)))),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(e) => Err(unavailable("foreign read", e)),
        }
    }
}

#[async_trait]
impl Factory for ZkFactory {
    fn name(&self) -> &str {
        self.scheme
    }

    fn faults(&self) -> Faults {
        // The session kill and the operator connect without TLS; the TLS group runs no
        // such cases.
        let plain = self.scheme == "zk";
        self.server.faults(plain, plain)
    }

    fn real_server(&self) -> Option<&RealServer> {
        Some(&self.server)
    }

    fn session_timeout(&self) -> Duration {
        let granted = Duration::from_millis(self.granted_ms.load(std::sync::atomic::Ordering::Relaxed));
        SESSION_TIMEOUT.max(granted)
    }

    fn server_settings(&self) -> coord_conformance::ServerSettings {
        let fast_container_sweep = *self.fast_sweep.get_or_init(|| self.probe_sweep());
        coord_conformance::ServerSettings { fast_container_sweep }
    }

    async fn open(&self, namespace: &str) -> Result<Client> {
        let client = self
            .server
            .open(|hosts| self.connect_to(hosts, namespace))
            .await?;
        let granted = u64::try_from(client.session_timeout().as_millis()).unwrap_or(u64::MAX);
        self.granted_ms
            .fetch_max(granted, std::sync::atomic::Ordering::Relaxed);
        Ok(client)
    }

    async fn open_links(&self, namespace: &str, n: usize) -> Result<Client> {
        self.server
            .open_links(n, |hosts| self.connect_to(hosts, namespace))
            .await
    }

    fn url_base(&self) -> String {
        format!("{}://{}", self.scheme, self.server.hosts())
    }

    async fn connect_url(&self, url: &str) -> Result<Client> {
        coord_zk::connect(url).await
    }

    async fn kill_session(&self, client: &Client) -> Result<()> {
        self.expire(client).await
    }

    async fn foreign_writer(&self, client: &Client) -> Result<Box<dyn ForeignWriter>> {
        Ok(Box::new(ZkForeign {
            zk: self.operator().await?,
            client: client.clone(),
        }))
    }

    fn linearizable_reads(&self) -> bool {
        self.server.addrs().len() == 1
    }

    async fn operator_delete(&self, path: &str) -> Result<()> {
        match self.operator().await?.delete(path, None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
            Err(e) => Err(unavailable("operator delete", e)),
        }
    }

    async fn operator_list(&self, namespace: &str) -> Result<Vec<String>> {
        let zk = self.operator().await?;
        let mut found = Vec::new();
        let mut dirs = vec![format!("/{namespace}")];
        while let Some(dir) = dirs.pop() {
            let children = match zk.list_children(&dir).await {
                Ok(c) => c,
                Err(zookeeper_client::Error::NoNode) => continue,
                Err(e) => return Err(unavailable("operator list", e)),
            };
            for child in children {
                let path = format!("{dir}/{child}");
                found.push(path.clone());
                dirs.push(path);
            }
        }
        found.sort();
        Ok(found)
    }

    async fn end_watch_gap(&self, client: &Client) -> Result<()> {
        // ZooKeeper replays watch events across a reconnect; only a lost session leaves a
        // gap, so expire the session while the client is cut off.
        self.expire(client).await?;
        self.server.reconnect(client)?;
        Ok(())
    }
}

/// Locks from coord and a Curator-style contender node created by hand on the same path
/// (`_c_<guid>-lock-<seq>`, ephemeral sequential, from another ZooKeeper client) exclude
/// each other in both directions.
async fn curator_lock_nodes_exclude(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, ensure};
    use coord_core::Lock;
    let server = std::env::var("COORD_TEST_ZK")?;
    let client = ctx.client().await?;
    let path = client.lock_path("shared")?;
    let raw = zookeeper_client::Client::connect(&server).await?;
    let seq_opts =
        zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
    raw.mkdir(
        &path,
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await?;
    let curator_prefix = format!("{path}/_c_6b1c1f0e-5a4f-4c1e-9a9e-1d2a3b4c5d6e-lock-");

    // Curator holds first: coord cannot take the lock, and waits for it.
    let (_, seq) = raw.create(&curator_prefix, b"", &seq_opts).await?;
    let curator_node = format!("{curator_prefix}{seq}");
    ensure!(
        client.try_lock("shared").await?.is_none(),
        "coord took a lock a Curator node holds"
    );
    let c2 = client.clone();
    let waiter = tokio::spawn(async move { c2.lock("shared").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "coord's lock did not wait for the Curator holder"
    );
    raw.delete(&curator_node, None).await?;
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .context("coord never acquired")???;

    // coord holds: a Curator contender arriving now is not first in Curator's order.
    raw.create(&curator_prefix, b"", &seq_opts).await?;
    let mut children = raw.list_children(&path).await?;
    // Curator's order: by the sequence after "lock-".
    children.sort_by_key(|c| c.rsplit_once("lock-").map(|(_, s)| s.to_owned()));
    let first = children.first().context("no contenders")?;
    ensure!(children.len() == 2, "contenders {children:?}");
    ensure!(
        !first.starts_with("_c_6b1c1f0e"),
        "Curator's order puts its own {first} first while coord holds the lock"
    );
    guard.release().await?;
    let children = raw.list_children(&path).await?;
    ensure!(
        children.len() == 1 && children[0].starts_with("_c_6b1c1f0e"),
        "after release: {children:?}"
    );
    Ok(())
}

/// The zombie rule: a session coord declared lost while cut off (past half the timeout,
/// but before the server expires it) is closed when the old connection comes back, never
/// resumed. Were it resumed, its lock node would stay and the waiter would wait forever.
async fn locally_lost_session_is_closed_not_resumed(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, ensure};
    use coord_core::Lock;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let held = a.lock("res").await?;
    let old_session = a.session_id();
    let waiter = tokio::spawn(async move { b.lock("res").await });
    tokio::time::sleep(Duration::from_millis(250)).await;
    ensure!(!waiter.is_finished(), "waiter got the lock while it was held");
    // 3/4 of the timeout: past coord's local Lost point (at most 7/10 of it after the
    // last answered request), so Lost comes while the client is still cut off — even with
    // several hosts, whose reconnects follow each other closely — and short of the
    // server's expiry (no earlier than the whole timeout), so the client library's
    // reconnect can bring the old connection back before the server expires the session:
    // the moment a resumed zombie would appear.
    // The timeout the server granted (more than asked on a server with long ticks).
    let timeout = a.session_timeout();
    ctx.factory().suspend(&a, timeout * 3 / 4).await?;
    tokio::time::timeout(timeout, held.lost())
        .await
        .context("the guard did not report Lost once the session may be gone")?;
    let next = tokio::time::timeout(ctx.expiry_wait(), waiter)
        .await
        .context("the waiter never got the lock: the old session lingers as a zombie")???;
    ensure!(next.token() > held.token());
    ensure!(
        a.session_id() != old_session,
        "the client resumed the session it had declared lost"
    );
    Ok(())
}

/// The negative control of `cache::config_cache_never_mixes_commits_above_64_keys` on
/// ZooKeeper's layout: with the mutant `RereadSplitSilently` (a re-read of more than 64
/// nodes taken as one state unchecked), the same run must show mixed views.
async fn split_reread_mutant_is_caught(ctx: Ctx) -> CaseResult {
    use coord_core::mutants::{Mutant, switch_on};
    let _on = switch_on(&[Mutant::RereadSplitSilently]);
    for run in 1..=3 {
        let (judged, mixed, _, _) = coord_conformance::cases::cache::wide_commit_views(&ctx).await?;
        if !mixed.is_empty() {
            eprintln!(
                "[zk] split re-read mutant caught in run {run}: {} of {judged} views mixed",
                mixed.len()
            );
            return Ok(());
        }
    }
    anyhow::bail!("3 runs with re-reads split silently showed no mixed view: the case cannot catch it")
}

/// A watch whose read after a notification fails — here it times out on a slow link,
/// without any reconnect — reads again until it succeeds instead of dropping the change
/// (nothing else would make it read: no further change comes).
async fn failed_reread_is_retried(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, bail, ensure};
    use coord_conformance::util::next_event;
    use coord_core::{ConfigEvent, ConfigStore};
    let server = ctx.factory().real_server().context("no real server")?;
    let writer = ctx.client().await?;
    let namespace = ctx.namespace().to_owned();
    // A request timeout shorter than the slow link's round trip, well inside the
    // session timeout: reads fail, the connection and session stay.
    let watcher = server
        .open(|hosts| async move {
            let url = format!(
                "zk://{hosts}/{namespace}?session_timeout={}ms&request_timeout=300ms",
                SESSION_TIMEOUT.as_millis()
            );
            ZkClient::connect(ZkOptions::from_url(&url)?).await
        })
        .await?;
    let generation = watcher.session().borrow().generation;
    let mut w = ConfigStore::watch(&watcher, "k").await?;
    next_event(&mut w, Duration::from_secs(10), "snapshot").await?;
    ctx.factory().delay(&watcher, Duration::from_millis(175)).await?;
    writer.put("k", b"v1".to_vec()).await?;
    // The notification arrives; the read after it takes 350 ms and fails at 300 ms.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ctx.factory().delay(&watcher, Duration::ZERO).await?;
    match next_event(&mut w, Duration::from_secs(5), "the change after the failed read").await? {
        ConfigEvent::Put(e) => ensure!(e.key == "k" && e.value == b"v1", "got {e:?}"),
        // A member killed under the slow link ends the session: a member fault, not
        // this case's subject (the harness runs it again on a cluster).
        ConfigEvent::Resync if watcher.session().borrow().generation != generation => {
            bail!(
                "got Resync: the watcher lost the session (a member fault), so the failed read was not the only trouble"
            )
        }
        other => bail!("got {other:?}, expected the put of k"),
    }
    ensure!(
        watcher.session().borrow().generation == generation,
        "the session was replaced: the read failed for another reason than meant"
    );
    watcher.close().await?;
    Ok(())
}

/// Config keys and the incarnation marker: a key node made by another client (no
/// marker) is read, compare-and-set (the first adds a marker, the next costs one
/// request) and put like any; a key deleted and made again by another client up to the
/// same data version fails a compare-and-set on the old version (no ABA); an earlier
/// coord's marker (named by the old incarnation's `czxid`) left under a recreated node
/// is not trusted, and coord still deletes that key; a marked key deletes with its
/// marker.
async fn config_keys_and_their_markers(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, ensure};
    use coord_core::ConfigStore;
    use zookeeper_client as zk;
    let server = std::env::var("COORD_TEST_ZK")?;
    let client = ctx.client().await?;
    let lock = client.lock_path("x")?;
    let root = lock.strip_suffix("/locks/x").context("the lock path's layout")?;
    let node = format!("{root}/config/k");
    let raw = zk::Client::connect(&server).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let deleteall = |path: String| {
        let raw = raw.clone();
        async move {
            for child in raw.list_children(&path).await? {
                raw.delete(&format!("{path}/{child}"), None).await?;
            }
            raw.delete(&path, None).await?;
            anyhow::Ok(())
        }
    };
    client.put("seed", b"s".to_vec()).await?; // the config directory
    raw.create(&node, b"raw", &persistent).await?;
    let v0 = client
        .get("k")
        .await?
        .context("a key made by another client is not read")?;
    ensure!(v0.value == b"raw", "{v0:?}");
    let v1 = client
        .compare_and_set("k", Some(v0.version), b"c1".to_vec())
        .await?;
    let (_, stat) = raw.get_data(&node).await?;
    let children = raw.list_children(&node).await?;
    ensure!(
        children.len() == 1 && children[0].starts_with("i-"),
        "the first compare-and-set did not mark the key: {children:?}"
    );
    let before = client.stats();
    let v2 = client.compare_and_set("k", Some(v1), b"c2".to_vec()).await?;
    let requests = client.stats().since(&before).data_requests();
    ensure!(
        requests == 1,
        "a compare-and-set of a marked key took {requests} requests"
    );
    // Deleted and made again by another client, written up to the same data version.
    deleteall(node.clone()).await?;
    raw.create(&node, b"x0", &persistent).await?;
    raw.set_data(&node, b"x1", None).await?;
    raw.set_data(&node, b"x2", None).await?;
    let (_, again) = raw.get_data(&node).await?;
    ensure!(
        again.version == stat.version + 1,
        "the data versions differ: {again:?} {stat:?}"
    );
    let stale = client.compare_and_set("k", Some(v2), b"stale".to_vec()).await;
    ensure!(
        matches!(&stale, Err(e) if e.kind() == ErrorKind::VersionMismatch),
        "a version from before the delete and recreate was accepted: {stale:?}"
    );
    ensure!(
        raw.get_data(&node).await?.0 == b"x2",
        "the stale compare-and-set wrote"
    );
    // Put on the unmarked node; compare-and-set marks it; delete takes the marker along.
    let v3 = client.put("k", b"p".to_vec()).await?;
    client.compare_and_set("k", Some(v3), b"c3".to_vec()).await?;
    ensure!(raw.list_children(&node).await?.len() == 1, "not marked");
    ensure!(client.delete("k").await?, "the marked key was not deleted");
    ensure!(
        raw.check_stat(&node).await?.is_none(),
        "the key node is still there"
    );
    // A key coord makes is marked from the start, in the same request.
    let new = format!("{root}/config/new");
    let v = client.put("new", b"n".to_vec()).await?;
    let (_, made) = raw.get_data(&new).await?;
    let marker = raw.list_children(&new).await?;
    ensure!(marker.len() == 1, "a key coord made has no marker");
    let (_, marker_stat) = raw.get_data(&format!("{new}/{}", marker[0])).await?;
    ensure!(
        marker_stat.czxid == made.czxid,
        "the marker was not made in the node's own request"
    );
    let before = client.stats();
    let v = client.compare_and_set("new", Some(v), b"n2".to_vec()).await?;
    ensure!(
        client.stats().since(&before).data_requests() == 1,
        "not one request"
    );
    // An earlier coord's marker (named by the czxid) under a later incarnation: deleted
    // and made again at the same data version, with the old incarnation's marker name.
    deleteall(new.clone()).await?;
    raw.create(&new, b"n", &persistent).await?;
    raw.set_data(&new, b"n2", None).await?;
    raw.create(&format!("{new}/{}", made.czxid), b"", &persistent)
        .await?;
    let stale = client.compare_and_set("new", Some(v), b"stale".to_vec()).await;
    ensure!(
        matches!(&stale, Err(e) if e.kind() == ErrorKind::VersionMismatch),
        "a stray marker let a version of the deleted incarnation pass: {stale:?}"
    );
    ensure!(
        client.delete("new").await?,
        "coord could not delete a key with a stray marker"
    );
    ensure!(
        raw.check_stat(&new).await?.is_none(),
        "the key node is still there"
    );
    Ok(())
}

/// Compare-and-set on a key another client keeps deleting and making again (no marker,
/// always at data version 0): a compare-and-set with the version read before a
/// recreate never writes the later incarnation (no ABA), however the recreate falls
/// between its requests. coord's link is slowed so that the recreate lands between
/// them in some of the trials.
async fn config_cas_exact_against_foreign_recreates(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, ensure};
    use coord_core::ConfigStore;
    use zookeeper_client as zk;
    let server = std::env::var("COORD_TEST_ZK")?;
    let client = ctx.client().await?;
    let lock = client.lock_path("x")?;
    let root = lock.strip_suffix("/locks/x").context("the lock path's layout")?;
    let raw = zk::Client::connect(&server).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.put("seed", b"s".to_vec()).await?; // the config directory
    ctx.factory().delay(&client, Duration::from_millis(4)).await?;
    let (mut aba, mut wrote, mut refused) = (0, 0, 0);
    for trial in 0..40u64 {
        let key = format!("r{trial}");
        let node = format!("{root}/config/{key}");
        raw.create(&node, b"v", &persistent).await?;
        // On an ensemble the two clients may be on different members, and a member's
        // reads may lag another's writes (ZooKeeper orders reads per client only):
        // read until the foreign node shows.
        let mut read = None;
        let deadline = tokio::time::Instant::now() + ctx.expiry_wait();
        while read.is_none() && tokio::time::Instant::now() < deadline {
            read = client.get(&key).await?;
            if read.is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let read = read.context("the foreign key never showed to coord's client")?;
        let recreate = {
            let (raw, node, persistent) = (raw.clone(), node.clone(), persistent.clone());
            // 0 to 59 ms: before, between and after the requests of a compare-and-set
            // (a few round trips of 8 ms over a link slowed by 4 ms each way).
            let wait = Duration::from_millis((trial * 7) % 60);
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                // deleteall: a marker coord adds meanwhile makes the delete fail; again.
                loop {
                    for child in raw.list_children(&node).await.unwrap_or_default() {
                        let _ = raw.delete(&format!("{node}/{child}"), None).await;
                    }
                    match raw.delete(&node, None).await {
                        Err(zk::Error::NotEmpty) => continue,
                        r => break r?,
                    }
                }
                raw.create(&node, b"v", &persistent).await?;
                anyhow::Ok(())
            })
        };
        let cas = client
            .compare_and_set(&key, Some(read.version), b"mine".to_vec())
            .await;
        recreate.await??;
        // Up to date with coord's write, whichever member each client is on.
        raw.sync(&node).await?;
        let (data, _) = raw.get_data(&node).await?;
        match cas {
            Ok(_) if data == b"mine" => aba += 1, // written onto the new incarnation
            Ok(_) => wrote += 1,                  // written before the delete
            Err(e) if e.kind() == ErrorKind::VersionMismatch => refused += 1,
            Err(e) => return Err(e.into()),
        }
    }
    ctx.factory().delay(&client, Duration::ZERO).await?;
    ensure!(
        aba == 0,
        "{aba} of 40 compare-and-sets with a version from before a recreate wrote the new incarnation \
         ({wrote} wrote before the delete, {refused} refused)"
    );
    ensure!(
        refused > 0 && wrote > 0,
        "the trials did not cover both sides ({wrote} wrote, {refused} refused)"
    );
    Ok(())
}

fn main() {
    let factory = RealServer::from_env("zk")
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|server| Arc::new(ZkFactory::new(server, "zk", String::new())) as Arc<dyn Factory>);
    let mut cases = coord_conformance::cases::all();
    cases.extend(coord_conformance::cases::backend_mutants());
    cases.extend(coord_conformance::cases::server::all());
    cases.extend([
        Case {
            name: "zk::curator_lock_nodes_exclude",
            needs: Needs::NONE,
            run: |ctx| Box::pin(curator_lock_nodes_exclude(ctx)),
        },
        Case {
            name: "zk::curator_rw_lock_nodes_exclude",
            needs: Needs::NONE,
            run: |ctx| Box::pin(interop::curator_rw_lock_nodes_exclude(ctx)),
        },
        Case {
            name: "zk::kazoo_lock_nodes_exclude",
            needs: Needs::NONE,
            run: |ctx| Box::pin(interop::kazoo_lock_nodes_exclude(ctx)),
        },
        Case {
            name: "zk::kazoo_rw_lock_nodes_exclude",
            needs: Needs::NONE,
            run: |ctx| Box::pin(interop::kazoo_rw_lock_nodes_exclude(ctx)),
        },
        Case {
            name: "zk::curator_semaphore_nodes_share_leases",
            needs: Needs::NONE,
            run: |ctx| Box::pin(interop::curator_semaphore_nodes_share_leases(ctx)),
        },
        Case {
            name: "zk::config_keys_and_their_markers",
            needs: Needs::NONE,
            run: |ctx| Box::pin(config_keys_and_their_markers(ctx)),
        },
        Case {
            name: "zk::config_cas_exact_against_foreign_recreates",
            needs: Needs::NONE,
            run: |ctx| Box::pin(config_cas_exact_against_foreign_recreates(ctx)),
        },
        Case {
            name: "zk::failed_reread_is_retried",
            needs: Needs::NONE,
            run: |ctx| Box::pin(failed_reread_is_retried(ctx)),
        },
        Case {
            name: "zk::cut_off_follower_does_not_keep_held",
            needs: Needs {
                faults: Faults {
                    member_faults: true,
                    ..Needs::NONE.faults
                },
                ..Needs::NONE
            },
            run: |ctx| Box::pin(minority::cut_off_follower_does_not_keep_held(ctx)),
        },
        Case {
            name: "zk::split_reread_mutant_is_caught",
            needs: Needs {
                faults: Faults {
                    delay: true,
                    ..Needs::NONE.faults
                },
                // It switches a process-wide mutant on.
                exclusive: true,
                ..Needs::NONE
            },
            run: |ctx| Box::pin(split_reread_mutant_is_caught(ctx)),
        },
        Case {
            name: "zk::locally_lost_session_is_closed_not_resumed",
            needs: Needs::NONE,
            run: |ctx| Box::pin(locally_lost_session_is_closed_not_resumed(ctx)),
        },
    ]);
    cases.extend(security::acl_cases());
    let tls = security::tls_factory();
    let mut tls_cases = coord_conformance::cases::smoke();
    tls_cases.extend(coord_conformance::cases::tls::all());
    coord_conformance::run_groups(vec![
        Group {
            backend: "zk".into(),
            factory,
            why_missing: "set COORD_TEST_ZK=127.0.0.1:PORT (./scripts/test starts a server)".into(),
            cases,
        },
        Group {
            backend: "zk-tls".into(),
            factory: tls,
            why_missing: "set COORD_TEST_ZK_TLS=127.0.0.1:PORT of a TLS client port and COORD_TEST_CERTS \
                          to the directory of its test certificates (./scripts/test starts one)"
                .into(),
            cases: tls_cases,
        },
    ]);
}
