//! `lock` (one client, uncontended cycles) and `lock-contended` (C clients on one lock):
//! coord beside the raw round trips of the same client library and beside the Rust
//! clients' own lock recipes, interleaved in blocks so that noise hits all alike.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::{Lock as _, LockGuard, Stats};
use zookeeper_client as zk;

use crate::measure::{Latencies, Row, cpu_time, voluntary_switches};
use crate::target::{Backend, Target, unique, zk_mkdir};

/// What one contender runs: coord, the raw floor, or a client library's recipe.
#[derive(Clone)]
pub enum Subject {
    Coord {
        client: coord::Client,
        name: String,
        /// A lock-delay ([`coord::LockOptions::lock_delay`]): `coord-lock-delay`, which
        /// must cost what `coord` does, as every hand-over here is a release.
        delay: Option<Duration>,
    },
    /// ZooKeeper: create an ephemeral sequential node, list the directory, delete, one
    /// after another (the first floor: `raw-floor`).
    ZkRaw { zk: zk::Client, dir: String },
    /// ZooKeeper's real floor: the create and the list in flight together (a session's
    /// requests are answered in order, so the list sees the node), then the delete: two
    /// round trips.
    ZkPipelined { zk: zk::Client, dir: String },
    /// zookeeper-client's `Client::lock` with its Curator-compatible prefix.
    ZkRecipe { zk: zk::Client, dir: String },
    /// etcd: a Txn that puts the key under a lease if absent, then a delete.
    EtcdRaw {
        etcd: etcd_client::Client,
        key: String,
        lease: i64,
    },
    /// etcd: coord's own two requests sent raw — the join `Txn` that also reads the
    /// three newest keys, and the release's `Txn` that deletes the key only if its
    /// create revision is the join's.
    EtcdShaped {
        etcd: etcd_client::Client,
        key: String,
        lease: i64,
    },
    /// etcd: the raw floor's join `Txn`, then coord's guarded release (a `Txn` deleting
    /// the key only if its create revision is the join's): what the guard costs alone.
    EtcdGuarded {
        etcd: etcd_client::Client,
        key: String,
        lease: i64,
    },
    /// etcd's real floor, in the request shapes of Go's `concurrency.Mutex`: one `Txn`
    /// (put the key under the lease if absent, else read it; and read the oldest key of
    /// the prefix), then a plain delete. Contended, it waits as Go's does: for the key
    /// created right before its own to go (a watch from the read's revision), then
    /// checks its own key is still there.
    EtcdGo {
        etcd: etcd_client::Client,
        dir: String,
        lease: i64,
    },
    /// etcd-client's server-side `lock` (the server's v3lock service) and `unlock`.
    EtcdRecipe {
        etcd: etcd_client::Client,
        name: String,
        lease: i64,
    },
}

/// Which acquire shape a subject with the raw floor's join takes.
enum Kind {
    Guarded,
    Other,
}

/// What a granted subject holds until it releases.
pub enum Held {
    Coord(Box<LockGuard>),
    Path(String),
    Key(Vec<u8>),
    /// An etcd key and its create revision (what coord's release compares).
    Entry(Vec<u8>, i64),
}

impl Subject {
    pub fn label(&self) -> &'static str {
        match self {
            Subject::Coord { delay: None, .. } => "coord",
            Subject::Coord { delay: Some(_), .. } => "coord-lock-delay",
            Subject::ZkRaw { .. } | Subject::EtcdRaw { .. } => "raw-floor",
            Subject::ZkPipelined { .. } => "raw-pipelined",
            Subject::EtcdGo { .. } => "go-mutex-shapes",
            Subject::ZkRecipe { .. } => "zookeeper-client-lock",
            Subject::EtcdShaped { .. } => "raw-coord-requests",
            Subject::EtcdGuarded { .. } => "raw-guarded-release",
            Subject::EtcdRecipe { .. } => "etcd-client-lock",
        }
    }

    pub async fn acquire(&mut self) -> Result<Held> {
        let self_kind = if matches!(self, Subject::EtcdGuarded { .. }) {
            Kind::Guarded
        } else {
            Kind::Other
        };
        Ok(match self {
            Subject::Coord {
                client,
                name,
                delay: None,
            } => Held::Coord(Box::new(client.lock(name).await?)),
            Subject::Coord {
                client,
                name,
                delay: Some(delay),
            } => Held::Coord(Box::new(
                client
                    .lock_with(name, coord::LockOptions::new().lock_delay(*delay))
                    .await?,
            )),
            Subject::ZkRaw { zk, dir } => {
                let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                let (_, seq) = zk.create(&format!("{dir}/n-"), b"", &options).await?;
                let children = zk.list_children(dir).await?;
                if children.len() != 1 {
                    bail!(
                        "the raw floor runs uncontended, yet {dir} has {} children",
                        children.len()
                    );
                }
                Held::Path(format!("{dir}/n-{seq}"))
            }
            Subject::ZkPipelined { zk, dir } => {
                let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                // Both requests leave when called, in this order.
                let prefix = format!("{dir}/n-");
                let create = zk.create(&prefix, b"", &options);
                let list = zk.list_children(dir);
                let (created, children) = futures::join!(create, list);
                let (_, seq) = created?;
                let children = children?;
                if children.len() != 1 {
                    bail!(
                        "the raw floor runs uncontended, yet {dir} has {} children",
                        children.len()
                    );
                }
                Held::Path(format!("{dir}/n-{seq}"))
            }
            Subject::EtcdGo { etcd, dir, lease } => Held::Key(go_lock(etcd, dir, *lease).await?),
            Subject::ZkRecipe { zk, dir } => {
                let prefix = zk::LockPrefix::new_curator(dir, "lock-")?;
                let options = zk::LockOptions::new(zk::Acls::anyone_all())
                    .with_ancestor_options(zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))?;
                let lock = zk.lock(prefix, b"", options).await?;
                let path = lock.lock_path().to_owned();
                // Released below with an awaited delete, as the others are; dropping the
                // recipe's guard would delete in the background, unawaited.
                std::mem::forget(lock);
                Held::Path(path)
            }
            Subject::EtcdRaw { etcd, key, lease } | Subject::EtcdGuarded { etcd, key, lease } => {
                let guarded = matches!(self_kind, Kind::Guarded);
                let txn = etcd_client::Txn::new()
                    .when([etcd_client::Compare::create_revision(
                        key.clone(),
                        etcd_client::CompareOp::Equal,
                        0,
                    )])
                    .and_then([etcd_client::TxnOp::put(
                        key.clone(),
                        "",
                        Some(etcd_client::PutOptions::new().with_lease(*lease)),
                    )]);
                let resp = etcd.txn(txn).await?;
                if !resp.succeeded() {
                    bail!("the raw floor runs uncontended, yet {key} exists");
                }
                if guarded {
                    Held::Entry(
                        key.clone().into_bytes(),
                        resp.header().map(|h| h.revision()).unwrap_or(0),
                    )
                } else {
                    Held::Key(key.clone().into_bytes())
                }
            }
            Subject::EtcdShaped { etcd, key, lease } => {
                let dir = key.rsplit_once('/').map(|(d, _)| d).unwrap_or(key);
                let newest = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_sort(etcd_client::SortTarget::Create, etcd_client::SortOrder::Descend)
                    .with_limit(3);
                let txn = etcd_client::Txn::new()
                    .when([etcd_client::Compare::create_revision(
                        key.clone(),
                        etcd_client::CompareOp::Equal,
                        0,
                    )])
                    .and_then([
                        etcd_client::TxnOp::put(
                            key.clone(),
                            "",
                            Some(etcd_client::PutOptions::new().with_lease(*lease)),
                        ),
                        etcd_client::TxnOp::get(format!("{dir}/"), Some(newest)),
                    ]);
                let resp = etcd.txn(txn).await?;
                if !resp.succeeded() {
                    bail!("the raw requests run uncontended, yet {key} exists");
                }
                let created = resp.header().map(|h| h.revision()).unwrap_or(0);
                Held::Entry(key.clone().into_bytes(), created)
            }
            Subject::EtcdRecipe { etcd, name, lease } => {
                let resp = etcd
                    .lock(
                        name.clone(),
                        Some(etcd_client::LockOptions::new().with_lease(*lease)),
                    )
                    .await?;
                Held::Key(resp.key().to_vec())
            }
        })
    }

    pub async fn release(&mut self, held: Held) -> Result<()> {
        match (self, held) {
            (Subject::Coord { .. }, Held::Coord(guard)) => guard.release().await?,
            (
                Subject::ZkRaw { zk, .. } | Subject::ZkPipelined { zk, .. } | Subject::ZkRecipe { zk, .. },
                Held::Path(p),
            ) => zk.delete(&p, None).await?,
            (Subject::EtcdRaw { etcd, .. } | Subject::EtcdGo { etcd, .. }, Held::Key(k)) => {
                etcd.delete(k, None).await?;
            }
            (
                Subject::EtcdShaped { etcd, .. } | Subject::EtcdGuarded { etcd, .. },
                Held::Entry(k, created),
            ) => {
                let txn = etcd_client::Txn::new()
                    .when([etcd_client::Compare::create_revision(
                        k.clone(),
                        etcd_client::CompareOp::Equal,
                        created,
                    )])
                    .and_then([etcd_client::TxnOp::delete(k, None)]);
                if !etcd.txn(txn).await?.succeeded() {
                    bail!("the raw release found the key gone or made again");
                }
            }
            (Subject::EtcdRecipe { etcd, .. }, Held::Key(k)) => {
                etcd.unlock(k).await?;
            }
            _ => bail!("released with another subject's grant"),
        }
        Ok(())
    }

    pub fn stats(&self) -> Option<Stats> {
        match self {
            Subject::Coord { client, .. } => Some(client.stats()),
            _ => None,
        }
    }
}

/// Go's `concurrency.Mutex.Lock` in its request shapes: the join `Txn` (put the key
/// under the lease if absent, else read it; in both, the oldest key of the prefix); if
/// the oldest is not its own, waits for each key created before its own to go (the
/// newest of them, watched from the read's revision), then checks its key is still
/// there. Returns the key to delete.
async fn go_lock(etcd: &mut etcd_client::Client, dir: &str, lease: i64) -> Result<Vec<u8>> {
    use etcd_client::{Compare, CompareOp, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
    let key = format!("{dir}/{lease:x}");
    let prefix = format!("{dir}/");
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.clone(),
                "",
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            ),
            TxnOp::get(prefix.clone(), Some(first.clone())),
        ])
        .or_else([
            TxnOp::get(key.clone(), None),
            TxnOp::get(prefix.clone(), Some(first)),
        ]);
    let resp = etcd.txn(txn).await?;
    let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let gets: Vec<etcd_client::GetResponse> = resp
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => Some(g),
            _ => None,
        })
        .collect();
    let my_rev = if resp.succeeded() {
        header_rev
    } else {
        gets.first()
            .and_then(|g| g.kvs().first())
            .map(|kv| kv.create_revision())
            .context("own key gone")?
    };
    let owner = gets
        .last()
        .and_then(|g| g.kvs().first())
        .map(|kv| kv.create_revision());
    if owner.is_none_or(|o| o == my_rev) {
        return Ok(key.into_bytes());
    }
    // waitDeletes: the newest key created before ours, until none is left.
    loop {
        let last = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_max_create_revision(my_rev - 1);
        let r = etcd.get(prefix.clone(), Some(last)).await?;
        let Some(kv) = r.kvs().first() else { break };
        let rev = r.header().map(|h| h.revision()).unwrap_or(0);
        let ahead = kv.key().to_vec();
        let mut stream = etcd
            .watch(
                ahead,
                Some(etcd_client::WatchOptions::new().with_start_revision(rev + 1)),
            )
            .await?;
        'watch: while let Some(m) = stream.message().await? {
            if m.events().iter().any(|e| e.event_type() == EventType::Delete) {
                break 'watch;
            }
        }
    }
    let mine = etcd.get(key.clone(), None).await?;
    if mine.kvs().is_empty() {
        bail!("the Go-shaped lock's key is gone (its lease ended)");
    }
    Ok(key.into_bytes())
}

/// The lock-delay of the `coord-lock-delay` subject: long, so that a hand-over that
/// held off would show.
const LOCK_DELAY: Duration = Duration::from_secs(10);

/// The subjects a backend compares for lock `name` — coord first — each with its own
/// connection.
pub async fn subjects(t: &Target, name: &str, comparisons: bool) -> Result<Vec<Subject>> {
    let mut out = vec![Subject::Coord {
        client: t.coord().await?,
        name: name.to_owned(),
        delay: None,
    }];
    if !comparisons {
        return Ok(out);
    }
    // The same lock with a lock-delay, under a name of its own.
    out.push(Subject::Coord {
        client: t.coord().await?,
        name: format!("{name}-lock-delay"),
        delay: Some(LOCK_DELAY),
    });
    match t.backend {
        Backend::Mem => {}
        Backend::Zk => {
            let dir = format!("/coord-bench/{name}");
            let raw = t.zk().await?;
            zk_mkdir(&raw, &format!("{dir}/raw")).await?;
            out.push(Subject::ZkRaw {
                zk: raw,
                dir: format!("{dir}/raw"),
            });
            let pipelined = t.zk().await?;
            zk_mkdir(&pipelined, &format!("{dir}/pipelined")).await?;
            out.push(Subject::ZkPipelined {
                zk: pipelined,
                dir: format!("{dir}/pipelined"),
            });
            out.push(Subject::ZkRecipe {
                zk: t.zk().await?,
                dir: format!("{dir}/recipe"),
            });
        }
        Backend::Etcd => {
            for recipe in [false, true] {
                let mut etcd = t.etcd().await?;
                let lease = etcd.lease_grant(300, None).await?.id();
                if !recipe {
                    let mut guarded = t.etcd().await?;
                    let lease = guarded.lease_grant(300, None).await?.id();
                    out.push(Subject::EtcdGuarded {
                        etcd: guarded,
                        key: format!("coord-bench/{name}/guarded/{lease:x}"),
                        lease,
                    });
                    let mut go = t.etcd().await?;
                    let lease = go.lease_grant(300, None).await?.id();
                    out.push(Subject::EtcdGo {
                        etcd: go,
                        dir: format!("coord-bench/{name}/go"),
                        lease,
                    });
                    let mut shaped = t.etcd().await?;
                    let lease = shaped.lease_grant(300, None).await?.id();
                    out.push(Subject::EtcdShaped {
                        etcd: shaped,
                        key: format!("coord-bench/{name}/shaped/{lease:x}"),
                        lease,
                    });
                }
                out.push(if recipe {
                    Subject::EtcdRecipe {
                        etcd,
                        name: format!("coord-bench/{name}/recipe"),
                        lease,
                    }
                } else {
                    Subject::EtcdRaw {
                        etcd,
                        key: format!("coord-bench/{name}/raw/{lease:x}"),
                        lease,
                    }
                });
            }
        }
    }
    Ok(out)
}

fn sum(stats: &[Stats]) -> Stats {
    stats.iter().fold(Stats::default(), |a, s| Stats {
        reads: a.reads + s.reads,
        writes: a.writes + s.writes,
        txns: a.txns + s.txns,
        watches_set: a.watches_set + s.watches_set,
        watch_events: a.watch_events + s.watch_events,
        session_requests: a.session_requests + s.session_requests,
        session_transitions: a.session_transitions + s.session_transitions,
        wakeups: a.wakeups + s.wakeups,
    })
}

/// The sum of the coord subjects' counters now.
fn coord_stats(subjects: &[Subject]) -> Stats {
    sum(&subjects.iter().filter_map(Subject::stats).collect::<Vec<_>>())
}

/// `lock`: uncontended cycles (lock, release) for about `seconds` per subject, in
/// `blocks` interleaved blocks.
pub async fn uncontended(t: &Target, seconds: f64, blocks: usize) -> Result<Vec<Row>> {
    let name = unique("lock");
    let mut subjects = subjects(t, &name, true).await?;
    // Warm up connections, directories and caches.
    for s in subjects.iter_mut() {
        for _ in 0..50 {
            let held = s.acquire().await?;
            s.release(held).await?;
        }
    }
    let per_block = Duration::from_secs_f64(seconds / blocks as f64);
    let n = subjects.len();
    let mut lat = vec![Latencies::default(); n];
    let mut acq = vec![Latencies::default(); n];
    let mut spent = vec![Duration::ZERO; n];
    let mut cpu = vec![Duration::ZERO; n];
    let mut switches = vec![0u64; n];
    let mut requests = vec![Stats::default(); n];
    for _ in 0..blocks {
        for (i, s) in subjects.iter_mut().enumerate() {
            let before = s.stats();
            let cpu_before = cpu_time();
            let switches_before = voluntary_switches();
            let start = Instant::now();
            while start.elapsed() < per_block {
                let t0 = Instant::now();
                let held = s.acquire().await?;
                acq[i].push(t0.elapsed());
                s.release(held).await?;
                lat[i].push(t0.elapsed());
            }
            spent[i] += start.elapsed();
            cpu[i] += cpu_time().saturating_sub(cpu_before);
            switches[i] += voluntary_switches().saturating_sub(switches_before);
            if let (Some(b), Some(a)) = (before, s.stats()) {
                requests[i] = sum(&[requests[i], a.since(&b)]);
            }
        }
    }
    let mut rows = Vec::new();
    for (i, s) in subjects.iter().enumerate() {
        let cycles = lat[i].len() as f64;
        let mut row = Row::new("lock", t.name(), s.label())
            .with("cycles_per_s", cycles / spent[i].as_secs_f64())
            .with("p50_ms", lat[i].ms(0.5))
            .with("p99_ms", lat[i].ms(0.99))
            .with("acquire_p50_ms", acq[i].ms(0.5))
            .with("cpu_us_per_cycle", cpu[i].as_secs_f64() * 1e6 / cycles.max(1.0))
            .with(
                "voluntary_switches_per_cycle",
                switches[i] as f64 / cycles.max(1.0),
            );
        let per_cycle = match s {
            Subject::Coord { .. } => requests[i].data_requests() as f64 / cycles,
            Subject::ZkRaw { .. } | Subject::ZkPipelined { .. } => 3.0,
            Subject::EtcdRaw { .. } | Subject::EtcdShaped { .. } | Subject::EtcdGo { .. } => 2.0,
            _ => f64::NAN,
        };
        if !per_cycle.is_nan() {
            row.set("requests_per_cycle", per_cycle);
        }
        rows.push(row);
    }
    add_ratios(&mut rows, "cycles_per_s");
    Ok(rows)
}

/// Adds `vs_<subject>` (coord's `metric` over each other subject's) to coord's row.
pub fn add_ratios(rows: &mut [Row], metric: &str) {
    let Some(coord) = rows
        .iter()
        .find(|r| r.subject == "coord")
        .and_then(|r| r.get(metric))
    else {
        return;
    };
    let others: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.subject != "coord")
        .filter_map(|r| Some((r.subject.clone(), r.get(metric)?)))
        .collect();
    if let Some(row) = rows.iter_mut().find(|r| r.subject == "coord") {
        for (subject, v) in others {
            row.set(&format!("x_{subject}"), coord / v);
        }
    }
}

/// What one block of contention measured.
#[derive(Default)]
struct Block {
    grants: u64,
    handoffs: Latencies,
    elapsed: Duration,
    /// The process's CPU time over the block (the client side: servers run apart).
    cpu: Duration,
}

/// Runs `workers` (each its own connection) on one lock for `dur`: every worker loops
/// lock, release. A hand-off is timed from the holder's release starting to the next
/// holder's `lock` returning (a worker that takes the lock again after itself is a grant
/// but no hand-off).
async fn contend(workers: Vec<Subject>, dur: Duration) -> Result<(Block, Vec<Subject>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let last: Arc<Mutex<Option<(usize, Instant)>>> = Arc::new(Mutex::new(None));
    let cpu_before = cpu_time();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (me, mut w) in workers.into_iter().enumerate() {
        let (stop, last) = (stop.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            let mut handoffs = Latencies::default();
            while !stop.load(Ordering::Relaxed) {
                let held = w.acquire().await?;
                let now = Instant::now();
                {
                    let mut l = last.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((prev, at)) = l.take()
                        && prev != me
                    {
                        handoffs.push(now - at);
                    }
                    grants += 1;
                    *l = Some((me, Instant::now()));
                }
                w.release(held).await?;
            }
            anyhow::Ok((grants, handoffs, w))
        }));
    }
    tokio::time::sleep(dur).await;
    stop.store(true, Ordering::Relaxed);
    let mut block = Block::default();
    let mut back = Vec::new();
    for t in tasks {
        let (g, h, w) = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .context("a contender did not stop within 60 s")???;
        block.grants += g;
        block.handoffs.extend(h);
        back.push(w);
    }
    block.elapsed = start.elapsed();
    block.cpu = cpu_time().saturating_sub(cpu_before);
    Ok((block, back))
}

/// `lock-contended`: `clients` contenders per subject on one lock, interleaved blocks.
pub async fn contended(t: &Target, clients: usize, seconds: f64, blocks: usize) -> Result<Vec<Row>> {
    let name = unique("contended");
    // One set of workers per subject, `clients` connections each.
    let mut sets: Vec<Vec<Subject>> = Vec::new();
    for _ in 0..clients {
        for (i, s) in subjects(t, &name, true).await?.into_iter().enumerate() {
            if sets.len() <= i {
                sets.push(Vec::new());
            }
            sets[i].push(s);
        }
    }
    // Each raw etcd worker needs its own key; the raw floor is uncontended by design and
    // has no contended form, so it is left out here.
    sets.retain(|s| {
        !matches!(
            s.first(),
            Some(
                Subject::ZkRaw { .. }
                    | Subject::ZkPipelined { .. }
                    | Subject::EtcdRaw { .. }
                    | Subject::EtcdShaped { .. }
                    | Subject::EtcdGuarded { .. }
            )
        )
    });
    let per_block = Duration::from_secs_f64(seconds / blocks as f64);
    let mut totals: Vec<Block> = sets.iter().map(|_| Block::default()).collect();
    let mut stats = vec![Stats::default(); sets.len()];
    // Warm-up.
    for set in sets.iter_mut() {
        let (_, back) = contend(std::mem::take(set), Duration::from_millis(200)).await?;
        *set = back;
    }
    for _ in 0..blocks {
        for (i, set) in sets.iter_mut().enumerate() {
            let before = coord_stats(set);
            let (b, back) = contend(std::mem::take(set), per_block).await?;
            *set = back;
            stats[i] = sum(&[stats[i], coord_stats(set).since(&before)]);
            totals[i].grants += b.grants;
            totals[i].handoffs.extend(b.handoffs);
            totals[i].elapsed += b.elapsed;
            totals[i].cpu += b.cpu;
        }
    }
    let mut rows = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let b = &totals[i];
        let label = set.first().map(Subject::label).unwrap_or("?");
        let mut row = Row::new("lock-contended", t.name(), label)
            .with("clients", clients as f64)
            .with("grants_per_s", b.grants as f64 / b.elapsed.as_secs_f64())
            .with("handoff_p50_ms", b.handoffs.ms(0.5))
            .with("handoff_p99_ms", b.handoffs.ms(0.99))
            .with(
                "cpu_us_per_grant",
                b.cpu.as_secs_f64() * 1e6 / b.grants.max(1) as f64,
            );
        if label.starts_with("coord") {
            let g = b.grants.max(1) as f64;
            row.set("requests_per_grant", stats[i].data_requests() as f64 / g);
            row.set("wakeups_per_grant", stats[i].wakeups as f64 / g);
        }
        rows.push(row);
    }
    add_ratios(&mut rows, "grants_per_s");
    Ok(rows)
}
