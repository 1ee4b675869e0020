//! The command line as a belief subject: `coord lock NAME -- CMD` and `coord elect NAME
//! ID -- CMD` run their command only while they hold, so the commands' own records
//! show when each believed it held. Three workers run such commands one after another,
//! each through fault proxies of its own, while a nemesis blackholes one worker's links
//! at a time for longer than the session timeout (its `coord` loses the hold and must
//! end the command before the server can grant it to another). Every command appends
//! `<kind> <token> <worker> <ns>` lines (the realtime clock, shared by the machine's processes) to one
//! ledger every 10 ms; each token's first and last line bound its interval, judged by
//! [`coord_check::beliefs`] with an allowance of 100 ms for a busy machine: the next
//! holder is granted only after the server expired the lost one's session, which
//! `coord` ends the command before.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coord_check::beliefs::{self, Belief};
use coord_testkit::FaultProxy;
use libtest_mimic::Failed;

use super::{Backend, Result, SESSION_TIMEOUT, coord, finish, tempdir, text};

/// Commands per kind before the ledger is judged, and losses the nemesis must cause:
/// the run goes on until it has both, at most [`LONGEST`].
const ENOUGH_TOKENS: usize = 12;
const ENOUGH_LOSSES: usize = 2;
const LONGEST: Duration = Duration::from_secs(120);
const WORKERS: usize = 3;
/// What a command may overlap the next holder's by: none in principle (the next grant
/// follows the server's expiry of the session, which `coord` ends the command before),
/// 100 ms for a machine busy enough to be late with the kill or the beats' clock reads.
const ALLOWANCE: Duration = Duration::from_millis(100);

pub fn cli_holders_never_overlap(b: &Backend) -> Result {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let upstreams: Vec<SocketAddr> = b
        .hosts
        .split(',')
        .map(|h| h.parse::<SocketAddr>().map_err(|e| format!("{h}: {e}")))
        .collect::<std::result::Result<_, _>>()?;
    // Each worker's own proxy to every member.
    let links: Vec<Vec<FaultProxy>> = rt
        .block_on(async {
            let mut all = Vec::new();
            for _ in 0..WORKERS {
                let mut mine = Vec::new();
                for u in &upstreams {
                    mine.push(FaultProxy::start(*u).await?);
                }
                all.push(mine);
            }
            std::io::Result::Ok(all)
        })
        .map_err(|e| e.to_string())?;
    let links = Arc::new(links);
    let ns = coord_testkit::env::unique_namespace("cli-beliefs");
    let options = coord_testkit::env::session_option(b.name, SESSION_TIMEOUT);
    let dir = tempdir()?;
    let ledger = dir.path().join("ledger");
    let stop = Arc::new(AtomicBool::new(false));
    let losses = Arc::new(AtomicUsize::new(0));
    let odd = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let hosts: Vec<String> = links[w].iter().map(|p| p.addr().to_string()).collect();
        let url = format!("{}://{}/{ns}?{options}", b.name, hosts.join(","));
        let (stop, losses, odd, ledger) = (stop.clone(), losses.clone(), odd.clone(), ledger.clone());
        workers.push(std::thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                // Lock and election in turn; the command beats for 50..250 ms, every
                // third one for 4 s (longer than a loss takes to show, and than the
                // allowance by far: a command left running after a loss overlaps).
                let elect = round % 2 == 0;
                let kind = if elect { "elect" } else { "lock" };
                let beats_ms = if round % 3 == 0 {
                    4000
                } else {
                    50 + (round * 37 + w * 61) % 200
                };
                // The beats come from a child of the command that ignores SIGTERM:
                // `coord` must end the command's whole process group, with SIGKILL
                // after its grace.
                let script = format!(
                    r#"trap '' TERM; end=$(( $(date +%s%N) + {} )); ( while [ $(date +%s%N) -lt $end ]; do echo "{kind} $COORD_FENCING_TOKEN {w} $(date +%s%N)" >> {}; sleep 0.01; done ) & wait"#,
                    beats_ms * 1_000_000,
                    ledger.display()
                );
                let mut cmd = coord(&url);
                cmd.arg("--json");
                if elect {
                    cmd.args(["elect", "cli-beliefs", &format!("w{w}")]);
                } else {
                    cmd.args(["lock", "cli-beliefs"]);
                }
                let child = cmd
                    .args(["--", "sh", "-c", &script])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn();
                let outcome = child
                    .map_err(|e| e.to_string())
                    .and_then(|c| finish(c, Duration::from_secs(60)).map_err(|e| format!("{e:?}")));
                match outcome {
                    Ok(out) => match out.status.code() {
                        Some(0) => {}
                        // The hold was lost (the nemesis), or the session could not be
                        // had while its links were down.
                        Some(125) => {
                            losses.fetch_add(1, Ordering::SeqCst);
                        }
                        Some(69 | 124) => std::thread::sleep(Duration::from_millis(200)),
                        other => lock(&odd).push(format!(
                            "worker {w} {kind}: exit {other:?}: {}",
                            text(&out.stderr).lines().last().unwrap_or("")
                        )),
                    },
                    Err(e) => lock(&odd).push(format!("worker {w} {kind}: {e}")),
                }
            }
        }));
    }
    // The nemesis: one worker's links blackholed at a time, for 1.5 session timeouts
    // (its hold is lost; the server expires its session), then a pause.
    let started = Instant::now();
    let mut victim = WORKERS - 1;
    let outcome = loop {
        std::thread::sleep(Duration::from_millis(1500));
        let tokens = tokens_by_kind(&ledger);
        let done = tokens.get("lock").map_or(0, BTreeMap::len) >= ENOUGH_TOKENS
            && tokens.get("elect").map_or(0, BTreeMap::len) >= ENOUGH_TOKENS
            && losses.load(Ordering::SeqCst) >= ENOUGH_LOSSES;
        if done {
            break Ok(());
        }
        if started.elapsed() > LONGEST {
            break Err(format!(
                "not enough observations within {LONGEST:?}: tokens {:?}, {} losses (need {ENOUGH_TOKENS} each, \
                 {ENOUGH_LOSSES} losses); odd exits: {:?}",
                tokens
                    .iter()
                    .map(|(k, v)| (k.clone(), v.len()))
                    .collect::<Vec<_>>(),
                losses.load(Ordering::SeqCst),
                lock(&odd)
            ));
        }
        // The worker whose command beat last (most likely the holder), else the next.
        victim = last_beat(&ledger).unwrap_or((victim + 1) % WORKERS);
        let cut = SESSION_TIMEOUT * 3 / 2;
        rt.block_on(async {
            for p in &links[victim] {
                p.blackhole_for(cut);
            }
        });
        std::thread::sleep(cut + Duration::from_millis(500));
    };
    stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for mine in links.iter() {
            for p in mine {
                p.pass();
            }
        }
    });
    for w in workers {
        let _ = w.join();
    }
    outcome?;
    let odd = lock(&odd).clone();
    ensure_none(&odd)?;
    judge(&ledger, b.name)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn ensure_none(odd: &[String]) -> Result {
    if odd.is_empty() {
        Ok(())
    } else {
        Err(Failed::from(format!("unexpected exits: {odd:?}")))
    }
}

/// The worker of the ledger's last line.
fn last_beat(ledger: &std::path::Path) -> Option<usize> {
    let text = std::fs::read_to_string(ledger).ok()?;
    text.lines().last()?.split(' ').nth(2)?.parse().ok()
}

/// kind → token → (first, last) beat.
fn tokens_by_kind(ledger: &std::path::Path) -> BTreeMap<String, BTreeMap<u64, (u64, u64)>> {
    let mut out: BTreeMap<String, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(ledger) else {
        return out;
    };
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(kind), Some(token), Some(_worker), Some(at)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (Ok(token), Ok(at)) = (token.parse::<u64>(), at.parse::<u64>()) else {
            continue;
        };
        let span = out
            .entry(kind.to_owned())
            .or_default()
            .entry(token)
            .or_insert((at, at));
        span.0 = span.0.min(at);
        span.1 = span.1.max(at);
    }
    out
}

fn judge(ledger: &std::path::Path, backend: &str) -> Result {
    let mut beliefs = Vec::new();
    for (kind, tokens) in tokens_by_kind(ledger) {
        for (token, (from, until)) in tokens {
            beliefs.push(Belief {
                name: kind.clone(),
                holder: token,
                token,
                admits: 1,
                from,
                until: Some(until),
            });
        }
    }
    let report = beliefs::check(&beliefs, ALLOWANCE.as_nanos() as u64);
    eprintln!("[{backend}] cli beliefs: {report}");
    if report.is_ok() {
        Ok(())
    } else {
        Err(Failed::from(format!(
            "commands of two holders ran at once: {report}"
        )))
    }
}
