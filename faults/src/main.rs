//! The coord fault campaign (`scripts/faults`): on a 3-member ZooKeeper ensemble and a
//! 3-member etcd cluster, workers increment a shared counter under a coord lock, each
//! write fenced by the lock's grant, while a scenario injects one kind of fault. Every
//! operation is recorded, and the history is checked:
//!
//! - every write reported applied is in the counter's history exactly once (no lost
//!   and no duplicated update), and the counter ends at the number of applied writes;
//! - the tokens of the applied writes strictly increase in the order they were applied
//!   (no two writes with overlapping validity);
//! - every write of unknown outcome is resolved: it either is in the history or not.
//!
//! Each scenario shows its fault happened (a stale write attempted and rejected, a
//! failover timed). The negative control runs the paused-holder scenario without fencing
//! and must fail the checker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use coord::{Client, ConfigStore, ErrorKind, Lock, Txn};
use coord_testkit::{Cluster, ClusterOptions, Kind, ProxyMap};

/// The session timeout / lease TTL of every worker.
const SESSION: Duration = Duration::from_secs(2);

#[derive(Parser)]
#[command(about = "Run coord's fault campaign against 3-member ZooKeeper and etcd clusters")]
struct Args {
    /// How long each scenario runs, in seconds (the quick form: 8).
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Workers per scenario.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Seed of the workers' hold times.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Only these backends (zk, etcd).
    #[arg(long, value_delimiter = ',', default_value = "zk,etcd")]
    backends: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// The holder stops (its links silent, itself idle) past the session timeout between
    /// its read and its write, while the others contend; then it writes.
    PausedHolder,
    /// The holder crashes between its read and its write: its links refuse for good.
    KilledHolder,
    /// The cluster's leader member is killed mid-run and restarted on its data.
    LeaderMemberKilled,
    /// A follower member is killed mid-run and restarted.
    FollowerMemberKilled,
    /// A lock's create arrives and its answer is lost (the link reset right after the
    /// request is sent): the contender must not be left twice, nor stuck.
    AmbiguousCreate,
    /// A waiter's links are cut for 3 session timeouts while it is queued: its session
    /// expires under it.
    WaiterSessionExpired,
    /// PausedHolder without fencing: the checker must find the lost update.
    NegativeControl,
}

impl Scenario {
    const ALL: [Scenario; 7] = [
        Scenario::PausedHolder,
        Scenario::KilledHolder,
        Scenario::LeaderMemberKilled,
        Scenario::FollowerMemberKilled,
        Scenario::AmbiguousCreate,
        Scenario::WaiterSessionExpired,
        Scenario::NegativeControl,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::PausedHolder => "holder paused past timeout",
            Scenario::KilledHolder => "holder killed",
            Scenario::LeaderMemberKilled => "leader member killed",
            Scenario::FollowerMemberKilled => "follower member killed",
            Scenario::AmbiguousCreate => "ambiguous lock create",
            Scenario::WaiterSessionExpired => "waiter's session expired while queued",
            Scenario::NegativeControl => "negative control (no fence)",
        }
    }

    fn fenced(self) -> bool {
        self != Scenario::NegativeControl
    }
}

/// One write attempt.
#[derive(Debug, Clone)]
struct Write {
    token: u64,
    /// The value written (the value read + 1).
    value: u64,
    outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    Fenced,
    Unknown,
    NotApplied,
}

/// What one scenario run gives.
#[derive(Debug, Default)]
struct Report {
    faults: usize,
    ops: usize,
    stale_rejected: usize,
    violations: Vec<String>,
    worst_failover: Option<Duration>,
}

/// Shared state of a run's workers and its fault injector.
struct Run {
    history: Mutex<Vec<Write>>,
    /// The fault injector asks the next holder to pause (or crash) between read and write.
    strike: AtomicBool,
    faults: AtomicUsize,
    /// When the last struck holder went silent, and the worst time until another worker
    /// acquired the lock after that.
    struck_at: Mutex<Option<Instant>>,
    worst_failover: Mutex<Option<Duration>>,
    stop: AtomicBool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut rows = Vec::new();
    let mut failed = false;
    for backend in &args.backends {
        let kind: Kind = backend.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let cluster =
            Arc::new(Cluster::start(ClusterOptions::new(kind, 3)).map_err(|e| anyhow::anyhow!("{e}"))?);
        for (n, scenario) in Scenario::ALL.into_iter().enumerate() {
            let report = rt.block_on(run(&args, &cluster, kind, scenario, n))?;
            let ok = if scenario.fenced() {
                report.violations.is_empty() && report.faults > 0
            } else {
                !report.violations.is_empty()
            };
            failed |= !ok;
            rows.push((scenario, backend.clone(), report, ok));
        }
    }
    println!();
    println!(
        "| scenario | backend | faults | ops | stale writes rejected | violations | worst fault→new holder (T = {:?}) | result |",
        SESSION
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (scenario, backend, r, ok) in &rows {
        println!(
            "| {} | {backend} | {} | {} | {} | {} | {} | {} |",
            scenario.name(),
            r.faults,
            r.ops,
            r.stale_rejected,
            r.violations.len(),
            r.worst_failover
                .map_or("—".to_owned(), |d| format!("{:.2}s", d.as_secs_f64())),
            if *ok { "pass" } else { "FAIL" }
        );
    }
    for (scenario, backend, r, _) in &rows {
        for v in r.violations.iter().take(3) {
            println!("{backend} / {}: {v}", scenario.name());
        }
    }
    if failed {
        bail!(
            "the campaign failed: a fenced scenario broke an invariant or injected no fault, or the negative control found nothing"
        );
    }
    Ok(())
}

fn url(kind: Kind, hosts: &str, namespace: &str) -> String {
    match kind {
        Kind::Zk => format!(
            "zk://{hosts}/{namespace}?session_timeout={}ms",
            SESSION.as_millis()
        ),
        Kind::Etcd => format!(
            "etcd://{hosts}/{namespace}?lease_ttl={}s&request_timeout=3s",
            SESSION.as_secs()
        ),
    }
}

async fn run(
    args: &Args,
    cluster: &Arc<Cluster>,
    kind: Kind,
    scenario: Scenario,
    n: usize,
) -> anyhow::Result<Report> {
    let namespace = format!("coord-faults-{}-{n}", std::process::id());
    let proxies = Arc::new(ProxyMap::default());
    let state = Arc::new(Run {
        history: Mutex::new(Vec::new()),
        strike: AtomicBool::new(false),
        faults: AtomicUsize::new(0),
        struck_at: Mutex::new(None),
        worst_failover: Mutex::new(None),
        stop: AtomicBool::new(false),
    });
    let setup = coord::connect(&url(kind, &cluster.hosts(), &namespace)).await?;
    setup.put("counter", b"0".to_vec()).await?;
    let mut workers = Vec::new();
    for w in 0..args.workers {
        let (proxies, state, ns) = (proxies.clone(), state.clone(), namespace.clone());
        let addrs = cluster.addrs();
        let seed = args.seed.wrapping_mul(31).wrapping_add(w as u64);
        workers.push(tokio::spawn(async move {
            let client = proxies
                .open(&addrs, |links| {
                    let hosts = links.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
                    async move { coord::connect(&url(kind, &hosts, &ns)).await }
                })
                .await?;
            worker(client, &proxies, &state, scenario, seed).await
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    tokio::time::sleep(Duration::from_secs(2)).await;
    match scenario {
        Scenario::PausedHolder
        | Scenario::KilledHolder
        | Scenario::NegativeControl
        | Scenario::AmbiguousCreate
        | Scenario::WaiterSessionExpired => {
            state.strike.store(true, Ordering::SeqCst);
        }
        Scenario::LeaderMemberKilled | Scenario::FollowerMemberKilled => {
            let c = cluster.clone();
            let leader = scenario == Scenario::LeaderMemberKilled;
            let lock = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                let lock = c.fault_lock().map_err(|e| anyhow::anyhow!("{e}"))?;
                let l = c
                    .wait_leader(Duration::from_secs(30))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let victim = if leader { l } else { (l + 1) % c.len() };
                c.kill(victim).map_err(|e| anyhow::anyhow!("{e}"))?;
                Ok((lock, victim))
            })
            .await??;
            state.faults.fetch_add(1, Ordering::SeqCst);
            *state.struck_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            tokio::time::sleep(Duration::from_secs(4)).await;
            let c = cluster.clone();
            tokio::task::spawn_blocking(move || {
                let (lock, victim) = lock;
                let r = c.restart_member(victim);
                drop(lock);
                r
            })
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    tokio::time::sleep_until(deadline.into()).await;
    state.stop.store(true, Ordering::SeqCst);
    for w in workers {
        // A crashed worker ends early; a stopped one finishes its cycle.
        match tokio::time::timeout(SESSION * 10, w).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("worker: {e:#}"),
            Ok(Err(e)) => eprintln!("worker task: {e}"),
            Err(_) => eprintln!("a worker did not stop within {:?}", SESSION * 10),
        }
    }
    let final_value = read_counter(&setup).await?;
    let _ = setup.close().await;
    let history = state.history.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut report = check(&history, final_value);
    report.faults = state.faults.load(Ordering::SeqCst);
    report.worst_failover = *state.worst_failover.lock().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "{kind:?} / {}: {} ops, {} faults, {} violations",
        scenario.name(),
        report.ops,
        report.faults,
        report.violations.len()
    );
    Ok(report)
}

async fn read_counter(client: &Client) -> anyhow::Result<u64> {
    let v = retry(|| client.get("counter")).await?.context("no counter")?;
    Ok(String::from_utf8_lossy(&v.value).parse()?)
}

/// Runs `op` again while it fails with a retryable error, for at most 30 s.
async fn retry<T, F, Fut>(mut op: F) -> coord::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = coord::Result<T>>,
{
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match op().await {
            Err(e) if e.is_retryable() && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

async fn worker(
    client: Client,
    proxies: &ProxyMap,
    state: &Run,
    scenario: Scenario,
    seed: u64,
) -> anyhow::Result<()> {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while !state.stop.load(Ordering::SeqCst) {
        // Faults that strike a contender before it holds.
        let before = matches!(
            scenario,
            Scenario::AmbiguousCreate | Scenario::WaiterSessionExpired
        );
        if before && state.strike.swap(false, Ordering::SeqCst) {
            state.faults.fetch_add(1, Ordering::SeqCst);
            let links = proxies.get(&client)?;
            if scenario == Scenario::AmbiguousCreate {
                for link in links.all() {
                    link.reset_after_next_request(Duration::from_millis(300));
                }
            } else {
                // Queue behind the holder, then lose the session while waiting.
                let waiting = {
                    let client = client.clone();
                    tokio::spawn(async move { client.lock("counter").await })
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                links.refuse_for(SESSION * 3);
                match waiting.await {
                    // Granted on a new session after the cut: hold and release it.
                    Ok(Ok(g)) => {
                        let _ = g.release().await;
                    }
                    Ok(Err(e)) => eprintln!("waiter whose session expired: {e}"),
                    Err(e) => eprintln!("waiter task: {e}"),
                }
            }
        }
        let guard = match retry(|| client.lock("counter")).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!("lock: {e}");
                continue;
            }
        };
        if let Some(at) = state.struck_at.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let took = at.elapsed();
            let mut worst = state.worst_failover.lock().unwrap_or_else(|p| p.into_inner());
            *worst = Some(worst.map_or(took, |w| w.max(took)));
        }
        let token = guard.token().get();
        let Ok(read) = read_counter(&client).await else {
            let _ = guard.release().await;
            continue;
        };
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
        let during = matches!(
            scenario,
            Scenario::PausedHolder | Scenario::KilledHolder | Scenario::NegativeControl
        );
        if during && state.strike.swap(false, Ordering::SeqCst) {
            state.faults.fetch_add(1, Ordering::SeqCst);
            let links = proxies.get(&client)?;
            match scenario {
                Scenario::KilledHolder => {
                    // The process is gone: nothing more is sent, nothing cleaned up.
                    links.refuse();
                    *state.struck_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    std::mem::forget(guard);
                    return Ok(());
                }
                _ => {
                    // Paused: silent and idle for 3 session timeouts, then on again.
                    links.blackhole_for(SESSION * 3);
                    *state.struck_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                    tokio::time::sleep(SESSION * 3).await;
                }
            }
        }
        let mut txn = Txn::new().put("counter", (read + 1).to_string().into_bytes());
        if scenario.fenced() {
            txn = txn.fenced_by(guard.fence());
        }
        // As an application would: a write that surely did not apply is sent again
        // (a paused holder's write reaches the server once it is back).
        let until = Instant::now() + SESSION * 5;
        let result = loop {
            match client.commit(txn.clone()).await {
                Err(e) if e.is_retryable() && !e.outcome_unknown() && Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other,
            }
        };
        let outcome = match result {
            Ok(_) => Outcome::Applied,
            Err(e) if e.kind() == ErrorKind::Fenced => Outcome::Fenced,
            Err(e) if e.outcome_unknown() => Outcome::Unknown,
            Err(_) => Outcome::NotApplied,
        };
        state
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Write {
                token,
                value: read + 1,
                outcome,
            });
        let _ = guard.release().await;
    }
    let _ = client.close().await;
    Ok(())
}

/// Checks a history against the counter's final value.
fn check(history: &[Write], final_value: u64) -> Report {
    let mut report = Report {
        ops: history.len(),
        stale_rejected: history.iter().filter(|w| w.outcome == Outcome::Fenced).count(),
        ..Report::default()
    };
    // Each value 1..=final was written by exactly one applied (or unknown, resolved as
    // applied) write; an applied write of an already-written value lost an update.
    let mut by_value: BTreeMap<u64, Vec<&Write>> = BTreeMap::new();
    for w in history
        .iter()
        .filter(|w| matches!(w.outcome, Outcome::Applied | Outcome::Unknown))
    {
        by_value.entry(w.value).or_default().push(w);
    }
    let mut chain = Vec::new();
    for value in 1..=final_value {
        let writers = by_value.get(&value).map(Vec::as_slice).unwrap_or(&[]);
        let applied: Vec<&&Write> = writers.iter().filter(|w| w.outcome == Outcome::Applied).collect();
        if applied.len() > 1 {
            report.violations.push(format!(
                "{} writes reported applied all wrote {value}: an update was lost (tokens {:?})",
                applied.len(),
                applied.iter().map(|w| w.token).collect::<Vec<_>>()
            ));
        }
        match writers.first() {
            Some(w) => chain.push(*w),
            None => report.violations.push(format!(
                "the counter passed {value}, but no write of it was attempted"
            )),
        }
    }
    for w in history.iter().filter(|w| w.outcome == Outcome::Applied) {
        if w.value > final_value {
            report.violations.push(format!(
                "a write of {} (token {}) was reported applied, but the counter ended at {final_value}",
                w.value, w.token
            ));
        }
    }
    // Unknown outcomes above the final value were not applied: resolved either way.
    for pair in chain.windows(2) {
        if pair[1].token <= pair[0].token {
            report.violations.push(format!(
                "token {} wrote {} after token {} wrote {}: tokens went back",
                pair[1].token, pair[1].value, pair[0].token, pair[0].value
            ));
        }
    }
    report
}
