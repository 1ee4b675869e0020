//! The command's guard (`coord-cli/src/guard.rs`) at the edges of its promise: nothing
//! a killed `coord`'s command started keeps running — inside its process group or not,
//! while the command runs or after it exited under `--wait-for-children` — and the
//! signals a command's process tree exchanges with `coord` behave as they would without
//! a guard in between (`kill $PPID`, `nohup`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Backend, Result, alive, coord, expect_code, finish, output, signal, tempdir, text};

/// The pids written to `path`, one per line, once there are `n`.
fn pids(path: &Path, n: usize) -> Result<Vec<i32>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got: Vec<i32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        if got.len() >= n {
            return Ok(got);
        }
        ensure!(
            Instant::now() < deadline,
            "the command wrote {} of {n} pids within 20 s",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every pid in `started` is gone within 10 s.
fn all_gone(started: &[i32], after: &str) -> Result {
    let deadline = Instant::now() + Duration::from_secs(10);
    for &pid in started {
        while alive(pid) {
            if Instant::now() >= deadline {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                return Err(format!("pid {pid}, started under the lock, still runs {after}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// A killed `coord` takes with it what its command started outside the command's
/// process group: a `setsid` daemon, and a double-forked child whose parent exited
/// (re-parented to the guard, not to init).
pub fn killed_coord_stops_what_left_the_group(b: &Backend) -> Result {
    let url = b.url("killed-setsid", "");
    let dir = tempdir()?;
    let file = dir.path().join("pids");
    let script = format!(
        "setsid sh -c 'echo $$ >> {p}; exec sleep 120' & \
         sh -c 'setsid sleep 120 & echo $! >> {p}'; \
         echo $$ >> {p}; sleep 120",
        p = file.display()
    );
    let holder = coord(&url)
        .args([
            "lock",
            "--grace",
            "300ms",
            "killed-setsid",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = pids(&file, 3)?;
    signal(holder.id(), "-KILL")?;
    let _ = finish(holder, Duration::from_secs(10))?;
    all_gone(&started, "after coord was killed")
}

/// `--wait-for-children`: the command has exited and the lock is kept while its child
/// runs on; a `coord` killed then still takes that child with it.
pub fn killed_coord_stops_what_it_waited_for(b: &Backend) -> Result {
    let url = b.url("killed-waiting", "");
    let dir = tempdir()?;
    let file = dir.path().join("pids");
    let script = format!(
        "(exec sleep 120) & echo $! >> {p}; setsid sleep 120 & echo $! >> {p}; exit 0",
        p = file.display()
    );
    let holder = coord(&url)
        .args([
            "lock",
            "--grace",
            "300ms",
            "--wait-for-children",
            "killed-waiting",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let started = pids(&file, 2)?;
    // The command is past its last line once both pids are written; a moment for its
    // exit to be seen, so that coord is killed while it waits for the children.
    std::thread::sleep(Duration::from_millis(300));
    signal(holder.id(), "-KILL")?;
    let _ = finish(holder, Duration::from_secs(10))?;
    all_gone(&started, "after coord, waiting for it, was killed")
}

/// A command stops `coord` with `kill $COORD_PID` (its parent is the guard): coord stops
/// the command as for any SIGTERM and exits 143 at once.
pub fn kill_coord_pid_reaches_coord(b: &Backend) -> Result {
    let url = b.url("kill-coord-pid", "");
    let out = output(
        coord(&url).args(["lock", "pid", "--", "sh", "-c", "kill -TERM $COORD_PID; sleep 60"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 128 + 15, "coord lock whose command ran `kill $COORD_PID`")
}

/// A signal the command sends its own group reaches it once, as without coord — also
/// SIGINT and SIGTERM, which the guard gets too and must not pass on to coord (which
/// would send them to the group again) — and a signal coord does not stop on (SIGUSR1,
/// SIGHUP: a reload) ends neither the guard nor coord: the command goes on and the lock
/// is released as usual.
pub fn signals_to_the_group_are_the_commands(b: &Backend) -> Result {
    let url = b.url("group-signals", "");
    for (signal, what) in [
        ("INT", "SIGINT"),
        ("TERM", "SIGTERM"),
        ("USR1", "SIGUSR1"),
        ("HUP", "SIGHUP"),
    ] {
        let script =
            format!("n=0; trap 'n=$((n+1))' {signal}; kill -{signal} 0; sleep 0.5; sleep 0.5; echo got $n");
        // From a default disposition: a shell cannot trap a signal it was started
        // ignoring (SIGHUP when the suite itself runs under nohup).
        let out = output(
            Command::new("env")
                .arg(format!("--default-signal={signal}"))
                .arg(super::BIN)
                .env_remove("COORD_URL")
                .env_remove("RUST_LOG")
                .args(["--url", &url, "lock", "group", "--", "sh", "-c", &script]),
            Duration::from_secs(30),
        )?;
        expect_code(&out, 0, &format!("a command that sends {what} to its group"))?;
        ensure!(
            text(&out.stdout).contains("got 1"),
            "{what} sent to the command's group reached it {} (wanted once)",
            text(&out.stdout).trim()
        );
        let again = output(
            coord(&url).args(["lock", "--try", "group", "--", "true"]),
            Duration::from_secs(30),
        )?;
        expect_code(
            &again,
            0,
            &format!("the lock after a holder got {what}: released"),
        )?;
    }
    Ok(())
}

/// What a command orphans while it runs is reaped as it exits (the guard is its
/// subreaper): no zombie piles up under a long-running command.
pub fn orphans_are_reaped_while_the_command_runs(b: &Backend) -> Result {
    let url = b.url("zombies", "");
    let out = output(
        coord(&url).args([
            "lock",
            "zombies",
            "--",
            "sh",
            "-c",
            "for i in $(seq 50); do (sleep 0.01 &); done; sleep 1.5; \
             ps --ppid $PPID -o stat= | grep -c Z",
        ]),
        Duration::from_secs(30),
    )?;
    ensure!(
        text(&out.stdout).trim() == "0",
        "zombies under the command's guard after 1.5 s: {}",
        text(&out.stdout).trim()
    );
    Ok(())
}

/// In a terminal's foreground, under `--wait-for-children`, SIGTERM sent to `coord`
/// after the command exited reaches what it left running (coord signals the guard only
/// there), and coord exits at once instead of waiting for it.
pub fn terminal_wait_for_children_passes_sigterm_on(b: &Backend) -> Result {
    let url = b.url("tty-wait", "");
    let dir = tempdir()?;
    let file = dir.path().join("pid");
    let line = format!(
        r#"sh -c 'echo $$ > {f}; exec {bin} --url {url} lock --wait-for-children w -- sh -c "sleep 30 & exit 0"'"#,
        f = file.display(),
        bin = super::BIN
    );
    let child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("COORD_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run script (util-linux): {e}"))?;
    let coord_pid: u32 = pids(&file, 1)?[0].try_into().map_err(|_| "bad pid")?;
    // The command has exited and coord waits for its child.
    std::thread::sleep(Duration::from_millis(1500));
    let stopped = Instant::now();
    signal(coord_pid, "-TERM")?;
    let _ = finish(child, Duration::from_secs(25))?;
    ensure!(
        stopped.elapsed() < Duration::from_secs(10),
        "coord waited {:?} for a leftover after SIGTERM",
        stopped.elapsed()
    );
    Ok(())
}

/// Under `nohup`, the command ignores SIGHUP as it would without coord: the guard does
/// not handle a signal it was started ignoring.
pub fn nohup_reaches_the_command(b: &Backend) -> Result {
    let url = b.url("nohup", "");
    let out = output(
        Command::new("nohup")
            .env_remove("COORD_URL")
            .env_remove("RUST_LOG")
            .args([super::BIN, "--url", &url, "lock", "nohup", "--"])
            .args(["sh", "-c", "kill -HUP $$; echo still here"]),
        Duration::from_secs(30),
    )?;
    expect_code(&out, 0, "nohup coord lock, command sends itself SIGHUP")?;
    ensure!(
        text(&out.stdout).contains("still here"),
        "the command did not survive its SIGHUP under nohup: {}",
        text(&out.stdout)
    );
    Ok(())
}

/// A port that takes no connection: its listener's backlog is full, so a connect hangs
/// as to a blackholed host (SYNs dropped). Keep the returned value alive while in use.
fn blackholed_port() -> Result<(std::net::TcpListener, Vec<std::net::TcpStream>, u16)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut filled = Vec::new();
    // The kernel completes connects into the backlog (128 by default) until it is full.
    for _ in 0..4096 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(stream) => filled.push(stream),
            Err(_) => return Ok((listener, filled, addr.port())),
        }
    }
    Err("the listener's backlog never filled".into())
}

/// A silent first member (a blackholed link) is passed over within the default connect
/// timeout: the connect reaches the live one (each member gets its share of the time).
pub fn a_silent_first_member_is_passed_over(b: &Backend) -> Result {
    let (_listener, _filled, port) = blackholed_port()?;
    let ns = coord_testkit::env::unique_namespace("cli-silent-member");
    let url = format!("{}://127.0.0.1:{port},{}/{ns}", b.name, b.hosts);
    let out = output(coord(&url).arg("session"), Duration::from_secs(40))?;
    expect_code(&out, 0, &format!("session on {url} (first member silent)"))
}
