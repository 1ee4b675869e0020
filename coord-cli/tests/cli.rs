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
#[path = "cli/fence.rs"]
mod fence;
#[path = "cli/guard.rs"]
mod guard;
#[path = "cli/recipes.rs"]
mod recipes;

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

// ---- cases that need no server ----

fn help_reads_well() -> Result {
    let out = output(Command::new(BIN).arg("--help"), Duration::from_secs(10))?;
    expect_code(&out, 0, "coord --help")?;
    let help = text(&out.stdout);
    for word in [
        "lock",
        "elect",
        "leader",
        "observe",
        "config",
        "registry",
        "session",
        "Exit status:",
        "COORD_URL",
    ] {
        ensure!(
            help.contains(word),
            "coord --help does not mention {word}:\n{help}"
        );
    }
    let subcommands: [&[&str]; 27] = [
        &["lock"],
        &["revoke"],
        &["elect"],
        &["leader"],
        &["observe"],
        &["queue", "push"],
        &["queue", "take"],
        &["queue", "len"],
        &["counter", "get"],
        &["counter", "add"],
        &["counter", "set"],
        &["barrier", "raise"],
        &["barrier", "remove"],
        &["barrier", "wait"],
        &["barrier", "status"],
        &["two-phase", "decision"],
        &["inspect"],
        &["config", "get"],
        &["config", "put"],
        &["config", "cas"],
        &["config", "delete"],
        &["config", "list"],
        &["config", "watch"],
        &["registry", "list"],
        &["registry", "watch"],
        &["registry", "register"],
        &["session"],
    ];
    let groups: [&[&str]; 6] = [
        &["config"],
        &["registry"],
        &["queue"],
        &["counter"],
        &["barrier"],
        &["txn"],
    ];
    // Read while it runs: the script is larger than a pipe's buffer.
    let out = Command::new(BIN)
        .args(["completions", "bash"])
        .env_remove("COORD_URL")
        .output()
        .map_err(|e| e.to_string())?;
    expect_code(&out, 0, "coord completions bash (no backend needed)")?;
    ensure!(
        text(&out.stdout).contains("_coord") && text(&out.stdout).contains("lock"),
        "the bash completions do not complete coord's subcommands"
    );
    for sub in subcommands.into_iter().chain(groups) {
        let out = output(Command::new(BIN).args(sub).arg("--help"), Duration::from_secs(10))?;
        expect_code(&out, 0, &format!("coord {} --help", sub.join(" ")))?;
        let help = text(&out.stdout);
        ensure!(
            help.contains("Examples:") && help.contains("Usage: coord"),
            "coord {} --help has no usage or examples:\n{help}",
            sub.join(" ")
        );
    }
    Ok(())
}

/// Where nothing answers: a case that must fail before any request would wait 60 s
/// here and exit 69 if it sent one.
const NOWHERE: &str = "zk://127.0.0.1:1/x?connect_timeout=60s";

fn usage_and_connection_errors() -> Result {
    let limit = Duration::from_secs(30);
    let dir = tempdir()?;
    let not_executable = dir.path().join("job.sh");
    std::fs::write(&not_executable, "true\n").map_err(|e| e.to_string())?;
    let not_executable = not_executable.display().to_string();
    let timeout_twice = format!("{NOWHERE}&session_timeout=3s");
    let cases: [(&[&str], i32, &str); 20] = [
        (&["session"], 2, "--url"),
        (&["--url", "redis://h/x", "session"], 2, "scheme"),
        (
            &["--url", NOWHERE, "lock", "bad name", "--", "true"],
            2,
            "bad name",
        ),
        (&["--url", NOWHERE, "lock", "jobs"], 2, "CMD"),
        (
            &["--url", NOWHERE, "lock", "jobs", "--", "/nonexistent/cmd"],
            127,
            "not found",
        ),
        // A command that cannot run is found before the lock is taken (or the connect).
        (
            &["--url", NOWHERE, "lock", "jobs", "--", "nosuchcmd"],
            127,
            "nothing was taken",
        ),
        (
            &["--url", NOWHERE, "lock", "jobs", "--", &not_executable],
            126,
            "not an executable",
        ),
        (
            &["--url", NOWHERE, "elect", "e", "v", "--", "nosuchcmd"],
            127,
            "not found",
        ),
        // A command given without `--` gets a hint.
        (
            &["--url", NOWHERE, "lock", "jobs", "./job.sh"],
            2,
            "goes after `--`",
        ),
        // Clap errors name the range and the alternatives.
        (
            &["--url", NOWHERE, "lock", "-n", "-1", "jobs", "--", "true"],
            2,
            "1..=",
        ),
        (&["--url", NOWHERE, "config", "cas", "k", "v"], 2, "--absent"),
        (
            &["--url", NOWHERE, "config", "get", "--raw", "--json", "k"],
            2,
            "--raw",
        ),
        (
            &["--url", NOWHERE, "registry", "register", "s", "a/b", "h:1"],
            2,
            "single segment",
        ),
        (&["--url", NOWHERE, "config", "list", "a//b"], 2, "empty segment"),
        (
            &["--url", &timeout_twice, "--session-timeout", "4s", "session"],
            2,
            "give one",
        ),
        // mem:// lives in one process: refused where another process is the point.
        (
            &["--url", "mem://x", "lock", "jobs", "--", "true"],
            2,
            "scripts/etcd-server start",
        ),
        (&["--url", "mem://x", "config", "put", "k", "v"], 2, "mem://"),
        (&["--url", "MEM://x", "queue", "len", "q"], 2, "mem://"),
        (
            &["--url", "zk://127.0.0.1:1/x?connect_timeout=1s", "session"],
            69,
            "refused",
        ),
        (
            &["--url", "etcd://127.0.0.1:1/x?connect_timeout=1s", "session"],
            69,
            "etcd",
        ),
    ];
    for (args, want, says) in cases {
        let out = output(Command::new(BIN).env_remove("COORD_URL").args(args), limit)?;
        expect_code(&out, want, &args.join(" "))?;
        ensure!(
            text(&out.stderr).contains(says),
            "coord {} says {:?}, not naming {says:?}",
            args.join(" "),
            text(&out.stderr)
        );
    }
    // --json errors are one object with the kind and status; credentials never show.
    let out = output(
        Command::new(BIN).args([
            "--json",
            "--url",
            "etcd://app:s3cret-pw@127.0.0.1:1/x?connect_timeout=1s",
            "session",
        ]),
        limit,
    )?;
    let errors = json_lines(&out.stderr)?;
    ensure!(
        errors.len() == 1 && errors[0]["event"] == "error" && errors[0]["exit"] == 69,
        "--json error was {errors:?}"
    );
    ensure!(
        !text(&out.stderr).contains("s3cret"),
        "the password was printed: {}",
        text(&out.stderr)
    );
    // The `--` hint keys on the subcommand, not on a key spelled `lock`.
    let out = output(coord(NOWHERE).args(["config", "get", "lock", "extra"]), limit)?;
    expect_code(&out, 2, "config get with one argument too many")?;
    ensure!(
        !text(&out.stderr).contains("goes after"),
        "a `--` hint for config get: {}",
        text(&out.stderr)
    );
    // Without PATH, a command is looked for where execvp looks (/bin:/usr/bin).
    let out = output(
        coord(NOWHERE)
            .env_remove("PATH")
            .args(["lock", "jobs", "--", "true"]),
        limit,
    )?;
    ensure!(
        !text(&out.stderr).contains("not found"),
        "with PATH unset, `true` was not found: {}",
        text(&out.stderr)
    );
    let out = output(
        Command::new(BIN).args(["--url", "zk://app:s3cret-pw@127.0.0.1:bad/x", "session"]),
        limit,
    )?;
    expect_code(&out, 2, "a bad port")?;
    ensure!(
        !text(&out.stderr).contains("s3cret"),
        "the password was printed: {}",
        text(&out.stderr)
    );
    Ok(())
}

/// A connect that cannot succeed says why, per host, at once: refused, a name that
/// does not resolve; and `--try` and `--timeout` bound a connect to a host that never
/// answers (it accepts the connection and says nothing).
fn connect_errors_say_which() -> Result {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    for scheme in ["zk", "etcd"] {
        for (host, says) in [
            (format!("127.0.0.1:{closed}"), "connection refused"),
            ("no-such-host.invalid:2181".to_owned(), "does not resolve"),
        ] {
            let url = format!("{scheme}://{host}/x?connect_timeout=60s");
            let started = Instant::now();
            let out = output(coord(&url).arg("session"), Duration::from_secs(30))?;
            expect_code(&out, 69, &format!("session on {url}"))?;
            let said = text(&out.stderr);
            ensure!(said.contains(says), "{url}: {said:?} does not say {says:?}");
            ensure!(
                !said.contains("tonic") && !said.contains("Os {") && !said.contains("Custom {"),
                "{url}: library Debug text in {said:?}"
            );
            ensure!(
                started.elapsed() < Duration::from_secs(10),
                "{url}: took {:?} to say so",
                started.elapsed()
            );
        }
    }
    // A listener that never accepts: connections complete in its backlog, nothing answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = silent.local_addr().map_err(|e| e.to_string())?.port();
    for scheme in ["zk", "etcd"] {
        let url = format!("{scheme}://127.0.0.1:{port}/x?connect_timeout=60s");
        let started = Instant::now();
        let out = output(
            coord(&url).args(["lock", "--timeout", "2s", "x", "--", "true"]),
            Duration::from_secs(30),
        )?;
        expect_code(&out, 124, &format!("lock --timeout 2s on a silent {scheme} host"))?;
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "{scheme}: --timeout 2s took {:?}",
            started.elapsed()
        );
        let started = Instant::now();
        let out = output(
            coord(&url).args(["lock", "--try", "x", "--", "true"]),
            Duration::from_secs(30),
        )?;
        expect_code(&out, 69, &format!("lock --try on a silent {scheme} host"))?;
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "{scheme}: --try took {:?}",
            started.elapsed()
        );
        // The URL's own connect_timeout holds, its failure's explanation included
        // (that took 9 s on etcd and 11 s on ZooKeeper for 5 s).
        let url = format!("{scheme}://127.0.0.1:{port}/x?connect_timeout=5s");
        let started = Instant::now();
        let out = output(coord(&url).args(["config", "get", "k"]), Duration::from_secs(30))?;
        expect_code(&out, 69, &format!("config get on a silent {scheme} host"))?;
        ensure!(
            started.elapsed() < Duration::from_millis(7500),
            "{scheme}: connect_timeout=5s took {:?}: {}",
            started.elapsed(),
            text(&out.stderr)
        );
    }
    drop(silent);
    // An HTTP/1 server on the port: named as one, not an HTTP/2 error chain.
    let http = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = http.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for mut conn in http.incoming().flatten() {
            let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = conn.read(&mut [0u8; 1024]);
            let _ = conn.write_all(b"HTTP/1.0 404 Not Found\r\nServer: test\r\n\r\n");
        }
    });
    for scheme in ["zk", "etcd"] {
        let url = format!("{scheme}://127.0.0.1:{port}/x?connect_timeout=5s");
        let out = output(coord(&url).arg("session"), Duration::from_secs(30))?;
        expect_code(&out, 2, &format!("session on an HTTP server as {scheme}"))?;
        ensure!(
            text(&out.stderr).contains("HTTP server"),
            "{scheme} on an HTTP server: {}",
            text(&out.stderr)
        );
    }
    Ok(())
}

/// The other backend's port in a URL is named as such, at once (exit 2).
fn other_backends_port_is_named(b: &Backend) -> Result {
    let (other, var) = if b.name == "zk" {
        ("etcd", "COORD_TEST_ETCD")
    } else {
        ("zk", "COORD_TEST_ZK")
    };
    let hosts = coord_testkit::env::endpoint(var)
        .ok_or(format!("this case needs {var} as well (a {other} server)"))?;
    let url = format!("{}://{hosts}/x?connect_timeout=60s", b.name);
    let started = Instant::now();
    let out = output(coord(&url).arg("session"), Duration::from_secs(30))?;
    expect_code(&out, 2, &format!("a {} URL on the {other} server", b.name))?;
    let want = if other == "zk" {
        "a ZooKeeper server"
    } else {
        "an etcd server"
    };
    ensure!(
        text(&out.stderr).contains(want),
        "{url} says {:?}, not naming {want:?}",
        text(&out.stderr)
    );
    ensure!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

// ---- cases on every backend ----

/// The command runs with the token and the lock's name in its environment; coord exits
/// with its status; the JSON event names the same token.
fn lock_runs_command_with_token(b: &Backend) -> Result {
    let url = b.url("token", "");
    let script = r#"echo "$COORD_FENCING_TOKEN $COORD_LOCK"; echo "$COORD_FENCE_RESOURCE"; echo "$COORD_FENCE"; exit 7"#;
    let out = output(
        coord(&url).args(["--json", "lock", "jobs/nightly", "--", "sh", "-c", script]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 7, "lock running `exit 7`")?;
    let printed = text(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    let [first, resource, header] = lines[..] else {
        return Err(format!("child printed {printed:?}").into());
    };
    let (token, name) = first
        .split_once(' ')
        .ok_or(format!("child printed {printed:?}"))?;
    ensure!(
        resource == "jobs/nightly",
        "COORD_FENCE_RESOURCE was {resource:?}"
    );
    // The header's value as the HTTP gate reads it.
    let fence = coord_fence::http::FenceHeader::parse(header).map_err(|e| e.to_string())?;
    ensure!(
        fence.resource() == "jobs/nightly" && fence.token().to_string() == token,
        "COORD_FENCE was {header:?} beside token {token}"
    );
    ensure!(name == "jobs/nightly", "COORD_LOCK was {name:?}");
    let token: u64 = token
        .parse()
        .map_err(|_| format!("COORD_FENCING_TOKEN was {token:?}"))?;
    ensure!(token > 0, "token {token}");
    let events = json_lines(&out.stderr)?;
    let acquired = events
        .iter()
        .find(|e| e["event"] == "acquired")
        .ok_or(format!("no acquired event in {events:?}"))?;
    ensure!(
        acquired["token"] == token,
        "acquired {acquired} but the child saw {token}"
    );

    // A child killed by a signal: 128 + N, as a shell reports it.
    let out = output(
        coord(&url).args(["lock", "jobs/nightly", "--", "sh", "-c", "kill -TERM $$"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 128 + 15, "lock running a command killed by SIGTERM")?;

    // Leases and readers hold beside each other: no gate variables for them (a gate
    // would fence the older holders while they hold); a writer gets them.
    let probe = r#"echo "${COORD_FENCE-unset} ${COORD_FENCE_RESOURCE-unset}""#;
    for (mode, want) in [
        (&["-n", "2"][..], "unset unset"),
        (&["--read"][..], "unset unset"),
        (&["--write"][..], "resource=jobs/shared; token="),
    ] {
        let out = output(
            coord(&url)
                .arg("lock")
                .args(mode)
                .args(["jobs/shared", "--", "sh", "-c", probe]),
            Duration::from_secs(30),
        )?;
        expect_code(&out, 0, "a lock mode's probe")?;
        let printed = text(&out.stdout);
        ensure!(printed.starts_with(want), "{mode:?}: the command saw {printed:?}");
    }
    Ok(())
}

/// SIGTERM sent to coord reaches everything its command started (the command runs in a
/// process group of its own), not only the command's process: nothing the command
/// started keeps running once coord has let go.
fn stop_reaches_the_commands_children(b: &Backend) -> Result {
    let url = b.url("stop-group", "");
    let dir = tempdir()?;
    let started = dir.path().join("started");
    let script = format!("sleep 120 & echo $! > {}; wait", started.display());
    let holder = coord(&url)
        .args(["lock", "group", "--", "sh", "-c", &script])
        // No pipes: a child left behind would hold them open, and reading coord's
        // output would wait for it.
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let grandchild: i32 = wait_for_file(&started, Duration::from_secs(20))?
        .trim()
        .parse()
        .map_err(|_| "bad pid file")?;
    ensure!(alive(grandchild), "the command's child is not running");
    signal(holder.id(), "-TERM")?;
    let out = finish(holder, Duration::from_secs(20))?;
    expect_code(&out, 128 + 15, "coord passing SIGTERM on to its command")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(grandchild) {
        ensure!(
            Instant::now() < deadline,
            "the command's child (pid {grandchild}) still runs after coord passed on SIGTERM and exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A command that exits on its own leaves nothing running once `coord` has exited (and
/// so released): a child in its process group, one that left the group (`setsid`) and
/// one that ignores SIGTERM are all gone, and the command's own status is kept. On a real
/// backend, the next holder's command then sees no write of the first one's leftovers
/// during its turn.
fn command_leaves_nothing_running(b: &Backend) -> Result {
    let url = b.url("leftovers", "");
    let dir = tempdir()?;
    let ledger = dir.path().join("ledger");
    let pids = dir.path().join("pids");
    let script = format!(
        "(for i in $(seq 1000); do echo left >> {ledger}; sleep 0.02; done) & echo $! >> {pids}; \
         setsid sh -c 'for i in $(seq 1000); do echo setsid >> {ledger}; sleep 0.02; done' & echo $! >> {pids}; \
         (trap '' TERM; exec sleep 120) & echo $! >> {pids}; \
         sleep 0.2; exit 7",
        ledger = ledger.display(),
        pids = pids.display()
    );
    let next = if b.real() {
        let check = format!(
            "before=$(wc -l < {l}); sleep 0.5; after=$(wc -l < {l}); test \"$before\" = \"$after\" || {{ echo \"$((after - before)) writes of the last holder's leftovers during this turn\"; exit 9; }}",
            l = ledger.display()
        );
        let mut cmd = coord(&url);
        cmd.args(["lock", "leftovers", "--", "sh", "-c", &check])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Some(cmd)
    } else {
        None
    };
    let holder = coord(&url)
        .args(["lock", "leftovers", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    wait_for_file(&ledger, Duration::from_secs(20))?;
    let waiter = match next {
        Some(mut cmd) => Some(cmd.spawn().map_err(|e| e.to_string())?),
        None => None,
    };
    let out = finish(holder, Duration::from_secs(30))?;
    expect_code(&out, 7, "coord lock keeps its command's status")?;
    let started: Vec<i32> = std::fs::read_to_string(&pids)
        .map_err(|e| e.to_string())?
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    ensure!(started.len() == 3, "the script recorded {} pids", started.len());
    for pid in started {
        ensure!(
            !alive(pid),
            "pid {pid}, started by the command, still runs after coord exited and released"
        );
    }
    if let Some(waiter) = waiter {
        let out = finish(waiter, Duration::from_secs(30))?;
        expect_code(&out, 0, "the next holder's turn")?;
    }
    Ok(())
}

/// A `coord lock` killed with SIGKILL takes its command with it: the command's guard
/// gets the parent-death signal and stops the command's whole process group (SIGTERM,
/// SIGKILL after --grace). Nothing it ran keeps working beside the next holder.
fn killed_coord_stops_its_command(b: &Backend) -> Result {
    let url = b.url("killed", "");
    let dir = tempdir()?;
    let pids = dir.path().join("pids");
    // The command and a child of its own, one ignoring SIGTERM.
    let script = format!(
        "(trap '' TERM; exec sleep 120) & echo $! >> {p}; echo $$ >> {p}; sleep 120",
        p = pids.display()
    );
    let holder = coord(&url)
        .args(["lock", "--grace", "300ms", "killed", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let got: Vec<i32> = std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if got.len() == 2 {
            break got;
        }
        ensure!(Instant::now() < deadline, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    signal(holder.id(), "-KILL")?;
    let _ = finish(holder, Duration::from_secs(10))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    for pid in started {
        while alive(pid) {
            ensure!(
                Instant::now() < deadline,
                "pid {pid}, started under the lock, still runs after coord was killed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// `--wait-for-children` keeps the lock after the command exits while what it started
/// runs on (flock's behaviour): another `coord lock --try` is refused meanwhile, the
/// leftover is not stopped, and coord exits with the command's status once it ended.
fn wait_for_children_keeps_the_lock(b: &Backend) -> Result {
    let url = b.url("wait-children", "");
    let dir = tempdir()?;
    let (started, finished) = (dir.path().join("started"), dir.path().join("finished"));
    let script = format!(
        "(sleep 1.5; echo done > {f}) > /dev/null 2>&1 & echo go > {s}; exit 3",
        f = finished.display(),
        s = started.display()
    );
    let holder = coord(&url)
        .args(["lock", "--wait-for-children", "kept", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    wait_for_file(&started, Duration::from_secs(20))?;
    let out = output(
        coord(&url).args(["lock", "--try", "kept", "--", "true"]),
        Duration::from_secs(20),
    )?;
    ensure!(
        finished.exists() || code(out.status) == 75,
        "the lock was free while the command's child ran: {}",
        text(&out.stderr)
    );
    let out = finish(holder, Duration::from_secs(20))?;
    expect_code(
        &out,
        3,
        "coord lock --wait-for-children keeps the command's status",
    )?;
    ensure!(
        finished.exists(),
        "the command's child was stopped instead of waited for"
    );
    Ok(())
}

/// The command gets `COORD_URL`, so that a nested `coord` works on the same backend —
/// without credentials: with ZooKeeper digest credentials (which a server accepts
/// without checking them against any ACL) the command's URL has none, and nodes made
/// with them are not the nested call's to write.
fn nested_coord_gets_the_url(b: &Backend) -> Result {
    let url = b.url("nested", "");
    let dir = tempdir()?;
    let seen = dir.path().join("seen");
    let script = format!(
        "echo \"$COORD_URL\" > {}; {BIN} config put nested/k v",
        seen.display()
    );
    let out = output(
        coord(&url).args(["lock", "nested", "--", "sh", "-c", &script]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "a nested coord config put under coord lock")?;
    let passed = std::fs::read_to_string(&seen).map_err(|e| e.to_string())?;
    ensure!(
        passed.trim() == url,
        "the command's COORD_URL was {passed:?}, not {url:?}"
    );
    let out = output(
        coord(&url).args(["config", "get", "nested/k"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "the nested put's key")?;
    if b.name == "zk" {
        let plain = b.url("nested-creds", "");
        let with_credentials = plain.replacen("zk://", "zk://app:s3cret@", 1);
        let script = format!("echo \"$COORD_URL\" > {}; {BIN} session", seen.display());
        let out = output(
            coord(&with_credentials).args(["lock", "nested", "--", "sh", "-c", &script]),
            Duration::from_secs(30),
        )?;
        expect_code(
            &out,
            0,
            "a nested coord session under coord lock with credentials",
        )?;
        let passed = std::fs::read_to_string(&seen).map_err(|e| e.to_string())?;
        ensure!(
            passed.trim() == plain,
            "with credentials, the command's COORD_URL was {passed:?}, not {plain:?}"
        );
    }
    Ok(())
}

/// `coord lock NAME`, `-n 1 NAME`, `--read NAME` and `--write NAME` keep their entries in
/// three layouts that would not exclude each other: while one mode holds a name, each
/// other mode is refused with exit 4 and a message naming the mode in use, and runs
/// nothing.
fn lock_modes_refuse_each_other(b: &Backend) -> Result {
    let modes: [&[&str]; 3] = [&[], &["-n", "1"], &["--write"]];
    for (i, holding) in modes.iter().enumerate() {
        let url = b.url(&format!("modes-{i}"), "");
        let dir = tempdir()?;
        let (held, done, ran) = (
            dir.path().join("held"),
            dir.path().join("done"),
            dir.path().join("ran"),
        );
        let script = format!(
            "echo held > {}; while [ ! -e {} ]; do sleep 0.05; done",
            held.display(),
            done.display()
        );
        let holder = coord(&url)
            .args(["lock"])
            .args(*holding)
            .args(["shared-name", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        wait_for_file(&held, Duration::from_secs(20))?;
        let others: [&[&str]; 4] = [&[], &["-n", "1"], &["--read"], &["--write"]];
        for other in others {
            let same = *holding == other
                || (holding.first() == Some(&"--write") && other.first() == Some(&"--read"));
            if same {
                continue;
            }
            let touch = format!("touch {}", ran.display());
            let out = output(
                coord(&url).args(["lock", "--try"]).args(other).args([
                    "shared-name",
                    "--",
                    "sh",
                    "-c",
                    &touch,
                ]),
                Duration::from_secs(20),
            )?;
            expect_code(&out, 4, &format!("lock {other:?} beside lock {holding:?}"))?;
            ensure!(
                text(&out.stderr).contains("would not exclude"),
                "the refusal does not say why: {}",
                text(&out.stderr)
            );
            ensure!(
                !ran.exists(),
                "lock {other:?} ran its command beside lock {holding:?}"
            );
        }
        std::fs::write(&done, "").map_err(|e| e.to_string())?;
        let out = finish(holder, Duration::from_secs(20))?;
        expect_code(&out, 0, "the holder")?;
    }
    Ok(())
}

/// In a terminal's foreground the command keeps the terminal: it reads what is typed
/// there (in a process group of its own it would be stopped by SIGTTIN instead).
fn command_in_a_terminal_reads_it(b: &Backend) -> Result {
    use std::io::Write as _;
    let url = b.url("terminal", "");
    // `script` runs the line on a new pseudo-terminal, in the terminal's foreground.
    let line = format!(r#"{BIN} --url {url} lock tty -- sh -c 'read typed; echo "got $typed"'"#);
    let mut child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("COORD_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run script (util-linux): {e}"))?;
    let mut typed = child.stdin.take().ok_or("stdin")?;
    typed.write_all(b"hello\n").map_err(|e| e.to_string())?;
    let out = finish(child, Duration::from_secs(20));
    drop(typed);
    let out = out?;
    expect_code(&out, 0, "coord lock in a terminal")?;
    ensure!(
        text(&out.stdout).contains("got hello"),
        "the command did not read the terminal: {}",
        text(&out.stdout)
    );
    Ok(())
}

/// Config from the shell, parsed as JSON: put, get with the version, a stale
/// compare-and-set refused (exit 4), a current one accepted, list, delete, missing keys
/// (exit 3); a binary value read back byte for byte with `get --raw`; a version
/// mismatch says the versions as typed.
fn config_json(b: &Backend) -> Result {
    let url = b.url("config", "");
    let limit = Duration::from_secs(30);
    let run = |args: &[&str]| output(coord(&url).arg("--json").args(["config"]).args(args), limit);
    let out = run(&["get", "feature/x"])?;
    expect_code(&out, 3, "get of a missing key")?;
    let out = run(&["put", "feature/x", "on"])?;
    expect_code(&out, 0, "put")?;
    let put = json_lines(&out.stdout)?;
    let v1 = put[0]["version"]
        .as_str()
        .ok_or(format!("put printed {put:?}"))?
        .to_owned();
    let out = run(&["cas", "feature/x", "off", "--expect", "999999.0"])?;
    expect_code(&out, 4, "cas with a wrong version")?;
    ensure!(
        text(&out.stderr).contains("999999.0") && !text(&out.stderr).contains("Some("),
        "the version mismatch does not print versions as typed: {}",
        text(&out.stderr)
    );
    let out = run(&["cas", "feature/y", "v", "--expect", "not-a-version"])?;
    expect_code(&out, 2, "cas with a malformed version")?;
    // Binary bytes in and out unchanged.
    let binary: &[u8] = b"\x00\xffline\n\x1b[31m";
    let mut put = coord(&url)
        .args(["config", "put", "blob", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    {
        use std::io::Write as _;
        let mut stdin = put.stdin.take().ok_or("stdin not piped")?;
        stdin.write_all(binary).map_err(|e| e.to_string())?;
    }
    expect_code(&finish(put, limit)?, 0, "put of a binary value from stdin")?;
    let out = output(coord(&url).args(["config", "get", "--raw", "blob"]), limit)?;
    expect_code(&out, 0, "get --raw")?;
    ensure!(
        out.stdout == binary,
        "get --raw printed {:?}, not the bytes put {binary:?}",
        out.stdout
    );
    let out = run(&["get", "feature/x"])?;
    expect_code(&out, 0, "get")?;
    let got = json_lines(&out.stdout)?;
    ensure!(
        got[0]["value"] == "on" && got[0]["version"] == v1.as_str() && got[0]["key"] == "feature/x",
        "get printed {got:?} after put at {v1}"
    );
    let out = run(&["cas", "feature/x", "off", "--expect", &v1])?;
    expect_code(&out, 0, "cas at the current version")?;
    let out = run(&["cas", "feature/x", "again", "--expect", &v1])?;
    expect_code(&out, 4, "cas at the old version")?;
    let out = run(&["cas", "feature/z", "new", "--absent"])?;
    expect_code(&out, 0, "cas --absent of a new key")?;
    let out = run(&["list", "feature"])?;
    let listed = json_lines(&out.stdout)?;
    let keys: Vec<&str> = listed.iter().filter_map(|e| e["key"].as_str()).collect();
    ensure!(keys == ["feature/x", "feature/z"], "list printed {listed:?}");
    ensure!(listed[0]["value"] == "off", "list printed {listed:?}");
    let out = run(&["delete", "feature/x"])?;
    ensure!(
        json_lines(&out.stdout)?[0]["deleted"] == true,
        "delete: {}",
        text(&out.stdout)
    );
    let out = run(&["delete", "feature/x"])?;
    ensure!(
        json_lines(&out.stdout)?[0]["deleted"] == false,
        "second delete: {}",
        text(&out.stdout)
    );
    Ok(())
}

/// `coord session --json`: backend, state, server version, round trip.
fn session_json(b: &Backend) -> Result {
    let out = output(
        coord(&b.url("session", "")).args(["session", "--json"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "session")?;
    let s = &json_lines(&out.stdout)?[0];
    ensure!(
        s["backend"] == b.name && s["state"] == "connected",
        "session printed {s}"
    );
    let version = s["server_version"].as_str().unwrap_or("");
    let want = if b.real() { "3." } else { "coord-mem" };
    ensure!(version.contains(want), "server version {version:?}");
    ensure!(
        s["round_trip_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "round trip {s}"
    );
    // --session-timeout sets the backend's own option for this run (the test ZooKeeper
    // grants at most 2 s; etcd's TTL is whole seconds).
    let (asked, ms) = if b.name == "zk" {
        ("1500ms", 1500)
    } else {
        ("3s", 3000)
    };
    let out = output(
        coord(&b.url("session", "")).args(["--session-timeout", asked, "session", "--json"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "session --session-timeout")?;
    let s = &json_lines(&out.stdout)?[0];
    ensure!(
        s["session_timeout_ms"] == ms,
        "--session-timeout {asked} gave {s}"
    );
    Ok(())
}

// ---- cases on real servers (several processes share them) ----

/// `coord lock --lock-delay`: a holder killed with SIGKILL hands over no earlier than
/// the delay after the kill (after its session expired, later still), and `coord
/// inspect` shows the waiter holding off meanwhile; a holder whose command exits
/// releases, and the next one (keeping a 30 s delay) runs at once.
fn lock_delay_after_a_killed_holder(b: &Backend) -> Result {
    const DELAY: Duration = Duration::from_secs(3);
    let options = coord_testkit::env::session_option(b.name, SESSION_TIMEOUT);
    let url = b.url("lock-delay", &options);
    let dir = tempdir()?;
    let ran = dir.path().join("ran");
    let mut holder = coord(&url)
        .args([
            "--json",
            "lock",
            "--lock-delay",
            "3s",
            "delayed",
            "--",
            "sleep",
            "120",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    Events::of(&mut holder)?.until("acquired", Duration::from_secs(20))?;
    let mut waiter = coord(&url)
        .args([
            "--json",
            "lock",
            "--lock-delay",
            "3s",
            "delayed",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("touch {}", ran.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    Events::of(&mut waiter)?.until("waiting", Duration::from_secs(20))?;
    signal(holder.id(), "-KILL")?;
    let killed = Instant::now();
    let _ = holder.wait();
    // Inspect until the waiter has run: it shows the waiter holding off first.
    let mut shown = false;
    while !ran.exists() {
        ensure!(
            killed.elapsed() < Duration::from_secs(60),
            "the waiter did not run within 60 s of the holder's kill"
        );
        let out = output(coord(&url).args(["inspect", "delayed"]), Duration::from_secs(20))?;
        shown |= text(&out.stdout).contains("holding off (lock-delay) until");
        std::thread::sleep(Duration::from_millis(100));
    }
    let waited = killed.elapsed();
    ensure!(
        waited >= DELAY,
        "the waiter ran {waited:?} after the holder was killed, within the lock-delay of 3 s"
    );
    println!("[{}] the waiter ran {waited:?} after the kill", b.name);
    ensure!(shown, "coord inspect never showed the waiter holding off");
    finish(waiter, Duration::from_secs(20))?;
    // A holder whose command ends releases: the next one runs at once, though it would
    // hold off 30 s after a vanished holder.
    let first = coord(&url)
        .args(["lock", "--lock-delay", "30s", "delayed", "--", "sleep", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let out = output(
        coord(&url).args(["lock", "--lock-delay", "30s", "delayed", "--", "true"]),
        Duration::from_secs(25),
    )?;
    expect_code(&out, 0, "the next holder after a release")?;
    ensure!(
        started.elapsed() < Duration::from_secs(20),
        "after a release the next holder ran {:?} later",
        started.elapsed()
    );
    finish(first, Duration::from_secs(20))?;
    Ok(())
}

/// `--lock-delay` over an hour is a usage error (exit 2) that names the limit, before
/// any connection: a delay of `u64::MAX` seconds once made the waiter panic.
fn lock_delay_over_the_limit_is_a_usage_error(b: &Backend) -> Result {
    let url = b.url("lock-delay-max", "");
    for (args, what) in [
        (
            &[
                "lock",
                "--lock-delay",
                "18446744073709551615s",
                "far",
                "--",
                "true",
            ][..],
            "lock",
        ),
        (&["lock", "--lock-delay", "61m", "far", "--", "true"][..], "lock"),
        (&["elect", "--lock-delay", "2h", "far", "v"][..], "elect"),
    ] {
        let out = output(coord(&url).args(args), Duration::from_secs(20))?;
        expect_code(&out, 2, &format!("coord {what} with {args:?}"))?;
        let err = text(&out.stderr);
        ensure!(err.contains("over the longest lock-delay, 1h"), "{err}");
    }
    Ok(())
}

/// Two `coord lock` processes never run their commands at once; the second shows who
/// holds the lock while it waits; tokens increase. A third, stopped by SIGTERM while it
/// waits, exits 143 without running its command, and the queue moves on without it.
fn lock_excludes_across_processes(b: &Backend) -> Result {
    let url = b.url("excl", "");
    let dir = tempdir()?;
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    // Each command holds until the test creates `go`.
    let script = format!(
        r#"echo "start $COORD_FENCING_TOKEN" >> {log}; while [ ! -e {go} ]; do sleep 0.05; done; echo "end $COORD_FENCING_TOKEN" >> {log}"#,
        log = log.display(),
        go = go.display(),
    );
    let spawn = |script: &str| {
        coord(&url)
            .args(["--json", "lock", "shared", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failed::from(e.to_string()))
    };
    let mut first = spawn(&script)?;
    let held = Events::of(&mut first)?.until("acquired", Duration::from_secs(20))?;
    wait_for_file(&log, Duration::from_secs(20))?;
    let mut second = spawn(&script)?;
    let waiting = Events::of(&mut second)?.until("waiting", Duration::from_secs(20))?;
    ensure!(
        waiting["value"]
            .as_str()
            .is_some_and(|who| who.ends_with(&format!(":{}", first.id())))
            && waiting["token"] == held["token"],
        "waiting named {waiting}, but pid {} held {held}",
        first.id()
    );
    let stray = dir.path().join("stray");
    let mut third = spawn(&format!("touch {}", stray.display()))?;
    Events::of(&mut third)?.until("waiting", Duration::from_secs(20))?;
    signal(third.id(), "-TERM")?;
    let third = finish(third, Duration::from_secs(10))?;
    expect_code(&third, 128 + 15, "a waiting coord lock stopped by SIGTERM")?;
    let before = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
    ensure!(
        before.lines().count() == 1,
        "a second command started while the first held: {before:?}"
    );
    std::fs::write(&go, "").map_err(|e| e.to_string())?;
    expect_code(&finish(first, Duration::from_secs(30))?, 0, "first lock")?;
    expect_code(&finish(second, Duration::from_secs(30))?, 0, "second lock")?;
    ensure!(!stray.exists(), "the stopped waiter ran its command");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .map_err(|e| e.to_string())?
        .lines()
        .map(str::to_owned)
        .collect();
    let tokens: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.split_once(' ').and_then(|(_, t)| t.parse().ok()))
        .collect();
    ensure!(
        lines.len() == 4
            && lines[0].starts_with("start")
            && lines[1].starts_with("end")
            && lines[2].starts_with("start"),
        "commands overlapped: {lines:?}"
    );
    ensure!(
        tokens[0] == tokens[1] && tokens[2] == tokens[3] && tokens[2] > tokens[0],
        "tokens {tokens:?}"
    );
    let out = output(
        coord(&url).args(["lock", "--try", "shared", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "--try once both finished")?;
    Ok(())
}

/// `--try` on a held lock exits 75 at once; `--timeout` gives up with 124 naming the
/// holder; neither leaves a contender behind (the lock is free once the holder ends).
fn busy_and_timeout(b: &Backend) -> Result {
    let url = b.url("busy", "");
    let dir = tempdir()?;
    let (held, done) = (dir.path().join("held"), dir.path().join("done"));
    let script = format!(
        "echo held > {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        done.display()
    );
    let holder = coord(&url)
        .args([
            "lock",
            "--identity",
            "nightly@host-a",
            "busy",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    wait_for_file(&held, Duration::from_secs(20))?;
    let started = Instant::now();
    let out = output(
        coord(&url).args(["lock", "--try", "busy", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 75, "--try on a held lock")?;
    ensure!(
        text(&out.stderr).contains("nightly@host-a"),
        "--try did not name the holder by its --identity: {}",
        text(&out.stderr)
    );
    let out = output(
        coord(&url).args(["lock", "--try", "-E", "1", "busy", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 1, "--try -E 1 on a held lock (flock's conflict exit code)")?;
    let out = output(
        coord(&url).args(["lock", "--timeout", "1500ms", "busy", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 124, "--timeout on a held lock")?;
    ensure!(
        text(&out.stderr).contains("held by"),
        "timeout message {}",
        text(&out.stderr)
    );
    let out = output(
        coord(&url).args([
            "lock",
            "--timeout",
            "500ms",
            "--conflict-exit-code",
            "9",
            "busy",
            "--",
            "true",
        ]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 9, "--timeout with --conflict-exit-code 9 on a held lock")?;
    ensure!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    std::fs::write(&done, "").map_err(|e| e.to_string())?;
    expect_code(&finish(holder, Duration::from_secs(20))?, 0, "holder")?;
    let out = output(
        coord(&url).args(["lock", "--try", "busy", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "--try on the freed lock (a waiter left behind?)")?;
    Ok(())
}

/// A lock lost while the command runs — the session killed from outside — stops the
/// command (SIGTERM) and exits 125; the lock is free for the next process.
fn loss_stops_the_command(b: &Backend) -> Result {
    loss_stops(b, false)
}

/// The same for a leadership lost while `coord elect … -- CMD` runs it.
fn elect_loss_stops_the_command(b: &Backend) -> Result {
    loss_stops(b, true)
}

fn loss_stops(b: &Backend, elect: bool) -> Result {
    let options = coord_testkit::env::session_option(b.name, SESSION_TIMEOUT);
    let url = b.url(if elect { "elect-loss" } else { "loss" }, &options);
    let dir = tempdir()?;
    let pidfile = dir.path().join("pid");
    let started = dir.path().join("started");
    // The lock's command ignores SIGTERM, and so does a child it started: only the
    // default grace's SIGKILL to the command's process group stops them, and it must
    // come before the server can expire the session. The election's command stops on
    // SIGTERM, under a grace longer than is safe (which coord warns about).
    let script = if elect {
        format!("echo $$ > {}; exec sleep 120", pidfile.display())
    } else {
        format!(
            "trap '' TERM; sleep 120 & echo $! > {}; echo $$ > {}; wait",
            started.display(),
            pidfile.display()
        )
    };
    let hold: &[&str] = if elect {
        &["elect", "--grace", "2s", "guarded", "node-1"]
    } else {
        &["lock", "guarded"]
    };
    let mut guarded = coord(&url)
        .arg("--json")
        .args(hold)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let events = Events::of(&mut guarded)?;
    let acquired = events.until(
        if elect { "leading" } else { "acquired" },
        Duration::from_secs(20),
    )?;
    if elect {
        let warned = events.until("unsafe_grace", Duration::from_secs(20))?;
        ensure!(warned["grace_ms"] == 2000, "{warned}");
    }
    let child: i32 = wait_for_file(&pidfile, Duration::from_secs(20))?
        .trim()
        .parse()
        .map_err(|_| "bad pid file")?;
    ensure!(alive(child), "the command is not running");
    let mut processes = vec![("the command", child)];
    if !elect {
        let grandchild: i32 = wait_for_file(&started, Duration::from_secs(20))?
            .trim()
            .parse()
            .map_err(|_| "bad pid file")?;
        ensure!(alive(grandchild), "the command's child is not running");
        processes.push(("the command's child", grandchild));
    }
    kill_session(b, &guarded, &acquired)?;
    let lost = events.until("lost", Duration::from_secs(30))?;
    let lost_at = Instant::now();
    ensure!(lost["name"] == "guarded", "lost event {lost}");
    // The least time between coord's Lost and the server's earliest expiry (3/10 of
    // the timeout the server granted on ZooKeeper, a tenth on etcd); the default grace
    // is half of it.
    let granted = acquired["session_timeout_ms"]
        .as_u64()
        .map_or(SESSION_TIMEOUT, Duration::from_millis);
    let margin = if b.name == "zk" {
        granted * 3 / 10
    } else {
        granted / 10
    };
    let limit = if elect { Duration::from_secs(5) } else { margin };
    for (what, pid) in processes {
        while alive(pid) {
            ensure!(
                lost_at.elapsed() < limit,
                "{what} (pid {pid}) still runs {:?} after the loss",
                lost_at.elapsed()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let out = finish(guarded, Duration::from_secs(20))?;
    expect_code(&out, 125, "coord after its hold was lost")?;
    let out = if elect {
        output(coord(&url).args(["leader", "guarded"]), Duration::from_secs(20))?
    } else {
        output(
            coord(&url).args(["lock", "--try", "guarded", "--", "true"]),
            Duration::from_secs(20),
        )?
    };
    expect_code(&out, if elect { 3 } else { 0 }, "the next process after the loss")?;
    Ok(())
}

/// Ends the session of the running `coord` from outside: etcd revokes its lease (the id
/// it printed); ZooKeeper expires it while the process is paused past the timeout.
fn kill_session(b: &Backend, process: &Child, acquired: &Value) -> Result {
    if b.name == "etcd" {
        let lease = acquired["session"]
            .as_str()
            .ok_or(format!("no session in {acquired}"))?;
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &b.hosts, "lease", "revoke", lease])
            .output()
            .map_err(|e| format!("cannot run etcdctl: {e}"))?;
        ensure!(
            out.status.success(),
            "etcdctl lease revoke: {}",
            text(&out.stderr)
        );
        return Ok(());
    }
    // Paused past the timeout the server granted (more than asked on a server with long
    // ticks, which also checks expiry only once a tick).
    let granted = acquired["session_timeout_ms"]
        .as_u64()
        .map_or(SESSION_TIMEOUT, Duration::from_millis);
    signal(process.id(), "-STOP")?;
    std::thread::sleep(granted * 2 + Duration::from_secs(1));
    signal(process.id(), "-CONT")
}

/// `coord elect` without a command holds leadership and prints it as JSON; `coord
/// leader` and `coord observe` see it; SIGTERM resigns (exit 0) and observers see
/// "no leader".
fn elect_leader_observe(b: &Backend) -> Result {
    let url = b.url("elect", "");
    let out = output(
        coord(&url).args(["--json", "leader", "sched"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 3, "leader with no leader")?;
    let mut elected = coord(&url)
        .args(["--json", "elect", "sched", "node-1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = elected.stdout.take().ok_or("stdout")?;
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .map_err(|e| e.to_string())?;
    let leading: Value = serde_json::from_str(&first).map_err(|e| format!("{e}: {first}"))?;
    ensure!(
        leading["event"] == "leading" && leading["value"] == "node-1",
        "elect printed {leading}"
    );
    let out = output(
        coord(&url).args(["--json", "leader", "sched"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "leader")?;
    let seen = &json_lines(&out.stdout)?[0];
    ensure!(
        seen["value"] == "node-1" && seen["token"] == leading["token"],
        "leader printed {seen}, elect printed {leading}"
    );
    let mut observer = coord(&url)
        .args(["--json", "observe", "sched"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(observer.stdout.take().ok_or("stdout")?).lines();
    let mut next = || -> Result<Value> {
        let line = lines.next().ok_or("observe ended")?.map_err(|e| e.to_string())?;
        serde_json::from_str(&line).map_err(|e| format!("{e}: {line}").into())
    };
    let now = next()?;
    ensure!(now["value"] == "node-1", "observe first printed {now}");
    signal(elected.id(), "-TERM")?;
    expect_code(
        &finish(elected, Duration::from_secs(20))?,
        0,
        "elect after SIGTERM",
    )?;
    let after = next()?;
    ensure!(
        after["leader"] == false,
        "observe printed {after} after the resignation"
    );
    signal(observer.id(), "-INT")?;
    let status = observer.wait().map_err(|e| e.to_string())?;
    ensure!(status.success(), "observe exited {status} on SIGINT");
    Ok(())
}

/// `coord config watch --json` prints the snapshot, then each change as it happens; once
/// its reader goes away it exits 141 at the next change instead of running on.
fn config_watch_follows_and_ends_with_its_reader(b: &Backend) -> Result {
    let url = b.url("watch", "");
    let put = |key: &str, value: &str| {
        output(
            coord(&url).args(["config", "put", key, value]),
            Duration::from_secs(20),
        )
        .and_then(|out| expect_code(&out, 0, "put"))
    };
    put("feature/a", "1")?;
    let mut watch = coord(&url)
        .args(["--json", "config", "watch", "feature"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(watch.stdout.take().ok_or("stdout")?).lines();
    let mut next = move || -> Result<Value> {
        let line = lines.next().ok_or("watch ended")?.map_err(|e| e.to_string())?;
        serde_json::from_str(&line).map_err(|e| format!("{e}: {line}").into())
    };
    let (snapshot, first) = (next()?, next()?);
    ensure!(
        snapshot["event"] == "snapshot"
            && snapshot["keys"] == 1
            && first["key"] == "feature/a"
            && first["value"] == "1",
        "watch began with {snapshot} {first}"
    );
    put("feature/b", "2")?;
    put("other/c", "3")?;
    put("feature/a", "4")?;
    let (b2, a4) = (next()?, next()?);
    ensure!(
        b2["event"] == "put" && b2["key"] == "feature/b" && a4["key"] == "feature/a" && a4["value"] == "4",
        "watch printed {b2} then {a4} (a key outside the prefix, or out of order?)"
    );
    drop(next); // owns the reader: standard output of the watch is closed now
    put("feature/d", "5")?;
    let status = finish(watch, Duration::from_secs(20))?.status;
    ensure!(code(status) == 141, "watch with its reader gone exited {status}");
    Ok(())
}

/// `coord registry register … -- CMD` registers while the command runs; another process
/// lists it as JSON with its metadata; it is gone after.
fn registry_register_list(b: &Backend) -> Result {
    let url = b.url("registry", "");
    let list = format!("{BIN} --url '{url}' --json registry list api",);
    let out = output(
        coord(&url).args([
            "registry",
            "register",
            "api",
            "node-1",
            "10.0.0.7:8080",
            "--meta",
            "zone=a",
            "--",
            "sh",
            "-c",
            &list,
        ]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "register running a list")?;
    let listed = json_lines(&out.stdout)?;
    ensure!(
        listed.len() == 1
            && listed[0]["id"] == "node-1"
            && listed[0]["address"] == "10.0.0.7:8080"
            && listed[0]["metadata"]["zone"] == "a",
        "listed {listed:?}"
    );
    let out = output(
        coord(&url).args(["--json", "registry", "list", "api"]),
        Duration::from_secs(20),
    )?;
    ensure!(
        json_lines(&out.stdout)?.is_empty(),
        "still registered: {}",
        text(&out.stdout)
    );
    Ok(())
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
