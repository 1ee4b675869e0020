//! The command's guard: a small `coord` process between coord and the command that
//! stops the command, and everything it started, when coord dies.
//!
//! coord runs `coord __coord-guard PARENT GRACE_MS GROUP LEFTOVERS -- CMD…` instead of
//! `CMD`. The guard asks Linux for a signal when its parent dies (`PR_SET_PDEATHSIG`,
//! kept across exec by the kernel but not by every way of starting a process, hence a
//! process of its own; it also looks at its parent every 200 ms), becomes the child
//! subreaper (whatever `CMD` orphans — a double fork, a `setsid` daemon — is re-parented
//! to the guard, not to init), starts `CMD` and exits with `CMD`'s status (128+N when a
//! signal ended it, as a shell says) — but only once nothing `CMD` started runs any
//! more: with LEFTOVERS `stop` it stops what `CMD` left running (SIGTERM, SIGKILL after
//! GRACE_MS), with `wait` it waits for it to exit by itself.
//!
//! When coord dies — SIGKILL, a crash — at any point, also while the guard waits for
//! leftovers, the guard stops every process below it, inside `CMD`'s process group or
//! not: SIGTERM, then SIGKILL after GRACE_MS. So a killed coord's command does not keep
//! running beside the next holder (once the server has expired coord's session: never
//! before GRACE_MS).
//!
//! Signals coord sends while it lives reach the command as before: to the whole group
//! (guard and command; the guard passes them on to what left the group), or, in a
//! terminal's foreground, to the guard, which passes them on to `CMD`. A SIGTERM or
//! SIGINT that a process outside `CMD`'s tree sends the guard goes on to coord, as if
//! it had been sent to coord; what `CMD`'s own tree sends (`kill 0`) and every other
//! signal the group gets (`kill -USR1 0`) the guard survives and keeps. A signal the
//! guard was started ignoring (SIGHUP under `nohup`) it leaves alone, so that `CMD`
//! ignores it too.

use std::collections::HashSet;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getpgrp, getppid};
use tokio::sync::mpsc;

use crate::child::Leftovers;
use crate::{exit, tree};

/// The hidden first argument that makes `coord` a guard.
pub const ARG: &str = "__coord-guard";

/// The guard's arguments for `command`: coord's pid, the grace, whether the command has
/// a process group of its own, what becomes of what it leaves running.
pub fn args(grace: Duration, own_group: bool, leftovers: Leftovers, command: &[OsString]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        ARG.into(),
        std::process::id().to_string().into(),
        grace.as_millis().to_string().into(),
        if own_group { "1" } else { "0" }.into(),
        match leftovers {
            Leftovers::Stop => "stop",
            Leftovers::WaitFor => "wait",
        }
        .into(),
        "--".into(),
    ];
    args.extend(command.iter().cloned());
    args
}

/// What the guard was asked to do.
struct Orders<'a> {
    parent: Pid,
    grace: Duration,
    own_group: bool,
    leftovers: Leftovers,
    command: &'a [OsString],
}

/// The guard's `main`: `args` are what follows [`ARG`].
pub fn main(args: &[OsString]) -> ExitCode {
    let parsed = (|| {
        let parent: i32 = args.first()?.to_str()?.parse().ok()?;
        let grace: u64 = args.get(1)?.to_str()?.parse().ok()?;
        let own_group = args.get(2)? == "1";
        let leftovers = match args.get(3)?.to_str()? {
            "stop" => Leftovers::Stop,
            "wait" => Leftovers::WaitFor,
            _ => return None,
        };
        (args.get(4)? == "--").then_some(())?;
        let command = args.get(5..).filter(|c| !c.is_empty())?;
        Some(Orders {
            parent: Pid::from_raw(parent),
            grace: Duration::from_millis(grace),
            own_group,
            leftovers,
            command,
        })
    })();
    let Some(orders) = parsed else {
        eprintln!("coord: {ARG} is coord's own helper; it is not meant to be run by hand");
        return ExitCode::from(exit::USAGE);
    };
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    // coord may have died before the signal was asked for.
    if getppid() != orders.parent {
        return ExitCode::from(exit::LOST);
    }
    tree::become_subreaper();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("coord: cannot start the command's guard: {e}");
            return ExitCode::from(exit::CANNOT_RUN);
        }
    };
    runtime.block_on(guard(orders))
}

/// The signals that would end the guard by default and that it handles instead: a
/// signal sent to the command's group (`kill -USR1 0`, `pkill -f` matching the command
/// line the guard shares) must not end the guard — and with it the command. Faults
/// (SIGSEGV, …) are not among them; neither are the stop signals (the guard stops with
/// its job).
const ABSORBED: &[Signal] = &[
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGPIPE,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGIO,
    Signal::SIGPWR,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
];

/// A signal the guard received, and who sent it (`None`: the kernel, a terminal).
struct Received {
    signal: Signal,
    sender: Option<Pid>,
}

/// The signals the guard answers to, with their senders, from a thread of their own.
/// Those the guard was started ignoring stay ignored (see the module's docs).
fn listen() -> mpsc::UnboundedReceiver<Received> {
    use signal_hook::iterator::SignalsInfo;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    let (tx, rx) = mpsc::unbounded_channel();
    let wanted: Vec<i32> = ABSORBED
        .iter()
        .copied()
        .filter(|&s| !tree::ignores(s))
        .map(|s| s as i32)
        .collect();
    let Ok(mut signals) = SignalsInfo::<WithOrigin>::new(&wanted) else {
        return rx;
    };
    let _ = std::thread::Builder::new()
        .name("coord-guard-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let Ok(signal) = Signal::try_from(origin.signal) else {
                    continue;
                };
                let sender = origin
                    .process
                    .map(|p| Pid::from_raw(p.pid))
                    .filter(|p| p.as_raw() > 0);
                if tx.send(Received { signal, sender }).is_err() {
                    return;
                }
            }
        });
    rx
}

async fn guard(orders: Orders<'_>) -> ExitCode {
    let Some((program, args)) = orders.command.split_first() else {
        return ExitCode::from(exit::USAGE);
    };
    let mut signals = listen();
    let mut child = match tokio::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            let shown = program.to_string_lossy();
            return if e.kind() == std::io::ErrorKind::NotFound {
                if shown.contains('/') && std::path::Path::new(program).is_file() {
                    // The file is there: what is missing is the interpreter its `#!`
                    // line names (or a library its loader needs).
                    eprintln!(
                        "coord: cannot run {shown}: the interpreter on its #! line (or a library it needs) was not found"
                    );
                } else {
                    eprintln!("coord: command not found: {shown}");
                }
                ExitCode::from(exit::NOT_RUNNABLE)
            } else {
                eprintln!("coord: cannot run {shown}: {e}");
                ExitCode::from(exit::CANNOT_RUN)
            };
        }
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut look = tokio::time::interval(Duration::from_millis(200));
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            Some(got) = signals.recv() => {
                if orders.parent_is_gone() {
                    return orders.stop_everything().await;
                }
                orders.pass_on(&got, pid);
            }
            _ = look.tick() => {
                if orders.parent_is_gone() {
                    return orders.stop_everything().await;
                }
                // What the command orphans is the guard's to reap (the command itself
                // is waited for above).
                tree::reap_children(pid);
            }
        }
    };
    let code = match status {
        Ok(status) => exit::of_child(status),
        Err(_) => ExitCode::from(exit::FAILED),
    };
    match orders.leftovers {
        Leftovers::Stop => {
            stop_below(orders.grace).await;
        }
        Leftovers::WaitFor => loop {
            if tree::reap_children(None).is_empty() {
                break;
            }
            tokio::select! {
                Some(got) = signals.recv() => {
                    if orders.parent_is_gone() {
                        return orders.stop_everything().await;
                    }
                    orders.pass_on(&got, None);
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    if orders.parent_is_gone() {
                        return orders.stop_everything().await;
                    }
                }
            }
        },
    }
    code
}

impl Orders<'_> {
    fn parent_is_gone(&self) -> bool {
        getppid() != self.parent
    }

    /// coord is gone: nothing else will stop what runs below the guard.
    async fn stop_everything(&self) -> ExitCode {
        stop_below(self.grace).await;
        ExitCode::from(exit::LOST)
    }

    /// Passes on a signal while coord lives. From coord: to what coord's signal did not
    /// reach — what left the command's group, or, in a terminal's foreground (where
    /// coord signals the guard only), the command (`command`, while it runs) or else
    /// everything below the guard. From another process outside the command's tree (an
    /// operator's `kill` of the guard): SIGTERM and SIGINT, the signals coord stops on,
    /// go on to coord. From the command's own tree it is kept: it was sent to the group
    /// (`kill 0`, `trap 'kill 0' EXIT`), which got it already — to stop coord, a command
    /// signals `$COORD_PID`. From the kernel or a terminal: it reached every process it
    /// was meant for.
    fn pass_on(&self, got: &Received, command: Option<Pid>) {
        let Some(sender) = got.sender else { return };
        if sender == self.parent {
            if self.own_group {
                let group = getpgrp();
                for p in tree::descendants(Pid::this()) {
                    if p.group != group {
                        let _ = kill(p.pid, got.signal);
                    }
                }
            } else if let Some(command) = command {
                let _ = kill(command, got.signal);
            } else {
                for p in tree::descendants(Pid::this()) {
                    let _ = kill(p.pid, got.signal);
                }
            }
            return;
        }
        let stops_coord = matches!(got.signal, Signal::SIGTERM | Signal::SIGINT);
        if stops_coord && !tree::descendants(Pid::this()).iter().any(|p| p.pid == sender) {
            let _ = kill(self.parent, got.signal);
        }
    }
}

/// Stops every process below the guard: SIGTERM to each once (also to one that appears
/// meanwhile), SIGKILL to all that still run after `grace`. Returns once none runs (or,
/// should one survive SIGKILL — a process in uninterruptible sleep — a second after).
async fn stop_below(grace: Duration) {
    let me = Pid::this();
    let deadline = tokio::time::Instant::now() + grace;
    let mut termed = HashSet::new();
    loop {
        tree::reap_children(None);
        let below = tree::descendants(me);
        if below.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline + Duration::from_secs(1) {
            return;
        }
        for p in below {
            if now >= deadline {
                let _ = kill(p.pid, Signal::SIGKILL);
            } else if termed.insert(p.pid) {
                let _ = kill(p.pid, Signal::SIGTERM);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
