//! Exit statuses and the one-sentence failures behind them.
//!
//! A script tells outcomes apart by status alone; the table is also in `coord --help`.

use std::process::ExitCode;

use coord::{Error, ErrorKind};

/// A failure with no status of its own (e.g. a value that is not what was asked for).
pub const FAILED: u8 = 1;
/// Bad arguments, URL, name or value: fix the command line.
pub const USAGE: u8 = 2;
/// No such key, no leader.
pub const NOT_FOUND: u8 = 3;
/// A compare-and-set found another version, a guarded write was fenced, or the
/// instance id is registered by someone else.
pub const CONFLICT: u8 = 4;
/// The servers cannot be reached, or the session could not be kept.
pub const UNAVAILABLE: u8 = 69;
/// Standard output was closed while streaming (as a shell reports death by SIGPIPE).
pub const BROKEN_PIPE: u8 = 141;
/// `--try`, and the lock is held elsewhere: try again later.
pub const BUSY: u8 = 75;
/// Wrong credentials, or not allowed.
pub const PERMISSION: u8 = 77;
/// `coord lock --revocable`: someone asked for the lock (`coord revoke`); the command
/// was stopped and the lock released.
pub const REVOKED: u8 = 123;
/// `--timeout` passed, or the servers did not answer in time.
pub const TIMEOUT: u8 = 124;
/// The lock or leadership was lost while the command ran; the command was stopped.
pub const LOST: u8 = 125;
/// The command was found but could not be started.
pub const CANNOT_RUN: u8 = 126;
/// The command was not found.
pub const NOT_RUNNABLE: u8 = 127;

/// The table shown after `coord --help` (a macro, so that it can be `concat!`ed).
macro_rules! table {
    () => {
        "\
Exit status:
  0    success (lock, elect, register with a command: the command's own status;
       128+N when it died of signal N)
  1    other failure
  2    usage: bad arguments, URL, name or value
  3    not found: no such key, no leader, no holder (revoke), empty queue
       (queue take --try), no decision yet (txn decision)
  4    conflict: compare-and-set saw another version, fenced, id taken
  69   unavailable: servers unreachable, session not kept, queue full
       (queue push --max)
  75   busy: --try and the lock is held elsewhere
  77   permission denied: wrong credentials or not allowed
  123  revoked: lock --revocable was asked to let go (coord revoke); the command
       was stopped and the lock released
  124  timed out: --timeout passed, or no answer in time
  125  lost: the lock or leadership was lost while the command ran; it was stopped
  126  the command could not be started
  127  the command was not found
  128+N  coord itself was stopped by signal N while connecting or waiting
       (141: standard output closed while streaming). A command run under
       lock, elect or register exits with its own status, which may be any
       of these numbers too; holding without a command, elect and register
       exit 0 when stopped by a signal"
    };
}
pub(crate) use table;

#[cfg(test)]
const TABLE: &str = table!();

/// A failure: the status to exit with and one sentence saying what to do.
#[derive(Debug)]
pub struct Failure {
    /// The exit status.
    pub code: u8,
    /// What went wrong and what to do, for standard error.
    pub message: String,
    /// The error's kind name, for `--json`.
    pub kind: &'static str,
}

impl Failure {
    /// A failure with its own status.
    pub fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            kind,
        }
    }

    /// A usage failure.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, "usage", message)
    }

    /// A failure while connecting: a connection that times out is an unreachable server.
    pub fn connecting(e: Error) -> Failure {
        let mut f = Failure::from(e);
        if f.code == TIMEOUT {
            f.code = UNAVAILABLE;
        }
        f
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e.kind() {
            ErrorKind::InvalidArgument | ErrorKind::ConfigInvalid | ErrorKind::Unsupported => USAGE,
            ErrorKind::NotFound => NOT_FOUND,
            ErrorKind::VersionMismatch | ErrorKind::Fenced | ErrorKind::AlreadyExists => CONFLICT,
            ErrorKind::Unavailable | ErrorKind::SessionLost | ErrorKind::Closed => UNAVAILABLE,
            ErrorKind::Timeout => TIMEOUT,
            ErrorKind::PermissionDenied => PERMISSION,
            _ => FAILED,
        };
        let mut message = e.to_string();
        if e.outcome_unknown() {
            message.push_str(" (the write may have been applied: read it back before retrying)");
        }
        Failure {
            code,
            message,
            kind: e.kind().as_str(),
        }
    }
}

/// The status for a finished command: its own code, or 128+N for signal N.
pub fn of_child(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt as _;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => i32::from(FAILED),
    };
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(FAILED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_documented_statuses() {
        let cases = [
            (ErrorKind::InvalidArgument, USAGE),
            (ErrorKind::ConfigInvalid, USAGE),
            (ErrorKind::NotFound, NOT_FOUND),
            (ErrorKind::VersionMismatch, CONFLICT),
            (ErrorKind::Fenced, CONFLICT),
            (ErrorKind::Unavailable, UNAVAILABLE),
            (ErrorKind::Timeout, TIMEOUT),
            (ErrorKind::PermissionDenied, PERMISSION),
            (ErrorKind::Unexpected, FAILED),
        ];
        for (kind, code) in cases {
            assert_eq!(Failure::from(Error::new(kind, "x")).code, code, "{kind:?}");
            assert!(
                TABLE.contains(&format!("  {code} ")),
                "{code} missing from the table"
            );
        }
        assert_eq!(
            Failure::connecting(Error::new(ErrorKind::Timeout, "x")).code,
            UNAVAILABLE
        );
    }

    #[test]
    fn unknown_outcomes_say_so() {
        let e = Error::new(ErrorKind::Unavailable, "connection lost").with_outcome_unknown(true);
        assert!(Failure::from(e).message.contains("may have been applied"));
    }
}
