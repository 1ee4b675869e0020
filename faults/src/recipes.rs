//! Recipes under member and link faults, judged by `coord-check`: on one cluster, four
//! clients (each through fault proxies) run a lock, a semaphore of 2, a read/write lock,
//! a queue and a counter at once — every waiting call behind a random timeout, so futures
//! are dropped at any point, and some guards dropped without a release — while the
//! cluster's leader member is killed and restarted, clients' links are reset, and one
//! client is blackholed past its session.
//!
//! Ground truth for exclusion is a per-resource log in the store: a holder appends to it
//! with a write fenced by its grant and conditional on the log's version, so the log's
//! order is the order the store accepted the writes in. The checker then judges that no
//! more grants were valid at once than the primitive admits, and that exclusive tokens
//! only grow. The queue's pushes and takes and the counter's adds and reads are recorded
//! with their invocation, completion and outcome (unknown for an outcome-unknown error
//! or a dropped future) and judged by the queue checker and the linearizability search.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use coord::{Client, ConfigStore, ErrorKind, Fence, Lock, Txn};
use coord_check::history::{Outcome, Recorder};
use coord_check::models::{Counter, CounterOp, CounterRet};
use coord_check::queue::{QueueHistory, QueueOp, QueueRet};
use coord_check::sections::{Admission, LogEntry, Mode};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::{Env, Report, SESSION, linked, retry};
use coord::Granted as _;

/// Clients of a run.
const CLIENTS: usize = 4;

/// What the workers of a run share.
struct Run {
    stop: AtomicBool,
    /// Fenced log appends accepted (per resource, summed).
    appends: AtomicUsize,
    /// Fenced appends refused as stale (`Fenced`): the fence at work.
    fenced: AtomicUsize,
    queue: Recorder<QueueOp<String>, QueueRet<String>>,
    /// For each take that returned an item: its index in the queue history, its client
    /// and that client's session generation then. A take whose client's session ended
    /// after it may see its item delivered again (its receipt outlived the taker lock).
    takes: std::sync::Mutex<Vec<(usize, usize, u64)>>,
    counter: Recorder<CounterOp, CounterRet>,
    /// About how long a queue call that completes takes (ms; a moving average): the
    /// queue workers' patience is drawn below twice this.
    queue_typical_ms: AtomicU64,
}

impl Run {
    /// Notes a queue call cut short: calls may take longer than thought (the estimate
    /// grows by an eighth, up to 2 s), so that some complete on a slow backend too.
    fn cut_short_queue_call(&self) {
        let was = self.queue_typical_ms.load(Ordering::Relaxed).max(40);
        self.queue_typical_ms
            .store((was + was / 8).min(2000), Ordering::Relaxed);
    }

    /// Notes a queue call that completed (`ok`) in the time since `began`.
    fn completed_queue_call(&self, began: Instant, ok: bool) {
        if ok {
            let took = began.elapsed().as_millis() as u64;
            let was = self.queue_typical_ms.load(Ordering::Relaxed);
            self.queue_typical_ms.store(
                if was == 0 { took } else { (was * 7 + took) / 8 },
                Ordering::Relaxed,
            );
        }
    }
}

/// Runs the scenario on `env`'s cluster.
pub(crate) async fn run(env: &Env<'_>) -> anyhow::Result<Report> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(linked(&env.proxies, env.cluster, env.kind, &env.namespace).await?);
    }
    let reader = env.direct().await?;
    let run = Arc::new(Run {
        stop: AtomicBool::new(false),
        appends: AtomicUsize::new(0),
        fenced: AtomicUsize::new(0),
        queue: Recorder::new(),
        takes: Default::default(),
        counter: Recorder::new(),
        queue_typical_ms: AtomicU64::new(0),
    });
    let mut workers = Vec::new();
    for (id, client) in clients.iter().enumerate() {
        let seed = env.args.seed.wrapping_mul(31).wrapping_add(id as u64);
        for (k, work) in [
            Work::Lock,
            Work::Semaphore,
            Work::RwLock,
            Work::Queue,
            Work::Counter,
        ]
        .into_iter()
        .enumerate()
        {
            let (client, run) = (client.clone(), run.clone());
            let rng = StdRng::seed_from_u64(seed.wrapping_mul(7).wrapping_add(k as u64));
            workers.push(tokio::spawn(work.run(client, id, run, rng)));
        }
    }
    let faults = nemesis(env, &clients).await?;
    run.stop.store(true, Ordering::SeqCst);
    for w in workers {
        if tokio::time::timeout(SESSION * 10, w).await.is_err() {
            anyhow::bail!("a worker did not stop within {:?}", SESSION * 10);
        }
    }
    // The clients close as users close them, with no drain first: an item a dropped
    // take removed is in its receipt, and the fresh client below puts it back and takes
    // it. A take whose client's session ended after it may see its item delivered again.
    let generations: Vec<u64> = clients.iter().map(|c| c.session().borrow().generation).collect();
    for client in &clients {
        let _ = tokio::time::timeout(SESSION * 3, client.close()).await;
    }
    let mut report = Report {
        faults,
        ..Report::default()
    };
    judge(&reader, &run, &generations, &mut report).await?;
    for client in clients {
        let _ = client.close().await;
    }
    let _ = reader.close().await;
    Ok(report)
}

/// One kind of worker.
#[derive(Debug, Clone, Copy)]
enum Work {
    Lock,
    Semaphore,
    RwLock,
    Queue,
    Counter,
}

impl Work {
    async fn run(self, client: Client, id: usize, run: Arc<Run>, mut rng: StdRng) {
        let mut n = 0u64;
        while !run.stop.load(Ordering::SeqCst) {
            n += 1;
            let patience = Duration::from_millis(rng.random_range(0..600));
            match self {
                Work::Lock => {
                    if let Ok(Ok(g)) = tokio::time::timeout(patience, client.lock("l")).await {
                        hold(&client, &run, "l", id, g.fence(), Mode::Exclusive, &mut rng).await;
                        if releases(&mut rng) {
                            let _ = g.release().await;
                        }
                    }
                }
                Work::Semaphore => {
                    let Ok(sem) = client.semaphore("s", 2) else { return };
                    if let Ok(Ok(g)) = tokio::time::timeout(patience, sem.acquire()).await {
                        hold(&client, &run, "s", id, g.fence(), Mode::Exclusive, &mut rng).await;
                        if releases(&mut rng) {
                            let _ = g.release().await;
                        }
                    }
                }
                Work::RwLock => {
                    let Ok(rw) = client.rw_lock("rw") else { return };
                    if rng.random_bool(0.3) {
                        if let Ok(Ok(g)) = tokio::time::timeout(patience, rw.write()).await {
                            hold(&client, &run, "rw", id, g.fence(), Mode::Exclusive, &mut rng).await;
                            if releases(&mut rng) {
                                let _ = g.release().await;
                            }
                        }
                    } else if let Ok(Ok(g)) = tokio::time::timeout(patience, rw.read()).await {
                        hold(&client, &run, "rw", id, g.fence(), Mode::Shared, &mut rng).await;
                        if releases(&mut rng) {
                            let _ = g.release().await;
                        }
                    }
                }
                Work::Queue => {
                    // Short: a call is cut short before, during or after its write —
                    // within twice what a queue call takes on this backend and machine
                    // (at least 80 ms), so about as many are cut short as complete.
                    // Half the calls are cut short around that typical time, where a
                    // take's removal lands and its answer is on the way.
                    let typical = run.queue_typical_ms.load(Ordering::Relaxed).max(40);
                    let patience = Duration::from_millis(if rng.random_bool(0.5) {
                        rng.random_range(0..2 * typical)
                    } else {
                        rng.random_range(typical / 2..typical * 3 / 2)
                    });
                    let began = Instant::now();
                    let Ok(queue) = client.queue("q", 10_000) else {
                        return;
                    };
                    if rng.random_bool(0.5) {
                        let value = format!("c{id}-{n}");
                        let pending = run.queue.invoke(id as u64, QueueOp::Push(value.clone()));
                        match tokio::time::timeout(patience, queue.push(value.into_bytes())).await {
                            Ok(r) => {
                                run.completed_queue_call(began, r.is_ok());
                                run.queue.complete(pending, outcome(r.map(|_| QueueRet::Pushed)));
                            }
                            Err(_) => run.cut_short_queue_call(),
                        }
                    } else {
                        let pending = run.queue.invoke(id as u64, QueueOp::Take);
                        let index = pending.index();
                        let taken = tokio::time::timeout(patience, queue.take()).await;
                        if taken.is_err() {
                            run.cut_short_queue_call();
                        }
                        if let Ok(r) = taken {
                            run.completed_queue_call(began, r.is_ok());
                            if r.is_ok() {
                                let generation = client.session().borrow().generation;
                                run.takes
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .push((index, id, generation));
                            }
                            run.queue
                                .complete(pending, outcome(r.map(|v| QueueRet::Took(text(v)))));
                        }
                    }
                }
                Work::Counter => {
                    // Not cut short: every unknown add multiplies the orders the
                    // linearizability search must try.
                    let patience = SESSION * 3;
                    let Ok(counter) = client.counter("n") else { return };
                    if rng.random_bool(0.7) {
                        let pending = run.counter.invoke(id as u64, CounterOp::Add(1));
                        if let Ok(r) = tokio::time::timeout(patience, counter.add(1)).await {
                            run.counter.complete(pending, outcome(r.map(CounterRet::Value)));
                        }
                    } else {
                        let pending = run.counter.invoke(id as u64, CounterOp::Get);
                        if let Ok(r) = tokio::time::timeout(patience, counter.get()).await {
                            run.counter.complete(pending, outcome(r.map(CounterRet::Value)));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(1..20))).await;
        }
    }
}

/// Ok, failed for sure, or unknown (an outcome-unknown error).
fn outcome<T>(r: coord::Result<T>) -> Outcome<T> {
    match r {
        Ok(v) => Outcome::Ok(v),
        Err(e) if e.outcome_unknown() => Outcome::Unknown,
        Err(_) => Outcome::Failed,
    }
}

fn text(v: Vec<u8>) -> String {
    String::from_utf8_lossy(&v).into_owned()
}

/// While holding `fence`: appends two or three entries to `resource`'s log, each fenced
/// by the grant and conditional on the log's version.
async fn hold(
    client: &Client,
    run: &Run,
    resource: &str,
    id: usize,
    fence: Fence,
    mode: Mode,
    rng: &mut StdRng,
) {
    let token = fence.token().get();
    let holder = format!("c{id}/{token}");
    let entry = format!(
        "{holder} {token} {}\n",
        if mode == Mode::Shared { "s" } else { "x" }
    );
    let key = format!("log/{resource}");
    for _ in 0..rng.random_range(2..4) {
        loop {
            let current = match client.get(&key).await {
                Ok(v) => v,
                Err(_) => return,
            };
            let (mut log, txn) = match current {
                Some(v) => (v.value, Txn::new().check_version(key.clone(), v.version)),
                None => (Vec::new(), Txn::new().check_absent(key.clone())),
            };
            log.extend_from_slice(entry.as_bytes());
            match client
                .commit(txn.fenced_by(fence.clone()).put(key.clone(), log))
                .await
            {
                Ok(_) => {
                    run.appends.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                // Another holder (a reader, a lease) appended first: read again.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => continue,
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    run.fenced.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                // Unknown or failed: the log says which at the end; stop holding.
                Err(_) => return,
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(1..30))).await;
    }
}

/// Releases `guard`, or (one time in five) drops it without a release.
/// Whether a guard is released (4 times in 5) or dropped (released in the background).
fn releases(rng: &mut StdRng) -> bool {
    rng.random_bool(0.8)
}

/// The faults of a run, spread over `--seconds`: the cluster's leader member killed and
/// restarted, every client's links reset once, one client blackholed past its session.
async fn nemesis(env: &Env<'_>, clients: &[Client]) -> anyhow::Result<usize> {
    let seconds = env.args.seconds.max(6);
    let start = Instant::now();
    let step = Duration::from_secs(seconds) / 4;
    let mut faults = 0;
    tokio::time::sleep(step).await;
    for client in clients {
        for link in env.proxies.get(client)?.all() {
            link.refuse_for(Duration::from_millis(200));
        }
        faults += 1;
    }
    // The leader member, killed and restarted on its data.
    let cluster = env.cluster.clone();
    let (lock, victim) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let lock = cluster.fault_lock().map_err(|e| anyhow::anyhow!("{e}"))?;
        let leader = cluster
            .wait_leader(Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        cluster.kill(leader).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((lock, leader))
    })
    .await??;
    faults += 1;
    tokio::time::sleep(step).await;
    let cluster = env.cluster.clone();
    tokio::task::spawn_blocking(move || {
        let r = cluster.restart_member(victim);
        drop(lock);
        r
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    // One client silent past its session: its grants go, and its stale writes must not
    // land once they arrive.
    if let Some(client) = clients.first() {
        env.proxies.get(client)?.blackhole_for(SESSION * 2);
        faults += 1;
    }
    let end = start + Duration::from_secs(seconds);
    tokio::time::sleep_until(end.into()).await;
    Ok(faults)
}

/// Judges the run's histories; violations go into `report`.
async fn judge(reader: &Client, run: &Run, generations: &[u64], report: &mut Report) -> anyhow::Result<()> {
    let mut shown = Vec::new();
    for (resource, admission) in [
        ("l", Admission::Exclusive),
        ("s", Admission::Permits(2)),
        ("rw", Admission::ReadWrite),
    ] {
        let key = format!("log/{resource}");
        let log = retry(|| reader.get(&key)).await?;
        let entries = parse_log(log.map(|v| v.value).unwrap_or_default())?;
        let verdict = coord_check::sections::check(admission, &entries);
        report.ops += entries.len();
        shown.push(format!("{resource}: {} sections", verdict.summary.sections));
        for v in verdict.violations {
            report.violations.push(format!("{resource}: {v:?}"));
        }
    }
    // The queue: drained by a fresh client (its last items are what was left).
    let queue = reader.queue("q", 10_000)?;
    let mut remaining = Vec::new();
    while let Ok(item) = tokio::time::timeout(SESSION * 2, retry(|| queue.take())).await {
        remaining.push(text(item?));
    }
    let left = retry(|| queue.len()).await?;
    if left > 0 {
        report
            .violations
            .push(format!("queue: {left} items left after the drain"));
    }
    let redeliverable = run
        .takes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|&&(_, client, generation)| generations[client] > generation)
        .map(|&(index, _, _)| index)
        .collect();
    let history = QueueHistory {
        ops: run.queue.history(),
        remaining,
        crashed: redeliverable,
    };
    report.ops += history.ops.len();
    let verdict = coord_check::queue::check(&history);
    let takes = verdict.summary.takes;
    shown.push(format!(
        "queue: {} taken, {} unknown",
        verdict.summary.takes,
        verdict.summary.takes_unknown + verdict.summary.pushes_unknown
    ));
    for v in verdict.violations {
        report.violations.push(format!("queue: {v:?}"));
    }
    // The counter.
    let ops = run.counter.history();
    report.ops += ops.len();
    match coord_check::linearizable::check(&Counter(0), &ops) {
        coord_check::linearizable::Verdict::Linearizable { .. } => {}
        coord_check::linearizable::Verdict::NotLinearizable(v) => {
            report
                .violations
                .push(format!("counter: not linearizable: {}", v.describe(&ops)));
        }
        other => report.violations.push(format!("counter: undecided: {other:?}")),
    }
    let (appends, fenced) = (
        run.appends.load(Ordering::SeqCst),
        run.fenced.load(Ordering::SeqCst),
    );
    shown.push(format!("{appends} fenced appends, {fenced} refused"));
    report.shown = shown.join("; ");
    // The queue shown at work too: a run whose every take was cut short judges nothing.
    report.shown_ok = appends > 0 && takes > 0;
    Ok(())
}

/// The log's entries, in the order the store accepted them.
fn parse_log(log: Vec<u8>) -> anyhow::Result<Vec<LogEntry>> {
    let text = String::from_utf8(log)?;
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(holder), Some(token), Some(mode)) = (parts.next(), parts.next(), parts.next()) else {
            anyhow::bail!("a log line is not an entry: {line:?}");
        };
        let mode = if mode == "s" {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        entries.push(LogEntry::new(holder, token.parse()?, mode));
    }
    Ok(entries)
}
