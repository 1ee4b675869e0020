//! Session supervision: one task owns the ZooKeeper client and maps its states to
//! coord's. `Disconnected`, or no answer through the ensemble's leader for half the
//! session timeout ⇒ Suspended; `Expired`, or no such answer until the server may have
//! expired the session ⇒ Lost. After Lost the old client is dropped (if
//! its session is still alive it is closed on reconnect, deleting its nodes, never
//! resumed), a new client is built with backoff, and registrations are re-created.

use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use coord_core::Capabilities;
use coord_core::raw::{Backoff, ClientState, Counter};
use coord_core::{Error, ErrorKind, Result, SessionState, SessionStatus};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::connection::open_session;
use crate::error::{map, map_at};
use crate::options::{ZkAcl, ZkOptions};

/// The live ZooKeeper client and which of our sessions it carries.
#[derive(Clone)]
pub(crate) struct Current {
    pub zk: zk::Client,
    pub generation: u64,
}

/// Shared state of one ZooKeeper client.
pub(crate) struct Inner {
    pub options: ZkOptions,
    /// `/<namespace>`, or empty for the root.
    pub root: String,
    current: RwLock<Option<Current>>,
    /// When the last request the server answered on the current session was sent, and
    /// that session's generation: the server cannot expire the session earlier than one
    /// timeout after it (see [`Inner::supervise`]).
    acked: Mutex<(u64, Instant)>,
    /// Session status, counters, registrations, closed flag.
    state: ClientState,
    /// The incarnation markers of config keys this client made or read with their
    /// children: key node path → (`czxid`, marker name). See `config.rs`.
    pub(crate) markers: crate::config::MarkerCache,
    /// The config watches of this client, one per prefix, shared by its streams.
    pub(crate) config_feeds: crate::fanout::Feeds<coord_core::ConfigEvent>,
    /// The registry watches of this client, one per service, shared by its streams.
    pub(crate) registry_feeds: crate::fanout::Feeds<coord_core::RegistryEvent>,
}

impl std::ops::Deref for Inner {
    type Target = ClientState;

    fn deref(&self) -> &ClientState {
        &self.state
    }
}

impl Inner {
    pub(crate) fn new(options: ZkOptions, first: zk::Client) -> Arc<Inner> {
        let root = if options.namespace.is_empty() {
            String::new()
        } else {
            format!("/{}", options.namespace)
        };
        let state = ClientState::new(
            "zk",
            options.namespace.clone(),
            SessionStatus::new(SessionState::Connected, 1),
        )
        .with_path_prefix(format!("{root}/"))
        .with_session_timeout(options.session_timeout)
        .with_capabilities(
            Capabilities::ALL
                .with_every_watch_event(false)
                .with_every_leader_change(false),
        );
        Arc::new(Inner {
            options,
            root,
            current: RwLock::new(Some(Current {
                zk: first,
                generation: 1,
            })),
            acked: Mutex::new((1, Instant::now())),
            state,
            markers: Default::default(),
            config_feeds: Default::default(),
            registry_feeds: Default::default(),
        })
    }

    /// `root + "/" + rel`.
    pub(crate) fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// The current client, or why there is none.
    pub(crate) fn current(&self) -> Result<Current> {
        if self.is_closed() {
            return Err(Error::closed());
        }
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::SessionLost,
                    "the ZooKeeper session was lost and a new one is not established yet; retry",
                )
            })
    }

    /// The current ZooKeeper session id, 0 if none.
    pub(crate) fn session_id(&self) -> i64 {
        self.current().map(|c| c.zk.session_id().0).unwrap_or(0)
    }

    /// The current session info (id and password), for attaching from outside.
    pub(crate) fn session_info(&self) -> Option<zk::SessionInfo> {
        self.current().ok().map(|c| c.zk.session().clone())
    }

    /// Sends one request on the current session with the request deadline. The outer
    /// error covers no session / closed / deadline; the inner result is ZooKeeper's.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        counter: Counter,
        op: &'static str,
        write: bool,
        f: F,
    ) -> Result<std::result::Result<T, zk::Error>>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let current = self.current().map_err(|e| e.with_operation(op))?;
        self.send(current, counter, op, write, f).await
    }

    /// The current client if it still carries session `generation`; `SessionLost` once
    /// that session has been replaced — so that nothing meant for one session (a
    /// contender's node) is ever created on another: send with [`Inner::send`].
    pub(crate) fn current_on(&self, generation: u64) -> Result<Current> {
        let current = self.current()?;
        if current.generation != generation {
            return Err(Error::new(
                ErrorKind::SessionLost,
                "the ZooKeeper session of this request was lost; retry on the new session",
            ));
        }
        Ok(current)
    }

    /// As [`Inner::call`], on `current`'s session; a server answer moves
    /// [`Inner::acked`].
    pub(crate) async fn send<T, F, Fut>(
        &self,
        current: Current,
        counter: Counter,
        op: &'static str,
        write: bool,
        f: F,
    ) -> Result<std::result::Result<T, zk::Error>>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        self.stats.incr(counter);
        let deadline = self.options.request_deadline();
        let sent = Instant::now();
        // Boxed: request futures are large, and waits nest several of them.
        match tokio::time::timeout(deadline, Box::pin(f(current.zk))).await {
            Ok(Err(zk::Error::ClientClosed)) if self.is_closed() => Err(Error::closed().with_operation(op)),
            Ok(r) => {
                // A write is answered through the ensemble's leader: it proves the
                // session alive there (as the probe's `sync` does; see `supervise`).
                if write
                    && matches!(
                        &r,
                        Ok(_) | Err(zk::Error::NoNode | zk::Error::NodeExists | zk::Error::BadVersion)
                    )
                {
                    self.note_acked(current.generation, sent);
                }
                Ok(r)
            }
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("no answer from ZooKeeper within {deadline:?}"),
            )
            .with_operation(op)
            .with_outcome_unknown(write)),
        }
    }

    /// Session `generation` answered a request sent at `sent`.
    fn note_acked(&self, generation: u64, sent: Instant) {
        let mut acked = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        if generation > acked.0 || (generation == acked.0 && sent > acked.1) {
            *acked = (generation, sent);
        }
    }

    /// When the last answered request of session `generation` was sent.
    fn acked_at(&self, generation: u64) -> Option<Instant> {
        let acked = *self.acked.lock().unwrap_or_else(|p| p.into_inner());
        (acked.0 == generation).then_some(acked.1)
    }

    /// As [`Inner::call`], with ZooKeeper errors mapped too.
    pub(crate) async fn call_mapped<T, F, Fut>(
        &self,
        counter: Counter,
        op: &'static str,
        write: bool,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        self.call(counter, op, write, f)
            .await?
            .map_err(|e| map(e, op, write))
    }

    /// The ACL policy of the nodes this client creates.
    pub(crate) fn acl(&self) -> ZkAcl {
        self.options.acl_policy()
    }

    /// Creates `path` and its missing ancestors as container nodes: the server deletes
    /// a container once its last child is gone, so directories of dynamic names
    /// (`locks/jobs/<uuid>`) do not pile up. A create under a directory therefore may
    /// find it just deleted (`NoNode`) and must call this again.
    pub(crate) async fn ensure_dir(&self, path: &str) -> Result<()> {
        let p = path.to_owned();
        let options = self.acl().container();
        self.call(Counter::Write, "mkdir", true, |zk| async move {
            zk.mkdir(&p, &options).await
        })
        .await?
        .map_err(|e| map_at(e, "mkdir", true, path))
    }

    /// Marks the client closed, drops the ZooKeeper client (which sends CloseSession)
    /// and waits until the library reports the session ended, so that the session's
    /// nodes are gone when this returns.
    ///
    /// # Errors
    ///
    /// `Timeout` if the session did not end within the request timeout (the server then
    /// expires it after the session timeout).
    pub(crate) async fn close(&self) -> Result<()> {
        if !self.mark_closed() {
            return Ok(());
        }
        let old = self.current.write().unwrap_or_else(|p| p.into_inner()).take();
        let states = old.as_ref().map(|c| c.zk.state_watcher());
        drop(old);
        tracing::info!(namespace = %self.options.namespace, "coord.zk.closed");
        let Some(mut states) = states else { return Ok(()) };
        // In-flight calls hold clones of the client for at most a request timeout; the
        // close goes out when the last clone is dropped.
        let wait = self.options.request_deadline();
        let ended = tokio::time::timeout(wait, async {
            while !states.peek_state().is_terminated() {
                states.changed().await;
            }
        })
        .await;
        ended.map_err(|_| {
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "closing the session took longer than {wait:?}; the server expires it after the session timeout"
                ),
            )
        })
    }

    /// The supervision loop. Ends when the client is closed.
    pub(crate) async fn supervise(self: Arc<Self>) {
        loop {
            let Ok(current) = self.current() else { return };
            let generation = current.generation;
            let negotiated = current.zk.session_timeout();
            let mut states = current.zk.state_watcher();
            drop(current);
            // When to give the session up. The server expires it one timeout T after it
            // last heard from us — no earlier than T after the send of the last request
            // that reached the ensemble's leader. Only answers that passed through the
            // leader prove that: a write, or a `sync` (a member cut off from the leader
            // still answers pings and reads from its own copy until it gives up on the
            // leader, `syncLimit · tickTime`, 10 s with ZooKeeper's defaults, while the
            // leader expires the session after T). So coord reports `Lost` at that
            // send + 7/10 T, connected or not: 3/10 T before the server can expire the
            // session (for a slow scheduler, a clock running fast, the round trip, and
            // the member reporting the session's activity to the leader on its next
            // tick). `Suspended` comes on a disconnect, or once nothing was proven for
            // T/2 on a connection that looks fine. So that the last proven request is
            // recent on a client that only reads or idles, a `sync` goes out whenever
            // nothing was proven for T/10; a reset connection then has at least 3/5 T
            // to come back (see the crate docs, # Sessions, for why less is not enough
            // with several hosts).
            let probe_every = negotiated / 10;
            let quiet_after = negotiated / 2;
            let give_up_after = negotiated * 7 / 10;
            let mut last_probe: Option<Instant> = None;
            let mut disconnected = false;
            let mut quiet = false;
            let closed = self.closed();
            tokio::pin!(closed);
            let lost_reason = loop {
                let acked = self.acked_at(generation).unwrap_or_else(Instant::now);
                let suspended = disconnected || quiet;
                // Suspended on a quiet connection until a proven answer comes.
                if quiet && Instant::now() < acked + quiet_after {
                    quiet = false;
                    if !disconnected {
                        self.session.set(SessionState::Connected, generation, &self.stats);
                    }
                }
                // The next probe: T/10 after the last proven request (or the last probe,
                // if that is later and still unanswered).
                let next_probe = last_probe.map_or(acked, |p| p.max(acked)) + probe_every;
                let next_quiet = acked + quiet_after;
                let state = tokio::select! {
                    s = states.changed() => s,
                    _ = tokio::time::sleep_until(acked + give_up_after) => {
                        break if disconnected {
                            "suspended until the server may expire the session"
                        } else {
                            "no answer through the ensemble's leader until the server may expire the session"
                        };
                    }
                    _ = tokio::time::sleep_until(next_quiet), if !suspended => {
                        quiet = true;
                        self.session.set(SessionState::Suspended, generation, &self.stats);
                        continue;
                    }
                    _ = tokio::time::sleep_until(next_probe), if !disconnected => {
                        last_probe = Some(Instant::now());
                        self.probe();
                        continue;
                    }
                    // Wakes the loop when a proven answer ends a quiet spell.
                    _ = tokio::time::sleep(probe_every), if quiet => continue,
                    _ = &mut closed => return,
                };
                match state {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                        // Reconnecting, a member has the leader validate (and touch) the
                        // session before it answers; a read-only member does not.
                        if disconnected && state == zk::SessionState::SyncConnected {
                            self.note_acked(generation, Instant::now());
                        }
                        disconnected = false;
                        if !quiet {
                            self.session.set(SessionState::Connected, generation, &self.stats);
                        }
                    }
                    zk::SessionState::Disconnected => {
                        disconnected = true;
                        self.session.set(SessionState::Suspended, generation, &self.stats);
                    }
                    zk::SessionState::Expired => break "expired",
                    zk::SessionState::AuthFailed => break "authentication failed",
                    zk::SessionState::Closed => {
                        if self.is_closed() {
                            return;
                        }
                        break "closed by the server";
                    }
                }
            };
            if self.is_closed() {
                return;
            }
            // Drop the old client: if its session is alive it is closed (not resumed) when
            // it reconnects, so its ephemerals do not linger as zombies.
            let old = self.current.write().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(old) = &old {
                self.remember_past_session(old.zk.session_id().0);
            }
            drop(old);
            tracing::warn!(namespace = %self.options.namespace, generation, reason = lost_reason, "coord.zk.session_lost");
            self.declare_lost(generation);
            if !Box::pin(self.reopen(generation + 1)).await {
                return;
            }
        }
    }

    /// Sends a `sync` in the background (its answer comes through the ensemble's
    /// leader; no ACL restricts it), so that a client that only reads or idles also has
    /// a recent proven request.
    fn probe(self: &Arc<Self>) {
        let inner = self.clone();
        tokio::spawn(async move {
            let Ok(current) = inner.current() else { return };
            let (generation, sent) = (current.generation, Instant::now());
            inner.stats.incr(Counter::SessionRequest);
            // Its answer counts whenever it comes before the session is given up, also
            // after the request deadline (a slow link keeps its session).
            // Given up when the client closes, so that it never holds up the close.
            let wait = current.zk.session_timeout() * 7 / 10;
            tokio::select! {
                synced = tokio::time::timeout(wait, current.zk.sync("/")) => {
                    if let Ok(Ok(())) = synced {
                        inner.note_acked(generation, sent);
                    }
                }
                _ = inner.closed() => {}
            }
        });
    }

    /// Opens the next session with backoff; false if the client was closed meanwhile.
    async fn reopen(self: &Arc<Self>, generation: u64) -> bool {
        let opened = self
            .retry_until_closed("reconnect", || {
                self.stats.incr(Counter::SessionRequest);
                Box::pin(open_session(&self.options, self.options.session_timeout))
            })
            .await;
        let Some(zk) = opened else { return false };
        {
            // Checked under the lock `close` takes the client with: the new session is
            // either installed and closed by `close`, or dropped (and so closed) here.
            let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
            if self.is_closed() {
                return false;
            }
            *current = Some(Current { zk, generation });
        }
        // The leader made (or moved) the session while the handshake's last round trip
        // was under way: counted from its end, off by one round trip, well inside the
        // 3/10 T margin.
        self.note_acked(generation, Instant::now());
        self.session.set(SessionState::Connected, generation, &self.stats);
        true
    }
}

// ---- reads ----
// Reads shared by the config store and the registry: a directory's children, and the
// data of many nodes in chunked `multi` reads (one request per chunk, each well under
// ZooKeeper's packet limit).

/// How many nodes one `multi` read fetches.
pub(crate) const CHUNK: usize = 64;

/// How many times a directory is read again when it changed while it was read, before
/// the read gives up (`Unavailable`: the nodes kept changing).
const CONSISTENT_ATTEMPTS: usize = 5;

/// Every child of `dir` that `keep` selects (by name), with its data and stat, as they
/// all were at one moment.
///
/// The names come first (one `getChildren`); then every chunk of up to [`CHUNK`] nodes is
/// read in one `multi` (all sent at once), the last of which also lists the directory,
/// atomically with its data. That listing must select exactly the names asked for, and
/// every node must be found. With several chunks, every chunk but the last is read again
/// after the last and must find each node at the same `mzxid` (unchanged meanwhile).
/// Then every node read was as read at the moment of the last chunk. Otherwise the read
/// starts again from the newest listing, up to [`CONSISTENT_ATTEMPTS`] times.
///
/// Only the selected nodes are judged: writes to the directory's other children (other
/// keys of a namespace) never make a read start again; the directory is listed once per
/// attempt, however many chunks.
///
/// # Errors
///
/// `Unavailable` (retryable) when the selected nodes kept changing through every
/// attempt; otherwise as [`data_of`].
pub(crate) async fn children_with_data(
    inner: &Inner,
    dir: &str,
    keep: impl Fn(&str) -> bool,
    op: &'static str,
) -> Result<Vec<(String, Vec<u8>, zk::Stat)>> {
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
    let selected = |listing: &[String]| {
        let mut l: Vec<String> = listing.iter().filter(|n| keep(n)).cloned().collect();
        l.sort();
        l
    };
    let mut names = selected(&children(inner, dir, op).await?);
    let split_silently = coord_core::mutants::active(coord_core::mutants::Mutant::RereadSplitSilently);
    for attempt in 0..CONSISTENT_ATTEMPTS {
        if attempt > 1 {
            backoff.wait().await;
        }
        let paths: Vec<String> = names.iter().map(|c| format!("{dir}/{c}")).collect();
        let Some((listing, data)) = listed_data_of(inner, dir, &paths, true, op).await? else {
            return Ok(Vec::new()); // the directory is gone
        };
        let newest = selected(&listing.unwrap_or_default());
        if split_silently {
            return Ok(names
                .into_iter()
                .zip(data)
                .filter_map(|(name, d)| d.map(|(bytes, stat)| (name, bytes, stat)))
                .collect());
        }
        if newest != names || data.iter().any(Option::is_none) {
            tracing::debug!(dir, attempt, "coord.zk.dir_children_changed: read again");
            names = newest;
            continue;
        }
        if paths.len() > CHUNK {
            // Every chunk but the last, again: unchanged since its first read?
            let earlier = &paths[..paths.len() - last_chunk_len(paths.len())];
            let again = listed_data_of(inner, dir, earlier, false, op)
                .await?
                .map(|(_, d)| d)
                .unwrap_or_default();
            let same = again.len() == earlier.len()
                && again
                    .iter()
                    .zip(&data)
                    .all(|(a, b)| a.as_ref().map(|(_, s)| s.mzxid) == b.as_ref().map(|(_, s)| s.mzxid));
            if !same {
                tracing::debug!(dir, attempt, "coord.zk.dir_read_changed: read again");
                continue;
            }
        }
        return Ok(names
            .into_iter()
            .zip(data)
            .filter_map(|(name, d)| d.map(|(bytes, stat)| (name, bytes, stat)))
            .collect());
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "the nodes under {dir} kept changing while they were read ({CONSISTENT_ATTEMPTS} attempts); \
             nothing was read — retry"
        ),
    ))
}

/// A read of nodes: with `list`, `dir`'s children as listed atomically with the last
/// chunk's data; each node's data and stat (`None`: gone).
type ListedData = (Option<Vec<String>>, Vec<Option<(Vec<u8>, zk::Stat)>>);

/// Reads `paths` in chunks of [`CHUNK`], each chunk one `multi`, every chunk sent at
/// once; with `list`, the last chunk's `multi` also lists `dir` (with no paths, one
/// `multi` lists `dir` alone). `None` when the listed `dir` does not exist.
async fn listed_data_of(
    inner: &Inner,
    dir: &str,
    paths: &[String],
    list: bool,
    op: &'static str,
) -> Result<Option<ListedData>> {
    let chunks: Vec<Vec<String>> = if paths.is_empty() {
        if !list {
            return Ok(Some((None, Vec::new())));
        }
        vec![Vec::new()]
    } else {
        paths.chunks(CHUNK).map(<[String]>::to_vec).collect()
    };
    for _ in 1..chunks.len() {
        inner.stats.incr(Counter::Txn);
    }
    let d = dir.to_owned();
    let last = chunks.len() - 1;
    let answers = inner
        .call_mapped(Counter::Txn, op, false, |zk| async move {
            let mut pending = Vec::with_capacity(chunks.len());
            for (i, chunk) in chunks.iter().enumerate() {
                let mut reader = zk.new_multi_reader();
                if list && i == last {
                    reader.add_get_children(&d)?;
                }
                for p in chunk {
                    reader.add_get_data(p)?;
                }
                pending.push(reader.commit());
            }
            let mut answers = Vec::with_capacity(pending.len());
            for answer in pending {
                answers.push(answer.await?);
            }
            Ok(answers)
        })
        .await?;
    let mut listing = None;
    let mut data = Vec::with_capacity(paths.len());
    let mut paths = paths.iter();
    for (i, results) in answers.into_iter().enumerate() {
        let mut results = results.into_iter();
        if list && i == last {
            listing = match results.next() {
                Some(zk::MultiReadResult::Children { children }) => Some(children),
                Some(zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                }) => return Ok(None),
                Some(zk::MultiReadResult::Error { err }) => return Err(map_at(err, op, false, dir)),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("ZooKeeper answered a listing of {dir} with something else; retry"),
                    ));
                }
            };
        }
        for (result, path) in results.zip(paths.by_ref()) {
            data.push(match result {
                zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => None,
                zk::MultiReadResult::Error { err } => return Err(map_at(err, op, false, path)),
                _ => None,
            });
        }
    }
    Ok(Some((listing, data)))
}

/// How many paths the last [`CHUNK`] of a read of `n` paths holds.
fn last_chunk_len(n: usize) -> usize {
    match n % CHUNK {
        0 => CHUNK.min(n),
        r => r,
    }
}

/// Brings this client's member up to date with the ensemble's leader (`sync` on `path`;
/// a missing path is fine): reads after it see every write that finished before it was
/// sent. The member a client is on may lag, so a read that decides something (a refusal
/// by version, whether a create of unknown outcome landed) comes after one of these.
pub(crate) async fn catch_up(inner: &Inner, path: &str, op: &'static str) -> Result<()> {
    let p = path.to_owned();
    inner
        .call_mapped(Counter::Read, op, false, |zk| async move {
            match zk.sync(&p).await {
                Err(zk::Error::NoNode) => Ok(()),
                other => other,
            }
        })
        .await
}

/// The children of `dir`; none if `dir` does not exist.
pub(crate) async fn children(inner: &Inner, dir: &str, op: &'static str) -> Result<Vec<String>> {
    let d = dir.to_owned();
    match inner
        .call(Counter::Read, op, false, |zk| async move {
            zk.list_children(&d).await
        })
        .await?
    {
        Ok(c) => Ok(c),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(map_at(e, op, false, dir)),
    }
}

/// The data and stat of each path, in order; `None` for a node that is gone.
///
/// # Errors
///
/// A node that exists but cannot be read (its ACL refuses these credentials) fails the
/// whole read with `PermissionDenied` naming it: it is never reported as absent.
pub(crate) async fn data_of(
    inner: &Inner,
    paths: &[String],
    op: &'static str,
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    // Every chunk's multiRead is sent at once (zookeeper-client sends a request when it
    // is made; the server answers a session's requests in order): one round trip, not
    // one per chunk.
    Ok(listed_data_of(inner, "", paths, false, op)
        .await?
        .map(|(_, data)| data)
        .unwrap_or_default())
}
