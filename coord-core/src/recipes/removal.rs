//! Guaranteed removal, written once: a session-bound node or key that must go is deleted
//! attempt after attempt, with a jittered backoff, until the server confirms it is gone
//! or the session it belongs to has ended (and took it along). Curator's `guaranteed()`
//! delete; used by lock and election contenders and by registrations.

use std::time::Duration;

use tokio::sync::watch;

use crate::error::{ErrorKind, Result};
use crate::raw::Backoff;
use crate::session::{SessionState, SessionStatus};

/// Whether session `generation` is over according to `status`.
pub(crate) fn over(status: SessionStatus, generation: u64) -> bool {
    status.generation != generation || matches!(status.state, SessionState::Lost | SessionState::Closed)
}

/// Resolves once session `generation` is over.
pub(crate) async fn ended(session: &mut watch::Receiver<SessionStatus>, generation: u64) {
    // An error means the backend is gone: so is the session.
    let _ = session.wait_for(|s| over(*s, generation)).await;
}

/// Whether the server refused the delete for a reason retrying cannot change.
pub(crate) fn refused(e: &crate::error::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::PermissionDenied
            | ErrorKind::InvalidArgument
            | ErrorKind::ConfigInvalid
            | ErrorKind::Unsupported
    )
}

/// Runs `attempt` (one delete that is `Ok` once the thing is gone, including when it
/// already was) until it succeeds, fails with an error retrying cannot help, or session
/// `generation` ends. `what` names the thing in logs.
///
/// # Errors
///
/// Only a refusal retrying cannot change (`PermissionDenied`, `InvalidArgument`,
/// `ConfigInvalid`, `Unsupported`); the thing then goes when its session ends.
///
/// # Cancel safety
///
/// If dropped, the thing may remain until its session ends.
pub(crate) async fn until_gone<F, Fut>(
    mut session: watch::Receiver<SessionStatus>,
    generation: u64,
    what: &str,
    mut attempt: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        if over(*session.borrow_and_update(), generation) {
            return Ok(());
        }
        let result = tokio::select! {
            r = attempt() => r,
            _ = ended(&mut session, generation) => return Ok(()),
        };
        match result {
            Ok(()) => return Ok(()),
            // Closing ended the session, and everything bound to it.
            Err(e) if e.kind() == ErrorKind::Closed => return Ok(()),
            // A delete is idempotent: only a refusal retrying cannot change ends the
            // attempts (a transport error the client calls permanent may pass).
            Err(e) if refused(&e) => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, what, "coord.removal_retry");
                tokio::select! {
                    _ = backoff.wait() => {}
                    _ = ended(&mut session, generation) => return Ok(()),
                }
            }
        }
    }
}
