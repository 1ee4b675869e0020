//! Config histories on each backend's own layout, beside a foreign writer.
//!
//! Three coord clients (one over a slowed link, so that its compare-and-sets' reads and
//! writes are far apart) put, compare-and-set, delete and commit two-key transactions
//! on three keys, some of them dropped midway by a short timeout; a raw client of the
//! backend (see [`ForeignWriter`]) meanwhile rewrites, deletes
//! and re-creates the same keys' nodes, as zkCli, kazoo or etcdctl would — on ZooKeeper
//! a delete and re-create brings a node back at data version 0, the ABA a plain version
//! check misses. Every operation is recorded with its outcome on one clock, and each
//! key's history is judged linearizable against the [`Register`] model by
//! [`coord_check`]: a compare-and-set that succeeds against an incarnation other than
//! the one its version names has no linearization. Reads are recorded where the
//! backend's reads are linearizable ([`Factory::linearizable_reads`]).
//!
//! [`Factory::linearizable_reads`]: crate::Factory::linearizable_reads

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_check::{Checker, Mismatch, Op, Outcome, Recorder, Register, RegisterOp, RegisterRet, Verdict};
use coord_core::{Client, ConfigStore, ErrorKind, OpResult, Txn, Version};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{Rng as _, SeedableRng as _};

use crate::ForeignWriter;
use crate::harness::{CaseResult, Ctx};
use crate::util::within;

/// The keys of history `seed`: its own, so that each history starts from absent keys.
fn keys(seed: u64) -> [String; 3] {
    [0, 1, 2].map(|k| format!("h{seed}k{k}"))
}
/// Operations per coord client and by the foreign writer: a history is judged once all
/// of them are done, however long that takes on a busy machine (the case's deadline
/// bounds it).
const CLIENT_OPS: usize = 90;
const FOREIGN_OPS: usize = 60;

type Input = (String, RegisterOp<String>);
/// An operation's input as recorded: a compare-and-set's expected version is the third
/// field, still the backend's [`Version`] (numbered when judged).
type RawInput = (String, RegisterOp<String>, Option<Version>);

/// What a recorded operation returned, with its version still a [`Version`].
#[derive(Clone, Debug)]
enum Ret {
    Get(Option<(String, Version)>),
    Put(Version),
    Cas(Result<Version, Mismatch>),
    Delete(bool),
}

struct Log {
    rec: Recorder<RawInput, Ret>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A write that failed: no effect, unless its outcome is unknown.
fn failed<O>(e: &coord_core::Error) -> Outcome<O> {
    if e.outcome_unknown() {
        Outcome::Unknown
    } else {
        Outcome::Failed
    }
}

/// The Register model's version numbers: every version the history names, numbered in
/// the backend's order (ZooKeeper: `czxid`, then data version; etcd and mem: revision),
/// with room between them for the versions unknown writes made.
fn numbered(history: &[Op<RawInput, Ret>]) -> Vec<Op<Input, RegisterRet<String>>> {
    let mut all = BTreeSet::new();
    for op in history {
        if let Some(v) = op.input.2 {
            all.insert(coord_core::raw::version_parts(v));
        }
        if let Some(Ret::Get(Some((_, v))) | Ret::Put(v) | Ret::Cas(Ok(v))) = op.output() {
            all.insert(coord_core::raw::version_parts(*v));
        }
    }
    // Spaced by more than the history's length: a write of unknown outcome that took
    // effect made a version of its own, which the model places (as at least one above
    // the last) between two known ones.
    let gap = history.len() as u64 + 1;
    let rank: HashMap<(u64, u64), u64> = all.into_iter().zip((1..).map(|i| i * gap)).collect();
    let n = |v: &Version| rank[&coord_core::raw::version_parts(*v)];
    history
        .iter()
        .map(|op| {
            let (key, input, expected) = &op.input;
            let input = match input {
                RegisterOp::CompareAndSet { value, .. } => RegisterOp::CompareAndSet {
                    expected: expected.as_ref().map(n),
                    value: value.clone(),
                },
                other => other.clone(),
            };
            let outcome = match &op.outcome {
                Outcome::Ok(ret) => Outcome::Ok(match ret {
                    Ret::Get(got) => RegisterRet::Get(got.as_ref().map(|(v, ver)| (v.clone(), n(ver)))),
                    Ret::Put(v) => RegisterRet::Put(n(v)),
                    Ret::Cas(r) => RegisterRet::CompareAndSet(r.as_ref().map(n).map_err(|m| *m)),
                    Ret::Delete(d) => RegisterRet::Delete(*d),
                }),
                Outcome::Failed => Outcome::Failed,
                Outcome::Unknown => Outcome::Unknown,
            };
            Op {
                process: op.process,
                invoke: op.invoke,
                complete: op.complete,
                input: (key.clone(), input),
                outcome,
            }
        })
        .collect()
}

/// One coord client's operations.
async fn coord_worker(
    client: Client,
    process: u64,
    seed: u64,
    reads: bool,
    keys: [String; 3],
    log: Arc<Log>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    // The versions this client saw, per key: compare-and-sets use the latest or an
    // older one (the ABA candidates after a foreign re-create).
    let mut seen: HashMap<&str, Vec<Version>> = HashMap::new();
    for n in 0..CLIENT_OPS {
        let key = keys.choose(&mut rng).unwrap_or(&keys[0]).as_str();
        let value = format!("c{process}n{n}");
        // A quarter of the writes are dropped after a few milliseconds (a caller's
        // timeout): recorded as unknown, they may land later.
        let limit = if rng.random_bool(0.25) {
            Duration::from_millis(rng.random_range(1..6))
        } else {
            Duration::from_secs(10)
        };
        let roll = rng.random_range(0..100);
        if roll < 25 {
            // Where reads are not linearizable across members, they are made (they
            // feed the versions compare-and-sets use) but not judged.
            let t = reads.then(|| log.rec.invoke(process, (key.to_owned(), RegisterOp::Get, None)));
            let got = tokio::time::timeout(limit, client.get(key)).await;
            let outcome = match got {
                Ok(Ok(found)) => {
                    if let Some(v) = &found {
                        seen.entry(key).or_default().push(v.version);
                    }
                    Outcome::Ok(Ret::Get(found.map(|v| (text(&v.value), v.version))))
                }
                _ => Outcome::Failed,
            };
            if let Some(t) = t {
                log.rec.complete(t, outcome);
            }
        } else if roll < 45 {
            let t = log
                .rec
                .invoke(process, (key.to_owned(), RegisterOp::Put(value.clone()), None));
            let outcome = match tokio::time::timeout(limit, client.put(key, value)).await {
                Ok(Ok(v)) => {
                    seen.entry(key).or_default().push(v);
                    Outcome::Ok(Ret::Put(v))
                }
                Ok(Err(e)) => failed(&e),
                Err(_) => Outcome::Unknown,
            };
            log.rec.complete(t, outcome);
        } else if roll < 80 {
            let versions = seen.get(key).cloned().unwrap_or_default();
            let expected = match rng.random_range(0..100) {
                0..60 => versions.last().copied(),
                60..75 => None,
                _ => versions.choose(&mut rng).copied(),
            };
            let t = log.rec.invoke(
                process,
                (
                    key.to_owned(),
                    RegisterOp::CompareAndSet {
                        expected: None,
                        value: value.clone(),
                    },
                    expected,
                ),
            );
            let outcome = match tokio::time::timeout(limit, client.compare_and_set(key, expected, value))
                .await
            {
                Ok(Ok(v)) => {
                    seen.entry(key).or_default().push(v);
                    Outcome::Ok(Ret::Cas(Ok(v)))
                }
                Ok(Err(e)) if e.kind() == ErrorKind::VersionMismatch => Outcome::Ok(Ret::Cas(Err(Mismatch))),
                Ok(Err(e)) => failed(&e),
                Err(_) => Outcome::Unknown,
            };
            log.rec.complete(t, outcome);
        } else if roll < 90 {
            let t = log
                .rec
                .invoke(process, (key.to_owned(), RegisterOp::Delete, None));
            let outcome = match tokio::time::timeout(limit, client.delete(key)).await {
                Ok(Ok(existed)) => Outcome::Ok(Ret::Delete(existed)),
                Ok(Err(e)) => failed(&e),
                Err(_) => Outcome::Unknown,
            };
            log.rec.complete(t, outcome);
        } else {
            // A two-key transaction: each key compare-and-set at its latest seen
            // version (or absent). Recorded per key; a refused one had no effect on
            // either key (which check failed is not told).
            let others: Vec<&str> = keys.iter().map(String::as_str).filter(|k| *k != key).collect();
            let other = *others.choose(&mut rng).unwrap_or(&key);
            let mut txn = Txn::new();
            let mut pending = Vec::new();
            for k in [key, other] {
                let expected = seen.get(k).and_then(|v| v.last().copied());
                txn = match expected {
                    Some(v) => txn.check_version(k, v),
                    None => txn.check_absent(k),
                };
                let value = format!("{value}-{k}");
                txn = txn.put(k, value.clone());
                pending.push((
                    k,
                    log.rec.invoke(
                        process,
                        (
                            k.to_owned(),
                            RegisterOp::CompareAndSet {
                                expected: None,
                                value,
                            },
                            expected,
                        ),
                    ),
                ));
            }
            let result = tokio::time::timeout(limit, client.commit(txn)).await;
            for (i, (k, t)) in pending.into_iter().enumerate() {
                let outcome = match &result {
                    Ok(Ok(results)) => match results.get(i) {
                        Some(OpResult::Put(v)) => {
                            seen.entry(k).or_default().push(*v);
                            Outcome::Ok(Ret::Cas(Ok(*v)))
                        }
                        _ => Outcome::Unknown,
                    },
                    Ok(Err(e)) if e.kind() == ErrorKind::VersionMismatch => Outcome::Failed,
                    Ok(Err(e)) => failed(e),
                    Err(_) => Outcome::Unknown,
                };
                log.rec.complete(t, outcome);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..4))).await;
    }
}

/// The foreign writer's operations: rewrites, deletes, and a delete followed at once
/// by a re-create (on ZooKeeper back at data version 0).
async fn foreign_worker(
    writer: Box<dyn ForeignWriter>,
    process: u64,
    seed: u64,
    keys: [String; 3],
    log: Arc<Log>,
) -> anyhow::Result<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut recreated = 0;
    let mut failed = Vec::new();
    for n in 0..FOREIGN_OPS {
        let key = keys.choose(&mut rng).unwrap_or(&keys[0]).as_str();
        let value = format!("f{n}");
        let roll = rng.random_range(0..100);
        // A failed foreign write (its member killed, say) may or may not have landed.
        if roll < 60 {
            let t = log
                .rec
                .invoke(process, (key.to_owned(), RegisterOp::Delete, None));
            match writer.delete(key).await {
                Ok(existed) => {
                    log.rec.complete(t, Outcome::Ok(Ret::Delete(existed)));
                    recreated += usize::from(existed);
                }
                Err(e) => {
                    log.rec.complete(t, Outcome::Unknown);
                    failed.push(e.to_string());
                }
            }
        }
        if !(30..60).contains(&roll) {
            let t = log
                .rec
                .invoke(process, (key.to_owned(), RegisterOp::Put(value.clone()), None));
            match writer.put(key, value.as_bytes()).await {
                Ok(v) => log.rec.complete(t, Outcome::Ok(Ret::Put(v))),
                Err(e) => {
                    log.rec.complete(t, Outcome::Unknown);
                    failed.push(e.to_string());
                }
            }
        }
        if failed.len() > FOREIGN_OPS / 4 {
            bail!(
                "the foreign writer failed {} times: {}",
                failed.len(),
                failed.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(2..12))).await;
    }
    Ok(recreated)
}

/// One history: its violations (described), how many operations, and how many of
/// them were compare-and-sets that succeeded.
async fn config_history(ctx: &Ctx, seed: u64) -> anyhow::Result<(Vec<String>, usize, usize)> {
    let clients = ctx.clients(3).await?;
    // The config directory exists before the foreign writer's first create.
    clients[0].put("seed", b"s".to_vec()).await?;
    let writer = ctx.factory().foreign_writer(&clients[0]).await?;
    // The layout the foreign writer writes is the one coord reads (on a key of its own:
    // the history's keys start absent).
    let v = writer.put("probe", b"probe").await?;
    let read = within(ctx.expiry_wait(), "the probe read", async {
        loop {
            match clients[1].get("probe").await {
                Ok(Some(got)) if got.version == v => return Ok(got),
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .context("coord never read the foreign writer's key: the factory writes another layout")??;
    ensure!(
        read.value == b"probe",
        "coord read {:?} for the foreign write",
        read.value
    );
    ctx.factory().delay(&clients[2], Duration::from_millis(4)).await?;
    let log = Arc::new(Log { rec: Recorder::new() });
    let reads = ctx.factory().linearizable_reads();
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        tasks.push(tokio::spawn(coord_worker(
            client.clone(),
            i as u64 + 1,
            seed * 10 + i as u64,
            reads,
            keys(seed),
            log.clone(),
        )));
    }
    let foreign = tokio::spawn(foreign_worker(writer, 99, seed * 10 + 9, keys(seed), log.clone()));
    for t in tasks {
        t.await?;
    }
    let recreated = foreign.await??;
    ctx.factory().delay(&clients[2], Duration::ZERO).await?;
    let raw = log.rec.history();
    let history = numbered(&raw);
    let cas_ok = history
        .iter()
        .filter(|op| {
            matches!(
                (&op.input.1, op.output()),
                (
                    RegisterOp::CompareAndSet { .. },
                    Some(RegisterRet::CompareAndSet(Ok(_)))
                )
            )
        })
        .count();
    let verdicts = Checker::new().check_per_key(&Register::new(), &history, |(k, i)| (k.clone(), i.clone()));
    let mut violations = Vec::new();
    for (key, verdict) in &verdicts.verdicts {
        match verdict {
            Verdict::Linearizable { .. } => {}
            Verdict::NotLinearizable(v) => violations.push(format!(
                "key {key:?} is not linearizable (seed {seed}, {recreated} foreign deletes): {}",
                v.describe(&history)
            )),
            Verdict::Inconclusive { steps } => {
                tracing::warn!(key = %key, steps, "config history inconclusive");
            }
            Verdict::Malformed { op, reason } => bail!("key {key:?}: malformed history at #{op}: {reason}"),
        }
    }
    for c in &clients {
        let _ = c.close().await;
    }
    Ok((violations, history.len(), cas_ok))
}

/// The config histories beside a foreign writer: no violation in two histories.
pub async fn config_histories_beside_a_foreign_writer(ctx: Ctx) -> CaseResult {
    let mut ops = 0;
    let mut cas = 0;
    for seed in 1..=2 {
        let (violations, n, c) = config_history(&ctx, seed).await?;
        ensure!(violations.is_empty(), "{}", violations.join("\n"));
        ops += n;
        cas += c;
    }
    ensure!(
        cas > 0,
        "no compare-and-set succeeded in {ops} operations: nothing was judged"
    );
    Ok(())
}

/// With the backend's config mutants switched on (ZooKeeper: a compare-and-set that
/// skips the incarnation marker; etcd: one that checks the version it read and then
/// writes unconditionally), the same histories must show a violation.
#[cfg(feature = "mutants")]
pub async fn config_histories_catch_the_backend_mutants(ctx: Ctx) -> CaseResult {
    use coord_core::mutants::{Mutant, switch_on};
    let _on = switch_on(&[Mutant::MarkerUnchecked, Mutant::CasReadThenWrite]);
    for seed in 1..=8 {
        let (violations, _, _) = config_history(&ctx, 100 + seed).await?;
        if !violations.is_empty() {
            eprintln!(
                "[{}] config mutants caught in history {seed}: {}",
                ctx.factory().name(),
                violations.first().map_or("", |v| v.lines().next().unwrap_or(""))
            );
            return Ok(());
        }
    }
    bail!(
        "8 histories with the config mutants switched on showed no violation: the histories cannot catch them"
    )
}

// ---- queues ----

use coord_check::queue::{self as queue_check, QueueHistory, QueueOp, QueueRet};
use coord_check::report as coord_core_report;

/// Pushes per producer, and what a queue history needs before it is judged.
const PUSHES: usize = 40;

type QueueRecord = Op<QueueOp<String>, QueueRet<String>>;

/// A queue history on the backend's own layout, clients closed the way users close
/// them: two producers push unique items (a quarter of the pushes dropped after a few
/// milliseconds); three consumers over slowed links (5 ms each way, one 15 ms) take them,
/// a third of the takes dropped midway (up to 30 ms in, 80 ms on the slowest link: many
/// after their removal landed), and each consumer's client is closed mid-take, with
/// no drain, and replaced, twice; once the producers are done, a consumer stops when a
/// full-length take finds nothing. Then a fresh client takes what is left. Judged by
/// [`coord_check::queue`]: no acknowledged item lost, none delivered twice, none
/// invented. No consumer crashes here, so no second delivery is excused.
pub async fn queue_history_with_closes_mid_take(ctx: Ctx) -> CaseResult {
    let (report, troubled, kind) = queue_history(&ctx, "hq", 1, false).await?;
    if !report.is_ok() && troubled {
        bail!(
            "the queue history on {kind} while a consumer's session was in trouble (a member unavailable; a take \
             settled after a session loss may be delivered again): {report}"
        );
    }
    ensure!(report.is_ok(), "the queue history on {kind}: {report}");
    eprintln!("[{kind}] queue history: {report}");
    Ok(())
}

/// With the mutant `TakeWithoutReceipt` (a take removes its item without a receipt
/// holding it), the same history must lose items: a take dropped or closed after its
/// removal landed kept the item only in memory. Runs cycle the links of the history
/// above through 1, 4, 2 and 8 times slower (and limits to match): which takes are
/// dropped while the answer of their removal travels back depends on the backend
/// (ZooKeeper's show the loss at the first speed, etcd's at the second) and on how busy
/// the machine is, so the case runs histories until one loses an item, at most
/// 20 within 40 s; its consumers close their client right after
/// each take they dropped.
#[cfg(feature = "mutants")]
pub async fn queue_history_catches_take_without_receipt(ctx: Ctx) -> CaseResult {
    use coord_core::mutants::{Mutant, switch_on};
    let _on = switch_on(&[Mutant::TakeWithoutReceipt]);
    let started = tokio::time::Instant::now();
    for run in 1..=MUTANT_RUNS {
        // Within the case's deadline, with room for one more history.
        if started.elapsed() > MUTANT_TIME {
            bail!(
                "{} queue histories with takes writing no receipt (all that fit in {MUTANT_TIME:?}) lost no item",
                run - 1
            );
        }
        let slow = [1, 4, 2, 8][(run - 1) % 4];
        let (report, _, kind) = queue_history(&ctx, &format!("hqm{run}"), slow, true).await?;
        if report.summary.lost > 0 {
            eprintln!("[{kind}] take without a receipt caught in run {run} (links {slow}x slower): {report}");
            return Ok(());
        }
    }
    bail!(
        "{MUTANT_RUNS} queue histories with takes writing no receipt lost no item: the history cannot catch it"
    )
}

/// How many queue histories the mutant control runs at most before it concludes that
/// the history cannot catch a take without a receipt.
#[cfg(feature = "mutants")]
const MUTANT_RUNS: usize = 20;

/// After this long the mutant control starts no new history (a case has 60 s).
#[cfg(feature = "mutants")]
const MUTANT_TIME: Duration = Duration::from_secs(40);

/// One queue history (see [`queue_history_with_closes_mid_take`]) on queue `name`, its
/// links and take limits `slow` times the ones described there: the report, whether a
/// consumer's session was in trouble, and the backend's kind. With `eager_closes`, a
/// consumer closes its client right after each take it dropped (up to six times): an
/// item a dropped take kept only in memory is lost at once, not delivered by the
/// client's next take.
async fn queue_history(
    ctx: &Ctx,
    name: &str,
    slow: u64,
    eager_closes: bool,
) -> anyhow::Result<(
    coord_core_report::Report<queue_check::QueueSummary, queue_check::QueueViolation<String>>,
    bool,
    &'static str,
)> {
    let name: Arc<str> = Arc::from(name);
    let rec: Arc<Recorder<QueueOp<String>, QueueRet<String>>> = Arc::new(Recorder::new());
    let producers = ctx.clients(2).await?;
    let mut tasks = Vec::new();
    for (p, client) in producers.iter().enumerate() {
        let (client, rec, name) = (client.clone(), rec.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let queue = client.queue(&name, 10_000)?;
            let mut rng = StdRng::seed_from_u64(p as u64 + 7);
            for n in 0..PUSHES {
                let value = format!("p{p}-{n}");
                let limit = if rng.random_bool(0.25) {
                    Duration::from_millis(rng.random_range(1..6))
                } else {
                    Duration::from_secs(10)
                };
                let t = rec.invoke(p as u64 + 1, QueueOp::Push(value.clone()));
                let outcome = match tokio::time::timeout(limit, queue.push(value.into_bytes())).await {
                    Ok(Ok(_)) => Outcome::Ok(QueueRet::Pushed),
                    Ok(Err(e)) => failed(&e),
                    Err(_) => Outcome::Unknown,
                };
                rec.complete(t, outcome);
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
            }
            anyhow::Ok(())
        }));
    }
    let consumers_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Whether a consumer's session was in trouble (a member fault): a take settled only
    // after its session was lost may be delivered again (at-least-once).
    let troubled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut consumers = Vec::new();
    for c in 0..3u64 {
        let (ctx_clients, rec, done) = (ctx.clients(1).await?, rec.clone(), consumers_done.clone());
        let first = ctx_clients.into_iter().next().context("a consumer client")?;
        // Slow links: a take dropped while its answer travels back has landed.
        ctx.factory()
            .delay(&first, Duration::from_millis(slow * if c == 2 { 15 } else { 5 }))
            .await?;
        consumers.push((first, rec, done, c));
    }
    let mut consumer_tasks = Vec::new();
    for (first, rec, done, c) in consumers {
        let (ctx, troubled, name) = (ctx.clone(), troubled.clone(), name.clone());
        consumer_tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(c + 100);
            let mut client = first;
            let mut closes = 0;
            let max_closes = if eager_closes { 6 } else { 2 };
            let process = 10 + c;
            loop {
                let transitions = client.stats().session_transitions;
                let queue = client.queue(&name, 10_000)?;
                let mut n = 0usize;
                // This client's turn: a number of takes, the last one cut short by
                // closing the client while it waits or settles.
                let turn = rng.random_range(8..20);
                // Once the producers are done, a consumer stops when a full-length take
                // found nothing (the queue is drained, or nearly).
                let mut drained = false;
                while n < turn && !drained {
                    n += 1;
                    let full = Duration::from_millis(500);
                    let limit = if rng.random_bool(0.3) {
                        Duration::from_millis(rng.random_range(1..slow * if c == 2 { 80 } else { 30 }))
                    } else {
                        full
                    };
                    let t = rec.invoke(process, QueueOp::Take);
                    let outcome = match tokio::time::timeout(limit, queue.take()).await {
                        Ok(Ok(v)) => Outcome::Ok(QueueRet::Took(String::from_utf8_lossy(&v).into_owned())),
                        // A take that failed, or was dropped, may have removed an item:
                        // coord puts it back (its receipt), so it reached no one.
                        Ok(Err(_)) => Outcome::Unknown,
                        Err(_) => {
                            drained = limit == full && done.load(std::sync::atomic::Ordering::SeqCst);
                            if eager_closes && limit != full && closes < max_closes {
                                n = turn;
                            }
                            Outcome::Unknown
                        }
                    };
                    rec.complete(t, outcome);
                }
                if client.stats().session_transitions > transitions {
                    troubled.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                if closes == max_closes || drained {
                    return anyhow::Ok(client);
                }
                // Closed mid-take: a take in flight on another task when close runs.
                let racing = {
                    let (queue, rec) = (queue.clone(), rec.clone());
                    tokio::spawn(async move {
                        let t = rec.invoke(process, QueueOp::Take);
                        let outcome = match queue.take().await {
                            Ok(v) => Outcome::Ok(QueueRet::Took(String::from_utf8_lossy(&v).into_owned())),
                            Err(_) => Outcome::Unknown,
                        };
                        rec.complete(t, outcome);
                    })
                };
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..10))).await;
                let _ = client.close().await;
                let _ = racing.await;
                closes += 1;
                // A new client, as a process restarted after a clean exit opens.
                client = ctx.client().await?;
            }
        }));
    }
    for t in tasks {
        t.await.context("a producer panicked")??;
    }
    consumers_done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut last_clients = Vec::new();
    for t in consumer_tasks {
        last_clients.push(t.await.context("a consumer panicked")??);
    }
    for c in &last_clients {
        let _ = c.close().await;
    }
    // What is left, taken by a fresh client (which also puts back every receipt).
    let drain = ctx.client().await?;
    let queue = drain.queue(&name, 10_000)?;
    let mut remaining = Vec::new();
    while let Some(v) = within(ctx.expiry_wait(), "a drain take", queue.try_take()).await?? {
        remaining.push(String::from_utf8_lossy(&v).into_owned());
    }
    let ops: Vec<QueueRecord> = rec.history();
    let history = QueueHistory {
        ops,
        remaining,
        crashed: Default::default(),
    };
    let report = queue_check::check(&history);
    Ok((
        report,
        troubled.load(std::sync::atomic::Ordering::SeqCst),
        drain.kind(),
    ))
}
