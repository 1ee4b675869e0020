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

/// Keys in the first page of a [`range`]: at most [`MAX_VALUE_LEN`] bytes each, so the
/// page stays under [`crate::connection::MAX_MESSAGE`] whatever the values.
///
/// [`MAX_VALUE_LEN`]: coord_core::MAX_VALUE_LEN
const FIRST_PAGE: i64 = 64;

/// The most keys in one page of a [`range`].
const MAX_PAGE: i64 = 5_000;

/// The size a page of a [`range`] aims at, by the mean size of the keys read so far.
const PAGE_BYTES: usize = 2 << 20;

/// Reads every key under `prefix`, in pages all read at the revision of the first (one
/// consistent snapshot, however many keys: pages sized by the mean key so far, far below
/// the message limit; a page that still passes it is read again with half the keys);
/// returns that revision. A compaction past it between pages starts the read again.
pub(crate) async fn range(inner: &Inner, prefix: &str) -> Result<(i64, Vec<Kv>)> {
    let end = etcd::GetOptions::new().with_prefix();
    'again: loop {
        let mut kvs: Vec<Kv> = Vec::new();
        let mut rev = 0;
        let mut first = true;
        let mut from = prefix.as_bytes().to_vec();
        let mut limit = FIRST_PAGE;
        let (mut bytes, mut read) = (0usize, 0usize);
        loop {
            let (key, at) = (from.clone(), rev);
            let options = if first {
                end.clone().with_limit(limit)
            } else {
                // From the key after the last one read, to the prefix's end.
                etcd::GetOptions::new()
                    .with_range(prefix_end(prefix))
                    .with_limit(limit)
                    .with_revision(at)
            };
            let page = inner
                .call(Counter::Read, "range", false, move |mut c: etcd::KvClient| {
                    let (key, options) = (key.clone(), options.clone());
                    async move { c.get(key, Some(options)).await }
                })
                .await;
            let resp = match page {
                Ok(r) => r,
                // The first page's revision was compacted meanwhile: read again at a new one.
                Err(e) if !first && e.to_string().contains("compacted") => continue 'again,
                // Larger values than the pages so far: the same page, half as many keys.
                Err(e) if limit > 1 && e.to_string().contains("length too large") => {
                    limit /= 2;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if std::mem::take(&mut first) {
                rev = resp.header().map(|h| h.revision()).unwrap_or(0);
            }
            for kv in resp.kvs() {
                bytes += kv.key().len() + kv.value().len();
                read += 1;
                if let Some(kv) = Kv::from(kv) {
                    kvs.push(kv);
                }
            }
            let (Some(last), true) = (resp.kvs().last(), resp.more()) else {
                return Ok((rev, kvs));
            };
            from = last.key().to_vec();
            from.push(0);
            let mean = bytes / read.max(1);
            limit = i64::try_from(PAGE_BYTES / mean.max(1))
                .unwrap_or(MAX_PAGE)
                .clamp(1, MAX_PAGE);
        }
    }
}

/// The end of the range of keys starting with `prefix` (the prefix with its last byte
/// below 0xff incremented, the rest dropped; `\0`, every key, when there is none).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
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
            let mut refusals = 0;
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
                let mut moves = inner.member_moves();
                // On the client's shared stream (`crate::hub`).
                let Some(mut stream) = retry(&inner, &tx, || {
                    inner.watch(
                        prefix.clone(),
                        etcd::WatchOptions::new().with_prefix().with_start_revision(next),
                    )
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
                                // Refused for its credentials twice in a row (the second
                                // time on a new stream, with a fresh token): said, not
                                // retried forever.
                                if let Some(e) = crate::hub::refused(&resp) {
                                    refusals += 1;
                                    if refusals > 1 {
                                        let _ = tx.send(Err(e.with_operation("watch"))).await;
                                        return;
                                    }
                                }
                                break false;
                            }
                            if resp.created() {
                                refusals = 0;
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
