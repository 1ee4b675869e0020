//! A paused process, for real: two `leader` workers run as separate processes against a
//! real ZooKeeper or etcd; the leading one is stopped with SIGSTOP past its session
//! timeout. The other must take over with a larger token, and the stopped one, once it
//! continues (SIGCONT), must find out it lost — leadership `Lost` or its fenced write
//! refused — and never claim to lead again while the other does. Both then step down on
//! SIGINT and exit 0.
//!
//! Runs against `COORD_TEST_ZK` / `COORD_TEST_ETCD` (host:port) with the example built
//! with the matching feature; unset means ignored, or failed when `COORD_TEST_REQUIRE`
//! names the backend.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

/// The session timeout / lease TTL the workers use.
const SESSION: Duration = Duration::from_secs(2);

/// One worker process and the lines it printed.
struct Worker {
    name: &'static str,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Worker {
    fn start(name: &'static str, url: &str) -> Result<Worker, Failed> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leader"))
            .args(["--name", name])
            .env("COORD_URL", url)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the leader example: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker {
            name,
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits up to `limit` for a line for which `pick` returns `Some`.
    fn expect<T>(
        &mut self,
        limit: Duration,
        what: &str,
        pick: impl Fn(&str) -> Option<T>,
    ) -> Result<T, Failed> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(v) = pick(&line) {
                        return Ok(v);
                    }
                }
                Err(e) => {
                    let why = match e {
                        RecvTimeoutError::Timeout => format!("not within {limit:?}"),
                        RecvTimeoutError::Disconnected => "the process ended".to_owned(),
                    };
                    let seen = self.seen.join("\n");
                    return Err(format!("{}: {what}: {why}; it printed:\n{seen}", self.name).into());
                }
            }
        }
    }

    /// Lines printed within `wait`, without expecting any.
    fn drain(&mut self, wait: Duration) -> Vec<String> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            out.push(line);
        }
        out
    }

    fn signal(&self, sig: &str) -> Result<(), Failed> {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("kill {sig}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {sig} {} failed", self.child.id()).into())
        }
    }

    /// Sends SIGINT (Ctrl-C) and waits for a clean exit.
    fn stop(mut self, limit: Duration) -> Result<Vec<String>, Failed> {
        self.signal("-INT")?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                self.drain(Duration::from_millis(200));
                if !status.success() {
                    return Err(format!(
                        "{} exited with {status}; it printed:\n{}",
                        self.name,
                        self.seen.join("\n")
                    )
                    .into());
                }
                return Ok(std::mem::take(&mut self.seen));
            }
            if Instant::now() >= deadline {
                return Err(format!("{} did not exit within {limit:?} of SIGINT", self.name).into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Never leave a stopped or running worker behind.
        let _ = self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The token in "NAME: I lead (token N)".
fn leads(name: &str) -> impl Fn(&str) -> Option<u64> + '_ {
    move |line: &str| {
        let rest = line.strip_prefix(name)?.strip_prefix(": I lead (token ")?;
        rest.strip_suffix(')')?.parse().ok()
    }
}

fn paused_leader_loses_and_is_fenced(url: &str) -> Result<(), Failed> {
    let mut a = Worker::start("a", url)?;
    let ta = a.expect(Duration::from_secs(30), "leads first", leads("a"))?;
    let mut b = Worker::start("b", url)?;
    b.expect(Duration::from_secs(30), "sees a lead", |l| {
        l.starts_with("observer: a leads").then_some(())
    })?;
    // Stop a for three session timeouts: its session ends on the server meanwhile.
    a.signal("-STOP")?;
    let stopped = Instant::now();
    let tb = b.expect(SESSION * 3 + Duration::from_secs(10), "takes over", leads("b"))?;
    if tb <= ta {
        return Err(format!("b leads with token {tb}, not above a's {ta}").into());
    }
    std::thread::sleep((SESSION * 3).saturating_sub(stopped.elapsed()));
    a.signal("-CONT")?;
    let outcome = a.expect(Duration::from_secs(15), "finds out it lost", |l| {
        (l == "a: leadership lost" || l.starts_with("a: leader write refused")).then(|| l.to_owned())
    })?;
    // While b leads, a must not claim to lead again.
    let later = a.drain(SESSION);
    if let Some(bad) = later.iter().find(|l| leads("a")(l).is_some()) {
        return Err(format!("a claims to lead again while b leads: {bad:?} (after {outcome:?})").into());
    }
    let b_lines = b.stop(Duration::from_secs(15))?;
    if !b_lines.iter().any(|l| l == "b: resigned") {
        return Err(format!("b did not resign on SIGINT; it printed:\n{}", b_lines.join("\n")).into());
    }
    let a_lines = a.stop(Duration::from_secs(15))?;
    if std::env::var_os("COORD_TEST_SHOW").is_some() {
        eprintln!("a:\n{}\nb:\n{}", a_lines.join("\n"), b_lines.join("\n"));
    }
    Ok(())
}

fn trial(backend: &'static str, var: &str, feature_on: bool, url: impl Fn(&str, &str) -> String) -> Trial {
    let name = "paused_leader_process_loses_and_is_fenced";
    let required = coord_testkit::env::required(backend);
    let endpoint = coord_testkit::env::endpoint(var);
    match endpoint {
        Some(ep) if feature_on => {
            let ns = coord_testkit::env::unique_namespace("paused-leader");
            let url = url(&ep, &ns);
            Trial::test(name, move || paused_leader_loses_and_is_fenced(&url)).with_kind(backend)
        }
        Some(_) => Trial::test(name, || Ok(()))
            .with_kind(backend)
            .with_ignored_flag(true),
        None if required => {
            let msg = format!("COORD_TEST_REQUIRE names {backend}, but {var} is not set");
            Trial::test(name, move || Err(msg.into())).with_kind(backend)
        }
        None => Trial::test(name, || Ok(()))
            .with_kind(backend)
            .with_ignored_flag(true),
    }
}

fn main() {
    let args = Arguments::from_args();
    let session = |scheme: &str| coord_testkit::env::session_option(scheme, SESSION);
    let (zk, etcd) = (session("zk"), session("etcd"));
    let trials = vec![
        trial("zk", "COORD_TEST_ZK", cfg!(feature = "zk"), move |ep, ns| {
            format!("zk://{ep}/{ns}?{zk}")
        }),
        trial(
            "etcd",
            "COORD_TEST_ETCD",
            cfg!(feature = "etcd"),
            move |ep, ns| format!("etcd://{ep}/{ns}?{etcd}"),
        ),
    ];
    libtest_mimic::run(&args, trials).exit()
}
