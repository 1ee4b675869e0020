//! The queue behind locks and elections, in the layout of etcd's `concurrency` package:
//! each contender's key is `<dir>/<lease id hex>`, created under the client's lease by
//! one `Txn` (create if `create_revision == 0`, and read the queue). The lowest create
//! revision holds; every other contender watches only the key with the greatest smaller
//! create revision, starting at the read's header revision + 1 (a watch that starts at
//! or below the current revision lands in etcd's "unsynced" group, which is caught up
//! only every ~100 ms). Token = the key's `create_revision`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use coord_core::grant::Grant;
use coord_core::{
    Counter, EphemeralHandle, Error, ErrorKind, Fence, FencingToken, HoldSignal, HoldState, LocalQueue,
    LocalTurn, Result,
};
use etcd_client as etcd;

use crate::session::Inner;
use crate::watch::Kv;

/// The contenders directly under `dir/`, sorted by create revision.
fn contenders(dir: &str, kvs: &[etcd::KeyValue]) -> Vec<Kv> {
    let prefix = format!("{dir}/");
    let mut out: Vec<Kv> = kvs
        .iter()
        .filter_map(Kv::from)
        .filter(|kv| {
            kv.key
                .strip_prefix(&prefix)
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
        })
        .collect();
    out.sort_by_key(|kv| kv.create_rev);
    out
}

/// A contender key, removed exactly once: by `remove`, or on drop (which covers a
/// cancelled acquire as well as a dropped guard).
pub(crate) struct Contender {
    inner: Arc<Inner>,
    key: String,
    /// 0 until the create's outcome is known.
    create_rev: i64,
    lease: i64,
    turn: Arc<Mutex<Option<LocalTurn>>>,
    removed: bool,
}

fn session_lost() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the etcd lease was lost while waiting; the contender is gone — call again to queue on the new lease",
    )
}

/// Joins the queue at `dir` with `value`.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    queue_of: &LocalQueue,
    name: &str,
    dir: String,
    value: Vec<u8>,
    wait: bool,
) -> Result<Option<Grant>> {
    let turn = if wait {
        queue_of.turn(name).await
    } else {
        match queue_of.try_turn(name) {
            Some(t) => t,
            None => return Ok(None),
        }
    };
    let lease = inner.lease()?;
    let key = format!("{dir}/{:x}", lease.id);
    let mut contender = Contender {
        inner: inner.clone(),
        key: key.clone(),
        create_rev: 0,
        lease: lease.id,
        turn: Arc::new(Mutex::new(Some(turn))),
        removed: false,
    };
    // One round trip: create our key unless it exists, and read the whole queue.
    let (k, d, v, id) = (key.clone(), format!("{dir}/"), value, lease.id);
    let resp = inner
        .call(Counter::Txn, "join queue", true, |mut c| async move {
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
                    etcd::TxnOp::put(k.clone(), v, Some(etcd::PutOptions::new().with_lease(id))),
                    read[0].clone(),
                    read[1].clone(),
                ])
                .or_else(read);
            c.txn(txn).await
        })
        .await?;
    let mut header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
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
        .ok_or_else(session_lost)?;
    if own.lease != lease.id {
        return Err(session_lost());
    }
    contender.create_rev = own.create_rev;
    let mut queue = ranges
        .get(1)
        .map(|g| contenders(&dir, g.kvs()))
        .unwrap_or_default();
    loop {
        let Some(pred) = queue
            .iter()
            .filter(|kv| kv.create_rev < contender.create_rev)
            .max_by_key(|kv| kv.create_rev)
        else {
            if !queue.iter().any(|kv| kv.create_rev == contender.create_rev) {
                return Err(session_lost());
            }
            break;
        };
        if !wait {
            contender.remove_now().await?;
            return Ok(None);
        }
        let pred_key = pred.key.clone();
        let start = header_rev + 1;
        let pk = pred_key.clone();
        let mut stream = inner
            .call(
                Counter::WatchSet,
                "watch predecessor",
                false,
                |mut c| async move {
                    c.watch(pk, Some(etcd::WatchOptions::new().with_start_revision(start)))
                        .await
                },
            )
            .await?;
        let deleted = async {
            loop {
                match stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            return;
                        }
                        if resp
                            .events()
                            .iter()
                            .any(|e| e.event_type() == etcd::EventType::Delete)
                        {
                            inner.stats.incr(Counter::WatchEvent);
                            return;
                        }
                    }
                    // The stream broke: re-read the queue.
                    _ => return,
                }
            }
        };
        tokio::select! {
            _ = deleted => {}
            _ = inner.session.ended(lease.generation) => return Err(session_lost()),
        }
        let (rev, all) = reread(inner, &dir).await?;
        header_rev = rev;
        queue = all;
    }
    let (signal, hold) = HoldSignal::new();
    signal.follow_session(inner.session.subscribe(), lease.generation);
    watch_own_key(
        inner.clone(),
        key.clone(),
        header_rev + 1,
        lease.generation,
        signal,
        contender.turn.clone(),
    );
    Ok(Some(Grant {
        fence: Fence::new(key, FencingToken(contender.create_rev as u64)),
        hold,
        handle: Box::new(contender),
    }))
}

/// Reads the queue; returns the read's revision and the contenders in order.
async fn reread(inner: &Inner, dir: &str) -> Result<(i64, Vec<Kv>)> {
    let d = format!("{dir}/");
    let resp = inner
        .call(Counter::Read, "read queue", false, |mut c| async move {
            c.get(d, Some(etcd::GetOptions::new().with_prefix().with_keys_only()))
                .await
        })
        .await?;
    Ok((
        resp.header().map(|h| h.revision()).unwrap_or(0),
        contenders(dir, resp.kvs()),
    ))
}

/// Ends the hold (and frees the local turn) when our key is deleted or our lease is
/// lost. A new contender of this client uses a new lease, hence a new key.
fn watch_own_key(
    inner: Arc<Inner>,
    key: String,
    mut start: i64,
    generation: u64,
    signal: HoldSignal,
    turn: Arc<Mutex<Option<LocalTurn>>>,
) {
    tokio::spawn(async move {
        let ended = inner.session.ended(generation);
        tokio::pin!(ended);
        'outer: loop {
            let k = key.clone();
            let opened = inner
                .call(Counter::WatchSet, "watch own key", false, |mut c| async move {
                    c.watch(k, Some(etcd::WatchOptions::new().with_start_revision(start)))
                        .await
                })
                .await;
            let mut stream = match opened {
                Ok(s) => s,
                Err(e) if e.is_retryable() => {
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => continue,
                        _ = &mut ended => break,
                        _ = signal.closed() => return,
                    }
                }
                Err(_) => break,
            };
            loop {
                let msg = tokio::select! {
                    m = stream.message() => m,
                    _ = &mut ended => break 'outer,
                    _ = signal.closed() => return,
                };
                match msg {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            continue 'outer;
                        }
                        for ev in resp.events() {
                            inner.stats.incr(Counter::WatchEvent);
                            if let Some(kv) = ev.kv() {
                                start = kv.mod_revision() + 1;
                            }
                            if ev.event_type() == etcd::EventType::Delete {
                                break 'outer;
                            }
                        }
                    }
                    _ => continue 'outer,
                }
            }
        }
        signal.set(HoldState::Lost);
        turn.lock().unwrap_or_else(|p| p.into_inner()).take();
    });
}

impl Contender {
    /// Deletes our key if it is still this contender's (same create revision; or, when
    /// the create's outcome is unknown, same lease).
    async fn remove_now(&mut self) -> Result<()> {
        let (k, rev, lease) = (self.key.clone(), self.create_rev, self.lease);
        let result = self
            .inner
            .call(Counter::Txn, "release", true, |mut c| async move {
                let guard = if rev > 0 {
                    etcd::Compare::create_revision(k.clone(), etcd::CompareOp::Equal, rev)
                } else {
                    etcd::Compare::lease(k.clone(), etcd::CompareOp::Equal, lease)
                };
                c.txn(
                    etcd::Txn::new()
                        .when([guard])
                        .and_then([etcd::TxnOp::delete(k, None)]),
                )
                .await
            })
            .await;
        match result {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Closed => {}
            Err(e) => return Err(e),
        }
        self.removed = true;
        self.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
        Ok(())
    }
}

#[async_trait]
impl EphemeralHandle for Contender {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        let (k, rev, lease) = (self.key.clone(), self.create_rev, self.lease);
        let resp = self
            .inner
            .call(Counter::Txn, "proclaim", true, |mut c| async move {
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

    async fn remove(mut self: Box<Self>) -> Result<()> {
        self.remove_now().await
    }

    fn remove_in_background(self: Box<Self>) {}
}

impl Drop for Contender {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Born `removed`: dropping it (even if the task is cancelled) never spawns again.
        let mut leftover = Contender {
            inner: self.inner.clone(),
            key: std::mem::take(&mut self.key),
            create_rev: self.create_rev,
            lease: self.lease,
            turn: self.turn.clone(),
            removed: true,
        };
        rt.spawn(async move {
            let deadline = leftover.inner.options.request_timeout * 2;
            let cleanup = Box::pin(leftover.remove_now());
            match tokio::time::timeout(deadline, cleanup).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "coord.etcd.contender_cleanup_failed: the key goes with the lease")
                }
                Err(_) => tracing::warn!("coord.etcd.contender_cleanup_timed_out: the key goes with the lease"),
            }
            leftover.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
        });
    }
}
