//! One directory watch shared by every stream of the client that watches the same
//! prefix: one server watch, one re-read per change, however many watch it (a fleet's
//! caches of one key are 1,000 streams on a handful of clients).
//!
//! - **Joining.** A stream that joins a running feed gets a snapshot no older than its
//!   call: the feed's next round reads everything again (as after a reconnect) and, at
//!   the consistent point that ends it, hands the joiner the follower's state as its
//!   first event; `watch` returns then. The streams already there get only what
//!   changed. A joiner not admitted within the request deadline starts a watch of its
//!   own (or fails `Timeout` while the connection is unavailable).
//! - **A slow reader holds up no one.** Each stream has a bounded queue of its own; a
//!   stream whose queue is full is dropped from the feed, and once its reader has made
//!   room it joins again with a `Resync` before its fresh snapshot — never a silent gap.
//! - **Lifetime.** The feed ends when its last stream is dropped (the follow task sees
//!   its joins channel close), or with the client (`Closed` to every stream).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use coord_core::{Error, Result};
use futures::stream::BoxStream;
use tokio::sync::mpsc;

/// Batches queued for one stream before it counts as not keeping up.
pub(crate) const STREAM_QUEUE: usize = 1024;

/// What a stream is fed: batches of events (a batch is a consistent state, kept
/// together by [`coord_core::raw::batched`]).
pub(crate) type Queue<E> = mpsc::Sender<Result<Vec<E>>>;

/// A stream asking to be fed.
pub(crate) struct Joiner<E> {
    queue: Queue<E>,
    /// It was dropped for not keeping up: its first batch starts with a `Resync`.
    after_gap: bool,
}

/// What every stream of a feed holds: the way to ask its follow task for a snapshot.
/// When the last one is dropped the joins channel closes and the task ends.
pub(crate) struct Feed<E> {
    joins: mpsc::UnboundedSender<Joiner<E>>,
}

/// The feeds of one client, by what they watch.
pub(crate) struct Feeds<E> {
    by_key: Mutex<HashMap<String, Weak<Feed<E>>>>,
}

impl<E> Default for Feeds<E> {
    fn default() -> Self {
        Feeds {
            by_key: Mutex::default(),
        }
    }
}

impl<E: Send + 'static> Feeds<E> {
    /// A new stream on the running feed of `key`, if there is one: it returns once the
    /// feed has read the state for its snapshot (its first event), so the snapshot is
    /// taken between the call and the return, as a watch of its own would be.
    ///
    /// The feed admits joiners at the end of its next consistent read. If none ends
    /// within `deadline` (a request's deadline): with the session `connected()` (a storm
    /// of writes keeps the feed from a consistent point), `None` — the caller starts a
    /// watch of its own, as without sharing; otherwise `Timeout`, as a watch's first
    /// request would end.
    ///
    /// # Errors
    ///
    /// `Closed` if the client closed meanwhile; `Timeout` as above.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a stream dropped before it is fed leaves the feed on its next send.
    pub(crate) async fn join(
        &self,
        key: &str,
        deadline: std::time::Duration,
        connected: impl Fn() -> bool,
    ) -> Option<Result<BoxStream<'static, Result<E>>>> {
        let feed = self
            .by_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .and_then(Weak::upgrade)?;
        let (queue, mut rx) = mpsc::channel(STREAM_QUEUE);
        feed.joins
            .send(Joiner {
                queue,
                after_gap: false,
            })
            .ok()?;
        let first = match tokio::time::timeout(deadline, rx.recv()).await {
            Ok(first) => first?,
            Err(_) if connected() => {
                tracing::debug!(
                    key,
                    "coord.zk.watch_join_slow: no consistent read in time; a watch of its own"
                );
                return None;
            }
            Err(_) => {
                return Some(Err(Error::new(
                    coord_core::ErrorKind::Timeout,
                    format!(
                        "no snapshot of {key:?} could be read within {deadline:?} (connection unavailable); retry"
                    ),
                )));
            }
        };
        Some(first.map(|first| {
            use futures::StreamExt as _;
            let rest = stream_of(rx, feed);
            Box::pin(futures::stream::iter(first.into_iter().map(Ok)).chain(rest))
                as BoxStream<'static, Result<E>>
        }))
    }

    /// Starts the feed of `key` with its first stream: returns that stream and the
    /// fan-out its follow task sends through.
    pub(crate) fn start(&self, key: &str) -> (BoxStream<'static, Result<E>>, Fanout<E>) {
        let (feed, stream, fanout) = new_feed();
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        by_key.retain(|_, f| f.strong_count() > 0);
        by_key.insert(key.to_owned(), Arc::downgrade(&feed));
        (stream, fanout)
    }
}

fn new_feed<E: Send + 'static>() -> (Arc<Feed<E>>, BoxStream<'static, Result<E>>, Fanout<E>) {
    let (joins, joins_rx) = mpsc::unbounded_channel();
    let rejoin = joins.downgrade();
    let feed = Arc::new(Feed { joins });
    let (queue, rx) = mpsc::channel(STREAM_QUEUE);
    let fanout = Fanout {
        live: vec![queue],
        pending: Vec::new(),
        admitting: Vec::new(),
        joins: joins_rx,
        rejoin,
    };
    (feed.clone(), stream_of(rx, feed), fanout)
}

/// A stream over `rx` that keeps `feed` alive as long as it is.
fn stream_of<E: Send + 'static>(
    rx: mpsc::Receiver<Result<Vec<E>>>,
    feed: Arc<Feed<E>>,
) -> BoxStream<'static, Result<E>> {
    use futures::StreamExt as _;
    Box::pin(coord_core::raw::batched(rx).map(move |item| {
        let _alive = &feed;
        item
    }))
}

/// The follow task's side: the streams it feeds and those waiting for a snapshot.
pub(crate) struct Fanout<E> {
    /// Fed every batch.
    live: Vec<Queue<E>>,
    /// Waiting for a read that starts after they joined.
    pending: Vec<Joiner<E>>,
    /// Fed the follower's state at the consistent point that ends the current round.
    admitting: Vec<Joiner<E>>,
    joins: mpsc::UnboundedReceiver<Joiner<E>>,
    /// For a stream dropped for not keeping up, to join again (weak: the streams'
    /// feeds alone keep the task alive).
    rejoin: mpsc::WeakUnboundedSender<Joiner<E>>,
}

impl<E: Clone + Send + 'static> Fanout<E> {
    /// Sends `batch` to every live stream; `false` once no stream is left at all.
    pub(crate) fn send(&mut self, batch: Vec<E>) -> bool {
        let rejoin = &self.rejoin;
        self.live.retain(|queue| offer(queue, rejoin, Ok(batch.clone())));
        self.alive()
    }

    /// Whether any stream is left (each holds the feed, which holds the joins channel
    /// open).
    fn alive(&self) -> bool {
        !self.joins.is_closed()
    }

    /// Whether streams wait for a fresh read (joiners that gave up are dropped).
    pub(crate) fn has_pending(&mut self) -> bool {
        while let Ok(j) = self.joins.try_recv() {
            self.pending.push(j);
        }
        self.pending.retain(|j| !j.queue.is_closed());
        !self.pending.is_empty()
    }

    /// A read starts now: the streams pending until now are fed its outcome.
    pub(crate) fn start_admitting(&mut self) {
        self.admitting.append(&mut self.pending);
    }

    /// A round ended without a consistent point (the session ended): its joiners wait
    /// for the next read, ahead of those who joined since.
    pub(crate) fn defer_admitting(&mut self) {
        let mut earlier = std::mem::take(&mut self.admitting);
        earlier.append(&mut self.pending);
        self.pending = earlier;
    }

    /// Feeds the streams admitted this round `snapshot` (the state at the consistent
    /// point just reached) as their first event; they are live from now on.
    pub(crate) fn admit(&mut self, snapshot: impl Fn() -> E, resync: impl Fn() -> E) {
        if self.admitting.is_empty() {
            return;
        }
        let snapshot = snapshot();
        for joiner in std::mem::take(&mut self.admitting) {
            let first = if joiner.after_gap {
                vec![resync(), snapshot.clone()]
            } else {
                vec![snapshot.clone()]
            };
            if offer(&joiner.queue, &self.rejoin, Ok(first)) {
                self.live.push(joiner.queue);
            }
        }
    }

    /// Ends every stream with `error`: those fed, those waiting for a snapshot, those
    /// asking to join again after falling behind (the joins channel is closed, so a
    /// rejoin still on its way gets `error` from its own task). A full queue gets it
    /// once its reader has made room.
    pub(crate) fn fail(&mut self, error: Error) {
        self.joins.close();
        while let Ok(j) = self.joins.try_recv() {
            self.pending.push(j);
        }
        let queues = self
            .live
            .drain(..)
            .chain(self.pending.drain(..).map(|j| j.queue))
            .chain(self.admitting.drain(..).map(|j| j.queue));
        for queue in queues {
            tell(queue, error.clone());
        }
    }

    /// Waits for a stream to join (`true`: it is pending) or for every stream to be
    /// gone (`false`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a join received is kept.
    pub(crate) async fn next_join(&mut self) -> bool {
        match self.joins.recv().await {
            Some(j) => {
                self.pending.push(j);
                true
            }
            None => false,
        }
    }

    /// Resolves once every stream is gone; joins meanwhile are kept pending.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub(crate) async fn gone(&mut self) {
        while self.next_join().await {}
    }
}

/// Ends `queue`'s stream with `error`, at once or once its reader has made room.
fn tell<E: Send + 'static>(queue: Queue<E>, error: Error) {
    if let Err(mpsc::error::TrySendError::Full(item)) = queue.try_send(Err(error)) {
        tokio::spawn(async move {
            let _ = queue.send(item).await;
        });
    }
}

/// Offers `item` to `queue`: `true` if it is queued; a full queue is dropped and joins
/// again (with a `Resync` first) once its reader made room; a closed one is dropped.
fn offer<E: Send + 'static>(
    queue: &Queue<E>,
    rejoin: &mpsc::WeakUnboundedSender<Joiner<E>>,
    item: Result<Vec<E>>,
) -> bool {
    match queue.try_send(item) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::debug!("coord.zk.watch_stream_lagging: resync once its reader catches up");
            if let Some(joins) = rejoin.upgrade() {
                let queue = queue.clone();
                tokio::spawn(async move {
                    // Room for the rejoin's first batch (only the feed sends on it).
                    if queue.reserve().await.is_ok()
                        && let Err(refused) = joins.send(Joiner {
                            queue,
                            after_gap: true,
                        })
                    {
                        // The feed failed meanwhile (the client closed): it ends every
                        // stream so.
                        tell(refused.0.queue, Error::closed());
                    }
                });
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coord_core::ConfigEvent;
    use futures::StreamExt as _;

    fn put(n: usize) -> ConfigEvent {
        ConfigEvent::Put(coord_core::Entry {
            key: "k".into(),
            value: n.to_string().into_bytes(),
            version: coord_core::raw::version(n as u64 + 1, 0),
        })
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_resyncs_and_holds_up_no_one() {
        let feeds = Feeds::default();
        let (mut slow, mut fan) = feeds.start("k");
        // A second stream, kept up to date.
        let joining = tokio::spawn({
            let feeds = std::sync::Arc::new(feeds);
            async move {
                let s = feeds.join("k", std::time::Duration::from_secs(10), || true).await;
                (feeds, s)
            }
        });
        assert!(fan.next_join().await);
        fan.start_admitting();
        fan.admit(|| ConfigEvent::Snapshot(Vec::new()), || ConfigEvent::Resync);
        let (_feeds, fast) = joining.await.unwrap();
        let mut fast = fast.unwrap().unwrap();
        assert!(matches!(fast.next().await, Some(Ok(ConfigEvent::Snapshot(_)))));
        // `slow` is not read: past its queue it is dropped from the feed, `fast` is not.
        for n in 0..STREAM_QUEUE + 10 {
            assert!(fan.send(vec![put(n)]));
            assert!(
                matches!(fast.next().await, Some(Ok(ConfigEvent::Put(_)))),
                "fast stream, event {n}"
            );
        }
        assert_eq!(fan.live.len(), 1, "the full stream is still fed");
        // Its reader catches up: what was queued, then (once the feed admits it again) a
        // Resync and a fresh snapshot, never a silent gap.
        for n in 0..STREAM_QUEUE {
            match slow.next().await {
                Some(Ok(ConfigEvent::Put(e))) => assert_eq!(e.value, n.to_string().into_bytes()),
                other => panic!("event {n}: {other:?}"),
            }
        }
        let rejoined = tokio::time::timeout(std::time::Duration::from_secs(10), fan.next_join()).await;
        assert_eq!(rejoined.ok(), Some(true));
        fan.start_admitting();
        let now = put(STREAM_QUEUE + 9);
        fan.admit(|| ConfigEvent::Snapshot(Vec::new()), || ConfigEvent::Resync);
        assert!(matches!(slow.next().await, Some(Ok(ConfigEvent::Resync))));
        assert!(matches!(slow.next().await, Some(Ok(ConfigEvent::Snapshot(_)))));
        assert!(fan.send(vec![now]));
        assert!(matches!(slow.next().await, Some(Ok(ConfigEvent::Put(_)))));
        assert!(matches!(fast.next().await, Some(Ok(ConfigEvent::Put(_)))));
    }

    #[tokio::test]
    async fn the_feed_ends_with_its_last_stream() {
        let feeds: Feeds<ConfigEvent> = Feeds::default();
        let (stream, mut fan) = feeds.start("k");
        assert!(fan.send(vec![ConfigEvent::Snapshot(Vec::new())]));
        drop(stream);
        assert!(!fan.send(vec![put(1)]), "a feed without streams goes on sending");
        assert!(!fan.next_join().await);
        assert!(
            feeds
                .join("k", std::time::Duration::from_secs(10), || true)
                .await
                .is_none(),
            "joined a feed that ended"
        );
    }

    /// A stream whose queue is full when the client closes gets `Closed` once its reader
    /// has made room (a review found it silently ended).
    #[tokio::test]
    async fn a_full_stream_is_told_the_client_closed() {
        closed_after_a_full_queue(STREAM_QUEUE, "whose queue was full when the client closed").await;
    }

    /// A stream dropped from the feed for not keeping up, whose reader has not made room
    /// yet when the client closes, gets `Closed` once it catches up (a review found it
    /// ended after a gap with neither `Resync` nor `Closed`).
    #[tokio::test]
    async fn a_stream_waiting_to_rejoin_is_told_the_client_closed() {
        closed_after_a_full_queue(STREAM_QUEUE + 1, "that fell behind before the client closed").await;
    }

    /// Sends `sent` batches to a stream nobody reads, fails the feed, then reads: the
    /// queued events, then `Closed`.
    async fn closed_after_a_full_queue(sent: usize, what: &str) {
        let feeds: Feeds<ConfigEvent> = Feeds::default();
        let (mut stream, mut fan) = feeds.start("k");
        for n in 0..sent {
            assert!(fan.send(vec![put(n)]));
        }
        assert_eq!(
            fan.live.is_empty(),
            sent > STREAM_QUEUE,
            "only a stream past its queue leaves the feed"
        );
        fan.fail(Error::closed());
        drop(fan);
        for n in 0..STREAM_QUEUE {
            assert!(
                matches!(stream.next().await, Some(Ok(ConfigEvent::Put(_)))),
                "event {n}"
            );
        }
        let last = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next()).await;
        assert!(
            matches!(&last, Ok(Some(Err(e))) if e.kind() == coord_core::ErrorKind::Closed),
            "a stream {what} ends with {last:?}, not Closed"
        );
    }
}
