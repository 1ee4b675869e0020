//! The queue behind locks and elections, in Curator's layout: each contender creates an
//! ephemeral sequential znode `<dir>/_c_<guid>-<kind>-<seq>` ("protected": a create
//! retried after connection loss finds its own node by the guid instead of making a
//! second one). The lowest sequence holds; every other contender watches only its
//! immediate predecessor. Token = the node's `czxid`, from the create's `Stat`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use coord_core::grant::Grant;
use coord_core::{
    Counter, EphemeralHandle, Error, ErrorKind, Fence, FencingToken, HoldSignal, HoldState, LocalQueue,
    LocalTurn, Result,
};
use zookeeper_client as zk;

use crate::error::{map, map_at};
use crate::session::Inner;

/// Which recipe a queue belongs to: its node-name marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Curator `InterProcessMutex`: `-lock-`.
    Lock,
    /// Curator `LeaderLatch`: `-latch-`.
    Latch,
}

impl Kind {
    fn marker(self) -> &'static str {
        match self {
            Kind::Lock => "-lock-",
            Kind::Latch => "-latch-",
        }
    }
}

/// The sequence number of a contender node name of `kind`, if it is one: Curator's
/// protected `_c_<guid>-lock-<seq>` or plain `lock-<seq>`.
pub(crate) fn sequence(name: &str, kind: Kind) -> Option<u64> {
    let marker = &kind.marker()[1..];
    let (before, seq) = name.rsplit_once(marker)?;
    if !(before.is_empty() || before.ends_with('-')) {
        return None;
    }
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seq.parse().ok()
}

/// The contender names of `kind` among `children`, in queue order.
pub(crate) fn queue(children: Vec<String>, kind: Kind) -> Vec<String> {
    let mut q: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| Some((sequence(&c, kind)?, c)))
        .collect();
    q.sort();
    q.into_iter().map(|(_, c)| c).collect()
}

/// A contender node, removed exactly once: by `remove`, or on drop (which covers a
/// cancelled acquire as well as a dropped guard).
pub(crate) struct Contender {
    inner: Arc<Inner>,
    dir: String,
    guid: String,
    kind: Kind,
    /// Known once the create succeeded.
    path: Option<String>,
    generation: u64,
    /// The client's turn at the name; given up only once our node is gone.
    turn: Arc<Mutex<Option<LocalTurn>>>,
    removed: bool,
}

enum Step {
    Granted,
    Busy,
    Wait(zk::OneshotWatcher),
    Retry,
}

/// Joins the queue at `dir` with `value`.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    queue_of: &LocalQueue,
    name: &str,
    dir: String,
    kind: Kind,
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
    let generation = inner.current()?.generation;
    let guid = uuid::Uuid::new_v4().to_string();
    let mut contender = Contender {
        inner: inner.clone(),
        dir: dir.clone(),
        guid,
        kind,
        path: None,
        generation,
        turn: Arc::new(Mutex::new(Some(turn))),
        removed: false,
    };
    let (path, czxid) = Box::pin(contender.create(&value)).await?;
    let own = path.rsplit('/').next().unwrap_or_default().to_owned();
    loop {
        let d = dir.clone();
        let children = inner
            .call(Counter::Read, "list contenders", false, |zk| async move {
                zk.list_children(&d).await
            })
            .await?;
        let step = match children {
            Err(zk::Error::NoNode) => return Err(session_lost()),
            Err(e) => return Err(map(e, "list contenders", false)),
            Ok(children) => {
                let q = queue(children, kind);
                match q.iter().position(|c| *c == own) {
                    None => return Err(session_lost()),
                    Some(0) => Step::Granted,
                    Some(_) if !wait => Step::Busy,
                    Some(i) => {
                        let pred = format!("{dir}/{}", q[i - 1]);
                        let watched = inner
                            .call(Counter::WatchSet, "watch predecessor", false, |zk| async move {
                                zk.check_and_watch_stat(&pred).await
                            })
                            .await?
                            .map_err(|e| map(e, "watch predecessor", false))?;
                        match watched {
                            (None, _) => Step::Retry,
                            (Some(_), w) => Step::Wait(w),
                        }
                    }
                }
            }
        };
        match step {
            Step::Granted => break,
            Step::Busy => {
                contender.remove_now().await?;
                return Ok(None);
            }
            Step::Retry => {}
            Step::Wait(watcher) => {
                tokio::select! {
                    event = watcher.changed() => {
                        inner.stats.incr(Counter::WatchEvent);
                        if event.event_type == zk::EventType::Session
                            && matches!(event.session_state, zk::SessionState::Expired | zk::SessionState::Closed)
                        {
                            return Err(session_lost());
                        }
                    }
                    _ = inner.session.ended(generation) => return Err(session_lost()),
                }
            }
        }
    }
    let (signal, hold) = HoldSignal::new();
    signal.follow_session(inner.session.subscribe(), generation);
    watch_own_node(
        inner.clone(),
        path.clone(),
        generation,
        signal,
        contender.turn.clone(),
    );
    Ok(Some(Grant {
        fence: Fence::new(path, FencingToken(czxid as u64)),
        hold,
        handle: Box::new(contender),
    }))
}

/// Ends the hold (and frees the local turn) when our node disappears or our session
/// ends. A new contender of this client gets a new guid, so it can only queue behind a
/// node of the old session, never collide with it.
fn watch_own_node(
    inner: Arc<Inner>,
    path: String,
    generation: u64,
    signal: HoldSignal,
    turn: Arc<Mutex<Option<LocalTurn>>>,
) {
    tokio::spawn(async move {
        let ended = inner.session.ended(generation);
        tokio::pin!(ended);
        loop {
            let p = path.clone();
            let watched = inner
                .call(Counter::WatchSet, "watch own node", false, |zk| async move {
                    zk.check_and_watch_stat(&p).await
                })
                .await;
            let watcher = match watched {
                Ok(Ok((Some(_), w))) => w,
                Ok(Ok((None, _))) | Ok(Err(zk::Error::NoNode)) => break,
                Ok(Err(e)) if map(e.clone(), "watch own node", false).is_retryable() => {
                    tokio::select! {
                        _ = inner.session.connected() => continue,
                        _ = &mut ended => break,
                    }
                }
                Err(e) if e.is_retryable() && e.kind() != ErrorKind::SessionLost => {
                    tokio::select! {
                        _ = inner.session.connected() => continue,
                        _ = &mut ended => break,
                    }
                }
                other => {
                    tracing::debug!(?other, "coord.zk.own_node_watch_ended");
                    break;
                }
            };
            let event = tokio::select! {
                e = watcher.changed() => e,
                _ = &mut ended => break,
                // The guard is gone; its drop removes the node and frees the turn.
                _ = signal.closed() => return,
            };
            inner.stats.incr(Counter::WatchEvent);
            match event.event_type {
                // A proclaim changed our data: still ours; re-arm.
                zk::EventType::NodeDataChanged => {}
                // A connection-level event (the client replays watches on reconnect):
                // re-arm; only a terminal state means the session, and the node, are gone.
                zk::EventType::Session
                    if !matches!(
                        event.session_state,
                        zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
                    ) => {}
                _ => {
                    tracing::debug!(?event, "coord.zk.own_node_event");
                    break;
                }
            }
        }
        signal.set(HoldState::Lost);
        turn.lock().unwrap_or_else(|p| p.into_inner()).take();
    });
}

fn session_lost() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the ZooKeeper session was lost while waiting; the contender is gone — call again to queue on the new session",
    )
}

impl Contender {
    /// Creates our node, recovering from an ambiguous failure by its guid.
    async fn create(&mut self, value: &[u8]) -> Result<(String, i64)> {
        let prefix = format!("{}/_c_{}{}", self.dir, self.guid, self.kind.marker());
        let mut made_dir = false;
        loop {
            let (p, v) = (prefix.clone(), value.to_vec());
            let options = self.inner.acl().ephemeral_sequential();
            let created = self
                .inner
                .call(Counter::Write, "create contender", true, |zk| async move {
                    zk.create(&p, &v, &options).await
                })
                .await;
            match created {
                Ok(Ok((stat, seq))) => {
                    let path = format!("{prefix}{seq}");
                    self.path = Some(path.clone());
                    return Ok((path, stat.czxid));
                }
                Ok(Err(zk::Error::NoNode)) if !made_dir => {
                    self.inner.ensure_dir(&self.dir).await?;
                    made_dir = true;
                }
                Ok(Err(e @ (zk::Error::ConnectionLoss | zk::Error::Timeout))) => {
                    tracing::debug!(error = %e, "coord.zk.create_outcome_unknown");
                    if let Some(found) = self.find_own().await? {
                        return Ok(found);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    if let Some(found) = self.find_own().await? {
                        return Ok(found);
                    }
                }
                Ok(Err(e)) => return Err(map_at(e, "create contender", true, &self.dir)),
                Err(e) => return Err(e),
            }
            if self.inner.current()?.generation != self.generation {
                return Err(session_lost());
            }
        }
    }

    /// Looks for a node of ours (by guid) after an ambiguous create.
    async fn find_own(&mut self) -> Result<Option<(String, i64)>> {
        self.inner.session.connected().await?;
        let dir = self.dir.clone();
        let children = match self
            .inner
            .call(Counter::Read, "find own contender", false, |zk| async move {
                zk.list_children(&dir).await
            })
            .await?
        {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(map(e, "find own contender", false)),
        };
        let mine = format!("_c_{}", self.guid);
        let Some(name) = children.into_iter().find(|c| c.starts_with(&mine)) else {
            return Ok(None);
        };
        let path = format!("{}/{name}", self.dir);
        let p = path.clone();
        let stat = self
            .inner
            .call_mapped(Counter::Read, "stat own contender", false, |zk| async move {
                zk.check_stat(&p).await
            })
            .await?;
        Ok(stat.map(|s| {
            self.path = Some(path.clone());
            (path, s.czxid)
        }))
    }

    /// Deletes our node (if any) on the current session.
    async fn remove_now(&mut self) -> Result<()> {
        let current = match self.inner.current() {
            Ok(c) if c.generation == self.generation => c,
            // Our session is gone, and our node with it.
            _ => {
                self.removed = true;
                self.release_turn();
                return Ok(());
            }
        };
        drop(current);
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let result = self
            .inner
            .call(Counter::Write, "delete contender", true, |zk| async move {
                zk.delete(&path, None).await
            })
            .await;
        match result {
            Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => {
                self.removed = true;
                self.release_turn();
                Ok(())
            }
            Ok(Err(zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
                self.removed = true;
                self.release_turn();
                Ok(())
            }
            Ok(Err(e)) => Err(map(e, "delete contender", true)),
            Err(e) if e.kind() == ErrorKind::Closed => {
                self.removed = true;
                self.release_turn();
                Ok(())
            }
            // The session was declared lost between the check above and the send: the
            // node went with it (a locally lost session is closed, never resumed).
            Err(e) if e.kind() == ErrorKind::SessionLost && !self.on_current_session() => {
                self.removed = true;
                self.release_turn();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether our session is still the client's current one.
    fn on_current_session(&self) -> bool {
        matches!(self.inner.current(), Ok(c) if c.generation == self.generation)
    }

    fn release_turn(&self) {
        self.turn.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

#[async_trait]
impl EphemeralHandle for Contender {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        let path = self
            .path
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Fenced, "no contender node"))?;
        match self.inner.current() {
            Ok(c) if c.generation == self.generation => {}
            _ => {
                return Err(Error::new(
                    ErrorKind::Fenced,
                    "the session of this grant was lost",
                ));
            }
        }
        let result = self
            .inner
            .call(Counter::Write, "proclaim", true, |zk| async move {
                zk.set_data(&path, &value, None).await
            })
            .await?;
        match result {
            Ok(_) => Ok(()),
            Err(zk::Error::NoNode) => Err(Error::new(
                ErrorKind::Fenced,
                "the grant was lost; its node is gone",
            )),
            Err(e) => Err(map(e, "proclaim", true)),
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
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Clean up with a fresh deadline, keeping the local turn until our node is gone.
        // The leftover is born `removed` so that dropping it (e.g. the task is cancelled
        // at runtime shutdown) never spawns again; the task removes explicitly.
        let mut leftover = Contender {
            inner: self.inner.clone(),
            dir: std::mem::take(&mut self.dir),
            guid: std::mem::take(&mut self.guid),
            kind: self.kind,
            path: self.path.take(),
            generation: self.generation,
            turn: self.turn.clone(),
            removed: true,
        };
        self.removed = true;
        rt.spawn(async move {
            let deadline = leftover.inner.options.request_deadline() * 2;
            let cleanup = async {
                if leftover.path.is_none() {
                    // The create's outcome was unknown when we were dropped: find it by guid.
                    let _ = leftover.find_own().await;
                }
                leftover.remove_now().await
            };
            if let Ok(Err(e)) | Err(e) = tokio::time::timeout(deadline, Box::pin(cleanup))
                .await
                .map_err(|_| Error::new(ErrorKind::Timeout, "cleanup deadline"))
            {
                tracing::warn!(error = %e, "coord.zk.contender_cleanup_failed: the node goes when the session ends");
            }
            leftover.removed = true;
            leftover.release_turn();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_names_sort_by_sequence() {
        let names = vec![
            "_c_b-lock-0000000010".to_owned(),
            "_c_a-lock-0000000002".to_owned(),
            "sub".to_owned(),
            "_c_c-latch-0000000001".to_owned(),
            "lock-0000000005".to_owned(),
        ];
        assert_eq!(
            queue(names, Kind::Lock),
            ["_c_a-lock-0000000002", "lock-0000000005", "_c_b-lock-0000000010"]
        );
        assert_eq!(sequence("_c_x-lock-", Kind::Lock), None);
        assert_eq!(sequence("_c_x-lock-12a", Kind::Lock), None);
    }
}
