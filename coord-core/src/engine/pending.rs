//! Background cleanups a client owes the server (a queue take's receipt deleted, its
//! taker lock released), tracked so that [`Client::close`](crate::Client::close) can
//! finish them before it ends the session.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

/// The cleanups under way.
#[derive(Debug)]
pub(crate) struct Pending {
    count: watch::Sender<usize>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            count: watch::Sender::new(0),
        }
    }
}

/// Counts a cleanup as done when dropped (finished or cancelled with the runtime).
struct Done(watch::Sender<usize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Pending {
    /// Runs `cleanup` on a task of its own, counted until it ends.
    pub(crate) fn spawn(&self, cleanup: impl Future<Output = ()> + Send + 'static) {
        self.count.send_modify(|n| *n += 1);
        let done = Done(self.count.clone());
        tokio::spawn(
            async move {
                let _done = done;
                cleanup.await;
            }
            .in_current_span(),
        );
    }

    /// Waits until no cleanup is under way, at most `bound`; whether none is.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (the cleanups go on).
    pub(crate) async fn settled(&self, bound: Duration) -> bool {
        let mut count = self.count.subscribe();
        tokio::time::timeout(bound, count.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settled_waits_for_every_cleanup() {
        let pending = Pending::default();
        assert!(pending.settled(Duration::ZERO).await, "nothing pending");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        pending.spawn(async move {
            let _ = rx.await;
        });
        assert!(
            !pending.settled(Duration::from_millis(20)).await,
            "settled while one runs"
        );
        let _ = tx.send(());
        assert!(pending.settled(Duration::from_secs(5)).await);
    }
}
