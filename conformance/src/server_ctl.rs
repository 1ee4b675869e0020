//! Server-side faults for servers started by coord's scripts: `scripts/server-ctl`
//! pauses a server process (SIGSTOP, then SIGCONT from a detached process) or kills it
//! (SIGKILL) and starts it again on the same port and data directory.

use std::path::PathBuf;
use std::time::Duration;

use coord_core::{Error, ErrorKind, Result};

/// Controls one server started by `scripts/test` or `scripts/{zk,etcd}-server`.
#[derive(Debug, Clone)]
pub struct ServerCtl {
    script: PathBuf,
    name: String,
}

impl ServerCtl {
    /// The server named by environment variable `var` (`COORD_TEST_ZK_SERVER=zk-test`,
    /// say: its name under `.coord-servers/`), or `None` when unset or empty.
    pub fn from_env(var: &str) -> Option<ServerCtl> {
        let name = std::env::var(var).ok().filter(|n| !n.trim().is_empty())?;
        Some(ServerCtl {
            script: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/server-ctl")),
            name: name.trim().to_owned(),
        })
    }

    /// Stops the server now and lets it continue after `duration`; returns at once.
    /// The continue is sent by a detached process, so it happens even if the caller
    /// dies first.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the script fails (no such server, say).
    ///
    /// # Cancel safety
    ///
    /// Once the script has started, the pause and the later continue happen whatever
    /// becomes of the caller.
    pub async fn pause(&self, duration: Duration) -> Result<()> {
        self.run(&["pause", &format!("{:.3}", duration.as_secs_f64())])
            .await
    }

    /// Kills the server (SIGKILL) and starts it again; returns once it answers.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the script fails (the server did not come back, say).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the script still runs to its end (the server comes back).
    pub async fn restart(&self) -> Result<()> {
        self.run(&["restart"]).await
    }

    async fn run(&self, args: &[&str]) -> Result<()> {
        let out = tokio::process::Command::new(&self.script)
            .arg(&self.name)
            .args(args)
            .output()
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot run {}: {e}", self.script.display()),
                )
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "server-ctl {} {} failed ({}): {}",
                self.name,
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ))
    }
}
