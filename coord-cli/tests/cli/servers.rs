//! Cases on real servers that several processes share: exclusion across processes,
//! lock-delay, session loss, elections, config watches, the registry.

use super::*;

/// `coord lock --lock-delay`: a holder killed with SIGKILL hands over no earlier than
/// the delay after the kill (after its session expired, later still), and `coord
/// inspect` shows the waiter holding off meanwhile; a holder whose command exits
/// releases, and the next one (keeping a 30 s delay) runs at once.
pub(crate) fn lock_delay_after_a_killed_holder(b: &Backend) -> Result {
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
pub(crate) fn lock_delay_over_the_limit_is_a_usage_error(b: &Backend) -> Result {
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
pub(crate) fn lock_excludes_across_processes(b: &Backend) -> Result {
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
pub(crate) fn busy_and_timeout(b: &Backend) -> Result {
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
pub(crate) fn loss_stops_the_command(b: &Backend) -> Result {
    loss_stops(b, false)
}

/// The same for a leadership lost while `coord elect … -- CMD` runs it.
pub(crate) fn elect_loss_stops_the_command(b: &Backend) -> Result {
    loss_stops(b, true)
}

pub(crate) fn loss_stops(b: &Backend, elect: bool) -> Result {
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
pub(crate) fn kill_session(b: &Backend, process: &Child, acquired: &Value) -> Result {
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
pub(crate) fn elect_leader_observe(b: &Backend) -> Result {
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
pub(crate) fn config_watch_follows_and_ends_with_its_reader(b: &Backend) -> Result {
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
pub(crate) fn registry_register_list(b: &Backend) -> Result {
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
