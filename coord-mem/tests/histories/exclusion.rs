//! Exclusion histories: lock, election, read/write lock, semaphore.

use super::*;

// ---------------------------------------------------------------------------------------
// Exclusion: lock, election, read/write lock, semaphore

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Election,
    RwLock,
    Semaphore,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Election => "election",
            Kind::RwLock => "rw_lock",
            Kind::Semaphore => "semaphore",
        }
    }

    /// The first segment of its queues' directories (the recipes' `QueueSpec::dir`).
    fn dir(self) -> &'static str {
        match self {
            Kind::Lock => "locks",
            Kind::Election => "elections",
            Kind::RwLock => "rwlocks",
            Kind::Semaphore => "semaphores",
        }
    }

    fn admission(self) -> Admission {
        match self {
            Kind::Lock | Kind::Election => Admission::Exclusive,
            Kind::RwLock => Admission::ReadWrite,
            Kind::Semaphore => Admission::Permits(PERMITS as usize),
        }
    }
}

/// A grant: a lock guard, a read or write hold, a semaphore lease, or a leadership.
pub(crate) enum Held {
    Lock(LockGuard),
    Read(coord_core::ReadGuard),
    Write(coord_core::WriteGuard),
    Lease(coord_core::Lease),
    Leader(Leadership),
}

/// Runs `$e` on whichever guard a [`Held`] holds (they share their methods).
macro_rules! on_guard {
    ($held:expr, $g:ident => $e:expr) => {
        match $held {
            Held::Lock($g) => $e,
            Held::Read($g) => $e,
            Held::Write($g) => $e,
            Held::Lease($g) => $e,
            Held::Leader($g) => $e,
        }
    };
}

impl Held {
    fn fence(&self) -> Fence {
        on_guard!(self, g => g.fence())
    }

    fn hold(&self) -> coord_core::HoldWatch {
        on_guard!(self, g => g.hold().clone())
    }

    async fn lost(&self) {
        on_guard!(self, g => g.lost().await)
    }

    /// Resolves when an operator asked this lock holder to let go (locks only).
    async fn revocation_requested(&self) {
        match self {
            Held::Lock(g) => g.revocation_requested().await,
            _ => std::future::pending().await,
        }
    }

    fn token(&self) -> u64 {
        on_guard!(self, g => g.token().get())
    }

    async fn release(self) -> coord_core::Result<()> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Lease(g) => g.release().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

pub(crate) async fn acquire(
    client: &Client,
    kind: Kind,
    mode: Mode,
    holder: &str,
    wait: bool,
) -> coord_core::Result<Option<Held>> {
    fn some<G>(g: coord_core::Result<G>, held: fn(G) -> Held) -> coord_core::Result<Option<Held>> {
        g.map(|g| Some(held(g)))
    }
    fn maybe<G>(g: coord_core::Result<Option<G>>, held: fn(G) -> Held) -> coord_core::Result<Option<Held>> {
        g.map(|g| g.map(held))
    }
    match (kind, mode, wait) {
        (Kind::Lock, _, true) => some(client.lock(RES).await, Held::Lock),
        (Kind::Lock, _, false) => maybe(client.try_lock(RES).await, Held::Lock),
        (Kind::Election, _, _) => some(
            client.campaign(RES, holder.as_bytes().to_vec()).await,
            Held::Leader,
        ),
        (Kind::RwLock, Mode::Shared, true) => some(client.rw_lock(RES)?.read().await, Held::Read),
        (Kind::RwLock, Mode::Shared, false) => maybe(client.rw_lock(RES)?.try_read().await, Held::Read),
        (Kind::RwLock, Mode::Exclusive, true) => some(client.rw_lock(RES)?.write().await, Held::Write),
        (Kind::RwLock, Mode::Exclusive, false) => maybe(client.rw_lock(RES)?.try_write().await, Held::Write),
        (Kind::Semaphore, _, true) => some(client.semaphore(RES, PERMITS)?.acquire().await, Held::Lease),
        (Kind::Semaphore, _, false) => {
            maybe(client.semaphore(RES, PERMITS)?.try_acquire().await, Held::Lease)
        }
    }
}

/// What the workers of one exclusion history share.
#[derive(Default)]
pub(crate) struct ExclShared {
    pub(crate) next_seq: AtomicU64,
    pub(crate) ops: AtomicU64,
    pub(crate) unknown: AtomicU64,
    pub(crate) grants: AtomicU64,
    /// Log writes refused because the grant was gone.
    pub(crate) fenced: AtomicU64,
    /// Log writes the store acknowledged.
    pub(crate) acked: Mutex<BTreeSet<u64>>,
    /// Log writes the store refused (nothing written).
    pub(crate) refused: Mutex<BTreeSet<u64>>,
    /// The holders' tokens `revoke_lock` reported asking (the lock family's operator).
    pub(crate) revoked: Mutex<BTreeSet<u64>>,
    /// `revoke_lock` calls whose outcome is unknown (an error or no answer in time).
    pub(crate) revokes_unknown: AtomicU64,
    /// The tokens of holders that saw a revocation request.
    pub(crate) revocations_seen: Mutex<Vec<u64>>,
    /// The operator's `revoke_lock` calls, awaited before the checks.
    pub(crate) revokes: Mutex<Vec<JoinHandle<()>>>,
    /// What each handle said: from its grant to its first state other than `Held` (or
    /// its release, or its client's crash), on `clock` (µs since `started`).
    pub(crate) beliefs: Mutex<Vec<(u64, coord_check::beliefs::Belief)>>,
    pub(crate) started: Mutex<Option<Instant>>,
    /// When each client crashed (µs): its handles believe nothing after that.
    pub(crate) crashed_at: Mutex<BTreeMap<u64, u64>>,
    /// The entries the operator deleted: their token (create revision) and when.
    pub(crate) operator_deleted: Mutex<BTreeMap<u64, u64>>,

    /// Handles that said `Lost` while their session looked intact: (client, holder,
    /// token, the grant's session generation, when).
    pub(crate) lost_in_session: Mutex<Vec<LostInSession>>,
    /// Each client's session changes: (when, generation, still alive).
    pub(crate) sessions: Mutex<BTreeMap<u64, Vec<SessionChange>>>,
}

impl ExclShared {
    /// Microseconds on the history's one clock.
    fn clock(&self) -> u64 {
        let mut started = lock(&self.started);
        started.get_or_insert_with(Instant::now).elapsed().as_micros() as u64
    }
}

/// For the entry created at revision `token` in a queue directory's `writes` (revision,
/// key, value or `None` for a delete): its deletion's revision and the last deletion of
/// an entry created before it, when its own came first — a grant for it then came from
/// a wake-up after the entry was gone. `None` when it was not deleted, or an entry ahead
/// of it never went.
pub(crate) fn woken_after_own_delete(
    writes: &[(u64, String, Option<Vec<u8>>)],
    token: u64,
) -> Option<(u64, u64)> {
    // Each incarnation: created at, deleted at.
    let mut live: BTreeMap<&str, usize> = BTreeMap::new();
    let mut incarnations: Vec<(u64, Option<u64>)> = Vec::new();
    for (revision, key, value) in writes {
        match value {
            Some(_) => {
                if !live.contains_key(key.as_str()) {
                    live.insert(key, incarnations.len());
                    incarnations.push((*revision, None));
                }
            }
            None => {
                if let Some(i) = live.remove(key.as_str()) {
                    incarnations[i].1 = Some(*revision);
                }
            }
        }
    }
    let own_gone = incarnations.iter().find(|(created, _)| *created == token)?.1?;
    let mut ahead_gone = 0;
    for (created, gone) in &incarnations {
        if *created < token {
            ahead_gone = ahead_gone.max((*gone)?);
        }
    }
    (own_gone < ahead_gone).then_some((own_gone, ahead_gone))
}

impl ExclRun {
    /// Whether the log, the store or the handles' beliefs broke exclusion.
    pub(crate) fn violated(&self) -> bool {
        !self.violations.is_empty() || !self.log_violations.is_empty() || !self.belief_violations.is_empty()
    }
}

/// A handle that said `Lost` with its session intact: (client, holder, token, the
/// grant's session generation, when).
pub(crate) type LostInSession = (u64, u64, u64, u64, u64);

/// A client's session change: (when, generation, still alive).
pub(crate) type SessionChange = (u64, u64, bool);

/// One exclusion history's result.
pub(crate) struct ExclRun {
    pub(crate) ops: u64,
    pub(crate) unknown: u64,
    pub(crate) grants: u64,
    pub(crate) fenced: u64,
    pub(crate) entries: usize,
    /// What `sections::check` reported.
    pub(crate) violations: Vec<String>,
    /// Acknowledged writes missing from the log, refused ones in it; entries left behind
    /// once every client let go; revocations seen by a holder nobody asked.
    pub(crate) log_violations: Vec<String>,
    /// Handles' `Held` intervals judged, and what the belief check found.
    pub(crate) beliefs: usize,
    pub(crate) belief_violations: Vec<String>,
    /// Holders asked to let go by `revoke_lock`, and holders that saw it.
    pub(crate) revoked: usize,
    pub(crate) revocations_seen: usize,
    pub(crate) nemesis: String,
}

pub(crate) async fn excl_worker(
    world: Arc<World>,
    node: Arc<Node>,
    w: usize,
    kind: Kind,
    fenced: bool,
    mut rng: StdRng,
    shared: Arc<ExclShared>,
) {
    let holder = format!("c{}w{w}", node.id);
    while world.running(&node) {
        let mode = if kind == Kind::RwLock && rng.random_bool(0.6) {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        let wait = kind == Kind::Election || rng.random_bool(0.7);
        let limit = if rng.random_bool(0.3) {
            ms(rng.random_range(0..4))
        } else {
            ms(rng.random_range(20..400))
        };
        shared.ops.fetch_add(1, Ordering::Relaxed);
        let held = match timeout(limit, acquire(&node.client, kind, mode, &holder, wait)).await {
            Ok(Ok(Some(held))) => held,
            // Busy, failed (session lost, suspended...) or dropped at a random point.
            _ => {
                sleep(ms(rng.random_range(0..8))).await;
                continue;
            }
        };
        shared.grants.fetch_add(1, Ordering::Relaxed);
        let token = held.token();
        let tag = if mode == Mode::Shared { 'S' } else { 'X' };
        // What this handle says from now on, recorded as unfenced work would trust it
        // (read/write locks' readers admit many: only the other families are judged).
        let belief = (kind != Kind::RwLock).then(|| {
            let from = shared.clock();
            let index = {
                let mut beliefs = lock(&shared.beliefs);
                beliefs.push((
                    node.id as u64,
                    coord_check::beliefs::Belief {
                        name: RES.to_owned(),
                        holder: (node.id * 100 + w) as u64,
                        token,
                        admits: if kind == Kind::Semaphore {
                            PERMITS as usize
                        } else {
                            1
                        },
                        from,
                        until: None,
                    },
                ));
                beliefs.len() - 1
            };
            let ended = Arc::new(Mutex::new(None::<u64>));
            let generation = node.client.session().borrow().generation;
            let watcher = {
                let (mut hold, ended, shared) = (held.hold(), ended.clone(), shared.clone());
                let (session, client, holder) =
                    (node.client.session(), node.id as u64, (node.id * 100 + w) as u64);
                tokio::spawn(async move {
                    let mut now = hold.state();
                    // A grant already lost when returned (its session ended as it was
                    // granted) never said `Held`: not judged as a spurious loss.
                    let held_once = now == coord_core::HoldState::Held;
                    while now == coord_core::HoldState::Held {
                        now = hold.changed().await;
                    }
                    let at = shared.clock();
                    lock(&ended).get_or_insert(at);
                    // Lost with its session intact: its entry went (an operator's delete,
                    // or coord's own removal of another contender — a bug).
                    let status = *session.borrow();
                    if held_once
                        && now == coord_core::HoldState::Lost
                        && status.generation == generation
                        && matches!(
                            status.state,
                            coord_core::SessionState::Connected | coord_core::SessionState::Suspended
                        )
                    {
                        lock(&shared.lost_in_session).push((client, holder, token, generation, at));
                    }
                })
            };
            (index, ended, watcher)
        });
        // Half the holders watch for their loss between writes, as users do (which also
        // lets the client's next contender in once an operator deleted the entry).
        let watching = rng.random_bool(0.5);
        let mut revoked = false;
        for _ in 0..rng.random_range(2..=4) {
            if node.crashed() || revoked {
                break;
            }
            // Taken after the grant and before the write: accepted writes of successive
            // holders get increasing numbers, so the log's key order is the store's.
            let seq = shared.next_seq.fetch_add(1, Ordering::SeqCst);
            let txn = if fenced {
                Txn::new().fenced_by(held.fence())
            } else {
                Txn::new()
            };
            let txn = txn.put(format!("log/{seq:020}"), format!("{holder} {token} {tag}"));
            let limit = if rng.random_bool(0.15) {
                ms(rng.random_range(0..3))
            } else {
                ms(300)
            };
            shared.ops.fetch_add(1, Ordering::Relaxed);
            match timeout(limit, node.client.commit(txn)).await {
                Ok(Ok(_)) => {
                    lock(&shared.acked).insert(seq);
                }
                Ok(Err(e)) => match write_failure::<()>(&e) {
                    Outcome::Unknown => {
                        shared.unknown.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        lock(&shared.refused).insert(seq);
                        if e.kind() == ErrorKind::Fenced {
                            shared.fenced.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                },
                Err(_) => {
                    shared.unknown.fetch_add(1, Ordering::Relaxed);
                }
            }
            let pause = sleep(ms(rng.random_range(1..15)));
            if watching {
                tokio::select! {
                    _ = pause => {}
                    _ = held.lost() => {
                        // Lost: one more write, as a holder that has not looked yet would
                        // (the fence must refuse it), then release.
                        sleep(ms(rng.random_range(0..5))).await;
                    }
                    _ = held.revocation_requested() => {
                        // Asked to let go: a cooperating holder releases.
                        lock(&shared.revocations_seen).push(token);
                        revoked = true;
                    }
                }
            } else {
                pause.await;
            }
        }
        if let Some((index, ended, watcher)) = belief {
            // The handle stops being trusted as its release (or drop) begins.
            let released = shared.clock();
            let until = lock(&ended).map_or(released, |e| e.min(released));
            lock(&shared.beliefs)[index].1.until = Some(until);
            watcher.abort();
        }
        if revoked || rng.random_bool(0.75) {
            let limit = if rng.random_bool(0.3) {
                ms(rng.random_range(0..3))
            } else {
                ms(500)
            };
            let _ = timeout(limit, held.release()).await;
        } else {
            drop(held);
        }
        sleep(ms(rng.random_range(0..10))).await;
    }
}

pub(crate) fn parse_entry(key: &str, value: &[u8]) -> Result<(u64, LogEntry), String> {
    let bad = || format!("log key {key:?} holds {:?}", text(value));
    let seq = key
        .strip_prefix("log/")
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let value = text(value);
    let parts: Vec<&str> = value.split(' ').collect();
    let [holder, token, tag] = parts[..] else {
        return Err(bad());
    };
    let token = token.parse().map_err(|_| bad())?;
    let mode = match tag {
        "X" => Mode::Exclusive,
        "S" => Mode::Shared,
        _ => return Err(bad()),
    };
    Ok((seq, LogEntry::new(holder, token, mode)))
}

/// The log as the store holds it, in key order, read by a fresh client.
pub(crate) async fn read_log(world: &World) -> Result<Vec<(u64, LogEntry)>, String> {
    let reader = connect(&world.cluster, world.ttl)?;
    let entries = reader
        .list("log")
        .await
        .map_err(|e| format!("reading the log: {e}"))?;
    let _ = reader.close().await;
    entries.iter().map(|e| parse_entry(&e.key, &e.value)).collect()
}

pub(crate) async fn exclusion_history(seed: u64, kind: Kind, fenced: bool) -> Result<ExclRun, String> {
    let profile = if fenced {
        Profile::Full
    } else {
        Profile::HolderLoss
    };
    exclusion_history_under(seed, kind, fenced, profile).await
}

pub(crate) async fn exclusion_history_under(
    seed: u64,
    kind: Kind,
    fenced: bool,
    profile: Profile,
) -> Result<ExclRun, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World::new(&mut rng)?;
    let nemesis_rng = StdRng::from_rng(&mut rng);
    let shared = Arc::new(ExclShared::default());
    // Every write, for judging grants against the store's own order.
    world.cluster.record_writes();
    // Every client's session changes, on the history's clock.
    for node in &world.nodes {
        let (mut session, shared, client) = (node.client.session(), shared.clone(), node.id as u64);
        tokio::spawn(async move {
            loop {
                let status = *session.borrow_and_update();
                let alive = matches!(
                    status.state,
                    coord_core::SessionState::Connected | coord_core::SessionState::Suspended
                );
                let at = shared.clock();
                lock(&shared.sessions)
                    .entry(client)
                    .or_default()
                    .push((at, status.generation, alive));
                if session.changed().await.is_err() {
                    return;
                }
            }
        });
    }
    let mut workers = Vec::new();
    for node in &world.nodes {
        for w in 0..rng.random_range(2..=3) {
            workers.push(tokio::spawn(excl_worker(
                world.clone(),
                node.clone(),
                w,
                kind,
                fenced,
                StdRng::from_rng(&mut rng),
                shared.clone(),
            )));
        }
    }
    let dir = format!("{NS}/{}/{RES}/", kind.dir());
    // The operator deletes one of the entries (a holder's or a waiter's), noting its
    // token and when.
    let delete: Operator = {
        let (dir, shared) = (dir.clone(), shared.clone());
        Box::new(move |world, rng| {
            let keys = world.cluster.keys_with_prefix(&dir);
            let key = keys.choose(rng)?;
            let token = world.cluster.with(|s| {
                let token = s.get(key).map(|d| d.create_rev);
                s.delete(key);
                token
            });
            if let Some(token) = token {
                let at = shared.clock();
                lock(&shared.operator_deleted).insert(token, at);
            }
            Some(format!(
                "operator deletes {key}{}",
                if token.is_some() { "" } else { " (already gone)" }
            ))
        })
    };
    let operator: Operator = if kind == Kind::Lock {
        // The lock's operator also asks its holder to let go, through a client of its own
        // whose replies travel slowly: the holder may release between the request's read
        // and its write.
        let revoker = connect(&world.cluster, world.ttl)?;
        if let Some(mem) = revoker.backend_as::<MemClient>() {
            mem.delay_replies(ms(rng.random_range(5..25)));
        }
        let shared = shared.clone();
        Box::new(move |world, rng| {
            if rng.random_bool(0.5) {
                return delete(world, rng);
            }
            let (revoker, shared2) = (revoker.clone(), shared.clone());
            let call = tokio::spawn(async move {
                match timeout(ms(2000), revoker.revoke_lock(RES)).await {
                    Ok(Ok(Some(token))) => {
                        lock(&shared2.revoked).insert(token.get());
                    }
                    Ok(Ok(None)) => {}
                    _ => {
                        shared2.revokes_unknown.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            lock(&shared.revokes).push(call);
            Some("operator revokes the lock".to_owned())
        })
    } else {
        delete
    };
    let nemesis = Nemesis {
        profile,
        operator,
        on_crash: {
            let shared = shared.clone();
            Box::new(move |c| {
                let at = shared.clock();
                lock(&shared.crashed_at).insert(c as u64, at);
            })
        },
        on_fault: Box::new(|_| {}),
    };
    tokio::spawn(run_nemesis(world.clone(), nemesis_rng, nemesis))
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    world.settle().await;
    world.join(workers).await?;
    // The beliefs: a crashed client's handles believe nothing after the crash; the
    // bound is the clients' loss margin (a tenth of the TTL).
    let beliefs: Vec<coord_check::beliefs::Belief> = {
        let crashed_at = lock(&shared.crashed_at).clone();
        lock(&shared.beliefs)
            .iter()
            .map(|(client, b)| {
                let mut b = b.clone();
                if let Some(&at) = crashed_at.get(client) {
                    b.until = Some(b.until.map_or(at, |u| u.min(at)).max(b.from));
                }
                b
            })
            .collect()
    };
    let margin = world.ttl.as_micros() as u64 / 10;
    let belief_report = coord_check::beliefs::check(&beliefs, margin);
    let mut belief_violations: Vec<String> =
        belief_report.violations.iter().map(ToString::to_string).collect();
    {
        let deleted = lock(&shared.operator_deleted).clone();
        let crashed = lock(&shared.crashed_at).clone();
        let sessions = lock(&shared.sessions).clone();
        let soon = world.ttl.as_micros() as u64 * 2;
        // A grant handed out for an entry that was deleted before the last entry ahead
        // of it went, in the store's own order (revisions, not wall time, so a busy
        // machine that returns a grant late excuses nothing and accuses no one): the
        // waiter was woken after its entry was gone and never confirmed it. Judged for
        // the exclusive families: a semaphore's waiter does not confirm its lease's
        // entry before its grant yet (it learns of the loss through the armed watch
        // within the bound) — a known gap.
        let writes = world.cluster.writes(&format!("{NS}/{}/{RES}/", kind.dir()));
        for b in beliefs.iter().filter(|b| b.admits == 1) {
            if let Some((own_gone, ahead_gone)) = woken_after_own_delete(&writes, b.token) {
                belief_violations.push(format!(
                    "holder {} was granted token {} although its entry was deleted (revision {own_gone}) \
                     before the last entry ahead of it went (revision {ahead_gone}){}",
                    b.holder,
                    b.token,
                    if deleted.contains_key(&b.token) {
                        ", by the operator"
                    } else {
                        ""
                    }
                ));
            }
        }
        for (client, holder, entry, generation, at) in lock(&shared.lost_in_session).iter() {
            // The session ended soon after (an expiry whose entry deletion the watch saw
            // first), or changed shortly before (the grant may belong to a session the
            // recorder had not seen yet): not judged.
            let session_ended = sessions.get(client).is_some_and(|changes| {
                changes.iter().skip(1).any(|&(when, g, alive)| {
                    when + soon >= *at && when <= at + soon && (g != *generation || !alive)
                })
            });
            if !deleted.contains_key(entry) && !crashed.contains_key(client) && !session_ended {
                let near: Vec<(u64, u64)> = deleted
                    .iter()
                    .filter(|&(_, &t)| t + 20_000 >= *at && t <= at + 20_000)
                    .map(|(&k, &t)| (k, t))
                    .collect();
                belief_violations.push(format!(
                    "holder {holder}'s grant (token {entry}) said Lost at {at} with its session intact, and no \
                     operator deleted its entry: something of coord's removed it (operator deletes near then: \
                     {near:?}; session changes: {:?})",
                    sessions.get(client)
                ));
            }
        }
    }
    let revokes = std::mem::take(&mut *lock(&shared.revokes));
    for call in revokes {
        call.await
            .map_err(|e| format!("a revoke_lock call failed: {e}"))?;
    }
    let mut log_violations = Vec::new();
    // Nothing is left behind: every grant was released, dropped or lost and every
    // contender dropped, so the entries go (the crashed client's with its session).
    let until = Instant::now() + world.ttl * 4 + ms(2000);
    let left = loop {
        let left = world.cluster.keys_with_prefix(&dir);
        if left.is_empty() || Instant::now() >= until {
            break left;
        }
        sleep(ms(20)).await;
    };
    if !left.is_empty() {
        log_violations.push(format!("entries left behind once every client let go: {left:?}"));
    }
    let revoked = lock(&shared.revoked).clone();
    let seen = lock(&shared.revocations_seen).clone();
    if shared.revokes_unknown.load(Ordering::Relaxed) == 0 {
        for token in seen.iter().filter(|t| !revoked.contains(t)) {
            log_violations.push(format!(
                "the holder with token {token} saw a revocation no revoke_lock asked of it"
            ));
        }
    }

    let log = read_log(&world).await?;
    let entries: Vec<LogEntry> = log.iter().map(|(_, e)| e.clone()).collect();
    let report = sections::check(kind.admission(), &entries);
    let in_log: BTreeSet<u64> = log.iter().map(|(seq, _)| *seq).collect();
    for seq in lock(&shared.acked).iter().filter(|s| !in_log.contains(s)) {
        log_violations.push(format!("acknowledged write log/{seq:020} is not in the log"));
    }
    for seq in lock(&shared.refused).iter().filter(|s| in_log.contains(s)) {
        log_violations.push(format!("refused write log/{seq:020} is in the log"));
    }
    Ok(ExclRun {
        ops: shared.ops.load(Ordering::Relaxed),
        unknown: shared.unknown.load(Ordering::Relaxed),
        grants: shared.grants.load(Ordering::Relaxed),
        fenced: shared.fenced.load(Ordering::Relaxed),
        entries: entries.len(),
        violations: report.violations.iter().map(ToString::to_string).collect(),
        log_violations,
        beliefs: beliefs.len(),
        belief_violations,
        revoked: revoked.len(),
        revocations_seen: seen.len(),
        nemesis: world.nemesis_log(),
    })
}

/// Runs a family's histories, and for the lock the fence-dropped mutant.
pub(crate) fn exclusion_family(kind: Kind, test: &'static str, mutant: bool) {
    let plan = plan();
    let started = std::time::Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut ops, mut unknown, mut violating) = (0, 0, 0);
    let (mut grants, mut fenced, mut entries) = (0, 0, 0);
    let (mut revoked, mut revocations_seen, mut beliefs) = (0, 0, 0);
    let mut mutant_line = String::new();
    block_on(async {
        for (seed, run) in run_all(&plan.seeds, move |seed| exclusion_history(seed, kind, true)).await {
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    failures.push(format!(
                        "seed {seed}: {}: {e}\n  {}",
                        kind.label(),
                        replay_hint(seed, test)
                    ));
                    continue;
                }
            };
            ops += run.ops;
            unknown += run.unknown;
            grants += run.grants;
            fenced += run.fenced;
            entries += run.entries;
            revoked += run.revoked;
            revocations_seen += run.revocations_seen;
            beliefs += run.beliefs;
            if !run.violations.is_empty()
                || !run.log_violations.is_empty()
                || !run.belief_violations.is_empty()
            {
                violating += 1;
                failures.push(format!(
                    "seed {seed}: the {} log or its holders' beliefs break exclusion ({:?}):\n    {}\n  nemesis: {}\n  {}",
                    kind.label(),
                    kind.admission(),
                    run.violations
                        .iter()
                        .chain(&run.log_violations)
                        .chain(&run.belief_violations)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n    "),
                    run.nemesis,
                    replay_hint(seed, test)
                ));
            }
        }
        if mutant {
            let (mut caught, mut tried) = (0, 0);
            let mut seeds = plan.seeds.clone();
            let mut next = seeds.iter().max().map_or(0, |s| s + 1);
            loop {
                for (seed, run) in run_all(&seeds, move |seed| exclusion_history(seed, kind, false)).await {
                    tried += 1;
                    match run {
                        Ok(run) if !run.violations.is_empty() => caught += 1,
                        Ok(_) => {}
                        Err(e) => failures.push(format!(
                            "seed {seed}: {} fence-dropped mutant: {e}\n  {}",
                            kind.label(),
                            replay_hint(seed, test)
                        )),
                    }
                }
                if caught > 0 || plan.replay || tried >= MUTANT_MAX_SEEDS {
                    break;
                }
                seeds = (next..next + parallel() as u64).collect();
                next += parallel() as u64;
            }
            if caught == 0 && !plan.replay {
                failures.push(format!(
                    "the fence-dropped mutant of the {} was never caught in {tried} seeds: the checker or the nemesis is blind",
                    kind.label()
                ));
            }
            mutant_line = format!("; mutant fence-dropped caught in {caught}/{tried}");
        }
    });
    let revocations = if kind == Kind::Lock {
        format!(", {revoked} holders asked to let go ({revocations_seen} saw it)")
    } else {
        String::new()
    };
    println!(
        "histories {}: {} seeds, {ops} ops, {unknown} unknown, {violating} violations; {grants} grants, \
         {entries} log entries, {fenced} writes fenced off, {beliefs} held intervals judged{revocations}{mutant_line}; {:.1}s",
        kind.label(),
        plan.seeds.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
pub(crate) fn lock_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Lock, "lock_histories", true);
}

/// The lock and the election under a nemesis of frequent entry deletes (holders' and
/// waiters'): the log, and what every handle said, judged as for the other families.
/// The mutants `OwnEntryUnchecked` and `LeaveByKey` are caught under this nemesis.
#[test]
pub(crate) fn entry_delete_histories() {
    let _one = one_at_a_time();
    let plan = plan();
    let mut failures = Vec::new();
    let (mut grants, mut beliefs) = (0, 0);
    for kind in [Kind::Lock, Kind::Election] {
        let runs = block_on(run_all(&plan.seeds, move |seed| {
            exclusion_history_under(seed, kind, true, Profile::EntryDeletes)
        }));
        for (seed, run) in runs {
            match run {
                Ok(run) => {
                    grants += run.grants;
                    beliefs += run.beliefs;
                    let all: Vec<String> = run
                        .violations
                        .iter()
                        .chain(&run.log_violations)
                        .chain(&run.belief_violations)
                        .cloned()
                        .collect();
                    if !all.is_empty() {
                        failures.push(format!(
                            "seed {seed}: {}: {}\n  nemesis: {}\n  {}",
                            kind.label(),
                            all.join("\n    "),
                            run.nemesis,
                            replay_hint(seed, "entry_delete_histories")
                        ));
                    }
                }
                Err(e) => failures.push(format!("seed {seed}: {}: {e}", kind.label())),
            }
        }
    }
    println!(
        "histories entry deletes: {} seeds × lock, election; {grants} grants, {beliefs} held intervals judged, {} violations",
        plan.seeds.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
pub(crate) fn election_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Election, "election_histories", false);
}

#[test]
pub(crate) fn rw_lock_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::RwLock, "rw_lock_histories", false);
}

#[test]
pub(crate) fn semaphore_histories() {
    let _one = one_at_a_time();
    exclusion_family(Kind::Semaphore, "semaphore_histories", false);
}
