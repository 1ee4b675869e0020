//! The `coord` binary, run as a user runs it: against mem, and against the real
//! ZooKeeper and etcd named by `COORD_TEST_ZK` / `COORD_TEST_ETCD` (`host:port,…`).
//! A backend that is not configured is reported ignored — or failed, when
//! `COORD_TEST_REQUIRE` names it.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

type Result<T = ()> = std::result::Result<T, Failed>;

const BIN: &str = env!("CARGO_BIN_EXE_coord");
/// The server-side session timeout the loss cases ask for.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+).into());
        }
    };
}

#[path = "cli/beliefs.rs"]
mod beliefs;
#[path = "cli/commands.rs"]
mod commands;
#[path = "cli/fence.rs"]
mod fence;
#[path = "cli/guard.rs"]
mod guard;
#[path = "cli/recipes.rs"]
mod recipes;
#[path = "cli/servers.rs"]
mod servers;
#[path = "cli/usage.rs"]
mod usage;

use commands::*;
use servers::*;
use usage::*;

#[derive(Clone)]
struct Backend {
    name: &'static str,
    /// `host:port,…` of a real server; empty for mem.
    hosts: String,
}

impl Backend {
    fn real(&self) -> bool {
        self.name != "mem"
    }

    /// A URL in a namespace of its own, with `options` (`k=v&…`) if any.
    fn url(&self, test: &str, options: &str) -> String {
        let ns = coord_testkit::env::unique_namespace(&format!("cli-{}", test.replace('_', "-")));
        let query = if options.is_empty() {
            String::new()
        } else {
            format!("?{options}")
        };
        match self.name {
            "mem" => format!("mem://{ns}{query}"),
            scheme => format!("{scheme}://{}/{ns}{query}", self.hosts),
        }
    }
}

fn coord(url: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("COORD_URL")
        .env_remove("RUST_LOG")
        .arg("--url")
        .arg(url);
    cmd
}

/// Runs to the end (at most `limit`), with standard input closed.
fn output(cmd: &mut Command, limit: Duration) -> Result<Output> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run coord: {e}"))?;
    finish(child, limit)
}

fn finish(mut child: Child, limit: Duration) -> Result<Output> {
    let deadline = Instant::now() + limit;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "coord did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().map_err(|e| e.to_string().into())
}

fn code(status: ExitStatus) -> i32 {
    status.code().unwrap_or(-1)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every line of `bytes` parsed as one JSON object.
fn json_lines(bytes: &[u8]) -> Result<Vec<Value>> {
    text(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("not JSON ({e}): {l}").into()))
        .collect()
}

fn expect_code(out: &Output, want: i32, what: &str) -> Result {
    ensure!(
        code(out.status) == want,
        "{what}: exit {} (wanted {want}); stdout: {} stderr: {}",
        code(out.status),
        text(&out.stdout),
        text(&out.stderr)
    );
    Ok(())
}

fn wait_for_file(path: &Path, limit: Duration) -> Result<String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return Ok(s);
            }
        }
        ensure!(
            Instant::now() < deadline,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    // A reaped process has no /proc entry; a zombie counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.split(") ").nth(1).is_some_and(|rest| rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn signal(pid: u32, sig: &str) -> Result {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map_err(|e| e.to_string())?
        .success();
    ensure!(ok, "kill {sig} {pid} failed");
    Ok(())
}

/// The JSON event lines a running coord writes to standard error, read on a thread.
struct Events(std::sync::mpsc::Receiver<String>);

impl Events {
    fn of(child: &mut Child) -> Result<Events> {
        let stderr = child.stderr.take().ok_or("stderr not piped")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Events(rx))
    }

    /// Every line written so far (waiting up to `limit` for the first), for a failure's
    /// message.
    fn rest(&self, limit: Duration) -> String {
        let mut lines = Vec::new();
        if let Ok(first) = self.0.recv_timeout(limit) {
            lines.push(first);
            lines.extend(self.0.try_iter());
        }
        lines.join("\n")
    }

    /// The next event named `event`, skipping others.
    fn until(&self, event: &str, limit: Duration) -> Result<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .0
                .recv_timeout(left)
                .map_err(|_| format!("no {event:?} event within {limit:?}"))?;
            let v: Value = serde_json::from_str(&line).map_err(|e| format!("not JSON ({e}): {line}"))?;
            if v["event"] == event {
                return Ok(v);
            }
        }
    }
}

fn tempdir() -> Result<tempfile::TempDir> {
    tempfile::tempdir().map_err(|e| e.to_string().into())
}

// ---- the harness ----

fn backends() -> Vec<(Backend, Option<String>)> {
    use coord_testkit::env::required;
    let mut all = vec![(
        Backend {
            name: "mem",
            hosts: String::new(),
        },
        None,
    )];
    for (name, var) in [("zk", "COORD_TEST_ZK"), ("etcd", "COORD_TEST_ETCD")] {
        let hosts = coord_testkit::env::endpoint(var).unwrap_or_default();
        let missing = hosts.is_empty().then(|| {
            if required(name) {
                format!("COORD_TEST_REQUIRE names {name}, but {var} is not set")
            } else {
                String::new()
            }
        });
        all.push((Backend { name, hosts }, missing));
    }
    all
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![
        Trial::test("help_reads_well", help_reads_well),
        Trial::test("usage_and_connection_errors", usage_and_connection_errors),
        Trial::test("recipe_usage_errors", recipes::recipe_usage_errors),
        Trial::test("connect_errors_say_which", connect_errors_say_which),
    ];
    type Case = fn(&Backend) -> Result;
    // mem:// is refused on the command line except by `coord session`.
    let everywhere: [(&str, Case); 1] = [("session_json", session_json)];
    let real_only: [(&str, Case); 35] = [
        (
            "killed_coord_stops_what_left_the_group",
            guard::killed_coord_stops_what_left_the_group,
        ),
        (
            "killed_coord_stops_what_it_waited_for",
            guard::killed_coord_stops_what_it_waited_for,
        ),
        (
            "kill_coord_pid_reaches_coord",
            guard::kill_coord_pid_reaches_coord,
        ),
        (
            "a_silent_first_member_is_passed_over",
            guard::a_silent_first_member_is_passed_over,
        ),
        (
            "signals_to_the_group_are_the_commands",
            guard::signals_to_the_group_are_the_commands,
        ),
        (
            "orphans_are_reaped_while_the_command_runs",
            guard::orphans_are_reaped_while_the_command_runs,
        ),
        (
            "terminal_wait_for_children_passes_sigterm_on",
            guard::terminal_wait_for_children_passes_sigterm_on,
        ),
        ("nohup_reaches_the_command", guard::nohup_reaches_the_command),
        ("inspect_json_is_one_shape", recipes::inspect_json_is_one_shape),
        ("nothing_left_behind", recipes::nothing_left_behind),
        ("killed_coord_stops_its_command", killed_coord_stops_its_command),
        (
            "wait_for_children_keeps_the_lock",
            wait_for_children_keeps_the_lock,
        ),
        ("nested_coord_gets_the_url", nested_coord_gets_the_url),
        ("other_backends_port_is_named", other_backends_port_is_named),
        ("lock_runs_command_with_token", lock_runs_command_with_token),
        ("command_leaves_nothing_running", command_leaves_nothing_running),
        (
            "stop_reaches_the_commands_children",
            stop_reaches_the_commands_children,
        ),
        ("command_in_a_terminal_reads_it", command_in_a_terminal_reads_it),
        ("config_json", config_json),
        ("cli_holders_never_overlap", beliefs::cli_holders_never_overlap),
        ("lock_modes_refuse_each_other", lock_modes_refuse_each_other),
        (
            "revoke_stops_a_revocable_holder",
            recipes::revoke_stops_a_revocable_holder,
        ),
        ("semaphore_admits_n", recipes::semaphore_admits_n),
        ("read_write_lock", recipes::read_write_lock),
        ("recipes_one_shot", recipes::recipes_one_shot),
        (
            "inspect_shows_foreign_holders",
            recipes::inspect_shows_foreign_holders,
        ),
        ("lock_excludes_across_processes", lock_excludes_across_processes),
        (
            "lock_delay_after_a_killed_holder",
            lock_delay_after_a_killed_holder,
        ),
        (
            "lock_delay_over_the_limit_is_a_usage_error",
            lock_delay_over_the_limit_is_a_usage_error,
        ),
        ("busy_and_timeout", busy_and_timeout),
        ("loss_stops_the_command", loss_stops_the_command),
        ("elect_loss_stops_the_command", elect_loss_stops_the_command),
        ("elect_leader_observe", elect_leader_observe),
        ("registry_register_list", registry_register_list),
        (
            "config_watch_follows_and_ends_with_its_reader",
            config_watch_follows_and_ends_with_its_reader,
        ),
    ];
    for (backend, missing) in backends() {
        let cases = everywhere
            .iter()
            .chain(if backend.real() { &real_only[..] } else { &[] });
        for &(name, case) in cases {
            let b = backend.clone();
            let missing = missing.clone();
            let ignored = missing.as_deref() == Some("");
            let trial = Trial::test(format!("[{}] {name}", b.name), move || match missing {
                Some(why) if !why.is_empty() => Err(why.into()),
                _ => case(&b),
            });
            trials.push(trial.with_ignored_flag(ignored));
        }
    }
    // Cases that also need PostgreSQL (COORD_TEST_PG, a postgres:// URL).
    let pg = coord_testkit::env::endpoint("COORD_TEST_PG");
    let pg_missing = pg.is_none().then(|| {
        if coord_testkit::env::required("postgres") {
            "COORD_TEST_REQUIRE names postgres, but COORD_TEST_PG is not set".to_owned()
        } else {
            String::new()
        }
    });
    for (backend, missing) in backends().into_iter().filter(|(b, _)| b.real()) {
        // A required one missing fails the case; one merely missing ignores it.
        let missing = match (missing, pg_missing.clone()) {
            (Some(why), _) | (_, Some(why)) if !why.is_empty() => Some(why),
            (None, None) => None,
            _ => Some(String::new()),
        };
        let ignored = missing.as_deref() == Some("");
        let pg = pg.clone().unwrap_or_default();
        let trial = Trial::test(
            format!("[{}] a_paused_coord_is_fenced_at_postgres", backend.name),
            move || match missing {
                Some(why) if !why.is_empty() => Err(why.into()),
                _ => fence::a_paused_coord_is_fenced_at_postgres(&backend, &pg),
            },
        );
        trials.push(trial.with_ignored_flag(ignored));
    }
    libtest_mimic::run(&args, trials).exit();
}
