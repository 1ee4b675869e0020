//! The command's guard: a small `coord` process between coord and the command that
//! stops the command when coord dies.
//!
//! coord runs `coord __coord-guard PARENT GRACE_MS GROUP -- CMD…` instead of `CMD`. The
//! guard asks Linux for a signal when its parent dies (`PR_SET_PDEATHSIG`, kept across
//! exec by the kernel but not by every way of starting a process, hence a process of its
//! own), starts `CMD` in its own process group (the one coord made for the guard), and
//! exits with `CMD`'s status (128+N when a signal ended it, as a shell says). When coord
//! dies — SIGKILL, a crash — the guard stops everything in that group: SIGTERM, then
//! SIGKILL after GRACE_MS. So a killed coord's command does not keep running beside the
//! next holder (once the server has expired coord's session: never before GRACE_MS).
//!
//! Signals coord sends while it lives reach the command as before: to the whole group
//! (guard and command) — the guard then only waits — or, in a terminal's foreground,
//! to the guard, which passes them on.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getppid};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

/// The hidden first argument that makes `coord` a guard.
pub const ARG: &str = "__coord-guard";

/// The guard's arguments for `command`: coord's pid, the grace, whether the command has
/// a process group of its own.
pub fn args(grace: Duration, own_group: bool, command: &[OsString]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        ARG.into(),
        std::process::id().to_string().into(),
        grace.as_millis().to_string().into(),
        if own_group { "1" } else { "0" }.into(),
        "--".into(),
    ];
    args.extend(command.iter().cloned());
    args
}

/// The guard's `main`: `args` are what follows [`ARG`].
pub fn main(args: &[OsString]) -> ExitCode {
    let parsed = (|| {
        let parent: i32 = args.first()?.to_str()?.parse().ok()?;
        let grace: u64 = args.get(1)?.to_str()?.parse().ok()?;
        let own_group = args.get(2)? == "1";
        (args.get(3)? == "--").then_some(())?;
        let command = args.get(4..).filter(|c| !c.is_empty())?;
        Some((
            Pid::from_raw(parent),
            Duration::from_millis(grace),
            own_group,
            command,
        ))
    })();
    let Some((parent, grace, own_group, command)) = parsed else {
        eprintln!("coord: {ARG} is coord's own helper; it is not meant to be run by hand");
        return ExitCode::from(exit::USAGE);
    };
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    // coord may have died before the signal was asked for.
    if getppid() != parent {
        return ExitCode::from(exit::LOST);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("coord: cannot start the command's guard: {e}");
            return ExitCode::from(exit::CANNOT_RUN);
        }
    };
    runtime.block_on(guard(parent, grace, own_group, command))
}

async fn guard(parent: Pid, grace: Duration, own_group: bool, command: &[OsString]) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        return ExitCode::from(exit::USAGE);
    };
    let listen = |kind| signal(kind).ok();
    let (mut term, mut int, mut hup, mut quit) = (
        listen(SignalKind::terminate()),
        listen(SignalKind::interrupt()),
        listen(SignalKind::hangup()),
        listen(SignalKind::quit()),
    );
    let mut child = match tokio::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            let shown = program.to_string_lossy();
            return if e.kind() == std::io::ErrorKind::NotFound {
                eprintln!("coord: command not found: {shown}");
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
    loop {
        let signal = tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => exit::of_child(status),
                    Err(_) => ExitCode::from(exit::FAILED),
                };
            }
            _ = next(&mut term) => Signal::SIGTERM,
            _ = next(&mut int) => Signal::SIGINT,
            _ = next(&mut hup) => Signal::SIGHUP,
            _ = next(&mut quit) => Signal::SIGQUIT,
        };
        if getppid() != parent {
            // coord is gone: nothing will stop the command but this.
            stop_all(&mut child, pid, own_group, grace).await;
            return ExitCode::from(exit::LOST);
        }
        // With a group of its own the command got the signal from coord already; in a
        // terminal's foreground, SIGINT came from the terminal to every process.
        if !own_group && signal != Signal::SIGINT {
            if let Some(pid) = pid {
                let _ = kill(pid, signal);
            }
        }
    }
}

/// The next delivery of `s`; never, when its handler could not be installed.
async fn next(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// SIGTERM to the command (its whole group when it has one), SIGKILL after `grace`.
async fn stop_all(child: &mut tokio::process::Child, pid: Option<Pid>, own_group: bool, grace: Duration) {
    let to = if own_group {
        Some(Pid::from_raw(-nix::unistd::getpgrp().as_raw()))
    } else {
        pid
    };
    let Some(to) = to else { return };
    // The group includes the guard: it ignores SIGTERM now (its handler is installed).
    let deadline = tokio::time::Instant::now() + grace;
    let _ = kill(to, Signal::SIGTERM);
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    if own_group {
        // What the command started gets the whole grace too; then SIGKILL to the whole
        // group, the guard with it.
        tokio::time::sleep_until(deadline).await;
        let _ = kill(to, Signal::SIGKILL);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}
