//! The history-following watch loop shared by config, registry and election observers:
//! snapshot at revision R, then every event after R in order; a compacted gap becomes a
//! `Resync` and a fresh snapshot. A suspended client receives nothing until it
//! reconnects.

use std::sync::Arc;

use coord_core::mutants::{self, Mutant};
use coord_core::raw::Counter;
use coord_core::{Error, ErrorKind, Result};
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use crate::session::Inner;
use coord_mem_cluster::{Event, KeyData};

/// What the watch loop hands to a primitive's mapper.
pub(crate) enum Raw {
    /// Every key under the prefix now.
    Snapshot(Vec<(String, KeyData)>),
    /// One change.
    Event(Event),
    /// History was lost; a snapshot follows.
    Resync,
}

/// Reads the snapshot now (so it reflects the state when the caller's `watch` returns),
/// then spawns the watch loop over keys starting with `prefix`; `map` turns raw events
/// into the primitive's events (zero or more each).
pub(crate) fn follow<T, F>(
    inner: Arc<Inner>,
    prefix: String,
    mut map: F,
) -> Result<BoxStream<'static, Result<T>>>
where
    T: Send + 'static,
    F: FnMut(Raw) -> Vec<T> + Send + 'static,
{
    // Batches: the events of one read go out together, so that a consumer (a cache)
    // applies a multi-key commit at once, never half of it.
    let (tx, rx) = mpsc::channel::<Result<Vec<T>>>(256);
    inner.stats.incr(Counter::WatchSet);
    let (first_rev, first) = read_snapshot(&inner, &prefix)?;
    tokio::spawn(async move {
        let mut sink = Sink {
            tx: &tx,
            map: &mut map,
        };
        if !sink.send(Raw::Snapshot(first)).await {
            return;
        }
        let mut after = first_rev;
        let mut revisions = inner.cluster.revisions();
        loop {
            let closed = tokio::select! {
                changed = revisions.wait_for(|r| *r > after) => match changed {
                    Ok(_) => false,
                    Err(_) => return,
                },
                _ = tx.closed() => return,
                _ = inner.closed() => true,
            };
            if closed {
                let _ = tx.send(Err(Error::closed())).await;
                return;
            }
            tokio::select! {
                up = inner.link_up() => if up.is_err() {
                    let _ = tx.send(Err(Error::closed())).await;
                    return;
                },
                _ = tx.closed() => return,
            }
            let read = inner
                .cluster
                .with(|s| (s.events_after(after, &prefix), s.revision()));
            match read {
                (Ok(events), rev) => {
                    for _ in &events {
                        inner.stats.incr(Counter::WatchEvent);
                    }
                    if !sink.send_all(events.into_iter().map(Raw::Event)).await {
                        return;
                    }
                    after = rev;
                }
                (Err(_compacted), rev) if mutants::active(Mutant::WatchGapSilent) => after = rev,
                (Err(_compacted), _) => {
                    tracing::debug!(%prefix, after, "coord.mem.watch_resync");
                    if !sink.send(Raw::Resync).await {
                        return;
                    }
                    match sink.snapshot(&inner, &prefix).await {
                        Some(rev) => after = rev,
                        None => return,
                    }
                }
            }
        }
    });
    Ok(coord_core::raw::batched(rx))
}

/// Every key under `prefix` and the revision of the read.
fn read_snapshot(inner: &Inner, prefix: &str) -> Result<(u64, Vec<(String, KeyData)>)> {
    inner.request(Counter::Read, |s| {
        let entries: Vec<(String, KeyData)> = s.range(prefix).map(|(k, d)| (k.clone(), d.clone())).collect();
        (s.revision(), entries)
    })
}

struct Sink<'a, T, F> {
    tx: &'a mpsc::Sender<Result<Vec<T>>>,
    map: &'a mut F,
}

impl<T, F: FnMut(Raw) -> Vec<T>> Sink<'_, T, F> {
    /// Sends the mapped items as one batch; false when the receiver is gone.
    async fn send(&mut self, raw: Raw) -> bool {
        self.send_all(std::iter::once(raw)).await
    }

    /// Sends the mapped items of every one of `raws` as one batch (none if empty);
    /// false when the receiver is gone.
    async fn send_all(&mut self, raws: impl Iterator<Item = Raw>) -> bool {
        let items: Vec<T> = raws.flat_map(|raw| (self.map)(raw)).collect();
        items.is_empty() || self.tx.send(Ok(items)).await.is_ok()
    }

    /// Reads and sends a snapshot (waiting out a suspension); its revision, or `None`
    /// when the stream is over.
    async fn snapshot(&mut self, inner: &Inner, prefix: &str) -> Option<u64> {
        loop {
            let read = inner.request(Counter::Read, |s| {
                let entries: Vec<(String, KeyData)> =
                    s.range(prefix).map(|(k, d)| (k.clone(), d.clone())).collect();
                (s.revision(), entries)
            });
            match read {
                Ok((rev, entries)) => {
                    return self.send(Raw::Snapshot(entries)).await.then_some(rev);
                }
                Err(e) if e.kind() == ErrorKind::Unavailable => {
                    if inner.link_up().await.is_err() {
                        let _ = self.tx.send(Err(Error::closed())).await;
                        return None;
                    }
                }
                Err(e) => {
                    let _ = self.tx.send(Err(e)).await;
                    return None;
                }
            }
        }
    }
}
