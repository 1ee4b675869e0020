//! `tenfold`: the fleet's sizes, then ten times them — whether anything has a cliff.
//!
//! Each measure runs at a size `n` and at `10 n` on the same backend, one after the
//! other, and reports its time (and, where the client holds per-item state, its heap)
//! per item at both sizes and their ratio: 1 when each item costs the same at both
//! sizes, 10 when an item costs as much as every item did at the smaller size (an
//! O(N) step per item: a cliff).
//!
//! - `names`: one client, 64 tasks, every one of `n` distinct lock names locked and
//!   released once (per-entity locks, each name's first use): time per name, and the
//!   heap the process still holds afterwards (all released: nothing per name — judged
//!   as the bytes kept per name added from the smaller size to the larger);
//! - `instances`: `n` service instances registered by 200 clients and followed by one
//!   service cache (as `registry-scale`): time per instance until the cache sees all,
//!   heap per instance in the cache;
//! - `watchers`: `n` config watches of one key over 8 clients, one put at a time until
//!   every watch has it: time until all have it per watcher, heap per watch;
//! - `items`: `n` items pushed into one queue by 16 tasks, then taken one at a time:
//!   time per push and per take, requests per take.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::ConfigStore as _;
use futures::StreamExt;

use crate::measure::{Latencies, Row};
use crate::scale;
use crate::target::{Target, unique};
use crate::waiters::clients;

/// The smaller size of each measure (the larger is ten times it).
#[derive(Clone, Copy)]
pub struct Sizes {
    pub names: usize,
    pub instances: usize,
    /// Clients registering the instances (the same at both sizes).
    pub members: usize,
    pub watchers: usize,
    pub items: usize,
}

/// The longest one measure at one size may take before it counts as not finished.
const MEASURE_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The measures, by name.
pub const MEASURES: [&str; 4] = ["names", "instances", "watchers", "items"];

/// Every measure whose name `want` accepts, at `s` and ten times `s`, on `t`: for each,
/// a row per size (subjects `1x` and `10x`), the `10x` row holding the ratios
/// (`x_1x_<metric>`: its per-item figure over the `1x` row's).
///
/// # Errors
///
/// A measure that fails ends the run, unless `keep_going`: then its size gets a row
/// with `did_not_finish` = 1, the error is in the returned list, and the next measure
/// runs.
pub async fn run(
    t: &Target,
    s: Sizes,
    want: impl Fn(&str) -> bool,
    keep_going: bool,
) -> Result<(Vec<Row>, Vec<String>)> {
    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    for m in MEASURES.into_iter().filter(|m| want(m)) {
        let mut pair = Vec::new();
        // A warm-up at the smaller size first, not reported: the servers (a JVM) and the
        // process warm, so that the smaller size is not the slower for it.
        for (subject, k) in [("warm-up", 1), ("1x", 1), ("10x", 10)] {
            eprintln!("tenfold: {m} ×{k} on {} ({subject})", t.name());
            let measure = async {
                // The server may still be busy with the last measure's end (on etcd,
                // 100,000 instances' keys deleted with their clients' leases): until it
                // answers a new client again, within the limit.
                until_answering(t).await?;
                match m {
                    "names" => names(t, s.names * k).await,
                    "instances" => instances(t, s.instances * k, s.members).await,
                    "watchers" => watchers(t, s.watchers * k).await,
                    _ => items(t, s.items * k).await,
                }
            };
            let measured = tokio::time::timeout(MEASURE_LIMIT, measure)
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("did not finish within {MEASURE_LIMIT:?}")))
                .with_context(|| format!("tenfold-{m} ×{k} on {}", t.name()));
            let mut row = match measured {
                Ok(row) => row,
                Err(e) if keep_going => {
                    eprintln!("{e:#}");
                    failures.push(format!("{e:#}"));
                    rows.push(
                        Row::new(&format!("tenfold-{m}"), t.name(), subject).with("did_not_finish", 1.0),
                    );
                    break;
                }
                Err(e) => return Err(e),
            };
            if subject == "warm-up" {
                continue;
            }
            row.scenario = format!("tenfold-{m}");
            row.subject = subject.to_owned();
            pair.push(row);
        }
        if let [one, ten] = pair.as_mut_slice() {
            let ratios: Vec<(String, f64)> = ten
                .metrics
                .iter()
                .filter(|(k, _)| k.contains("_per_"))
                .filter_map(|(k, v)| {
                    let base = one.get(k)?;
                    (base > 0.0).then(|| (format!("x_1x_{k}"), v / base))
                })
                .collect();
            for (k, v) in ratios {
                ten.set(&k, v);
            }
            // What the client keeps once every name is released must not grow with the
            // names: the bytes kept per name added (judged absolutely, not as a ratio).
            if let (Some(k1), Some(k10), Some(n1), Some(n10)) = (
                one.get("heap_bytes_kept"),
                ten.get("heap_bytes_kept"),
                one.get("n"),
                ten.get("n"),
            ) {
                ten.set("heap_bytes_kept_per_name_added", (k10 - k1) / (n10 - n1));
            }
        }
        // A row that did not finish goes after the size that did.
        let failed = rows.pop_if(|r: &mut Row| r.scenario == format!("tenfold-{m}"));
        rows.extend(pair);
        rows.extend(failed);
    }
    Ok((rows, failures))
}

/// Waits until a new client of `t` connects (each try bounded by its connect timeout).
async fn until_answering(t: &Target) -> Result<()> {
    let mut tries = 0;
    loop {
        match t.coord().await {
            Ok(c) => {
                let _ = c.close().await;
                return Ok(());
            }
            Err(e) if tries < 12 => {
                tries += 1;
                eprintln!("tenfold: the server does not answer yet ({e:#}); again in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Err(e) => return Err(e.context("the server did not answer a new client for a minute")),
        }
    }
}

/// `names`: each of `n` names locked and released once, 64 at a time, by one client.
async fn names(t: &Target, n: usize) -> Result<Row> {
    const TASKS: usize = 64;
    let base = unique("tenfold-names");
    let client = t.coord().await?;
    let heap_before = crate::heap_bytes();
    let before = client.stats();
    let start = Instant::now();
    let cycled = scale::lock_each_once(&client, &base, n, TASKS).await;
    let elapsed = start.elapsed();
    cycled?;
    let requests = client.stats().since(&before).data_requests();
    let kept = crate::heap_bytes().saturating_sub(heap_before);
    let _ = client.close().await;
    Ok(Row::new("", t.name(), "")
        .with("n", n as f64)
        .with("us_per_name", elapsed.as_secs_f64() * 1e6 / n as f64)
        .with("requests_per_name", requests as f64 / n as f64)
        .with("heap_bytes_kept", kept as f64))
}

/// `instances`: `registry-scale` at `n` instances.
async fn instances(t: &Target, n: usize, members: usize) -> Result<Row> {
    let rows = scale::registry_scale(t, n, members).await?;
    let r = rows.into_iter().next().context("registry-scale gave no row")?;
    let per = |m: &str| r.get(m).map(|v| v * 1e6 / n as f64);
    let mut row = Row::new("", t.name(), "").with("n", n as f64);
    if let Some(v) = per("registered_s") {
        row.set("us_per_instance_registered", v);
    }
    if let Some(v) = per("all_seen_s") {
        row.set("us_per_instance_until_all_seen", v);
    }
    if let Some(v) = r.get("heap_kib_per_instance") {
        row.set("heap_kib_per_instance", v);
    }
    if let (Some(s), Some(g)) = (r.get("gone_seen_s"), r.get("gone")) {
        row.set("us_per_instance_until_gone_seen", s * 1e6 / g.max(1.0));
    }
    Ok(row)
}

/// `watchers`: `n` watches of one key over 8 clients; 5 puts, each until every watch
/// has it.
async fn watchers(t: &Target, n: usize) -> Result<Row> {
    const CLIENTS: usize = 8;
    const PUTS: usize = 5;
    let key = format!("{}/key", unique("tenfold-watch"));
    let writer = t.coord().await?;
    writer.put(&key, b"0".to_vec()).await?;
    let readers = clients(&t.url, CLIENTS, "connecting watchers").await?;
    let heap_before = crate::heap_bytes();
    let start = Instant::now();
    let mut streams = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = coord::ConfigStore::watch(&readers[i % CLIENTS], &key).await?;
        s.next().await.context("a watch ended before its snapshot")??;
        streams.push(s);
    }
    let set_up = start.elapsed();
    let heap = crate::heap_bytes().saturating_sub(heap_before);
    let mut all = Latencies::default();
    for put in 1..=PUTS {
        let value = put.to_string().into_bytes();
        let start = Instant::now();
        writer.put(&key, value.clone()).await?;
        let value = Arc::new(value);
        let waits = streams.iter_mut().map(|s| {
            let value = value.clone();
            async move { scale::until_put(s, &value, Duration::from_secs(60)).await }
        });
        for r in futures::future::join_all(waits).await {
            r?;
        }
        all.push(start.elapsed());
    }
    drop(streams);
    for c in readers.iter().chain([&writer]) {
        let _ = c.close().await;
    }
    Ok(Row::new("", t.name(), "")
        .with("n", n as f64)
        .with("us_per_watch_set_up", set_up.as_secs_f64() * 1e6 / n as f64)
        .with(
            "us_per_watcher_until_all_have_a_put",
            all.ms(0.5) * 1e3 / n as f64,
        )
        .with("heap_kib_per_watch", heap as f64 / 1024.0 / n as f64))
}

/// `items`: `n` items pushed into one queue by 16 tasks, then taken one at a time.
async fn items(t: &Target, n: usize) -> Result<Row> {
    const PUSHERS: usize = 16;
    let max = u32::try_from(n)
        .ok()
        .filter(|m| *m <= coord::MAX_QUEUE_ITEMS)
        .with_context(|| format!("{n} items: past the queue's limit of {}", coord::MAX_QUEUE_ITEMS))?;
    let client = t.coord().await?;
    let queue = client.queue(&unique("tenfold-queue"), max)?;
    let start = Instant::now();
    let pushed: Vec<coord::Result<u64>> = futures::stream::iter(0..n)
        .map(|i| {
            let queue = queue.clone();
            async move { queue.push(format!("item {i}").into_bytes()).await }
        })
        .buffer_unordered(PUSHERS)
        .collect()
        .await;
    let push_time = start.elapsed();
    pushed.into_iter().collect::<coord::Result<Vec<u64>>>()?;
    let before = client.stats();
    let start = Instant::now();
    for taken in 0..n {
        if queue.try_take().await?.is_none() {
            bail!("the queue was empty after {taken} of {n} takes");
        }
    }
    let take_time = start.elapsed();
    let requests = client.stats().since(&before).data_requests();
    let _ = client.close().await;
    Ok(Row::new("", t.name(), "")
        .with("n", n as f64)
        .with("us_per_push", push_time.as_secs_f64() * 1e6 / n as f64)
        .with("us_per_take", take_time.as_secs_f64() * 1e6 / n as f64)
        .with("requests_per_take", requests as f64 / n as f64))
}
