//! Two-phase commit histories on the in-memory backend under a seeded nemesis, judged
//! by `coord-check`: every transaction has one decision that everyone who learns one
//! learns, `Commit` only with every participant's commit vote, and a coordinator's answer
//! that matches what is persisted or says it is unknown.
//!
//! Each seed runs a few transactions at once: two coordinators race for each (one runs
//! it, the other is told another coordinator runs it), three participants vote (one in
//! ten votes abort), and the nemesis expires sessions, crashes participants, loses the
//! replies of writes that were applied, delays replies and drops futures. A failure
//! prints its seed; `COORD_HISTORY_SEED=n` replays that seed (tokio's scheduling makes a
//! replay close, not identical). `COORD_HISTORY_SEEDS` sets how many seeds run.
//!
//! With the `mutants` feature the negative control runs too: decisions written whether or
//! not one exists must be caught.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use coord_check::two_phase::{
    Coordinator, CoordinatorResult, Decision as D, Learned, Transaction, Vote, check,
};
use coord_core::{Client, Decision, ErrorKind};
use coord_mem::{MemClient, MemCluster, MemOptions};

use common::{mem, run_seeds, seeds};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// Mutant switches are process-wide: the tests of this file run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const TTL: Duration = Duration::from_millis(400);
const PARTICIPANTS: [&str; 3] = ["p1", "p2", "p3"];

fn decision(d: Decision) -> D {
    match d {
        Decision::Commit => D::Commit,
        _ => D::Abort,
    }
}

/// What one seed gave.
#[derive(Default)]
struct Tally {
    transactions: usize,
    votes: usize,
    unknown: usize,
    commits: usize,
    violations: Vec<String>,
}

/// Runs one seed: `TRANSACTIONS` transactions at once, judged one by one.
async fn history(seed: u64) -> Tally {
    const TRANSACTIONS: usize = 3;
    let cluster = MemCluster::new();
    let open = |n: usize| {
        MemClient::connect(
            &cluster,
            MemOptions {
                namespace: format!("h{seed}"),
                session_ttl: TTL,
            },
        )
        .unwrap_or_else(|e| panic!("client {n}: {e}"))
    };
    let coordinators: Vec<Client> = (0..2).map(open).collect();
    let participants: Vec<Client> = (2..5).map(open).collect();
    let reader = open(9);
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let at = move || started.elapsed().as_nanos() as u64;

    let mut calls = Vec::new();
    let mut all_votes: Vec<Vec<Vote>> = vec![Vec::new(); TRANSACTIONS];
    for (t, votes) in all_votes.iter_mut().enumerate() {
        let name = format!("t{t}");
        let deadline = Duration::from_millis(rng.random_range(200..800));
        for (c, client) in coordinators.iter().enumerate() {
            let txn = client.two_phase_commit(&name).expect("a transaction name");
            let patience = Duration::from_millis(rng.random_range(50..2_000));
            let actor = format!("c{c}");
            calls.push((
                t,
                tokio::spawn(async move {
                    let r = tokio::time::timeout(patience, txn.coordinate(&PARTICIPANTS, deadline)).await;
                    (actor, true, r.map_err(|_| ()), at())
                }),
            ));
        }
        for (p, client) in participants.iter().enumerate() {
            let commit = rng.random_bool(0.9);
            votes.push(Vote {
                participant: PARTICIPANTS[p].to_owned(),
                commit,
                invoked: at(),
            });
            let txn = client.two_phase_commit(&name).expect("a transaction name");
            let delay = Duration::from_millis(rng.random_range(0..300));
            let patience = Duration::from_millis(rng.random_range(100..3_000));
            let actor = PARTICIPANTS[p].to_owned();
            calls.push((
                t,
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let r = tokio::time::timeout(patience, txn.vote(&actor, commit, deadline)).await;
                    (actor, false, r.map_err(|_| ()), at())
                }),
            ));
        }
    }
    // The nemesis, while the calls run.
    let clients: Vec<&Client> = coordinators.iter().chain(participants.iter()).collect();
    let mut faults = 0;
    let until = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
        let victim = clients[rng.random_range(0..clients.len())];
        match rng.random_range(0..5) {
            0 => {
                cluster.expire_session(victim.session_id());
            }
            1 => mem(victim).lose_replies(rng.random_range(1..3)),
            2 => mem(victim).delay_replies(Duration::from_millis(rng.random_range(1..20))),
            3 => mem(victim).suspend(Duration::from_millis(rng.random_range(50..600))),
            _ => mem(victim).delay_replies(Duration::ZERO),
        }
        faults += 1;
    }
    for c in &clients {
        mem(c).delay_replies(Duration::ZERO);
    }
    let mut tally = Tally {
        transactions: TRANSACTIONS,
        ..Tally::default()
    };
    let mut records: Vec<Transaction> = (0..TRANSACTIONS)
        .map(|t| Transaction {
            participants: PARTICIPANTS.iter().map(|p| (*p).to_owned()).collect(),
            votes: std::mem::take(&mut all_votes[t]),
            ..Transaction::default()
        })
        .collect();
    for (t, call) in calls {
        let Ok((actor, coordinating, result, done)) = call.await else {
            continue;
        };
        let record = &mut records[t];
        match (coordinating, result) {
            (true, Ok(Ok(d))) => {
                record.coordinators.push(Coordinator {
                    actor: actor.clone(),
                    result: CoordinatorResult::Ok(decision(d)),
                });
                record.learned.push(Learned {
                    actor,
                    decision: decision(d),
                    at: Some(done),
                });
            }
            (true, Ok(Err(e))) if e.kind() == ErrorKind::AlreadyExists => {}
            (true, Ok(Err(e))) if !e.outcome_unknown() => record.coordinators.push(Coordinator {
                actor,
                result: CoordinatorResult::Definite(e.to_string()),
            }),
            (true, _) => {
                tally.unknown += 1;
                record.coordinators.push(Coordinator {
                    actor,
                    result: CoordinatorResult::Unknown,
                });
            }
            (false, Ok(Ok(d))) => record.learned.push(Learned {
                actor,
                decision: decision(d),
                at: Some(done),
            }),
            (false, _) => tally.unknown += 1,
        }
    }
    // Every participant's deadline has passed: a decision stands for each transaction
    // (one written, or none if no one got through), read from a fresh client.
    tokio::time::sleep(Duration::from_millis(900)).await;
    for (t, record) in records.iter_mut().enumerate() {
        let txn = reader
            .two_phase_commit(&format!("t{t}"))
            .expect("a transaction name");
        let mut persisted = None;
        for _ in 0..50 {
            match txn.decision().await {
                Ok(d) => {
                    persisted = Some(d.map(decision));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let Some(persisted) = persisted else {
            tally
                .violations
                .push(format!("t{t}: the decision could not be read"));
            continue;
        };
        record.persisted = persisted;
        tally.votes += record.votes.len();
        tally.commits += usize::from(persisted == Some(D::Commit));
        let verdict = check(record);
        for v in verdict.violations {
            tally.violations.push(format!("t{t}: {v:?}"));
        }
    }
    let _ = faults;
    for c in clients {
        let _ = c.close().await;
    }
    tally
}

/// Runs every seed; returns the violations (each naming its seed) and the summary line.
fn run_all(label: &str) -> (Vec<String>, String) {
    let mut total = Tally::default();
    let mut violations = Vec::new();
    let seeds = seeds();
    let tallies: Vec<(u64, Tally)> = run_seeds(&seeds, 10, history);
    for (seed, tally) in tallies {
        total.transactions += tally.transactions;
        total.votes += tally.votes;
        total.unknown += tally.unknown;
        total.commits += tally.commits;
        violations.extend(tally.violations.into_iter().map(|v| format!("seed {seed}: {v}")));
    }
    let line = format!(
        "histories two-phase{label}: {} seeds, {} transactions ({} committed), {} votes, {} unknown outcomes, {} violations",
        seeds.len(),
        total.transactions,
        total.commits,
        total.votes,
        total.unknown,
        violations.len()
    );
    println!("{line}");
    (violations, line)
}

#[test]
fn two_phase_commit_agrees_under_faults() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (violations, _) = run_all("");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[cfg(feature = "mutants")]
#[test]
fn negative_control_decision_overwritten_is_caught() {
    use coord_core::mutants::{self, Mutant};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    mutants::set(Mutant::DecisionOverwritten, true);
    let (violations, _) = run_all(" (mutant: decision overwritten)");
    mutants::set(Mutant::DecisionOverwritten, false);
    assert!(
        !violations.is_empty(),
        "the checker found nothing with decisions overwritten"
    );
}
