//! The conformance suite against a real etcd: `COORD_TEST_ETCD=host:port`.
//!
//! Every client reaches the server through its own fault proxy (suspend, crash, watch
//! gaps); sessions are killed from outside with `LeaseRevoke` from a separate client.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use coord_conformance::{
    Case, CaseResult, Ctx, Factory, Faults, ForeignWriter, Group, Needs, RealServer, RecordedWrite, Recording,
};

#[path = "conformance/interop.rs"]
mod interop;
#[path = "conformance/security.rs"]
mod security;
use coord_core::Granted as _;
use coord_core::{Client, Error, ErrorKind, Result};
use coord_etcd::{EtcdClient, EtcdOptions};

const LEASE_TTL: Duration = Duration::from_secs(2);

struct EtcdFactory {
    server: RealServer,
    /// `etcd` or `etcd+https`.
    scheme: &'static str,
    /// `user:password@`, or empty.
    userinfo: String,
    /// Extra query options (the TLS files), starting with `&`.
    query: String,
}

impl EtcdFactory {
    fn plain(server: RealServer) -> EtcdFactory {
        EtcdFactory {
            server,
            scheme: "etcd",
            userinfo: String::new(),
            query: String::new(),
        }
    }
}

fn etcd_of(client: &Client) -> Result<&EtcdClient> {
    client
        .backend_as::<EtcdClient>()
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "not an etcd client"))
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, format!("{what}: {e}"))
}

impl EtcdFactory {
    async fn connect_to(&self, hosts: String, namespace: &str) -> Result<Client> {
        let url = format!(
            "{}://{}{hosts}/{namespace}?lease_ttl={}s&request_timeout=3s{}",
            self.scheme,
            self.userinfo,
            LEASE_TTL.as_secs(),
            self.query
        );
        EtcdClient::connect(EtcdOptions::from_url(&url)?).await
    }

    /// A plain etcd client beside coord's, on the first member that answers (a member
    /// may be down while the suite runs on a cluster).
    async fn admin(&self) -> Result<etcd_client::Client> {
        let mut last = String::from("no members");
        for addr in self.server.addrs() {
            let attempt = async {
                let mut c = etcd_client::Client::connect([format!("http://{addr}")], None).await?;
                c.status().await?;
                Ok::<_, etcd_client::Error>(c)
            };
            match tokio::time::timeout(Duration::from_secs(3), attempt).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("{addr}: no answer"),
            }
        }
        Err(unavailable("admin connect", last))
    }
}

/// A raw etcd client writing coord's config keys (see [`ForeignWriter`]).
struct EtcdForeign {
    etcd: etcd_client::Client,
    client: Client,
    /// Every member, for the record's watch.
    addrs: Vec<std::net::SocketAddr>,
}

impl EtcdForeign {
    fn key(&self, key: &str) -> Result<String> {
        coord_conformance::util::config_key_path(&self.client, key)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
    }
}

#[async_trait]
impl ForeignWriter for EtcdForeign {
    async fn put(&self, key: &str, value: &[u8]) -> Result<coord_core::Version> {
        let resp = self
            .etcd
            .kv_client()
            .put(self.key(key)?, value.to_vec(), None)
            .await
            .map_err(|e| unavailable("foreign put", e))?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok(coord_core::raw::version(revision as u64, 0))
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        let resp = self
            .etcd
            .kv_client()
            .delete(self.key(key)?, None)
            .await
            .map_err(|e| unavailable("foreign delete", e))?;
        Ok(resp.deleted() > 0)
    }

    async fn read(&self, key: &str) -> Result<Option<(Vec<u8>, coord_core::Version)>> {
        let resp = self
            .etcd
            .kv_client()
            .get(self.key(key)?, None)
            .await
            .map_err(|e| unavailable("foreign read", e))?;
        Ok(resp.kvs().first().map(|kv| {
            (
                kv.value().to_vec(),
                coord_core::raw::version(kv.mod_revision() as u64, 0),
            )
        }))
    }

    async fn record(&self, prefix: &str) -> Result<Option<Box<dyn Recording>>> {
        let root = self.key("")?;
        let start = self
            .etcd
            .kv_client()
            .get(
                root.clone(),
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
            .map_err(|e| unavailable("record start", e))?
            .header()
            .map_or(0, |h| h.revision());
        let state = Arc::new(std::sync::Mutex::new(Record::default()));
        let task = tokio::spawn(follow_record(
            self.addrs.clone(),
            format!("{root}{prefix}"),
            root,
            start + 1,
            state.clone(),
        ));
        Ok(Some(Box::new(EtcdRecording { task, state })))
    }
}

/// What a recording holds so far.
#[derive(Default)]
struct Record {
    writes: Vec<RecordedWrite>,
    /// The highest revision recorded.
    reached: u64,
    /// Why it stopped for good.
    broke: Option<String>,
}

/// etcd's own record of a prefix: a watch from `from`, resumed after the last revision
/// it delivered whenever its stream breaks (a member killed), on any member.
async fn follow_record(
    addrs: Vec<std::net::SocketAddr>,
    prefix: String,
    root: String,
    mut from: i64,
    state: Arc<std::sync::Mutex<Record>>,
) {
    let set_broke = |why: String| state.lock().unwrap_or_else(|p| p.into_inner()).broke = Some(why);
    let mut failures = 0;
    loop {
        let endpoints: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
        let attempt = async {
            let mut c = etcd_client::Client::connect(endpoints, None).await?;
            let options = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_start_revision(from);
            c.watch(prefix.clone(), Some(options)).await
        };
        let mut stream = match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(s)) => s,
            _ => {
                failures += 1;
                if failures > 100 {
                    return set_broke(format!(
                        "the record's watch could not resume from revision {from}"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while let Ok(Some(resp)) = stream.message().await {
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    return set_broke(format!(
                        "the record's history was compacted at revision {} before it was read",
                        resp.compact_revision()
                    ));
                }
                break;
            }
            let mut record = state.lock().unwrap_or_else(|p| p.into_inner());
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key());
                let Some(key) = key.strip_prefix(&root) else {
                    continue;
                };
                let revision = kv.mod_revision();
                let value = match event.event_type() {
                    etcd_client::EventType::Put => Some(kv.value().to_vec()),
                    etcd_client::EventType::Delete => None,
                };
                record.writes.push(RecordedWrite {
                    revision: revision as u64,
                    key: key.to_owned(),
                    value,
                });
                record.reached = record.reached.max(revision as u64);
                from = from.max(revision + 1);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct EtcdRecording {
    task: tokio::task::JoinHandle<()>,
    state: Arc<std::sync::Mutex<Record>>,
}

#[async_trait]
impl Recording for EtcdRecording {
    async fn finish(self: Box<Self>, last: u64, within: Duration) -> Result<Vec<RecordedWrite>> {
        let deadline = tokio::time::Instant::now() + within;
        let result = loop {
            {
                let record = self.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(why) = &record.broke {
                    break Err(unavailable("record", why));
                }
                if record.reached >= last {
                    break Ok(record
                        .writes
                        .iter()
                        .filter(|w| w.revision <= last)
                        .cloned()
                        .collect());
                }
                if tokio::time::Instant::now() >= deadline {
                    break Err(unavailable(
                        "record",
                        format!("it reached revision {} of {last} in {within:?}", record.reached),
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.task.abort();
        result
    }
}

#[async_trait]
impl Factory for EtcdFactory {
    fn name(&self) -> &str {
        self.scheme
    }

    fn faults(&self) -> Faults {
        // The kill revokes through a plain, credential-less admin client.
        let plain = self.scheme == "etcd" && self.userinfo.is_empty();
        let mut faults = self.server.faults(plain, plain);
        // Compaction needs the root role; the TLS and auth groups run no gap cases.
        faults.watch_gap &= plain;
        faults
    }

    fn real_server(&self) -> Option<&RealServer> {
        Some(&self.server)
    }

    fn session_timeout(&self) -> Duration {
        LEASE_TTL
    }

    async fn open(&self, namespace: &str) -> Result<Client> {
        self.server.open(|hosts| self.connect_to(hosts, namespace)).await
    }

    async fn open_links(&self, namespace: &str, n: usize) -> Result<Client> {
        self.server
            .open_links(n, |hosts| self.connect_to(hosts, namespace))
            .await
    }

    fn url_base(&self) -> String {
        format!("{}://{}{}", self.scheme, self.userinfo, self.server.hosts())
    }

    async fn connect_url(&self, url: &str) -> Result<Client> {
        coord_etcd::connect(url).await
    }

    async fn kill_session(&self, client: &Client) -> Result<()> {
        let lease = etcd_of(client)?.lease_id();
        self.admin()
            .await?
            .lease_revoke(lease)
            .await
            .map_err(|e| unavailable("lease revoke", e))?;
        Ok(())
    }

    async fn foreign_writer(&self, client: &Client) -> Result<Box<dyn ForeignWriter>> {
        Ok(Box::new(EtcdForeign {
            etcd: self.admin().await?,
            client: client.clone(),
            addrs: self.server.addrs().to_vec(),
        }))
    }

    async fn operator_delete(&self, path: &str) -> Result<()> {
        self.admin()
            .await?
            .delete(path, None)
            .await
            .map_err(|e| unavailable("operator delete", e))?;
        Ok(())
    }

    async fn operator_list(&self, namespace: &str) -> Result<Vec<String>> {
        let resp = self
            .admin()
            .await?
            .get(
                format!("{namespace}/"),
                Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(|e| unavailable("operator list", e))?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect())
    }

    async fn end_watch_gap(&self, client: &Client) -> Result<()> {
        // Compact away the history the cut-off watch still needs, then let it reconnect.
        let mut admin = self.admin().await?;
        let rev = admin
            .get("coordtest-compaction-probe", None)
            .await
            .map_err(|e| unavailable("read revision", e))?
            .header()
            .map(|h| h.revision())
            .unwrap_or(0);
        admin
            .compact(rev, None)
            .await
            .map_err(|e| unavailable("compact", e))?;
        self.server.reconnect(client)?;
        Ok(())
    }
}

/// `etcdctl lock <prefix>` (etcd's server-side lock on the same layout) and a coord
/// lock on the same name exclude each other.
async fn etcdctl_lock_excludes(ctx: Ctx) -> CaseResult {
    use anyhow::{Context as _, ensure};
    use coord_core::Lock;
    let server = std::env::var("COORD_TEST_ETCD")?;
    let client = ctx.client().await?;
    let prefix = client.lock_path("shared")?;
    // etcdctl holds first: coord cannot take the lock.
    let mut holder = tokio::process::Command::new("etcdctl")
        .args([
            "--endpoints",
            &server,
            "lock",
            &prefix,
            "--",
            "sh",
            "-c",
            "echo held; sleep 2",
        ])
        .env("ETCDCTL_API", "3")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("run etcdctl lock")?;
    let mut out = tokio::io::BufReader::new(holder.stdout.take().context("no stdout")?);
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line),
    )
    .await
    .context("etcdctl never took the lock")??;
    ensure!(line.trim() == "held", "etcdctl printed {line:?}");
    ensure!(
        client.try_lock("shared").await?.is_none(),
        "coord took a lock etcdctl holds"
    );
    let c2 = client.clone();
    let waiter = tokio::spawn(async move { c2.lock("shared").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(!waiter.is_finished(), "coord did not wait for etcdctl's lock");
    let status = tokio::time::timeout(Duration::from_secs(10), holder.wait())
        .await
        .context("etcdctl hung")??;
    ensure!(status.success(), "etcdctl lock failed: {status}");
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .context("coord never acquired")???;

    // coord holds: etcdctl must wait until coord releases.
    let mut waiting = tokio::process::Command::new("etcdctl")
        .args(["--endpoints", &server, "lock", &prefix, "--", "echo", "got"])
        .env("ETCDCTL_API", "3")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("run etcdctl lock")?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    if let Some(status) = waiting.try_wait()? {
        let keys = tokio::process::Command::new("etcdctl")
            .args(["--endpoints", &server, "get", "--prefix", &prefix, "-w", "fields"])
            .env("ETCDCTL_API", "3")
            .output()
            .await?;
        anyhow::bail!(
            "etcdctl finished ({status}) while coord holds the lock (token {}); keys: {}",
            guard.token(),
            String::from_utf8_lossy(&keys.stdout)
        );
    }
    guard.release().await?;
    let output = tokio::time::timeout(Duration::from_secs(10), waiting.wait_with_output())
        .await
        .context("etcdctl never got the lock after coord released it")??;
    ensure!(
        String::from_utf8_lossy(&output.stdout).contains("got"),
        "etcdctl output {output:?}"
    );
    Ok(())
}

/// A compaction under an open config watch that had fallen behind yields `Resync`, then
/// the right final values.
async fn compaction_under_watch_resyncs(ctx: Ctx) -> CaseResult {
    use anyhow::{bail, ensure};
    use coord_conformance::util::next_event;
    use coord_core::{ConfigEvent, ConfigStore};
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut w = ConfigStore::watch(&b, "c").await?;
    next_event(&mut w, Duration::from_secs(10), "snapshot").await?;
    ctx.factory().begin_watch_gap(&b).await?;
    for i in 0..5u8 {
        a.put("c/k", vec![i]).await?;
    }
    ctx.factory().end_watch_gap(&b).await?;
    match next_event(&mut w, Duration::from_secs(15), "after compaction").await? {
        ConfigEvent::Resync => {}
        other => bail!("got {other:?} after compaction, expected Resync"),
    }
    match next_event(&mut w, Duration::from_secs(15), "snapshot after Resync").await? {
        ConfigEvent::Snapshot(e) => ensure!(e.len() == 1 && e[0].value == [4], "snapshot {e:?}"),
        other => bail!("got {other:?}, expected Snapshot"),
    }
    Ok(())
}

/// A join whose outcome was unknown is removed by its contender (nothing there yet); if
/// its request then lands late — etcd can apply a request after the client gave up on it
/// — it re-creates the key under the client's live lease, a contender nobody waits
/// behind. coord sweeps such a key: another client gets the lock at once, and the key is
/// gone. (The late landing is played by a plain client writing the key under the lease.)
async fn late_landing_join_is_swept(ctx: Ctx) -> CaseResult {
    use anyhow::ensure;
    use coord_core::Lock as _;
    use coord_core::raw::{Admission, EntryClass, QueueSpec};
    const CONTENDERS: &[EntryClass] = &[EntryClass {
        subdir: "",
        markers: &["lock-"],
        kazoo_marker: None,
    }];
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let backend = a.backend().clone();
    let spec = QueueSpec::new("lock", "locks/late", CONTENDERS, Admission::Exclusive);
    let ticket = backend.ticket(&spec, 0)?;
    // The join's answer never came; the dropped contender removes what it may have made.
    backend.leave(&ticket, None).await?;
    // Then the join lands.
    let server = std::env::var("COORD_TEST_ETCD")?;
    let first = server.split(',').next().unwrap_or_default().to_owned();
    let mut raw = etcd_client::Client::connect([format!("http://{first}")], None).await?;
    raw.put(
        ticket.locator.clone(),
        Vec::<u8>::new(),
        Some(etcd_client::PutOptions::new().with_lease(ticket.session_id)),
    )
    .await?;
    let guard = tokio::time::timeout(Duration::from_secs(10), b.lock("late"))
        .await
        .map_err(|_| anyhow::anyhow!("another client waits behind the late join's key for good"))??;
    let left = raw.get(ticket.locator.clone(), None).await?;
    ensure!(left.kvs().is_empty(), "the late join's key is still there");
    guard.release().await?;
    // a's own next contender uses another key, and locks.
    let again = tokio::time::timeout(Duration::from_secs(10), a.lock("late")).await??;
    again.release().await?;
    Ok(())
}

/// With the backend not told of a lost entry (`Mutant::LossUntold`), the run of
/// [`lock::deleted_holder_then_next_grant`] must show the harm: the client's next task
/// makes the same key again, and the lost guard's release — a plain delete — removes it.
async fn loss_untold_is_caught(ctx: Ctx) -> CaseResult {
    use coord_core::mutants::{Mutant, switch_on};
    let _on = switch_on(&[Mutant::LossUntold]);
    let harm = coord_conformance::cases::lock::deleted_holder_then_next_grant(&ctx).await?;
    anyhow::ensure!(
        !harm.is_empty(),
        "with the loss untold, the lost guard's release spared the next grant"
    );
    eprintln!("[etcd] the untold loss caught: {harm:?}");
    Ok(())
}

fn main() {
    let factory = RealServer::from_env("etcd")
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|server| Arc::new(EtcdFactory::plain(server)) as Arc<dyn Factory>);
    let mut cases = coord_conformance::cases::all();
    cases.extend(coord_conformance::cases::backend_mutants());
    cases.extend(coord_conformance::cases::server::all());
    cases.extend([
        Case {
            name: "etcd::late_landing_join_is_swept",
            needs: Needs::NONE,
            run: |ctx| Box::pin(late_landing_join_is_swept(ctx)),
        },
        Case {
            name: "etcd::loss_untold_is_caught",
            needs: Needs::NONE,
            run: |ctx| Box::pin(loss_untold_is_caught(ctx)),
        },
        Case {
            name: "etcd::etcdctl_lock_excludes",
            needs: Needs::NONE,
            run: |ctx| Box::pin(etcdctl_lock_excludes(ctx)),
        },
        Case {
            name: "etcd::go_rwmutex_keys_exclude",
            needs: Needs::NONE,
            run: |ctx| Box::pin(interop::go_rwmutex_keys_exclude(ctx)),
        },
        Case {
            name: "etcd::compaction_under_watch_resyncs",
            // Compaction is cluster-wide: run alone.
            needs: Needs {
                exclusive: true,
                ..Needs::NONE
            },
            run: |ctx| Box::pin(compaction_under_watch_resyncs(ctx)),
        },
        Case {
            name: "etcd::credentials_without_server_auth_rejected",
            needs: Needs::NONE,
            run: |ctx| Box::pin(security::credentials_without_server_auth_rejected(ctx)),
        },
    ]);
    let mut auth_cases = coord_conformance::cases::smoke();
    auth_cases.extend(security::auth_cases());
    let mut tls_cases = coord_conformance::cases::smoke();
    tls_cases.extend(coord_conformance::cases::tls::all());
    coord_conformance::run_groups(vec![
        Group {
            backend: "etcd".into(),
            factory,
            why_missing: "set COORD_TEST_ETCD=127.0.0.1:PORT (./scripts/test starts a server)".into(),
            cases,
        },
        Group {
            backend: "etcd-auth".into(),
            factory: security::auth_factory(),
            why_missing: "set COORD_TEST_ETCD_AUTH=127.0.0.1:PORT of an etcd with authentication on, and \
                          COORD_TEST_ETCD_AUTH_PASSWORDS=<app>,<other>,<root> for its users coord-app, \
                          coord-other and root (./scripts/test starts one)"
                .into(),
            cases: auth_cases,
        },
        Group {
            backend: "etcd-tls".into(),
            factory: security::tls_factory(),
            why_missing: "set COORD_TEST_ETCD_TLS=127.0.0.1:PORT of an etcd serving TLS with client-cert \
                          auth, and COORD_TEST_CERTS to its test certificates (./scripts/test starts one)"
                .into(),
            cases: tls_cases,
        },
    ]);
}
