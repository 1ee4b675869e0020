//! One persistent recursive watch on a directory, followed across reconnects and
//! session loss — the loop the config and registry watches share. What a change means
//! (and what a snapshot is) is the [`DirFollower`]'s business.
//!
//! - A node event or a reconnect (changes during the outage may not be replayed) asks
//!   the follower for the events since what it has reported. On a reconnect the watch
//!   is first added again: the client library re-registers only one-shot watches when
//!   it resumes a session, not persistent ones. A read that fails is
//!   retried with backoff until it succeeds or the session ends, so a change is never
//!   dropped because the read after its notification failed.
//! - A terminal session state ends the watch with the session: the stream gets the
//!   follower's `Resync`, and once a new session is up the watch is armed again and the
//!   follower's fresh snapshot follows.
//! - A closed client ends the stream with `Closed`; a dropped stream ends the task.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use coord_core::raw::{Backoff, Counter};
use coord_core::{Error, ErrorKind, Result, SessionState};
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::session::Inner;

/// What a directory watch reports.
pub(crate) trait DirFollower: Send + 'static {
    /// The stream's item.
    type Event: Send + 'static;

    /// The events since the last report: after `event` (a node event under the
    /// directory), or after a reconnect (`None`).
    fn changed(
        &mut self,
        inner: &Inner,
        event: Option<&zk::WatchedEvent>,
    ) -> impl Future<Output = Result<Vec<Self::Event>>> + Send;

    /// A fresh snapshot after session loss; the follower's state restarts from it.
    fn resnapshot(&mut self, inner: &Inner) -> impl Future<Output = Result<Self::Event>> + Send;

    /// The event that reports a gap.
    fn resync() -> Self::Event;
}

/// Arms a persistent recursive watch on `dir` on the current session.
pub(crate) async fn arm(inner: &Inner, dir: &str) -> Result<zk::PersistentWatcher> {
    let dir = dir.to_owned();
    inner
        .call_mapped(Counter::WatchSet, "watch", false, |zk| async move {
            zk.watch(&dir, zk::AddWatchMode::PersistentRecursive).await
        })
        .await
}

/// Sends `first`, then follows `watcher` (armed on `dir` before `first` was read) with
/// `follower` until the stream is dropped or the client closed.
pub(crate) async fn follow<F: DirFollower>(
    inner: Arc<Inner>,
    dir: String,
    mut watcher: zk::PersistentWatcher,
    first: F::Event,
    mut follower: F,
    tx: mpsc::Sender<Result<F::Event>>,
) {
    if tx.send(Ok(first)).await.is_err() {
        return;
    }
    loop {
        // This session's watch, until the session ends.
        loop {
            let event = tokio::select! {
                e = watcher.changed() => e,
                _ = tx.closed() => return,
            };
            inner.stats.incr(Counter::WatchEvent);
            let node_event = match (event.event_type, event.session_state) {
                (zk::EventType::Session, zk::SessionState::Disconnected) => continue,
                (
                    zk::EventType::Session,
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly,
                ) => None,
                // Terminal: the watcher must not be polled again.
                (zk::EventType::Session, _) => break,
                _ => Some(&event),
            };
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
            let generation = inner.session.current().generation;
            // After a reconnect the watch is added again before the re-read: the client
            // library re-registers only one-shot watches with the server, so the
            // persistent one would otherwise go silent on the resumed session.
            let mut rearmed = None;
            let events = loop {
                let attempt = async {
                    if node_event.is_none() && rearmed.is_none() {
                        rearmed = Some(arm(&inner, &dir).await?);
                    }
                    follower.changed(&inner, node_event).await
                };
                match attempt.await {
                    Ok(events) => break Some(events),
                    Err(e) if e.kind() == ErrorKind::Closed => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, dir = %dir, "coord.zk.dir_watch_read_retry");
                        let status = inner.session.current();
                        if status.generation != generation || status.state == SessionState::Lost {
                            // The session ended: the gap is reported below.
                            break None;
                        }
                        tokio::select! {
                            _ = backoff.wait() => {}
                            _ = tx.closed() => return,
                        }
                    }
                }
            };
            if let Some(w) = rearmed {
                // The old watcher goes after the new one is in place: with a watch of the
                // same kind left on the path, dropping it sends the server nothing.
                watcher = w;
            }
            let Some(events) = events else { break };
            for ev in events {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
        }
        if inner.is_closed() {
            let _ = tx.send(Err(Error::closed())).await;
            return;
        }
        if tx.send(Ok(F::resync())).await.is_err() {
            return;
        }
        // Re-arm on the next session, then report a fresh snapshot.
        let mut rewatch_backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::select! {
                c = inner.session.connected() => if c.is_err() {
                    let _ = tx.send(Err(Error::closed())).await;
                    return;
                },
                _ = tx.closed() => return,
            }
            let again = match arm(&inner, &dir).await {
                Ok(w) => follower.resnapshot(&inner).await.map(|snap| (w, snap)),
                Err(e) => Err(e),
            };
            match again {
                Ok((w, snapshot)) => {
                    watcher = w;
                    if tx.send(Ok(snapshot)).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, dir = %dir, "coord.zk.dir_rewatch_failed");
                    rewatch_backoff.wait().await;
                }
            }
        }
    }
}
