//! Registry churn: 8 members register, two watchers follow the service (one of them
//! through fault proxies). Then 3 members are killed (links refused for good, nothing
//! cleaned up), 2 new ones join, and the proxied watcher's links are reset. Every
//! watcher's view must converge to the 7 live members within 3 session timeouts + 10 s,
//! and agree with a fresh read.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coord::{Client, Registry, RegistryEvent, ServiceInstance};
use futures::StreamExt as _;

use crate::{Env, Report, SESSION, linked};

/// A watcher's view of the service.
#[derive(Default)]
struct View {
    ids: Mutex<BTreeSet<String>>,
    events: AtomicUsize,
}

impl View {
    fn ids(&self) -> BTreeSet<String> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

fn follow(client: Client) -> Arc<View> {
    let view = Arc::new(View::default());
    let v = view.clone();
    tokio::spawn(async move {
        let Ok(mut stream) = client.watch("svc").await else {
            return;
        };
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            v.events.fetch_add(1, Ordering::SeqCst);
            let mut ids = v.ids.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                RegistryEvent::Snapshot(all) => *ids = all.into_iter().map(|i| i.id).collect(),
                RegistryEvent::Joined(i) | RegistryEvent::Updated(i) => {
                    ids.insert(i.id);
                }
                RegistryEvent::Left(id) => {
                    ids.remove(&id);
                }
                // A resync (or an event the campaign does not know): a snapshot follows.
                _ => {}
            }
        }
    });
    view
}

fn ids(range: std::ops::Range<usize>) -> BTreeSet<String> {
    range.map(|i| format!("m{i}")).collect()
}

async fn member(env: &Env<'_>, i: usize) -> anyhow::Result<(Client, coord::Registration)> {
    let client = linked(&env.proxies, env.cluster, env.kind, &env.namespace).await?;
    let registration = crate::retry(|| {
        client.register(
            "svc",
            ServiceInstance::new(format!("m{i}"), format!("10.0.0.{i}:80")),
        )
    })
    .await?;
    Ok((client, registration))
}

/// Waits until every view shows `expected`; the time it took, or `None` past `bound`.
async fn converged(views: &[Arc<View>], expected: &BTreeSet<String>, bound: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < bound {
        if views.iter().all(|v| v.ids() == *expected) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

pub(crate) async fn run(env: &Env<'_>) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let direct = env.direct().await?;
    let watcher = linked(&env.proxies, env.cluster, env.kind, &env.namespace).await?;
    let views = [follow(direct.clone()), follow(watcher.clone())];
    let mut members = Vec::new();
    for i in 0..8 {
        members.push(member(env, i).await?);
    }
    let bound = SESSION * 3 + Duration::from_secs(10);
    if converged(&views, &ids(0..8), bound).await.is_none() {
        report.violations.push(format!(
            "the views never showed the 8 registered members: {:?}",
            views.each_ref().map(|v| v.ids())
        ));
    }
    // 3 killed: their links refuse for good, nothing is deregistered.
    for (client, registration) in members.drain(..3) {
        env.proxies.get(&client)?.refuse();
        std::mem::forget(registration);
        std::mem::forget(client);
        report.faults += 1;
    }
    env.proxies.get(&watcher)?.refuse_for(SESSION / 4);
    report.faults += 1;
    for i in 8..10 {
        members.push(member(env, i).await?);
        report.faults += 1;
    }
    let expected = ids(3..10);
    match converged(&views, &expected, bound).await {
        Some(took) => report.worst_recovery = Some(took),
        None => report.violations.push(format!(
            "within {bound:?} the views did not converge to {expected:?}: {:?}",
            views.each_ref().map(|v| v.ids())
        )),
    }
    let read: BTreeSet<String> = crate::retry(|| direct.instances("svc"))
        .await?
        .into_iter()
        .map(|i| i.id)
        .collect();
    if read != expected {
        report
            .violations
            .push(format!("a fresh read shows {read:?}, not the live {expected:?}"));
    }
    report.ops = views.iter().map(|v| v.events.load(Ordering::SeqCst)).sum();
    report.shown_ok = report.worst_recovery.is_some();
    report.shown = format!("both views converged to {} live", expected.len());
    for (client, registration) in members {
        let _ = registration.deregister().await;
        let _ = client.close().await;
    }
    let _ = watcher.close().await;
    let _ = direct.close().await;
    Ok(report)
}
