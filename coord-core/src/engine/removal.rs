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

/// A future that runs in place while awaited and, if dropped before it finished, goes on
/// in the background on the current runtime: a removal that must not stop halfway, with
/// no task spawned (and no thread hop) when it is simply awaited.
pub(crate) struct Detached<T: Send + 'static> {
    inner: Option<std::pin::Pin<Box<dyn Future<Output = T> + Send>>>,
}

impl<T: Send + 'static> Detached<T> {
    pub(crate) fn new(f: impl Future<Output = T> + Send + 'static) -> Self {
        Detached {
            inner: Some(Box::pin(f)),
        }
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = T;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        let Some(inner) = self.inner.as_mut() else {
            // Polled after it finished: never again ready.
            return std::task::Poll::Pending;
        };
        let out = inner.as_mut().poll(cx);
        if out.is_ready() {
            self.inner = None;
        }
        out
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let (Some(rest), Ok(rt)) = (self.inner.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_dropped_detached_future_finishes_in_the_background() {
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let fut = Detached::new({
            let done = done.clone();
            async move {
                let _ = rx.await;
                done.store(true, Ordering::SeqCst);
            }
        });
        // Polled once (pending), then dropped.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), fut)
                .await
                .is_err()
        );
        tx.send(()).expect("the detached future still listens");
        for _ in 0..100 {
            if done.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the dropped future did not finish in the background");
    }

    #[tokio::test]
    async fn an_awaited_detached_future_runs_in_place() {
        let here = std::thread::current().id();
        let ran_on = Detached::new(async { std::thread::current().id() }).await;
        assert_eq!(ran_on, here);
    }
}
