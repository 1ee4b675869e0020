//! The contender queue in Curator's layout: each contender creates an ephemeral
//! sequential znode `<dir>/_c_<guid>-<marker><seq>` ("protected": a create retried after
//! connection loss finds its own node by the guid instead of making a second one), or,
//! with `lock_layout=kazoo`, kazoo's `<dir>/<guid><marker><seq>`. Contenders of both
//! layouts are recognised. ContenderQueue order is the sequence; the token is the node's `czxid`,
//! from the create's `Stat`. A read/write lock's readers (`__READ__`, `__rlock__`) wait
//! for the nearest writer ahead (`__WRIT__`, `__lock__`), everything else for the
//! contender right ahead. The directory is a container node, deleted by the server once
//! empty.

use std::time::Duration;

use async_trait::async_trait;
use coord_core::raw::{
    Ahead, Backoff, ContenderQueue, Counter, EntriesEvent, HeadEvent, Joined, Member, QueueEntry, QueueSpec,
    ReleaseMark, Slot, Surveyed, Ticket,
};
use coord_core::{Error, ErrorKind, FencingToken, Head, Result};
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use zookeeper_client as zk;

use crate::ZkClient;
use crate::error::{map, map_at};
use crate::options::LockLayout;
use crate::session::Inner;

/// How many times a create retries after finding its directory gone: a container may be
/// deleted by the server between our `mkdir` and the create.
const DIR_ATTEMPTS: usize = 5;

/// The start of the name of a contender coord creates for `spec` (the server appends the
/// sequence): Curator's protected `_c_<guid>-<marker>`, or, in kazoo's layout where the
/// class has a kazoo marker, kazoo's `<guid hex><marker>`. Either way the guid finds the
/// node again after a create of unknown outcome.
fn own_name_prefix(spec: &QueueSpec, layout: LockLayout, guid: uuid::Uuid) -> String {
    let class = spec.own_class();
    match (layout, class.kazoo_marker) {
        (LockLayout::Kazoo, Some(marker)) => format!("{}{marker}", guid.simple()),
        _ => format!("_c_{guid}-{}", class.markers.first().copied().unwrap_or("entry-")),
    }
}

/// The entry names of queue `spec` among `children`, in queue order, with their classes.
fn in_order(children: Vec<String>, spec: &QueueSpec) -> Vec<(String, usize)> {
    let mut q: Vec<(u64, String, usize)> = children
        .into_iter()
        .filter_map(|c| {
            let (seq, class) = spec.sequence_of_name(&c)?;
            Some((seq, c, class))
        })
        .collect();
    q.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    q.into_iter().map(|(_, c, class)| (c, class)).collect()
}

/// What a listing of queue `dir` shows ahead of `own`: `None` when `own` is not in it.
fn ahead_of(
    spec: &QueueSpec,
    dir: &str,
    children: Vec<String>,
    own: &QueueEntry,
    mark: Option<ReleaseMark>,
) -> Option<Ahead> {
    let mut queue = in_order(children, spec);
    let name = own.path.rsplit('/').next().unwrap_or_default();
    let i = queue.iter().position(|(c, _)| c == name)?;
    queue.truncate(i);
    // A listing has names only: the token is not known (sequential names are never
    // reused, so the path alone names one incarnation).
    let entries = queue.into_iter().map(|(c, class)| {
        let entry = QueueEntry {
            path: format!("{dir}/{c}"),
            token: FencingToken(0),
            seen_at: 0,
        };
        (entry, class)
    });
    Some(Ahead {
        entries: spec.pick(entries),
        seen_at: 0,
        mark,
    })
}

fn own_gone() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the contender's node is gone (its ZooKeeper session ended, or it was deleted)",
    )
}

impl ZkClient {
    fn queue_dir(&self, queue: &QueueSpec) -> String {
        self.inner.path(&queue.dir)
    }
}

/// The directory of a ticket's entry and the start of its name, which only that entry's
/// name has (the locator is `<dir>/<name prefix>`).
fn split_locator(ticket: &Ticket) -> (&str, &str) {
    ticket.locator.rsplit_once('/').unwrap_or(("", &ticket.locator))
}

/// A new random guid for an entry's name, marked as coord's: version 8 ("custom")
/// where Curator and kazoo write random version-4 ones, so that an inspector tells
/// coord's entries from theirs (`coord inspect`). Any 36-character guid keeps Curator's
/// protected-name rules.
fn coord_guid() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(*uuid::Uuid::new_v4().as_bytes())
        .with_version(uuid::Version::Custom)
        .into_uuid()
}

/// Looks for the ticket's node (by its guid) after a create of unknown outcome.
async fn find_own(inner: &Inner, ticket: &Ticket) -> Result<Option<QueueEntry>> {
    let (dir, mine) = split_locator(ticket);
    // The server this client reconnected to may not have applied the create yet: catch
    // it up with the leader first, or a create that landed would look missing.
    crate::session::catch_up(inner, dir, "find own contender").await?;
    let Some(name) = crate::session::children(inner, dir, "find own contender")
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

/// The children of queue directory `dir` and, where `spec` has a lock-delay, its release
/// mark (the directory node's data) in the same request (a `multiRead`).
async fn children_and_mark(
    inner: &Inner,
    dir: &str,
    spec: &QueueSpec,
) -> Result<(Vec<String>, Option<ReleaseMark>)> {
    if spec.lock_delay.is_none() {
        return Ok((
            crate::session::children(inner, dir, "list contenders").await?,
            None,
        ));
    }
    let d = dir.to_owned();
    let results = inner
        .call_mapped(Counter::Read, "list contenders", false, |zk| async move {
            let mut reader = zk.new_multi_reader();
            reader.add_get_data(&d)?;
            reader.add_get_children(&d)?;
            reader.commit().await
        })
        .await?;
    let mut results = results.into_iter();
    let mark = mark_of(results.next(), "list contenders", dir)?;
    let children = match results.next() {
        Some(zk::MultiReadResult::Children { children }) => children,
        Some(zk::MultiReadResult::Error {
            err: zk::Error::NoNode,
        })
        | None => Vec::new(),
        Some(zk::MultiReadResult::Error { err }) => return Err(map_at(err, "list contenders", false, dir)),
        Some(other) => return Err(unexpected(other)),
    };
    Ok((children, mark))
}

/// The release mark in a multiRead's answer to the queue directory's data (`dir`): none
/// when the directory is gone.
fn mark_of(result: Option<zk::MultiReadResult>, op: &'static str, dir: &str) -> Result<Option<ReleaseMark>> {
    match result {
        Some(zk::MultiReadResult::Data { data, .. }) => Ok(ReleaseMark::decode(&data)),
        Some(zk::MultiReadResult::Error {
            err: zk::Error::NoNode,
        })
        | None => Ok(None),
        Some(zk::MultiReadResult::Error { err }) => Err(map_at(err, op, false, dir)),
        Some(other) => Err(unexpected(other)),
    }
}

fn unexpected(result: zk::MultiReadResult) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("unexpected multiRead result {result:?}"),
    )
}

/// Reads the leader (first contender) of election directory `dir`; with `watch`, also
/// arms a child watch on the directory and a data watch on the leader's node.
async fn read_head(
    inner: &Inner,
    dir: &str,
    spec: &QueueSpec,
    watch: bool,
) -> Result<(Option<Head>, Vec<zk::OneshotWatcher>)> {
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
        let Some((first, _)) = in_order(children, spec).into_iter().next() else {
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
                let info = Head {
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
impl ContenderQueue for ZkClient {
    fn ticket(&self, queue: &QueueSpec, _slot: Slot) -> Result<Ticket> {
        // Every entry has a name of its own (its guid): slots need nothing more.
        let current = self.inner.current()?;
        let name = own_name_prefix(queue, self.inner.options.lock_layout, coord_guid());
        Ok(Ticket {
            queue: queue.clone(),
            generation: current.generation,
            session_id: current.zk.session_id().0,
            locator: format!("{}/{name}", self.queue_dir(queue)),
        })
    }

    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined> {
        let inner = &self.inner;
        let dir = self.queue_dir(&ticket.queue);
        let mut dir_attempts = 0;
        // The listing that tells the position, when the spec counts anyone ahead: sent
        // right behind the create, on the same session, so both are in flight at once
        // (the server answers a session's requests in order: the listing sees the node).
        let list = ticket.queue.counts_any();
        loop {
            let (p, v, d) = (ticket.locator.clone(), value.clone(), dir.clone());
            let options = inner.acl().ephemeral_sequential();
            let created = match inner.current_on(ticket.generation) {
                Ok(current) => {
                    if list {
                        inner.stats.incr(Counter::Read);
                    }
                    inner
                        .send(
                            current,
                            Counter::Write,
                            "create contender",
                            true,
                            |zk| async move {
                                // Both requests leave when called, in this order.
                                let create = zk.create(&p, &v, &options);
                                let listing = async {
                                    if list {
                                        Some(zk.list_children(&d).await)
                                    } else {
                                        None
                                    }
                                };
                                let (created, listed) = futures::join!(create, listing);
                                created.map(|c| (c, listed))
                            },
                        )
                        .await
                }
                Err(e) => Err(e.with_operation("create contender")),
            };
            let unknown = match created {
                Ok(Ok(((stat, seq), listed))) => {
                    let own = QueueEntry {
                        path: format!("{}{seq}", ticket.locator),
                        token: FencingToken(stat.czxid as u64),
                        seen_at: 0,
                    };
                    let ahead = match listed {
                        None => Some(Ahead::default()),
                        Some(Ok(children)) => ahead_of(&ticket.queue, &dir, children, &own, None),
                        // Read apart, as after any wait.
                        Some(Err(_)) => None,
                    };
                    return Ok(Joined { own, ahead });
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
                    Ok(Some(own)) => return Ok(Joined { own, ahead: None }),
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

    async fn ahead(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        let dir = self.queue_dir(&ticket.queue);
        let spec = &ticket.queue;
        let (children, mark) = children_and_mark(&self.inner, &dir, spec).await?;
        ahead_of(spec, &dir, children, own, mark).ok_or_else(own_gone)
    }

    async fn confirm(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        // The own node alone (an `exists`; with a lock-delay, a multiRead with the
        // queue's mark): O(1), where a listing returns every contender.
        let spec = &ticket.queue;
        let path = own.path.clone();
        let (stat, mark) = if spec.lock_delay.is_none() {
            let stat = self
                .inner
                .call_mapped(Counter::Read, "confirm contender", false, |zk| async move {
                    zk.check_stat(&path).await
                })
                .await?;
            (stat, None)
        } else {
            let dir = self.queue_dir(spec);
            let d = dir.clone();
            let results = self
                .inner
                .call_mapped(Counter::Read, "confirm contender", false, |zk| async move {
                    let mut reader = zk.new_multi_reader();
                    reader.add_get_data(&d)?;
                    reader.add_get_data(&path)?;
                    reader.commit().await
                })
                .await?;
            let mut results = results.into_iter();
            let mark = mark_of(results.next(), "confirm contender", &dir)?;
            let stat = match results.next() {
                Some(zk::MultiReadResult::Data { stat, .. }) => Some(stat),
                Some(zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                })
                | None => None,
                Some(zk::MultiReadResult::Error { err }) => {
                    return Err(map(err, "confirm contender", false));
                }
                Some(other) => return Err(unexpected(other)),
            };
            (stat, mark)
        };
        // A sequential node's path names one incarnation; the token, when known, too.
        match stat {
            Some(s) if own.token.get() == 0 || s.czxid as u64 == own.token.get() => Ok(Ahead {
                entries: Vec::new(),
                seen_at: 0,
                mark,
            }),
            _ => Err(own_gone()),
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

    async fn mark(&self, entry: &QueueEntry, value: Vec<u8>) -> Result<bool> {
        // A sequential node's path is never reused while its directory lives: the path
        // names the incarnation; a token, when known, is checked against its czxid. The
        // write is conditional on the data version read with it, so a node replaced in
        // between is never written; a value changed in between (its holder proclaimed)
        // is read again.
        let path = entry.path.clone();
        let token = entry.token.get();
        loop {
            let read = self
                .inner
                .call(Counter::Read, "mark", false, |zk| {
                    let p = path.clone();
                    async move { zk.get_data(&p).await }
                })
                .await?;
            let stat = match read {
                Ok((_, stat)) if token == 0 || stat.czxid as u64 == token => stat,
                Ok(_) | Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return Err(map_at(e, "mark", false, &path)),
            };
            let written = self
                .inner
                .call(Counter::Write, "mark", true, |zk| {
                    let (p, v) = (path.clone(), value.clone());
                    async move { zk.set_data(&p, &v, Some(stat.version)).await }
                })
                .await?;
            match written {
                Ok(_) => return Ok(true),
                Err(zk::Error::NoNode) => return Ok(false),
                Err(zk::Error::BadVersion) => continue,
                Err(e) => return Err(map_at(e, "mark", true, &path)),
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

    async fn release(&self, ticket: &Ticket, own: &QueueEntry) -> Result<()> {
        if ticket.queue.lock_delay.is_none() {
            return self.leave(ticket, Some(own)).await;
        }
        // The delete of `leave`, and the release mark (the directory's data) in the same
        // `multi`.
        let (dir, path) = (self.queue_dir(&ticket.queue), own.path.clone());
        let mark = ReleaseMark::Released {
            entry: own.path.clone(),
            token: own.token,
        }
        .encode();
        let released = self
            .inner
            .call(Counter::Txn, "release contender", true, |zk| async move {
                let mut writer = zk.new_multi_writer();
                writer.add_set_data(&dir, &mark, None)?;
                writer.add_delete(&path, None)?;
                Ok(writer.commit().await)
            })
            .await?
            .map_err(|e| map_at(e, "release contender", true, &own.path))?;
        match released {
            // The directory or the node is gone: so is the node.
            Ok(_)
            | Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode,
                ..
            }) => Ok(()),
            Err(zk::MultiWriteError::OperationFailed { source, .. })
            | Err(zk::MultiWriteError::RequestFailed { source }) => {
                Err(map_at(source, "release contender", true, &own.path))
            }
        }
    }

    async fn write_release_mark(&self, queue: &QueueSpec, mark: &ReleaseMark) -> Result<()> {
        let (dir, mark) = (self.queue_dir(queue), mark.encode());
        let d = dir.clone();
        let written = self
            .inner
            .call(Counter::Write, "write release mark", true, |zk| async move {
                zk.set_data(&d, &mark, None).await
            })
            .await?;
        match written {
            Ok(_) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(map_at(e, "write release mark", true, &dir)),
        }
    }

    async fn release_mark(&self, queue: &QueueSpec) -> Result<Option<ReleaseMark>> {
        let dir = self.queue_dir(queue);
        let d = dir.clone();
        let read = self
            .inner
            .call(Counter::Read, "read release mark", false, |zk| async move {
                zk.get_data(&d).await
            })
            .await?;
        match read {
            Ok((data, _)) => Ok(ReleaseMark::decode(&data)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_at(e, "read release mark", false, &dir)),
        }
    }

    async fn head(&self, queue: &QueueSpec) -> Result<Option<Head>> {
        let dir = self.queue_dir(queue);
        Ok(read_head(&self.inner, &dir, queue, false).await?.0)
    }

    async fn watch_head(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        let (inner, dir, spec) = (self.inner.clone(), self.queue_dir(queue), queue.clone());
        let read = move || {
            let (inner, dir, spec) = (inner.clone(), dir.clone(), spec.clone());
            async move {
                let (head, w) = read_head(&inner, &dir, &spec, true).await?;
                Ok((HeadEvent::Head(head), w))
            }
        };
        followed(self.inner.clone(), read, HeadEvent::Gap).await
    }

    async fn watch_entries(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<EntriesEvent>>> {
        let (inner, dir, spec) = (self.inner.clone(), self.queue_dir(queue), queue.clone());
        let read = move || {
            let (inner, dir, spec) = (inner.clone(), dir.clone(), spec.clone());
            async move {
                let (entries, w) = read_entries(&inner, &dir, &spec).await?;
                Ok((EntriesEvent::Entries(entries), w))
            }
        };
        followed(self.inner.clone(), read, EntriesEvent::Gap).await
    }

    async fn survey(&self, root: &str) -> Result<Vec<Surveyed>> {
        // Level by level: list the directories found so far, then read every child
        // (value and stat) at once; ephemeral nodes are entries, nodes with children are
        // directories for the next level. A node gone between the list and the read is
        // skipped.
        let namespace = self.inner.path("");
        let mut found = Vec::new();
        let mut dirs = vec![self.inner.path(root)];
        while !dirs.is_empty() {
            let listed = futures::future::join_all(dirs.iter().map(|dir| {
                let d = dir.clone();
                self.inner.call(Counter::Read, "survey", false, |zk| async move {
                    zk.list_children(&d).await
                })
            }))
            .await;
            let mut children = Vec::new();
            for (dir, listed) in dirs.iter().zip(listed) {
                match listed? {
                    Ok(names) => children.extend(names.into_iter().map(|n| format!("{dir}/{n}"))),
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(map_at(e, "survey", false, dir)),
                }
            }
            let read = futures::future::join_all(children.iter().map(|path| {
                let p = path.clone();
                self.inner.call(Counter::Read, "survey", false, |zk| async move {
                    zk.get_data(&p).await
                })
            }))
            .await;
            dirs = Vec::new();
            for (path, read) in children.into_iter().zip(read) {
                let (value, stat) = match read? {
                    Ok(x) => x,
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(map_at(e, "survey", false, &path)),
                };
                if stat.num_children > 0 {
                    dirs.push(path.clone());
                }
                if stat.ephemeral_owner == 0 {
                    continue;
                }
                let rel = path.strip_prefix(&namespace).unwrap_or(&path);
                if let Some((dir, name)) = rel.rsplit_once('/') {
                    found.push(Surveyed {
                        dir: dir.to_owned(),
                        name: name.to_owned(),
                        token: FencingToken(stat.czxid as u64),
                        value,
                        owner: stat.ephemeral_owner as u64,
                        created_ms: u64::try_from(stat.ctime).ok(),
                    });
                }
            }
        }
        found.sort_by(|a: &Surveyed, b: &Surveyed| (&a.dir, a.token).cmp(&(&b.dir, b.token)));
        Ok(found)
    }
}

/// A stream of what `read` returns: once now (its error is the caller's), then after
/// every change the watches of the last read report; `gap_event` when the session ends,
/// then a read on the next session.
async fn followed<E, R, Fut>(
    inner: std::sync::Arc<Inner>,
    read: R,
    gap_event: E,
) -> Result<BoxStream<'static, Result<E>>>
where
    E: Clone + Send + 'static,
    R: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(E, Vec<zk::OneshotWatcher>)>> + Send + 'static,
{
    let (first, watchers) = read().await?;
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(follow(inner, first, watchers, gap_event, read, tx));
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// Sends `first`, then what `read` returns after every change any of `watchers` (armed
/// by the last read) reports; `gap` when the session ends, then a read on the next
/// session.
async fn follow<E, R, Fut>(
    inner: std::sync::Arc<Inner>,
    first: E,
    mut watchers: Vec<zk::OneshotWatcher>,
    gap_event: E,
    read: R,
    tx: mpsc::Sender<Result<E>>,
) where
    E: Clone + Send + 'static,
    R: Fn() -> Fut + Send,
    Fut: Future<Output = Result<(E, Vec<zk::OneshotWatcher>)>> + Send,
{
    if tx.send(Ok(first)).await.is_err() {
        return;
    }
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let mut gap = false;
        if watchers.is_empty() {
            backoff.wait().await;
        } else {
            // Any watched change or session event: read again.
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
        if gap && tx.send(Ok(gap_event.clone())).await.is_err() {
            return;
        }
        // Read again on the current (possibly new) session, waiting out outages.
        let (now, w) = loop {
            match read().await {
                Ok(x) => break x,
                // Closed, or refused for good: the stream ends with the error.
                Err(e) if e.kind() == ErrorKind::Closed || !e.is_retryable() => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "coord.zk.queue_watch_retry");
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
        if tx.send(Ok(now)).await.is_err() {
            return;
        }
    }
}

/// Reads every contender of queue directory `dir` with its value, in queue order, and
/// arms a child watch on the directory and a data watch on each contender (a member's
/// value changes as it moves through a barrier).
async fn read_entries(
    inner: &Inner,
    dir: &str,
    spec: &QueueSpec,
) -> Result<(Vec<Member>, Vec<zk::OneshotWatcher>)> {
    loop {
        let d = dir.to_owned();
        let listed = inner
            .call(Counter::WatchSet, "watch entries", false, |zk| async move {
                zk.list_and_watch_children(&d).await
            })
            .await?;
        let (children, child_watch) = match listed {
            Ok(x) => x,
            // Nobody has joined (or the directory was swept): no entries, and watch for
            // the directory to appear without creating it.
            Err(zk::Error::NoNode) => {
                let d = dir.to_owned();
                let exists = inner
                    .call(Counter::WatchSet, "watch entries", false, |zk| async move {
                        zk.check_and_watch_stat(&d).await
                    })
                    .await?
                    .map_err(|e| map_at(e, "watch entries", false, dir))?;
                match exists {
                    (None, watcher) => return Ok((Vec::new(), vec![watcher])),
                    (Some(_), _) => continue,
                }
            }
            Err(e) => return Err(map_at(e, "watch entries", false, dir)),
        };
        let mut watchers = vec![child_watch];
        let mut members = Vec::new();
        for (name, _) in in_order(children, spec) {
            let path = format!("{dir}/{name}");
            let p = path.clone();
            let read = inner
                .call(Counter::WatchSet, "watch entries", false, |zk| async move {
                    zk.get_and_watch_data(&p).await
                })
                .await?;
            match read {
                Ok((value, stat, w)) => {
                    watchers.push(w);
                    members.push(Member {
                        path,
                        token: FencingToken(stat.czxid as u64),
                        value,
                    });
                }
                // Left between the list and the read: the child watch fires for it.
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(map(e, "watch entries", false)),
            }
        }
        return Ok((members, watchers));
    }
}

#[cfg(test)]
mod tests {
    use coord_core::raw::EntryClass;

    use super::*;

    /// A lock-like queue's one class, with Curator's and kazoo's markers.
    const LOCK: &[EntryClass] = &[EntryClass {
        subdir: "",
        markers: &["lock-", "__lock__", "__rlock__"],
        kazoo_marker: Some("__lock__"),
    }];
    const LATCH: &[EntryClass] = &[EntryClass {
        subdir: "",
        markers: &["latch-"],
        kazoo_marker: None,
    }];
    const RW: &[EntryClass] = &[
        EntryClass {
            subdir: "read",
            markers: &["__READ__", "__rlock__"],
            kazoo_marker: Some("__rlock__"),
        },
        EntryClass {
            subdir: "write",
            markers: &["__WRIT__", "__lock__"],
            kazoo_marker: Some("__lock__"),
        },
    ];

    fn spec(classes: &'static [EntryClass]) -> QueueSpec {
        QueueSpec::new("test", "q", classes, coord_core::raw::Admission::Exclusive)
    }

    #[test]
    fn curator_and_kazoo_names_sort_by_sequence() {
        let names = vec![
            "_c_b-lock-0000000010".to_owned(),
            "_c_a-lock-0000000002".to_owned(),
            "sub".to_owned(),
            "_c_c-latch-0000000001".to_owned(),
            "lock-0000000005".to_owned(),
            "0f1e2d3c__lock__0000000007".to_owned(),
            "0f1e2d3d__rlock__0000000003".to_owned(),
        ];
        let lock: Vec<String> = in_order(names.clone(), &spec(LOCK))
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(
            lock,
            [
                "_c_a-lock-0000000002",
                "0f1e2d3d__rlock__0000000003",
                "lock-0000000005",
                "0f1e2d3c__lock__0000000007",
                "_c_b-lock-0000000010"
            ]
        );
        assert_eq!(
            in_order(names, &spec(LATCH)),
            [("_c_c-latch-0000000001".to_owned(), 0)]
        );
        assert_eq!(spec(LOCK).sequence_of_name("_c_x-lock-"), None);
        assert_eq!(spec(LOCK).sequence_of_name("_c_x-lock-12a"), None);
        assert_eq!(spec(LOCK).sequence_of_name("xlock-12"), None);
    }

    #[test]
    fn read_write_names_have_classes() {
        let names = vec![
            "_c_a-__READ__0000000001".to_owned(),
            "_c_b-__WRIT__0000000002".to_owned(),
            "ab__rlock__0000000003".to_owned(),
            "cd__lock__0000000004".to_owned(),
            "_c_e-lock-0000000005".to_owned(),
        ];
        assert_eq!(
            in_order(names, &spec(RW)),
            [
                ("_c_a-__READ__0000000001".to_owned(), 0),
                ("_c_b-__WRIT__0000000002".to_owned(), 1),
                ("ab__rlock__0000000003".to_owned(), 0),
                ("cd__lock__0000000004".to_owned(), 1),
            ]
        );
    }

    #[test]
    fn coord_guids_are_version_8() {
        let guid = coord_guid();
        assert_eq!(guid.get_version_num(), 8);
        assert_eq!(guid.to_string().as_bytes()[14], b'8');
        assert_ne!(coord_guid(), guid);
    }

    #[test]
    fn own_names_follow_the_layout() {
        let guid = uuid::Uuid::nil();
        assert_eq!(
            own_name_prefix(&spec(LOCK), LockLayout::Curator, guid),
            "_c_00000000-0000-0000-0000-000000000000-lock-"
        );
        assert_eq!(
            own_name_prefix(&spec(RW), LockLayout::Kazoo, guid),
            "00000000000000000000000000000000__rlock__"
        );
        assert_eq!(
            own_name_prefix(&spec(RW).as_class(1), LockLayout::Curator, guid),
            "_c_00000000-0000-0000-0000-000000000000-__WRIT__"
        );
        assert_eq!(
            own_name_prefix(&spec(LATCH), LockLayout::Kazoo, guid),
            "_c_00000000-0000-0000-0000-000000000000-latch-"
        );
    }

    #[test]
    fn a_ticket_locator_splits_into_dir_and_name_prefix() {
        let ticket = Ticket {
            queue: spec(LOCK),
            generation: 1,
            session_id: 1,
            locator: "/ns/locks/a/b/_c_0b8b2c36-6b4c-4a8a-9a57-5b2f4c1c9f10-lock-".into(),
        };
        assert_eq!(
            split_locator(&ticket),
            ("/ns/locks/a/b", "_c_0b8b2c36-6b4c-4a8a-9a57-5b2f4c1c9f10-lock-")
        );
    }
}
