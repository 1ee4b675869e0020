//! The contender queue in Curator's layout: each contender creates an ephemeral
//! sequential znode `<dir>/_c_<guid>-<marker>-<seq>` ("protected": a create retried after
//! connection loss finds its own node by the guid instead of making a second one). Queue
//! order is the sequence; the token is the node's `czxid`, from the create's `Stat`. The
//! directory is a container node, deleted by the server once empty.

use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{
    Backoff, Counter, HeadEvent, Joined, Position, Queue, QueueEntry, QueueId, QueueKind, Ticket,
};
use coord_core::{Error, ErrorKind, FencingToken, LeaderInfo, Result};
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use zookeeper_client as zk;

use crate::ZkClient;
use crate::error::{map, map_at};
use crate::session::Inner;

/// How many times a create retries after finding its directory gone: a container may be
/// deleted by the server between our `mkdir` and the create.
const DIR_ATTEMPTS: usize = 5;

/// The node-name marker of a queue's entries: Curator's `InterProcessMutex` (`lock-`)
/// and `LeaderLatch` (`latch-`).
fn marker(kind: QueueKind) -> &'static str {
    match kind {
        QueueKind::Election => "latch-",
        _ => "lock-",
    }
}

/// The sequence number of a contender node name with `marker`, if it is one: Curator's
/// protected `_c_<guid>-lock-<seq>` or plain `lock-<seq>`.
fn sequence(name: &str, marker: &str) -> Option<u64> {
    let (before, seq) = name.rsplit_once(marker)?;
    if !(before.is_empty() || before.ends_with('-')) {
        return None;
    }
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seq.parse().ok()
}

/// The contender names with `marker` among `children`, in queue order.
fn in_order(children: Vec<String>, marker: &str) -> Vec<String> {
    let mut q: Vec<(u64, String)> = children
        .into_iter()
        .filter_map(|c| Some((sequence(&c, marker)?, c)))
        .collect();
    q.sort();
    q.into_iter().map(|(_, c)| c).collect()
}

fn own_gone() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the contender's node is gone (its ZooKeeper session ended, or it was deleted)",
    )
}

impl ZkClient {
    /// The znode a lock's contenders live under (for Curator interoperability: pass this
    /// path to `InterProcessMutex`).
    pub fn lock_path(&self, name: &str) -> String {
        self.queue_dir(&QueueId::new(QueueKind::Lock, name))
    }

    /// The znode an election's candidates live under (Curator `LeaderLatch` path).
    pub fn election_path(&self, name: &str) -> String {
        self.queue_dir(&QueueId::new(QueueKind::Election, name))
    }

    fn queue_dir(&self, queue: &QueueId) -> String {
        self.inner.path(&queue.rel_dir())
    }
}

/// The directory of a ticket's entry and the `_c_<guid>` start of its name (the locator
/// is `<dir>/_c_<guid>-<marker>`).
fn split_locator(ticket: &Ticket) -> (&str, &str) {
    let (dir, name) = ticket.locator.rsplit_once('/').unwrap_or(("", &ticket.locator));
    let guid = name
        .strip_suffix(marker(ticket.queue.kind))
        .and_then(|n| n.strip_suffix('-'))
        .unwrap_or(name);
    (dir, guid)
}

/// Looks for the ticket's node (by its guid) after a create of unknown outcome.
async fn find_own(inner: &Inner, ticket: &Ticket) -> Result<Option<QueueEntry>> {
    let (dir, mine) = split_locator(ticket);
    // The server this client reconnected to may not have applied the create yet: catch
    // it up with the leader first, or a create that landed would look missing.
    let d = dir.to_owned();
    inner
        .call_mapped(Counter::Read, "find own contender", false, |zk| async move {
            match zk.sync(&d).await {
                Err(zk::Error::NoNode) => Ok(()),
                other => other,
            }
        })
        .await?;
    let Some(name) = crate::reads::children(inner, dir, "find own contender")
        .await?
        .into_iter()
        .find(|c| c.starts_with(mine))
    else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    let p = path.clone();
    let stat = inner
        .call_mapped(Counter::Read, "find own contender", false, |zk| async move {
            zk.check_stat(&p).await
        })
        .await?;
    Ok(stat.map(|s| QueueEntry {
        path,
        token: FencingToken(s.czxid as u64),
        seen_at: 0,
    }))
}

/// Reads the leader (first contender) of election directory `dir`; with `watch`, also
/// arms a child watch on the directory and a data watch on the leader's node.
async fn read_head(
    inner: &Inner,
    dir: &str,
    marker: &str,
    watch: bool,
) -> Result<(Option<LeaderInfo>, Vec<zk::OneshotWatcher>)> {
    loop {
        let d = dir.to_owned();
        let listed = if watch {
            inner
                .call(Counter::WatchSet, "observe", false, |zk| async move {
                    zk.list_and_watch_children(&d).await.map(|(c, w)| (c, Some(w)))
                })
                .await?
        } else {
            inner
                .call(Counter::Read, "leader", false, |zk| async move {
                    zk.list_children(&d).await.map(|c| (c, None))
                })
                .await?
        };
        let (children, child_watch) = match listed {
            Ok(x) => x,
            Err(zk::Error::NoNode) if !watch => return Ok((None, Vec::new())),
            // Nobody has joined the election (or its directory was swept): no leader, and
            // watch for the directory to appear — without creating it, which would leave
            // an empty container behind.
            Err(zk::Error::NoNode) => {
                let d = dir.to_owned();
                let exists = inner
                    .call(Counter::WatchSet, "observe", false, |zk| async move {
                        zk.check_and_watch_stat(&d).await
                    })
                    .await?
                    .map_err(|e| map_at(e, "leader", false, dir))?;
                match exists {
                    (None, watcher) => return Ok((None, vec![watcher])),
                    // Created meanwhile: list it.
                    (Some(_), _) => continue,
                }
            }
            Err(e) => return Err(map_at(e, "leader", false, dir)),
        };
        let mut watchers: Vec<zk::OneshotWatcher> = child_watch.into_iter().collect();
        let Some(first) = in_order(children, marker).into_iter().next() else {
            return Ok((None, watchers));
        };
        let path = format!("{dir}/{first}");
        let read = inner
            .call(
                if watch { Counter::WatchSet } else { Counter::Read },
                "leader",
                false,
                |zk| async move {
                    if watch {
                        zk.get_and_watch_data(&path)
                            .await
                            .map(|(d, s, w)| (d, s, Some(w)))
                    } else {
                        zk.get_data(&path).await.map(|(d, s)| (d, s, None))
                    }
                },
            )
            .await?;
        match read {
            Ok((value, stat, data_watch)) => {
                watchers.extend(data_watch);
                let info = LeaderInfo {
                    token: FencingToken(stat.czxid as u64),
                    value,
                };
                return Ok((Some(info), watchers));
            }
            // The leader left between the two reads: look again.
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(map(e, "leader", false)),
        }
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl Queue for ZkClient {
    fn ticket(&self, queue: &QueueId) -> Result<Ticket> {
        let current = self.inner.current()?;
        let guid = uuid::Uuid::new_v4();
        Ok(Ticket {
            queue: queue.clone(),
            generation: current.generation,
            session_id: current.zk.session_id().0,
            locator: format!("{}/_c_{guid}-{}", self.queue_dir(queue), marker(queue.kind)),
        })
    }

    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined> {
        let inner = &self.inner;
        let dir = self.queue_dir(&ticket.queue);
        let mut dir_attempts = 0;
        loop {
            let (p, v) = (ticket.locator.clone(), value.clone());
            let options = inner.acl().ephemeral_sequential();
            let created = match inner.current_on(ticket.generation) {
                Ok(current) => {
                    inner
                        .send(
                            current,
                            Counter::Write,
                            "create contender",
                            true,
                            |zk| async move { zk.create(&p, &v, &options).await },
                        )
                        .await
                }
                Err(e) => Err(e.with_operation("create contender")),
            };
            let unknown = match created {
                Ok(Ok((stat, seq))) => {
                    let own = QueueEntry {
                        path: format!("{}{seq}", ticket.locator),
                        token: FencingToken(stat.czxid as u64),
                        seen_at: 0,
                    };
                    return Ok(Joined { own, position: None });
                }
                Ok(Err(zk::Error::NoNode)) if dir_attempts < DIR_ATTEMPTS => {
                    dir_attempts += 1;
                    inner.ensure_dir(&dir).await?;
                    continue;
                }
                // Every failure that may have let the create through (a lost connection,
                // a reset, no answer) is resolved by looking for the node.
                Ok(Err(e)) => {
                    let e = map_at(e, "create contender", true, &dir);
                    if !e.outcome_unknown() {
                        return Err(e);
                    }
                    e
                }
                Err(e) if e.kind() == ErrorKind::Timeout || e.outcome_unknown() => e,
                Err(e) => return Err(e),
            };
            // The create may have landed: find it by its guid before trying again — for
            // as long as it takes. Giving up here would leave a node nobody knows of at
            // the head of the queue for the whole session (and a join sent again would
            // queue a second one behind it).
            tracing::debug!(error = %unknown, "coord.zk.create_outcome_unknown");
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
            loop {
                inner.session.connected().await?;
                if inner.current()?.generation != ticket.generation {
                    return Err(own_gone());
                }
                match find_own(inner, ticket).await {
                    Ok(Some(own)) => return Ok(Joined { own, position: None }),
                    Ok(None) => break,
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "coord.zk.find_own_retry");
                        backoff.wait().await;
                    }
                    Err(e) => return Err(e.with_outcome_unknown(true)),
                }
            }
        }
    }

    async fn position(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Position> {
        let dir = self.queue_dir(&ticket.queue);
        let queue = in_order(
            crate::reads::children(&self.inner, &dir, "list contenders").await?,
            marker(ticket.queue.kind),
        );
        let name = own.path.rsplit('/').next().unwrap_or_default();
        match queue.iter().position(|c| c == name) {
            None => Err(own_gone()),
            Some(0) => Ok(Position::First { seen_at: 0 }),
            Some(i) => {
                let ahead = QueueEntry {
                    path: format!("{dir}/{}", queue[i - 1]),
                    token: FencingToken(0),
                    seen_at: 0,
                };
                // Sequence numbers only grow: behind the first, nothing can come between.
                Ok(if i == 1 {
                    Position::Next(ahead)
                } else {
                    Position::Behind(ahead)
                })
            }
        }
    }

    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()> {
        let inner = &self.inner;
        loop {
            let p = entry.path.clone();
            let watched = inner
                .call(Counter::WatchSet, "watch contender", false, |zk| async move {
                    zk.check_and_watch_stat(&p).await
                })
                .await;
            let watcher = match watched {
                Ok(Ok((None, _))) | Ok(Err(zk::Error::NoNode)) => return Ok(()),
                Ok(Ok((Some(stat), _)))
                    if entry.token.get() != 0 && stat.czxid as u64 != entry.token.get() =>
                {
                    return Ok(());
                }
                Ok(Ok((Some(_), w))) => w,
                Ok(Err(e)) => return Err(map(e, "watch contender", false)),
                Err(e) => return Err(e),
            };
            let event = watcher.changed().await;
            inner.stats.incr(Counter::WatchEvent);
            match event.event_type {
                zk::EventType::NodeDeleted => return Ok(()),
                // A connection-level event: re-arm (the read sees any deletion meanwhile);
                // only a terminal state ends the session, and its watches.
                zk::EventType::Session => match event.session_state {
                    zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                        return Err(Error::new(
                            ErrorKind::SessionLost,
                            format!("the ZooKeeper session ended ({:?})", event.session_state),
                        ));
                    }
                    _ => {
                        inner.session.connected().await?;
                    }
                },
                // Data changed (a proclaim): still there; re-arm.
                _ => {}
            }
        }
    }

    async fn update(&self, ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()> {
        let path = own.path.clone();
        // The grant's session only: a proclaim never writes on a later session.
        let current = self
            .inner
            .current_on(ticket.generation)
            .map_err(|e| match e.kind() {
                ErrorKind::SessionLost => Error::new(ErrorKind::Fenced, "the session of this grant was lost"),
                _ => e.with_operation("proclaim"),
            })?;
        let result = self
            .inner
            .send(current, Counter::Write, "proclaim", true, |zk| async move {
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

    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()> {
        let own = match own {
            Some(own) => own.clone(),
            // The create's outcome was unknown: find the node by its guid.
            None => match find_own(&self.inner, ticket).await? {
                Some(found) => found,
                None => return Ok(()),
            },
        };
        let path = own.path.clone();
        let deleted = self
            .inner
            .call(Counter::Write, "delete contender", true, |zk| async move {
                zk.delete(&path, None).await
            })
            .await?;
        match deleted {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(map_at(e, "delete contender", true, &own.path)),
        }
    }

    async fn head(&self, queue: &QueueId) -> Result<Option<LeaderInfo>> {
        let dir = self.queue_dir(queue);
        Ok(read_head(&self.inner, &dir, marker(queue.kind), false).await?.0)
    }

    async fn watch_head(&self, queue: &QueueId) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        let dir = self.queue_dir(queue);
        let marker = marker(queue.kind);
        let inner = self.inner.clone();
        // Read once up front so errors surface to the caller.
        let (first, watchers) = read_head(&inner, &dir, marker, true).await?;
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(follow_head(inner, dir, marker, first, watchers, tx));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// Sends `first`, then the head after every change any of `watchers` (armed with it)
/// reports; a `Gap` when the session ends, then the head on the next session.
async fn follow_head(
    inner: std::sync::Arc<Inner>,
    dir: String,
    marker: &'static str,
    first: Option<LeaderInfo>,
    mut watchers: Vec<zk::OneshotWatcher>,
    tx: mpsc::Sender<Result<HeadEvent>>,
) {
    if tx.send(Ok(HeadEvent::Head(first))).await.is_err() {
        return;
    }
    let mut backoff = coord_core::raw::Backoff::new(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_secs(1),
    );
    loop {
        let mut gap = false;
        if watchers.is_empty() {
            backoff.wait().await;
        } else {
            // Any child change, leader data change or session event: read again.
            let any = futures::future::select_all(watchers.into_iter().map(|w| Box::pin(w.changed())));
            let (event, _, _) = tokio::select! {
                fired = any => fired,
                _ = tx.closed() => return,
            };
            inner.stats.incr(Counter::WatchEvent);
            gap = event.event_type == zk::EventType::Session
                && matches!(
                    event.session_state,
                    zk::SessionState::Expired | zk::SessionState::Closed | zk::SessionState::AuthFailed
                );
        }
        if inner.is_closed() {
            let _ = tx.send(Err(Error::closed())).await;
            return;
        }
        if gap && tx.send(Ok(HeadEvent::Gap)).await.is_err() {
            return;
        }
        // Read again on the current (possibly new) session, waiting out outages.
        let (head, w) = loop {
            match read_head(&inner, &dir, marker, true).await {
                Ok(x) => break x,
                // Closed, or refused for good: the stream ends with the error.
                Err(e) if e.kind() == ErrorKind::Closed || !e.is_retryable() => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "coord.zk.observe_retry");
                    tokio::select! {
                        c = inner.session.connected() => if c.is_err() {
                            let _ = tx.send(Err(Error::closed())).await;
                            return;
                        },
                        _ = tx.closed() => return,
                    }
                    backoff.wait().await;
                }
            }
        };
        watchers = w;
        if tx.send(Ok(HeadEvent::Head(head))).await.is_err() {
            return;
        }
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
            in_order(names, "lock-"),
            ["_c_a-lock-0000000002", "lock-0000000005", "_c_b-lock-0000000010"]
        );
        assert_eq!(sequence("_c_x-lock-", "lock-"), None);
        assert_eq!(sequence("_c_x-lock-12a", "lock-"), None);
    }

    #[test]
    fn a_ticket_locator_splits_into_dir_and_guid() {
        let ticket = Ticket {
            queue: QueueId::new(QueueKind::Lock, "a/b"),
            generation: 1,
            session_id: 1,
            locator: "/ns/locks/a/b/_c_0b8b2c36-6b4c-4a8a-9a57-5b2f4c1c9f10-lock-".into(),
        };
        assert_eq!(
            split_locator(&ticket),
            ("/ns/locks/a/b", "_c_0b8b2c36-6b4c-4a8a-9a57-5b2f4c1c9f10")
        );
    }
}
