//! The contender queue in the layout of etcd's `concurrency` package: each contender's
//! key is `<dir>/<lease id hex>`, created under the client's lease by one `Txn` (create
//! if `create_revision == 0`, and read the queue). A release is a plain delete of the
//! key, as Go's: the engine keeps this client's local turn at the name until the removal
//! is confirmed, and when an entry is lost to someone else (an operator's delete) this
//! client's later contenders move to another key first (`entry_lost`), so no later
//! contender of this client holds the key a release may still delete. (With a
//! lock-delay the delete is guarded by the entry's create revision and writes the
//! release mark in the same `Txn`.) A delete that failed or was cut off may still be
//! applied later (sent again on another member, the
//! first one can land after the second), after this client's next contender made the
//! same key: so after any failed removal, the client's later contenders use
//! `<dir>/<lease id hex>-<n>` with a new `n`, which no earlier delete names. (Keys are
//! not made unique per contender: etcd keeps every deleted key in its index until a
//! compaction, and a queue's reads walk them.) ContenderQueue order and token are the key's
//! `create_revision`. A contender reads only the key right ahead of it (the newest key
//! with a smaller create revision: one range read with a limit, never the whole queue)
//! and watches it from the server's current revision, so the watch is in etcd's "synced"
//! group and notified at once; the revisions between the read and the watch are covered
//! by reading the key again (a watch started at an older revision lands in the
//! "unsynced" group, caught up only every 100 ms).

use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{
    Ahead, Backoff, ContenderQueue, Counter, EntriesEvent, HeadEvent, HeadTracker, Joined, QueueEntry,
    QueueSpec, ReleaseMark, Slot, Surveyed, Ticket, release_mark_key,
};
use coord_core::{Error, ErrorKind, FencingToken, Head, Result};
use etcd_client as etcd;
use futures::stream::BoxStream;

use crate::EtcdClient;
use crate::session::Inner;
use crate::watch::{self, Kv, Raw};

impl EtcdClient {
    fn queue_dir(&self, queue: &QueueSpec) -> String {
        self.inner.key(&queue.dir)
    }
}

/// A read of the `limit` keys under a prefix created last (at or before `max_create`
/// when given): keys only, newest first.
fn newest(limit: i64, max_create: Option<i64>) -> etcd::GetOptions {
    let options = etcd::GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_sort(etcd::SortTarget::Create, etcd::SortOrder::Descend)
        .with_limit(limit);
    match max_create {
        Some(rev) => options.with_max_create_revision(rev),
        None => options,
    }
}

/// `kv` as a queue entry read at revision `seen_at`.
fn entry_of(kv: &Kv, seen_at: i64) -> QueueEntry {
    QueueEntry {
        path: kv.key.clone(),
        token: FencingToken(kv.create_rev as u64),
        seen_at: seen_at as u64,
    }
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

/// The `get`s of a transaction's answer, in order.
fn gets(resp: &etcd::TxnResponse) -> impl Iterator<Item = etcd::GetResponse> + use<> {
    resp.op_responses().into_iter().filter_map(|r| match r {
        etcd::TxnOpResponse::Get(g) => Some(g),
        _ => None,
    })
}

/// The read of queue `dir`'s release mark, to add to a position read when `spec` has a
/// lock-delay.
fn mark_read(spec: &QueueSpec, dir: &str) -> Option<etcd::TxnOp> {
    spec.lock_delay?;
    Some(etcd::TxnOp::get(release_mark_key(dir), None))
}

/// The release mark in the answer to [`mark_read`], if any.
fn mark_of(read: Option<etcd::GetResponse>) -> Option<ReleaseMark> {
    ReleaseMark::decode(read?.kvs().first()?.value())
}

/// Bumps the client's key epoch when dropped armed: a removal cut off before its
/// answer (its future dropped) may still land, so later contenders take another key.
struct EpochOnDrop<'a>(Option<&'a Inner>);

impl EpochOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for EpochOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.0 {
            inner.bump_key_epoch();
        }
    }
}

/// One read-only `Txn`: `own`'s key (keys only), then `more`. The read's revision and
/// the answers to `more`, in order.
///
/// # Errors
///
/// `SessionLost` when `own` (that incarnation) is not there; the request's errors.
async fn read_with_own(
    inner: &Inner,
    op: &'static str,
    own: &QueueEntry,
    more: Vec<etcd::TxnOp>,
) -> Result<(i64, std::vec::IntoIter<etcd::GetResponse>)> {
    let mut ops = vec![etcd::TxnOp::get(
        own.path.clone(),
        Some(etcd::GetOptions::new().with_keys_only()),
    )];
    ops.extend(more);
    let resp = inner
        .call(Counter::Read, op, false, move |mut c: etcd::KvClient| {
            let ops = ops.clone();
            async move { c.txn(etcd::Txn::new().and_then(ops)).await }
        })
        .await?;
    let mut ranges = gets(&resp).collect::<Vec<_>>().into_iter();
    let mine = ranges.next().and_then(|g| g.kvs().first().and_then(Kv::from));
    if mine.is_none_or(|kv| kv.create_rev != own.token.get() as i64) {
        return Err(own_gone());
    }
    Ok((header_rev(resp.header()), ranges))
}

/// Deletes `key` if it is still `own`'s incarnation (its create revision), with `also`
/// in the same `Txn` (a release mark); nothing when it is gone or made again.
async fn delete_incarnation(
    inner: &Inner,
    key: &str,
    own: &QueueEntry,
    also: Vec<etcd::TxnOp>,
) -> Result<()> {
    let mut then = vec![etcd::TxnOp::delete(key, None)];
    then.extend(also);
    inner
        .at_incarnation(
            Counter::Write,
            "release",
            key,
            own.token.get() as i64,
            then,
            vec![],
        )
        .await
        .map(drop)
}

/// Reads one key: the read's revision and the key, if present.
async fn read_key(inner: &Inner, key: &str) -> Result<(i64, Option<Kv>)> {
    let k = key.to_owned();
    let resp = inner
        .call(
            Counter::Read,
            "read contender",
            false,
            move |mut c: etcd::KvClient| {
                let k = k.clone();
                async move { c.get(k, None).await }
            },
        )
        .await?;
    Ok((header_rev(resp.header()), resp.kvs().first().and_then(Kv::from)))
}

impl EtcdClient {
    /// Every entry ahead of `own` that `spec` counts, in a queue at `dir` whose spec asks
    /// for all of them (one read: such a queue — a semaphore's — holds at most its
    /// permits and the entries of those waiting to hold).
    async fn all_ahead(&self, spec: &QueueSpec, dir: &str, own: &QueueEntry) -> Result<Ahead> {
        let mut ops = vec![etcd::TxnOp::get(
            spec.counted_prefix(dir),
            Some(
                etcd::GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_sort(etcd::SortTarget::Create, etcd::SortOrder::Ascend),
            ),
        )];
        let own_counted = own.path.starts_with(&spec.counted_prefix(dir));
        if !own_counted {
            ops.push(etcd::TxnOp::get(
                own.path.clone(),
                Some(etcd::GetOptions::new().with_keys_only()),
            ));
        }
        ops.extend(mark_read(spec, dir));
        let resp = self
            .inner
            .call(
                Counter::Read,
                "read leases",
                false,
                move |mut c: etcd::KvClient| {
                    let ops = ops.clone();
                    async move { c.txn(etcd::Txn::new().and_then(ops)).await }
                },
            )
            .await?;
        let seen_at = header_rev(resp.header());
        let mut ranges = gets(&resp);
        let keys: Vec<Kv> = ranges
            .next()
            .map(|g| g.kvs().iter().filter_map(Kv::from).collect())
            .unwrap_or_default();
        let mine = if own_counted {
            keys.iter().find(|kv| kv.key == own.path).cloned()
        } else {
            ranges.next().and_then(|g| g.kvs().first().and_then(Kv::from))
        };
        if mine.is_none_or(|kv| kv.create_rev as u64 != own.token.get()) {
            return Err(own_gone());
        }
        let entries = keys
            .iter()
            .filter(|kv| (kv.create_rev as u64) < own.token.get() && spec.key_counts(dir, &kv.key))
            .map(|kv| entry_of(kv, seen_at))
            .collect();
        Ok(Ahead {
            entries,
            seen_at: seen_at as u64,
            mark: mark_of(ranges.next()),
        })
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl ContenderQueue for EtcdClient {
    fn ticket(&self, queue: &QueueSpec, slot: Slot) -> Result<Ticket> {
        let lease = self.inner.lease()?;
        let dir = queue.class_dir(&self.queue_dir(queue), queue.class);
        let mut locator = format!("{dir}/{:x}", lease.id);
        match self.inner.key_epoch() {
            0 => {}
            n => locator.push_str(&format!("-{n:x}")),
        }
        if slot > 0 {
            locator.push_str(&format!(".{slot}"));
        }
        Ok(Ticket {
            queue: queue.clone(),
            generation: lease.generation,
            session_id: lease.id,
            locator,
        })
    }

    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined> {
        let dir = self.queue_dir(&ticket.queue);
        let spec = &ticket.queue;
        let counted = spec.counted_prefix(&dir);
        // Whether this contender's own key is among the keys it counts (not a reader's:
        // it counts the writers' only).
        let own_scanned = ticket.locator.starts_with(&counted);
        // One round trip: create our key unless it exists, and read the newest keys this
        // contender counts — ours (just created, so the newest) unless a reader, the one
        // right ahead and whether anything is ahead of that.
        let (k, d, lease) = (ticket.locator.clone(), counted, ticket.session_id);
        let scan = if own_scanned { 3 } else { 2 };
        let resp = self
            .inner
            .at_incarnation(
                Counter::Txn,
                "join queue",
                &k,
                0,
                vec![
                    etcd::TxnOp::put(k.clone(), value, Some(etcd::PutOptions::new().with_lease(lease))),
                    etcd::TxnOp::get(d, Some(newest(scan, None))),
                ],
                // Already there (a retried join): where it stands is read next.
                vec![etcd::TxnOp::get(k.clone(), None)],
            )
            .await?;
        let seen_at = header_rev(resp.header());
        let created = resp.succeeded();
        let ranges: Vec<etcd::GetResponse> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                etcd::TxnOpResponse::Get(g) => Some(g),
                _ => None,
            })
            .collect();
        // Created: ours is the newest key (with the Txn's revision), the others the ones
        // right ahead. Already there: the key as read.
        let (own, older) = match ranges.first() {
            Some(g) if created && own_scanned => {
                let mut newest = g.kvs().iter().filter_map(Kv::from);
                (
                    newest.next().filter(|kv| kv.key == ticket.locator),
                    Some(newest.collect::<Vec<_>>()),
                )
            }
            // A reader: its key was made at the Txn's revision, the newest of all.
            Some(g) if created => {
                let own = Kv {
                    key: ticket.locator.clone(),
                    value: Vec::new(),
                    create_rev: seen_at,
                    mod_rev: seen_at,
                    lease: ticket.session_id,
                };
                (Some(own), Some(g.kvs().iter().filter_map(Kv::from).collect()))
            }
            Some(g) => (g.kvs().first().and_then(Kv::from), None),
            None => (None, None),
        };
        let own = own
            .filter(|kv| kv.lease == ticket.session_id)
            .ok_or_else(own_gone)?;
        // The read shows the entries ahead when every key it found is one this contender
        // counts (otherwise, a key of a queue with a longer name, they are read next),
        // and the spec needs no more than the nearest two.
        let ahead = match older {
            _ if !spec.counts_any() => Some(Vec::new()),
            Some(older)
                if spec.nearest().is_some() && older.iter().all(|kv| spec.key_counts(&dir, &kv.key)) =>
            {
                Some(older.iter().rev().map(|kv| entry_of(kv, seen_at)).collect())
            }
            _ => None,
        };
        Ok(Joined {
            own: QueueEntry {
                path: own.key,
                token: FencingToken(own.create_rev as u64),
                seen_at: seen_at as u64,
            },
            ahead: ahead.map(|entries| Ahead {
                entries,
                seen_at: seen_at as u64,
                mark: None,
            }),
        })
    }

    async fn ahead(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        let dir = self.queue_dir(&ticket.queue);
        let spec = &ticket.queue;
        let own_rev = own.token.get() as i64;
        if !spec.counts_any() {
            // Nothing counts: no read.
            return Ok(Ahead::default());
        }
        let Some(nearest) = spec.nearest() else {
            return self.all_ahead(spec, &dir, own).await;
        };
        // The counted keys found so far, nearest first; keys older than `below` that are
        // not this queue's counted contenders are read past.
        let mut found: Vec<QueueEntry> = Vec::new();
        let mut below = own_rev;
        loop {
            // One read-only round trip: our key still there, and the two newest keys
            // created before `below` — the contender right ahead and whether anything is
            // ahead of it — never the whole queue.
            // With a lock-delay, the queue's release mark too.
            let mut ops = vec![etcd::TxnOp::get(
                spec.counted_prefix(&dir),
                Some(newest(2, Some(below - 1))),
            )];
            ops.extend(mark_read(spec, &dir));
            let (seen_at, mut ranges) = read_with_own(&self.inner, "read queue", own, ops).await?;
            let older: Vec<Kv> = ranges
                .next()
                .map(|g| g.kvs().iter().filter_map(Kv::from).collect())
                .unwrap_or_default();
            for kv in &older {
                below = kv.create_rev;
                if spec.key_counts(&dir, &kv.key) && found.len() < nearest {
                    found.push(entry_of(kv, seen_at));
                }
            }
            if found.len() >= nearest || older.len() < 2 {
                found.reverse();
                return Ok(Ahead {
                    entries: found,
                    seen_at: seen_at as u64,
                    mark: mark_of(ranges.next()),
                });
            }
        }
    }

    async fn confirm(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        // One read-only round trip on one key (the queue's mark too, with a
        // lock-delay): O(1), where a sorted range read fetches the whole queue.
        let dir = self.queue_dir(&ticket.queue);
        let ops = mark_read(&ticket.queue, &dir).into_iter().collect();
        let (seen_at, mut ranges) = read_with_own(&self.inner, "confirm contender", own, ops).await?;
        Ok(Ahead {
            entries: Vec::new(),
            seen_at: seen_at as u64,
            mark: mark_of(ranges.next()),
        })
    }

    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()> {
        let inner = &self.inner;
        let token = entry.token.get() as i64;
        // The first revision whose changes to the key are not yet known.
        let mut next = (entry.seen_at as i64).max(token) + 1;
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        // Watches refused for their credentials in a row.
        let mut refusals = 0;
        loop {
            // No start revision: the server starts the watch right after its current
            // revision, in its "synced" group, which it notifies as each write lands. (A
            // watch that starts at an older revision lands in the "unsynced" group,
            // caught up only every 100 ms — the stall of a contended hand-off.)
            // On the client's shared stream (`crate::hub`): a waiting contender costs
            // a watch id and a queue, not a stream of its own.
            let mut moves = inner.member_moves();
            let opened = inner
                .watch(entry.path.clone(), etcd::WatchOptions::new())
                .await
                .map_err(|e| e.with_operation("watch contender"));
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "coord.etcd.contender_watch_retry");
                    backoff.wait().await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut created = false;
            loop {
                let message = tokio::select! {
                    m = stream.message() => m,
                    // The client moved to another member: follow it there.
                    _ = moves.changed() => break,
                };
                match message {
                    Ok(Some(resp)) if resp.created() && !resp.canceled() => {
                        refusals = 0;
                        if std::mem::replace(&mut created, true) {
                            // The second watch (below): nothing more to learn.
                            continue;
                        }
                        // The watch sees every change after the header's revision `w`;
                        // the key read now covers the revisions before it.
                        let w = header_rev(resp.header());
                        let (read_at, now) = read_key(inner, &entry.path).await?;
                        if now.is_none_or(|kv| token != 0 && kv.create_rev != token) {
                            return Ok(());
                        }
                        next = next.max(read_at + 1);
                        // The server takes `w` a moment before it places the watch: a
                        // write landing in between puts the watch in the "unsynced"
                        // group after all (seen in about 3% of waits under contention).
                        // Nothing written between `w` and the read proves it synced;
                        // otherwise a second watch on the same stream, placed just as
                        // independently, makes a stall of both unlikely (~0.1%).
                        if read_at != w {
                            inner.stats.incr(Counter::WatchSet);
                            if !stream.add(inner.hub(), entry.path.clone(), etcd::WatchOptions::new()) {
                                backoff.wait().await;
                                break;
                            }
                        }
                    }
                    Ok(Some(resp)) if resp.canceled() => {
                        tracing::debug!(
                            reason = resp.cancel_reason(),
                            "coord.etcd.contender_watch_canceled"
                        );
                        // Refused for its credentials: the hub ends the stream, so the
                        // watch is set again on a new one with a fresh token; refused
                        // again there, the wait says so instead of waiting forever.
                        if let Some(e) = crate::hub::refused(&resp) {
                            refusals += 1;
                            if refusals > 1 {
                                return Err(e.with_operation("watch contender"));
                            }
                        }
                        backoff.wait().await;
                        break;
                    }
                    Ok(Some(resp)) => {
                        for ev in resp.events() {
                            inner.stats.incr(Counter::WatchEvent);
                            let Some(kv) = ev.kv() else { continue };
                            if kv.mod_revision() < next && ev.event_type() == etcd::EventType::Put {
                                continue;
                            }
                            next = next.max(kv.mod_revision() + 1);
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
                    // The stream broke: open it again (the gap is read as above).
                    Ok(None) | Err(_) => {
                        backoff.wait().await;
                        break;
                    }
                }
            }
        }
    }

    async fn mark(&self, entry: &QueueEntry, value: Vec<u8>) -> Result<bool> {
        // Only that incarnation (its create revision), and under its own lease.
        let put = etcd::TxnOp::put(
            entry.path.clone(),
            value,
            Some(etcd::PutOptions::new().with_ignore_lease()),
        );
        let resp = self
            .inner
            .at_incarnation(
                Counter::Txn,
                "mark",
                &entry.path,
                entry.token.get() as i64,
                vec![put],
                vec![],
            )
            .await?;
        Ok(resp.succeeded())
    }

    async fn update(&self, ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()> {
        let put = etcd::TxnOp::put(
            own.path.clone(),
            value,
            Some(etcd::PutOptions::new().with_lease(ticket.session_id)),
        );
        let resp = self
            .inner
            .at_incarnation(
                Counter::Txn,
                "proclaim",
                &own.path,
                own.token.get() as i64,
                vec![put],
                vec![],
            )
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

    async fn release(&self, ticket: &Ticket, own: &QueueEntry) -> Result<()> {
        if ticket.queue.lock_delay.is_none() {
            return self.leave(ticket, Some(own)).await;
        }
        // With a lock-delay, a delete guarded by the entry's incarnation, with the release
        // mark in the same `Txn`: the mark says "released" only if this very entry was
        // still there (one an operator deleted vanished; a waiter must hold off).
        let k = ticket.locator.clone();
        let mark = etcd::TxnOp::put(
            release_mark_key(&self.queue_dir(&ticket.queue)),
            ReleaseMark::Released {
                entry: own.path.clone(),
                token: own.token,
            }
            .encode(),
            None,
        );
        delete_incarnation(&self.inner, &k, own, vec![mark]).await
    }

    async fn write_release_mark(&self, queue: &QueueSpec, mark: &ReleaseMark) -> Result<()> {
        let (k, v) = (release_mark_key(&self.queue_dir(queue)), mark.encode());
        self.inner
            .call(
                Counter::Write,
                "write release mark",
                true,
                move |mut c: etcd::KvClient| {
                    let (k, v) = (k.clone(), v.clone());
                    async move { c.put(k, v, None).await }
                },
            )
            .await
            .map(drop)
    }

    async fn release_mark(&self, queue: &QueueSpec) -> Result<Option<ReleaseMark>> {
        let (_, kv) = read_key(&self.inner, &release_mark_key(&self.queue_dir(queue))).await?;
        Ok(kv.and_then(|kv| ReleaseMark::decode(&kv.value)))
    }

    fn entry_lost(&self, _ticket: &Ticket) {
        // The lost guard's release (a plain delete of this key) may still come: later
        // contenders of this client take another key.
        self.inner.bump_key_epoch();
    }

    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()> {
        // A plain delete of the key, as Go's: no later contender of this client holds
        // the same key while it may land — the contender that made it holds the local
        // turn at the name until this removal is confirmed; an entry lost to someone
        // else moved the client to another key first (`entry_lost`); and a delete that
        // failed, or was cut off before its answer, may still land later: later
        // contenders take another key then too (below). No other client makes keys under
        // this lease. A plain delete costs the server less than a guarded `Txn`.
        let k = ticket.locator.clone();
        let cut_off = EpochOnDrop(Some(&self.inner));
        let deleted = match own {
            Some(_) => {
                let key = k.clone();
                self.inner
                    .call(Counter::Write, "release", true, move |mut c: etcd::KvClient| {
                        let k = key.clone();
                        async move { c.delete(k, None).await }
                    })
                    .await
                    .map(drop)
            }
            None => {
                let key = k.clone();
                let deleted = self
                    .inner
                    .call(Counter::Write, "release", true, move |mut c: etcd::KvClient| {
                        let k = key.clone();
                        async move { c.delete(k, None).await }
                    })
                    .await;
                if let Ok(resp) = &deleted {
                    // The join's outcome was unknown: its request may still land (etcd
                    // can apply a request after its client gave up on it) and re-create
                    // the key under the live lease, a contender nobody waits behind. This
                    // client's later contenders take another key, and that one is swept.
                    self.inner.bump_key_epoch();
                    sweep_late_join(
                        self.inner.clone(),
                        k.clone(),
                        ticket.generation,
                        header_rev(resp.header()),
                    );
                }
                deleted.map(drop)
            }
        };
        cut_off.disarm();
        if deleted.is_err() {
            self.inner.bump_key_epoch();
        }
        deleted.map(|_| ())
    }

    async fn head(&self, queue: &QueueSpec) -> Result<Option<Head>> {
        let dir = self.queue_dir(queue);
        let (_, kvs) = watch::range(&self.inner, &format!("{dir}/")).await?;
        Ok(kvs
            .into_iter()
            .filter(|kv| queue.class_of_key(&dir, &kv.key).is_some())
            .min_by_key(|kv| kv.create_rev)
            .map(|kv| Head {
                token: FencingToken(kv.create_rev as u64),
                value: kv.value,
            }))
    }

    async fn watch_head(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        self.track(queue, |raw| match raw {
            Tracked::Changed(t) => vec![HeadEvent::Head(t.head())],
            Tracked::Gap => vec![HeadEvent::Gap],
        })
        .await
    }

    async fn watch_entries(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<EntriesEvent>>> {
        self.track(queue, |raw| match raw {
            Tracked::Changed(t) => vec![EntriesEvent::Entries(t.members())],
            Tracked::Gap => vec![EntriesEvent::Gap],
        })
        .await
    }

    async fn survey(&self, root: &str) -> Result<Vec<Surveyed>> {
        // One range read: every key under the root, those under a lease are entries.
        let (_, kvs) = watch::range(&self.inner, &format!("{}/", self.inner.key(root))).await?;
        let mut found: Vec<Surveyed> = kvs
            .into_iter()
            .filter(|kv| kv.lease != 0)
            .filter_map(|kv| {
                let rel = kv.key.strip_prefix(&self.inner.prefix)?;
                let (dir, name) = rel.rsplit_once('/')?;
                Some(Surveyed {
                    dir: dir.to_owned(),
                    name: name.to_owned(),
                    token: FencingToken(kv.create_rev as u64),
                    value: kv.value,
                    owner: kv.lease as u64,
                    created_ms: None,
                })
            })
            .collect();
        found.sort_by(|a, b| (&a.dir, a.token).cmp(&(&b.dir, b.token)));
        Ok(found)
    }
}

/// What [`EtcdClient::track`] passes on: the queue's entries after a change, or a gap.
enum Tracked<'a> {
    Changed(&'a HeadTracker),
    Gap,
}

impl EtcdClient {
    /// Watches the contenders of `queue`, passing the tracked entries after every change
    /// of one to `map`.
    async fn track<T, F>(&self, queue: &QueueSpec, mut map: F) -> Result<BoxStream<'static, Result<T>>>
    where
        T: Send + 'static,
        F: FnMut(Tracked<'_>) -> Vec<T> + Send + 'static,
    {
        let dir = self.queue_dir(queue);
        let mut tracker = HeadTracker::default();
        let (d, spec) = (dir.clone(), queue.clone());
        let is_contender = move |d: &str, key: &str| spec.class_of_key(d, key).is_some();
        watch::follow(self.inner.clone(), format!("{dir}/"), move |raw| {
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
                Raw::Resync => return map(Tracked::Gap),
            }
            map(Tracked::Changed(&tracker))
        })
        .await
    }
}

/// Deletes `key` whenever it is created after `after` (a revision), until the session of
/// `generation` ends or the client closes: the key of a join whose outcome was unknown,
/// removed already, which the join's request could still re-create if it lands late. No
/// later contender of this client uses the key (its key epoch moved on), so whatever
/// creates it is that late join.
fn sweep_late_join(inner: std::sync::Arc<Inner>, key: String, generation: u64, after: i64) {
    tokio::spawn(async move {
        let mut next = after + 1;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let current = |inner: &Inner| inner.lease().is_ok_and(|l| l.generation == generation);
        while current(&inner) {
            let (k, start) = (key.clone(), next);
            let opened = inner
                .call(
                    Counter::WatchSet,
                    "watch a late join",
                    false,
                    move |mut c: etcd::WatchClient| {
                        let k = k.clone();
                        async move {
                            c.watch(k, Some(etcd::WatchOptions::new().with_start_revision(start)))
                                .await
                        }
                    },
                )
                .await;
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::Closed => return,
                Err(_) => {
                    backoff.wait().await;
                    continue;
                }
            };
            let mut check = tokio::time::interval(Duration::from_secs(1));
            loop {
                let message = tokio::select! {
                    m = stream.message() => m,
                    _ = check.tick() => {
                        if current(&inner) { continue } else { return }
                    }
                };
                let Ok(Some(resp)) = message else { break };
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    next = next.max(kv.mod_revision() + 1);
                    if event.event_type() == etcd::EventType::Put {
                        tracing::warn!(key = %key, "coord.etcd.late_join_swept: a join that landed after its removal");
                        let _ = inner
                            .at_incarnation(
                                Counter::Write,
                                "remove a late join",
                                &key,
                                kv.create_revision(),
                                vec![etcd::TxnOp::delete(key.clone(), None)],
                                vec![],
                            )
                            .await;
                    }
                }
            }
            backoff.wait().await;
        }
    });
}
