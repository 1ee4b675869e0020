//! Cases that need no server: help, usage errors, connection errors.

use super::*;

pub(crate) fn help_reads_well() -> Result {
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
pub(crate) const NOWHERE: &str = "zk://127.0.0.1:1/x?connect_timeout=60s";

pub(crate) fn usage_and_connection_errors() -> Result {
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
pub(crate) fn connect_errors_say_which() -> Result {
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
pub(crate) fn other_backends_port_is_named(b: &Backend) -> Result {
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
