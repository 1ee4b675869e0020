//! The recipes from the shell: semaphores and read/write locks around commands, queues,
//! counters, barriers, two-phase decisions, and the inspector — with Curator's and Go's
//! holders beside coord's.

use super::*;

/// Spawns `coord --json ARGS -- sh -c SCRIPT` with standard error piped for events.
fn spawn_json(url: &str, args: &[&str], script: &str) -> Result<Child> {
    coord(url)
        .arg("--json")
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failed::from(e.to_string()))
}

/// Appends `start` to `log`, waits for `go`, appends `end`.
fn holding_script(log: &Path, go: &Path) -> String {
    format!(
        r#"echo "start $COORD_FENCING_TOKEN" >> {log}; while [ ! -e {go} ]; do sleep 0.05; done; echo "end $COORD_FENCING_TOKEN" >> {log}"#,
        log = log.display(),
        go = go.display(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `coord inspect --json PREFIX`, one object per recipe.
fn inspect(url: &str, prefix: &str) -> Result<Vec<Value>> {
    let out = output(
        coord(url).args(["--json", "inspect", prefix]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "inspect")?;
    json_lines(&out.stdout)
}

/// `lock -n 2` admits two commands at once, not three; the third runs once one ends;
/// `inspect` shows the two leases held of 2 and the third waiting.
pub fn semaphore_admits_n(b: &Backend) -> Result {
    let url = b.url("sem", "");
    let dir = tempdir()?;
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let script = holding_script(&log, &go);
    let mut first = spawn_json(&url, &["lock", "-n", "2", "--identity", "alpha", "pool"], &script)?;
    let mut second = spawn_json(&url, &["lock", "-n", "2", "pool"], &script)?;
    Events::of(&mut first)?.until("acquired", Duration::from_secs(20))?;
    Events::of(&mut second)?.until("acquired", Duration::from_secs(20))?;
    let mut third = spawn_json(&url, &["lock", "-n", "2", "pool"], &script)?;
    let waiting = Events::of(&mut third)?.until("waiting", Duration::from_secs(20))?;
    ensure!(waiting["what"] == "semaphore lease", "waiting event {waiting}");
    ensure!(
        waiting["holder"]
            .as_str()
            .is_some_and(|h| h.contains("2 of 2 leases")),
        "the waiting line shows the leases out: {waiting}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while lines(&log).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    ensure!(
        lines(&log).len() == 2,
        "not two commands at once: {:?}",
        lines(&log)
    );
    let views = inspect(&url, "pool")?;
    let pool = views
        .iter()
        .find(|v| v["kind"] == "semaphore")
        .ok_or(format!("no semaphore in {views:?}"))?;
    ensure!(
        pool["permits"] == 2 && pool["holders"].as_array().map(Vec::len) == Some(2),
        "inspect: {pool}"
    );
    // Each lease names its holder: --identity, or host:pid by default.
    let holders = pool["holders"].as_array().cloned().unwrap_or_default();
    ensure!(
        holders.iter().any(|h| h["value"] == "alpha")
            && holders
                .iter()
                .any(|h| h["value"].as_str().is_some_and(|v| v.contains(':'))),
        "inspect does not name the lease holders: {pool}"
    );
    // The one waiter holds the acquirers' lock and a lease beyond the permits: shown once.
    ensure!(
        pool["waiters"].as_array().map(Vec::len) == Some(1),
        "inspect does not show the one waiter once: {pool}"
    );
    std::fs::write(&go, "").map_err(|e| e.to_string())?;
    for (p, what) in [(first, "first"), (second, "second"), (third, "third")] {
        expect_code(&finish(p, Duration::from_secs(30))?, 0, what)?;
    }
    let log = lines(&log);
    ensure!(log.len() == 6, "{log:?}");
    ensure!(
        log.iter()
            .all(|l| l.split(' ').nth(1).is_some_and(|t| t.parse::<u64>().is_ok())),
        "each command got its lease's COORD_FENCING_TOKEN: {log:?}"
    );
    ensure!(
        log[..2].iter().all(|l| l.starts_with("start")) && log[2].starts_with("end"),
        "the third started before a lease came back: {log:?}"
    );
    let out = output(
        coord(&url).args(["lock", "-n", "3", "--try", "pool", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "another count once no lease is held")?;
    Ok(())
}

/// `--read` commands run together; a `--write` waits for them, and a reader behind the
/// writer waits for it.
pub fn read_write_lock(b: &Backend) -> Result {
    let url = b.url("rw", "");
    let dir = tempdir()?;
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let script = holding_script(&log, &go);
    let mut r1 = spawn_json(&url, &["lock", "--read", "schema"], &script)?;
    let mut r2 = spawn_json(&url, &["lock", "--read", "schema"], &script)?;
    Events::of(&mut r1)?.until("acquired", Duration::from_secs(20))?;
    Events::of(&mut r2)?.until("acquired", Duration::from_secs(20))?;
    let mut w = spawn_json(
        &url,
        &["lock", "--write", "schema"],
        &format!("echo write >> {}", log.display()),
    )?;
    let waiting = Events::of(&mut w)?.until("waiting", Duration::from_secs(20))?;
    ensure!(waiting["what"] == "write lock", "waiting event {waiting}");
    let out = output(
        coord(&url).args(["lock", "--read", "--try", "schema", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 75, "a reader behind a queued writer")?;
    let views = inspect(&url, "schema")?;
    let rw = views
        .iter()
        .find(|v| v["kind"] == "rwlock")
        .ok_or(format!("no rwlock in {views:?}"))?;
    ensure!(
        rw["holders"].as_array().map(Vec::len) == Some(2),
        "two readers hold: {rw}"
    );
    ensure!(rw["waiters"][0]["role"] == "write", "the writer waits: {rw}");
    let identified = |list: &Value| {
        list.as_array().is_some_and(|ps| {
            ps.iter()
                .all(|p| p["value"].as_str().is_some_and(|v| v.contains(':')))
        })
    };
    ensure!(
        identified(&rw["holders"]) && identified(&rw["waiters"]),
        "each reader and writer says who it is (host:pid): {rw}"
    );
    std::fs::write(&go, "").map_err(|e| e.to_string())?;
    for (p, what) in [(r1, "reader"), (r2, "reader"), (w, "writer")] {
        expect_code(&finish(p, Duration::from_secs(30))?, 0, what)?;
    }
    let log = lines(&log);
    ensure!(
        log.last().map(String::as_str) == Some("write"),
        "the writer ran before the readers ended: {log:?}"
    );
    Ok(())
}

/// Queue, counter, barrier and two-phase decision commands, with their exit statuses.
pub fn recipes_one_shot(b: &Backend) -> Result {
    let url = b.url("recipes", "");
    let run = |args: &[&str], want: i32| -> Result<String> {
        let out = output(coord(&url).args(args), Duration::from_secs(20))?;
        expect_code(&out, want, &args.join(" "))?;
        Ok(text(&out.stdout).trim().to_owned())
    };
    run(&["queue", "push", "jobs", "one"], 0)?;
    run(&["queue", "push", "jobs", "two"], 0)?;
    ensure!(run(&["queue", "len", "jobs"], 0)? == "2", "len");
    run(&["queue", "push", "--max", "2", "jobs", "three"], 69)?;
    ensure!(run(&["queue", "take", "jobs"], 0)? == "one", "FIFO");
    let views = inspect(&url, "jobs")?;
    ensure!(
        views.iter().any(|v| v["kind"] == "queue" && v["depth"] == 1),
        "inspect depth: {views:?}"
    );
    let taken = run(&["--json", "queue", "take", "--try", "jobs"], 0)?;
    ensure!(taken.contains(r#""value":"two""#), "{taken}");
    run(&["queue", "take", "--try", "jobs"], 3)?;
    run(&["queue", "take", "--timeout", "1s", "jobs"], 124)?;

    ensure!(run(&["counter", "get", "visits"], 0)? == "0", "absent counter");
    ensure!(run(&["counter", "add", "visits", "5"], 0)? == "5", "add");
    ensure!(
        run(&["counter", "add", "visits", "-2"], 0)? == "3",
        "negative add"
    );
    run(&["counter", "set", "visits", "10"], 0)?;
    ensure!(run(&["counter", "get", "visits"], 0)? == "10", "set");

    run(&["barrier", "status", "freeze"], 3)?;
    run(&["barrier", "wait", "freeze"], 0)?;
    run(&["barrier", "raise", "freeze"], 0)?;
    run(&["barrier", "status", "freeze"], 0)?;
    run(&["barrier", "wait", "--timeout", "1s", "freeze"], 124)?;
    let waiter = coord(&url)
        .args(["barrier", "wait", "--timeout", "20s", "freeze"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(500));
    run(&["barrier", "remove", "freeze"], 0)?;
    expect_code(
        &finish(waiter, Duration::from_secs(20))?,
        0,
        "barrier wait released by remove",
    )?;

    run(&["two-phase", "decision", "orders/1"], 3)?;
    // The old name still works.
    run(&["txn", "decision", "orders/1"], 3)?;
    decide(&url, "orders/1")?;
    ensure!(
        run(&["two-phase", "decision", "orders/1"], 0)? == "commit",
        "decision"
    );
    let views = inspect(&url, "orders")?;
    ensure!(
        views
            .iter()
            .any(|v| v["kind"] == "two_phase"
                && v["decision"].as_str().is_some_and(|d| d.starts_with("commit"))),
        "inspect shows no decision: {views:?}"
    );
    Ok(())
}

/// Runs a two-phase commit with one participant voting commit, through the library.
fn decide(url: &str, name: &str) -> Result {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = coord::connect(url).await?;
        let txn = client.two_phase_commit(name)?;
        let voter = txn.clone();
        let vote = tokio::spawn(async move { voter.vote("p1", true, Duration::from_secs(10)).await });
        let decided = txn.coordinate(&["p1"], Duration::from_secs(10)).await?;
        let _ = vote.await;
        client.close().await?;
        coord::Result::Ok(decided)
    })
    .map_err(|e: coord::Error| e.to_string())?;
    Ok(())
}

/// A lock held by another library — a Curator `InterProcessMutex` node on ZooKeeper, a
/// Go `concurrency.Mutex` (`etcdctl lock`) on etcd — is shown by `inspect` as that
/// library's, and `coord lock --try` respects it.
pub fn inspect_shows_foreign_holders(b: &Backend) -> Result {
    let url = b.url("foreign", "");
    let namespace = url
        .rsplit_once('/')
        .map(|(_, ns)| ns.to_owned())
        .ok_or("no namespace")?;
    let foreign = match b.name {
        "zk" => Foreign::curator(&b.hosts, &format!("/{namespace}/locks/report"))?,
        _ => Foreign::etcdctl(&b.hosts, &format!("{namespace}/locks/report"))?,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let holder = loop {
        let views = inspect(&url, "report")?;
        if let Some(h) = views
            .iter()
            .find(|v| v["kind"] == "lock")
            .map(|v| v["holders"][0].clone())
        {
            break h;
        }
        ensure!(
            Instant::now() < deadline,
            "inspect never showed the foreign holder"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (origin, value) = match b.name {
        "zk" => ("curator", "10.1.2.3"),
        _ => ("concurrency", ""),
    };
    ensure!(
        holder["origin"] == origin && holder["value"] == value,
        "the foreign holder: {holder}"
    );
    let out = output(coord(&url).args(["inspect", "report"]), Duration::from_secs(20))?;
    let shown = text(&out.stdout);
    ensure!(
        shown.contains("lock report") && shown.contains(if b.name == "zk" { "Curator" } else { "Go" }),
        "inspect's text: {shown}"
    );
    let out = output(
        coord(&url).args(["lock", "--try", "report", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 75, "coord lock --try beside a foreign holder")?;
    drop(foreign);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = output(
            coord(&url).args(["lock", "--try", "report", "--", "true"]),
            Duration::from_secs(20),
        )?;
        if code(out.status) == 0 {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the lock stayed held after the foreign holder ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A holder from another library, released on drop.
enum Foreign {
    /// A ZooKeeper session holding a Curator-named node (ends with the runtime).
    Curator(
        #[allow(dead_code)] tokio::runtime::Runtime,
        #[allow(dead_code)] zookeeper_client::Client,
    ),
    /// `etcdctl lock`, which runs Go's `concurrency.Mutex`.
    Etcdctl(Child),
}

impl Foreign {
    /// The node Curator's `InterProcessMutex` makes: `_c_<random guid>-lock-<seq>`,
    /// ephemeral, holding the client's address.
    fn curator(hosts: &str, dir: &str) -> Result<Foreign> {
        use zookeeper_client as zk;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let client = rt
            .block_on(async {
                let client = zk::Client::connect(hosts).await?;
                client
                    .mkdir(dir, &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()))
                    .await?;
                let guid = "3f2a1b4c-5d6e-4f70-8192-a3b4c5d6e7f8";
                client
                    .create(
                        &format!("{dir}/_c_{guid}-lock-"),
                        b"10.1.2.3",
                        &zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all()),
                    )
                    .await?;
                Ok::<_, zk::Error>(client)
            })
            .map_err(|e| format!("cannot hold a Curator node: {e}"))?;
        Ok(Foreign::Curator(rt, client))
    }

    fn etcdctl(hosts: &str, name: &str) -> Result<Foreign> {
        let child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", hosts, "lock", name, "sleep", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run etcdctl: {e}"))?;
        Ok(Foreign::Etcdctl(child))
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        if let Foreign::Etcdctl(child) = self {
            // SIGINT: etcdctl releases its lock and revokes its lease.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

/// Bad recipe arguments are usage errors (2) before any request (the URL leads nowhere).
pub fn recipe_usage_errors() -> Result {
    for args in [
        &["lock", "-n", "0", "x", "--", "true"][..],
        &["lock", "--read", "--write", "x", "--", "true"],
        &["lock", "-n", "2", "--read", "x", "--", "true"],
        &["queue", "push", "--max", "0", "q", "x"],
        &["counter", "add", "c", "one"],
        &["queue", "take", "--try", "--timeout", "1s", "q"],
        &["inspect", "bad//prefix"],
    ] {
        let out = output(coord(super::NOWHERE).args(args), Duration::from_secs(20))?;
        expect_code(&out, 2, &args.join(" "))?;
    }
    Ok(())
}

/// `coord revoke` stops a `--revocable` holder's command and hands the lock to the next
/// waiter (exit 123); a holder that is not revocable keeps its lock; a free lock has
/// nobody to ask (exit 3).
pub fn revoke_stops_a_revocable_holder(b: &Backend) -> Result {
    let url = b.url("revoke", "");
    let dir = tempdir()?;
    let pidfile = dir.path().join("pid");
    let out = output(coord(&url).args(["revoke", "res"]), Duration::from_secs(20))?;
    expect_code(&out, 3, "revoke on a free lock")?;
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut holder = spawn_json(&url, &["lock", "--revocable", "res"], &script)?;
    let events = Events::of(&mut holder)?;
    let acquired = events.until("acquired", Duration::from_secs(20))?;
    let command: i32 = wait_for_file(&pidfile, Duration::from_secs(20))?
        .trim()
        .parse()
        .map_err(|_| "bad pid file")?;
    let ran = dir.path().join("ran");
    let mut waiter = spawn_json(&url, &["lock", "res"], &format!("touch {}", ran.display()))?;
    Events::of(&mut waiter)?.until("waiting", Duration::from_secs(20))?;
    let out = output(
        coord(&url).args(["--json", "revoke", "res"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 0, "revoke")?;
    let asked = json_lines(&out.stdout)?;
    ensure!(
        asked.first().is_some_and(|a| a["token"] == acquired["token"]),
        "revoke asked {asked:?}, holder {acquired}"
    );
    let revoked = events.until("revoked", Duration::from_secs(20))?;
    ensure!(revoked["name"] == "res", "{revoked}");
    expect_code(
        &finish(holder, Duration::from_secs(20))?,
        123,
        "the revoked holder",
    )?;
    ensure!(!alive(command), "the revoked holder's command still runs");
    expect_code(
        &finish(waiter, Duration::from_secs(20))?,
        0,
        "the waiter after the revocation",
    )?;
    ensure!(ran.exists(), "the waiter's command did not run");

    // Not revocable: asked, it keeps the lock.
    let (held, go) = (dir.path().join("held"), dir.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let keeper = spawn_json(&url, &["lock", "res"], &script)?;
    wait_for_file_exists(&held)?;
    let out = output(coord(&url).args(["revoke", "res"]), Duration::from_secs(20))?;
    expect_code(&out, 0, "revoke a holder that does not listen")?;
    let views = inspect(&url, "res")?;
    let asked = views
        .iter()
        .find(|v| v["kind"] == "lock")
        .map(|v| v["holders"][0].clone())
        .ok_or(format!("no lock in {views:?}"))?;
    ensure!(
        asked["revoke_requested"] == true,
        "inspect does not say the holder was asked to let go: {asked}"
    );
    let out = output(coord(&url).args(["inspect", "res"]), Duration::from_secs(20))?;
    ensure!(
        text(&out.stdout).contains("asked to let go") && !text(&out.stdout).contains("__REVOKE__"),
        "inspect shows the raw revocation mark: {}",
        text(&out.stdout)
    );
    std::thread::sleep(Duration::from_secs(1));
    let out = output(
        coord(&url).args(["lock", "--try", "res", "--", "true"]),
        Duration::from_secs(20),
    )?;
    expect_code(&out, 75, "a holder that is not revocable keeps its lock")?;
    std::fs::write(&go, "").map_err(|e| e.to_string())?;
    expect_code(
        &finish(keeper, Duration::from_secs(20))?,
        0,
        "the holder that kept its lock",
    )?;
    Ok(())
}

fn wait_for_file_exists(path: &Path) -> Result {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        ensure!(Instant::now() < deadline, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Every node (ZooKeeper) or key (etcd) under `namespace` on `b`'s server, read by the
/// server's own client, sorted.
fn server_keys(b: &Backend, namespace: &str) -> Result<Vec<String>> {
    if b.name == "etcd" {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &b.hosts, "get", "--prefix", "--keys-only"])
            .arg(format!("{namespace}/"))
            .output()
            .map_err(|e| format!("cannot run etcdctl: {e}"))?;
        ensure!(out.status.success(), "etcdctl get: {}", text(&out.stderr));
        let mut keys: Vec<String> = text(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        keys.sort();
        return Ok(keys);
    }
    use zookeeper_client as zk;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = zk::Client::connect(&b.hosts)
            .await
            .map_err(|e| format!("cannot connect to ZooKeeper: {e}"))?;
        let mut found = Vec::new();
        let mut dirs = vec![format!("/{namespace}")];
        while let Some(dir) = dirs.pop() {
            let children = match client.list_children(&dir).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(format!("list {dir}: {e}").into()),
            };
            for child in children {
                let path = format!("{dir}/{child}");
                found.push(path.clone());
                dirs.push(path);
            }
        }
        found.sort();
        Ok(found)
    })
}

/// The namespace of a test URL.
fn namespace_of(url: &str) -> String {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = path.split('?').next().unwrap_or(path);
    path.split_once('/').map_or("", |(_, ns)| ns).to_owned()
}

/// Nothing is left on the server at a clean exit: a health check (`coord session`)
/// creates nothing, and ten takes — plain, `--try` and `--timeout` — leave no receipt
/// (`NAME/taken/…`) behind: each `coord` finishes its cleanups before it exits.
pub fn nothing_left_behind(b: &Backend) -> Result {
    let url = b.url("left-behind", "");
    let namespace = namespace_of(&url);
    let out = output(coord(&url).arg("session"), Duration::from_secs(20))?;
    expect_code(&out, 0, "session")?;
    let after_session = server_keys(b, &namespace)?;
    ensure!(
        after_session.is_empty(),
        "coord session created {after_session:?}"
    );
    for n in 0..10 {
        let out = output(
            coord(&url).args(["queue", "push", "jobs", &format!("item-{n}")]),
            Duration::from_secs(20),
        )?;
        expect_code(&out, 0, "push")?;
    }
    // The look itself sees the namespace: the queue's items are there.
    let pushed = server_keys(b, &namespace)?;
    ensure!(
        pushed.iter().filter(|k| k.contains("jobs")).count() >= 10,
        "the server shows {pushed:?} after ten pushes"
    );
    for n in 0..10 {
        let mode: &[&str] = match n % 3 {
            0 => &[],
            1 => &["--try"],
            _ => &["--timeout", "10s"],
        };
        let out = output(
            coord(&url).args(["queue", "take"]).args(mode).arg("jobs"),
            Duration::from_secs(30),
        )?;
        expect_code(&out, 0, &format!("take {mode:?}"))?;
        ensure!(
            text(&out.stdout).trim() == format!("item-{n}"),
            "take {n} printed {:?}",
            text(&out.stdout)
        );
    }
    let receipts: Vec<String> = server_keys(b, &namespace)?
        .into_iter()
        .filter(|k| k.contains("/taken/"))
        .collect();
    ensure!(
        receipts.is_empty(),
        "receipts left behind by exited takers: {receipts:?}"
    );
    Ok(())
}

/// `inspect --json` prints the same recipe objects with and without `--watch` (which
/// adds a snapshot line before each set), so the help's `jq` filter works on both;
/// times are RFC 3339 and ages durations; coord's own service instances are coord's
/// layout; a waiter's progress line gives the holder's entry age from the server.
pub fn inspect_json_is_one_shape(b: &Backend) -> Result {
    let url = b.url("inspect-shape", "");
    let dir = tempdir()?;
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let script = holding_script(&log, &go);
    let mut holder = spawn_json(&url, &["lock", "report"], &script)?;
    Events::of(&mut holder)?.until("acquired", Duration::from_secs(20))?;
    let mut service = coord(&url)
        .args([
            "registry",
            "register",
            "api",
            "n1",
            "10.0.0.7:80",
            "--",
            "sleep",
            "60",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    // The holder's entry ages a little before the waiter reads it.
    std::thread::sleep(Duration::from_millis(1500));
    let mut waiter = spawn_json(&url, &["lock", "report"], "true")?;
    let waiting = Events::of(&mut waiter)?.until("waiting", Duration::from_secs(20))?;
    // ZooKeeper keeps each node's creation time; etcd keeps none for a key.
    let aged = b.name == "zk";
    ensure!(
        !aged || waiting["entry_age_ms"].as_u64().is_some_and(|ms| ms >= 1000),
        "the waiting line does not give the holder's entry age: {waiting}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let once = loop {
        let views = inspect(&url, "")?;
        if views.iter().any(|v| v["kind"] == "service") {
            break views;
        }
        ensure!(Instant::now() < deadline, "the instance never showed: {views:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let lock = once
        .iter()
        .find(|v| v["kind"] == "lock")
        .ok_or(format!("no lock in {once:?}"))?;
    let held = &lock["holders"][0];
    ensure!(
        (!aged
            || held["age_ms"].as_u64().is_some_and(|ms| ms < 3_600_000)
                && held["since"].as_str().is_some_and(|t| t.ends_with('Z')))
            && held.get("since_ms").is_none(),
        "times are not a time and a duration: {held}"
    );
    let api = once
        .iter()
        .find(|v| v["kind"] == "service")
        .ok_or(format!("no service in {once:?}"))?;
    ensure!(
        api["holders"][0]["origin"] == "coord",
        "coord's own instance is not coord's layout: {api}"
    );
    // --watch: a snapshot line, then the same objects.
    let watcher = coord(&url)
        .args(["--json", "inspect", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(1500));
    signal(watcher.id(), "-TERM")?;
    let out = finish(watcher, Duration::from_secs(20))?;
    expect_code(&out, 0, "inspect --watch stopped by SIGTERM")?;
    let lines = json_lines(&out.stdout)?;
    ensure!(
        lines
            .first()
            .is_some_and(|l| l["event"] == "snapshot" && l.get("kind").is_none()),
        "--watch does not start with a snapshot line: {lines:?}"
    );
    let watched_lock = lines
        .iter()
        .find(|l| l["kind"] == "lock")
        .ok_or(format!("--watch shows no lock: {lines:?}"))?;
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    };
    ensure!(
        keys(watched_lock) == keys(lock) && watched_lock["holders"][0]["token"] == held["token"],
        "--watch prints another shape: {watched_lock} vs {lock}"
    );
    std::fs::write(&go, "").map_err(|e| e.to_string())?;
    expect_code(&finish(holder, Duration::from_secs(30))?, 0, "holder")?;
    expect_code(&finish(waiter, Duration::from_secs(30))?, 0, "waiter")?;
    signal(service.id(), "-TERM")?;
    let _ = service.wait();
    Ok(())
}
