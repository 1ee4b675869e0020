//! The runner: turns the case list into libtest-mimic trials, with a fresh namespace and
//! a deadline per case, capabilities and faults deciding what is ignored, and
//! `COORD_TEST_REQUIRE` turning an unconfigured backend into failures.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coord_core::{Capabilities, Client};
use libtest_mimic::{Arguments, Failed, Trial};

use crate::factory::{Factory, Faults};

/// A case's result: `Err` explains the broken guarantee.
pub type CaseResult = anyhow::Result<()>;

/// A boxed case future.
pub type CaseFuture = Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// What a case needs beyond the common contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Faults the factory must inject.
    pub faults: Faults,
    /// Every config/registry watch event delivered (no coalescing).
    pub every_watch_event: bool,
    /// `observe` reports every leader.
    pub every_leader_change: bool,
    /// The case disturbs the whole cluster (e.g. compacts etcd's history, which every
    /// namespace shares): it runs alone, never overlapping another case.
    pub exclusive: bool,
    /// Server settings beyond the defaults the case depends on.
    pub settings: ServerSettings,
    /// How long the case may take before it counts as a liveness bug:
    /// [`CASE_DEADLINE`], unless the case needs several observations that each take a
    /// bounded while (then its bound, documented at the case).
    pub deadline: Duration,
}

/// Server settings some cases depend on, which servers do not have by default. Against
/// a server without one, such a case is reported *ignored*, and its line names the
/// setting (`[zk, needs …]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerSettings {
    /// ZooKeeper sweeps empty container nodes within a second
    /// (`-Dznode.container.checkIntervalMs=100`; its default is a minute), so a case
    /// can check that nothing is left behind.
    pub fast_container_sweep: bool,
}

impl ServerSettings {
    /// Every setting: what coord's scripts start servers with.
    pub const ALL: ServerSettings = ServerSettings {
        fast_container_sweep: true,
    };

    /// What `have` lacks of these, each as the setting to make.
    pub fn missing(&self, have: ServerSettings) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.fast_container_sweep && !have.fast_container_sweep {
            out.push("-Dznode.container.checkIntervalMs=100");
        }
        out
    }
}

impl Default for Needs {
    /// [`Needs::NONE`]: no faults, no capabilities, and [`CASE_DEADLINE`].
    fn default() -> Self {
        Needs::NONE
    }
}

impl Needs {
    /// Nothing beyond the contract.
    pub const NONE: Needs = Needs {
        faults: Faults {
            kill_session: false,
            crash: false,
            suspend: false,
            watch_gap: false,
            blackhole: false,
            delay: false,
            operator: false,
            links: false,
            server_pause: false,
            server_restart: false,
            member_faults: false,
            reply_loss: false,
        },
        every_watch_event: false,
        every_leader_change: false,
        exclusive: false,
        settings: ServerSettings {
            fast_container_sweep: false,
        },
        deadline: CASE_DEADLINE,
    };

    /// What `faults` and `caps` lack of these needs, as words; empty when satisfied.
    pub fn missing(&self, faults: Faults, caps: Capabilities) -> Vec<&'static str> {
        let mut out = Vec::new();
        let n = &self.faults;
        let pairs = [
            (n.kill_session && !faults.kill_session, "fault kill_session"),
            (n.crash && !faults.crash, "fault crash"),
            (n.suspend && !faults.suspend, "fault suspend"),
            (n.watch_gap && !faults.watch_gap, "fault watch_gap"),
            (n.blackhole && !faults.blackhole, "fault blackhole"),
            (n.delay && !faults.delay, "fault delay"),
            (n.operator && !faults.operator, "fault operator"),
            (n.server_pause && !faults.server_pause, "fault server_pause"),
            (n.server_restart && !faults.server_restart, "fault server_restart"),
            (n.links && !faults.links, "fault links"),
            (n.member_faults && !faults.member_faults, "fault member_faults"),
            (n.reply_loss && !faults.reply_loss, "fault reply_loss"),
            (
                self.every_watch_event && !caps.every_watch_event,
                "capability every_watch_event",
            ),
            (
                self.every_leader_change && !caps.every_leader_change,
                "capability every_leader_change",
            ),
        ];
        for (lacking, what) in pairs {
            if lacking {
                out.push(what);
            }
        }
        out
    }
}

/// One conformance case.
pub struct Case {
    /// `group::name`.
    pub name: &'static str,
    /// Requirements.
    pub needs: Needs,
    /// The case body.
    pub run: fn(Ctx) -> CaseFuture,
}

/// What a case gets: the factory and its own fresh namespace.
#[derive(Clone)]
pub struct Ctx {
    factory: Arc<dyn Factory>,
    namespace: String,
    clients: Arc<Mutex<Vec<Client>>>,
}

impl Ctx {
    /// A context for one case in `namespace`.
    pub fn new(factory: Arc<dyn Factory>, namespace: String) -> Self {
        Ctx {
            factory,
            namespace,
            clients: Arc::default(),
        }
    }

    /// The factory.
    pub fn factory(&self) -> &dyn Factory {
        &*self.factory
    }

    /// This case's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The factory's session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.factory.session_timeout()
    }

    /// How long to wait for something driven by session expiry: twice the timeout plus
    /// slack for a loaded machine; on a cluster whose members are being killed, the
    /// liveness bound there (3 session timeouts + 10 s), since a new session waits for
    /// the cluster to elect a leader.
    pub fn expiry_wait(&self) -> Duration {
        if self.factory.faults().member_faults {
            self.session_timeout() * 3 + Duration::from_secs(10)
        } else {
            self.session_timeout() * 2 + Duration::from_secs(5)
        }
    }

    /// Opens a new independent client in this case's namespace.
    ///
    /// # Errors
    ///
    /// When the backend cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// If dropped, a client may have been opened and not tracked; its session ends by
    /// timeout.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let c = self
            .factory
            .open(&self.namespace)
            .await
            .map_err(|e| anyhow::anyhow!("opening a {} client: {e}", self.factory.name()))?;
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c.clone());
        Ok(c)
    }

    /// Opens `n` clients.
    ///
    /// # Errors
    ///
    /// As [`Ctx::client`].
    ///
    /// # Cancel safety
    ///
    /// As [`Ctx::client`].
    pub async fn clients(&self, n: usize) -> anyhow::Result<Vec<Client>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.client().await?);
        }
        Ok(out)
    }

    async fn close_all(&self) {
        let clients = std::mem::take(&mut *self.clients.lock().unwrap_or_else(|p| p.into_inner()));
        for c in clients {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
        }
    }
}

/// The default deadline of a case.
pub const CASE_DEADLINE: Duration = Duration::from_secs(60);

/// Runs the whole suite for one backend as a test binary (`harness = false`) and exits.
///
/// `factory` is `None` when the backend is not configured (its endpoint variable is
/// unset): the cases are then reported ignored — or failed, if `COORD_TEST_REQUIRE`
/// (comma-separated backend names) names this backend. `why_missing` says which
/// variable to set.
pub fn run_main(backend: &str, factory: Option<Arc<dyn Factory>>, why_missing: &str) -> ! {
    run_main_with(backend, factory, why_missing, Vec::new())
}

/// As [`run_main`], plus backend-specific `extra` cases (interoperability with other
/// clients of the same server, say), run and reported the same way.
pub fn run_main_with(
    backend: &str,
    factory: Option<Arc<dyn Factory>>,
    why_missing: &str,
    extra: Vec<Case>,
) -> ! {
    let mut cases = crate::cases::all();
    cases.extend(extra);
    run_groups(vec![Group {
        backend: backend.to_owned(),
        factory,
        why_missing: why_missing.to_owned(),
        cases,
    }])
}

/// Cases to run against one configured backend (or one way of reaching it: the same
/// server over TLS, or with credentials, is a group of its own).
pub struct Group {
    /// The name cases are reported under, and that `COORD_TEST_REQUIRE` names
    /// (`zk`, `etcd-auth`, `zk-tls`…).
    pub backend: String,
    /// `None` when not configured: the cases are ignored, or failed when required.
    pub factory: Option<Arc<dyn Factory>>,
    /// What to set to configure it.
    pub why_missing: String,
    /// The cases.
    pub cases: Vec<Case>,
}

/// Runs several [`Group`]s as one test binary (`harness = false`) and exits.
pub fn run_groups(groups: Vec<Group>) -> ! {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("COORD_TEST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,zookeeper_client=error")),
        )
        .with_test_writer()
        .try_init();
    let args = Arguments::from_args();
    use coord_testkit::env::required as names;
    let mut trials = Vec::new();
    for group in groups {
        let required = Required {
            backend: names(&group.backend),
            server_faults: names("server-faults"),
            member_faults: names("member-faults"),
        };
        for case in group.cases {
            trials.push(trial(
                &group.backend,
                group.factory.clone(),
                case,
                required,
                &group.why_missing,
            ));
        }
    }
    libtest_mimic::run(&args, trials).exit()
}

/// What `COORD_TEST_REQUIRE` turns from ignored into failed.
#[derive(Debug, Clone, Copy)]
struct Required {
    /// The backend names itself: it must be configured.
    backend: bool,
    /// `server-faults`: cases must not be skipped for lack of server-side faults.
    server_faults: bool,
    /// `member-faults`: cases must not be skipped for lack of a cluster whose members
    /// can be faulted one by one.
    member_faults: bool,
}

fn trial(
    backend: &str,
    factory: Option<Arc<dyn Factory>>,
    case: Case,
    required: Required,
    why_missing: &str,
) -> Trial {
    let name = case.name;
    match factory {
        None if required.backend => {
            let msg = format!("COORD_TEST_REQUIRE names {backend}, but it is not configured: {why_missing}");
            Trial::test(name, move || Err(Failed::from(msg))).with_kind(backend)
        }
        None => Trial::test(name, || Ok(()))
            .with_kind(backend)
            .with_ignored_flag(true),
        Some(factory) => {
            let faults = factory.faults();
            let caps = capabilities_of(backend, &*factory);
            let missing = case.needs.missing(faults, caps);
            if required.server_faults && missing.iter().any(|m| m.starts_with("fault server_")) {
                let msg = format!(
                    "COORD_TEST_REQUIRE names server-faults, but the {backend} factory cannot inject {}: \
                     run against a server started by coord's scripts (./scripts/test sets \
                     COORD_TEST_{}_SERVER)",
                    missing.join(", "),
                    backend.to_uppercase()
                );
                return Trial::test(name, move || Err(Failed::from(msg))).with_kind(backend);
            }
            if required.member_faults && missing.contains(&"fault member_faults") {
                let msg = format!(
                    "COORD_TEST_REQUIRE names member-faults, but the {backend} factory has no cluster \
                     of 3 or more members to fault: run against a cluster started by coord's \
                     scripts (./scripts/test does, and sets COORD_TEST_{}_SERVER)",
                    backend.to_uppercase()
                );
                return Trial::test(name, move || Err(Failed::from(msg))).with_kind(backend);
            }
            // A missing server setting is named on the case's line, so that a server's
            // configuration is never mistaken for a coord bug.
            let settings = case.needs.settings.missing(factory.server_settings());
            let kind = match settings.as_slice() {
                [] => backend.to_owned(),
                s => format!("{backend}, needs {}", s.join(" ")),
            };
            let ignored = !missing.is_empty() || !settings.is_empty();
            Trial::test(name, move || run_case(factory, case))
                .with_kind(kind)
                .with_ignored_flag(ignored)
        }
    }
}

/// The backend's capabilities, read from a throw-away client (once per group).
fn capabilities_of(backend: &str, factory: &dyn Factory) -> Capabilities {
    static CACHE: Mutex<Vec<(String, Capabilities)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, c)) = cache.iter().find(|(b, _)| b == backend) {
        return *c;
    }
    let caps = runtime("coord-capabilities")
        .ok()
        .and_then(|rt| {
            rt.block_on(async {
                let c = factory.open(&namespace_for("capabilities")).await.ok()?;
                let caps = c.capabilities();
                let _ = c.close().await;
                Some(caps)
            })
        })
        // Unreachable backend: assume everything so cases run and report the failure.
        .unwrap_or(Capabilities::ALL);
    cache.push((backend.to_owned(), caps));
    caps
}

fn runtime(threads: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(threads)
        .enable_all()
        .build()
}

/// Panics seen on the runtime threads of the cases: (thread name, message). A panic in a
/// spawned task is caught by the runtime and would pass unseen; the hook records it so
/// that the case it happened in fails (coord must not panic on any input).
/// In the failure of a case during which a task panicked; such a case never runs again.
const PANICKED: &str = "task(s) panicked during the case";

/// A panic whose message holds this is one a case causes on purpose (a user's work that
/// panics, to see coord survive it) and is not counted against the case.
pub const EXPECTED_PANIC: &str = "[expected by this case]";

static PANICS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

fn record_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.to_string().contains(EXPECTED_PANIC) {
                return;
            }
            if let Some(name) = std::thread::current().name()
                && name.starts_with("coord-case-")
            {
                PANICS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((name.to_owned(), info.to_string()));
            }
            previous(info);
        }));
    });
}

/// The panics recorded on the threads named `threads`.
fn panics_on(threads: &str) -> Vec<String> {
    PANICS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(name, _)| name == threads)
        .map(|(_, message)| message.clone())
        .collect()
}

/// A fresh namespace for `case`: unique per run and per case.
pub fn namespace_for(case: &str) -> String {
    let tag: u64 = rand::random();
    format!(
        "coordtest-{}-{tag:016x}",
        case.replace("::", "-").replace('_', "-")
    )
}

/// Exclusive cases hold this for writing, every other case for reading.
static CLUSTER_WIDE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn run_case(factory: Arc<dyn Factory>, case: Case) -> Result<(), Failed> {
    // On a cluster whose members are being killed (./scripts/test's cluster phase sets
    // COORD_TEST_CASE_ATTEMPTS=2), an operation can fail because the member it went to
    // died: a case that failed only with such an error (unavailable, no answer, outcome
    // unknown, session lost) runs once more in a fresh namespace, and its first failure is printed.
    // A failed check of the contract itself is never run again.
    let attempts: usize = std::env::var("COORD_TEST_CASE_ATTEMPTS")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut attempt = 1;
    loop {
        match run_once(factory.clone(), &case, attempt) {
            Err(e) if attempt < attempts && member_failure(&e) && !e.contains(PANICKED) => {
                eprintln!(
                    "{} (attempt {attempt}) failed on a member fault, running it again: {e}",
                    case.name
                );
                attempt += 1;
            }
            other => return other.map_err(Failed::from),
        }
    }
}

/// Whether a case's failure is an operation failing because of the server it went to.
fn member_failure(message: &str) -> bool {
    let m = message.to_lowercase();
    // A session can also end under a member fault: a leader election that outlasts the
    // client's give-up point (7/10 of the session timeout on ZooKeeper, the TTL less a
    // tenth on etcd) — also in the cases that check a short outage keeps the session.
    [
        "unavailable",
        "no answer from",
        "outcome unknown",
        "timeout:",
        "session lost",
        "the session was replaced",
        "lost the session",
        // The same errors shown with `{:?}` in a case's message.
        "kind: sessionlost",
        "outcome_unknown: true",
        // A raw zookeeper-client of a case (a foreign writer, an operator) on a member
        // that died: its request's outcome is unknown, or its session expired meanwhile.
        "connection to server has lost",
        "session expired",
    ]
    .iter()
    .any(|w| m.contains(w))
}

fn run_once(factory: Arc<dyn Factory>, case: &Case, attempt: usize) -> Result<(), String> {
    let (_shared, _alone);
    if case.needs.exclusive {
        _alone = CLUSTER_WIDE.write().unwrap_or_else(|p| p.into_inner());
    } else {
        _shared = CLUSTER_WIDE.read().unwrap_or_else(|p| p.into_inner());
    }
    record_panics();
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let threads = format!(
        "coord-case-{}",
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let rt = runtime(&threads).map_err(|e| format!("cannot build a runtime: {e}"))?;
    let mut namespace = namespace_for(case.name);
    if attempt > 1 {
        namespace.push_str(&format!("-{attempt}"));
    }
    let ctx = Ctx::new(factory, namespace);
    let result = rt.block_on(async {
        let outcome = tokio::time::timeout(case.needs.deadline, (case.run)(ctx.clone())).await;
        ctx.close_all().await;
        outcome
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    let panics = panics_on(&threads);
    if let Some(first) = panics.first() {
        return Err(format!(
            "{} {PANICKED} (a bug whatever the case checks); the first: {first}",
            panics.len()
        ));
    }
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!(
            "deadline of {:?} exceeded: a liveness bug (a wait that never ends)",
            case.needs.deadline
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{CASE_DEADLINE, Needs};

    /// A case built from `Needs::default()` gets the default deadline, not zero.
    #[test]
    fn default_needs_are_none() {
        assert_eq!(Needs::default(), Needs::NONE);
        assert_eq!(Needs::default().deadline, CASE_DEADLINE);
    }
}
