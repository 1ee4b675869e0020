//! `coord lock`'s and the other commands' behaviour around the command they run, and
//! their JSON, on every backend.

use super::*;

/// The command runs with the token and the lock's name in its environment; coord exits
/// with its status; the JSON event names the same token.
pub(crate) fn lock_runs_command_with_token(b: &Backend) -> Result {
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
pub(crate) fn stop_reaches_the_commands_children(b: &Backend) -> Result {
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
pub(crate) fn command_leaves_nothing_running(b: &Backend) -> Result {
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
pub(crate) fn killed_coord_stops_its_command(b: &Backend) -> Result {
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
pub(crate) fn wait_for_children_keeps_the_lock(b: &Backend) -> Result {
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
pub(crate) fn nested_coord_gets_the_url(b: &Backend) -> Result {
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
pub(crate) fn lock_modes_refuse_each_other(b: &Backend) -> Result {
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
pub(crate) fn command_in_a_terminal_reads_it(b: &Backend) -> Result {
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
pub(crate) fn config_json(b: &Backend) -> Result {
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
pub(crate) fn session_json(b: &Backend) -> Result {
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
