//! Running a command while something is held (a lock, a leadership, a registration),
//! stopping it when the hold is lost, and the signals coord itself answers to.

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::{self, Failure};
use crate::output::Out;
use crate::tree;

/// The signals that ask coord to stop: SIGINT and SIGTERM. coord is not killed by them
/// but cleans up (drops its queue entry, resigns, deregisters) and exits. SIGHUP keeps
/// its inherited disposition, so that `nohup coord …` and its command ignore it.
pub struct Stop {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Stop {
    pub fn install() -> Result<Stop, Failure> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::new(exit::FAILED, "io", format!("cannot handle signals: {e}")))
        };
        Ok(Stop {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
        })
    }

    /// The next stop signal.
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
        }
    }
}

/// The status a shell gives a process stopped by `signal`.
pub fn stopped_by(signal: Signal) -> ExitCode {
    ExitCode::from(128 + signal as u8)
}

/// What is held while the command runs, for messages.
pub struct Held<'a> {
    /// `lock`, `leadership`, `registration`.
    pub what: &'static str,
    pub name: &'a str,
}

/// Why a hold ended under a running command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The hold was lost (session ended, entry deleted).
    Lost,
    /// Someone asked the holder to let go (`coord revoke`), and it does.
    Revoked,
}

/// Runs `command` with `env` added to its environment until it exits, and returns its
/// status. If `ended` completes first — or had completed when the command exited — the
/// command gets SIGTERM, then SIGKILL after `grace`, and the result is the
/// [`exit::LOST`] failure (or [`exit::REVOKED`]). SIGTERM sent to coord is passed on to
/// the command, and SIGINT too unless the terminal sent it to both; coord keeps waiting
/// for the command.
///
/// # Process group
///
/// Unless coord runs in a terminal's foreground, the command runs in a process group of
/// its own, and every signal goes to that group: what the command started (a script's
/// children, a pipeline) is stopped with it, also when the command itself has already
/// exited after a loss — nothing it started runs on beside the next holder. In a
/// terminal's foreground the command stays in coord's group, so that it can read the
/// terminal and Ctrl-C and Ctrl-Z reach it as usual (as `timeout --foreground` does);
/// signals then go to the command's process only.
///
/// Nothing the command started outlives the hold: when the command exits — normally too
/// — what it left running (its process group, and every descendant orphaned meanwhile,
/// which coord adopts as the Linux child subreaper, also one that left the group) gets
/// SIGTERM, then SIGKILL after `grace`, and this returns only once all of it is gone:
/// the caller releases after that.
///
/// With [`Leftovers::WaitFor`] the hold lasts until what the command left running has
/// exited by itself (a loss still stops it).
///
/// The command's environment is coord's, with `COORD_URL` less its credentials (see
/// [`pass_url_to_commands`]). The command runs under a guard (see [`crate::guard`]),
/// which does the stopping and waiting above itself and exits only once nothing the
/// command started runs (coord sweeps after it all the same): if coord itself dies
/// (SIGKILL) at any point, everything below the guard — the command's group and what
/// left it — gets SIGTERM, then SIGKILL after `grace`.
pub async fn run_while_held(
    command: &[OsString],
    env: &[(&str, String)],
    held: Held<'_>,
    ended: impl Future<Output = Ending>,
    Stopping { grace, leftovers }: Stopping,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    let interactive = in_terminal_foreground();
    // Descendants the command orphans are re-parented to coord rather than to init, so
    // that coord can find and stop them when the command ends.
    tree::become_subreaper();
    let mut child = spawn(command, env, !interactive, Stopping { grace, leftovers })?;
    let target = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|pid| Target {
            pid: Pid::from_raw(pid),
            group: !interactive,
        });
    tokio::pin!(ended);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::new(exit::FAILED, "io", format!("cannot wait for the command: {e}")))?;
                // Lost before the command finished: its status does not count. (A
                // revocation that came as it finished changes nothing: it finished.)
                match futures::FutureExt::now_or_never(&mut ended) {
                    Some(Ending::Lost) => {}
                    None | Some(Ending::Revoked) => {
                        if leftovers == Leftovers::WaitFor {
                            // Held until what the command started has exited too, unless
                            // the hold ends first.
                            match wait_for_leftovers(target, &mut ended, stop).await {
                                None => return Ok(exit::of_child(status)),
                                Some(ending) => {
                                    out.notice(
                                        format!("the {} {:?} ended while the command's processes ran on; stopping them", held.what, held.name),
                                        json!({"event": "lost", "what": held.what, "name": held.name}),
                                    );
                                    sweep(target, tokio::time::Instant::now() + grace).await;
                                    return Err(match ending {
                                        Ending::Lost => lost_failure(&held),
                                        Ending::Revoked => revoked_failure(&held),
                                    });
                                }
                            }
                        }
                        // What the command left running goes before the release.
                        sweep(target, tokio::time::Instant::now() + grace).await;
                        return Ok(exit::of_child(status));
                    }
                }
                out.notice(
                    format!("the {} {:?} was lost before the command finished", held.what, held.name),
                    json!({"event": "lost", "what": held.what, "name": held.name}),
                );
                // What the command started may still run: stopped as the command would be.
                terminate(&mut child, target, grace).await;
                return Err(lost_failure(&held));
            }
            ending = &mut ended => {
                let (event, why) = match ending {
                    Ending::Lost => ("lost", "was lost"),
                    Ending::Revoked => ("revoked", "was asked for (coord revoke)"),
                };
                out.notice(
                    format!("the {} {:?} {why}; stopping the command (SIGTERM, SIGKILL after {})", held.what, held.name, humantime::format_duration(grace)),
                    json!({"event": event, "what": held.what, "name": held.name}),
                );
                terminate(&mut child, target, grace).await;
                return Err(match ending {
                    Ending::Lost => lost_failure(&held),
                    Ending::Revoked => revoked_failure(&held),
                });
            }
            signal = stop.next() => {
                // In the terminal's foreground, a Ctrl-C reached the command too.
                if signal != Signal::SIGINT || !interactive {
                    if let Some(target) = target {
                        target.signal(Some(signal));
                    }
                }
            }
        }
    }
}

fn revoked_failure(held: &Held<'_>) -> Failure {
    Failure::new(
        exit::REVOKED,
        "revoked",
        format!(
            "the {} {:?} was asked for; the command was stopped and the {} given up",
            held.what, held.name, held.what
        ),
    )
}

/// How the command and what it started are stopped.
#[derive(Debug, Clone, Copy)]
pub struct Stopping {
    /// SIGKILL follows SIGTERM after this long.
    pub grace: Duration,
    /// What becomes of what the command leaves running when it exits on its own.
    pub leftovers: Leftovers,
}

/// What becomes of the processes a command leaves running when it exits on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftovers {
    /// They get SIGTERM, then SIGKILL after the grace, before the release.
    Stop,
    /// The hold lasts until they have exited too (flock's behaviour: its lock lasts
    /// while any process holds the lock file open).
    WaitFor,
}

/// Waits until nothing the command started runs any more (its group is empty and
/// nothing coord adopted runs): `None`; or until the hold ends first: `Some(why)`. Stop
/// signals are passed on to what runs.
async fn wait_for_leftovers(
    target: Option<Target>,
    ended: &mut std::pin::Pin<&mut impl Future<Output = Ending>>,
    stop: &mut Stop,
) -> Option<Ending> {
    let group = target.filter(|t| t.group);
    loop {
        let running = tree::reap_children(None);
        let group_left = group.is_some_and(|g| g.signal(None));
        if !group_left && running.is_empty() {
            return None;
        }
        tokio::select! {
            ending = ended.as_mut() => return Some(ending),
            signal = stop.next() => {
                if let Some(g) = group {
                    g.signal(Some(signal));
                }
                for pid in running {
                    let _ = kill(pid, signal);
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

fn lost_failure(held: &Held<'_>) -> Failure {
    Failure::new(
        exit::LOST,
        "lost",
        format!(
            "the {} {:?} was lost while the command ran (session expired or the entry was deleted); the command was stopped",
            held.what, held.name
        ),
    )
}

/// Whether coord's process group is the terminal's foreground group: a Ctrl-C then
/// reached the command as well.
fn in_terminal_foreground() -> bool {
    nix::unistd::tcgetpgrp(std::io::stdin()).is_ok_and(|fg| fg == nix::unistd::getpgrp())
}

/// Where coord's signals to the command go.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Pid,
    /// The command leads a process group of its own (its id is `pid`): signals go to
    /// the whole group.
    group: bool,
}

impl Target {
    /// Sends `signal` (`None`: only checks); whether anything received it.
    fn signal(self, signal: Option<Signal>) -> bool {
        let to = if self.group {
            Pid::from_raw(-self.pid.as_raw())
        } else {
            self.pid
        };
        kill(to, signal).is_ok()
    }
}

/// Whether the command's program can be run (as a shell looks for it: a name with a
/// `/` as that path, another name along `PATH`), checked before anything is taken for
/// it: exit 127 when it is not found, 126 when it is found but not executable.
pub fn check_runnable(command: &[OsString]) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(program) = command.first() else {
        return Ok(());
    };
    let shown = program.to_string_lossy();
    let candidates: Vec<std::path::PathBuf> = if shown.contains('/') {
        vec![std::path::PathBuf::from(program)]
    } else {
        // Without PATH, the search path execvp uses.
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut found_but_not_executable = false;
    for candidate in candidates {
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(()),
            Ok(_) => found_but_not_executable = true,
            Err(_) => {}
        }
    }
    Err(if found_but_not_executable {
        Failure::new(
            exit::CANNOT_RUN,
            "cannot run",
            format!("cannot run {shown}: it is not an executable file; nothing was taken"),
        )
    } else {
        Failure::new(
            exit::NOT_RUNNABLE,
            "not found",
            format!("command not found: {shown}; nothing was taken"),
        )
    })
}

/// The `COORD_URL` a command run by coord gets: coord's own, without credentials.
static URL_FOR_COMMANDS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Gives the commands coord runs `url` as their `COORD_URL`, less any `user:password@`
/// (it is in coord's environment or command line, not theirs to pass on): a nested
/// `coord` finds the same backend, and must be given credentials of its own.
pub fn pass_url_to_commands(url: &str) {
    let _ = URL_FOR_COMMANDS.set(without_credentials(url));
}

fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_ends = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_ends);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://{}{tail}", &authority[at + 1..]),
        None => url.to_owned(),
    }
}

/// Starts `command` under its guard (see [`crate::guard`]), which stops it within
/// `grace` should coord die; directly if coord cannot find its own executable.
fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    own_group: bool,
    stopping: Stopping,
) -> Result<Child, Failure> {
    let Some((program, args)) = command.split_first() else {
        return Err(Failure::usage("no command given after --"));
    };
    // /proc/self/exe still runs this binary after an upgrade replaced its file.
    let me = if cfg!(target_os = "linux") {
        Ok(std::path::PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    };
    let mut cmd = match me {
        Ok(me) => {
            let mut cmd = Command::new(me);
            // `ps` shows `coord __coord-guard …`, not `/proc/self/exe …`.
            cmd.arg0("coord");
            cmd.args(crate::guard::args(
                stopping.grace,
                own_group,
                stopping.leftovers,
                command,
            ));
            cmd
        }
        Err(_) => {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        }
    };
    match URL_FOR_COMMANDS.get() {
        Some(url) => cmd.env("COORD_URL", url),
        None => cmd.env_remove("COORD_URL"),
    };
    // A command stops coord with `kill $COORD_PID` (its parent is the guard).
    cmd.env("COORD_PID", std::process::id().to_string());
    cmd.kill_on_drop(true);
    if own_group {
        cmd.process_group(0);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().map_err(|e| {
        let shown = program.to_string_lossy();
        if e.kind() == std::io::ErrorKind::NotFound {
            Failure::new(
                exit::NOT_RUNNABLE,
                "not found",
                format!("command not found: {shown}"),
            )
        } else {
            Failure::new(exit::CANNOT_RUN, "cannot run", format!("cannot run {shown}: {e}"))
        }
    })
}

/// SIGTERM, then SIGKILL to whatever of the command (its process group and what coord
/// adopted, see [`run_while_held`]) still runs after `grace`. Returns once the command
/// and all of that have exited.
async fn terminate(child: &mut Child, target: Option<Target>, grace: Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    if let Some(target) = target {
        target.signal(Some(Signal::SIGTERM));
    }
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    // The command (its guard) gets SIGKILL now if it still runs, and a moment to exit:
    // what it had adopted is coord's once it has, and the sweep finds it. What the
    // command started gets the rest of the grace, then SIGKILL too, whatever state the
    // command itself is stuck in.
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
    sweep(target, deadline).await;
    let _ = child.wait().await;
}

/// Stops what is left of the command once it has exited: its process group (when it
/// has one) and every process coord adopted get SIGTERM, and SIGKILL at `deadline` if
/// any still runs. Returns once none is left (or, should one survive SIGKILL — a process
/// in uninterruptible sleep — a second after that).
async fn sweep(target: Option<Target>, deadline: tokio::time::Instant) {
    let group = target.filter(|t| t.group);
    // Each process gets SIGTERM once, also one adopted during the grace (its parent
    // died meanwhile); at the deadline everything left gets SIGKILL, again on every
    // round, so that what is adopted after it gets it too.
    let mut termed: std::collections::HashSet<Pid> = std::collections::HashSet::new();
    let mut group_termed = false;
    let mut left = |signal: Signal| {
        let running = tree::reap_children(None);
        for &pid in &running {
            if signal == Signal::SIGKILL || termed.insert(pid) {
                let _ = kill(pid, signal);
            }
        }
        let group_left = match group {
            Some(g) if signal == Signal::SIGKILL || !group_termed => {
                group_termed = true;
                g.signal(Some(signal))
            }
            Some(g) => g.signal(None),
            None => false,
        };
        group_left || !running.is_empty()
    };
    if !left(Signal::SIGTERM) {
        return;
    }
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if !left(Signal::SIGTERM) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    let killed = tokio::time::Instant::now() + Duration::from_secs(1);
    while left(Signal::SIGKILL) && tokio::time::Instant::now() < killed {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits for `fut` unless a stop signal comes first (then `Err(signal)`); dropping `fut`
/// is how a wait is abandoned (coord's waits are cancel-safe).
pub async fn unless_stopped<T>(stop: &mut Stop, fut: impl Future<Output = T>) -> Result<T, Signal> {
    tokio::select! {
        v = fut => Ok(v),
        s = stop.next() => Err(s),
    }
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn credentials_are_dropped_from_the_commands_url() {
        for (url, want) in [
            (
                "etcd://app:s3cret@h1:2379,h2/ns?lease_ttl=5s",
                "etcd://h1:2379,h2/ns?lease_ttl=5s",
            ),
            ("zk://u:p@ss@h/ns", "zk://h/ns"),
            ("zk://h:2181/ns", "zk://h:2181/ns"),
            ("etcd+https://a:b@h", "etcd+https://h"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(without_credentials(url), want, "{url}");
        }
    }
}
