//! The contender queue on the in-memory cluster, with etcd's rules: each contender's key
//! is `<dir>/<session hex>` (a read/write lock's `<dir>/read/…` and `<dir>/write/…`; a
//! reader's slot beyond the first adds `.<slot>`), bound to the session and created only
//! if absent; queue order and token are the key's creation revision.

use async_trait::async_trait;
use coord_core::mutants::{self, Mutant};
use coord_core::raw::{
    Ahead, ContenderQueue, Counter, EntriesEvent, HeadEvent, HeadTracker, Joined, QueueEntry, QueueSpec,
    ReleaseMark, Slot, Surveyed, Ticket, release_mark_key,
};
use coord_core::{FencingToken, Head, Result};
use futures::stream::BoxStream;

use crate::MemClient;
use crate::error;
use crate::watch::{self, Raw};
use coord_mem_cluster::State;

impl MemClient {
    /// The key prefix a queue's contenders live under.
    fn queue_dir(&self, queue: &QueueSpec) -> String {
        self.inner.key(&queue.dir)
    }
}

/// ContenderQueue `dir`'s release mark, where `spec` has a lock-delay.
fn mark_in(state: &State, dir: &str, spec: &QueueSpec) -> Option<ReleaseMark> {
    spec.lock_delay?;
    ReleaseMark::decode(&state.get(&release_mark_key(dir))?.value)
}

/// The entries ahead of a contender of `spec` created at `own_rev` in its queue at
/// `dir` that `spec` counts, with the queue's release mark.
fn ahead_in(state: &State, dir: &str, spec: &QueueSpec, own_rev: u64) -> Ahead {
    let seen_at = state.revision();
    let mut ahead: Vec<(QueueEntry, usize)> = state
        .range(dir)
        .filter(|(_, d)| d.create_rev < own_rev)
        .filter_map(|(key, d)| {
            let class = spec.class_of_key(dir, key)?;
            let entry = QueueEntry {
                path: key.clone(),
                token: FencingToken(d.create_rev),
                seen_at,
            };
            Some((entry, class))
        })
        .collect();
    ahead.sort_by_key(|(e, _)| e.token);
    Ahead {
        entries: spec.pick(ahead),
        seen_at,
        mark: mark_in(state, dir, spec),
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl ContenderQueue for MemClient {
    fn ticket(&self, queue: &QueueSpec, slot: Slot) -> Result<Ticket> {
        let (session, generation) = self.inner.live_session()?;
        let dir = queue.class_dir(&self.queue_dir(queue), queue.class);
        Ok(Ticket {
            queue: queue.clone(),
            generation,
            session_id: session as i64,
            locator: match slot {
                0 => format!("{dir}/{session:016x}"),
                n => format!("{dir}/{session:016x}.{n}"),
            },
        })
    }

    async fn join(&self, ticket: &Ticket, value: Vec<u8>) -> Result<Joined> {
        let session = ticket.session_id as u64;
        let dir = self.queue_dir(&ticket.queue);
        // One request: create our key if absent, bound to a session the server knows,
        // and read where it stands.
        let (ticket, queue) = (ticket.locator.clone(), ticket.queue.clone());
        self.inner
            .call_write(Counter::Txn, move |s| {
                if !s.session_alive(session) {
                    return Err(error::session_expired());
                }
                let own_rev = match s.get(&ticket) {
                    Some(existing) => existing.create_rev,
                    None => s.put(&ticket, value, Some(session)).create_rev,
                };
                let ahead = ahead_in(s, &dir, &queue, own_rev);
                Ok(Joined {
                    own: QueueEntry {
                        path: ticket,
                        token: FencingToken(own_rev),
                        seen_at: s.revision(),
                    },
                    ahead: Some(ahead),
                })
            })
            .await?
    }

    async fn ahead(&self, ticket: &Ticket, own: &QueueEntry) -> Result<Ahead> {
        let dir = self.queue_dir(&ticket.queue);
        self.inner
            .call(Counter::Read, |s| match s.get(&own.path) {
                Some(d) if d.create_rev == own.token.get() => {
                    Ok(ahead_in(s, &dir, &ticket.queue, d.create_rev))
                }
                _ => Err(error::entry_gone()),
            })
            .await?
    }

    async fn wait_gone(&self, entry: &QueueEntry) -> Result<()> {
        let armed = self
            .inner
            .call(Counter::WatchSet, |s| match s.get(&entry.path) {
                Some(d) if entry.token.get() == 0 || d.create_rev == entry.token.get() => {
                    s.watch_delete(&entry.path)
                }
                _ => None,
            })
            .await?;
        if let Some(deleted) = armed {
            // An error means the cluster dropped the watch with the key: gone too.
            let _ = deleted.await;
            // A cut-off client hears of it once its link is back, as from a real server.
            self.inner.link_up().await?;
            self.inner.stats.incr(Counter::WatchEvent);
        }
        Ok(())
    }

    async fn update(&self, _ticket: &Ticket, own: &QueueEntry, value: Vec<u8>) -> Result<()> {
        let (path, token) = (own.path.clone(), own.token.get());
        self.inner
            .call_write(Counter::Txn, move |s| match s.get(&path) {
                Some(d) if d.create_rev == token => {
                    s.put(&path, value, None);
                    Ok(())
                }
                _ => Err(error::grant_lost()),
            })
            .await?
    }

    async fn mark(&self, entry: &QueueEntry, value: Vec<u8>) -> Result<bool> {
        let (path, token) = (entry.path.clone(), entry.token.get());
        self.inner
            .call_write(Counter::Txn, move |s| match s.get(&path) {
                _ if mutants::active(Mutant::MarkUnchecked) => {
                    s.put(&path, value, None);
                    true
                }
                Some(d) if d.create_rev == token => {
                    // `put` keeps the key's owner.
                    s.put(&path, value, None);
                    true
                }
                _ => false,
            })
            .await
    }

    async fn leave(&self, ticket: &Ticket, own: Option<&QueueEntry>) -> Result<()> {
        let session = ticket.session_id as u64;
        let (locator, own) = (ticket.locator.clone(), own.map(|o| o.token.get()));
        self.inner
            .call_write(Counter::Txn, move |s| match s.get(&locator) {
                Some(d)
                    if d.owner == Some(session)
                        && (own.is_none_or(|token| token == d.create_rev)
                            || mutants::active(Mutant::LeaveByKey)) =>
                {
                    s.delete(&locator);
                }
                _ => {}
            })
            .await
    }

    async fn release(&self, ticket: &Ticket, own: &QueueEntry) -> Result<()> {
        if ticket.queue.lock_delay.is_none() {
            return self.leave(ticket, Some(own)).await;
        }
        let session = ticket.session_id as u64;
        let (locator, token) = (ticket.locator.clone(), own.token.get());
        let mark_key = release_mark_key(&self.queue_dir(&ticket.queue));
        let mark = ReleaseMark::Released {
            entry: own.path.clone(),
            token: own.token,
        }
        .encode();
        self.inner
            .call_write(Counter::Txn, move |s| match s.get(&locator) {
                Some(d) if d.owner == Some(session) && d.create_rev == token => {
                    s.delete(&locator);
                    s.put(&mark_key, mark, None);
                }
                _ => {}
            })
            .await
    }

    async fn write_release_mark(&self, queue: &QueueSpec, mark: &ReleaseMark) -> Result<()> {
        let key = release_mark_key(&self.queue_dir(queue));
        let mark = mark.encode();
        self.inner
            .call_write(Counter::Write, move |s| {
                s.put(&key, mark, None);
            })
            .await
    }

    async fn release_mark(&self, queue: &QueueSpec) -> Result<Option<ReleaseMark>> {
        let key = release_mark_key(&self.queue_dir(queue));
        self.inner
            .call(Counter::Read, move |s| {
                s.get(&key).and_then(|d| ReleaseMark::decode(&d.value))
            })
            .await
    }

    async fn head(&self, queue: &QueueSpec) -> Result<Option<Head>> {
        let dir = self.queue_dir(queue);
        self.inner
            .call(Counter::Read, |s| {
                s.range(&dir)
                    .filter(|(k, _)| queue.class_of_key(&dir, k).is_some())
                    .min_by_key(|(_, d)| d.create_rev)
                    .map(|(_, d)| Head {
                        token: FencingToken(d.create_rev),
                        value: d.value.clone(),
                    })
            })
            .await
    }

    async fn watch_head(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<HeadEvent>>> {
        self.track(queue, |raw| match raw {
            Tracked::Changed(t) => vec![HeadEvent::Head(t.head())],
            Tracked::Gap => vec![HeadEvent::Gap],
        })
    }

    async fn watch_entries(&self, queue: &QueueSpec) -> Result<BoxStream<'static, Result<EntriesEvent>>> {
        self.track(queue, |raw| match raw {
            Tracked::Changed(t) => vec![EntriesEvent::Entries(t.members())],
            Tracked::Gap => vec![EntriesEvent::Gap],
        })
    }

    async fn survey(&self, root: &str) -> Result<Vec<Surveyed>> {
        let under = format!("{}/", self.inner.key(root));
        let namespace = self.inner.key("");
        let mut found: Vec<Surveyed> = self
            .inner
            .call(Counter::Read, |s| {
                s.range(&under)
                    .filter_map(|(key, d)| {
                        let owner = d.owner?;
                        let rel = key.strip_prefix(&namespace)?;
                        let (dir, name) = rel.rsplit_once('/')?;
                        Some(Surveyed {
                            dir: dir.to_owned(),
                            name: name.to_owned(),
                            token: FencingToken(d.create_rev),
                            value: d.value.clone(),
                            owner,
                            created_ms: None,
                        })
                    })
                    .collect()
            })
            .await?;
        found.sort_by(|a, b| (&a.dir, a.token).cmp(&(&b.dir, b.token)));
        Ok(found)
    }
}

/// What [`MemClient::track`] passes on: the queue's entries after a change, or a gap.
enum Tracked<'a> {
    Changed(&'a HeadTracker),
    Gap,
}

impl MemClient {
    /// Watches the entries of `queue` (of every class), passing the tracked entries
    /// after every change of one to `map`.
    fn track<T, F>(&self, queue: &QueueSpec, mut map: F) -> Result<BoxStream<'static, Result<T>>>
    where
        T: Send + 'static,
        F: FnMut(Tracked<'_>) -> Vec<T> + Send + 'static,
    {
        let dir = self.queue_dir(queue);
        let prefix = format!("{dir}/");
        let spec = queue.clone();
        let is_child = move |k: &str| spec.class_of_key(&dir, k).is_some();
        let mut tracker = HeadTracker::default();
        watch::follow(self.inner.clone(), prefix, move |raw| {
            match raw {
                Raw::Snapshot(entries) => tracker.reset(
                    entries
                        .into_iter()
                        .filter(|(k, _)| is_child(k))
                        .map(|(k, d)| (k, FencingToken(d.create_rev), d.value)),
                ),
                Raw::Event(e) if is_child(&e.key) => match e.data {
                    Some(d) => tracker.put(e.key, FencingToken(d.create_rev), d.value),
                    None => tracker.remove(&e.key),
                },
                Raw::Event(_) => return Vec::new(),
                Raw::Resync => return map(Tracked::Gap),
            }
            map(Tracked::Changed(&tracker))
        })
    }
}
