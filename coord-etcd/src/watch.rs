//! A resumable prefix watch: read a snapshot at revision R, watch from R+1, and after
//! any stream error re-open the watch from the last revision seen. Only compaction can
//! make a gap; it is reported as `Resync` and a fresh snapshot — never a silent miss,
//! never a silently closed stream.

use std::sync::Arc;
use std::time::Duration;

use coord_core::raw::{Backoff, Counter};
use coord_core::{Error, ErrorKind, Result};
use etcd_client as etcd;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use crate::session::Inner;

/// A key-value as coord uses it.
#[derive(Debug, Clone)]
pub(crate) struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: i64,
}

impl Kv {
    pub(crate) fn from(kv: &etcd::KeyValue) -> Option<Kv> {
        Some(Kv {
            key: String::from_utf8(kv.key().to_vec()).ok()?,
            value: kv.value().to_vec(),
            create_rev: kv.create_revision(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
        })
    }
}

/// What the watch loop hands to a primitive's mapper.
pub(crate) enum Raw {
    /// Every key under the prefix now.
    Snapshot(Vec<Kv>),
    /// A key was created or changed.
    Put(Kv),
    /// A key was deleted.
    Delete(String),
    /// History was compacted; a snapshot follows.
    Resync,
}

/// Reads every key under `prefix`; returns the revision of the read.
pub(crate) async fn range(inner: &Inner, prefix: &str) -> Result<(i64, Vec<Kv>)> {
    let p = prefix.to_owned();
    let resp = inner
        .call(Counter::Read, "range", false, move |mut c: etcd::KvClient| {
            let p = p.clone();
            async move { c.get(p, Some(etcd::GetOptions::new().with_prefix())).await }
        })
        .await?;
    let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    Ok((rev, resp.kvs().iter().filter_map(Kv::from).collect()))
}

/// Reads the snapshot now (so it reflects the state when the caller's `watch` returns,
/// and errors surface to the caller), then spawns the watch loop over keys starting with
/// `prefix`.
pub(crate) async fn follow<T, F>(
    inner: Arc<Inner>,
    prefix: String,
    mut map: F,
) -> Result<BoxStream<'static, Result<T>>>
where
    T: Send + 'static,
    F: FnMut(Raw) -> Vec<T> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Vec<T>>>(256);
    let mut initial = Some(
        range(&inner, &prefix)
            .await
            .map_err(|e| e.with_operation("watch"))?,
    );
    tokio::spawn(async move {
        // One batch per consistent point: a snapshot, a resync, a watch response.
        let send = |items: Vec<T>, tx: &mpsc::Sender<Result<Vec<T>>>| {
            let tx = tx.clone();
            async move { items.is_empty() || tx.send(Ok(items)).await.is_ok() }
        };
        let mut first = true;
        loop {
            if !first && !send(map(Raw::Resync), &tx).await {
                return;
            }
            first = false;
            let snapshot = match initial.take() {
                Some(s) => Some(s),
                None => retry(&inner, &tx, || range(&inner, &prefix)).await,
            };
            let Some((rev, kvs)) = snapshot else {
                return;
            };
            if !send(map(Raw::Snapshot(kvs)), &tx).await {
                return;
            }
            let mut next = rev + 1;
            let mut broken = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
            let mut resumed = false;
            // Follow until compaction forces a resync.
            loop {
                if resumed
                    && coord_core::mutants::active(coord_core::mutants::Mutant::WatchResumeFromNow)
                    && let Some((now, _)) = retry(&inner, &tx, || range(&inner, &prefix)).await
                {
                    next = now + 1;
                }
                resumed = true;
                let p = prefix.clone();
                let mut moves = inner.member_moves();
                let Some(mut stream) = retry(&inner, &tx, || {
                    inner.call(Counter::WatchSet, "watch", false, |mut c: etcd::WatchClient| {
                        let p = p.clone();
                        async move {
                            c.watch(
                                p,
                                Some(etcd::WatchOptions::new().with_prefix().with_start_revision(next)),
                            )
                            .await
                        }
                    })
                })
                .await
                else {
                    return;
                };
                let compacted = loop {
                    let msg = tokio::select! {
                        m = stream.message() => m,
                        _ = tx.closed() => return,
                        // The client moved to another member: follow it there.
                        _ = moves.changed() => break false,
                        // Closing ends every watch, with a last item that says so.
                        _ = inner.closed() => {
                            let _ = tx.send(Err(Error::closed())).await;
                            return;
                        }
                    };
                    match msg {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                if resp.compact_revision() > 0 {
                                    break true;
                                }
                                tracing::debug!(reason = resp.cancel_reason(), "coord.etcd.watch_canceled");
                                break false;
                            }
                            let mut batch = Vec::new();
                            for ev in resp.events() {
                                let Some(kv) = ev.kv().and_then(Kv::from) else {
                                    continue;
                                };
                                inner.stats.incr(Counter::WatchEvent);
                                next = kv.mod_rev + 1;
                                let raw = match ev.event_type() {
                                    etcd::EventType::Put => Raw::Put(kv),
                                    etcd::EventType::Delete => Raw::Delete(kv.key),
                                };
                                batch.extend(map(raw));
                            }
                            if !send(batch, &tx).await {
                                return;
                            }
                        }
                        Ok(None) | Err(_) => break false,
                    }
                };
                if compacted {
                    tracing::debug!(%prefix, next, "coord.etcd.watch_compacted");
                    break;
                }
                if inner.is_closed() {
                    let _ = tx.send(Err(Error::closed())).await;
                    return;
                }
                broken.wait().await;
            }
        }
    });
    Ok(coord_core::raw::batched(rx))
}

/// Runs `f` until it succeeds, backing off on retryable errors; `None` when the stream
/// is over (receiver gone, client closed — the error is sent — or a permanent error).
async fn retry<T, F, Fut, U>(inner: &Inner, tx: &mpsc::Sender<Result<U>>, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        match f().await {
            Ok(v) => return Some(v),
            // A resumable watch gives up only when retrying cannot help at all.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Closed
                        | ErrorKind::PermissionDenied
                        | ErrorKind::InvalidArgument
                        | ErrorKind::ConfigInvalid
                        | ErrorKind::Unsupported
                ) =>
            {
                let _ = tx.send(Err(e)).await;
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "coord.etcd.watch_retry");
                if inner.is_closed() || tx.is_closed() {
                    return None;
                }
                backoff.wait().await;
            }
        }
    }
}
