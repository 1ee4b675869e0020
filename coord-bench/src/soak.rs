//! `soak`: mixed churn for a long time with faults — lock cycles on a few names (some
//! guards dropped instead of released), two contenders taking turns at one election,
//! registrations coming and going under a service cache, config puts under a config
//! cache — while every 10 s one churning client per backend is closed mid-operation and
//! replaced (the injected fault: its errors are expected). Every backend runs at once in
//! one process; sampled each second: the process's resident memory, live tokio tasks and
//! open file descriptors, reported as slopes over the second half of the run (after
//! warm-up), with every error that was not injected.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use coord::{ConfigStore as _, Election as _, Lock as _, Registry as _, ServiceInstance};

use crate::measure::{Row, rss_bytes};
use crate::target::{Target, unique};

/// Operations done and errors seen (outside the injected ones).
#[derive(Default)]
struct Counts {
    ops: AtomicU64,
    errors: AtomicU64,
}

impl Counts {
    fn record<T>(&self, r: coord::Result<T>, victim_closed: bool) {
        match r {
            Ok(_) => {
                self.ops.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) if victim_closed => {} // injected: the client was closed under it
            Err(e) => {
                eprintln!("soak: error: {e}");
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn open_fds() -> f64 {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as f64)
        .unwrap_or(0.0)
}

/// Least-squares slope of `ys` over `xs`, per unit of `xs`.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        num += (x - mx) * (y - my);
        den += (x - mx) * (x - mx);
    }
    if den == 0.0 { 0.0 } else { num / den }
}

/// One churning client's work until `stop`: lock, election, registry and config.
async fn churn(
    client: coord::Client,
    base: String,
    me: usize,
    counts: Arc<Counts>,
    closed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && !closed.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("{base}/lock{}", i % 8);
        match client.lock(&name).await {
            Ok(guard) => {
                counts.ops.fetch_add(1, Ordering::Relaxed);
                if i.is_multiple_of(7) {
                    drop(guard); // a dropped guard: released in the background
                } else {
                    counts.record(guard.release().await, closed.load(Ordering::Relaxed));
                }
            }
            Err(e) => counts.record::<()>(Err(e), closed.load(Ordering::Relaxed)),
        }
        if i.is_multiple_of(4) {
            match tokio::time::timeout(
                Duration::from_millis(200),
                client.campaign(&format!("{base}/leader"), me.to_string()),
            )
            .await
            {
                Ok(Ok(l)) => counts.record(l.resign().await, closed.load(Ordering::Relaxed)),
                Ok(Err(e)) => counts.record::<()>(Err(e), closed.load(Ordering::Relaxed)),
                Err(_) => {} // the other contender leads: a campaign abandoned (dropped)
            }
        }
        if i.is_multiple_of(3) {
            let inst = ServiceInstance::new(format!("c{me}-{}", i % 5), "10.0.0.1:80");
            match client.register(&format!("{base}/svc"), inst).await {
                Ok(r) => counts.record(r.deregister().await, closed.load(Ordering::Relaxed)),
                Err(e) => counts.record::<()>(Err(e), closed.load(Ordering::Relaxed)),
            }
        }
        let r = client
            .put(&format!("{base}/cfg/k{}", i % 32), i.to_string().into_bytes())
            .await;
        counts.record(r, closed.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One backend's churn: its observer (with a service cache and a config cache) and
/// its churning clients.
struct Churn {
    target: Target,
    base: String,
    counts: Arc<Counts>,
    observer: coord::Client,
    caches: (coord::ServiceCache, coord::ConfigCache),
    slots: Vec<(coord::Client, Arc<AtomicBool>, tokio::task::JoinHandle<()>)>,
    faults: u64,
}

const CHURNERS: usize = 4;

impl Churn {
    async fn start(t: &Target, stop: &Arc<AtomicBool>) -> Result<Churn> {
        let base = unique("soak");
        let counts = Arc::new(Counts::default());
        let observer = t.coord().await?;
        let caches = (
            observer.service_cache(&format!("{base}/svc")).await?,
            observer.config_cache(&format!("{base}/cfg")).await?,
        );
        let mut slots = Vec::new();
        for me in 0..CHURNERS {
            let c = t.coord().await?;
            let closed = Arc::new(AtomicBool::new(false));
            let h = tokio::spawn(churn(
                c.clone(),
                base.clone(),
                me,
                counts.clone(),
                closed.clone(),
                stop.clone(),
            ));
            slots.push((c, closed, h));
        }
        Ok(Churn {
            target: t.clone(),
            base,
            counts,
            observer,
            caches,
            slots,
            faults: 0,
        })
    }

    /// The fault: one churning client closed mid-operation, replaced by a new one.
    async fn fault(&mut self, stop: &Arc<AtomicBool>) -> Result<()> {
        self.faults += 1;
        let victim = (self.faults as usize) % CHURNERS;
        let c = self.target.coord().await?;
        let closed = Arc::new(AtomicBool::new(false));
        let h = tokio::spawn(churn(
            c.clone(),
            self.base.clone(),
            victim,
            self.counts.clone(),
            closed.clone(),
            stop.clone(),
        ));
        let (old, old_closed, old_handle) = std::mem::replace(&mut self.slots[victim], (c, closed, h));
        old_closed.store(true, Ordering::Relaxed);
        let _ = old.close().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), old_handle).await;
        Ok(())
    }

    async fn finish(self) -> Row {
        for (c, _, h) in self.slots {
            let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
            let _ = c.close().await;
        }
        let in_sync = self.caches.0.in_sync() && self.caches.1.in_sync();
        drop(self.caches);
        let _ = self.observer.close().await;
        Row::new("soak", self.target.name(), "coord")
            .with("ops", self.counts.ops.load(Ordering::Relaxed) as f64)
            .with("faults", self.faults as f64)
            .with("errors", self.counts.errors.load(Ordering::Relaxed) as f64)
            .with("caches_in_sync", if in_sync { 1.0 } else { 0.0 })
    }
}

/// The soak on every target at once, in this process: a row per backend (operations,
/// faults, errors, caches in sync at the end) and one for the process (`all`: memory,
/// tasks, files and their slopes).
pub async fn run(targets: &[Target], seconds: f64) -> Result<Vec<Row>> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut churns = Vec::new();
    for t in targets {
        churns.push(Churn::start(t, &stop).await?);
    }
    let start = Instant::now();
    let (mut xs, mut rss, mut tasks, mut fds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Every 10 s; a short run (the smoke form) gets one halfway.
    let mut next_fault = Duration::from_secs_f64((seconds / 2.0).min(10.0));
    let metrics = tokio::runtime::Handle::current().metrics();
    while start.elapsed().as_secs_f64() < seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let at = start.elapsed();
        xs.push(at.as_secs_f64() / 60.0);
        rss.push(rss_bytes() as f64 / 1024.0);
        tasks.push(metrics.num_alive_tasks() as f64);
        fds.push(open_fds());
        if at >= next_fault {
            next_fault += Duration::from_secs(10);
            for c in churns.iter_mut() {
                c.fault(&stop).await?;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut rows = Vec::new();
    for c in churns {
        rows.push(c.finish().await.with("minutes", seconds / 60.0));
    }
    let half = xs.len() / 2;
    let tail = |v: &[f64]| slope(&xs[half..], &v[half..]);
    let last = |v: &[f64]| v.last().copied().unwrap_or(0.0);
    rows.push(
        Row::new("soak", "all", "process")
            .with("minutes", seconds / 60.0)
            .with("rss_kib", last(&rss))
            .with("rss_slope_kib_per_min", tail(&rss))
            .with("tasks", last(&tasks))
            .with("tasks_slope_per_min", tail(&tasks))
            .with("fds", last(&fds))
            .with("fds_slope_per_min", tail(&fds)),
    );
    Ok(rows)
}
