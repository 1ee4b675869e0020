//! `coord lock` writing to PostgreSQL through the SQL gate with `psql`, as the README
//! shows it: a holder whose `coord` is paused (SIGSTOP) past its session while its
//! command goes on is refused once the next holder has written — and, the negative
//! control, overwrites the next holder's row when the same script skips the gate.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::{
    Backend, Events, Result, SESSION_TIMEOUT, coord, expect_code, finish, output, signal, tempdir, text,
};

/// The README's gated write, as a psql script: the gate's statement, then the work, in
/// one transaction; `\gset` fails the script when the gate returns no row (fenced).
pub const GATED_SQL: &str = r#"BEGIN;
INSERT INTO coord_fences (resource, token) VALUES (:'resource', :token)
  ON CONFLICT (resource) DO UPDATE SET token = excluded.token
  WHERE coord_fences.token <= excluded.token
  RETURNING token \gset
INSERT INTO invoices (batch, owner) VALUES (:'resource', :'owner')
  ON CONFLICT (batch) DO UPDATE SET owner = excluded.owner;
COMMIT;
"#;

/// The same write without the gate.
const UNGATED_SQL: &str = r#"BEGIN;
INSERT INTO invoices (batch, owner) VALUES (:'resource', :'owner')
  ON CONFLICT (batch) DO UPDATE SET owner = excluded.owner;
COMMIT;
"#;

fn psql(pg: &str, args: &[&str]) -> Result<String> {
    let out = Command::new("psql")
        .args([pg, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run psql (Debian package postgresql-client): {e}"))?;
    ensure!(out.status.success(), "psql {args:?}: {}", text(&out.stderr));
    Ok(text(&out.stdout).trim().to_owned())
}

pub fn a_paused_coord_is_fenced_at_postgres(b: &Backend, pg: &str) -> Result {
    psql(
        pg,
        &[
            "-c",
            "CREATE TABLE IF NOT EXISTS coord_fences (resource TEXT PRIMARY KEY NOT NULL, token BIGINT NOT NULL)",
            "-c",
            "CREATE TABLE IF NOT EXISTS invoices (batch TEXT PRIMARY KEY, owner TEXT NOT NULL)",
        ],
    )?;
    let dir = tempdir()?;
    for gated in [true, false] {
        let script = dir.path().join(if gated { "gated.sql" } else { "ungated.sql" });
        std::fs::write(&script, if gated { GATED_SQL } else { UNGATED_SQL }).map_err(|e| e.to_string())?;
        let options = coord_testkit::env::session_option(b.name, SESSION_TIMEOUT);
        let url = b.url("fence-pg", &options);
        // The resource (the lock's name) is this run's own: the database is shared.
        let name = coord_testkit::env::unique_namespace(&format!("invoices-{gated}"));
        let go = dir.path().join(format!("go-{gated}"));
        let rc = dir.path().join(format!("rc-{gated}"));
        let write = |owner: &str| {
            format!(
                "psql \"$PG\" -X -q -v ON_ERROR_STOP=1 -v resource=\"$COORD_FENCE_RESOURCE\" \
                 -v token=\"$COORD_FENCING_TOKEN\" -v owner={owner} -f {}",
                script.display()
            )
        };
        // A's command waits for the go, then writes; A's coord is paused meanwhile.
        let trace = dir.path().join(format!("trace-{gated}"));
        let a_command = format!(
            "for s in HUP INT TERM PIPE USR1; do trap \"echo got $s >> {trace}; exit 1\" $s; done; \
             echo started >> {trace}; while [ ! -f {go} ]; do sleep 0.05; done; echo go >> {trace}; {write}; echo $? > {rc}",
            trace = trace.display(),
            write = write("a"),
            go = go.display(),
            rc = rc.display()
        );
        let mut a = coord(&url)
            .env("PG", pg)
            .args(["--json", "lock", &name, "--", "sh", "-c", &a_command])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let events = Events::of(&mut a)?;
        let acquired = events.until("acquired", Duration::from_secs(20))?;
        // `acquired` comes before the command is started: pause coord only once it runs.
        super::wait_for_file(&trace, Duration::from_secs(20))?;
        let granted = acquired["session_timeout_ms"]
            .as_u64()
            .map_or(SESSION_TIMEOUT, Duration::from_millis);
        signal(a.id(), "-STOP")?;
        std::thread::sleep(granted * 2 + Duration::from_secs(1));
        // B: granted once A's session is gone; writes through the same script.
        let b_out = output(
            coord(&url).env("PG", pg).args([
                "lock",
                "--timeout",
                "30s",
                &name,
                "--",
                "sh",
                "-c",
                &write("b"),
            ]),
            Duration::from_secs(40),
        );
        let resumed = (|| {
            let b_out = b_out?;
            expect_code(&b_out, 0, "the next holder's write")?;
            std::fs::write(&go, "").map_err(|e| e.to_string())?;
            super::wait_for_file(&rc, Duration::from_secs(20))
        })();
        signal(a.id(), "-CONT")?;
        let _ = finish(a, Duration::from_secs(30))?;
        let resumed = resumed.map_err(|e| {
            format!(
                "{:?}; the paused coord wrote: {}; its command: {:?}",
                e.message(),
                events.rest(Duration::from_secs(1)),
                std::fs::read_to_string(&trace)
            )
        })?;
        let a_status: i32 = resumed.trim().parse().map_err(|_| "bad rc file")?;
        let owner = psql(
            pg,
            &[
                "-c",
                &format!("SELECT owner FROM invoices WHERE batch = '{name}'"),
            ],
        )?;
        if gated {
            ensure!(
                a_status == 3,
                "the paused holder's gated psql exited {a_status}, not 3 (fenced)"
            );
            ensure!(
                owner == "b",
                "the next holder's row was overwritten: owner {owner:?}"
            );
        } else {
            ensure!(a_status == 0, "the ungated psql exited {a_status}");
            ensure!(
                owner == "a",
                "without the gate the paused holder did not overwrite: owner {owner:?}"
            );
        }
    }
    Ok(())
}
