//! Config watch and cache histories on the in-memory backend under a seeded nemesis,
//! judged by `coord-check` against the cluster's own record of every write: each stream
//! is valid, ordered, unique and reliable (no gap without a `Resync`), and each watcher's
//! view and each cache converge to the store.
//!
//! Writers put, delete and commit several keys at once; watchers and a cache follow the
//! prefix; the nemesis suspends and blackholes the watching clients, expires their
//! sessions, compacts the history, loses writers' replies and delays replies. A failure
//! prints its seed; `COORD_HISTORY_SEED=n` replays it (closely, not identically: tokio
//! schedules). `COORD_HISTORY_SEEDS` sets how many seeds run.
//!
//! Atomicity is not judged here: the in-memory store gives each write of a transaction a
//! revision of its own.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord_check::watch::{WatchEvent, Write, WriteKind, check, converges, store, view};
use coord_core::{Client, ConfigEvent, ConfigStore, Txn};
use coord_mem::{MemClient, MemCluster, MemOptions};
use futures::StreamExt as _;

use common::{mem, run_seeds, seeds};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

const TTL: Duration = Duration::from_millis(400);
const KEYS: usize = 5;

/// The revision a mem version stands for (`<mod revision>.0`).
fn revision(version: &coord_core::Version) -> u64 {
    version
        .to_string()
        .split('.')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

type Event = WatchEvent<String, Vec<u8>>;

/// Follows `prefix` on `client`, recording every event, until `stop`.
fn follow(client: Client, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Event>> {
    tokio::spawn(async move {
        let mut events = Vec::new();
        let mut stream = loop {
            match client.watch("cfg").await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        loop {
            let next = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
            match next {
                Ok(Some(Ok(event))) => events.push(match event {
                    ConfigEvent::Snapshot(entries) => WatchEvent::Snapshot(
                        entries
                            .into_iter()
                            .map(|e| (e.key, e.value, revision(&e.version)))
                            .collect(),
                    ),
                    ConfigEvent::Put(e) => WatchEvent::Put {
                        key: e.key,
                        value: e.value,
                        mod_revision: revision(&e.version),
                    },
                    ConfigEvent::Delete(key) => WatchEvent::Delete { key, revision: 0 },
                    ConfigEvent::Resync => WatchEvent::Resync,
                    other => panic!("an event this history does not know: {other:?}"),
                }),
                // A stream that ends or fails says so: record a resync and watch anew.
                Ok(Some(Err(_)) | None) => {
                    events.push(WatchEvent::Resync);
                    stream = loop {
                        match client.watch("cfg").await {
                            Ok(s) => break s,
                            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    };
                }
                Err(_) if stop.load(Ordering::SeqCst) => return events,
                Err(_) => {}
            }
        }
    })
}

#[derive(Default)]
struct Tally {
    writes: usize,
    events: usize,
    resyncs: usize,
    violations: Vec<String>,
}

async fn history(seed: u64) -> Tally {
    let cluster = MemCluster::new();
    cluster.record_writes();
    let namespace = format!("w{seed}");
    let open = || {
        MemClient::connect(
            &cluster,
            MemOptions {
                namespace: namespace.clone(),
                session_ttl: TTL,
            },
        )
        .expect("a mem client")
    };
    let writers: Vec<Client> = (0..2).map(|_| open()).collect();
    let watchers: Vec<Client> = (0..2).map(|_| open()).collect();
    let cache_client = open();
    let cache = cache_client.config_cache("cfg").await.expect("a cache");
    let stop = Arc::new(AtomicBool::new(false));
    let followers: Vec<_> = watchers.iter().map(|w| follow(w.clone(), stop.clone())).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let writing = Arc::new(AtomicBool::new(true));
    let mut tasks = Vec::new();
    for (w, client) in writers.iter().enumerate() {
        let (client, writing) = (client.clone(), writing.clone());
        let mut rng = StdRng::seed_from_u64(seed * 101 + w as u64);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while writing.load(Ordering::SeqCst) {
                n += 1;
                let key = format!("cfg/k{}", rng.random_range(0..KEYS));
                let value = format!("w{w}-{n}").into_bytes();
                let _ = match rng.random_range(0..10) {
                    0 => client.delete(&key).await.map(drop),
                    1 | 2 => {
                        let other = format!("cfg/k{}", rng.random_range(0..KEYS));
                        let txn = Txn::new().put(key, value.clone());
                        let txn = if other.starts_with("cfg/k") && rng.random_bool(0.5) {
                            txn.put(other, value)
                        } else {
                            txn
                        };
                        client.commit(txn).await.map(drop)
                    }
                    _ => client.put(&key, value).await.map(drop),
                };
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..15))).await;
            }
        }));
    }
    // The nemesis.
    let faulted: Vec<&Client> = watchers.iter().chain([&cache_client]).collect();
    for _ in 0..rng.random_range(3..8) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
        let victim = faulted[rng.random_range(0..faulted.len())];
        match rng.random_range(0..6) {
            0 => mem(victim).suspend(Duration::from_millis(rng.random_range(50..700))),
            1 => mem(victim).blackhole(Duration::from_millis(rng.random_range(50..700))),
            2 => {
                cluster.expire_session(victim.session_id());
            }
            3 => cluster.compact(),
            4 => mem(&writers[rng.random_range(0..writers.len())]).lose_replies(2),
            _ => mem(&writers[rng.random_range(0..writers.len())])
                .delay_replies(Duration::from_millis(rng.random_range(1..10))),
        }
    }
    writing.store(false, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    // Let the watchers and the cache catch up once every link is back.
    tokio::time::sleep(TTL * 3).await;
    let full = format!("{namespace}/config/");
    let truth: Vec<Write<String, Vec<u8>>> = cluster
        .writes(&full)
        .into_iter()
        .map(|(revision, key, value)| Write {
            revision,
            key: key[full.len()..].to_owned(),
            kind: value.map_or(WriteKind::Delete, WriteKind::Put),
        })
        .collect();
    let final_store = store(&truth);
    // The cache converges (its view is of the store as it is now).
    let converged = Arc::new(Mutex::new(false));
    for _ in 0..100 {
        let v = cache.view();
        let now: std::collections::BTreeMap<String, Vec<u8>> = v
            .entries()
            .iter()
            .map(|(k, e)| (k.clone(), e.value.clone()))
            .collect();
        if v.in_sync() && now == final_store {
            *converged.lock().unwrap_or_else(|p| p.into_inner()) = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut tally = Tally {
        writes: truth.len(),
        ..Tally::default()
    };
    if !*converged.lock().unwrap_or_else(|p| p.into_inner()) {
        tally.violations.push(format!(
            "the cache did not converge to the store: cache {:?}, store {final_store:?}",
            cache.view().entries().keys().collect::<Vec<_>>()
        ));
    }
    for (i, f) in followers.into_iter().enumerate() {
        let events = f.await.expect("a follower");
        tally.events += events.len();
        tally.resyncs += events.iter().filter(|e| matches!(e, WatchEvent::Resync)).count();
        let verdict = check(&truth, &events);
        for v in verdict.violations {
            tally.violations.push(format!("watcher {i}: {v:?}"));
        }
        if let Err(d) = converges(&view(&events), &final_store) {
            tally
                .violations
                .push(format!("watcher {i} did not converge: {d:?}"));
        }
    }
    for c in writers.iter().chain(watchers.iter()).chain([&cache_client]) {
        let _ = c.close().await;
    }
    tally
}

/// Mutant switches are process-wide: the tests of this file run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn watches_and_caches_follow_the_store_under_faults() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let violations = run_all("");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[cfg(feature = "mutants")]
#[test]
fn negative_control_silent_gap_is_caught() {
    use coord_core::mutants::{self, Mutant};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(Mutant::WatchGapSilent, true);
    let violations = run_all(" (mutant: silent gap)");
    mutants::set(Mutant::WatchGapSilent, false);
    assert!(
        !violations.is_empty(),
        "the checker found nothing with silent watch gaps"
    );
}

fn run_all(label: &str) -> Vec<String> {
    let seeds = seeds();
    let tallies: Vec<(u64, Tally)> = run_seeds(&seeds, 8, history);
    let mut violations = Vec::new();
    let (mut writes, mut events, mut resyncs) = (0, 0, 0);
    for (seed, t) in tallies {
        writes += t.writes;
        events += t.events;
        resyncs += t.resyncs;
        violations.extend(t.violations.into_iter().map(|v| format!("seed {seed}: {v}")));
    }
    println!(
        "histories watch{label}: {} seeds, {writes} writes, {events} events ({resyncs} resyncs) on 2 watchers each, a cache each, {} violations",
        seeds.len(),
        violations.len()
    );
    violations
}
