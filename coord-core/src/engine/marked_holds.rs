//! Lock-delay on a clean exit: the grants a client holds with a lock-delay, which
//! `Client::close` releases with their marks before it ends the session (so their
//! waiters need not hold off).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::raw::{Backend, QueueEntry, Ticket};

/// A client's grants held with a lock-delay, by id: what `Client::close` releases with
/// their marks before it ends the session.
pub(crate) type MarkedHolds = Arc<Mutex<std::collections::HashMap<u64, (Ticket, QueueEntry)>>>;

/// Ids of [`MarkedHolds`] entries.
pub(crate) static NEXT_MARKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Releases every grant in `holds` (one attempt each, at most `within` for all), with
/// its release mark; a release that does not get through leaves the grant to its
/// session's end.
pub(crate) async fn release_marked(backend: &dyn Backend, holds: &MarkedHolds, within: Duration) {
    let held: Vec<(Ticket, QueueEntry)> = holds
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .map(|(_, hold)| hold)
        .collect();
    if held.is_empty() {
        return;
    }
    let releases = futures::future::join_all(held.iter().map(|(ticket, own)| backend.release(ticket, own)));
    match tokio::time::timeout(within, releases).await {
        Ok(results) => {
            for e in results.into_iter().filter_map(Result::err) {
                tracing::debug!(error = %e, "coord.close_release_failed: the grant goes with the session");
            }
        }
        Err(_) => tracing::debug!("coord.close_releases_unfinished: the rest go with the session"),
    }
}

/// A grant's place in its client's [`MarkedHolds`]; it leaves it when removed.
pub(crate) struct Marked {
    pub(crate) holds: MarkedHolds,
    pub(crate) id: u64,
}

impl Drop for Marked {
    fn drop(&mut self) {
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}
