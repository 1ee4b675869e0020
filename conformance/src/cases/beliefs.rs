//! What holders *say*, judged: while clients contend for a lock, a leadership and a
//! semaphore's leases under a nemesis (sessions killed from outside, holders' entries
//! deleted by an operator, clients blackholed and cut off where the backend can), every
//! handle's interval of saying `Held` is recorded on one clock — from its grant returned
//! to the first state other than `Held` or its release — and judged by
//! [`coord_check::beliefs`]: no more handles of a name say `Held` at once than it
//! admits, beyond the client's loss margin. Unfenced work trusts `Held`; this is the
//! promise it relies on. Run against 3-member clusters, the member chaos of the suite's
//! cluster phase (leader and follower members killed) is part of the nemesis.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::ensure;
use coord_check::beliefs::{self, Belief};
use coord_core::{Client, Election, ErrorKind, HoldState, HoldWatch, Lock};
use rand::Rng as _;
use tokio::time::Instant;

use crate::harness::{CaseResult, Ctx};
use crate::util::within;
use coord_core::Granted as _;

/// The grants a run needs before it is judged: it goes on (at most [`LONGEST`]) until
/// it has them.
const ENOUGH: usize = 40;
/// The shortest and longest time the nemesis runs.
const SHORTEST: Duration = Duration::from_secs(6);
const LONGEST: Duration = Duration::from_secs(40);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Lock,
    Leadership,
    Lease,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Lock => "belief-lock",
            Kind::Leadership => "belief-election",
            Kind::Lease => "belief-semaphore",
        }
    }

    fn admits(self) -> usize {
        match self {
            Kind::Lease => 2,
            _ => 1,
        }
    }
}

/// A grant of any of the three kinds.
enum Grant {
    Lock(coord_core::LockGuard),
    Leadership(coord_core::Leadership),
    Lease(coord_core::Lease),
}

impl Grant {
    async fn take(client: &Client, kind: Kind) -> coord_core::Result<Grant> {
        Ok(match kind {
            Kind::Lock => Grant::Lock(client.lock(kind.name()).await?),
            Kind::Leadership => Grant::Leadership(client.campaign(kind.name(), b"v".to_vec()).await?),
            Kind::Lease => Grant::Lease(client.semaphore(kind.name(), 2)?.acquire().await?),
        })
    }

    fn hold(&self) -> HoldWatch {
        match self {
            Grant::Lock(g) => g.hold().clone(),
            Grant::Leadership(g) => g.hold().clone(),
            Grant::Lease(g) => g.hold().clone(),
        }
    }

    fn fence(&self) -> coord_core::Fence {
        match self {
            Grant::Lock(g) => g.fence(),
            Grant::Leadership(g) => g.fence(),
            Grant::Lease(g) => g.fence(),
        }
    }

    async fn release(self) {
        let _ = match self {
            Grant::Lock(g) => g.release().await,
            Grant::Leadership(g) => g.resign().await,
            Grant::Lease(g) => g.release().await,
        };
    }
}

/// The shared record: beliefs, and the entries held now (for the operator to delete).
#[derive(Default)]
struct Record {
    beliefs: Vec<Belief>,
    held: Vec<String>,
    next_holder: u64,
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

/// Contends for `kind` on `client` until `stop`, recording each grant's belief.
async fn contend(
    client: Client,
    kind: Kind,
    start: Instant,
    record: Arc<Mutex<Record>>,
    stop: tokio::sync::watch::Receiver<bool>,
    expiry_wait: Duration,
) {
    while !*stop.borrow() {
        let grant = match tokio::time::timeout(expiry_wait, Grant::take(&client, kind)).await {
            Ok(Ok(g)) => g,
            Ok(Err(e)) if e.kind() == ErrorKind::Closed => return,
            // Lost its session, cut off, timed out: try again.
            _ => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let from = micros(start);
        let hold = grant.hold();
        let resource = grant.fence().resource().to_owned();
        let token = grant.fence().token().get();
        let index = {
            let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
            r.next_holder += 1;
            let holder = r.next_holder;
            r.held.push(resource.clone());
            r.beliefs.push(Belief {
                name: kind.name().to_owned(),
                holder,
                token,
                admits: kind.admits(),
                from,
                until: None,
            });
            r.beliefs.len() - 1
        };
        // The first moment the handle says anything but `Held` (as `state()` would).
        let ended = Arc::new(Mutex::new(None::<u64>));
        let watcher = {
            let (mut hold, ended) = (hold.clone(), ended.clone());
            tokio::spawn(async move {
                if hold.state() != HoldState::Held {
                    *ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(micros(start));
                    return;
                }
                while hold.changed().await == HoldState::Held {}
                let at = micros(start);
                ended.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(at);
            })
        };
        let work = Duration::from_millis(rand::rng().random_range(10..60));
        tokio::time::sleep(work).await;
        let release_start = micros(start);
        let until = ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map_or(release_start, |e| e.min(release_start));
        {
            let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
            r.beliefs[index].until = Some(until);
            r.held.retain(|h| *h != resource);
        }
        watcher.abort();
        grant.release().await;
    }
}

/// Contenders for a lock, a leadership and a semaphore of two leases on three clients,
/// under a nemesis; every interval in which a handle said `Held` is judged.
pub async fn held_beliefs_never_overlap_under_faults(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(3).await?;
    let margin = clients[0].loss_margin();
    let start = Instant::now();
    let record = Arc::new(Mutex::new(Record::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for c in &clients {
        for kind in [Kind::Lock, Kind::Leadership, Kind::Lease] {
            workers.push(tokio::spawn(contend(
                c.clone(),
                kind,
                start,
                record.clone(),
                stop_rx.clone(),
                ctx.expiry_wait(),
            )));
        }
    }
    let timeout = ctx.session_timeout();
    let mut faults: Vec<String> = Vec::new();
    loop {
        let grants = record.lock().unwrap_or_else(|p| p.into_inner()).beliefs.len();
        if (start.elapsed() >= SHORTEST && grants >= ENOUGH) || start.elapsed() >= LONGEST {
            break;
        }
        let pause = Duration::from_millis(rand::rng().random_range(150..400));
        tokio::time::sleep(pause).await;
        let (victim, roll, pick) = {
            let mut rng = rand::rng();
            (
                &clients[rng.random_range(0..clients.len())],
                rng.random_range(0..100),
                rng.random_range(0..usize::MAX),
            )
        };
        let (what, done) = match roll {
            0..30 => ("kill a session", ctx.factory().kill_session(victim).await),
            30..60 => {
                let held = record.lock().unwrap_or_else(|p| p.into_inner()).held.clone();
                match held.get(pick % held.len().max(1)) {
                    Some(path) => (
                        "delete a holder's entry",
                        ctx.factory().operator_delete(path).await,
                    ),
                    None => continue,
                }
            }
            60..80 => (
                "blackhole a client",
                ctx.factory().blackhole(victim, timeout * 2).await,
            ),
            _ => (
                "cut a client off",
                ctx.factory().suspend(victim, timeout / 2).await,
            ),
        };
        match done {
            Ok(()) => faults.push(what.to_owned()),
            Err(e) if e.kind() == ErrorKind::Unsupported => {}
            Err(e) => tracing::debug!(error = %e, what, "belief nemesis step failed"),
        }
    }
    stop_tx.send_replace(true);
    for w in workers {
        let _ = within(ctx.expiry_wait() * 2, "a contender stops", w).await;
    }
    let record = Arc::try_unwrap(record)
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_else(|shared| {
            let r = shared.lock().unwrap_or_else(|p| p.into_inner());
            Record {
                beliefs: r.beliefs.clone(),
                ..Record::default()
            }
        });
    let report = beliefs::check(&record.beliefs, margin.as_micros() as u64);
    println!(
        "[{}] beliefs: {} intervals of {} names under {} faults ({}), at most {} at once, longest overlap {} ms \
         (bound {} ms): {}",
        clients[0].kind(),
        report.summary.intervals,
        report.summary.names,
        faults.len(),
        summarize(&faults),
        report.summary.most_at_once,
        report.summary.longest_overlap / 1000,
        margin.as_millis(),
        if report.is_ok() { "ok" } else { "VIOLATED" }
    );
    ensure!(report.is_ok(), "{report}");
    ensure!(
        report.summary.intervals >= ENOUGH,
        "only {} grants in {LONGEST:?}: too few to judge",
        report.summary.intervals
    );
    ensure!(
        !faults.is_empty(),
        "no fault was injected: the case tested nothing"
    );
    Ok(())
}

fn summarize(faults: &[String]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for f in faults {
        *counts.entry(f.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n}× {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}
