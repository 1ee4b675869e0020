//! `report`: starts a standalone ZooKeeper and etcd (coord-testkit), runs every scenario
//! on mem, ZooKeeper and etcd for several rounds — each scenario interleaving coord with
//! its comparisons — and writes the medians, ratios and targets to a markdown report.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use coord_testkit::{Cluster, ClusterOptions, Kind};

use crate::measure::{self, Row, fmt, median};
use crate::target::Target;
use crate::{config, election, fence, lock, registry, scale, soak, tenfold, waiters};

#[derive(clap::Args)]
pub struct Args {
    /// Rounds: each figure is the median of the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Tiny sizes and one round: checks that every scenario runs (CI). Timings mean nothing.
    #[arg(long)]
    smoke: bool,
    /// Where to write the report.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// A ZooKeeper to use (zk://…) instead of starting one.
    #[arg(long)]
    zk: Option<String>,
    /// An etcd to use (etcd://…) instead of starting one.
    #[arg(long)]
    etcd: Option<String>,
    /// A PostgreSQL to use (postgres://…) for `fence-sql` instead of starting one.
    #[arg(long)]
    pg: Option<String>,
    /// The backends to run.
    #[arg(long, value_delimiter = ',', default_value = "mem,zk,etcd")]
    backends: Vec<String>,
    /// Only the scenarios whose names contain one of these.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Minutes of the soak (run once, after the rounds, on every backend at once); 0
    /// skips it.
    #[arg(long, default_value_t = 30.0)]
    soak_minutes: f64,
    /// A negative control of the smoke form's checks (`--smoke` only; built with the
    /// `mutants` feature): runs with this deliberate regression switched on
    /// (`extra-request-per-lock`, `herd-wake`) and succeeds only if the checks of the
    /// deterministic counts catch it.
    #[arg(long)]
    mutant: Option<String>,
}

/// The regression `--mutant` names, switched on for the run.
#[cfg(feature = "mutants")]
fn switch_on(name: &str) -> Result<coord_core::mutants::Switched> {
    use coord_core::mutants::{Mutant, switch_on};
    let m = match name {
        "extra-request-per-lock" => Mutant::ExtraRequestPerLock,
        "herd-wake" => Mutant::HerdWake,
        other => anyhow::bail!("no bench mutant {other} (extra-request-per-lock, herd-wake)"),
    };
    Ok(switch_on(&[m]))
}

#[cfg(not(feature = "mutants"))]
fn switch_on(_: &str) -> Result<()> {
    anyhow::bail!("--mutant needs coord-bench built with the `mutants` feature")
}

/// Sizes of one round.
struct Sizes {
    lock_s: f64,
    contended_s: f64,
    waiters: [usize; 2],
    election_rounds: usize,
    instances: usize,
    config_s: f64,
    deliveries: usize,
    names: usize,
    names_s: f64,
    storm_rate: f64,
    storm_s: f64,
    fan_out: usize,
    fan_out_rounds: usize,
    fleet: [usize; 2],
    fence_s: f64,
    /// The tenfold measures' smaller sizes (run once, after the rounds).
    tenfold: tenfold::Sizes,
}

const FULL: Sizes = Sizes {
    lock_s: 3.0,
    contended_s: 3.0,
    waiters: [100, 1000],
    election_rounds: 20,
    instances: 1000,
    config_s: 3.0,
    deliveries: 200,
    names: 10_000,
    names_s: 3.0,
    storm_rate: 1000.0,
    storm_s: 10.0,
    fan_out: 1000,
    fan_out_rounds: 20,
    fleet: [10_000, 200],
    fence_s: 3.0,
    // Ten times these: 100k names, 100k instances, 10k watchers; the queue to its
    // limit (`MAX_QUEUE_ITEMS`, 10k).
    tenfold: tenfold::Sizes {
        names: 10_000,
        instances: 10_000,
        members: 200,
        watchers: 1_000,
        items: 1_000,
    },
};

const SMOKE: Sizes = Sizes {
    lock_s: 0.3,
    contended_s: 0.3,
    waiters: [10, 20],
    election_rounds: 3,
    instances: 20,
    config_s: 0.3,
    deliveries: 10,
    names: 200,
    names_s: 0.3,
    storm_rate: 200.0,
    storm_s: 0.5,
    fan_out: 20,
    fan_out_rounds: 3,
    fleet: [100, 10],
    fence_s: 0.3,
    tenfold: tenfold::Sizes {
        names: 100,
        instances: 50,
        members: 10,
        watchers: 20,
        items: 20,
    },
};

const SCENARIOS: [&str; 13] = [
    "lock",
    "lock-contended",
    "waiters-small",
    "waiters-large",
    "waiters-shared",
    "election",
    "registry",
    "config",
    "many-names",
    "storm",
    "fan-out",
    "registry-scale",
    "fence-sql",
];

async fn scenario(name: &str, t: &Target, s: &Sizes) -> Result<Vec<Row>> {
    let mut rows = match name {
        "lock" => lock::uncontended(t, s.lock_s, 20).await?,
        "lock-contended" => lock::contended(t, 4, s.contended_s, 3).await?,
        "waiters-small" => waiters::run(t, s.waiters[0]).await?,
        "waiters-large" => waiters::run(t, s.waiters[1]).await?,
        "waiters-shared" => waiters::shared(t, s.waiters[1], 8).await?,
        "election" => election::run(t, s.election_rounds).await?,
        "registry" => registry::run(t, s.instances).await?,
        "config" => config::run(t, s.config_s, s.deliveries).await?,
        "many-names" => scale::many_names(t, s.names, s.names_s).await?,
        "storm" => scale::storm(t, s.storm_rate, s.storm_s).await?,
        "fan-out" => scale::fan_out(t, s.fan_out, s.fan_out_rounds).await?,
        "registry-scale" => scale::registry_scale(t, s.fleet[0], s.fleet[1]).await?,
        other => anyhow::bail!("no scenario {other}"),
    };
    if let Some(n) = name
        .strip_prefix("waiters-")
        .filter(|kind| *kind != "shared")
        .map(|_| rows.first().and_then(|r| r.get("waiters")))
    {
        for r in rows.iter_mut() {
            r.scenario = format!("waiters-{}", fmt(n.unwrap_or(0.0)));
        }
    }
    Ok(rows)
}

fn sh(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub async fn run(args: Args) -> Result<()> {
    if args.mutant.is_some() && !args.smoke {
        anyhow::bail!("--mutant is a control of the smoke form: add --smoke");
    }
    let _mutant = args.mutant.as_deref().map(switch_on).transpose()?;
    let sizes = if args.smoke { &SMOKE } else { &FULL };
    let rounds = if args.smoke { 1 } else { args.rounds.max(1) };
    let want = |b: &str| args.backends.iter().any(|x| x == b);
    // Servers: standalone, as scripts/bench starts them (sessions up to 60 s for the many
    // idle clients of the large scenarios).
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    if want("mem") {
        targets.push(Target::parse("mem://coord-bench")?);
    }
    if want("zk") {
        let url = match &args.zk {
            Some(u) => u.clone(),
            None => {
                let mut o = ClusterOptions::new(Kind::Zk, 1);
                o.extra.push("maxSessionTimeout=60000".into());
                // Empty lock directories swept as ZooKeeper does by default (each minute).
                o.container_sweep = std::time::Duration::from_secs(60);
                let c = Cluster::start(o).map_err(|e| anyhow::anyhow!("{e}"))?;
                let url = c.url("coord-bench");
                servers.push(c);
                url
            }
        };
        targets.push(Target::parse(&url)?);
    }
    if want("etcd") {
        let url = match &args.etcd {
            Some(u) => u.clone(),
            None => {
                let c =
                    Cluster::start(ClusterOptions::new(Kind::Etcd, 1)).map_err(|e| anyhow::anyhow!("{e}"))?;
                let url = c.url("coord-bench");
                servers.push(c);
                url
            }
        };
        targets.push(Target::parse(&url)?);
    }
    // PostgreSQL for fence-sql: the one given, or one started here.
    let pg = match &args.pg {
        Some(u) => Some(u.clone()),
        None if args.only.is_empty() || args.only.iter().any(|o| "fence-sql".contains(o.as_str())) => {
            let c =
                Cluster::start(ClusterOptions::new(Kind::Postgres, 1)).map_err(|e| anyhow::anyhow!("{e}"))?;
            let url = c.url("");
            servers.push(c);
            Some(url)
        }
        None => None,
    };
    let scenarios: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| s.contains(o.as_str())))
        .collect();
    let started = std::time::Instant::now();
    let mut all: Vec<Vec<Row>> = Vec::new();
    for round in 1..=rounds {
        let mut rows = Vec::new();
        for s in &scenarios {
            if *s == "fence-sql" {
                // One database, whatever the coordination backends.
                let Some(url) = &pg else { continue };
                eprintln!("round {round}/{rounds}: fence-sql on postgres");
                let r = fence::run(url, sizes.fence_s, 50)
                    .await
                    .with_context(|| format!("fence-sql (round {round})"))?;
                for row in &r {
                    println!("{} round={round}", row.result_line());
                }
                rows.extend(r);
                continue;
            }
            for t in &targets {
                eprintln!("round {round}/{rounds}: {s} on {}", t.name());
                let r = scenario(s, t, sizes)
                    .await
                    .with_context(|| format!("{s} on {} (round {round})", t.name()))?;
                for row in &r {
                    println!("{} round={round}", row.result_line());
                }
                rows.extend(r);
            }
        }
        all.push(rows);
    }
    let mut medians = medians(&all);
    // The tenfold measures: once, each backend in turn.
    let tenfold_wanted = |m: &str| {
        args.only.is_empty()
            || args
                .only
                .iter()
                .any(|o| format!("tenfold-{m}").contains(o.as_str()))
    };
    let tenfold_ran = tenfold::MEASURES.iter().any(|m| tenfold_wanted(m));
    let mut unfinished = Vec::new();
    if tenfold_ran {
        for t in &targets {
            // The full form reports a measure that fails and goes on; the smoke form fails.
            let (r, failed) = tenfold::run(t, sizes.tenfold, tenfold_wanted, !args.smoke).await?;
            for row in &r {
                println!("{}", row.result_line());
            }
            medians.extend(r);
            unfinished.extend(failed);
        }
    }
    // The soak: once, every backend at the same time.
    let soak_minutes = if args.smoke { 0.1 } else { args.soak_minutes };
    let soak_ran =
        soak_minutes > 0.0 && (args.only.is_empty() || args.only.iter().any(|o| "soak".contains(o.as_str())));
    if soak_ran {
        eprintln!("soak: {soak_minutes} min on every backend at once");
        let r = soak::run(&targets, soak_minutes * 60.0).await.context("soak")?;
        for row in &r {
            println!("{}", row.result_line());
            // The smoke form fails on errors: an error the soak did not inject is one.
            if args.smoke && row.get("errors").is_some_and(|e| e > 0.0) {
                anyhow::bail!(
                    "soak on {}: {} errors beyond the injected ones",
                    row.backend,
                    fmt(row.get("errors").unwrap_or(0.0))
                );
            }
        }
        medians.extend(r);
    }
    let report = render(
        &medians,
        rounds,
        args.smoke,
        started.elapsed(),
        &servers,
        soak_ran.then_some(soak_minutes),
        &unfinished,
    );
    std::fs::write(&args.out, &report).with_context(|| format!("cannot write {}", args.out.display()))?;
    println!("{}", measure::markdown(&medians));
    println!("{}", targets_table(&medians));
    eprintln!(
        "wrote {} in {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    if !args.smoke {
        return Ok(());
    }
    let mut ran = scenarios.clone();
    if soak_ran {
        ran.push("soak");
    }
    let backends: Vec<&str> = targets.iter().map(|t| t.name()).collect();
    let failed = count_checks(&medians, &ran, &backends);
    let lines = |f: &[(&str, String)]| f.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n");
    match &args.mutant {
        None if failed.is_empty() => {
            eprintln!("smoke: every deterministic count is at its bar");
            Ok(())
        }
        None => anyhow::bail!("smoke: deterministic counts off their bars:\n{}", lines(&failed)),
        Some(m) => {
            let id = caught_by(m);
            if !failed.iter().any(|(check, _)| *check == id) {
                anyhow::bail!(
                    "smoke: mutant {m} switched on, yet the {id} check did not catch it (failed: {})",
                    if failed.is_empty() {
                        "none".to_owned()
                    } else {
                        lines(&failed)
                    }
                );
            }
            eprintln!("smoke: mutant {m} caught by the {id} check:\n{}", lines(&failed));
            Ok(())
        }
    }
}

/// A deterministic count the smoke form checks: which scenario's rows (by the name
/// they were run under), the subject, the metric, its bar.
struct Count {
    /// What a negative control names to say which check must catch it.
    id: &'static str,
    scenario: &'static str,
    subject: &'static str,
    metric: &'static str,
    bar: &'static str,
    ok: fn(&str, f64) -> bool,
}

/// The requests a lock cycle needs: the join (with the read of the position) and the
/// release; ZooKeeper's join is a create and a listing (sent together). The slack covers
/// a run's set-up (the lock's directory made once, or again after the server swept it
/// empty), spread over at least 20 cycles.
fn lock_floor(backend: &str) -> f64 {
    if backend == "zk" { 3.0 } else { 2.0 }
}

const COUNTS: [Count; 8] = [
    Count {
        id: "requests-per-cycle",
        scenario: "lock",
        subject: "coord",
        metric: "requests_per_cycle",
        bar: "≤ floor (zk 3, etcd and mem 2) + 0.25",
        ok: |b, v| v <= lock_floor(b) + 0.25,
    },
    // A waiter wakes once per grant it waits for; a herd wakes every waiter.
    Count {
        id: "wakeups-per-grant",
        scenario: "lock-contended",
        subject: "coord",
        metric: "wakeups_per_grant",
        bar: "≤ 1.05",
        ok: |_, v| v <= 1.05,
    },
    Count {
        id: "wakeups-per-release",
        scenario: "waiters-",
        subject: "coord",
        metric: "wakeups_per_release",
        bar: "= 1",
        ok: |_, v| (v - 1.0).abs() < 1e-9,
    },
    Count {
        id: "reads-per-handoff",
        scenario: "waiters-",
        subject: "coord",
        metric: "reads_per_handoff",
        bar: "≤ 1",
        ok: |_, v| v <= 1.0 + 1e-9,
    },
    Count {
        id: "views-out-of-sync",
        scenario: "storm",
        subject: "coord-cache",
        metric: "views_out_of_sync",
        bar: "= 0",
        ok: |_, v| v == 0.0,
    },
    Count {
        id: "final-state",
        scenario: "storm",
        subject: "coord-cache",
        metric: "final_state",
        bar: "= 1",
        ok: |_, v| v == 1.0,
    },
    // Watches of one key on one client share their re-reads: one per put per client,
    // whatever the number of watches (each re-reading on its own: one per watch).
    Count {
        id: "requests-per-put-per-client",
        scenario: "fan-out",
        subject: "coord",
        metric: "requests_per_put_per_client",
        bar: "≤ 1.5",
        ok: |_, v| v <= 1.5,
    },
    Count {
        id: "caches-in-sync",
        scenario: "soak",
        subject: "coord",
        metric: "caches_in_sync",
        bar: "= 1",
        ok: |_, v| v == 1.0,
    },
];

/// The checks of the counts that do not depend on the machine's speed (the smoke
/// form's): what a thundering herd, an extra request per lock or a torn view changes,
/// whatever the timings. `ran`: the scenarios run (`soak` among them when it ran) and
/// the backends; every count of every one of them must be there. Each failure as the
/// check's id and a line.
fn count_checks(rows: &[Row], ran: &[&str], backends: &[&str]) -> Vec<(&'static str, String)> {
    let mut failed = Vec::new();
    for c in &COUNTS {
        // `waiters-` stands for waiters-small and waiters-large (rows named waiters-N).
        let expected = ran
            .iter()
            .filter(|s| match c.scenario {
                "waiters-" => **s == "waiters-small" || **s == "waiters-large",
                name => **s == name,
            })
            .count();
        if expected == 0 {
            continue;
        }
        for b in backends {
            let matching: Vec<&Row> = rows
                .iter()
                .filter(|r| r.backend == *b && r.subject == c.subject)
                .filter(|r| match c.scenario {
                    "waiters-" => r.scenario.starts_with("waiters-") && r.scenario != "waiters-shared",
                    name => r.scenario == name,
                })
                .collect();
            if matching.len() < expected {
                failed.push((
                    c.id,
                    format!(
                        "  {b}: {}: {} rows of {} found, {expected} expected",
                        c.scenario,
                        matching.len(),
                        c.metric
                    ),
                ));
            }
            for r in matching {
                match r.get(c.metric) {
                    None => failed.push((c.id, format!("  {b}: {}: no {}", r.scenario, c.metric))),
                    Some(v) if !(c.ok)(b, v) => failed.push((
                        c.id,
                        format!("  {b}: {}: {} = {} (bar {})", r.scenario, c.metric, fmt(v), c.bar),
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    failed
}

/// The check each negative control (`--mutant`) must trip.
fn caught_by(mutant: &str) -> &'static str {
    match mutant {
        "extra-request-per-lock" => "requests-per-cycle",
        _ => "wakeups-per-release",
    }
}

/// Each metric's median over the rounds, rows in first-round order.
fn medians(rounds: &[Vec<Row>]) -> Vec<Row> {
    let mut out = Vec::new();
    let Some(first) = rounds.first() else { return out };
    for r in first {
        let same = |x: &&Row| x.scenario == r.scenario && x.backend == r.backend && x.subject == r.subject;
        let mut row = Row::new(&r.scenario, &r.backend, &r.subject);
        for (k, _) in &r.metrics {
            let values: Vec<f64> = rounds
                .iter()
                .filter_map(|round| round.iter().find(same).and_then(|x| x.get(k)))
                .collect();
            row.set(k, median(values));
        }
        out.push(row);
    }
    out
}

fn find<'a>(rows: &'a [Row], scenario: &str, backend: &str, subject: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.backend == backend && r.subject == subject)
}

/// One line per target: the figure, the bar, met or not.
fn targets_table(rows: &[Row]) -> String {
    let mut lines: Vec<(String, f64, String, bool)> = Vec::new();
    let mut ratios: Vec<(String, f64, String, bool)> = Vec::new();
    let mut check = |what: String, v: Option<f64>, bar: &str, ok: fn(f64) -> bool| {
        if let Some(v) = v {
            lines.push((what, v, bar.to_owned(), ok(v)));
        }
    };
    for b in ["zk", "etcd"] {
        let metric = |s: &str, subj: &str, m: &str| find(rows, s, b, subj).and_then(|r| r.get(m));
        // The real floor: ZooKeeper's create and list in flight together; etcd's
        // request shapes of Go's `concurrency.Mutex`.
        let floor = if b == "zk" {
            "raw-pipelined"
        } else {
            "go-mutex-shapes"
        };
        check(
            format!("{b}: uncontended lock cycle vs the real floor ({floor})"),
            metric("lock", "coord", &format!("x_{floor}")),
            "≥ 0.97×",
            |v| v >= 0.97,
        );
        check(
            format!("{b}: uncontended lock cycle vs the first raw floor (raw-floor)"),
            metric("lock", "coord", "x_raw-floor"),
            "≥ 0.95×",
            |v| v >= 0.95,
        );
        // Contended: against a lock that waits as a real one must (etcd: Go's request
        // shapes; ZooKeeper: the client library's recipe).
        let recipe = if b == "zk" {
            "zookeeper-client-lock"
        } else {
            "go-mutex-shapes"
        };
        check(
            format!("{b}: 4 clients contending, grants/s vs {recipe}"),
            metric("lock-contended", "coord", &format!("x_{recipe}")),
            "≥ 1.0×",
            |v| v >= 1.0,
        );
        check(
            format!("{b}: 4 clients contending, hand-off p99 (ms)"),
            metric("lock-contended", "coord", "handoff_p99_ms"),
            "≤ 5 ms",
            |v| v <= 5.0,
        );
        let mut waiters: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.backend == b && r.scenario.starts_with("waiters-") && r.scenario != "waiters-shared"
            })
            .collect();
        waiters.sort_by(|x, y| {
            x.get("waiters")
                .unwrap_or(0.0)
                .total_cmp(&y.get("waiters").unwrap_or(0.0))
        });
        for w in &waiters {
            check(
                format!("{b}: {}: wake-ups per release", w.scenario),
                w.get("wakeups_per_release"),
                "= 1.00",
                |v| (v - 1.0).abs() < 0.005,
            );
        }
        if let [small, .., large] = waiters.as_slice() {
            // Time per hand-off must not grow with the queue: its slope against the
            // queue's length, and the ratio of the two sizes' per-hand-off times.
            let (ns, nl) = (
                small.get("waiters").unwrap_or(0.0),
                large.get("waiters").unwrap_or(0.0),
            );
            if let (Some(ts), Some(tl)) = (small.get("per_handoff_ms"), large.get("per_handoff_ms")) {
                ratios.push((
                    format!(
                        "{b}: time per hand-off, {} over {} (slope {} µs per queued waiter)",
                        large.scenario,
                        small.scenario,
                        fmt((tl - ts) * 1e3 / (nl - ns).max(1.0))
                    ),
                    tl / ts,
                    "≤ 1.1".to_owned(),
                    tl / ts <= 1.1,
                ));
            }
            check(
                format!(
                    "{b}: {}: heap kept per queued contender, a connection each (KiB)",
                    large.scenario
                ),
                large.get("heap_kib_per_waiter"),
                "≤ 8 KiB",
                |v| v <= 8.0,
            );
        }
        check(
            format!("{b}: waiters-shared: heap kept per queued contender, 8 connections (KiB)"),
            metric("waiters-shared", "coord", "heap_kib_per_waiter"),
            "≤ 8 KiB",
            |v| v <= 8.0,
        );
        // Judged against the raw floor, whose clock starts at the same point (just
        // queued: as the follower's watch request leaves).
        for (mode, bar, ok) in [
            ("just-queued", "≤ 1.5×", (|v| v <= 1.5) as fn(f64) -> bool),
            ("after-150ms", "≤ 2×", |v| v <= 2.0),
        ] {
            if let (Some(c), Some(r)) = (
                metric("election", &format!("resign-{mode}"), "handover_p50_ms"),
                metric("election", &format!("raw-floor-{mode}"), "handover_p50_ms"),
            ) {
                check(
                    format!("{b}: election hand-over p50, resign-{mode}, vs raw-floor-{mode}"),
                    Some(c / r),
                    bar,
                    ok,
                );
            }
        }
        for op in ["put", "get", "cas"] {
            check(
                format!("{b}: config {op} per second vs raw"),
                metric("config", "coord", &format!("x_raw_{op}")),
                "≥ 0.95×",
                |v| v >= 0.95,
            );
        }
        check(
            format!("{b}: config cas per second vs the same multi sent raw"),
            metric("config", "coord", "x_raw-multi_cas"),
            "≥ 0.95×",
            |v| v >= 0.95,
        );
        if let (Some(c), Some(r)) = (
            metric("fan-out", "coord", "delivery_p50_ms"),
            metric("fan-out", "raw-one-watch", "delivery_p50_ms"),
        ) {
            check(
                format!("{b}: fan-out: one put to every watcher, delivery p50 vs one raw watch"),
                Some(c / r),
                "≤ 2×",
                |v| v <= 2.0,
            );
        }
        if let (Some(c), Some(r)) = (
            metric("fan-out", "coord", "all_delivered_p50_ms"),
            metric("fan-out", "raw-same-watches", "all_delivered_p50_ms"),
        ) {
            check(
                format!("{b}: fan-out: one put until every watcher has it, vs as many raw watches"),
                Some(c / r),
                "≤ 2×",
                |v| v <= 2.0,
            );
        }
        check(
            format!("{b}: many-names (64 tasks, one client) vs pipelined raw floor"),
            metric("many-names", "coord", "x_raw-floor"),
            "≥ 0.9×",
            |v| v >= 0.9,
        );
        check(
            format!("{b}: storm: the cache ends on the final state"),
            metric("storm", "coord-cache", "final_state"),
            "= 1",
            |v| v == 1.0,
        );
        check(
            format!("{b}: storm: peak heap (KiB)"),
            metric("storm", "coord-cache", "peak_heap_kib"),
            "≤ 16384 KiB",
            |v| v <= 16384.0,
        );
    }
    // No cliff at ten times the sizes: the per-item figures of the tenfold measures.
    for b in ["mem", "zk", "etcd"] {
        for r in rows
            .iter()
            .filter(|r| r.backend == b && r.scenario.starts_with("tenfold-"))
        {
            if r.get("did_not_finish").is_some() {
                check(
                    format!("{b}: {}: finished at {}", r.scenario, r.subject),
                    Some(0.0),
                    "= 1",
                    |v| v == 1.0,
                );
                continue;
            }
            for (k, v) in r.metrics.iter().filter(|(k, _)| k.starts_with("x_1x_")) {
                let metric = &k["x_1x_".len()..];
                let (bar, ok): (&str, fn(f64) -> bool) = if metric.starts_with("heap") {
                    ("≤ 1.5×", |v| v <= 1.5)
                } else {
                    ("≤ 2×", |v| v <= 2.0)
                };
                check(
                    format!("{b}: {}: {metric} at 10× over 1×", r.scenario),
                    Some(*v),
                    bar,
                    ok,
                );
            }
            check(
                format!(
                    "{b}: {}: heap kept per name added, all released (bytes)",
                    r.scenario
                ),
                r.get("heap_bytes_kept_per_name_added"),
                "≤ 64 B",
                |v| v <= 64.0,
            );
        }
    }
    for (backend, work) in [
        ("postgres", "update"),
        ("postgres", "order"),
        ("postgres+2ms", "update"),
    ] {
        for gate in ["admit", "begin"] {
            check(
                format!("{backend}: `{work}` transaction gated (SqlGate::{gate}) vs ungated, p50"),
                find(rows, "fence-sql", backend, &format!("{work}-gated-{gate}"))
                    .and_then(|r| r.get("x_ungated")),
                "≤ 1.1×",
                |v| v <= 1.1,
            );
        }
    }
    for b in ["mem", "zk", "etcd"] {
        let metric = |m: &str| find(rows, "soak", b, "coord").and_then(|r| r.get(m));
        check(
            format!("{b}: soak: errors beyond the injected"),
            metric("errors"),
            "= 0",
            |v| v == 0.0,
        );
        check(
            format!("{b}: soak: caches in sync at the end"),
            metric("caches_in_sync"),
            "= 1",
            |v| v == 1.0,
        );
    }
    {
        let b = "all";
        let metric = |m: &str| find(rows, "soak", b, "process").and_then(|r| r.get(m));
        check(
            "soak, every backend at once: RSS slope, second half (KiB/min)".to_owned(),
            metric("rss_slope_kib_per_min"),
            "≤ 100",
            |v| v <= 100.0,
        );
        check(
            "soak, every backend at once: live tasks slope (per min)".to_owned(),
            metric("tasks_slope_per_min"),
            "≤ 1",
            |v| v <= 1.0,
        );
        check(
            "soak, every backend at once: open files slope (per min)".to_owned(),
            metric("fds_slope_per_min"),
            "≤ 0.5",
            |v| v <= 0.5,
        );
    }
    let mut out = String::from("| target | figure | bar | met |\n|---|---:|---|---|\n");
    for (what, v, bar, ok) in lines.into_iter().chain(ratios) {
        out.push_str(&format!(
            "| {what} | {} | {bar} | {} |\n",
            fmt(v),
            if ok { "yes" } else { "**no**" }
        ));
    }
    out
}

/// The fan-out floor's own ratio: as many raw watches as coord's, per-watch delivery p50
/// against one raw watch, per backend (what one process delivering that many watches on
/// this machine costs without coord).
fn fan_out_floor(rows: &[Row]) -> String {
    let mut parts = Vec::new();
    for b in ["zk", "etcd"] {
        let p50 = |subject: &str| find(rows, "fan-out", b, subject).and_then(|r| r.get("delivery_p50_ms"));
        if let (Some(same), Some(one)) = (p50("raw-same-watches"), p50("raw-one-watch"))
            && one > 0.0
        {
            parts.push(format!(
                "{b}: {} ms against {} ms, {}×",
                fmt(same),
                fmt(one),
                fmt(same / one)
            ));
        }
    }
    if parts.is_empty() {
        "not measured in this run".to_owned()
    } else {
        parts.join("; ")
    }
}

/// Where a throughput ratio below its floor goes: for each pair (coord and the subject
/// it is judged against), the wall time per operation of each and the process's CPU
/// time per operation of each (the client side: the servers run in processes of their
/// own). Coord's wall time is the other's over the median of the per-round ratios, the
/// figure the targets table judges, so both tables agree on which is slower.
fn client_cpu_table(rows: &[Row]) -> String {
    // backend, scenario, the other subject, its rate metric, coord's ratio metric, the
    // CPU metric, what one operation is.
    const PAIRS: &[&str] = &[
        "zk|lock|raw-pipelined|cycles_per_s|x_raw-pipelined|cpu_us_per_cycle|lock cycle",
        "zk|lock-contended|zookeeper-client-lock|grants_per_s|x_zookeeper-client-lock|cpu_us_per_grant|grant, 4 clients contending",
        "zk|config|raw-floor|get_per_s|x_raw_get|get_cpu_us|config get",
        "zk|config|raw-floor|cas_per_s|x_raw_cas|cas_cpu_us|config cas",
        "zk|config|raw-multi|cas_per_s|x_raw-multi_cas|cas_cpu_us|config cas",
        "zk|many-names|raw-floor|cycles_per_s|x_raw-floor|cpu_us_per_cycle|cycle, 64 tasks",
        "etcd|lock|go-mutex-shapes|cycles_per_s|x_go-mutex-shapes|cpu_us_per_cycle|lock cycle",
        "etcd|lock|raw-coord-requests|cycles_per_s|x_raw-coord-requests|cpu_us_per_cycle|lock cycle",
        "etcd|lock|raw-floor|cycles_per_s|x_raw-floor|cpu_us_per_cycle|lock cycle",
        "etcd|config|raw-floor|put_per_s|x_raw_put|put_cpu_us|config put",
        "etcd|config|raw-floor|get_per_s|x_raw_get|get_cpu_us|config get",
        "etcd|many-names|raw-floor|cycles_per_s|x_raw-floor|cpu_us_per_cycle|cycle, 64 tasks",
    ];
    let mut out = String::from(
        "| backend | operation | against | wall µs, coord | wall µs, against | extra wall µs | CPU µs, coord | CPU µs, against | extra CPU µs |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut any = false;
    for pair in PAIRS {
        let [b, scenario, other, rate, ratio, cpu, what] = pair.split('|').collect::<Vec<_>>()[..] else {
            continue;
        };
        let (Some(c), Some(o)) = (find(rows, scenario, b, "coord"), find(rows, scenario, b, other)) else {
            continue;
        };
        let (Some(or), Some(x), Some(cc), Some(oc)) = (o.get(rate), c.get(ratio), c.get(cpu), o.get(cpu))
        else {
            continue;
        };
        if or <= 0.0 || x <= 0.0 {
            continue;
        }
        let ow = 1e6 / or;
        let cw = ow / x;
        out.push_str(&format!(
            "| {b} | {what} | {other} | {} | {} | {} | {} | {} | {} |\n",
            fmt(cw),
            fmt(ow),
            fmt(cw - ow),
            fmt(cc),
            fmt(oc),
            fmt(cc - oc)
        ));
        any = true;
    }
    if any { out } else { String::new() }
}

fn render(
    rows: &[Row],
    rounds: usize,
    smoke: bool,
    took: std::time::Duration,
    servers: &[Cluster],
    soak_minutes: Option<f64>,
    unfinished: &[String],
) -> String {
    let date = sh("date -u +%Y-%m-%d");
    let cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = sh("free -g | awk '/Mem:/ {print $2}'");
    let kernel = sh("uname -sr");
    let zk = sh("dpkg-query -W -f '${Version}' zookeeper 2>/dev/null");
    let etcd = sh("etcd --version 2>/dev/null | head -1");
    let rustc = sh("rustc --version");
    let commit = sh("git rev-parse --short HEAD 2>/dev/null");
    let started = if servers.is_empty() {
        "given by URL"
    } else {
        "started by the report (coord-testkit)"
    };
    let mut s = String::new();
    s.push_str("# coord benchmarks\n\n");
    if smoke {
        s.push_str("**Smoke run: tiny sizes, one round. The figures mean nothing; it only shows every scenario runs.**\n\n");
    }
    s.push_str(&format!(
        "Written by `scripts/bench` (`cargo run --release -p coord-bench -- report`) on {date}, commit `{commit}`, in {:.0} s. \
         Every figure is the **median of {rounds} rounds**; within a round each scenario interleaves coord with its \
         comparisons in blocks, so the ratios (`x_…` = coord's figure over the named subject's, per round, then the \
         median) are the numbers to read: this machine is shared and noisy.\n\n",
        took.as_secs_f64()
    ));
    if let Some(m) = soak_minutes {
        s.push_str(&format!(
            "The soak ran {} minutes; the tenfold measures once each, after the rounds.\n\n",
            fmt(m)
        ));
    }
    s.push_str(&format!(
        "- Machine: {cores} cores ({}), {mem} GiB, {kernel}\n- ZooKeeper {zk}, standalone, `tickTime=100`, `forceSync=no`, `maxSessionTimeout=60000`, empty containers swept each minute as by default ({started})\n\
         - etcd: {etcd}, one member, `--unsafe-no-fsync`, heartbeat 50 ms, election timeout 250 ms ({started})\n\
         - {rustc}; zookeeper-client 0.11 and etcd-client 0.21 for coord, the raw floor and the clients' recipes alike\n\n",
        cpu.trim()
    ));
    s.push_str("## Targets\n\n");
    s.push_str(&targets_table(rows));
    if !unfinished.is_empty() {
        s.push_str("\n## Tenfold measures that did not finish\n\n");
        for u in unfinished {
            s.push_str(&format!("- {}\n", u.replace('\n', " ")));
        }
    }
    s.push_str(
        &"\n## What each scenario measures\n\n\
         - `lock`: one client, lock then release, uncontended. The real floors, the fewest round trips a queue \
           lock needs with the same client library: ZooKeeper `raw-pipelined` — create an ephemeral sequential \
           node and list the directory with both requests in flight (the server answers a session's requests in \
           order, so the list sees the node), then delete: two round trips, three requests; etcd \
           `go-mutex-shapes` — Go's `concurrency.Mutex` requests exactly: one `Txn` (put the key under the \
           lease if absent, else read it, and read the prefix's oldest key), then a plain delete. The first \
           floors, kept beside them: `raw-floor` — ZooKeeper: the same three requests one after another; etcd: \
           a put-if-absent `Txn` and a delete, which reads no queue and so is no lock. `zookeeper-client-lock` \
           is that crate's `Client::lock` with its Curator-compatible prefix (released by an awaited delete); \
           `etcd-client-lock` is etcd's server-side lock service (`lock`/`unlock`). `requests_per_cycle` counts \
           coord's requests from `Client::stats()`.\n\
         - `lock-contended`: 4 clients, each its own connection, loop lock/release on one lock. A hand-off runs from \
           the holder's release starting to the next holder's `lock` returning (a client taking the lock again \
           after itself is a grant, not a hand-off). `wakeups_per_grant` counts waiter wake-ups (`Stats::wakeups`). \
           `coord-lock-delay` (in `lock` and `lock-contended`) is coord with a 10 s lock-delay on a name of its \
           own: every hand-over there is a release, which must cost what `coord`'s does and never hold off. On \
           etcd `go-mutex-shapes` contends as Go's mutex does (waits for the key created right before its own to \
           go, watched from the read's revision, then checks its own key): the contended target is against it, \
           not against etcd-client's lock service (which stalls about 100 ms per hand-off by design).\n\
         - `waiters-N`: N clients, each its own connection, queue behind a holder; then the holder releases and the \
           queue passes through (each takes the lock and releases it at once). `per_handoff_ms` is the pass-through \
           time over N; `reads_per_handoff` the waiters' read requests during the pass-through over N; \
           `rss_kib_per_waiter` the process's resident memory once all are queued (one after another), less what \
           it was with the clients connected and nobody queued, over N (what queueing costs, not a connection; \
           RSS moves in pages and keeps what the allocator has not returned, so it is noisy); \
           `heap_kib_per_waiter` the same for the live heap bytes, counted exactly by the benchmark's allocator. \
           The target on time is the ratio of `per_handoff_ms` between the two sizes (flat: ≤ 1.1), with its \
           slope per queued waiter.\n\
         - `waiters-shared`: as many contenders as `waiters-N`'s larger size, over 8 clients: a client's \
           contenders for one name wait in its local queue, one at a time on the server. `heap_kib_per_waiter` \
           is what a queued contender keeps without a connection of its own (contender memory, not \
           connection memory).\n\
         - `election`: hand-over from `resign()` starting to the follower's `campaign` returning, the follower just \
           queued (`resign-just-queued`: the clock starts as its watch request leaves, for coord and the raw \
           floor alike) or queued 150 ms earlier; `session-ended`: the leader's session ended from \
           outside (ZooKeeper: the session closed by another connection; etcd: its lease revoked); `leader-silent`: \
           the leader's links blackholed, so its session ends by timeout (2 s) — compare with `session_timeout_ms`.\n\
         - `registry`: N instances, each registered by its own client (32 connecting at a time, 64 registering at \
           a time); `all_seen_s` until one watcher has seen all; then a tenth of the sessions are ended from outside \
           at once, `rest_seen_s` until the watcher sees the rest.\n\
         - `config`: put, get and compare-and-set per second, coord beside the raw request of the same client \
           (ZooKeeper `setData`/`getData`/`setData` with a version; etcd `Put`/`Range`/`Txn` on the mod revision); \
           on ZooKeeper `raw-multi` sends coord's exact compare-and-set raw (one `multi`: check an incarnation \
           marker, set the data at its version), the real floor of an exact one; \
           `*_requests` is coord's requests per operation. `coord-watch`: a put by one client until another's \
           watch delivers it, one at a time.\n\
         - `many-names`: one client, 64 tasks, each cycling lock/release through its share of the names \
           (per-entity locks; every name locked once before timing, so its directory exists, as the raw \
           floor's are made beforehand); `raw-floor` sends the same cycles raw over one session of the same \
           client library, 64 tasks likewise.\n\
         - `storm`: one client puts 16 keys of one prefix round-robin at a steady rate, another follows the \
           prefix with a config cache. `delivery_*` runs from a put's acknowledgement to the cache's view \
           holding it (or a newer value of the key); `peak_heap_kib` is the live heap above what it was \
           before the storm; `views_out_of_sync` counts views published out of sync; `final_state` = 1 when \
           the cache ends on exactly the last values.\n\
         - `fan-out`: 1,000 config watches of one key over 8 clients; one put at a time until every watch has \
           delivered it (`delivery_*` per watch, `all_delivered_p50_ms` for the last of them, \
           `requests_per_put_per_client` the watching clients' requests); \
           `raw-same-watches` is the floor for as many watches: 1,000 raw watches of one key over 8 connections \
           of the same client library (ZooKeeper: one-shot data watches armed before each put; etcd: a watch \
           stream each); `raw-one-watch` is one watch of one key.\n\
         - `registry-scale`: 10,000 instances registered by 200 clients (each its own connection, sessions of \
           30 s), followed by one service cache: `all_seen_s` from the first registration until the cache holds \
           all, `heap_kib_per_instance` the live heap the cache and its watch keep per instance, then a tenth of \
           the clients close at once and `gone_seen_s` runs until the cache has seen their instances go.\n\
         - `tenfold-*`: run once, after the rounds, each backend in turn: each measure at a size (`1x`) and at \
           ten times it (`10x`), one after the other; the `10x` row's `x_1x_…` is its per-item figure over the \
           `1x` row's — 1 when each item costs the same at both sizes, 10 when one item costs what every item \
           did at the smaller size (a cliff). `names`: one client, 64 tasks, each of 10,000 / 100,000 distinct \
           lock names locked and released once (its first use: its lock directory made), `us_per_name`, \
           `requests_per_name`, and `heap_bytes_kept`, the live heap the process still holds once all are \
           released (on mem that includes the in-process store), judged as \
           `heap_bytes_kept_per_name_added` from the smaller size to the larger (≤ 64 B: nothing per name). \
           `instances`: `registry-scale` at 10,000 / 100,000 instances (200 clients at both sizes): time per \
           instance to register, until the cache holds all, until it has seen a tenth go (their clients \
           closed together); heap per instance: the live heap added while registering and caching them, \
           which holds the cache and also the registrations' handles and the 200 clients' state (on mem, \
           the in-process store too). Each measure runs once at the smaller size unreported (a warm-up), \
           then at both sizes; a measure not done within 20 minutes counts as not finished. `watchers`: 1,000 / 10,000 config watches of one key over 8 clients: time \
           per watch to set up, the median over 5 puts of the time until every watch has the put, per \
           watcher; heap per watch. `items`: one queue, 1,000 / 10,000 items pushed by 16 tasks then taken \
           one at a time (`try_take`): time per push and per take, requests per take. The queue's larger \
           size is its limit, `MAX_QUEUE_ITEMS` (10,000, for the reason given at that constant: on ZooKeeper \
           every key of a namespace's config is one flat directory, listed on every push and take), not \
           100,000. The targets: time per item at `10x` ≤ 2× that at `1x`, heap per item ≤ 1.5×.\n\
         - `soak`: run once, on every backend at the same time: four clients churn locks on 8 names (every \
           7th guard dropped instead of released), turns at one election, registrations under a service \
           cache and config puts under a config cache; every 10 s one of them is closed mid-operation and \
           replaced (its errors are the injected ones). Resident memory, live tokio tasks and open file \
           descriptors are sampled each second; the slopes are least squares over the second half.\n\n\
         ## What stands between some figures and their targets\n\n\
         - Client CPU: for each floor coord is judged against with the same client library, the table \
           below sets the wall time per operation beside the process's CPU time per operation \
           (`cpu_us_*`: user and system time of every thread, from `getrusage`; the servers run in \
           processes of their own, so it is the client side alone). Coord's wall time is the floor's over \
           the median per-round ratio, the figure the targets table judges. In `lock` and `config` one \
           request is in flight at a time, so coord's extra CPU per operation lies on the request's path \
           unless it runs while the request waits on the server: an extra CPU as large as the extra wall \
           time can account for the whole gap, one much smaller cannot. In the concurrent rows (4 clients, \
           64 tasks) CPU per operation is the process's CPU over the throughput and can pass the wall time \
           per operation. `voluntary_switches_per_cycle` counts the times per lock cycle a thread of the \
           process went to sleep waiting (a futex, a socket): whether coord makes threads wait and wake \
           more often than the floor does.\n\n{CPU_TABLE}\n\
         - Uncontended lock: coord sends the floor's number of requests (ZooKeeper 3, etcd 2) and runs no task \
           per grant. On etcd the request shapes differ from the floor's, for correctness: the join `Txn` also \
           reads the queue's newest keys (the position in the same round trip, which saves every waiter a \
           request), and the release is a `Txn` that deletes the key only if its create revision is the \
           contender's (so a release after an operator's delete never removes a later contender of the same \
           client; a plain delete is cheaper for etcd than any `Txn`). Three raw subjects split the gap: \
           `raw-guarded-release` is the floor's join with coord's guarded release, `raw-coord-requests` sends \
           exactly coord's two requests raw, so `x_raw-coord-requests` is the part left to coord's client side \
           (its error mapping, deadlines, member fail-over and the recipe's bookkeeping: no single hot spot in a \
           profile, where the process mostly waits), and the ratio of `raw-coord-requests` to `raw-floor` is \
           what the shapes cost at the server. The same two costs, multiplied by 64 tasks on a CPU-bound \
           machine, are what `many-names` on etcd shows. On ZooKeeper the rounds spread widely (the JVM server: \
           one round's raw floor ran 40% faster than the next's), so read the per-round ratios too.\n\
         - Config on ZooKeeper: `put` is one `setData` and compare-and-set one `multi`, exactly the raw \
           requests' count (`*_requests` = 1). The compare-and-set's `multi` also checks the key's \
           incarnation marker, which is what makes it exact across a delete and recreate; a `multi` costs the \
           server more than the raw floor's versioned `setData`, which cannot tell incarnations apart. The \
           rest is coord's client side per request, and noise.\n\
         - etcd, 1,000 waiters: a waiter's read of \"the key right ahead of me\" is one range with a limit, but \
           etcd 3.4 answers any range sorted or filtered by create revision by fetching every key of the range \
           before sorting and truncating (`etcdserver/apply.go`: \"fetch everything; sort and truncate \
           afterwards\"), so its server cost grows with the keys queued. A waiter whose predecessor was first \
           (`Position::Next`) reads its own key alone once it goes (`ContenderQueue::confirm`), which is O(1). \
           Every other waiter — behind two or more when it last read, which in a queue passing through is all \
           but the first — reads the range again when the one ahead goes: it cannot tell a release (then it is \
           first) from an exit out of turn (then others may still be ahead) without reading. Curator and Go's \
           `concurrency` read the same way.\n\
         - ZooKeeper, 1,000 waiters: `getChildren` is the only way to find the node ahead and lists every \
           contender (sent together with the create, so a join costs two round trips), on every wake-up but \
           that of a waiter right behind the head, which checks its own node alone (`exists`); zookeeper-client keeps each connection's read buffer at its largest response, so the heap \
           a queued contender's connection keeps grows with the queue it listed.\n\
         - etcd, heap per queued contender with a connection each (`waiters-N`): every client has one gRPC \
           watch stream, shared by all its waits and watches (an HTTP/2 stream, its decoder buffer and \
           etcd-client's request channel: about 35 KiB), opened by its first wait; with one client per waiter \
           that is one stream per waiter. What a queued contender itself keeps is `waiters-shared`'s figure \
           (a watch id and a queue on the shared stream, the engine's state).\n\
         - Tenfold queue items: a push, a take and `len` send the same requests at 1,000 and 10,000 items \
           (`requests_per_take` flat), but the server's work in two of them grows with the items queued: the \
           bound's count (push) and the read of the oldest item (take) are ranges, and etcd 3.4 fetches every \
           revision of a range before it applies the limit; on ZooKeeper both are the listing of the \
           namespace's one flat config directory (about 40 bytes per item); on mem the count walks the \
           items. So time per push and per take grows with the queue, well below linearly — the queue is for \
           tens to thousands of items (its limit, `MAX_QUEUE_ITEMS`, says why).\n\
         - Fan-out, per-watch delivery against one raw watch: the same client library with as many \
           watches over as many connections (`raw-same-watches`) is the floor for as many watches; its \
           per-watch delivery p50 over `raw-one-watch`'s, this run: {FAN_OUT}. Where that is above 2×, the \
           per-watch target is below what the raw library reaches with 1,000 watches on this machine; \
           coord's figure against that floor is the target on `until every watcher has it` vs as many raw watches, above.\n\
         - SQL gates (`fence-sql`): the pool is sqlx's default, which pings a connection before handing \
           it out and again as it goes back (one round trip each), so the ungated `update` is five round \
           trips (ping, `BEGIN`, the update, `COMMIT`, ping) and `order` seven. `SqlGate::admit` adds one \
           statement: six and eight, a floor of 6/5 = 1.2× and 8/7 = 1.14× wherever round trips set the \
           cost, above the 1.1× bar at any latency (`postgres+2ms`: 1.2×). `SqlGate::begin` sends the gate \
           with `BEGIN` in one round trip, as a simple query the server parses and plans each time: the \
           same round trips as ungated, plus the server's work for the gate's statement, which weighs on \
           loopback and is within the bar over a 2 ms network.\n\
         - Election after 150 ms idle: the raw floor itself (a delete and the watch event, same client library) \
           takes about 1 ms after 150 ms idle on this machine (`raw-floor-after-150ms`), so the target is a \
           ratio to it, not an absolute millisecond.\n\n\
         ## Figures (medians)\n"
            .replace("{CPU_TABLE}", &client_cpu_table(rows))
            .replace("{FAN_OUT}", &fan_out_floor(rows)),
    );
    s.push_str(&measure::markdown(rows));
    s
}

#[cfg(test)]
mod tests {
    use super::{caught_by, client_cpu_table, count_checks};
    use crate::measure::Row;

    fn ids(rows: &[Row], ran: &[&str]) -> Vec<&'static str> {
        count_checks(rows, ran, &["zk"])
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn client_cpu_is_set_against_the_wall_time_gap() {
        let mut rows = vec![
            Row::new("lock", "zk", "coord")
                .with("cycles_per_s", 1000.0)
                .with("cpu_us_per_cycle", 350.0),
            Row::new("lock", "zk", "raw-pipelined")
                .with("cycles_per_s", 1250.0)
                .with("cpu_us_per_cycle", 250.0),
        ];
        // Coord's wall time from the median per-round ratio (0.8: 1000 µs against 800),
        // not from its own median rate (which would say 833 µs).
        rows[0].set("x_raw-pipelined", 0.8);
        rows[0].set("cycles_per_s", 1200.0);
        let t = client_cpu_table(&rows);
        assert!(
            t.contains("| zk | lock cycle | raw-pipelined | 1000 | 800 | 200 | 350 | 250 | 100 |"),
            "{t}"
        );
        assert_eq!(client_cpu_table(&rows[..1]), "");
    }

    #[test]
    fn a_missing_count_fails() {
        let rows = vec![Row::new("lock", "zk", "coord").with("cycles_per_s", 100.0)];
        assert_eq!(ids(&rows, &["lock"]), ["requests-per-cycle"]);
        // A scenario that ran but left no row at all.
        assert_eq!(ids(&[], &["lock"]), ["requests-per-cycle"]);
    }

    #[test]
    fn waiters_shared_is_not_a_waiters_row() {
        let rows = vec![Row::new("waiters-shared", "zk", "coord").with("waiters", 20.0)];
        assert_eq!(
            ids(&rows, &["waiters-small", "waiters-shared"]),
            ["wakeups-per-release", "reads-per-handoff"]
        );
    }

    #[test]
    fn counts_at_their_bars_pass_and_off_them_fail() {
        let good = vec![
            Row::new("lock", "zk", "coord").with("requests_per_cycle", 3.1),
            Row::new("waiters-10", "zk", "coord")
                .with("wakeups_per_release", 1.0)
                .with("reads_per_handoff", 1.0),
        ];
        assert!(ids(&good, &["lock", "waiters-small"]).is_empty());
        let herd = vec![
            Row::new("waiters-10", "zk", "coord")
                .with("wakeups_per_release", 4.5)
                .with("reads_per_handoff", 4.5),
        ];
        assert!(ids(&herd, &["waiters-small"]).contains(&caught_by("herd-wake")));
        let extra = vec![Row::new("lock", "zk", "coord").with("requests_per_cycle", 4.0)];
        assert_eq!(ids(&extra, &["lock"]), [caught_by("extra-request-per-lock")]);
    }
}
