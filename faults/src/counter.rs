//! The fenced counter: workers take a lock (or win an election), read the counter, and
//! write it + 1 fenced by their grant, while a fault strikes. The history of writes is
//! checked against the counter's final value; a sampler checks that no two workers see
//! their grants held at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use coord::{Client, ConfigStore, Election, ErrorKind, Fence, HoldState, HoldWatch, Lock, Txn};
use coord_testkit::{Cluster, ProxyMap};
use rand::{Rng as _, SeedableRng as _};

use crate::{Env, Report, SESSION, Scenario, linked, retry};
use coord::Granted as _;

/// One write attempt.
#[derive(Debug, Clone)]
struct Write {
    token: u64,
    /// The value written (the value read + 1).
    value: u64,
    outcome: Outcome,
    /// Written by a worker a fault struck while it held.
    struck: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    Fenced,
    Unknown,
    NotApplied,
}

/// A fault that strikes one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strike {
    /// Between read and write: silent and idle for 3 session timeouts, then writes.
    Pause,
    /// Between read and write: gone for good.
    Kill,
    /// Between read and write: silent for 3 session timeouts, writing at once.
    Blackhole,
    /// Before acquiring: the link resets right after the next request is sent.
    Ambiguous,
    /// Before acquiring: queue, then lose the session while waiting.
    ExpireWaiter,
}

impl Strike {
    /// Whether it strikes a holder (rather than a contender about to acquire).
    fn while_holding(self) -> bool {
        matches!(self, Strike::Pause | Strike::Kill | Strike::Blackhole)
    }
}

/// A fault on a cluster member.
#[derive(Debug, Clone, Copy)]
enum MemberFault {
    KillLeader,
    KillFollower,
    PauseLeader,
}

/// Shared state of a run's workers, its fault injector and its sampler.
#[derive(Default)]
struct Run {
    history: Mutex<Vec<Write>>,
    /// The next strike, for the first worker in the right phase to take.
    strike: Mutex<Option<Strike>>,
    faults: AtomicUsize,
    /// When the last fault struck, until a worker acquires after it; the worst such
    /// wait.
    struck_at: Mutex<Option<Instant>>,
    /// When the last fault struck (never cleared).
    fault_at: Mutex<Option<Instant>>,
    worst_recovery: Mutex<Option<Duration>>,
    /// Each worker's current grant, if it holds one.
    holds: Mutex<BTreeMap<usize, HoldWatch>>,
    /// Samples that saw two grants held at once, and the first such.
    overlaps: AtomicUsize,
    /// Whether, 2 session timeouts after a fault, a sample saw exactly one grant held.
    single_after_fault: AtomicBool,
    stop: AtomicBool,
}

impl Run {
    fn take_strike(&self, holding: bool) -> Option<Strike> {
        let mut strike = self.strike.lock().unwrap_or_else(|p| p.into_inner());
        match *strike {
            Some(s) if s.while_holding() == holding => {
                *strike = None;
                self.faults.fetch_add(1, Ordering::SeqCst);
                Some(s)
            }
            _ => None,
        }
    }

    fn struck_now(&self) {
        let now = Some(Instant::now());
        *self.struck_at.lock().unwrap_or_else(|p| p.into_inner()) = now;
        *self.fault_at.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    fn set_hold(&self, worker: usize, hold: Option<HoldWatch>) {
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        match hold {
            Some(h) => holds.insert(worker, h),
            None => holds.remove(&worker),
        };
    }
}

/// What a worker holds.
enum Grant {
    Lock(coord::LockGuard),
    Leader(coord::Leadership),
}

impl Grant {
    fn token(&self) -> u64 {
        match self {
            Grant::Lock(g) => g.token().get(),
            Grant::Leader(l) => l.token().get(),
        }
    }

    fn fence(&self) -> Fence {
        match self {
            Grant::Lock(g) => g.fence(),
            Grant::Leader(l) => l.fence(),
        }
    }

    fn hold(&self) -> HoldWatch {
        match self {
            Grant::Lock(g) => g.hold().clone(),
            Grant::Leader(l) => l.hold().clone(),
        }
    }

    async fn release(self) {
        let _ = match self {
            Grant::Lock(g) => g.release().await,
            Grant::Leader(l) => l.resign().await,
        };
    }
}

fn election(scenario: Scenario) -> bool {
    matches!(
        scenario,
        Scenario::ElectionLeaderKilled | Scenario::ElectionLeaderPaused | Scenario::ElectionLeaderBlackholed
    )
}

async fn acquire(client: &Client, election: bool, worker: usize) -> coord::Result<Grant> {
    if election {
        client
            .campaign("leader", format!("worker-{worker}").into_bytes())
            .await
            .map(Grant::Leader)
    } else {
        client.lock("counter").await.map(Grant::Lock)
    }
}

pub(crate) async fn run(env: &Env<'_>, scenario: Scenario) -> anyhow::Result<Report> {
    let state = Arc::new(Run::default());
    let setup = env.direct().await?;
    setup.put("counter", b"0".to_vec()).await?;
    let mut workers = Vec::new();
    for w in 0..env.args.workers {
        let (proxies, state) = (env.proxies.clone(), state.clone());
        let (cluster, kind, ns) = (env.cluster.clone(), env.kind, env.namespace.clone());
        let seed = env.args.seed.wrapping_mul(31).wrapping_add(w as u64);
        workers.push(tokio::spawn(async move {
            let client = linked(&proxies, &cluster, kind, &ns).await?;
            worker(client, &proxies, &state, scenario, w, seed).await
        }));
    }
    let sampler = tokio::spawn(sample(state.clone()));
    let mut report_stuck = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(env.args.seconds);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let strike = |s: Strike| *state.strike.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    match scenario {
        Scenario::PausedHolder | Scenario::NegativeControl | Scenario::ElectionLeaderPaused => {
            strike(Strike::Pause)
        }
        Scenario::KilledHolder | Scenario::ElectionLeaderKilled => strike(Strike::Kill),
        Scenario::BlackholedHolder | Scenario::ElectionLeaderBlackholed => strike(Strike::Blackhole),
        Scenario::AmbiguousCreate => strike(Strike::Ambiguous),
        Scenario::WaiterSessionExpired => strike(Strike::ExpireWaiter),
        Scenario::LeaderMemberKilled => member_fault(env.cluster, &state, MemberFault::KillLeader).await?,
        Scenario::FollowerMemberKilled => {
            member_fault(env.cluster, &state, MemberFault::KillFollower).await?
        }
        Scenario::LeaderMemberPaused => member_fault(env.cluster, &state, MemberFault::PauseLeader).await?,
        Scenario::Soak => soak(env, &state, deadline).await?,
        Scenario::RegistryChurn
        | Scenario::ConfigWatchers
        | Scenario::Recipes
        | Scenario::RecipesMutantTakeInPlace => {
            anyhow::bail!("{} is not a counter scenario", scenario.name())
        }
    }
    tokio::time::sleep_until(deadline.into()).await;
    state.stop.store(true, Ordering::SeqCst);
    for mut w in workers {
        // A killed worker ends early; a stopped one finishes its cycle; one that does not
        // is stopped, so that nothing writes after the final read.
        match tokio::time::timeout(SESSION * 10, &mut w).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("worker: {e:#}"),
            Ok(Err(e)) => eprintln!("worker task: {e}"),
            Err(_) => {
                w.abort();
                let _ = w.await;
                report_stuck.push(format!("a worker did not stop within {:?}", SESSION * 10));
            }
        }
    }
    sampler.abort();
    let final_value = read_counter(&setup).await?;
    let _ = setup.close().await;
    let history = state.history.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (mut report, stale_rejected) = check(&history, final_value, scenario != Scenario::NegativeControl);
    // A worker stuck past the end is a liveness violation.
    report.violations.extend(report_stuck);
    report.faults = state.faults.load(Ordering::SeqCst);
    report.worst_recovery = *state.worst_recovery.lock().unwrap_or_else(|p| p.into_inner());
    let overlaps = state.overlaps.load(Ordering::SeqCst);
    if overlaps > 0 {
        report
            .violations
            .push(format!("{overlaps} samples saw two workers' grants held at once"));
    }
    if election(scenario) && !state.single_after_fault.load(Ordering::SeqCst) {
        report.violations.push(format!(
            "no sample from {:?} after the fault on saw exactly one leader",
            SESSION * 2
        ));
    }
    let stale = history
        .iter()
        .filter(|w| w.struck && w.outcome != Outcome::Applied)
        .count();
    let stale_applied = history
        .iter()
        .filter(|w| w.struck && w.outcome == Outcome::Applied)
        .count();
    (report.shown, report.shown_ok) = match scenario {
        Scenario::PausedHolder
        | Scenario::BlackholedHolder
        | Scenario::ElectionLeaderPaused
        | Scenario::ElectionLeaderBlackholed => (
            format!("{stale} stale write(s) attempted, {} rejected", stale_rejected),
            stale > 0 && stale_rejected == stale,
        ),
        Scenario::NegativeControl => (format!("{stale_applied} stale write(s) applied"), true),
        _ => match report.worst_recovery {
            Some(_) => ("a new holder after the fault".to_owned(), true),
            None => ("no acquisition after the fault".to_owned(), false),
        },
    };
    Ok(report)
}

/// Every 20 ms: how many workers see their grant held.
async fn sample(state: Arc<Run>) {
    loop {
        let held = state
            .holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|h| h.state() == HoldState::Held)
            .count();
        if held > 1 {
            state.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let settled = state
            .fault_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() > SESSION * 2);
        if held == 1 && settled {
            state.single_after_fault.store(true, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills or stops a member under the cluster's fault lock, and brings it back.
async fn member_fault(cluster: &Arc<Cluster>, state: &Run, fault: MemberFault) -> anyhow::Result<()> {
    let c = cluster.clone();
    let (lock, victim) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let lock = c.fault_lock().map_err(|e| anyhow::anyhow!("{e}"))?;
        let leader = c
            .wait_leader(Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let victim = match fault {
            MemberFault::KillFollower => (leader + 1) % c.len(),
            MemberFault::KillLeader | MemberFault::PauseLeader => leader,
        };
        match fault {
            MemberFault::PauseLeader => c.pause(victim),
            _ => c.kill(victim),
        }
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok((lock, victim))
    })
    .await??;
    state.faults.fetch_add(1, Ordering::SeqCst);
    state.struck_now();
    // Longer than the session timeout: a paused leader is voted out meanwhile.
    tokio::time::sleep(SESSION * 2).await;
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || {
        let r = match fault {
            MemberFault::PauseLeader => c.resume(victim),
            _ => c.restart_member(victim),
        };
        drop(lock);
        r
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// One fault every 2–5 s, chosen with the seed, until the deadline.
async fn soak(env: &Env<'_>, state: &Run, deadline: Instant) -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(env.args.seed);
    while Instant::now() + Duration::from_secs(8) < deadline {
        match rng.random_range(0..7) {
            0 => *state.strike.lock().unwrap_or_else(|p| p.into_inner()) = Some(Strike::Pause),
            1 => *state.strike.lock().unwrap_or_else(|p| p.into_inner()) = Some(Strike::Blackhole),
            2 => *state.strike.lock().unwrap_or_else(|p| p.into_inner()) = Some(Strike::Ambiguous),
            3 => *state.strike.lock().unwrap_or_else(|p| p.into_inner()) = Some(Strike::ExpireWaiter),
            4 => member_fault(env.cluster, state, MemberFault::KillLeader).await?,
            5 => member_fault(env.cluster, state, MemberFault::KillFollower).await?,
            _ => member_fault(env.cluster, state, MemberFault::PauseLeader).await?,
        }
        // A strike waits for a worker in the right phase; the next one waits for it.
        while state.strike.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(2000..5000))).await;
    }
    Ok(())
}

async fn read_counter(client: &Client) -> anyhow::Result<u64> {
    let v = retry(|| client.get("counter")).await?.context("no counter")?;
    Ok(String::from_utf8_lossy(&v.value).parse()?)
}

async fn worker(
    client: Client,
    proxies: &ProxyMap,
    state: &Run,
    scenario: Scenario,
    id: usize,
    seed: u64,
) -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let election = election(scenario);
    while !state.stop.load(Ordering::SeqCst) {
        if let Some(strike) = state.take_strike(false) {
            state.struck_now();
            let links = proxies.get(&client)?;
            if strike == Strike::Ambiguous {
                for link in links.all() {
                    link.reset_after_next_request(Duration::from_millis(300));
                }
            } else {
                // Queue behind the holder, then lose the session while waiting.
                let waiting = {
                    let client = client.clone();
                    tokio::spawn(async move { acquire(&client, election, id).await })
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                links.refuse_for(SESSION * 3);
                match waiting.await {
                    // Granted on a new session after the cut: seen by the sampler, then
                    // given back.
                    Ok(Ok(g)) => {
                        state.set_hold(id, Some(g.hold()));
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        state.set_hold(id, None);
                        g.release().await;
                    }
                    Ok(Err(e)) => eprintln!("waiter whose session expired: {e}"),
                    Err(e) => eprintln!("waiter task: {e}"),
                }
            }
        }
        let grant = match retry(|| acquire(&client, election, id)).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!("acquire: {e}");
                continue;
            }
        };
        state.set_hold(id, Some(grant.hold()));
        if let Some(at) = state.struck_at.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let took = at.elapsed();
            let mut worst = state.worst_recovery.lock().unwrap_or_else(|p| p.into_inner());
            *worst = Some(worst.map_or(took, |w| w.max(took)));
        }
        let token = grant.token();
        let Ok(read) = read_counter(&client).await else {
            state.set_hold(id, None);
            grant.release().await;
            continue;
        };
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
        let mut struck = false;
        if let Some(strike) = state.take_strike(true) {
            struck = true;
            let links = proxies.get(&client)?;
            match strike {
                Strike::Kill => {
                    // The process is gone: nothing more is sent, nothing cleaned up.
                    links.refuse();
                    state.struck_now();
                    state.set_hold(id, None);
                    std::mem::forget(grant);
                    std::mem::forget(client);
                    return Ok(());
                }
                Strike::Pause => {
                    links.blackhole_for(SESSION * 3);
                    state.struck_now();
                    tokio::time::sleep(SESSION * 3).await;
                }
                _ => {
                    links.blackhole_for(SESSION * 3);
                    state.struck_now();
                }
            }
        }
        let mut txn = Txn::new().put("counter", (read + 1).to_string().into_bytes());
        if scenario != Scenario::NegativeControl {
            txn = txn.fenced_by(grant.fence());
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
                struck,
            });
        state.set_hold(id, None);
        grant.release().await;
    }
    let _ = client.close().await;
    Ok(())
}

/// Checks a history against the counter's final value. With `resolve`, a write of
/// unknown outcome that is not the one the counter shows for its value counts as
/// rejected.
fn check(history: &[Write], final_value: u64, resolve: bool) -> (Report, usize) {
    let mut report = Report {
        ops: history.len(),
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
    let mut chain: Vec<&Write> = Vec::new();
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
        // The write the counter shows: the applied one, else one of unknown outcome.
        match applied.first().copied().or(writers.first()) {
            Some(w) => chain.push(w),
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
    // Every other write of unknown outcome was not applied: resolved either way.
    let stale_rejected = history
        .iter()
        .filter(|w| {
            w.struck
                && match w.outcome {
                    Outcome::Fenced | Outcome::NotApplied => true,
                    Outcome::Unknown => resolve && !chain.iter().any(|c| std::ptr::eq(*c, *w)),
                    Outcome::Applied => false,
                }
        })
        .count();
    for pair in chain.windows(2) {
        if pair[1].token <= pair[0].token {
            report.violations.push(format!(
                "token {} wrote {} after token {} wrote {}: tokens went back",
                pair[1].token, pair[1].value, pair[0].token, pair[0].value
            ));
        }
    }
    (report, stale_rejected)
}
