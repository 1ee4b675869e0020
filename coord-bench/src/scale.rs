//! What a fleet does, beside the raw floor of the same client library:
//!
//! - `many-names`: one client, 64 tasks locking and releasing thousands of distinct
//!   names (per-entity locks), beside the same cycles sent raw over one session;
//! - `storm`: a config cache under a steady write rate on one prefix — delivery
//!   latency, peak heap, whether it ends on the final state, views out of sync;
//! - `fan-out`: many watches of one key — one put until every watch has it, beside one
//!   raw watch of the same client library;
//! - `registry-scale`: thousands of instances registered by fewer clients — until a
//!   service cache sees all, heap per instance in the cache, until it sees a tenth go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::{ConfigEvent, ConfigStore as _, Lock as _, Registry as _, ServiceInstance};
use futures::StreamExt;
use tokio::sync::Mutex;
use zookeeper_client as zk;

use crate::lock::Subject;
use crate::measure::{Latencies, Row, cpu_time};
use crate::target::{Backend, Target, unique, zk_mkdir};
use crate::waiters::clients;

/// `many-names`: 64 tasks over one client cycle through `names` distinct lock names
/// (task `i` takes names `i`, `i + 64`, …, each its own subject), coord then the raw
/// floor over one session, in alternating blocks.
pub async fn many_names(t: &Target, names: usize, seconds: f64) -> Result<Vec<Row>> {
    const TASKS: usize = 64;
    let base = unique("names");
    let client = t.coord().await?;
    let names_of = |task: usize| -> Vec<String> {
        (task..names)
            .step_by(TASKS)
            .map(|i| format!("{base}/n{i}"))
            .collect()
    };
    let raw = match t.backend {
        Backend::Mem => None,
        Backend::Zk => {
            let z = t.zk().await?;
            zk_mkdir(&z, &format!("/coord-bench/{base}")).await?;
            // The raw floor's lock directories, made before timing (coord makes its own).
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            let made: Vec<std::result::Result<_, zk::Error>> = futures::stream::iter(0..names)
                .map(|i| {
                    let (z, options) = (&z, &options);
                    let path = format!("/coord-bench/{base}/n{i}");
                    async move { z.create(&path, b"", options).await.map(|_| ()) }
                })
                .buffer_unordered(256)
                .collect()
                .await;
            for m in made {
                match m {
                    Ok(()) | Err(zk::Error::NodeExists) => {}
                    Err(e) => return Err(e).context("making the raw floor's lock directories"),
                }
            }
            Some(RawSession::Zk(z, format!("/coord-bench/{base}")))
        }
        Backend::Etcd => {
            let mut e = t.etcd().await?;
            let lease = e.lease_grant(30, None).await?.id();
            Some(RawSession::Etcd(
                Box::new(e),
                lease,
                format!("coord-bench/{base}"),
            ))
        }
    };
    // Warm-up: every name locked once by coord (its lock directories made, as the raw
    // floor's are above), so the blocks time steady per-entity locking.
    lock_each_once(&client, &base, names, TASKS).await?;
    let before = client.stats();
    let mut coord_cycles = 0usize;
    let blocks = 3;
    let per_block = seconds / blocks as f64;
    let (mut coord_rate, mut raw_rate) = (Vec::new(), Vec::new());
    let (mut coord_lat, mut raw_lat) = (Latencies::default(), Latencies::default());
    // The process's CPU time in each subject's blocks: the client side alone.
    let (mut coord_cpu, mut raw_cpu) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..blocks {
        let subjects = (0..TASKS)
            .map(|task| Rotating::coord(client.clone(), names_of(task)))
            .collect();
        let cpu_before = cpu_time();
        let (r, l) = cycle_rotating(subjects, per_block).await?;
        coord_cpu += cpu_time().saturating_sub(cpu_before);
        coord_rate.push(r);
        coord_cycles += l.len();
        coord_lat.extend(l);
        if let Some(raw) = &raw {
            let subjects = (0..TASKS).map(|task| raw.rotating(task, TASKS, names)).collect();
            let cpu_before = cpu_time();
            let (r, l) = cycle_rotating(subjects, per_block).await?;
            raw_cpu += cpu_time().saturating_sub(cpu_before);
            raw_rate.push(r);
            raw_lat.extend(l);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut rows = vec![
        Row::new("many-names", t.name(), "coord")
            .with("names", names as f64)
            .with("tasks", TASKS as f64)
            .with("cycles_per_s", mean(&coord_rate))
            .with("p50_ms", coord_lat.ms(0.5))
            .with("p99_ms", coord_lat.ms(0.99))
            .with(
                "cpu_us_per_cycle",
                coord_cpu.as_secs_f64() * 1e6 / coord_lat.len().max(1) as f64,
            )
            .with(
                "requests_per_cycle",
                client.stats().since(&before).data_requests() as f64 / coord_cycles.max(1) as f64,
            ),
    ];
    if raw.is_some() {
        rows.push(
            Row::new("many-names", t.name(), "raw-floor")
                .with("names", names as f64)
                .with("tasks", TASKS as f64)
                .with("cycles_per_s", mean(&raw_rate))
                .with("p50_ms", raw_lat.ms(0.5))
                .with("p99_ms", raw_lat.ms(0.99))
                .with(
                    "cpu_us_per_cycle",
                    raw_cpu.as_secs_f64() * 1e6 / raw_lat.len().max(1) as f64,
                ),
        );
        let ratio = mean(&coord_rate) / mean(&raw_rate);
        rows[0].set("x_raw-floor", ratio);
    }
    let _ = client.close().await;
    Ok(rows)
}

/// Locks and releases each of the names `<base>/n0` … `<base>/n<n-1>` once through
/// `client`, `tasks` at a time.
pub async fn lock_each_once(client: &coord::Client, base: &str, n: usize, tasks: usize) -> coord::Result<()> {
    let cycled: Vec<coord::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, name) = (client.clone(), format!("{base}/n{i}"));
            async move { client.lock(&name).await?.release().await }
        })
        .buffer_unordered(tasks)
        .collect()
        .await;
    cycled.into_iter().collect()
}

/// The raw floor's one session.
enum RawSession {
    Zk(zk::Client, String),
    Etcd(Box<etcd_client::Client>, i64, String),
}

impl RawSession {
    fn rotating(&self, task: usize, tasks: usize, names: usize) -> Rotating {
        let subjects = (task..names)
            .step_by(tasks)
            .map(|i| match self {
                RawSession::Zk(z, dir) => Subject::ZkRaw {
                    zk: z.clone(),
                    dir: format!("{dir}/n{i}"),
                },
                RawSession::Etcd(e, lease, dir) => Subject::EtcdRaw {
                    etcd: (**e).clone(),
                    key: format!("{dir}/n{i}"),
                    lease: *lease,
                },
            })
            .collect();
        Rotating { subjects, next: 0 }
    }
}

/// One task's subjects, one per name, taken in turn.
struct Rotating {
    subjects: Vec<Subject>,
    next: usize,
}

impl Rotating {
    fn coord(client: coord::Client, names: Vec<String>) -> Rotating {
        Rotating {
            subjects: names
                .into_iter()
                .map(|name| Subject::Coord {
                    client: client.clone(),
                    name,
                    delay: None,
                })
                .collect(),
            next: 0,
        }
    }
}

/// Each task cycles lock/release through its names until the time is up.
async fn cycle_rotating(tasks: Vec<Rotating>, seconds: f64) -> Result<(f64, Latencies)> {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for mut r in tasks {
        let done = done.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Latencies::default();
            if r.subjects.is_empty() {
                return anyhow::Ok(lat);
            }
            while Instant::now() < until {
                let i = r.next % r.subjects.len();
                r.next += 1;
                let s = &mut r.subjects[i];
                let t0 = Instant::now();
                let held = s.acquire().await?;
                s.release(held).await?;
                lat.push(t0.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut lat = Latencies::default();
    for h in handles {
        lat.extend(h.await.context("a task panicked")??);
    }
    Ok((
        done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64(),
        lat,
    ))
}

/// `storm`: one client writes `rate` puts per second round-robin over 16 keys of one
/// prefix for `seconds`, another follows the prefix with a config cache. Delivery is
/// from a put's acknowledgement to the cache's view holding that value (or a newer one
/// of the key); peak heap is the process's live heap above what it was before.
pub async fn storm(t: &Target, rate: f64, seconds: f64) -> Result<Vec<Row>> {
    const KEYS: usize = 16;
    let prefix = unique("storm");
    let (writer, reader) = (t.coord().await?, t.coord().await?);
    for k in 0..KEYS {
        writer.put(&format!("{prefix}/k{k}"), b"0".to_vec()).await?;
    }
    let cache = reader.config_cache(&prefix).await?;
    let mut rx = cache.subscribe();
    let heap_before = crate::heap_bytes();
    // Value n (rising) → when its put was acknowledged.
    let acked: Arc<Mutex<BTreeMap<u64, Instant>>> = Arc::default();
    let follower = {
        let (acked, prefix) = (acked.clone(), prefix.clone());
        tokio::spawn(async move {
            let mut seen = vec![0u64; KEYS];
            let (mut lat, mut out_of_sync, mut peak) = (Latencies::default(), 0u64, 0usize);
            loop {
                let view = rx.borrow_and_update().clone();
                let now = Instant::now();
                peak = peak.max(crate::heap_bytes());
                if !view.in_sync() {
                    out_of_sync += 1;
                }
                let acked = acked.lock().await;
                for (k, s) in seen.iter_mut().enumerate() {
                    let v: u64 = view
                        .get(&format!("{prefix}/k{k}"))
                        .and_then(|e| std::str::from_utf8(&e.value).ok()?.parse().ok())
                        .unwrap_or(0);
                    // Every value of this key from the last seen up to v is delivered now.
                    if v > *s {
                        for (_, at) in acked
                            .range(*s + 1..=v)
                            .filter(|(n, _)| (**n as usize) % KEYS == k)
                        {
                            lat.push(now.saturating_duration_since(*at));
                        }
                        *s = v;
                    }
                }
                drop(acked);
                if rx.changed().await.is_err() {
                    return (lat, out_of_sync, peak, seen);
                }
            }
        })
    };
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    let mut last = [0u64; KEYS];
    while start.elapsed().as_secs_f64() < seconds {
        ticker.tick().await;
        n += 1;
        let k = (n as usize) % KEYS;
        writer
            .put(&format!("{prefix}/k{k}"), n.to_string().into_bytes())
            .await?;
        acked.lock().await.insert(n, Instant::now());
        last[k] = n;
    }
    let written = n as f64 / start.elapsed().as_secs_f64();
    // The final state, then the cache's end.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut cache = cache;
    let final_ok = loop {
        let view = cache.view();
        let matches = (0..KEYS).all(|k| {
            view.get(&format!("{prefix}/k{k}"))
                .and_then(|e| std::str::from_utf8(&e.value).ok()?.parse::<u64>().ok())
                == Some(last[k])
        });
        if view.in_sync() && matches {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), cache.changed()).await;
    };
    drop(cache);
    let (lat, out_of_sync, peak, _) = follower.await.context("the follower panicked")?;
    let _ = writer.close().await;
    let _ = reader.close().await;
    if !final_ok {
        bail!("the cache never showed the final state");
    }
    Ok(vec![
        Row::new("storm", t.name(), "coord-cache")
            .with("writes_per_s", written)
            .with("seconds", seconds)
            .with("delivery_p50_ms", lat.ms(0.5))
            .with("delivery_p99_ms", lat.ms(0.99))
            .with("peak_heap_kib", peak.saturating_sub(heap_before) as f64 / 1024.0)
            .with("views_out_of_sync", out_of_sync as f64)
            .with("final_state", 1.0),
    ])
}

/// `fan-out`: `watchers` config watches of one key (spread over 8 clients), one put at a
/// time until every watch has delivered it; beside one raw watch of the same key.
pub async fn fan_out(t: &Target, watchers: usize, rounds: usize) -> Result<Vec<Row>> {
    const CLIENTS: usize = 8;
    let name = unique("fanout");
    let key = format!("{name}/key");
    let writer = t.coord().await?;
    writer.put(&key, b"0".to_vec()).await?;
    let readers = clients(&t.url, CLIENTS, "connecting watchers").await?;
    let mut streams = Vec::new();
    for i in 0..watchers {
        let mut s = coord::ConfigStore::watch(&readers[i % CLIENTS], &key).await?;
        // The snapshot first.
        s.next().await.context("the watch ended")??;
        streams.push(s);
    }
    let (all_lat, one_lat) = (
        Arc::new(Mutex::new(Latencies::default())),
        Arc::new(Mutex::new(Latencies::default())),
    );
    let mut raw_lat = Latencies::default();
    let stats_before: Vec<_> = readers.iter().map(|c| c.stats()).collect();
    for round in 1..=rounds {
        let value = round.to_string().into_bytes();
        let start = Instant::now();
        writer.put(&key, value.clone()).await?;
        let waits = streams.iter_mut().map(|s| {
            let value = value.clone();
            let one = one_lat.clone();
            async move {
                until_put(s, &value, Duration::from_secs(30)).await?;
                one.lock().await.push(start.elapsed());
                anyhow::Ok(())
            }
        });
        for r in futures::future::join_all(waits).await {
            r?;
        }
        all_lat.lock().await.push(start.elapsed());
    }
    // The watching clients' requests per put: one re-read per client with watches of
    // the key shared (ZooKeeper), none where events carry the value; one per watch if
    // each re-read on its own.
    let requests: u64 = readers
        .iter()
        .zip(&stats_before)
        .map(|(c, before)| c.stats().since(before).data_requests())
        .sum();
    let requests_per_put_per_client = requests as f64 / (rounds * CLIENTS) as f64;
    // The floor for as many watches: the same number of raw watches of one key over as
    // many connections of the same client library, one put at a time until every watch
    // has fired.
    let mut raw_all = Latencies::default();
    let mut raw_each = Latencies::default();
    match t.backend {
        Backend::Mem => {}
        Backend::Zk => {
            let mut conns = Vec::new();
            for _ in 0..CLIENTS {
                conns.push(t.zk().await?);
            }
            let path = format!("/coord-bench/{name}-many");
            zk_mkdir(&conns[0], &path).await?;
            for _ in 0..rounds {
                // One-shot data watches, armed before the clock starts.
                let mut watches = Vec::new();
                for i in 0..watchers {
                    let (_, _, w) = conns[i % CLIENTS].get_and_watch_data(&path).await?;
                    watches.push(w);
                }
                let start = Instant::now();
                conns[0].set_data(&path, b"x", None).await?;
                let fired = futures::future::join_all(watches.into_iter().map(|w| async move {
                    w.changed().await;
                    start.elapsed()
                }))
                .await;
                for d in fired {
                    raw_each.push(d);
                }
                raw_all.push(start.elapsed());
            }
        }
        Backend::Etcd => {
            let mut conns = Vec::new();
            for _ in 0..CLIENTS {
                conns.push(t.etcd().await?);
            }
            let k = format!("coord-bench/{name}-many");
            let mut streams = Vec::new();
            for i in 0..watchers {
                let mut stream = conns[i % CLIENTS].watch(k.clone(), None).await?;
                // The watch is created once its first response arrives.
                while !stream.message().await?.context("a raw watch ended")?.created() {}
                streams.push(stream);
            }
            for round in 0..rounds {
                let start = Instant::now();
                conns[0].put(k.clone(), round.to_string(), None).await?;
                let fired = futures::future::join_all(streams.iter_mut().map(|s| async move {
                    loop {
                        let resp = s.message().await?.context("a raw watch ended")?;
                        if !resp.events().is_empty() {
                            return anyhow::Ok(start.elapsed());
                        }
                    }
                }))
                .await;
                for d in fired {
                    raw_each.push(d?);
                }
                raw_all.push(start.elapsed());
            }
        }
    }
    // The raw floor: one watch of one key with the same client library.
    match t.backend {
        Backend::Mem => {}
        Backend::Zk => {
            let z = t.zk().await?;
            let path = format!("/coord-bench/{name}");
            zk_mkdir(&z, &path).await?;
            for _ in 0..rounds {
                let (_, _, w) = z.get_and_watch_data(&path).await?;
                let start = Instant::now();
                z.set_data(&path, b"x", None).await?;
                w.changed().await;
                raw_lat.push(start.elapsed());
            }
        }
        Backend::Etcd => {
            let mut e = t.etcd().await?;
            let k = format!("coord-bench/{name}");
            let mut stream = e.watch(k.clone(), None).await?;
            for round in 0..rounds {
                let start = Instant::now();
                e.put(k.clone(), round.to_string(), None).await?;
                loop {
                    let resp = stream.message().await?.context("the raw watch ended")?;
                    if resp.created() {
                        continue;
                    }
                    if !resp.events().is_empty() {
                        break;
                    }
                }
                raw_lat.push(start.elapsed());
            }
            drop(stream);
        }
    }
    drop(streams);
    for c in readers.iter().chain([&writer]) {
        let _ = c.close().await;
    }
    let (all, one) = (all_lat.lock().await, one_lat.lock().await);
    let mut rows = vec![
        Row::new("fan-out", t.name(), "coord")
            .with("watchers", watchers as f64)
            .with("delivery_p50_ms", one.ms(0.5))
            .with("delivery_p99_ms", one.ms(0.99))
            .with("all_delivered_p50_ms", all.ms(0.5))
            .with("requests_per_put_per_client", requests_per_put_per_client),
    ];
    if raw_each.len() > 0 {
        rows.push(
            Row::new("fan-out", t.name(), "raw-same-watches")
                .with("watchers", watchers as f64)
                .with("delivery_p50_ms", raw_each.ms(0.5))
                .with("delivery_p99_ms", raw_each.ms(0.99))
                .with("all_delivered_p50_ms", raw_all.ms(0.5)),
        );
    }
    if raw_lat.len() > 0 {
        rows.push(
            Row::new("fan-out", t.name(), "raw-one-watch")
                .with("watchers", 1.0)
                .with("delivery_p50_ms", raw_lat.ms(0.5))
                .with("delivery_p99_ms", raw_lat.ms(0.99)),
        );
    }
    Ok(rows)
}

/// Reads the watch `s` until it delivers a put of `value`, each event within `limit`.
pub async fn until_put(
    s: &mut futures::stream::BoxStream<'static, coord::Result<ConfigEvent>>,
    value: &[u8],
    limit: Duration,
) -> Result<()> {
    loop {
        let ev = tokio::time::timeout(limit, s.next())
            .await
            .with_context(|| format!("a watch saw nothing for {limit:?}"))?
            .context("a watch ended")??;
        if matches!(&ev, ConfigEvent::Put(e) if e.value == value) {
            return Ok(());
        }
    }
}

/// `registry-scale`: `instances` instances registered by `members` clients (each
/// registering its share), one service cache following them: until it sees all, heap
/// per instance it holds, until it sees a tenth of them go (their clients closed).
pub async fn registry_scale(t: &Target, instances: usize, members: usize) -> Result<Vec<Row>> {
    let members = members.clamp(10, instances);
    let service = unique("fleet");
    let url = t.url_with_session(30);
    let member_clients = clients(&url, members, "connecting members").await?;
    let watcher = t.coord().await?;
    let heap_before = crate::heap_bytes();
    let mut cache = watcher.service_cache(&service).await?;
    let start = Instant::now();
    let registered: Vec<coord::Result<coord::Registration>> = futures::stream::iter(0..instances)
        .map(|i| {
            let (c, service) = (&member_clients[i % members], service.clone());
            async move {
                c.register(
                    &service,
                    ServiceInstance::new(format!("i{i}"), format!("10.0.{}.{}:80", i / 256, i % 256)),
                )
                .await
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let registrations = registered.into_iter().collect::<coord::Result<Vec<_>>>()?;
    let registered_s = start.elapsed().as_secs_f64();
    wait_len(&mut cache, instances).await?;
    let all_seen = start.elapsed().as_secs_f64();
    let heap = crate::heap_bytes().saturating_sub(heap_before);
    // A tenth of the members' clients close: their instances go with their sessions.
    let gone_clients = members / 10;
    let gone: usize = (0..instances).filter(|i| i % members < gone_clients).count();
    let start = Instant::now();
    // Closed together: the time is the cache's, not the closes' one after another.
    futures::future::try_join_all(member_clients.iter().take(gone_clients).map(|c| c.close())).await?;
    wait_len(&mut cache, instances - gone).await?;
    let gone_seen = start.elapsed().as_secs_f64();
    drop(registrations);
    drop(cache);
    for c in member_clients.iter().chain([&watcher]) {
        let _ = c.close().await;
    }
    Ok(vec![
        Row::new("registry-scale", t.name(), "coord-cache")
            .with("instances", instances as f64)
            .with("clients", members as f64)
            .with("registered_s", registered_s)
            .with("all_seen_s", all_seen)
            .with("heap_kib_per_instance", heap as f64 / 1024.0 / instances as f64)
            .with("gone", gone as f64)
            .with("gone_seen_s", gone_seen),
    ])
}

async fn wait_len(cache: &mut coord::ServiceCache, want: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let view = cache.view();
        if view.in_sync() && view.len() == want {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("the service cache holds {} of {want} after 180 s", view.len());
        }
        let _ = tokio::time::timeout(left, cache.changed()).await;
    }
}
