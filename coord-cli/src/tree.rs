//! The processes below this one, as Linux shows them in `/proc`: what coord and the
//! command's guard read to stop everything a command started, also what left its
//! process group or session (`setsid`, a double fork).
//!
//! Elsewhere than Linux every reading is empty: only process groups are stopped there.

use std::collections::{HashMap, HashSet};

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Makes this process the Linux child subreaper: a descendant whose parent exits is
/// re-parented to it, not to init, so that [`children`] keeps finding everything below
/// it. Best effort.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// This process's children now, from `/proc/self/task/*/children`.
pub fn children() -> Vec<Pid> {
    let mut pids = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return pids;
    };
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .map(Pid::from_raw),
            );
        }
    }
    pids
}

/// Reaps the children that have exited, except `spared` (a child someone else waits
/// for); returns those still running (`spared` among them while it runs). When one was
/// reaped the children are read again: a subreaper's child that exits hands its own
/// children to it before it can be reaped, and they must not be missed.
pub fn reap_children(spared: Option<Pid>) -> Vec<Pid> {
    loop {
        let now = children();
        let mut reaped = false;
        let running: Vec<Pid> = now
            .into_iter()
            .filter(|&pid| {
                if Some(pid) == spared {
                    return true;
                }
                match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => true,
                    Ok(_) => {
                        reaped = true;
                        false
                    }
                    // Not ours (any more): someone else reaped it.
                    Err(_) => false,
                }
            })
            .collect();
        if !reaped {
            return running;
        }
    }
}

/// A process below this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Proc {
    pub pid: Pid,
    /// Its process group.
    pub group: Pid,
}

/// Every running (not exited) process below `root`, from one read of `/proc/*/stat`.
pub fn descendants(root: Pid) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // Every process by its parent, and whether it runs: a zombie runs on when its main
    // thread exited before its other threads (`pthread_exit`), and what is below a
    // zombie is walked all the same.
    let mut below: HashMap<i32, Vec<(Proc, bool)>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, parent, group)) = parse_stat(&stat) {
            let runs = match state {
                'Z' | 'X' => threads(&entry.path()) > 1,
                _ => true,
            };
            below.entry(parent).or_default().push((
                Proc {
                    pid: Pid::from_raw(pid),
                    group: Pid::from_raw(group),
                },
                runs,
            ));
        }
    }
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let mut next = vec![root.as_raw()];
    while let Some(pid) = next.pop() {
        for (p, runs) in below.remove(&pid).unwrap_or_default() {
            if seen.insert(p.pid) {
                next.push(p.pid.as_raw());
                if runs {
                    found.push(p);
                }
            }
        }
    }
    found
}

/// How many threads the process at `/proc/PID` has.
fn threads(proc_dir: &std::path::Path) -> usize {
    std::fs::read_dir(proc_dir.join("task")).map_or(0, |tasks| tasks.count())
}

/// State, parent and process group from a `/proc/PID/stat` line. The command name
/// between parentheses may hold anything, `)` too: the fields start after the last one.
fn parse_stat(stat: &str) -> Option<(char, i32, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, parent, group))
}

/// Whether this process ignores `signal` (as `nohup` makes it ignore SIGHUP): the
/// `SigIgn` mask of `/proc/self/status`. An ignored signal stays ignored across exec,
/// a handled one does not, so a process that wants its children to keep ignoring a
/// signal must not handle it.
pub fn ignores(signal: nix::sys::signal::Signal) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1u64 << (signal as i32 - 1)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_come_after_the_last_parenthesis() {
        assert_eq!(parse_stat("42 (a) b (c)) S 7 42 42 0 -1"), Some(('S', 7, 42)));
        assert_eq!(parse_stat("42 (sh) Z 1 3 3"), Some(('Z', 1, 3)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_below_its_parent() {
        let me = Pid::this();
        let parent = nix::unistd::getppid();
        assert!(descendants(parent).iter().any(|p| p.pid == me));
    }
}
