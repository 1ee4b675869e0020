//! The queue behind locks and elections: each contender creates its own key bound to
//! the session, ordered by creation revision; the lowest holds; every other waits for
//! the deletion of its immediate predecessor only (no herd).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use coord_core::grant::Grant;
use coord_core::{
    Counter, EphemeralHandle, Error, ErrorKind, Fence, FencingToken, HoldSignal, HoldState, LocalQueue,
    LocalTurn, Result,
};

use crate::client::Inner;
use crate::cluster::State;
use crate::session::BACKGROUND_DEADLINE;

/// A contender's key, removed exactly once: by `remove`, or by `Drop` (which covers a
/// cancelled acquire as well as a dropped guard).
pub(crate) struct Contender {
    inner: Arc<Inner>,
    key: String,
    create_rev: u64,
    /// This client's turn at the name; released only after the key is gone (removed by
    /// us, or by the server when the session ended), so the next local contender never
    /// finds our key and a lost guard never blocks a new attempt.
    turn: Arc<Mutex<Option<LocalTurn>>>,
    removed: bool,
}

/// The immediate children of `dir` (one segment below).
pub(crate) fn children<'a>(
    state: &'a State,
    dir: &'a str,
) -> impl Iterator<Item = (&'a String, &'a crate::cluster::KeyData)> + 'a {
    let prefix_len = dir.len() + 1;
    state.range(dir).filter(move |(k, _)| {
        k.len() > prefix_len && k.as_bytes()[dir.len()] == b'/' && !k[prefix_len..].contains('/')
    })
}

enum Step {
    Granted,
    Wait(tokio::sync::oneshot::Receiver<()>),
    /// Someone is ahead and we do not wait.
    Busy,
    /// The predecessor vanished before its watch was armed.
    Retry,
}

/// Joins the queue `dir` (full key of the lock or election) with `value`; waits for the
/// grant if `wait`, otherwise gives up (removing its key) when someone is ahead.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    queue: &LocalQueue,
    name: &str,
    dir: String,
    value: Vec<u8>,
    wait: bool,
) -> Result<Option<Grant>> {
    let turn = if wait {
        queue.turn(name).await
    } else {
        match queue.try_turn(name) {
            Some(t) => t,
            None => return Ok(None),
        }
    };
    let (session, generation) = inner.live_session()?;
    let key = format!("{dir}/{session:016x}");
    // One request: create our key if absent, bound to a session the server knows.
    let created = inner.request(Counter::Txn, |s| {
        if !s.session_alive(session) {
            return Err(Error::new(
                ErrorKind::SessionLost,
                "the session expired; retry on the new session",
            ));
        }
        Ok(match s.get(&key) {
            Some(existing) => existing.create_rev,
            None => s.put(&key, value, Some(session)).create_rev,
        })
    })??;
    let contender = Contender {
        inner: inner.clone(),
        key,
        create_rev: created,
        turn: Arc::new(Mutex::new(Some(turn))),
        removed: false,
    };
    loop {
        let step = inner.request(Counter::Read, |s| {
            match s.get(&contender.key) {
                Some(d) if d.create_rev == contender.create_rev => {}
                _ => {
                    return Err(Error::new(
                        ErrorKind::SessionLost,
                        "our contender was removed (session lost)",
                    ));
                }
            }
            let predecessor = children(s, &dir)
                .filter(|(_, d)| d.create_rev < contender.create_rev)
                .max_by_key(|(_, d)| d.create_rev)
                .map(|(k, _)| k.clone());
            Ok(match predecessor {
                None => Step::Granted,
                Some(_) if !wait => Step::Busy,
                Some(p) => match s.watch_delete(&p) {
                    Some(rx) => Step::Wait(rx),
                    None => Step::Retry,
                },
            })
        });
        let step = match step {
            Ok(step) => step?,
            Err(e) if e.kind() == ErrorKind::Unavailable && wait => {
                tokio::select! {
                    up = inner.link_up() => up?,
                    _ = inner.session.ended(generation) => return Err(session_lost()),
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        match step {
            Step::Granted => break,
            Step::Busy => {
                Box::new(contender).remove().await?;
                return Ok(None);
            }
            Step::Retry => continue,
            Step::Wait(rx) => {
                tokio::select! {
                    _ = rx => inner.stats.incr(Counter::WatchEvent),
                    _ = inner.session.ended(generation) => return Err(session_lost()),
                }
            }
        }
    }
    let (signal, hold) = HoldSignal::new();
    signal.follow_session(inner.session.subscribe(), generation);
    // A deleted key (operator action, expiry) also ends the hold.
    if let Ok(Some(rx)) = inner.request(Counter::WatchSet, |s| s.watch_delete(&contender.key)) {
        let signal = signal.clone();
        let turn = contender.turn.clone();
        tokio::spawn(async move {
            let _ = rx.await;
            signal.set(HoldState::Lost);
            turn.lock().unwrap_or_else(|p| p.into_inner()).take();
        });
    } else {
        signal.set(HoldState::Lost);
    }
    Ok(Some(Grant {
        fence: Fence::new(contender.key.clone(), FencingToken(contender.create_rev)),
        hold,
        handle: Box::new(contender),
    }))
}

fn session_lost() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the session was lost while waiting; the contender is gone — call again to queue on the new session",
    )
}

impl Contender {
    /// Deletes the key if it is still ours.
    fn delete_now(&self) -> Result<bool> {
        let (key, rev) = (&self.key, self.create_rev);
        self.inner.request(Counter::Txn, |s| match s.get(key) {
            Some(d) if d.create_rev == rev => s.delete(key),
            _ => false,
        })
    }
}

#[async_trait]
impl EphemeralHandle for Contender {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        let (key, rev) = (&self.key, self.create_rev);
        self.inner.request(Counter::Txn, |s| match s.get(key) {
            Some(d) if d.create_rev == rev => {
                s.put(key, value, None);
                Ok(())
            }
            _ => Err(Error::new(
                ErrorKind::Fenced,
                "the grant was lost; its key is gone",
            )),
        })?
    }

    async fn remove(mut self: Box<Self>) -> Result<()> {
        match self.delete_now() {
            Ok(_) => {
                self.removed = true;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Closed => {
                self.removed = true;
                Ok(())
            }
            // Dropping `self` queues the removal for when the link is back.
            Err(e) => Err(e),
        }
    }

    fn remove_in_background(self: Box<Self>) {}
}

impl Contender {
    fn release_turn(&self) {
        self.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.delete_now() {
                if e.kind() == ErrorKind::Unavailable {
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        // Cut off: remove once the link is back, keeping the local turn
                        // until then.
                        // The leftover is born `removed`: dropping it (even if the task is
                        // cancelled at runtime shutdown) never spawns again.
                        let inner = self.inner.clone();
                        let leftover = Contender {
                            inner: inner.clone(),
                            key: std::mem::take(&mut self.key),
                            create_rev: self.create_rev,
                            turn: self.turn.clone(),
                            removed: true,
                        };
                        rt.spawn(async move {
                            let _ = tokio::time::timeout(BACKGROUND_DEADLINE, inner.link_up()).await;
                            if let Err(e) = leftover.delete_now() {
                                tracing::debug!(error = %e, "coord.mem.contender_cleanup_deferred_to_session_end");
                            }
                            leftover.release_turn();
                        });
                        return;
                    }
                }
            }
        }
        self.release_turn();
    }
}
