//! The contender queue in the layout of etcd's `concurrency` package: each contender's
//! key is `<dir>/<lease id hex>`, created under the client's lease by one `Txn` (create
//! if `create_revision == 0`, and read the queue). Queue order and token are the key's
//! `create_revision`. A contender watches the key with the greatest smaller create
//! revision, starting right after the read that found it (a watch that starts at or
//! below the current revision lands in etcd's "unsynced" group, caught up only every
//! ~100 ms).

use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{
    Backoff, Counter, HeadEvent, Joined, LeaderTracker, Position, Queue, QueueEntry, QueueId, QueueKind,
    Ticket,
};
use coord_core::{Error, ErrorKind, FencingToken, LeaderInfo, Result};
use etcd_client as etcd;
use futures::stream::BoxStream;

use crate::EtcdClient;
use crate::session::Inner;
use crate::watch::{self, Kv, Raw};

impl EtcdClient {
    /// The key prefix a lock's contenders live under (pass it to `etcdctl lock` or Go's
    /// `concurrency.NewMutex` to interoperate).
    pub fn lock_prefix(&self, name: &str) -> String {
        self.queue_dir(&QueueId::new(QueueKind::Lock, name))
    }

    /// The key prefix an election's candidates live under (`etcdctl elect`,
    /// `concurrency.NewElection`).
    pub fn election_prefix(&self, name: &str) -> String {
        self.queue_dir(&QueueId::new(QueueKind::Election, name))
    }

    fn queue_dir(&self, queue: &QueueId) -> String {
        self.inner.key(&queue.rel_dir())
    }
}

/// Whether `key` sits directly under `dir/` (a contender of this queue, not of a queue
/// with a longer name).
fn is_contender(dir: &str, key: &str) -> bool {
    key.strip_prefix(dir)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// The contenders of `dir` among `kvs`, sorted by create revision.
fn contenders(dir: &str, kvs: &[etcd::KeyValue]) -> Vec<Kv> {
    let mut out: Vec<Kv> = kvs
        .iter()
        .filter_map(Kv::from)
        .filter(|kv| is_contender(dir, &kv.key))
        .collect();
    out.sort_by_key(|kv| kv.create_rev);
    out
}

/// Where the contender created at `own_rev` stands in `queue` (read at `seen_at`);
/// `None` if it is not there.
fn position_in(queue: &[Kv], own_rev: i64, seen_at: i64) -> Option<Position> {
    if !queue.iter().any(|kv| kv.create_rev == own_rev) {
        return None;
    }
    let seen_at = seen_at as u64;
    Some(
        match queue
            .iter()
            .filter(|kv| kv.create_rev < own_rev)
            .max_by_key(|kv| kv.create_rev)
        {
            None => Position::First { seen_at },
            Some(ahead) => Position::Behind(QueueEntry {
                path: ahead.key.clone(),
                token: FencingToken(ahead.create_rev as u64),
                seen_at,
            }),
        },
    )
}

fn own_gone() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the contender's key is gone (its lease ended, or it was deleted)",
    )
}

fn header_rev(header: Option<&etcd::ResponseHeader>) -> i64 {
    header.map(|h| h.revision()).unwrap_or(0)
}

/// Reads one key: the read's revision and the key, if present.
async fn read_key(inner: &Inner, key: &str) -> Result<(i64, Option<Kv>)> {
    let k = key.to_owned();
    let resp = inner
        .call(Counter::Read, "read contender", false, move |mut c| {
            let k = k.clone();
            async move { c.get(k, None).await }
        })
        .await?;
    Ok((header_rev(resp.header()), resp.kvs().first().and_then(Kv::from)))
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl Queue for EtcdClient {
    fn ticket(&self, queue: &QueueId) -> Result<Ticket> {
        let lease = self.inner.lease()?;
        Ok(Ticket {
            queue: queue.clone(),
            generation: lease.generation,
            session_id: lease.id,
            locator: format!("{}/{:x}", self.queue_dir(queue), lease.id),
        })
    }

    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined> {
        let dir = self.queue_dir(&ticket.queue);
        // One round trip: create our key unless it exists, and read the whole queue.
        let (k, d, lease) = (ticket.locator.clone(), format!("{dir}/"), ticket.session_id);
        let resp = self
            .inner
            .call(Counter::Txn, "join queue", true, move |mut c| {
                let (k, d, value) = (k.clone(), d.clone(), value.clone());
                async move {
                    let read = [
                        etcd::TxnOp::get(k.clone(), None),
                        etcd::TxnOp::get(
                            d.clone(),
                            Some(etcd::GetOptions::new().with_prefix().with_keys_only()),
                        ),
                    ];
                    let txn = etcd::Txn::new()
                        .when([etcd::Compare::create_revision(
                            k.clone(),
                            etcd::CompareOp::Equal,
                            0,
                        )])
                        .and_then([
                            etcd::TxnOp::put(
                                k.clone(),
                                value,
                                Some(etcd::PutOptions::new().with_lease(lease)),
                            ),
                            read[0].clone(),
                            read[1].clone(),
                        ])
                        .or_else(read);
                    c.txn(txn).await
                }
            })
            .await?;
        let seen_at = header_rev(resp.header());
        let ranges: Vec<etcd::GetResponse> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                etcd::TxnOpResponse::Get(g) => Some(g),
                _ => None,
            })
            .collect();
        let own = ranges
            .first()
            .and_then(|g| g.kvs().first())
            .and_then(Kv::from)
            .filter(|kv| kv.lease == ticket.session_id)
            .ok_or_else(own_gone)?;
        let queue = ranges
            .get(1)
            .map(|g| contenders(&dir, g.kvs()))
            .unwrap_or_default();
        let position = position_in(&queue, own.create_rev, seen_at).ok_or_else(own_gone)?;
        Ok(Joined {
            own: QueueEntry {
                path: own.key,
                token: FencingToken(own.create_rev as u64),
                seen_at: seen_at as u64,
            },
            position: Some(position),
        })
    }

    async fn position(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Position> {
        let dir = self.queue_dir(&ticket.queue);
        let d = format!("{dir}/");
        let resp = self
            .inner
            .call(Counter::Read, "read queue", false, move |mut c| {
                let d = d.clone();
                async move {
                    c.get(d, Some(etcd::GetOptions::new().with_prefix().with_keys_only()))
                        .await
                }
            })
            .await?;
        let queue = contenders(&dir, resp.kvs());
        position_in(&queue, own.token.get() as i64, header_rev(resp.header())).ok_or_else(own_gone)
    }

    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()> {
        let inner = &self.inner;
        let token = entry.token.get() as i64;
        let mut start = (entry.seen_at as i64).max(token) + 1;
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let (k, from) = (entry.path.clone(), start);
            let mut moves = inner.member_moves();
            let opened = inner
                .call(Counter::WatchSet, "watch contender", false, move |mut c| {
                    let k = k.clone();
                    async move {
                        c.watch(k, Some(etcd::WatchOptions::new().with_start_revision(from)))
                            .await
                    }
                })
                .await;
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "coord.etcd.contender_watch_retry");
                    backoff.wait().await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            loop {
                let message = tokio::select! {
                    m = stream.message() => m,
                    // The client moved to another member: follow it there.
                    _ = moves.changed() => break,
                };
                match message {
                    Ok(Some(resp)) if resp.canceled() => {
                        if resp.compact_revision() > 0 {
                            // The history since `start` is gone: ask the key itself, then
                            // follow from that read (never again from the compacted start).
                            let (rev, now) = read_key(inner, &entry.path).await?;
                            if now.is_none_or(|kv| token != 0 && kv.create_rev != token) {
                                return Ok(());
                            }
                            start = rev + 1;
                            tracing::debug!(key = %entry.path, start, "coord.etcd.contender_watch_compacted");
                        } else {
                            tracing::debug!(
                                reason = resp.cancel_reason(),
                                "coord.etcd.contender_watch_canceled"
                            );
                            backoff.wait().await;
                        }
                        break;
                    }
                    Ok(Some(resp)) => {
                        for ev in resp.events() {
                            inner.stats.incr(Counter::WatchEvent);
                            let Some(kv) = ev.kv() else { continue };
                            start = kv.mod_revision() + 1;
                            match ev.event_type() {
                                etcd::EventType::Delete => return Ok(()),
                                // Deleted and created again meanwhile: another entry.
                                etcd::EventType::Put if token != 0 && kv.create_revision() != token => {
                                    return Ok(());
                                }
                                etcd::EventType::Put => {}
                            }
                        }
                    }
                    // The stream broke: open it again from the last revision seen.
                    Ok(None) | Err(_) => {
                        backoff.wait().await;
                        break;
                    }
                }
            }
        }
    }

    async fn update(&self, ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()> {
        let (k, rev, lease) = (own.path.clone(), own.token.get() as i64, ticket.session_id);
        let resp = self
            .inner
            .call(Counter::Txn, "proclaim", true, move |mut c| {
                let (k, value) = (k.clone(), value.clone());
                async move {
                    c.txn(
                        etcd::Txn::new()
                            .when([etcd::Compare::create_revision(
                                k.clone(),
                                etcd::CompareOp::Equal,
                                rev,
                            )])
                            .and_then([etcd::TxnOp::put(
                                k,
                                value,
                                Some(etcd::PutOptions::new().with_lease(lease)),
                            )]),
                    )
                    .await
                }
            })
            .await?;
        if resp.succeeded() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Fenced,
                "the grant was lost; its key is gone",
            ))
        }
    }

    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()> {
        // By create revision when known, so a stale release never deletes a newer
        // contender's key; by lease when the create's outcome was unknown.
        let (k, rev, lease) = (
            ticket.locator.clone(),
            own.map(|o| o.token.get() as i64),
            ticket.session_id,
        );
        self.inner
            .call(Counter::Txn, "release", true, move |mut c| {
                let k = k.clone();
                async move {
                    let guard = match rev {
                        Some(rev) => etcd::Compare::create_revision(k.clone(), etcd::CompareOp::Equal, rev),
                        None => etcd::Compare::lease(k.clone(), etcd::CompareOp::Equal, lease),
                    };
                    c.txn(
                        etcd::Txn::new()
                            .when([guard])
                            .and_then([etcd::TxnOp::delete(k, None)]),
                    )
                    .await
                }
            })
            .await
            .map(|_| ())
    }

    async fn head(&self, queue: &QueueId) -> Result<Option<LeaderInfo>> {
        let dir = self.queue_dir(queue);
        let (_, kvs) = watch::range(&self.inner, &format!("{dir}/")).await?;
        Ok(kvs
            .into_iter()
            .filter(|kv| is_contender(&dir, &kv.key))
            .min_by_key(|kv| kv.create_rev)
            .map(|kv| LeaderInfo {
                token: FencingToken(kv.create_rev as u64),
                value: kv.value,
            }))
    }

    async fn watch_head(&self, queue: &QueueId) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        let dir = self.queue_dir(queue);
        let mut tracker = LeaderTracker::default();
        let d = dir.clone();
        watch::open(self.inner.clone(), format!("{dir}/"), move |raw| {
            match raw {
                Raw::Snapshot(kvs) => tracker.reset(
                    kvs.into_iter()
                        .filter(|kv| is_contender(&d, &kv.key))
                        .map(|kv| (kv.key, FencingToken(kv.create_rev as u64), kv.value)),
                ),
                Raw::Put(kv) if is_contender(&d, &kv.key) => {
                    tracker.put(kv.key, FencingToken(kv.create_rev as u64), kv.value)
                }
                Raw::Delete(key) if is_contender(&d, &key) => tracker.remove(&key),
                Raw::Put(_) | Raw::Delete(_) => return Vec::new(),
                Raw::Resync => return vec![HeadEvent::Gap],
            }
            vec![HeadEvent::Head(tracker.leader())]
        })
        .await
    }
}
