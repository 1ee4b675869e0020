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

// ---------------------------------------------------------------------------------------
// Exclusion: lock, election, read/write lock, semaphore

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lock,
    Election,
    RwLock,
    Semaphore,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Election => "election",
            Kind::RwLock => "rw_lock",
            Kind::Semaphore => "semaphore",
        }
    }

    /// The first segment of its queues' directories (the recipes' `QueueSpec::dir`).
    fn dir(self) -> &'static str {
        match self {
            Kind::Lock => "locks",
            Kind::Election => "elections",
            Kind::RwLock => "rwlocks",
            Kind::Semaphore => "semaphores",
        }
    }

    fn admission(self) -> Admission {
        match self {
            Kind::Lock | Kind::Election => Admission::Exclusive,
            Kind::RwLock => Admission::ReadWrite,
            Kind::Semaphore => Admission::Permits(PERMITS as usize),
        }
    }
}

/// A grant: a lock guard, a read or write hold, a semaphore lease, or a leadership.
enum Held {
    Lock(LockGuard),
    Read(coord_core::ReadGuard),
    Write(coord_core::WriteGuard),
    Lease(coord_core::Lease),
    Leader(Leadership),
}

/// Runs `$e` on whichever guard a [`Held`] holds (they share their methods).
macro_rules! on_guard {
    ($held:expr, $g:ident => $e:expr) => {
        match $held {
            Held::Lock($g) => $e,
            Held::Read($g) => $e,
            Held::Write($g) => $e,
            Held::Lease($g) => $e,
            Held::Leader($g) => $e,
        }
    };
}

impl Held {
    fn fence(&self) -> Fence {
        on_guard!(self, g => g.fence())
    }

    fn hold(&self) -> coord_core::HoldWatch {
        on_guard!(self, g => g.hold().clone())
    }

    async fn lost(&self) {
        on_guard!(self, g => g.lost().await)
    }

    /// Resolves when an operator asked this lock holder to let go (locks only).
    async fn revocation_requested(&self) {
        match self {
            Held::Lock(g) => g.revocation_requested().await,
            _ => std::future::pending().await,
        }
    }

    fn token(&self) -> u64 {
        on_guard!(self, g => g.token().get())
    }

    async fn release(self) -> coord_core::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Lease(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

async fn acquire(
    client: &Client,
    kind: Kind,
    mode: Mode,
    holder: &str,
    wait: bool,
) -> coord_core::Result<Option<Held>> {
    fn some<G>(g: coord_core::Result<G>, held: fn(G) -> Held) -> coord_core::Result<Option<Held>> {
        g.map(|g| Some(held(g)))
    }
    fn maybe<G>(g: coord_core::Result<Option<G>>, held: fn(G) -> Held) -> coord_core::Result<Option<Held>> {
        g.map(|g| g.map(held))
    }
    match (kind, mode, wait) {
        (Kind::Lock, _, true) => some(client.lock(RES).await, Held::Lock),
        (Kind::Lock, _, false) => maybe(client.try_lock(RES).await, Held::Lock),
        (Kind::Election, _, _) => some(
            client.campaign(RES, holder.as_bytes().to_vec()).await,
            Held::Leader,
        ),
        (Kind::RwLock, Mode::Shared, true) => some(client.rw_lock(RES)?.read().await, Held::Read),
        (Kind::RwLock, Mode::Shared, false) => maybe(client.rw_lock(RES)?.try_read().await, Held::Read),
        (Kind::RwLock, Mode::Exclusive, true) => some(client.rw_lock(RES)?.write().await, Held::Write),
        (Kind::RwLock, Mode::Exclusive, false) => maybe(client.rw_lock(RES)?.try_write().await, Held::Write),
        (Kind::Semaphore, _, true) => some(client.semaphore(RES, PERMITS)?.acquire().await, Held::Lease),
        (Kind::Semaphore, _, false) => {
            maybe(client.semaphore(RES, PERMITS)?.try_acquire().await, Held::Lease)
        }
    }
}

/// What the workers of one exclusion history share.
#[derive(Default)]
struct ExclShared {
    next_seq: AtomicU64,
    ops: AtomicU64,
    unknown: AtomicU64,
    grants: AtomicU64,
    /// Log writes refused because the grant was gone.
    fenced: AtomicU64,
    /// Log writes the store acknowledged.
    acked: Mutex<BTreeSet<u64>>,
    /// Log writes the store refused (nothing written).
    refused: Mutex<BTreeSet<u64>>,
    /// The holders' tokens `revoke_lock` reported asking (the lock family's operator).
    revoked: Mutex<BTreeSet<u64>>,
    /// `revoke_lock` calls whose outcome is unknown (an error or no answer in time).
    revokes_unknown: AtomicU64,
    /// The tokens of holders that saw a revocation request.
    revocations_seen: Mutex<Vec<u64>>,
    /// The operator's `revoke_lock` calls, awaited before the checks.
    revokes: Mutex<Vec<JoinHandle<()>>>,
    /// What each handle said: from its grant to its first state other than `Held` (or
    /// its release, or its client's crash), on `clock` (µs since `started`).
    beliefs: Mutex<Vec<(u64, coord_check::beliefs::Belief)>>,
    started: Mutex<Option<Instant>>,
    /// When each client crashed (µs): its handles believe nothing after that.
    crashed_at: Mutex<BTreeMap<u64, u64>>,
    /// The entries the operator deleted: their token (create revision) and when.
    operator_deleted: Mutex<BTreeMap<u64, u64>>,

    /// Handles that said `Lost` while their session looked intact: (client, holder,
    /// token, the grant's session generation, when).
    lost_in_session: Mutex<Vec<LostInSession>>,
    /// Each client's session changes: (when, generation, still alive).
    sessions: Mutex<BTreeMap<u64, Vec<SessionChange>>>,
}

impl ExclShared {
    /// Microseconds on the history's one clock.
    fn clock(&self) -> u64 {
        let mut started = lock(&self.started);
        started.get_or_insert_with(Instant::now).elapsed().as_micros() as u64
    }
}

/// For the entry created at revision `token` in a queue directory's `writes` (revision,
/// key, value or `None` for a delete): its deletion's revision and the last deletion of
/// an entry created before it, when its own came first — a grant for it then came from
/// a wake-up after the entry was gone. `None` when it was not deleted, or an entry ahead
/// of it never went.
fn woken_after_own_delete(writes: &[(u64, String, Option<Vec<u8>>)], token: u64) -> Option<(u64, u64)> {
    // Each incarnation: created at, deleted at.
    let mut live: BTreeMap<&str, usize> = BTreeMap::new();
    let mut incarnations: Vec<(u64, Option<u64>)> = Vec::new();
    for (revision, key, value) in writes {
        match value {
            Some(_) => {
                if !live.contains_key(key.as_str()) {
                    live.insert(key, incarnations.len());
                    incarnations.push((*revision, None));
                }
            }
            None => {
                if let Some(i) = live.remove(key.as_str()) {
                    incarnations[i].1 = Some(*revision);
                }
            }
        }
    }
    let own_gone = incarnations.iter().find(|(created, _)| *created == token)?.1?;
    let mut ahead_gone = 0;
    for (created, gone) in &incarnations {
        if *created < token {
            ahead_gone = ahead_gone.max((*gone)?);
        }
    }
    (own_gone < ahead_gone).then_some((own_gone, ahead_gone))
}

impl ExclRun {
    /// Whether the log, the store or the handles' beliefs broke exclusion.
    fn violated(&self) -> bool {
        !self.violations.is_empty() || !self.log_violations.is_empty() || !self.belief_violations.is_empty()
    }
}

/// A handle that said `Lost` with its session intact: (client, holder, token, the
/// grant's session generation, when).
type LostInSession = (u64, u64, u64, u64, u64);

/// A client's session change: (when, generation, still alive).
type SessionChange = (u64, u64, bool);

/// One exclusion history's result.
struct ExclRun {
    ops: u64,
    unknown: u64,
    grants: u64,
    fenced: u64,
    entries: usize,
    /// What `sections::check` reported.
    violations: Vec<String>,
    /// Acknowledged writes missing from the log, refused ones in it; entries left behind
    /// once every client let go; revocations seen by a holder nobody asked.
    log_violations: Vec<String>,
    /// Handles' `Held` intervals judged, and what the belief check found.
    beliefs: usize,
    belief_violations: Vec<String>,
    /// Holders asked to let go by `revoke_lock`, and holders that saw it.
    revoked: usize,
    revocations_seen: usize,
    nemesis: String,
}

async fn excl_worker(
    world: Arc<World>,
    node: Arc<Node>,
    w: usize,
    kind: Kind,
    fenced: bool,
    mut rng: StdRng,
    shared: Arc<ExclShared>,
) {
    let holder = format!("c{}w{w}", node.id);
    while world.running(&node) {
        let mode = if kind == Kind::RwLock && rng.random_bool(0.6) {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let wait = kind == Kind::Election || rng.random_bool(0.7);
        let limit = if rng.random_bool(0.3) {
            ms(rng.random_range(0..4))
        } else {
            ms(rng.random_range(20..400))
        };
        shared.ops.fetch_add(1, Ordering::Relaxed);
        let held = match timeout(limit, acquire(&node.client, kind, mode, &holder, wait)).await {
            Ok(Ok(Some(held))) => held,
            // Busy, failed (session lost, suspended...) or dropped at a random point.
            _ => {
                sleep(ms(rng.random_range(0..8))).await;
                continue;
            }
        };
        shared.grants.fetch_add(1, Ordering::Relaxed);
        let token = held.token();
        let tag = if mode == Mode::Shared { 'S' } else { 'X' };
        // What this handle says from now on, recorded as unfenced work would trust it
        // (read/write locks' readers admit many: only the other families are judged).
        let belief = (kind != Kind::RwLock).then(|| {
            let from = shared.clock();
            let index = {
                let mut beliefs = lock(&shared.beliefs);
                beliefs.push((
                    node.id as u64,
                    coord_check::beliefs::Belief {
                        name: RES.to_owned(),
                        holder: (node.id * 100 + w) as u64,
                        token,
                        admits: if kind == Kind::Semaphore {
                            PERMITS as usize
                        } else {
                            1
                        },
                        from,
                        until: None,
                    },
                ));
                beliefs.len() - 1
            };
            let ended = Arc::new(Mutex::new(None::<u64>));
            let generation = node.client.session().borrow().generation;
            let watcher = {
                let (mut hold, ended, shared) = (held.hold(), ended.clone(), shared.clone());
                let (session, client, holder) =
                    (node.client.session(), node.id as u64, (node.id * 100 + w) as u64);
                tokio::spawn(async move {
                    let mut now = hold.state();
                    // A grant already lost when returned (its session ended as it was
                    // granted) never said `Held`: not judged as a spurious loss.
                    let held_once = now == coord_core::HoldState::Held;
                    while now == coord_core::HoldState::Held {
                        now = hold.changed().await;
                    }
                    let at = shared.clock();
                    lock(&ended).get_or_insert(at);
                    // Lost with its session intact: its entry went (an operator's delete,
                    // or coord's own removal of another contender — a bug).
                    let status = *session.borrow();
                    if held_once
                        && now == coord_core::HoldState::Lost
                        && status.generation == generation
                        && matches!(
                            status.state,
                            coord_core::SessionState::Connected | coord_core::SessionState::Suspended
                        )
                    {
                        lock(&shared.lost_in_session).push((client, holder, token, generation, at));
                    }
                })
            };
            (index, ended, watcher)
        });
        // Half the holders watch for their loss between writes, as users do (which also
        // lets the client's next contender in once an operator deleted the entry).
        let watching = rng.random_bool(0.5);
        let mut revoked = false;
        for _ in 0..rng.random_range(2..=4) {
            if node.crashed() || revoked {
                break;
            }
            // Taken after the grant and before the write: accepted writes of successive
            // holders get increasing numbers, so the log's key order is the store's.
            let seq = shared.next_seq.fetch_add(1, Ordering::SeqCst);
            let txn = if fenced {
                Txn::new().fenced_by(held.fence())
            } else {
                Txn::new()
            };
            let txn = txn.put(format!("log/{seq:020}"), format!("{holder} {token} {tag}"));
            let limit = if rng.random_bool(0.15) {
                ms(rng.random_range(0..3))
            } else {
                ms(300)
            };
            shared.ops.fetch_add(1, Ordering::Relaxed);
            match timeout(limit, node.client.commit(txn)).await {
                Ok(Ok(_)) => {
                    lock(&shared.acked).insert(seq);
                }
                Ok(Err(e)) => match write_failure::<()>(&e) {
                    Outcome::Unknown => {
                        shared.unknown.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        lock(&shared.refused).insert(seq);
                        if e.kind() == ErrorKind::Fenced {
                            shared.fenced.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                },
                Err(_) => {
                    shared.unknown.fetch_add(1, Ordering::Relaxed);
                }
            }
            let pause = sleep(ms(rng.random_range(1..15)));
            if watching {
                tokio::select! {
                    _ = pause => {}
                    _ = held.lost() => {
                        // Lost: one more write, as a holder that has not looked yet would
                        // (the fence must refuse it), then release.
                        sleep(ms(rng.random_range(0..5))).await;
                    }
                    _ = held.revocation_requested() => {
                        // Asked to let go: a cooperating holder releases.
                        lock(&shared.revocations_seen).push(token);
                        revoked = true;
                    }
                }
            } else {
                pause.await;
            }
        }
        if let Some((index, ended, watcher)) = belief {
            // The handle stops being trusted as its release (or drop) begins.
            let released = shared.clock();
            let until = lock(&ended).map_or(released, |e| e.min(released));
            lock(&shared.beliefs)[index].1.until = Some(until);
            watcher.abort();
        }
        if revoked || rng.random_bool(0.75) {
            let limit = if rng.random_bool(0.3) {
                ms(rng.random_range(0..3))
            } else {
                ms(500)
            };
            let _ = timeout(limit, held.release()).await;
        } else {
            drop(held);
        }
        sleep(ms(rng.random_range(0..10))).await;
    }
}

fn parse_entry(key: &str, value: &[u8]) -> Result<(u64, LogEntry), String> {
    let bad = || format!("log key {key:?} holds {:?}", text(value));
    let seq = key
        .strip_prefix("log/")
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let value = text(value);
    let parts: Vec<&str> = value.split(' ').collect();
    let [holder, token, tag] = parts[..] else {
        return Err(bad());
    };
    let token = token.parse().map_err(|_| bad())?;
    let mode = match tag {
        "X" => Mode::Exclusive,
        "S" => Mode::Shared,
        _ => return Err(bad()),
    };
    Ok((seq, LogEntry::new(holder, token, mode)))
}

/// The log as the store holds it, in key order, read by a fresh client.
async fn read_log(world: &World) -> Result<Vec<(u64, LogEntry)>, String> {
    let reader = connect(&world.cluster, world.ttl)?;
    let entries = reader
        .list("log")
        .await
        .map_err(|e| format!("reading the log: {e}"))?;
    let _ = reader.close().await;
    entries.iter().map(|e| parse_entry(&e.key, &e.value)).collect()
}

async fn exclusion_history(seed: u64, kind: Kind, fenced: bool) -> Result<ExclRun, String> {
    let profile = if fenced {
        Profile::Full
    } else {
        Profile::HolderLoss
    };
    exclusion_history_under(seed, kind, fenced, profile).await
}

async fn exclusion_history_under(
    seed: u64,
    kind: Kind,
    fenced: bool,
    profile: Profile,
) -> Result<ExclRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let shared = Arc::new(ExclShared::default());
    // Every write, for judging grants against the store's own order.
    world.cluster.record_writes();
    // Every client's session changes, on the history's clock.
    for node in &world.nodes {
        let (mut session, shared, client) = (node.client.session(), shared.clone(), node.id as u64);
        tokio::spawn(async move {
            loop {
                let status = *session.borrow_and_update();
                let alive = matches!(
                    status.state,
                    coord_core::SessionState::Connected | coord_core::SessionState::Suspended
                );
                let at = shared.clock();
                lock(&shared.sessions)
                    .entry(client)
                    .or_default()
                    .push((at, status.generation, alive));
                if session.changed().await.is_err() {
                    return;
                }
            }
        });
    }
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            workers.push(tokio::spawn(excl_worker(
                world.clone(),
                node.clone(),
                w,
                kind,
                fenced,
                StdRng::from_rng(&mut rng),
                shared.clone(),
            )));
        }
    }
    let dir = format!("{NS}/{}/{RES}/", kind.dir());
    // The operator deletes one of the entries (a holder's or a waiter's), noting its
    // token and when.
    let delete: Operator = {
        let (dir, shared) = (dir.clone(), shared.clone());
        Box::new(move |world, rng| {
            let keys = world.cluster.keys_with_prefix(&dir);
            let key = keys.choose(rng)?;
            let token = world.cluster.with(|s| {
                let token = s.get(key).map(|d| d.create_rev);
                s.delete(key);
                token
            });
            if let Some(token) = token {
                let at = shared.clock();
                lock(&shared.operator_deleted).insert(token, at);
            }
            Some(format!(
                "operator deletes {key}{}",
                if token.is_some() { "" } else { " (already gone)" }
            ))
        })
    };
    let operator: Operator = if kind == Kind::Lock {
        // The lock's operator also asks its holder to let go, through a client of its own
        // whose replies travel slowly: the holder may release between the request's read
        // and its write.
        let revoker = connect(&world.cluster, world.ttl)?;
        if let Some(mem) = revoker.backend_as::<MemClient>() {
            mem.delay_replies(ms(rng.random_range(5..25)));
        }
        let shared = shared.clone();
        Box::new(move |world, rng| {
            if rng.random_bool(0.5) {
                return delete(world, rng);
            }
            let (revoker, shared2) = (revoker.clone(), shared.clone());
            let call = tokio::spawn(async move {
                match timeout(ms(2000), revoker.revoke_lock(RES)).await {
                    Ok(Ok(Some(token))) => {
                        lock(&shared2.revoked).insert(token.get());
                    }
                    Ok(Ok(None)) => {}
                    _ => {
                        shared2.revokes_unknown.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            lock(&shared.revokes).push(call);
            Some("operator revokes the lock".to_owned())
        })
    } else {
        delete
    };
    let nemesis = Nemesis {
        profile,
        operator,
        on_crash: {
            let shared = shared.clone();
            Box::new(move |c| {
                let at = shared.clock();
                lock(&shared.crashed_at).insert(c as u64, at);
            })
        },
        on_fault: Box::new(|_| {}),
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    world.settle().await;
    world.join(workers).await?;
    // The beliefs: a crashed client's handles believe nothing after the crash; the
    // bound is the clients' loss margin (a tenth of the TTL).
    let beliefs: Vec<coord_check::beliefs::Belief> = {
        let crashed_at = lock(&shared.crashed_at).clone();
        lock(&shared.beliefs)
            .iter()
            .map(|(client, b)| {
                let mut b = b.clone();
                if let Some(&at) = crashed_at.get(client) {
                    b.until = Some(b.until.map_or(at, |u| u.min(at)).max(b.from));
                }
                b
            })
            .collect()
    };
    let margin = world.ttl.as_micros() as u64 / 10;
    let belief_report = coord_check::beliefs::check(&beliefs, margin);
    let mut belief_violations: Vec<String> =
        belief_report.violations.iter().map(ToString::to_string).collect();
    {
        let deleted = lock(&shared.operator_deleted).clone();
        let crashed = lock(&shared.crashed_at).clone();
        let sessions = lock(&shared.sessions).clone();
        let soon = world.ttl.as_micros() as u64 * 2;
        // A grant handed out for an entry that was deleted before the last entry ahead
        // of it went, in the store's own order (revisions, not wall time, so a busy
        // machine that returns a grant late excuses nothing and accuses no one): the
        // waiter was woken after its entry was gone and never confirmed it. Judged for
        // the exclusive families: a semaphore's waiter does not confirm its lease's
        // entry before its grant yet (it learns of the loss through the armed watch
        // within the bound) — a known gap.
        let writes = world.cluster.writes(&format!("{NS}/{}/{RES}/", kind.dir()));
        for b in beliefs.iter().filter(|b| b.admits == 1) {
            if let Some((own_gone, ahead_gone)) = woken_after_own_delete(&writes, b.token) {
                belief_violations.push(format!(
                    "holder {} was granted token {} although its entry was deleted (revision {own_gone}) \
                     before the last entry ahead of it went (revision {ahead_gone}){}",
                    b.holder,
                    b.token,
                    if deleted.contains_key(&b.token) {
                        ", by the operator"
                    } else {
                        ""
                    }
                ));
            }
        }
        for (client, holder, entry, generation, at) in lock(&shared.lost_in_session).iter() {
            // The session ended soon after (an expiry whose entry deletion the watch saw
            // first), or changed shortly before (the grant may belong to a session the
            // recorder had not seen yet): not judged.
            let session_ended = sessions.get(client).is_some_and(|changes| {
                changes.iter().skip(1).any(|&(when, g, alive)| {
                    when + soon >= *at && when <= at + soon && (g != *generation || !alive)
                })
            });
            if !deleted.contains_key(entry) && !crashed.contains_key(client) && !session_ended {
                let near: Vec<(u64, u64)> = deleted
                    .iter()
                    .filter(|&(_, &t)| t + 20_000 >= *at && t <= at + 20_000)
                    .map(|(&k, &t)| (k, t))
                    .collect();
                belief_violations.push(format!(
                    "holder {holder}'s grant (token {entry}) said Lost at {at} with its session intact, and no \
                     operator deleted its entry: something of coord's removed it (operator deletes near then: \
                     {near:?}; session changes: {:?})",
                    sessions.get(client)
                ));
            }
        }
    }
    let revokes = std::mem::take(&mut *lock(&shared.revokes));
    for call in revokes {
        call.await
            .map_err(|e| format!("a revoke_lock call failed: {e}"))?;
    }
    let mut log_violations = Vec::new();
    // Nothing is left behind: every grant was released, dropped or lost and every
    // contender dropped, so the entries go (the crashed client's with its session).
    let until = Instant::now() + world.ttl * 4 + ms(2000);
    let left = loop {
        let left = world.cluster.keys_with_prefix(&dir);
        if left.is_empty() || Instant::now() >= until {
            break left;
        }
        sleep(ms(20)).await;
    };
    if !left.is_empty() {
        log_violations.push(format!("entries left behind once every client let go: {left:?}"));
    }
    let revoked = lock(&shared.revoked).clone();
    let seen = lock(&shared.revocations_seen).clone();
    if shared.revokes_unknown.load(Ordering::Relaxed) == 0 {
        for token in seen.iter().filter(|t| !revoked.contains(t)) {
            log_violations.push(format!(
                "the holder with token {token} saw a revocation no revoke_lock asked of it"
            ));
        }
    }

    let log = read_log(&world).await?;
    let entries: Vec<LogEntry> = log.iter().map(|(_, e)| e.clone()).collect();
    let report = sections::check(kind.admission(), &entries);
    let in_log: BTreeSet<u64> = log.iter().map(|(seq, _)| *seq).collect();
    for seq in lock(&shared.acked).iter().filter(|s| !in_log.contains(s)) {
        log_violations.push(format!("acknowledged write log/{seq:020} is not in the log"));
    }
    for seq in lock(&shared.refused).iter().filter(|s| in_log.contains(s)) {
        log_violations.push(format!("refused write log/{seq:020} is in the log"));
    }
    Ok(ExclRun {
        ops: shared.ops.load(Ordering::Relaxed),
        unknown: shared.unknown.load(Ordering::Relaxed),
        grants: shared.grants.load(Ordering::Relaxed),
        fenced: shared.fenced.load(Ordering::Relaxed),
        entries: entries.len(),
        violations: report.violations.iter().map(ToString::to_string).collect(),
        log_violations,
        beliefs: beliefs.len(),
        belief_violations,
        revoked: revoked.len(),
        revocations_seen: seen.len(),
        nemesis: world.nemesis_log(),
    })
}

/// Runs a family's histories, and for the lock the fence-dropped mutant.
fn exclusion_family(kind: Kind, test: &'static str, mutant: bool) {
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut ops, mut unknown, mut violating) = (0, 0, 0);
    let (mut grants, mut fenced, mut entries) = (0, 0, 0);
    let (mut revoked, mut revocations_seen, mut beliefs) = (0, 0, 0);
    let mut mutant_line = String::new();
    block_on(async {
        for (seed, run) in run_all(&plan.seeds, move |seed| exclusion_history(seed, kind, true)).await {
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    failures.push(format!(
                        "seed {seed}: {}: {e}\n  {}",
                        kind.label(),
                        replay_hint(seed, test)
                    ));
                    continue;
                }
            };
            ops += run.ops;
            unknown += run.unknown;
            grants += run.grants;
            fenced += run.fenced;
            entries += run.entries;
            revoked += run.revoked;
            revocations_seen += run.revocations_seen;
            beliefs += run.beliefs;
            if !run.violations.is_empty()
                || !run.log_violations.is_empty()
                || !run.belief_violations.is_empty()
            {
                violating += 1;
                failures.push(format!(
                    "seed {seed}: the {} log or its holders' beliefs break exclusion ({:?}):\n    {}\n  nemesis: {}\n  {}",
                    kind.label(),
                    kind.admission(),
                    run.violations
                        .iter()
                        .chain(&run.log_violations)
                        .chain(&run.belief_violations)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n    "),
                    run.nemesis,
                    replay_hint(seed, test)
                ));
            }
        }
        if mutant {
            let (mut caught, mut tried) = (0, 0);
            let mut seeds = plan.seeds.clone();
            let mut next = seeds.iter().max().map_or(0, |s| s + 1);
            loop {
                for (seed, run) in run_all(&seeds, move |seed| exclusion_history(seed, kind, false)).await {
                    tried += 1;
                    match run {
                        Ok(run) if !run.violations.is_empty() => caught += 1,
                        Ok(_) => {}
                        Err(e) => failures.push(format!(
                            "seed {seed}: {} fence-dropped mutant: {e}\n  {}",
                            kind.label(),
                            replay_hint(seed, test)
                        )),
                    }
                }
                if caught > 0 || plan.replay || tried >= MUTANT_MAX_SEEDS {
                    break;
                }
                seeds = (next..next + parallel() as u64).collect();
                next += parallel() as u64;
            }
            if caught == 0 && !plan.replay {
                failures.push(format!(
                    "the fence-dropped mutant of the {} was never caught in {tried} seeds: the checker or the nemesis is blind",
                    kind.label()
                ));
            }
            mutant_line = format!("; mutant fence-dropped caught in {caught}/{tried}");
        }
    });
    let revocations = if kind == Kind::Lock {
        format!(", {revoked} holders asked to let go ({revocations_seen} saw it)")
    } else {
        String::new()
    };
    println!(
        "histories {}: {} seeds, {ops} ops, {unknown} unknown, {violating} violations; {grants} grants, \
         {entries} log entries, {fenced} writes fenced off, {beliefs} held intervals judged{revocations}{mutant_line}; {:.1}s",
        kind.label(),
        plan.seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn lock_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Lock, "lock_histories", true);
}

/// The lock and the election under a nemesis of frequent entry deletes (holders' and
/// waiters'): the log, and what every handle said, judged as for the other families.
/// The mutants `OwnEntryUnchecked` and `LeaveByKey` are caught under this nemesis.
#[test]
fn entry_delete_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let mut failures = Vec::new();
    let (mut grants, mut beliefs) = (0, 0);
    for kind in [Kind::Lock, Kind::Election] {
        let runs = block_on(run_all(&plan.seeds, move |seed| {
            exclusion_history_under(seed, kind, true, Profile::EntryDeletes)
        }));
        for (seed, run) in runs {
            match run {
                Ok(run) => {
                    grants += run.grants;
                    beliefs += run.beliefs;
                    let all: Vec<String> = run
                        .violations
                        .iter()
                        .chain(&run.log_violations)
                        .chain(&run.belief_violations)
                        .cloned()
                        .collect();
                    if !all.is_empty() {
                        failures.push(format!(
                            "seed {seed}: {}: {}\n  nemesis: {}\n  {}",
                            kind.label(),
                            all.join("\n    "),
                            run.nemesis,
                            replay_hint(seed, "entry_delete_histories")
                        ));
                    }
                }
                Err(e) => failures.push(format!("seed {seed}: {}: {e}", kind.label())),
            }
        }
    }
    println!(
        "histories entry deletes: {} seeds × lock, election; {grants} grants, {beliefs} held intervals judged, {} violations",
        plan.seeds.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn election_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Election, "election_histories", false);
}

#[test]
fn rw_lock_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::RwLock, "rw_lock_histories", false);
}

#[test]
fn semaphore_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Semaphore, "semaphore_histories", false);
}

// ---------------------------------------------------------------------------------------
// Queue

type QueueRecorder = Recorder<QueueOp<String>, QueueRet<String>>;
type QueueOpRecord = Op<QueueOp<String>, QueueRet<String>>;

/// A queue history being recorded, with why each unknown operation is unknown.
#[derive(Clone, Default)]
struct QueueLog {
    rec: QueueRecorder,
    reasons: Arc<Mutex<BTreeMap<usize, &'static str>>>,
}

impl QueueLog {
    fn invoke(&self, process: u64, op: QueueOp<String>) -> Pending {
        self.rec.invoke(process, op)
    }

    /// Completes `t` with what `result` (`Err`: the time limit ran out) says.
    fn finish<T>(
        &self,
        t: Pending,
        result: Result<coord_core::Result<T>, tokio::time::error::Elapsed>,
        ok: impl FnOnce(T) -> Outcome<QueueRet<String>>,
    ) {
        let (outcome, reason) = match result {
            Ok(Ok(value)) => (ok(value), None),
            Ok(Err(e)) => {
                let reason = if e.kind() == ErrorKind::Closed {
                    "closed"
                } else {
                    "returned outcome unknown"
                };
                (write_failure(&e), Some(reason))
            }
            Err(_) => (Outcome::Unknown, Some("dropped")),
        };
        if outcome == Outcome::Unknown
            && let Some(reason) = reason
        {
            lock(&self.reasons).insert(t.index(), reason);
        }
        self.rec.complete(t, outcome);
    }
}

/// The process of worker `w` of client `c` (the client is `process / 100`).
fn pid(client: usize, w: usize) -> u64 {
    (client * 100 + w) as u64
}

fn client_of(process: u64) -> u64 {
    process / 100
}

fn took(taken: Option<Vec<u8>>) -> Outcome<QueueRet<String>> {
    match taken {
        Some(item) => Outcome::Ok(QueueRet::Took(text(&item))),
        // Also the answer while another consumer holds the taker lock: not a sighting of
        // an empty queue, and nothing was taken.
        None => Outcome::Failed,
    }
}

async fn queue_worker(
    world: Arc<World>,
    node: Arc<Node>,
    process: u64,
    producer: bool,
    mut rng: StdRng,
    rec: QueueLog,
) {
    let Ok(queue) = node.client.queue(QUEUE, QUEUE_MAX) else {
        return;
    };
    let mut n = 0;
    while world.running(&node) {
        let limit = if rng.random_bool(0.3) {
            ms(rng.random_range(0..5))
        } else {
            ms(rng.random_range(20..300))
        };
        if producer {
            let value = format!("p{process}n{n}");
            n += 1;
            let t = rec.invoke(process, QueueOp::Push(value.clone()));
            let pushed = timeout(limit, queue.push(value.into_bytes())).await;
            rec.finish(t, pushed, |_| Outcome::Ok(QueueRet::Pushed));
            sleep(ms(rng.random_range(2..20))).await;
        } else {
            let t = rec.invoke(process, QueueOp::Take);
            let taken = if rng.random_bool(0.6) {
                timeout(limit, queue.take()).await.map(|r| r.map(Some))
            } else {
                timeout(limit, queue.try_take()).await
            };
            rec.finish(t, taken, took);
            sleep(ms(rng.random_range(0..10))).await;
        }
    }
}

/// What is left, head first: drained by a fresh client, then (what its `try_take` left
/// while the taker lock was busy) read from the store.
async fn drain(world: &World) -> Result<Vec<String>, String> {
    let drainer = connect(&world.cluster, world.ttl)?;
    let queue = drainer.queue(QUEUE, QUEUE_MAX).map_err(|e| e.to_string())?;
    let mut remaining = Vec::new();
    while let Some(item) = queue.try_take().await.map_err(|e| format!("draining: {e}"))? {
        remaining.push(text(&item));
    }
    // What a take left in a receipt (its client gone before the drainer got the taker
    // lock) is the head of the queue: the next take puts it back there.
    let taken = format!("{QUEUE}/taken/");
    let receipts = drainer
        .list(&format!("{QUEUE}/taken"))
        .await
        .map_err(|e| format!("listing the receipts: {e}"))?;
    for entry in receipts {
        if entry.key.strip_prefix(&taken).is_some_and(|r| r.len() == 41) {
            remaining.push(text(&entry.value));
        }
    }
    let prefix = format!("{QUEUE}/items/");
    let left = drainer
        .list(&format!("{QUEUE}/items"))
        .await
        .map_err(|e| format!("listing the queue: {e}"))?;
    for entry in left {
        let seq = entry.key.strip_prefix(&prefix).unwrap_or_default();
        if seq.len() == 20 && seq.bytes().all(|b| b.is_ascii_digit()) {
            remaining.push(text(&entry.value));
        }
    }
    let _ = drainer.close().await;
    Ok(remaining)
}

/// Marks the `Ok` takes whose item may be delivered again: their client was faulted
/// (crashed, its session expired, suspended, its replies lost or delayed — or an
/// operator deleted some taker lock entry) after the take returned and before the
/// client's next take completed (that take waits for the receipt's deletion: the taker
/// lock is released only after it), so the receipt may have outlived the taker lock and
/// been put back. Nothing else may be delivered twice, and nothing may be lost, crashes
/// included.
fn may_be_redelivered(
    history: &mut QueueHistory<String>,
    crashes: &BTreeMap<u64, u64>,
    faults: &[(u64, u64)],
) -> usize {
    let mut marked = 0;
    for (i, op) in history.ops.iter().enumerate() {
        let (Outcome::Ok(QueueRet::Took(_)), Some(done)) = (&op.outcome, op.complete) else {
            continue;
        };
        let client = client_of(op.process);
        let settled_by = history
            .ops
            .iter()
            .filter(|o| o.input == QueueOp::Take && client_of(o.process) == client)
            .filter_map(|o| o.complete)
            .filter(|&c| c > done)
            .min()
            .unwrap_or(u64::MAX);
        // From the take's invocation: a fault during the take may leave its client
        // believing it holds the taker lock a little after the server gave it up.
        let within = |at: u64| at >= op.invoke && at <= settled_by;
        let faulted = faults
            .iter()
            .any(|&(c, at)| (c == client || c == u64::MAX) && within(at))
            || crashes.get(&client).is_some_and(|&at| within(at));
        if faulted {
            history.crashed.insert(i);
            marked += 1;
        }
    }
    marked
}

/// The values a violation names.
fn named_values(v: &QueueViolation<String>) -> Vec<&String> {
    match v {
        QueueViolation::Malformed { .. } => Vec::new(),
        QueueViolation::TakenTwice { value, .. }
        | QueueViolation::NotPushed { value, .. }
        | QueueViolation::Lost { value, .. }
        | QueueViolation::TakenAndRemaining { value, .. }
        | QueueViolation::RemainingTwice { value }
        | QueueViolation::EmptyWhileHolding { value, .. } => vec![value],
        QueueViolation::Fifo { first, second } => vec![first, second],
    }
}

/// Every operation that pushed or took a value the violations name (as recorded, and as
/// judged after folding and attribution), and where the value remained.
fn queue_context(
    recorded: &[QueueOpRecord],
    judged: &QueueHistory<String>,
    violations: &[QueueViolation<String>],
    reasons: &BTreeMap<usize, &'static str>,
) -> String {
    let values: BTreeSet<&String> = violations.iter().flat_map(named_values).collect();
    let show = |op: &QueueOpRecord| {
        format!(
            "p{} [{}..{}] {:?} -> {:?}",
            op.process,
            op.invoke,
            op.complete.map_or_else(|| "?".to_owned(), |c| c.to_string()),
            op.input,
            op.outcome
        )
    };
    let names = |op: &QueueOpRecord| match (&op.input, &op.outcome) {
        (QueueOp::Push(v), _) | (_, Outcome::Ok(QueueRet::Took(v))) => values.contains(v),
        _ => false,
    };
    let mut out = String::new();
    for (i, (before, after)) in recorded.iter().zip(&judged.ops).enumerate() {
        if names(before) || names(after) {
            out.push_str(&format!("\n    #{i} {}", show(before)));
            if before != after {
                out.push_str(&format!("\n       judged as {}", show(after)));
            }
        }
    }
    for (position, value) in judged.remaining.iter().enumerate() {
        if values.contains(value) {
            out.push_str(&format!("\n    {value:?} remained at position {position}"));
        }
    }
    // A lost value: the takes that may have removed it are the unknown ones invoked after
    // its push (folded or not: one that lost its item leaves the next take to fold into).
    for violation in violations {
        let QueueViolation::Lost { value, push } = violation else {
            continue;
        };
        out.push_str(&format!(
            "\n    the first unknown takes after {value:?} was pushed:"
        ));
        let suspects = recorded.iter().enumerate().filter(|(_, op)| {
            op.input == QueueOp::Take && op.outcome == Outcome::Unknown && op.invoke > recorded[*push].invoke
        });
        for (i, op) in suspects.take(6) {
            let why = reasons.get(&i).copied().unwrap_or("?");
            let folded = if judged.ops[i].outcome == Outcome::Unknown {
                ""
            } else {
                ", folded"
            };
            out.push_str(&format!("\n      #{i} {} ({why}{folded})", show(op)));
        }
    }
    out
}

struct QueueRun {
    ops: usize,
    unknown: usize,
    pushed: usize,
    taken: usize,
    remaining: usize,
    /// Values delivered again after a take whose client was faulted before it settled.
    redelivered: usize,
    attributed: usize,
    violations: Vec<String>,
    /// The operations behind the violations.
    context: String,
    mutant_caught: bool,
    nemesis: String,
}

async fn queue_history(seed: u64) -> Result<QueueRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let rec = QueueLog::default();
    let crashes: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    // When each client was faulted (`u64::MAX`: every client, an operator's delete).
    let faults: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            let producer = match w {
                0 => true,
                1 => false,
                _ => rng.random_bool(0.5),
            };
            workers.push(tokio::spawn(queue_worker(
                world.clone(),
                node.clone(),
                pid(node.id, w),
                producer,
                StdRng::from_rng(&mut rng),
                rec.clone(),
            )));
        }
    }
    let nemesis = Nemesis {
        profile: Profile::Full,
        operator: delete_entry_under(format!("{NS}/queues/{QUEUE}/takers/")),
        on_crash: {
            let (rec, crashes) = (rec.rec.clone(), crashes.clone());
            Box::new(move |c| {
                lock(&crashes).insert(c as u64, rec.now());
            })
        },
        on_fault: {
            let (rec, faults) = (rec.rec.clone(), faults.clone());
            Box::new(move |c| {
                let c = if c == usize::MAX { u64::MAX } else { c as u64 };
                lock(&faults).push((c, rec.now()));
            })
        },
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    // The clients close the way users close them: now, mid-operation (their workers
    // may be inside a take or a push), with no drain first. Whatever a take had removed
    // without returning it must still be found by the fresh client below.
    let closing: Vec<_> = world
        .live()
        .into_iter()
        .map(|node| tokio::spawn(async move { node.client.close().await }))
        .collect();
    world.settle().await;
    for close in closing {
        let _ = close.await;
    }
    world.join(workers).await?;
    let remaining = drain(&world).await?;

    let recorded = rec.rec.history();
    let unknown = recorded
        .iter()
        .filter(|op| op.outcome == Outcome::Unknown)
        .count();
    let mut history = QueueHistory {
        ops: recorded.clone(),
        remaining,
        crashed: BTreeSet::new(),
    };
    let attributed = may_be_redelivered(&mut history, &lock(&crashes), &lock(&faults));
    let report = queue::check(&history);

    // Negative control: one take duplicated — one whose second delivery nothing excuses
    // (its consumer was not faulted before settling it; on a busy machine more takes
    // are, and the first take may be one of them).
    let mut mutant = history.clone();
    if let Some(take) = mutant
        .ops
        .iter()
        .enumerate()
        .find(|(i, op)| matches!(op.outcome, Outcome::Ok(QueueRet::Took(_))) && !history.crashed.contains(i))
        .map(|(_, op)| op.clone())
    {
        let at = mutant.ops.iter().filter_map(|op| op.complete).max().unwrap_or(0) + 1;
        mutant.ops.push(Op {
            process: OPERATOR,
            invoke: at,
            complete: Some(at + 1),
            ..take
        });
    }
    let mutant_caught = !queue::check(&mutant).is_ok();

    Ok(QueueRun {
        ops: history.ops.len(),
        unknown,
        pushed: report.summary.pushes_acknowledged,
        taken: report.summary.takes,
        remaining: report.summary.remaining,
        redelivered: report.summary.redelivered,
        attributed,
        violations: report.violations.iter().map(ToString::to_string).collect(),
        context: if report.is_ok() {
            String::new()
        } else {
            let context = queue_context(&recorded, &history, &report.violations, &lock(&rec.reasons));
            let written = dump(&format!("queue-seed{seed}.txt"), || {
                let mut out = format!("nemesis: {}\n\nrecorded and judged:\n", world.nemesis_log());
                for (i, (before, after)) in recorded.iter().zip(&history.ops).enumerate() {
                    out.push_str(&format!("#{i} {before:?}\n"));
                    if before != after {
                        out.push_str(&format!("   judged as {after:?}\n"));
                    }
                }
                out.push_str(&format!(
                    "\nremaining: {:?}\ncrashes: {:?}\n",
                    history.remaining,
                    lock(&crashes)
                ));
                out
            });
            format!("{context}{written}")
        },
        mutant_caught,
        nemesis: world.nemesis_log(),
    })
}

#[test]
fn queue_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let (mut ops, mut unknown, mut pushed, mut taken, mut remaining) = (0, 0, 0, 0, 0);
    let (mut redelivered, mut attributed, mut violating, mut caught, mut runs) = (0, 0, 0, 0, 0);
    let results = block_on(run_all(&plan.seeds, queue_history));
    for (seed, run) in results {
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                failures.push(format!(
                    "seed {seed}: queue: {e}\n  {}",
                    replay_hint(seed, "queue_histories")
                ));
                continue;
            }
        };
        runs += 1;
        ops += run.ops;
        unknown += run.unknown;
        pushed += run.pushed;
        taken += run.taken;
        remaining += run.remaining;
        redelivered += run.redelivered;
        attributed += run.attributed;
        caught += usize::from(run.mutant_caught);
        if !run.mutant_caught {
            failures.push(format!("seed {seed}: queue: a duplicated take was not rejected"));
        }
        if !run.violations.is_empty() {
            violating += 1;
            failures.push(format!(
                "seed {seed}: the queue's delivery is broken:\n    {}\n  operations:{}\n  nemesis: {}\n  {}",
                run.violations.join("\n    "),
                run.context,
                run.nemesis,
                replay_hint(seed, "queue_histories")
            ));
        }
    }
    println!(
        "histories queue: {} seeds, {ops} ops, {unknown} unknown, {violating} violations; {pushed} pushes \
         acknowledged, {taken} taken, {remaining} remaining, nothing lost; {attributed} takes whose client \
         was faulted before settling, {redelivered} values delivered again; mutant duplicate-take rejected \
         in {caught}/{runs}; {:.1}s",
        plan.seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// Counter and config

type CounterInput = (String, CounterOp);
type CounterRecord = Op<CounterInput, CounterRet>;
type RegisterInput = (String, RegisterOp<String>);
type RegisterRecord = Op<RegisterInput, RegisterRet<String>>;

/// A mem version as the `Register` model's number: mem's versions are revisions.
fn version(v: Version) -> u64 {
    let (revision, minor) = coord_core::raw::version_parts(v);
    assert_eq!(minor, 0, "mem versions are revisions (minor 0), not {v}");
    revision
}

fn op_limit(rng: &mut StdRng) -> Duration {
    if rng.random_bool(0.25) {
        ms(rng.random_range(0..3))
    } else {
        ms(300)
    }
}

async fn counter_op(
    client: &Client,
    process: u64,
    rng: &mut StdRng,
    rec: &Recorder<CounterInput, CounterRet>,
) {
    let key = *COUNTERS.choose(rng).unwrap_or(&COUNTERS[0]);
    let counter = client.counter(key).expect("a valid counter key");
    let op = match rng.random_range(0..100) {
        0..40 => CounterOp::Get,
        40..85 => CounterOp::Add(if rng.random_bool(0.8) {
            rng.random_range(1..=10)
        } else {
            -rng.random_range(1..=5)
        }),
        _ => CounterOp::Set(rng.random_range(0..100)),
    };
    let limit = op_limit(rng);
    let t = rec.invoke(process, (key.to_owned(), op));
    let outcome = match op {
        // A read that failed or was dropped had no effect.
        CounterOp::Get => match timeout(limit, counter.get()).await {
            Ok(Ok(v)) => Outcome::Ok(CounterRet::Value(v)),
            _ => Outcome::Failed,
        },
        CounterOp::Add(delta) => match timeout(limit, counter.add(delta)).await {
            Ok(Ok(v)) => Outcome::Ok(CounterRet::Value(v)),
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        },
        CounterOp::Set(value) => match timeout(limit, counter.set(value)).await {
            Ok(Ok(())) => Outcome::Ok(CounterRet::Done),
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        },
    };
    rec.complete(t, outcome);
}

async fn config_op(
    client: &Client,
    process: u64,
    n: u64,
    rng: &mut StdRng,
    seen: &mut HashMap<&'static str, Option<Version>>,
    rec: &Recorder<RegisterInput, RegisterRet<String>>,
) {
    let key = *KEYS.choose(rng).unwrap_or(&KEYS[0]);
    let value = format!("p{process}n{n}");
    let limit = op_limit(rng);
    let roll = rng.random_range(0..100);
    if roll < 35 {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Get));
        let outcome = match timeout(limit, client.get(key)).await {
            Ok(Ok(Some(v))) => {
                seen.insert(key, Some(v.version));
                Outcome::Ok(RegisterRet::Get(Some((text(&v.value), version(v.version)))))
            }
            Ok(Ok(None)) => {
                seen.insert(key, None);
                Outcome::Ok(RegisterRet::Get(None))
            }
            _ => Outcome::Failed,
        };
        rec.complete(t, outcome);
    } else if roll < 60 {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Put(value.clone())));
        let outcome = match timeout(limit, client.put(key, value)).await {
            Ok(Ok(v)) => {
                seen.insert(key, Some(v));
                Outcome::Ok(RegisterRet::Put(version(v)))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    } else if roll < 90 {
        let expected = match rng.random_range(0..100) {
            0..70 => seen.get(key).copied().flatten(),
            70..85 => None,
            _ => Some(coord_core::raw::version(rng.random_range(1..60), 0)),
        };
        let input = RegisterOp::CompareAndSet {
            expected: expected.map(version),
            value: value.clone(),
        };
        let t = rec.invoke(process, (key.to_owned(), input));
        let outcome = match timeout(limit, client.compare_and_set(key, expected, value)).await {
            Ok(Ok(v)) => {
                seen.insert(key, Some(v));
                Outcome::Ok(RegisterRet::CompareAndSet(Ok(version(v))))
            }
            Ok(Err(e)) if e.kind() == ErrorKind::VersionMismatch => {
                Outcome::Ok(RegisterRet::CompareAndSet(Err(Mismatch)))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    } else {
        let t = rec.invoke(process, (key.to_owned(), RegisterOp::Delete));
        let outcome = match timeout(limit, client.delete(key)).await {
            Ok(Ok(existed)) => {
                seen.insert(key, None);
                Outcome::Ok(RegisterRet::Delete(existed))
            }
            Ok(Err(e)) => write_failure(&e),
            Err(_) => Outcome::Unknown,
        };
        rec.complete(t, outcome);
    }
}

async fn kv_worker(
    world: Arc<World>,
    node: Arc<Node>,
    process: u64,
    mut rng: StdRng,
    counters: Recorder<CounterInput, CounterRet>,
    registers: Recorder<RegisterInput, RegisterRet<String>>,
) {
    let mut seen = HashMap::new();
    let mut n = 0;
    while world.running(&node) {
        if rng.random_bool(0.35) {
            counter_op(&node.client, process, &mut rng, &counters).await;
        } else {
            config_op(&node.client, process, n, &mut rng, &mut seen, &registers).await;
            n += 1;
        }
        sleep(ms(rng.random_range(1..8))).await;
    }
}

/// Linearizability of each key: violations (described) and how many keys were
/// inconclusive.
fn judge<M, I, O>(
    model: &M,
    history: &[Op<(String, I), O>],
    what: &str,
) -> Result<(Vec<String>, usize), String>
where
    M: coord_check::Model<Input = I, Output = O>,
    I: Clone + Debug,
    O: Debug,
{
    let verdicts = Checker::new().check_per_key(model, history, |(k, i)| (k.clone(), i.clone()));
    let mut violations = Vec::new();
    let mut inconclusive = 0;
    for (key, verdict) in &verdicts.verdicts {
        match verdict {
            Verdict::Linearizable { .. } => {}
            Verdict::NotLinearizable(v) => violations.push(format!(
                "{what} {key:?} is not linearizable: {}",
                describe(v, history)
            )),
            Verdict::Inconclusive { steps } => {
                inconclusive += 1;
                eprintln!("{what} {key:?}: inconclusive after {steps} steps");
            }
            Verdict::Malformed { op, reason } => {
                return Err(format!("{what} {key:?}: malformed history at #{op}: {reason}"));
            }
        }
    }
    Ok((violations, inconclusive))
}

/// Whether the history of `key` alone is shown not linearizable.
fn rejects<M, I, O>(model: &M, history: &[Op<(String, I), O>], key: &str) -> bool
where
    M: coord_check::Model<Input = I, Output = O>,
    I: Clone,
    O: Clone,
{
    let ops: Vec<Op<I, O>> = history
        .iter()
        .filter(|op| op.input.0 == key)
        .map(|op| Op {
            process: op.process,
            invoke: op.invoke,
            complete: op.complete,
            input: op.input.1.clone(),
            outcome: op.outcome.clone(),
        })
        .collect();
    Checker::new().check(model, &ops).is_violation()
}

/// Negative control for the counter: a read changed to a value no sequence of these
/// operations reaches. `None` if there is no read to change.
fn counter_mutant(history: &[CounterRecord]) -> Option<bool> {
    let reads: Vec<usize> = (0..history.len())
        .filter(|&i| history[i].input.1 == CounterOp::Get && history[i].is_ok())
        .collect();
    let &i = reads.get(reads.len() / 4)?;
    let mut mutant = history.to_vec();
    if let Outcome::Ok(CounterRet::Value(v)) = &mut mutant[i].outcome {
        *v += 1_000_000_007;
    }
    Some(rejects(&Counter(0), &mutant, &history[i].input.0))
}

/// Negative control for the config: a read made stale — it returns what an earlier read
/// saw, though an acknowledged write completed between that read and it (versions never
/// return, so no linearization explains it). `None` if the history has no such triple.
fn stale_read_mutant(history: &[RegisterRecord]) -> Option<bool> {
    let is_read = |op: &RegisterRecord| op.input.1 == RegisterOp::Get && op.is_ok();
    let is_write = |op: &RegisterRecord| {
        matches!(
            (&op.input.1, &op.outcome),
            (RegisterOp::Put(_), Outcome::Ok(_))
                | (
                    RegisterOp::CompareAndSet { .. },
                    Outcome::Ok(RegisterRet::CompareAndSet(Ok(_)))
                )
        )
    };
    for w in history.iter().filter(|op| is_write(op)) {
        let key = &w.input.0;
        let Some(before) = history.iter().find(|g| {
            &g.input.0 == key && g.precedes(w) && matches!(g.outcome, Outcome::Ok(RegisterRet::Get(Some(_))))
        }) else {
            continue;
        };
        let Some(after) = history
            .iter()
            .position(|g| &g.input.0 == key && is_read(g) && w.precedes(g))
        else {
            continue;
        };
        let mut mutant = history.to_vec();
        mutant[after].outcome = before.outcome.clone();
        return Some(rejects(&Register::new(), &mutant, key));
    }
    None
}

struct KvRun {
    counter_ops: usize,
    counter_unknown: usize,
    config_ops: usize,
    config_unknown: usize,
    counter_violations: Vec<String>,
    config_violations: Vec<String>,
    inconclusive: usize,
    counter_mutant: Option<bool>,
    config_mutant: Option<bool>,
    nemesis: String,
}

async fn kv_history(seed: u64) -> Result<KvRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let counters: Recorder<CounterInput, CounterRet> = Recorder::new();
    let registers: Recorder<RegisterInput, RegisterRet<String>> = Recorder::new();
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            workers.push(tokio::spawn(kv_worker(
                world.clone(),
                node.clone(),
                pid(node.id, w),
                StdRng::from_rng(&mut rng),
                counters.clone(),
                registers.clone(),
            )));
        }
    }
    // The operator deletes a counter (recorded as setting it to 0, what an absent counter
    // reads) or a config key (recorded as a delete).
    let operator: Operator = {
        let (counters, registers) = (counters.clone(), registers.clone());
        Box::new(move |world, rng| {
            let all: Vec<&str> = COUNTERS.iter().chain(&KEYS).copied().collect();
            let key = *all.choose(rng)?;
            let full = format!("{NS}/config/{key}");
            if COUNTERS.contains(&key) {
                let t = counters.invoke(OPERATOR, (key.to_owned(), CounterOp::Set(0)));
                world.cluster.delete_key(&full);
                counters.complete(t, Outcome::Ok(CounterRet::Done));
            } else {
                let t = registers.invoke(OPERATOR, (key.to_owned(), RegisterOp::Delete));
                let existed = world.cluster.delete_key(&full);
                registers.complete(t, Outcome::Ok(RegisterRet::Delete(existed)));
            }
            Some(format!("operator deletes config key {key}"))
        })
    };
    let nemesis = Nemesis {
        profile: Profile::Full,
        operator,
        on_crash: Box::new(|_| {}),
        on_fault: Box::new(|_| {}),
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    world.settle().await;
    world.join(workers).await?;

    let counter_history = counters.history();
    let config_history = registers.history();
    let unknown = |outcomes: &mut dyn Iterator<Item = bool>| outcomes.filter(|&u| u).count();
    let (counter_violations, inconclusive_counters) = judge(&Counter(0), &counter_history, "counter")?;
    let (config_violations, inconclusive_keys) = judge(&Register::new(), &config_history, "config key")?;
    Ok(KvRun {
        counter_ops: counter_history.len(),
        counter_unknown: unknown(&mut counter_history.iter().map(|op| op.outcome == Outcome::Unknown)),
        config_ops: config_history.len(),
        config_unknown: unknown(&mut config_history.iter().map(|op| op.outcome == Outcome::Unknown)),
        counter_violations,
        config_violations,
        inconclusive: inconclusive_counters + inconclusive_keys,
        counter_mutant: counter_mutant(&counter_history),
        config_mutant: stale_read_mutant(&config_history),
        nemesis: world.nemesis_log(),
    })
}

#[test]
fn counter_and_config_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let (mut counter_ops, mut counter_unknown, mut config_ops, mut config_unknown) = (0, 0, 0, 0);
    let (mut counter_violating, mut config_violating, mut inconclusive) = (0, 0, 0);
    let (mut counter_caught, mut counter_mutants, mut config_caught, mut config_mutants) = (0, 0, 0, 0);
    let results = block_on(run_all(&plan.seeds, kv_history));
    for (seed, run) in results {
        let hint = replay_hint(seed, "counter_and_config_histories");
        let run = match run {
            Ok(run) => run,
            Err(e) => {
                failures.push(format!("seed {seed}: counter and config: {e}\n  {hint}"));
                continue;
            }
        };
        counter_ops += run.counter_ops;
        counter_unknown += run.counter_unknown;
        config_ops += run.config_ops;
        config_unknown += run.config_unknown;
        inconclusive += run.inconclusive;
        for (mutant, caught, tried, what) in [
            (
                run.counter_mutant,
                &mut counter_caught,
                &mut counter_mutants,
                "an unreachable counter read",
            ),
            (
                run.config_mutant,
                &mut config_caught,
                &mut config_mutants,
                "a stale config read",
            ),
        ] {
            if let Some(rejected) = mutant {
                *tried += 1;
                if rejected {
                    *caught += 1;
                } else {
                    failures.push(format!("seed {seed}: {what} was not rejected\n  {hint}"));
                }
            }
        }
        counter_violating += usize::from(!run.counter_violations.is_empty());
        config_violating += usize::from(!run.config_violations.is_empty());
        let violations: Vec<String> = run
            .counter_violations
            .into_iter()
            .chain(run.config_violations)
            .collect();
        if !violations.is_empty() {
            failures.push(format!(
                "seed {seed}: {}\n  nemesis: {}\n  {hint}",
                violations.join("\n  "),
                run.nemesis
            ));
        }
    }
    let seeds = plan.seeds.len();
    println!(
        "histories counter: {seeds} seeds, {counter_ops} ops, {counter_unknown} unknown, {counter_violating} \
         violations; mutant unreachable-read rejected in {counter_caught}/{counter_mutants}"
    );
    println!(
        "histories config: {seeds} seeds, {config_ops} ops, {config_unknown} unknown, {config_violating} \
         violations; mutant stale-read rejected in {config_caught}/{config_mutants}"
    );
    println!(
        "histories counter+config: {inconclusive} keys inconclusive; {:.1}s",
        started.elapsed().as_secs_f64()
    );
    if !plan.replay {
        if counter_mutants == 0 {
            failures.push("no history had a counter read to corrupt".to_owned());
        }
        if config_mutants == 0 {
            failures.push("no history had a read, a write and a read in a row to make stale".to_owned());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------
// What the queue histories found, pinned down

/// A take dropped once its remove was applied, whose reply is lost as the session ends,
/// must still hand the item to the client's next take ("a dropped take loses no item";
/// "an item is lost only with a consumer that crashes after `take` returned it"). The
/// queue histories lost items this way (LOST, e.g. seed 127 of 200) until a removal left
/// a receipt that settles it after the taker lock or the session is gone.
#[test]
fn queue_dropped_take_keeps_its_item_through_session_loss() {
    let _one = one_at_a_time();
    block_on(async {
        let cluster = MemCluster::new();
        let ttl = ms(500);
        let a = connect(&cluster, ttl).expect("client a");
        let b = connect(&cluster, ttl).expect("client b");
        let mem_a = a.backend_as::<MemClient>().expect("mem").clone();
        let queue_a = a.queue(QUEUE, 10).expect("queue");
        let items = format!("{NS}/config/{QUEUE}/items/");
        b.queue(QUEUE, 10).expect("queue").push("x").await.expect("push");
        // A's replies travel slowly, so its take can be caught between the cluster applying
        // its remove and the reply arriving.
        mem_a.delay_replies(ms(30));
        let take = tokio::spawn({
            let queue_a = queue_a.clone();
            async move { queue_a.take().await }
        });
        while !cluster.keys_with_prefix(&items).is_empty() {
            sleep(ms(1)).await;
        }
        // The remove is applied and its reply is on its way: A is cut off, its session ends
        // on the server, and the take is dropped.
        mem_a.suspend(ms(200));
        assert!(mem_a.expire_session(), "A's session was alive");
        take.abort();
        mem_a.delay_replies(Duration::ZERO);
        sleep(ttl * 2).await;
        let next = timeout(ms(2000), queue_a.try_take()).await;
        assert!(
            cluster.keys_with_prefix(&items).is_empty(),
            "the item is back in the store"
        );
        assert!(
            matches!(&next, Ok(Ok(Some(item))) if item == b"x"),
            "the item removed for the dropped take is lost: A's next take returned {next:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------
// Negative controls with coord's own mutants (feature `mutants`)

/// Mutant switches are process-wide: this file's tests run one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `history` over seeds (the plan's, then more) with `mutant` switched on, until a
/// run reports a violation; fails if none does within `MUTANT_MAX_SEEDS`.
#[cfg(feature = "mutants")]
fn caught_with<F, Fut>(mutant: coord_core::raw::mutants::Mutant, what: &str, history: F) -> String
where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    use coord_core::raw::mutants;
    let plan = plan();
    mutants::set(mutant, true);
    let (mut caught, mut tried) = (0usize, 0usize);
    block_on(async {
        let mut seeds = plan.seeds.clone();
        let mut next = seeds.iter().max().map_or(0, |s| s + 1);
        loop {
            for (_, violated) in run_all(
                &seeds,
                move |seed| async move { Ok::<_, String>(history(seed).await) },
            )
            .await
            {
                tried += 1;
                caught += usize::from(matches!(violated, Ok(true)));
            }
            if caught > 0 || tried as u64 >= MUTANT_MAX_SEEDS {
                break;
            }
            seeds = (next..next + parallel() as u64).collect();
            next += parallel() as u64;
        }
    });
    mutants::set(mutant, false);
    assert!(
        caught > 0,
        "the {what} mutant ({mutant:?}) was never caught in {tried} seeds"
    );
    let line = format!("mutant {what} ({mutant:?}) caught in {caught}/{tried}");
    println!("histories {line}");
    line
}

#[cfg(feature = "mutants")]
#[test]
fn library_mutants_are_caught() {
    use coord_core::raw::mutants::Mutant;
    let _one = one_at_a_time();
    let exclusion = |kind: Kind| {
        move |seed| async move {
            exclusion_history(seed, kind, true)
                .await
                .map(|r| r.violated())
                .unwrap_or(false)
        }
    };
    caught_with(Mutant::FenceIgnored, "fence ignored, lock", exclusion(Kind::Lock));
    caught_with(
        Mutant::FenceIgnored,
        "fence ignored, semaphore",
        exclusion(Kind::Semaphore),
    );
    let queue = |seed| async move {
        queue_history(seed)
            .await
            .map(|r| !r.violations.is_empty())
            .unwrap_or(false)
    };
    caught_with(Mutant::MarkUnchecked, "mark unchecked", exclusion(Kind::Lock));
    // Caught by what the handles say (the beliefs), under a nemesis of entry deletes.
    let beliefs = |kind: Kind| {
        move |seed| async move {
            exclusion_history_under(seed, kind, true, Profile::EntryDeletes)
                .await
                .map(|r| r.violated())
                .unwrap_or(false)
        }
    };
    caught_with(
        Mutant::OwnEntryUnchecked,
        "own entry unchecked",
        beliefs(Kind::Lock),
    );
    caught_with(Mutant::LeaveByKey, "leave by key", beliefs(Kind::Lock));
    caught_with(Mutant::TakeWithoutReceipt, "take without a receipt", queue);
    caught_with(Mutant::TakeUnchecked, "take unchecked", queue);
}
