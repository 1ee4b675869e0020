//! Seeded histories on the in-memory backend under a nemesis, judged by `coord-check`.
//!
//! One test per recipe family. Each runs `COORD_HISTORY_SEEDS` seeded histories (default
//! 40; raise it for soak runs); `COORD_HISTORY_SEED=<n>` replays that one seed, and
//! `COORD_HISTORY_PARALLEL=<n>` sets how many histories run at once (default 8), and
//! `COORD_HISTORY_DUMP=<dir>` writes a failing queue history there in full. The summary
//! lines are printed: run with `-- --nocapture` to see them.
//!
//! A history: a fresh [`MemCluster`], 3–4 clients with a 300–500 ms session TTL, 2–3
//! worker tasks per client doing random operations for 1–1.5 s, and a nemesis task. Every
//! choice comes from `StdRng::seed_from_u64(seed)` (the workers' and the nemesis's
//! generators are drawn from it). Workers cancel: operations run under
//! `tokio::time::timeout` with a random, often tiny, limit, so futures are dropped at
//! random points; guards are sometimes dropped instead of released. The nemesis picks
//! among: expiring a client's session on the server; suspending a client, briefly or past
//! its TTL; silencing a client's link past its TTL (a blackhole: its writes time out,
//! outcome unknown, and land when the link is back); crashing a client (at most one per history; it is gone and its workers stop);
//! losing the replies of a client's next 1–3 writes (applied, outcome unknown); delaying
//! a client's replies for a while; an operator deleting a contender's entry (a holder's
//! or a waiter's) under the family's directory — for the counter and config family, a key,
//! recorded as an operation; compacting the event history.
//!
//! Replays are not exact: the seed fixes the plan (clients, TTL, duration, each worker's
//! operations and time limits, the nemesis's actions and pauses), but tokio's scheduling
//! and the wall clock decide how they interleave, and several histories share one
//! runtime. A failing seed often fails again, not always: run it a few times, or soak. Every
//! failure message names its seed and carries the nemesis's log.
//!
//! # What is judged
//!
//! - **Exclusion** (lock, election, read/write lock, semaphore with 2 permits): ground truth
//!   is a log of fenced writes. Each holder, once granted, writes 2–4 entries
//!   `log/<seq>` (`seq` from a counter of the test, taken after the grant) with
//!   `Txn::fenced_by(fence)`, each naming its holder, token and mode. The log the store
//!   accepted, read back at the end in key order, is judged by `sections::check`: that
//!   resolves every write of unknown outcome. An acknowledged write missing from the log,
//!   or a refused one present, is a violation too. Once every client let go, nothing may
//!   be left under the recipe's directory (a dropped contender, a lost release or a ghost
//!   entry would block the next user forever). In the lock family the operator also calls
//!   `revoke_lock` (from a client of its own with slow replies, so holders release in the
//!   middle of it); holders that watch release when asked, and a holder may only see a
//!   request `revoke_lock` reported making of its token. Mutant `MarkUnchecked` (a plain
//!   put for the request) must be caught. Negative control: the lock family again
//!   with the fence dropped, under a nemesis of session expiries and operator deletes —
//!   the checker must catch it in at least one seed.
//! - **Beliefs** (lock, election, semaphore): what each handle *says*, as unfenced work
//!   trusts it. From its grant returned to its first state other than `Held` (watched
//!   with `state()` and `changed()`, which arm the entry watch), its release, or its
//!   client's crash, each handle's interval is judged by `beliefs::check`: no more
//!   handles of the name say `Held` at once than it admits, beyond the loss margin (a
//!   tenth of the TTL). Two more rules use the operator's log (each deleted entry's
//!   token and when): no grant is handed out for an entry the operator deleted more than
//!   the margin before (mutant `OwnEntryUnchecked`), and no handle says `Lost` while its
//!   session is intact unless the operator deleted its entry (mutant `LeaveByKey`: coord
//!   removing a live entry of its own); losses within two TTLs of a session change of
//!   the client are not judged by that rule. `entry_delete_histories` runs the lock and
//!   the election under a nemesis of frequent entry deletes, where the two mutants are
//!   caught.
//! - **Queue**: pushes of unique values and takes, recorded (`Unknown` for an outcome-unknown
//!   error or a dropped future). At the end every live client is closed at once, as a
//!   user's shutdown would close it — mid-operation, no drain first — and a fresh client
//!   drains what is left (its takes first put back what earlier takes left in receipts;
//!   receipts and items its `try_take` leaves while the taker lock is busy are read from
//!   the store, receipts at the head). Judged strictly: nothing lost — dropped takes,
//!   closes, session losses and crashes included — and FIFO per producer. One allowance
//!   follows the contract: an item may be delivered again when the client `take`
//!   returned it to was faulted before its receipt was deleted (see
//!   `may_be_redelivered`). `try_take` answering `None` is not recorded as seeing the
//!   queue empty: it also says so while another consumer holds the taker lock. Negative
//!   control: a history with one take duplicated must be rejected; mutant
//!   `TakeWithoutReceipt` (no receipt holds the item) must be caught. This family found
//!   items lost to dropped takes when the session or the taker lock went before a
//!   removal's lost answer was settled (pinned down by
//!   `queue_dropped_take_keeps_its_item_through_session_loss`), and, once clients were
//!   closed without a drain, items a dropped take had kept only in its client's memory.
//! - **Counter and config**: `get`/`add`/`set` on two counters and `get`/`put`/
//!   `compare_and_set`/`delete` on three config keys, recorded and checked per key for
//!   linearizability against `Counter` and `Register`. mem's versions are revisions
//!   (`coord_core::raw::version(rev, 0)`), so a version maps to its major part. An operator's
//!   delete of a counter is recorded as `Set(0)` (an absent counter reads 0). Negative
//!   controls: a counter read changed to an unreachable value, and a config read made
//!   stale (it returns what a read saw before an acknowledged write that completed before
//!   it began) must be rejected.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord_check::history::{Op, Outcome, Pending, Recorder};
use coord_check::linearizable::{Checker, Verdict, Violation};
use coord_check::models::{Counter, CounterOp, CounterRet, Mismatch, Register, RegisterOp, RegisterRet};
use coord_check::queue::{self, QueueHistory, QueueOp, QueueRet, QueueViolation};
use coord_check::sections::{self, Admission, LogEntry, Mode};
use coord_core::prelude::*;
use coord_core::{Client, Error, ErrorKind, Fence, Leadership, LockGuard, Txn, Version};
use coord_mem::{MemClient, MemCluster, MemOptions};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

mod exclusion;
mod kv;
mod mutants;
mod queues;

use exclusion::*;

use queues::*;

/// Histories per family unless `COORD_HISTORY_SEEDS` says otherwise.
const DEFAULT_SEEDS: u64 = 40;
/// Histories run at once unless `COORD_HISTORY_PARALLEL` says otherwise.
const DEFAULT_PARALLEL: usize = 8;
/// The fence-dropped mutant runs at most this many seeds in all while it is not caught.
const MUTANT_MAX_SEEDS: u64 = 200;
/// A history that takes longer than this is reported as hung.
const HISTORY_LIMIT: Duration = Duration::from_secs(60);
/// Every client's namespace.
const NS: &str = "h";
/// The lock, election, read/write lock or semaphore of the exclusion families.
const RES: &str = "res";
/// The semaphore's permits.
const PERMITS: u32 = 2;
/// The queue.
const QUEUE: &str = "q";
/// Its maximum (pushes beyond it fail, definitely).
const QUEUE_MAX: u32 = 40;
/// The counters and config keys of the counter and config family.
const COUNTERS: [&str; 2] = ["ctr0", "ctr1"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
/// The process of the operator's recorded deletes.
const OPERATOR: u64 = 999_999;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a failed write ended: `Unknown` when it may have been applied (a lost reply; a
/// `Closed` client, which mem also answers when it crashed after applying the request),
/// `Failed` when nothing was written.
fn write_failure<O>(e: &Error) -> Outcome<O> {
    if e.outcome_unknown() || e.kind() == ErrorKind::Closed {
        Outcome::Unknown
    } else {
        Outcome::Failed
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------------
// Seeds, runtime, and running many histories

/// Which seeds to run.
struct Plan {
    seeds: Vec<u64>,
    /// `COORD_HISTORY_SEED` replays one seed.
    replay: bool,
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    match value.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{name}={value:?} is not a number"),
    }
}

fn plan() -> Plan {
    if let Some(seed) = env_u64("COORD_HISTORY_SEED") {
        return Plan {
            seeds: vec![seed],
            replay: true,
        };
    }
    Plan {
        seeds: (0..env_u64("COORD_HISTORY_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
        replay: false,
    }
}

fn parallel() -> usize {
    env_u64("COORD_HISTORY_PARALLEL").map_or(DEFAULT_PARALLEL, |n| n.max(1) as usize)
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// With `COORD_HISTORY_DUMP=<dir>`, writes `text` to `<dir>/<name>` (a failing
/// history in full, for a closer look); says where, or nothing.
fn dump(name: &str, text: impl FnOnce() -> String) -> String {
    let Ok(dir) = std::env::var("COORD_HISTORY_DUMP") else {
        return String::new();
    };
    let path = std::path::Path::new(&dir).join(name);
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text())) {
        Ok(()) => format!("\n  history written to {}", path.display()),
        Err(e) => format!("\n  could not write {}: {e}", path.display()),
    }
}

fn replay_hint(seed: u64, test: &str) -> String {
    format!(
        "replay: COORD_HISTORY_SEED={seed} cargo test -p coord-mem --test histories {test} -- --nocapture"
    )
}

/// Runs `history` for every seed, `parallel()` at a time; results in seed order. A
/// history that panics or hangs is an `Err` naming what happened.
async fn run_all<T, F, Fut>(seeds: &[u64], history: F) -> Vec<(u64, Result<T, String>)>
where
    T: Send + 'static,
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, String>> + Send + 'static,
{
    let gate = Arc::new(tokio::sync::Semaphore::new(parallel()));
    let history = Arc::new(history);
    let handles: Vec<(u64, JoinHandle<Result<T, String>>)> = seeds
        .iter()
        .map(|&seed| {
            let (gate, history) = (gate.clone(), history.clone());
            let task = tokio::spawn(async move {
                let _permit = gate.acquire_owned().await;
                match timeout(HISTORY_LIMIT, history(seed)).await {
                    Ok(result) => result,
                    Err(_) => Err(format!("the history did not finish within {HISTORY_LIMIT:?}")),
                }
            });
            (seed, task)
        })
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for (seed, handle) in handles {
        let result = match handle.await {
            Ok(result) => result,
            Err(e) => Err(format!("the history's task failed: {e}")),
        };
        out.push((seed, result));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The world of one history: a cluster, its clients, and the nemesis

/// One client of a history.
struct Node {
    id: usize,
    client: Client,
    mem: MemClient,
    crashed: AtomicBool,
}

impl Node {
    fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
}

struct World {
    cluster: MemCluster,
    ttl: Duration,
    nodes: Vec<Arc<Node>>,
    start: Instant,
    deadline: Instant,
    /// What the nemesis did, for failure messages.
    log: Mutex<Vec<String>>,
}

fn connect(cluster: &MemCluster, ttl: Duration) -> Result<Client, String> {
    MemClient::connect(
        cluster,
        MemOptions {
            namespace: NS.to_owned(),
            session_ttl: ttl,
        },
    )
    .map_err(|e| format!("connect: {e}"))
}

impl World {
    fn new(rng: &mut StdRng) -> Result<Arc<World>, String> {
        let cluster = MemCluster::new();
        let ttl = ms(rng.random_range(300..=500));
        let mut nodes = Vec::new();
        for id in 0..rng.random_range(3..=4) {
            let client = connect(&cluster, ttl)?;
            let mem = client
                .backend_as::<MemClient>()
                .ok_or("not a mem client")?
                .clone();
            nodes.push(Arc::new(Node {
                id,
                client,
                mem,
                crashed: AtomicBool::new(false),
            }));
        }
        let start = Instant::now();
        Ok(Arc::new(World {
            cluster,
            ttl,
            nodes,
            start,
            deadline: start + ms(rng.random_range(1000..=1500)),
            log: Mutex::new(Vec::new()),
        }))
    }

    /// Whether `node`'s workers go on.
    fn running(&self, node: &Node) -> bool {
        !node.crashed() && Instant::now() < self.deadline
    }

    fn live(&self) -> Vec<Arc<Node>> {
        self.nodes.iter().filter(|n| !n.crashed()).cloned().collect()
    }

    fn note(&self, what: String) {
        let at = self.start.elapsed().as_millis();
        lock(&self.log).push(format!("+{at}ms {what}"));
    }

    fn nemesis_log(&self) -> String {
        let log = lock(&self.log);
        if log.is_empty() {
            "(nothing)".to_owned()
        } else {
            log.join("; ")
        }
    }

    /// Heals every fault and waits (bounded) until the crashed client's session is gone.
    async fn settle(&self) {
        for node in &self.nodes {
            node.mem.resume();
            node.mem.lose_replies(0);
            node.mem.delay_replies(Duration::ZERO);
        }
        let live = self.live().len();
        let until = Instant::now() + self.ttl * 3;
        while self.cluster.session_count() > live && Instant::now() < until {
            sleep(ms(20)).await;
        }
    }

    /// Waits for the workers; one that panicked or does not end is a harness failure.
    async fn join(&self, workers: Vec<JoinHandle<()>>) -> Result<(), String> {
        let until = Instant::now() + self.ttl * 4 + ms(3000);
        let mut problems = Vec::new();
        for worker in workers {
            let abort = worker.abort_handle();
            match tokio::time::timeout_at(until, worker).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => problems.push(format!("a worker failed: {e}")),
                Err(_) => {
                    abort.abort();
                    problems.push("a worker was still running long after the deadline".to_owned());
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} (nemesis: {})",
                problems.join("; "),
                self.nemesis_log()
            ))
        }
    }
}

/// The nemesis's mix.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Profile {
    /// Every fault.
    Full,
    /// Only what takes a grant away from a holder: session expiries and operator deletes.
    HolderLoss,
    /// Operator deletes of holders' and waiters' entries, often (and a session expiry
    /// now and then): the faults that reach the contender queue's own removal rules.
    EntryDeletes,
}

/// An operator's action on the store; returns what it did.
type Operator = Box<dyn Fn(&World, &mut StdRng) -> Option<String> + Send + Sync>;

struct Nemesis {
    profile: Profile,
    operator: Operator,
    /// Told the id of the client it crashed, right after the crash.
    on_crash: Box<dyn Fn(usize) + Send + Sync>,
    /// Told the id of each client it faults (any fault: session expired, suspended,
    /// crashed, replies lost or delayed), or `usize::MAX` for an operator's delete
    /// (whose entry it was is not known), right after the fault.
    on_fault: Box<dyn Fn(usize) + Send + Sync>,
}

/// An operator deleting one of the keys under `dir` (a holder's or a waiter's entry).
fn delete_entry_under(dir: String) -> Operator {
    Box::new(move |world, rng| {
        let keys = world.cluster.keys_with_prefix(&dir);
        let key = keys.choose(rng)?;
        let existed = world.cluster.delete_key(key);
        Some(format!(
            "operator deletes {key}{}",
            if existed { "" } else { " (already gone)" }
        ))
    })
}

async fn run_nemesis(world: Arc<World>, mut rng: StdRng, nemesis: Nemesis) {
    let mut crashed_one = false;
    let mut delayed: Vec<(Arc<Node>, Instant)> = Vec::new();
    loop {
        let pause = match nemesis.profile {
            Profile::Full => rng.random_range(15..120),
            Profile::HolderLoss => rng.random_range(10..60),
            Profile::EntryDeletes => rng.random_range(5..30),
        };
        sleep(ms(pause)).await;
        let now = Instant::now();
        delayed.retain(|(node, until)| {
            let over = *until <= now;
            if over {
                node.mem.delay_replies(Duration::ZERO);
            }
            !over
        });
        if now >= world.deadline {
            break;
        }
        let live = world.live();
        let Some(node) = live.choose(&mut rng).cloned() else {
            break;
        };
        let c = node.id;
        let roll = rng.random_range(0..100);
        let what = match (nemesis.profile, roll) {
            (Profile::HolderLoss, 0..50) | (Profile::Full, 0..15) | (Profile::EntryDeletes, 0..10) => {
                let expired = node.mem.expire_session();
                Some(format!(
                    "expire c{c}'s session{}",
                    if expired { "" } else { " (none)" }
                ))
            }
            (Profile::HolderLoss | Profile::EntryDeletes, _) => (nemesis.operator)(&world, &mut rng),
            (Profile::Full, 15..30) => {
                let d = ms(rng.random_range(20..150));
                node.mem.suspend(d);
                Some(format!("suspend c{c} for {d:?}"))
            }
            (Profile::Full, 30..35) => {
                let d = world.ttl + ms(rng.random_range(50..250));
                node.mem.suspend(d);
                Some(format!("suspend c{c} for {d:?}, past its TTL"))
            }
            // A silent link past the TTL: the client's requests wait, time out with their
            // outcome unknown, and its writes land when the link is back (as a real
            // server applies what it received before a partition once it heals).
            (Profile::Full, 35..38) => {
                let d = world.ttl + ms(rng.random_range(50..250));
                node.mem.blackhole(d);
                Some(format!(
                    "blackhole c{c} for {d:?}, past its TTL (its writes land late)"
                ))
            }
            (Profile::Full, 38..42) if !crashed_one && live.len() >= 3 => {
                crashed_one = true;
                node.crashed.store(true, Ordering::SeqCst);
                node.mem.crash();
                (nemesis.on_crash)(c);
                Some(format!("crash c{c}"))
            }
            (Profile::Full, 42..58) => {
                let n = rng.random_range(1..=3);
                node.mem.lose_replies(n);
                Some(format!("lose c{c}'s next {n} write replies"))
            }
            (Profile::Full, 58..70) => {
                let d = ms(rng.random_range(1..15));
                let until = now + ms(rng.random_range(50..300));
                node.mem.delay_replies(d);
                delayed.push((node.clone(), until));
                Some(format!("delay c{c}'s replies by {d:?} for a while"))
            }
            (Profile::Full, 70..90) => (nemesis.operator)(&world, &mut rng),
            (Profile::Full, _) => {
                world.cluster.compact();
                Some("compact".to_owned())
            }
        };
        if let Some(what) = what {
            if what.starts_with("compact") {
            } else if what.contains(&format!("c{c}")) {
                (nemesis.on_fault)(c);
            } else {
                (nemesis.on_fault)(usize::MAX);
            }
            world.note(what);
        }
    }
    for (node, _) in delayed {
        node.mem.delay_replies(Duration::ZERO);
    }
}

/// A compact account of a linearizability violation (the end of the longest prefix, the
/// operation that could not be placed, and the candidates).
fn describe<M: Debug, I: Debug, O: Debug>(v: &Violation<M>, history: &[Op<I, O>]) -> String {
    let show = |i: usize| match history.get(i) {
        Some(op) => format!(
            "#{i} p{} [{}..{}] {:?} -> {:?}",
            op.process,
            op.invoke,
            op.complete.map_or_else(|| "?".to_owned(), |c| c.to_string()),
            op.input,
            op.outcome
        ),
        None => format!("#{i}"),
    };
    let mut out = format!("longest linearizable prefix: {} ops, ending", v.linearized.len());
    for &i in v.linearized.iter().rev().take(6).rev() {
        out.push_str(&format!("\n      {}", show(i)));
    }
    out.push_str(&format!("\n    state after it: {:?}", v.state));
    if let Some(b) = v.blocked {
        out.push_str(&format!("\n    cannot place before it completes: {}", show(b)));
    }
    out.push_str("\n    candidates:");
    for &i in v.candidates.iter().take(8) {
        out.push_str(&format!("\n      {}", show(i)));
    }
    out
}

/// Mutant switches are process-wide: this file's tests run one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process of worker `w` of client `c` (the client is `process / 100`).
fn pid(client: usize, w: usize) -> u64 {
    (client * 100 + w) as u64
}

fn client_of(process: u64) -> u64 {
    process / 100
}
