//! Barrier histories on the in-memory backend under a seeded nemesis, judged by
//! `coord-check`: nobody gets through a double barrier's `enter` before all its members
//! arrived, nor through `leave` before every member that entered left (or crashed),
//! except by the documented `Timeout`; nobody passes a simple barrier's `wait` while it
//! stood raised the whole time.
//!
//! The nemesis delays and loses replies, suspends clients briefly and crashes a member.
//! A failure prints its seed; `COORD_HISTORY_SEED=n` replays it (closely: tokio
//! schedules). `COORD_HISTORY_SEEDS` sets how many seeds run. With the `mutants` feature,
//! a double barrier that lets members in early must be caught.

mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use coord_check::barrier::{BarrierOp, DoubleBarrierHistory, DoubleBarrierOp, check_barrier, check_double};
use coord_check::history::{Outcome, Recorder};
use coord_core::Client;
use coord_mem::{MemClient, MemCluster, MemOptions};

use common::{mem, run_seeds, seeds};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// Mutant switches are process-wide: the tests of this file run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const TTL: Duration = Duration::from_millis(400);
const MEMBERS: usize = 3;

fn outcome<T>(r: coord_core::Result<T>) -> Outcome<()> {
    match r {
        Ok(_) => Outcome::Ok(()),
        Err(e) if e.outcome_unknown() => Outcome::Unknown,
        Err(_) => Outcome::Failed,
    }
}

#[derive(Default)]
struct Tally {
    ops: usize,
    violations: Vec<String>,
}

async fn history(seed: u64) -> Tally {
    let cluster = MemCluster::new();
    let open = || {
        MemClient::connect(
            &cluster,
            MemOptions {
                namespace: format!("b{seed}"),
                session_ttl: TTL,
            },
        )
        .expect("a mem client")
    };
    let members: Vec<Client> = (0..MEMBERS).map(|_| open()).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let double: Recorder<DoubleBarrierOp, ()> = Recorder::new();
    let simple: Recorder<BarrierOp, ()> = Recorder::new();
    let mut crash = rng.random_bool(0.3).then(|| rng.random_range(0..MEMBERS));

    // The simple barrier: raised first, waited on by every member, removed later.
    let raiser = open();
    let barrier = raiser.barrier("gate").expect("a barrier key");
    let raise = simple.invoke(0, BarrierOp::Raise);
    simple.complete(raise, outcome(barrier.raise().await));

    let mut tasks = Vec::new();
    for (m, client) in members.iter().enumerate() {
        let (client, double, simple) = (client.clone(), double.clone(), simple.clone());
        let mut rng = StdRng::seed_from_u64(seed * 37 + m as u64);
        tasks.push(tokio::spawn(async move {
            let id = format!("m{m}");
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            let db = client
                .double_barrier("db", MEMBERS as u32)
                .expect("a barrier name");
            let deadline = Duration::from_millis(rng.random_range(300..1_500));
            let pending = double.invoke(m as u64, DoubleBarrierOp::Enter(id.clone()));
            let entered = db.enter(&id, deadline).await;
            let inside = match entered {
                Ok(inside) => {
                    double.complete(pending, Outcome::Ok(()));
                    inside
                }
                Err(e) => {
                    double.complete(pending, outcome::<()>(Err(e)));
                    return;
                }
            };
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..200))).await;
            let pending = double.invoke(m as u64, DoubleBarrierOp::Leave(id));
            double.complete(pending, outcome(inside.leave(deadline).await));
            let gate = client.barrier("gate").expect("a barrier key");
            let pending = simple.invoke(m as u64 + 1, BarrierOp::Wait);
            if let Ok(r) =
                tokio::time::timeout(Duration::from_millis(rng.random_range(50..800)), gate.wait()).await
            {
                simple.complete(pending, outcome(r));
            }
        }));
    }
    // The nemesis.
    let mut crashed = BTreeSet::new();
    for _ in 0..rng.random_range(2..6) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..250))).await;
        let victim = rng.random_range(0..MEMBERS);
        match rng.random_range(0..4) {
            0 => mem(&members[victim]).lose_replies(1),
            1 => mem(&members[victim]).delay_replies(Duration::from_millis(rng.random_range(1..15))),
            2 => mem(&members[victim]).suspend(Duration::from_millis(rng.random_range(20..100))),
            _ => {
                if let Some(c) = crash.take() {
                    mem(&members[c]).crash();
                    crashed.insert(format!("m{c}"));
                }
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..500))).await;
    let remove = simple.invoke(0, BarrierOp::Remove);
    simple.complete(remove, outcome(barrier.remove().await));
    for t in tasks {
        let _ = t.await;
    }
    let mut tally = Tally::default();
    let history = DoubleBarrierHistory {
        members: MEMBERS,
        ops: double.history(),
        crashed,
    };
    tally.ops += history.ops.len();
    for v in check_double(&history).violations {
        tally.violations.push(format!("double barrier: {v:?}"));
    }
    let ops = simple.history();
    tally.ops += ops.len();
    for v in check_barrier(&ops).violations {
        tally.violations.push(format!("barrier: {v:?}"));
    }
    for c in members.iter().chain([&raiser]) {
        let _ = c.close().await;
    }
    tally
}

fn run_all(label: &str) -> Vec<String> {
    let seeds = seeds();
    let tallies: Vec<(u64, Tally)> = run_seeds(&seeds, 10, history);
    let mut violations = Vec::new();
    let mut ops = 0;
    for (seed, t) in tallies {
        ops += t.ops;
        violations.extend(t.violations.into_iter().map(|v| format!("seed {seed}: {v}")));
    }
    println!(
        "histories barrier{label}: {} seeds, {ops} operations, {} violations",
        seeds.len(),
        violations.len()
    );
    violations
}

#[test]
fn barriers_hold_under_faults() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let violations = run_all("");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[cfg(feature = "mutants")]
#[test]
fn negative_control_early_enter_is_caught() {
    use coord_core::mutants::{self, Mutant};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(Mutant::BarrierEnterEarly, true);
    let violations = run_all(" (mutant: early enter)");
    mutants::set(Mutant::BarrierEnterEarly, false);
    assert!(
        !violations.is_empty(),
        "the checker found nothing with members let in early"
    );
}
