//! Watch histories on each backend's own layout, beside a foreign writer.
//!
//! Two coord clients put, compare-and-set, delete and commit on a handful of keys (one of
//! them over a slowed link), and twice commit one transaction over more keys than one
//! ZooKeeper read holds; a raw client of the backend (see [`ForeignWriter`]) meanwhile
//! rewrites, deletes and re-creates the same keys. Three coord clients watch the prefix:
//! one plain, one over a slowed link whose session is killed early on (ZooKeeper: its
//! watches end with it), and one whose links are cut for a while (it reconnects and
//! resumes its session and its watch). Each
//! watcher records every event, re-watching (and recording a `Resync`) when its stream
//! ends or fails. Once every writer is done, a last write is made and each watcher must
//! come to show it.
//!
//! Each stream is judged by [`coord_check::watch`] against the ground truth:
//!
//! - **etcd** keeps its own record of every write, with revisions shared by the writes of
//!   one transaction ([`ForeignWriter::record`]): each stream is judged whole — valid,
//!   ordered, unique, atomic and reliable — and its final view must be the store. mem's
//!   audit is judged the same way, but gives each write of a transaction a revision of its
//!   own, so atomicity is not judged there.
//! - **ZooKeeper** keeps no record of writes, and its watches may coalesce changes to one
//!   key (`every_watch_event` is off). The truth is what every writer was told (each
//!   write's version: the node's `czxid` and data version), the incarnations those
//!   versions name (a delete between two of them), and a last read of every key. Each key's
//!   events are judged on their own — valid (every value and version was written),
//!   ordered and unique; a skipped write is allowed (coalescing) — and the final view
//!   must be what the server holds. Atomicity there is judged by the config cache cases
//!   (`cache::*`), which see whole views.
//!
//! A write whose outcome is unknown (a member fault) enters the truth only if a watcher
//! showed its value — values are unique, so that shows it landed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_check::watch::{self, WatchEvent, WatchViolation, Write, WriteKind};
use coord_core::raw::version_parts;
use coord_core::{Client, ConfigEvent, ConfigStore, OpResult, Txn, Version};
use futures::StreamExt as _;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{Rng as _, SeedableRng as _};

use crate::harness::{CaseResult, Ctx};
use crate::util::within;
use crate::{ForeignWriter, RecordedWrite};

/// Operations per coord writer and by the foreign writer.
const WRITER_OPS: usize = 60;
const FOREIGN_OPS: usize = 40;
/// Keys the single-key writes pick from.
const KEYS: usize = 4;
/// Keys of the wide commits: more than one ZooKeeper read (64 nodes) holds.
const WIDE: usize = 70;

/// A watcher's event as seen, versions still the backend's.
#[derive(Clone, Debug)]
enum Seen {
    Snapshot(Vec<(String, String, Version)>),
    Put(String, String, Version),
    Delete(String),
    Resync,
}

/// A write as its writer was told: `None` for a version when its outcome is unknown.
#[derive(Clone, Debug)]
struct Told {
    key: String,
    value: String,
    version: Option<Version>,
}

#[derive(Default)]
struct Shared {
    told: Mutex<Vec<Told>>,
}

impl Shared {
    fn tell(&self, key: &str, value: &str, version: Option<Version>) {
        self.told.lock().unwrap_or_else(|p| p.into_inner()).push(Told {
            key: key.to_owned(),
            value: value.to_owned(),
            version,
        });
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The prefix of history `seed`'s keys (`<prefix>/k0`, …).
fn prefix(seed: u64) -> String {
    format!("w{seed}x")
}

/// One coord writer: puts, compare-and-sets at the version it saw last, deletes, two-key
/// commits, and (writer 0) two wide commits.
async fn coord_writer(client: Client, process: u64, seed: u64, shared: Arc<Shared>) {
    let mut rng = StdRng::seed_from_u64(seed * 31 + process);
    let p = prefix(seed);
    let keys: Vec<String> = (0..KEYS).map(|k| format!("{p}/k{k}")).collect();
    let mut seen: HashMap<String, Version> = HashMap::new();
    for n in 0..WRITER_OPS {
        let key = keys.choose(&mut rng).unwrap_or(&keys[0]).clone();
        let value = format!("c{process}n{n}");
        let limit = Duration::from_secs(10);
        if process == 0 && (n == WRITER_OPS / 3 || n == 2 * WRITER_OPS / 3) {
            let mut txn = Txn::new();
            let wide: Vec<(String, String)> = (0..WIDE)
                .map(|j| (format!("{p}/b{j}"), format!("{value}b{j}")))
                .collect();
            for (k, v) in &wide {
                txn = txn.put(k, v.clone());
            }
            match tokio::time::timeout(limit, client.commit(txn)).await {
                Ok(Ok(results)) => {
                    for ((k, v), r) in wide.iter().zip(results) {
                        let version = match r {
                            OpResult::Put(version) => Some(version),
                            _ => None,
                        };
                        shared.tell(k, v, version);
                    }
                }
                // Not applied, or unknown: told as unknown (a watcher may show it).
                _ => {
                    for (k, v) in &wide {
                        shared.tell(k, v, None);
                    }
                }
            }
            continue;
        }
        match rng.random_range(0..100) {
            0..35 => match tokio::time::timeout(limit, client.put(&key, value.clone())).await {
                Ok(Ok(v)) => {
                    seen.insert(key.clone(), v);
                    shared.tell(&key, &value, Some(v));
                }
                _ => shared.tell(&key, &value, None),
            },
            35..65 => {
                let expected = seen.get(&key).copied();
                match tokio::time::timeout(limit, client.compare_and_set(&key, expected, value.clone())).await
                {
                    Ok(Ok(v)) => {
                        seen.insert(key.clone(), v);
                        shared.tell(&key, &value, Some(v));
                    }
                    Ok(Err(e)) if e.kind() == coord_core::ErrorKind::VersionMismatch => {
                        if let Ok(Some(got)) = client.get(&key).await {
                            seen.insert(key.clone(), got.version);
                        }
                    }
                    _ => shared.tell(&key, &value, None),
                }
            }
            65..78 => {
                let _ = tokio::time::timeout(limit, client.delete(&key)).await;
                seen.remove(&key);
            }
            _ => {
                let others: Vec<&String> = keys.iter().filter(|k| **k != key).collect();
                let other = (*others.choose(&mut rng).unwrap_or(&&key)).clone();
                let pair = [(key.clone(), format!("{value}a")), (other, format!("{value}b"))];
                let mut txn = Txn::new();
                for (k, v) in &pair {
                    txn = match seen.get(k) {
                        Some(version) => txn.check_version(k, *version),
                        None => txn.check_absent(k),
                    };
                    txn = txn.put(k, v.clone());
                }
                match tokio::time::timeout(limit, client.commit(txn)).await {
                    Ok(Ok(results)) => {
                        let puts = results.into_iter().filter_map(|r| match r {
                            OpResult::Put(v) => Some(v),
                            _ => None,
                        });
                        for ((k, v), version) in pair.iter().zip(puts) {
                            seen.insert(k.clone(), version);
                            shared.tell(k, v, Some(version));
                        }
                    }
                    Ok(Err(e)) if e.kind() == coord_core::ErrorKind::VersionMismatch => {
                        for (k, _) in &pair {
                            match client.get(k).await {
                                Ok(Some(got)) => {
                                    seen.insert(k.clone(), got.version);
                                }
                                Ok(None) => {
                                    seen.remove(k);
                                }
                                Err(_) => {}
                            }
                        }
                    }
                    _ => {
                        for (k, v) in &pair {
                            shared.tell(k, v, None);
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..6))).await;
    }
}

/// The foreign writer: rewrites, deletes, and deletes followed at once by a re-create.
async fn foreign_writer(
    writer: Arc<dyn ForeignWriter>,
    seed: u64,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed * 31 + 99);
    let p = prefix(seed);
    let keys: Vec<String> = (0..KEYS).map(|k| format!("{p}/k{k}")).collect();
    let mut failures = Vec::new();
    for n in 0..FOREIGN_OPS {
        let key = keys.choose(&mut rng).unwrap_or(&keys[0]).clone();
        let value = format!("f{n}");
        let roll = rng.random_range(0..100);
        if roll < 50
            && let Err(e) = writer.delete(&key).await
        {
            failures.push(e.to_string());
        }
        if !(25..50).contains(&roll) {
            match writer.put(&key, value.as_bytes()).await {
                Ok(v) => shared.tell(&key, &value, Some(v)),
                Err(e) => {
                    shared.tell(&key, &value, None);
                    failures.push(e.to_string());
                }
            }
        }
        ensure!(
            failures.len() <= FOREIGN_OPS / 4,
            "the foreign writer failed {} times: {}",
            failures.len(),
            failures.join("; ")
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(2..15))).await;
    }
    Ok(())
}

fn seen_of(event: ConfigEvent) -> Seen {
    match event {
        ConfigEvent::Snapshot(entries) => Seen::Snapshot(
            entries
                .into_iter()
                .map(|e| (e.key, text(&e.value), e.version))
                .collect(),
        ),
        ConfigEvent::Put(e) => Seen::Put(e.key, text(&e.value), e.version),
        ConfigEvent::Delete(key) => Seen::Delete(key),
        ConfigEvent::Resync => Seen::Resync,
        other => panic!("an event this check does not know: {other:?}"),
    }
}

/// The watcher's view after the events so far.
fn view_of(events: &[Seen]) -> BTreeMap<String, (String, Version)> {
    let mut view = BTreeMap::new();
    for e in events {
        match e {
            Seen::Snapshot(entries) => {
                view = entries
                    .iter()
                    .map(|(k, v, ver)| (k.clone(), (v.clone(), *ver)))
                    .collect();
            }
            Seen::Put(k, v, ver) => {
                view.insert(k.clone(), (v.clone(), *ver));
            }
            Seen::Delete(k) => {
                view.remove(k);
            }
            Seen::Resync => {}
        }
    }
    view
}

/// Follows `prefix` on `client` until `stop` is set and the view shows `last` (key and
/// value), or `patience` has passed since `stop` (then `false`); a stream that ends or
/// fails is recorded as a `Resync` and watched anew.
fn follow(
    client: Client,
    prefix: String,
    stop: Arc<AtomicBool>,
    last: Arc<Mutex<Option<(String, String)>>>,
    patience: Duration,
    ready: Arc<tokio::sync::Semaphore>,
) -> tokio::task::JoinHandle<(Vec<Seen>, bool)> {
    tokio::spawn(async move {
        let mut events = Vec::new();
        let mut stream = None;
        let mut deadline = None;
        loop {
            if stop.load(Ordering::SeqCst) {
                let want = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some((k, v)) = want
                    && view_of(&events).get(&k).is_some_and(|(got, _)| *got == v)
                {
                    return (events, true);
                }
                let limit = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + patience);
                if tokio::time::Instant::now() >= limit {
                    return (events, false);
                }
            }
            let Some(s) = stream.as_mut() else {
                match client.watch(&prefix).await {
                    Ok(s) => stream = Some(s),
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
                continue;
            };
            match tokio::time::timeout(Duration::from_millis(50), s.next()).await {
                Ok(Some(Ok(event))) => {
                    if events.is_empty() {
                        ready.add_permits(1);
                    }
                    events.push(seen_of(event));
                }
                Ok(Some(Err(_)) | None) => {
                    events.push(Seen::Resync);
                    stream = None;
                }
                Err(_) => {}
            }
        }
    })
}

/// The watch history's figures, for the report.
#[derive(Default, Debug)]
pub(crate) struct WatchFigures {
    pub events: usize,
    pub resyncs: usize,
    pub writes: usize,
}

/// One watch history: its violations, described, and its figures.
async fn watch_history(ctx: &Ctx, seed: u64) -> anyhow::Result<(Vec<String>, WatchFigures)> {
    let p = prefix(seed);
    let writers = ctx.clients(2).await?;
    // The config directory exists before the foreign writer's first create.
    writers[0].put("seed", b"s".to_vec()).await?;
    let foreign: Arc<dyn ForeignWriter> = Arc::from(ctx.factory().foreign_writer(&writers[0]).await?);
    let recording = foreign.record(&format!("{p}/")).await?;
    let watchers = ctx.clients(3).await?;
    ctx.factory().delay(&writers[1], Duration::from_millis(4)).await?;
    ctx.factory()
        .delay(&watchers[1], Duration::from_millis(10))
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let last: Arc<Mutex<Option<(String, String)>>> = Arc::new(Mutex::new(None));
    let ready = Arc::new(tokio::sync::Semaphore::new(0));
    let follows: Vec<_> = watchers
        .iter()
        .map(|w| {
            follow(
                w.clone(),
                p.clone(),
                stop.clone(),
                last.clone(),
                ctx.expiry_wait() * 2,
                ready.clone(),
            )
        })
        .collect();
    // Every watch is armed (its snapshot in) before the first write and fault.
    within(
        ctx.expiry_wait(),
        "the watchers' snapshots",
        ready.acquire_many(3),
    )
    .await?
    .context("the watchers' readiness")?
    .forget();
    let shared = Arc::new(Shared::default());
    let mut tasks = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        tasks.push(tokio::spawn(coord_writer(
            w.clone(),
            i as u64,
            seed,
            shared.clone(),
        )));
    }
    let foreign_task = tokio::spawn(foreign_writer(foreign.clone(), seed, shared.clone()));
    // The third watcher is cut off for a while (it reconnects, its session kept), the
    // second's session is killed (ZooKeeper: its watches end with it).
    let faults = ctx.factory().faults();
    let t = ctx.session_timeout();
    tokio::time::sleep(Duration::from_millis(150)).await;
    if faults.suspend {
        ctx.factory().suspend(&watchers[2], t / 3).await?;
    }
    if faults.kill_session {
        ctx.factory().kill_session(&watchers[1]).await?;
    }
    for task in tasks {
        task.await.context("a writer panicked")?;
    }
    foreign_task.await.context("the foreign writer panicked")??;
    ctx.factory().delay(&writers[1], Duration::ZERO).await?;
    ctx.factory().delay(&watchers[1], Duration::ZERO).await?;
    // The last write: every watcher must come to show it.
    // Each attempt writes a value of its own; a failed one is told as unknown (it may
    // have landed).
    let end_key = format!("{p}/k0");
    let (end_value, end) = within(ctx.expiry_wait(), "the last write", async {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let value = format!("end{attempt}");
            match writers[0].put(&end_key, value.clone()).await {
                Ok(v) => {
                    shared.tell(&end_key, &value, Some(v));
                    return (value, v);
                }
                Err(_) => {
                    shared.tell(&end_key, &value, None);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await?;
    *last.lock().unwrap_or_else(|p| p.into_inner()) = Some((end_key.clone(), end_value.clone()));
    stop.store(true, Ordering::SeqCst);
    let mut streams = Vec::new();
    let mut violations = Vec::new();
    for (i, f) in follows.into_iter().enumerate() {
        let (events, shown) = f.await.context("a watcher panicked")?;
        if !shown {
            let tail: Vec<&Seen> = events.iter().rev().take(6).collect();
            violations.push(format!(
                "watcher {i} never showed the last write ({end_key:?} = {end_value:?}, version {end}) within {:?}; \
                 its last events, newest first: {tail:?}",
                ctx.expiry_wait() * 2
            ));
        }
        streams.push(events);
    }
    let told = shared.told.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let every_event = writers[0].capabilities().every_watch_event;
    let mut figures = WatchFigures {
        events: streams.iter().map(Vec::len).sum(),
        resyncs: streams
            .iter()
            .flatten()
            .filter(|e| matches!(e, Seen::Resync))
            .count(),
        writes: told.len(),
    };
    match recording {
        Some(recording) => {
            let record = recording.finish(version_parts(end).0, ctx.expiry_wait()).await?;
            figures.writes = record.len();
            for (i, events) in streams.iter().enumerate() {
                judge_whole(i, events, &record, every_event, &mut violations);
            }
        }
        None => {
            let mut keys: BTreeSet<String> = told.iter().map(|t| t.key.clone()).collect();
            keys.insert(end_key.clone());
            let mut finals = BTreeMap::new();
            for k in &keys {
                if let Some((v, ver)) = foreign.read(k).await? {
                    finals.insert(k.clone(), (text(&v), ver));
                }
            }
            judge_per_key(&streams, &told, &finals, every_event, &mut violations);
        }
    }
    for c in writers.iter().chain(&watchers) {
        let _ = c.close().await;
    }
    Ok((violations, figures))
}

/// An event of the checker's kind, its revision given by `rev` (`0` for a delete).
fn checked(
    events: &[Seen],
    keep: impl Fn(&str) -> bool,
    rev: impl Fn(&str, &Version) -> u64,
) -> Vec<WatchEvent<String, String>> {
    events
        .iter()
        .filter_map(|e| match e {
            Seen::Snapshot(entries) => Some(WatchEvent::Snapshot(
                entries
                    .iter()
                    .filter(|(k, _, _)| keep(k))
                    .map(|(k, v, ver)| (k.clone(), v.clone(), rev(k, ver)))
                    .collect(),
            )),
            Seen::Put(k, v, ver) if keep(k) => Some(WatchEvent::Put {
                key: k.clone(),
                value: v.clone(),
                mod_revision: rev(k, ver),
            }),
            Seen::Delete(k) if keep(k) => Some(WatchEvent::Delete {
                key: k.clone(),
                revision: 0,
            }),
            Seen::Resync => Some(WatchEvent::Resync),
            _ => None,
        })
        .collect()
}

fn describe(
    who: &str,
    report: &coord_check::report::Report<watch::WatchSummary, WatchViolation>,
    every_event: bool,
    events: &[WatchEvent<String, String>],
    out: &mut Vec<String>,
) {
    for v in &report.violations {
        // Where the backend may coalesce rapid changes to a key, a skipped write is not
        // a violation.
        if !every_event && matches!(v, WatchViolation::Skipped { .. }) {
            continue;
        }
        let at = match v {
            WatchViolation::Phantom { event }
            | WatchViolation::Duplicate { event, .. }
            | WatchViolation::OutOfOrder { event, .. }
            | WatchViolation::Skipped { event, .. }
            | WatchViolation::Interleaved { event, .. }
            | WatchViolation::InconsistentSnapshot { event } => {
                events.get(*event).map(|e| format!(" ({e:?})"))
            }
            WatchViolation::Torn { .. } => None,
        };
        out.push(format!("{who}: {v}{}", at.unwrap_or_default()));
    }
}

/// etcd: the whole stream against the backend's record; the final view is the store.
fn judge_whole(
    i: usize,
    events: &[Seen],
    record: &[RecordedWrite],
    every_event: bool,
    out: &mut Vec<String>,
) {
    let truth: Vec<Write<String, String>> = record
        .iter()
        .map(|w| Write {
            revision: w.revision,
            key: w.key.clone(),
            kind: match &w.value {
                Some(v) => WriteKind::Put(text(v)),
                None => WriteKind::Delete,
            },
        })
        .collect();
    let stream = checked(events, |_| true, |_, v| version_parts(*v).0);
    let report = watch::check(&truth, &stream);
    describe(&format!("watcher {i}"), &report, every_event, &stream, out);
    let view = watch::view(&stream);
    let store = watch::store(&truth);
    if view != store {
        out.push(format!(
            "watcher {i} ended at a view the store never ended at: {} keys shown, {} stored",
            view.len(),
            store.len()
        ));
    }
}

/// ZooKeeper: each key's events against what its writers were told, the incarnations
/// their versions name and the key's last read; the final view is what the server holds.
/// Every watcher is judged against the same truth.
fn judge_per_key(
    streams: &[Vec<Seen>],
    told: &[Told],
    finals: &BTreeMap<String, (String, Version)>,
    every_event: bool,
    out: &mut Vec<String>,
) {
    // Writes of unknown outcome a watcher showed: values are unique, so they landed —
    // at one version, whichever watcher showed them.
    let unknown: HashSet<(&str, &str)> = told
        .iter()
        .filter(|t| t.version.is_none())
        .map(|t| (t.key.as_str(), t.value.as_str()))
        .collect();
    let mut known: BTreeMap<String, BTreeMap<(u64, u64), String>> = BTreeMap::new();
    for t in told {
        if let Some(v) = t.version {
            known
                .entry(t.key.clone())
                .or_default()
                .insert(version_parts(v), t.value.clone());
        }
    }
    for (k, (v, ver)) in finals {
        known
            .entry(k.clone())
            .or_default()
            .entry(version_parts(*ver))
            .or_insert_with(|| v.clone());
    }
    let mut witnessed: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for (i, events) in streams.iter().enumerate() {
        let shown = events.iter().flat_map(|e| match e {
            Seen::Snapshot(entries) => entries.iter().map(|(k, v, ver)| (k, v, ver)).collect::<Vec<_>>(),
            Seen::Put(k, v, ver) => vec![(k, v, ver)],
            _ => Vec::new(),
        });
        for (k, v, ver) in shown {
            if !known.contains_key(k) && !unknown.contains(&(k.as_str(), v.as_str())) {
                out.push(format!(
                    "watcher {i} showed key {k:?} = {v:?}, which no writer wrote"
                ));
                continue;
            }
            if unknown.contains(&(k.as_str(), v.as_str())) {
                let parts = version_parts(*ver);
                match witnessed.insert((k, v), parts) {
                    Some(other) if other != parts => out.push(format!(
                        "key {k:?} = {v:?} (a write of unknown outcome) was shown at versions {other:?} and {parts:?}"
                    )),
                    _ => {}
                }
            }
        }
    }
    for ((k, v), parts) in &witnessed {
        known
            .entry((*k).to_owned())
            .or_default()
            .entry(*parts)
            .or_insert_with(|| (*v).to_owned());
    }
    for (i, events) in streams.iter().enumerate() {
        judge_keys(i, events, &known, finals, every_event, out);
    }
}

/// One ZooKeeper watcher's stream, key by key, against `known` (each key's writes by
/// version); its final view against `finals`.
fn judge_keys(
    i: usize,
    events: &[Seen],
    known: &BTreeMap<String, BTreeMap<(u64, u64), String>>,
    finals: &BTreeMap<String, (String, Version)>,
    every_event: bool,
    out: &mut Vec<String>,
) {
    for (key, writes) in known {
        // Ranks: a write at 4i + 4, the delete of its incarnation (before the next one,
        // or at the end when the key is gone) at 4i + 6; a version no writer made falls
        // between them (a phantom, placed for ordering).
        let ordered: Vec<(&(u64, u64), &String)> = writes.iter().collect();
        let mut truth = Vec::new();
        let mut rank_of = BTreeMap::new();
        for (n, ((c, dv), value)) in ordered.iter().enumerate() {
            let r = 4 * n as u64 + 4;
            rank_of.insert((*c, *dv), r);
            truth.push(Write {
                revision: r,
                key: key.clone(),
                kind: WriteKind::Put((*value).clone()),
            });
            let next_incarnation = ordered.get(n + 1).map(|((c2, _), _)| *c2 != *c);
            let deleted = match next_incarnation {
                Some(new) => new,
                None => !finals.contains_key(key),
            };
            if deleted {
                truth.push(Write {
                    revision: r + 2,
                    key: key.clone(),
                    kind: WriteKind::Delete,
                });
            }
        }
        let rank = |ver: &Version| {
            let parts = version_parts(*ver);
            rank_of.get(&parts).copied().unwrap_or_else(|| {
                // Past the last known write at or below it.
                let below = ordered.iter().rposition(|(p, _)| **p <= parts);
                match below {
                    Some(n) if ordered[n].0.0 == parts.0 => 4 * n as u64 + 5,
                    Some(n) => 4 * n as u64 + 7,
                    None => 1,
                }
            })
        };
        let stream = checked(events, |k| k == key, |_, v| rank(v));
        let report = watch::check(&truth, &stream);
        describe(
            &format!("watcher {i}, key {key:?}"),
            &report,
            every_event,
            &stream,
            out,
        );
    }
    let shown: BTreeMap<String, String> = view_of(events).into_iter().map(|(k, (v, _))| (k, v)).collect();
    let held: BTreeMap<String, String> = finals.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
    if shown != held {
        let differ: BTreeSet<&String> = shown
            .keys()
            .chain(held.keys())
            .filter(|k| shown.get(*k) != held.get(*k))
            .collect();
        out.push(format!(
            "watcher {i} ended at a view the server does not hold: keys {differ:?} differ"
        ));
    }
}

/// The watch histories beside a foreign writer: no violation in two histories.
pub async fn watch_histories_beside_a_foreign_writer(ctx: Ctx) -> CaseResult {
    let mut all = WatchFigures::default();
    for seed in 1..=2 {
        let (violations, figures) = watch_history(&ctx, seed).await?;
        ensure!(
            violations.is_empty(),
            "watch history {seed} ({figures:?}):\n{}",
            violations.join("\n")
        );
        all.events += figures.events;
        all.resyncs += figures.resyncs;
        all.writes += figures.writes;
    }
    if all.events == 0 {
        bail!("no watcher saw any event: nothing was judged");
    }
    eprintln!("[{}] watch histories: {all:?}", ctx.factory().name());
    Ok(())
}

/// With the backends' watch mutants switched on (etcd: a watch resumed after its stream
/// broke starts from the current revision; ZooKeeper: the directory watch is not added
/// again after a reconnect), the same histories must show a violation.
#[cfg(feature = "mutants")]
pub async fn watch_histories_catch_the_backend_mutants(ctx: Ctx) -> CaseResult {
    use coord_core::mutants::{Mutant, switch_on};
    let _on = switch_on(&[Mutant::WatchResumeFromNow, Mutant::WatchNotRearmed]);
    // Under member faults a watcher's session may be lost and its watch armed anew,
    // which hides the ZooKeeper mutant in that history: up to ten, while one more still
    // fits in the case's bound (about 90 s a history under member faults; the bound is
    // `WATCH_MUTANTS` in cases/mod.rs), so that running out says so in this case's words.
    let started = std::time::Instant::now();
    for seed in 1..=10 {
        if started.elapsed() > Duration::from_secs(480) {
            bail!(
                "{} histories with the watch mutants switched on showed no violation in {:?}: the histories cannot catch them",
                seed - 1,
                started.elapsed()
            );
        }
        let (violations, _) = watch_history(&ctx, 100 + seed).await?;
        // The mutants act on the watcher whose links were cut: a violation elsewhere is
        // not theirs.
        let violations: Vec<&String> = violations.iter().filter(|v| v.starts_with("watcher 2")).collect();
        if !violations.is_empty() {
            eprintln!(
                "[{}] watch mutants caught in history {seed}: {}",
                ctx.factory().name(),
                violations
                    .iter()
                    .map(|v| v.chars().take(200).collect::<String>())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            return Ok(());
        }
    }
    bail!(
        "10 histories with the watch mutants switched on showed no violation: the histories cannot catch them"
    )
}
