//! `election`: how long leadership takes to pass — after `resign()` with the follower
//! just queued and after it has waited 150 ms, after the leader's session is ended from
//! outside, and after the leader goes silent (its links blackholed: it ends by the
//! session timeout / lease TTL, the figure to compare with).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::Election as _;
use coord_testkit::FaultProxy;

use crate::measure::{Latencies, Row};
use crate::target::{Backend, Target, unique};

/// Campaigns on `follower` in the background and returns once it is queued (it watches
/// the candidate ahead of it).
async fn queue_follower(
    follower: &coord::Client,
    name: &str,
) -> Result<tokio::task::JoinHandle<coord::Result<coord::Leadership>>> {
    let before = follower.stats().watches_set;
    let task = tokio::spawn({
        let (f, name) = (follower.clone(), name.to_owned());
        async move { f.campaign(&name, b"follower".to_vec()).await }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while follower.stats().watches_set == before {
        if Instant::now() > deadline {
            bail!("the follower did not queue within 30 s");
        }
        // The benchmark's own bookkeeping: the first moment the follower waits.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(task)
}

pub async fn run(t: &Target, rounds: usize) -> Result<Vec<Row>> {
    let name = unique("election");
    let follower = t.coord().await?;
    let mut rows = Vec::new();
    for (mode, wait) in [("resign-just-queued", None), ("resign-after-150ms", Some(150))] {
        let leader = t.coord().await?;
        let mut lat = Latencies::default();
        for _ in 0..rounds {
            let lead = leader.campaign(&name, b"leader".to_vec()).await?;
            let task = queue_follower(&follower, &name).await?;
            if let Some(ms) = wait {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let start = Instant::now();
            lead.resign().await?;
            let next = task.await??;
            lat.push(start.elapsed());
            next.resign().await?;
        }
        leader.close().await?;
        rows.push(
            Row::new("election", t.name(), mode)
                .with("handover_p50_ms", lat.ms(0.5))
                .with("handover_p99_ms", lat.ms(0.99)),
        );
    }
    for (mode, wait) in [
        ("raw-floor-just-queued", None),
        ("raw-floor-after-150ms", Some(150)),
    ] {
        if let Some(row) = raw_floor(t, &name, mode, wait, rounds).await? {
            rows.push(row);
        }
    }
    // The leader goes silent: its session ends by timeout.
    if t.backend != Backend::Mem {
        let timeout = 2u64;
        let upstream = t.hosts.first().context("no host")?.parse()?;
        let proxy = FaultProxy::start(upstream).await?;
        let scheme = t.name();
        let url =
            Target::parse(&format!("{scheme}://{}/{}", proxy.addr(), t.namespace))?.url_with_session(timeout);
        let mut lat = Latencies::default();
        for _ in 0..2 {
            proxy.pass();
            let leader = coord::connect(&url).await?;
            let _lead = leader.campaign(&name, b"leader".to_vec()).await?;
            let task = queue_follower(&follower, &name).await?;
            tokio::time::sleep(Duration::from_millis(150)).await;
            let start = Instant::now();
            proxy.blackhole_for(Duration::from_secs(3600));
            let next = tokio::time::timeout(Duration::from_secs(timeout * 10), task)
                .await
                .context("no take-over within 10 session timeouts")???;
            lat.push(start.elapsed());
            next.resign().await?;
            drop(_lead);
            drop(leader);
        }
        proxy.pass();
        rows.push(
            Row::new("election", t.name(), "leader-silent")
                .with("handover_p50_ms", lat.ms(0.5))
                .with("session_timeout_ms", (timeout * 1000) as f64)
                .with("x_timeout", lat.ms(0.5) / (timeout * 1000) as f64),
        );
    }
    let _ = follower.close().await;
    Ok(rows)
}

/// The fewest round trips a hand-over needs with the same client library: the follower
/// has a watch on the leader's node or key, the leader deletes it, and the watch fires
/// (ZooKeeper: `exists` watch, `delete`; etcd: watch from now, `delete`). `None` on mem.
async fn raw_floor(
    t: &Target,
    name: &str,
    mode: &str,
    wait: Option<u64>,
    rounds: usize,
) -> Result<Option<Row>> {
    let mut lat = Latencies::default();
    match t.backend {
        Backend::Mem => return Ok(None),
        Backend::Zk => {
            use zookeeper_client as zk;
            let (leader, follower) = (t.zk().await?, t.zk().await?);
            let dir = format!("/coord-bench/{name}-raw");
            crate::target::zk_mkdir(&leader, &dir).await?;
            let path = format!("{dir}/leader");
            let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
            for _ in 0..rounds {
                leader.create(&path, b"", &options).await?;
                if let Some(ms) = wait {
                    let (_, watcher) = follower.check_and_watch_stat(&path).await?;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let start = Instant::now();
                    leader.delete(&path, None).await?;
                    watcher.changed().await;
                    lat.push(start.elapsed());
                    continue;
                }
                // Just queued: the clock starts as the follower's watch request leaves
                // (the client sends it when called), as coord's does — not once the
                // watch is set. The node already gone when the watch lands is the
                // hand-over too.
                let watching = follower.check_and_watch_stat(&path);
                let start = Instant::now();
                leader.delete(&path, None).await?;
                if let (Some(_), watcher) = watching.await? {
                    watcher.changed().await;
                }
                lat.push(start.elapsed());
            }
        }
        Backend::Etcd => {
            let (mut leader, mut follower) = (t.etcd().await?, t.etcd().await?);
            let key = format!("coord-bench/{name}-raw/leader");
            for _ in 0..rounds {
                let put = leader.put(key.clone(), "", None).await?;
                let rev = put.header().map(|h| h.revision()).unwrap_or(0);
                // Just queued: the clock starts as the follower's watch request leaves,
                // as coord's does (its watch starts after the put, so a delete landing
                // before the watch is placed is still seen). After a wait, once the
                // watch is placed.
                let mut start = Instant::now();
                let mut stream = follower
                    .watch(
                        key.clone(),
                        Some(etcd_client::WatchOptions::new().with_start_revision(rev + 1)),
                    )
                    .await?;
                if let Some(ms) = wait {
                    // The created response.
                    stream.message().await?;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    start = Instant::now();
                }
                leader.delete(key.clone(), None).await?;
                while let Some(resp) = stream.message().await? {
                    if !resp.events().is_empty() {
                        break;
                    }
                }
                lat.push(start.elapsed());
            }
        }
    }
    Ok(Some(
        Row::new("election", t.name(), mode)
            .with("handover_p50_ms", lat.ms(0.5))
            .with("handover_p99_ms", lat.ms(0.99)),
    ))
}
