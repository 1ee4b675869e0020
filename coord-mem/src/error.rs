//! The errors the in-memory cluster answers with, as a real server's would be mapped:
//! each says what happened and what to do. Faults injected by tests say so.

use std::time::Duration;

use coord_core::{Error, ErrorKind, FencingToken};

/// A request on a client whose link is cut (fault injected).
pub(crate) fn cut_off() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the in-memory client is cut off from its cluster (fault injected); retry after it reconnects",
    )
}

/// No answer within `deadline` on a blackholed link; a write's outcome is unknown.
pub(crate) fn no_answer(deadline: Duration, write: bool) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("no answer from the in-memory cluster within {deadline:?} (blackhole injected)"),
    )
    .with_outcome_unknown(write)
}

/// The reply of an applied request was lost; a write's outcome is unknown.
pub(crate) fn reply_lost(write: bool) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the reply from the in-memory cluster was lost (fault injected); retry",
    )
    .with_outcome_unknown(write)
}

/// The client's session was lost; the next one is on its way.
pub(crate) fn session_lost() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the session was lost; a new one is being established — retry",
    )
}

/// A request bound to a session the cluster no longer has.
pub(crate) fn session_expired() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the session expired; retry on the new session",
    )
}

/// A contender's key is gone.
pub(crate) fn entry_gone() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the contender's key is gone (its session ended, or it was deleted)",
    )
}

/// A write on a grant whose key is gone.
pub(crate) fn grant_lost() -> Error {
    Error::new(ErrorKind::Fenced, "the grant was lost; its key is gone")
}

/// A transaction fenced by a guard that is no longer held.
pub(crate) fn fenced(token: FencingToken) -> Error {
    Error::new(
        ErrorKind::Fenced,
        format!("the guard with token {token} is no longer held; nothing was written"),
    )
}

/// A registration whose id another live client holds.
pub(crate) fn instance_taken(key: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("instance {key:?} is registered by another live client"),
    )
}
