//! Config watchers: a writer puts 1, 2, 3, … to one key every 20 ms while three
//! watchers (each through fault proxies) follow it. Every 1.2 s one watcher's links are
//! reset for 700 ms; on etcd, every other time, the history is compacted while that
//! watcher is cut off, so that it resumes into a gap. Each watcher's events must never
//! go back or repeat a version, must never skip one without a `Resync` before (where the
//! backend delivers every change), must follow every `Resync` with a snapshot, and must
//! end at the last value written.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coord::{Client, ConfigEvent, ConfigStore};
use coord_testkit::Kind;
use futures::StreamExt as _;

use crate::{Env, Report, linked};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Snapshot(Option<u64>),
    Put(u64),
    Resync,
}

fn value(bytes: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(bytes).parse().ok()
}

fn follow(client: Client) -> Arc<Mutex<Vec<Seen>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        let Ok(mut stream) = client.watch("cfg").await else {
            return;
        };
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let item = match event {
                ConfigEvent::Snapshot(entries) => Seen::Snapshot(
                    entries
                        .iter()
                        .find(|e| e.key == "cfg")
                        .and_then(|e| value(&e.value)),
                ),
                ConfigEvent::Put(entry) if entry.key == "cfg" => match value(&entry.value) {
                    Some(v) => Seen::Put(v),
                    None => continue,
                },
                ConfigEvent::Put(_) | ConfigEvent::Delete(_) => continue,
                // A kind of event the campaign does not know: what it showed is
                // unknown, as after a gap.
                _ => Seen::Resync,
            };
            s.lock().unwrap_or_else(|p| p.into_inner()).push(item);
        }
    });
    seen
}

fn last_value(seen: &[Seen]) -> Option<u64> {
    seen.iter().rev().find_map(|s| match s {
        Seen::Snapshot(v) => *v,
        Seen::Put(v) => Some(*v),
        Seen::Resync => None,
    })
}

/// Checks one watcher's events; returns the number of `Resync`s.
/// Values in `failed` were put without a confirmed outcome: skipping them is no gap.
fn check(
    watcher: usize,
    seen: &[Seen],
    every_event: bool,
    failed: &BTreeSet<u64>,
    violations: &mut Vec<String>,
) -> usize {
    let mut last: Option<u64> = None;
    let mut resynced = false;
    let mut resyncs = 0;
    for (i, item) in seen.iter().enumerate() {
        match *item {
            Seen::Resync => {
                resynced = true;
                resyncs += 1;
            }
            Seen::Snapshot(v) => {
                if i > 0 && !resynced {
                    violations.push(format!(
                        "watcher {watcher}: a snapshot without a Resync before it"
                    ));
                }
                if let (Some(l), Some(v)) = (last, v)
                    && v < l
                {
                    violations.push(format!("watcher {watcher}: snapshot {v} after {l}: went back"));
                }
                last = v.or(last);
                resynced = false;
            }
            Seen::Put(v) => {
                if resynced {
                    violations.push(format!(
                        "watcher {watcher}: a change after a Resync, before the snapshot"
                    ));
                }
                match last {
                    Some(l) if v <= l => violations.push(format!(
                        "watcher {watcher}: version {v} after {l}: reordered or repeated"
                    )),
                    Some(l) if every_event && (l + 1..v).any(|m| !failed.contains(&m)) => {
                        violations.push(format!(
                            "watcher {watcher}: {l} then {v}: {} version(s) missed without a Resync",
                            v - l - 1
                        ))
                    }
                    _ => {}
                }
                last = Some(v);
            }
        }
    }
    if resynced {
        violations.push(format!("watcher {watcher}: a Resync with no snapshot after it"));
    }
    resyncs
}

pub(crate) async fn run(env: &Env<'_>) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let writer = env.direct().await?;
    writer.put("cfg", b"0".to_vec()).await?;
    let every_event = writer.capabilities().every_watch_event;
    let mut watchers = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let client = linked(&env.proxies, env.cluster, env.kind, &env.namespace).await?;
        seen.push(follow(client.clone()));
        watchers.push(client);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(Mutex::new(BTreeSet::new()));
    let writing = {
        let (writer, stop, written, failed) = (writer.clone(), stop.clone(), written.clone(), failed.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                // Each value is put once: a put sent again could land twice. One that
                // failed may or may not have landed; the next value supersedes it.
                match writer.put("cfg", n.to_string().into_bytes()).await {
                    Ok(_) => written.store(n, Ordering::SeqCst),
                    Err(_) => {
                        failed.lock().unwrap_or_else(|p| p.into_inner()).insert(n);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(env.args.seconds);
    let mut round = 0;
    let mut compactions = 0;
    while Instant::now() + Duration::from_millis(1200) < deadline {
        let links = env.proxies.get(&watchers[round % 3])?;
        links.refuse_for(Duration::from_millis(700));
        report.faults += 1;
        if env.kind == Kind::Etcd && round % 2 == 1 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let c = env.cluster.clone();
            match tokio::task::spawn_blocking(move || c.compact()).await? {
                Ok(_) => {
                    report.faults += 1;
                    compactions += 1;
                }
                Err(e) => eprintln!("compaction: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(900)).await;
        } else {
            tokio::time::sleep(Duration::from_millis(1200)).await;
        }
        round += 1;
    }
    stop.store(true, Ordering::SeqCst);
    writing.await?;
    // The value the key ended at: the last confirmed put, or a later one whose outcome
    // was unknown but which landed.
    let last = match crate::retry(|| writer.get("cfg")).await? {
        Some(v) => value(&v.value).unwrap_or_else(|| written.load(Ordering::SeqCst)),
        None => written.load(Ordering::SeqCst),
    };
    let stopped = Instant::now();
    let bound = Duration::from_secs(10);
    while stopped.elapsed() < bound
        && !seen
            .iter()
            .all(|s| last_value(&s.lock().unwrap_or_else(|p| p.into_inner())) == Some(last))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut resyncs = 0;
    for (i, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap_or_else(|p| p.into_inner()).clone();
        report.ops += s.len();
        if last_value(&s) != Some(last) {
            report.violations.push(format!(
                "watcher {i} ended at {:?} within {bound:?}, not at the last value {last} (its last events: {:?})",
                last_value(&s),
                &s[s.len().saturating_sub(4)..]
            ));
        }
        let failed = failed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        resyncs += check(i, &s, every_event, &failed, &mut report.violations);
    }
    if report.violations.is_empty() {
        report.worst_recovery = Some(stopped.elapsed());
    }
    report.shown = format!("{resyncs} Resync(s) after {compactions} compaction(s)");
    report.shown_ok = compactions == 0 || resyncs > 0;
    for w in watchers {
        let _ = w.close().await;
    }
    let _ = writer.close().await;
    Ok(report)
}
