//! `waiters`: N clients queued on one lock behind a holder, then passed through one by
//! one. Per hand-off cost and memory per queued contender must stay flat in N.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::Lock as _;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use crate::measure::{Latencies, Row, rss_bytes};
use crate::target::{Target, unique};

pub fn bar(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) = ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar
}

/// `n` coord clients to `url`, connected 32 at a time.
pub async fn clients(url: &str, n: usize, what: &str) -> Result<Vec<coord::Client>> {
    let bar = bar(n, what);
    let out: Vec<Result<coord::Client>> = futures::stream::iter(0..n)
        .map(|_| {
            let bar = bar.clone();
            async move {
                let c = coord::connect(url)
                    .await
                    .with_context(|| format!("cannot connect to {url}"));
                bar.inc(1);
                c
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    bar.finish_and_clear();
    out.into_iter().collect()
}

/// Waits until `done` holds for every client, polling (the benchmark's own bookkeeping,
/// not a library path).
pub async fn until_all(
    clients: &[coord::Client],
    what: &str,
    poll: Duration,
    done: impl Fn(&coord::Client) -> bool,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !clients.iter().all(&done) {
        if Instant::now() > deadline {
            bail!("not every client {what} within 300 s");
        }
        tokio::time::sleep(poll).await;
    }
    Ok(())
}

/// The clients' counters once none of their data requests and wake-ups moved for 100 ms
/// (at most 60 s; the sessions' own keep-alives go on and are not looked at).
async fn settled(clients: &[coord::Client]) -> Result<Vec<coord::Stats>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let quiet = |s: &coord::Stats| (s.data_requests(), s.wakeups);
    let mut last: Vec<coord::Stats> = clients.iter().map(|c| c.stats()).collect();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now: Vec<coord::Stats> = clients.iter().map(|c| c.stats()).collect();
        if now.iter().map(quiet).eq(last.iter().map(quiet)) {
            return Ok(now);
        }
        if Instant::now() > deadline {
            bail!("the queued waiters' requests did not settle within 60 s");
        }
        last = now;
    }
}

pub async fn run(t: &Target, n: usize) -> Result<Vec<Row>> {
    if n == 0 {
        bail!("--waiters must be at least 1");
    }
    // Long sessions: many idle clients' keep-alives would otherwise load the server.
    let url = t.url_with_session(30);
    let name = unique("waiters");
    let holder = coord::connect(&url).await?;
    let waiters = clients(&url, n, "connecting waiters").await?;
    let guard = holder.lock(&name).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = rss_bytes();
    let heap_before = crate::heap_bytes();
    let last: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    // Queued one after another (each waits until the one before it watches its
    // predecessor), so that the figure is what a queued contender keeps, not the
    // transient peak of a thousand joins read at once.
    let mut tasks = Vec::new();
    let queueing = bar(n, "queueing");
    for queued in &waiters {
        let (name, last, c) = (name.clone(), last.clone(), queued.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock(&name).await?;
            let now = Instant::now();
            let handoff = last
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace(Instant::now())
                .map(|at| now - at);
            g.release().await?;
            anyhow::Ok((handoff, Instant::now()))
        }));
        until_all(
            std::slice::from_ref(queued),
            "queued",
            Duration::from_micros(250),
            |c| c.stats().watches_set >= 1,
        )
        .await?;
        queueing.inc(1);
    }
    queueing.finish_and_clear();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_after = rss_bytes();
    let heap_after = crate::heap_bytes();
    // The counts start once the queued waiters are quiet: a waiter counts as queued when
    // its watch request leaves, and on etcd a read covering the watch's start follows
    // the watch's answer — on a loaded machine, later than any fixed sleep.
    let before = settled(&waiters).await?;
    let start = Instant::now();
    *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(start);
    guard.release().await?;
    let bar = bar(n, "passing through");
    let mut handoffs = Latencies::default();
    let mut end = start;
    for task in tasks {
        let (h, done) = tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .context("the queue did not pass within 300 s")???;
        if let Some(h) = h {
            handoffs.push(h);
        }
        end = end.max(done);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let total = end - start;
    let spent = waiters
        .iter()
        .zip(&before)
        .map(|(c, b)| c.stats().since(b))
        .fold((0u64, 0u64), |(w, r), s| (w + s.wakeups, r + s.reads));
    for c in waiters.iter().chain([&holder]) {
        let _ = c.close().await;
    }
    let rss_per = (rss_after.saturating_sub(rss_before)) as f64 / n as f64 / 1024.0;
    Ok(vec![
        Row::new("waiters", t.name(), "coord")
            .with("waiters", n as f64)
            .with("pass_through_s", total.as_secs_f64())
            .with("per_handoff_ms", total.as_secs_f64() * 1e3 / n as f64)
            .with("handoff_p50_ms", handoffs.ms(0.5))
            .with("handoff_p99_ms", handoffs.ms(0.99))
            .with("wakeups_per_release", spent.0 as f64 / n as f64)
            .with("reads_per_handoff", spent.1 as f64 / n as f64)
            .with("rss_kib_per_waiter", rss_per)
            .with(
                "heap_kib_per_waiter",
                heap_after.saturating_sub(heap_before) as f64 / n as f64 / 1024.0,
            ),
    ])
}

/// `waiters-shared`: `n` contenders queued on one lock over `connections` clients
/// (a client's contenders for one name wait in its local queue; one of them at a time
/// has an entry on the server): the memory a queued contender itself keeps, without a
/// connection of its own, and the pass-through time.
pub async fn shared(t: &Target, n: usize, connections: usize) -> Result<Vec<Row>> {
    if n == 0 || connections == 0 {
        bail!("shared waiters need at least one waiter and one connection");
    }
    let url = t.url_with_session(30);
    let name = unique("waiters-shared");
    let holder = coord::connect(&url).await?;
    let clients = clients(&url, connections, "connecting clients").await?;
    let guard = holder.lock(&name).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let heap_before = crate::heap_bytes();
    let mut tasks = Vec::new();
    for i in 0..n {
        let (name, c) = (name.clone(), clients[i % connections].clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock(&name).await?;
            g.release().await?;
            anyhow::Ok(Instant::now())
        }));
        // Queued one after another, as in `waiters-N`.
        tokio::task::yield_now().await;
    }
    // Every contender queued: the ones with an entry watch the one ahead.
    until_all(&clients, "queued", Duration::from_millis(1), |c| {
        c.stats().watches_set >= 1
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let heap_after = crate::heap_bytes();
    let start = Instant::now();
    guard.release().await?;
    let mut end = start;
    for task in tasks {
        let done = tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .context("the queue did not pass within 300 s")???;
        end = end.max(done);
    }
    for c in clients.iter().chain([&holder]) {
        let _ = c.close().await;
    }
    let total = end - start;
    Ok(vec![
        Row::new("waiters-shared", t.name(), "coord")
            .with("waiters", n as f64)
            .with("connections", connections as f64)
            .with("per_handoff_ms", total.as_secs_f64() * 1e3 / n as f64)
            .with(
                "heap_kib_per_waiter",
                heap_after.saturating_sub(heap_before) as f64 / n as f64 / 1024.0,
            ),
    ])
}
