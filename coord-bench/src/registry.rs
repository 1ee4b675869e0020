//! `registry`: N instances, each registered by its own client. Timed: until a watcher
//! has seen all N; then, with a tenth of the clients closed at once (their sessions end
//! and take their instances along), until it sees the rest.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::{Registry as _, RegistryEvent, ServiceInstance};
use futures::{Stream, StreamExt};

use crate::measure::Row;
use crate::target::{Target, unique};
use crate::waiters::{bar, clients};

/// Folds the watch into the set of live instance ids until it has `want` of them.
async fn until_seen(
    events: &mut (impl Stream<Item = coord::Result<RegistryEvent>> + Unpin),
    live: &mut BTreeSet<String>,
    want: usize,
) -> Result<()> {
    while live.len() != want {
        let event = tokio::time::timeout(Duration::from_secs(120), events.next())
            .await
            .with_context(|| format!("the watcher saw {} of {want} within 120 s", live.len()))?
            .context("the watch ended")??;
        match event {
            RegistryEvent::Snapshot(all) => *live = all.into_iter().map(|i| i.id).collect(),
            RegistryEvent::Joined(i) | RegistryEvent::Updated(i) => {
                live.insert(i.id);
            }
            RegistryEvent::Left(id) => {
                live.remove(&id);
            }
            RegistryEvent::Resync => {}
            other => anyhow::bail!("an event the benchmark does not know: {other:?}"),
        }
    }
    Ok(())
}

pub async fn run(t: &Target, n: usize) -> Result<Vec<Row>> {
    let kill = n / 10;
    if kill == 0 {
        bail!("--instances must be at least 10");
    }
    let service = unique("registry");
    let url = t.url_with_session(30);
    let members = clients(&url, n, "connecting members").await?;
    let watcher = t.coord().await?;
    let mut events = watcher.watch(&service).await?;
    let mut live = BTreeSet::new();
    until_seen(&mut events, &mut live, 0).await?;
    let start = Instant::now();
    let bar = bar(n, "registering");
    let registered: Vec<coord::Result<coord::Registration>> =
        futures::stream::iter(members.iter().enumerate())
            .map(|(i, c)| {
                let (service, bar) = (service.clone(), bar.clone());
                async move {
                    let r = c
                        .register(
                            &service,
                            ServiceInstance::new(format!("i{i}"), format!("10.0.0.1:{i}")),
                        )
                        .await;
                    bar.inc(1);
                    r
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
    bar.finish_and_clear();
    let registrations = registered.into_iter().collect::<coord::Result<Vec<_>>>()?;
    until_seen(&mut events, &mut live, n).await?;
    let all_seen = start.elapsed();
    // Close a tenth of the clients, all at once.
    let start = Instant::now();
    let closed = futures::future::join_all(members.iter().take(kill).map(|c| c.close())).await;
    closed.into_iter().collect::<coord::Result<Vec<_>>>()?;
    until_seen(&mut events, &mut live, n - kill).await?;
    let rest_seen = start.elapsed();
    drop(registrations);
    for c in members.iter().chain([&watcher]) {
        let _ = c.close().await;
    }
    Ok(vec![
        Row::new("registry", t.name(), "coord")
            .with("instances", n as f64)
            .with("all_seen_s", all_seen.as_secs_f64())
            .with("killed", kill as f64)
            .with("rest_seen_s", rest_seen.as_secs_f64()),
    ])
}
