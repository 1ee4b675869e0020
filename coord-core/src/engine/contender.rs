//! The contender queue's algorithm, written once for every backend and every recipe on
//! it: queue locally, join, wait for the entry ahead until first, grant with a hold
//! state, and remove the entry — on release, on drop, after a cancelled wait — retrying
//! until the server confirms or the session that owns it has ended.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::engine::client_core::{ClientCore, origin_of};
use crate::engine::local_queue::{
    LocalQueue, SharedTurn, granted, is_releasing, lose_turn, release_turn, releasing, session_ended_turn,
    vanished_at,
};
use crate::engine::marked_holds::{Marked, NEXT_MARKED};
use crate::engine::removal::{self, Detached, ended, over};
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::Fence;
use crate::hold::{EntryGone, HoldState, HoldWatch};
use crate::metrics;
use crate::mutants::{self, Mutant};
use crate::raw::{
    Admission, Backend, Backoff, Joined, Position, QueueEntry, QueueSpec, ReleaseMark, Slot, Ticket,
};
use crate::session::{SessionState, SessionStatus};

/// A granted turn: the contender, its fence and its hold state.
pub(crate) struct Grant {
    pub(crate) contender: Contender,
    pub(crate) fence: Fence,
    pub(crate) hold: HoldWatch,
}

/// This client's turn at a name, given up only once its entry is gone (removed by us, or
/// with its session), so the next local contender never finds it ahead.
type Turn = SharedTurn;

/// A join under way, polled in place by the acquisition. In a mutex only so that a
/// contender (and the guard holding it) is `Sync`; it is reached through `&mut`, never
/// locked.
type Joining = Mutex<Pin<Box<dyn Future<Output = Result<Joined>> + Send>>>;

/// The longest lock-delay a contender keeps ([`QueueSpec::lock_delay`]): an hour.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(3600);

/// The value that asks an entry's holder to let go (Curator's `Revoker` writes the
/// same into the lock node).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// One contender's entry. Removed exactly once: by [`Contender::leave`], or on drop —
/// which covers a dropped guard, a cancelled acquisition, and a `join` whose outcome is
/// unknown (the backend finds the entry by its ticket).
pub(crate) struct Contender {
    backend: Arc<dyn Backend>,
    ticket: Ticket,
    own: Option<QueueEntry>,
    /// The join while it runs, polled in place by the acquisition (no task, no thread
    /// hop). A contender dropped meanwhile hands it to its removal, which finishes it
    /// first: a dropped acquisition never cuts a join off halfway, and the create it
    /// removes can never overtake it (etcd runs concurrent requests in any order).
    joining: Option<Joining>,
    turn: Turn,
    settled: bool,
    /// Whether the entry was granted: its removal is then a release
    /// ([`ContenderQueue::release`](crate::raw::ContenderQueue::release)), which marks it as one where
    /// the queue has a lock-delay.
    granted: bool,
    /// With a lock-delay, its place among the grants [`Client::close`] releases.
    marked: Option<Marked>,
}

impl Contender {
    /// Replaces the entry's value (an election's `proclaim`).
    ///
    /// # Errors
    ///
    /// `Fenced` when the entry is gone; `Unavailable`, `Timeout`.
    pub(crate) async fn update(&self, value: Vec<u8>) -> Result<()> {
        let own = self
            .own
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::Fenced, "the contender has no entry"))?;
        self.backend.update(&self.ticket, own, value).await
    }

    /// Resolves once someone has asked this contender to let go: its entry's value was
    /// replaced by [`REVOKE`] (Curator's `Revoker` protocol). Watches the queue's
    /// entries from the first poll (nothing before), through connection trouble; never
    /// resolves once the entry is gone (the hold is lost then, which its own signal
    /// says).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping it stops watching.
    pub(crate) async fn revocation_requested(&self) {
        use futures::StreamExt as _;
        let Some(own) = self.own.as_ref() else {
            return std::future::pending().await;
        };
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            match self.backend.watch_entries(&self.ticket.queue).await {
                Ok(mut events) => {
                    while let Some(event) = events.next().await {
                        let Ok(crate::raw::EntriesEvent::Entries(members)) = event else {
                            continue;
                        };
                        match members.iter().find(|m| m.path == own.path) {
                            Some(m) if m.value == REVOKE => return,
                            Some(_) => {}
                            None => return std::future::pending().await,
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::Closed => return std::future::pending().await,
                Err(_) => {}
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// Removes the entry, retrying until the server confirms it is gone or its session
    /// has ended; then gives up the local turn.
    ///
    /// # Errors
    ///
    /// Only a refusal retrying cannot change; the entry then goes with its session, and
    /// the local turn is held until then.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal continues in the background.
    pub(crate) async fn leave(mut self) -> Result<()> {
        // Run in place; dropping this future hands the rest to the background.
        Detached::new(self.take_removal().run()).await
    }

    /// One removal attempt now; if it does not get through, the removal goes on in the
    /// background (as on drop) and this returns at once.
    ///
    /// # Errors
    ///
    /// A refusal retrying cannot change.
    pub(crate) async fn leave_soon(mut self) -> Result<()> {
        let attempt = match (&self.joining, &self.own) {
            (None, Some(own)) if self.granted => self.backend.release(&self.ticket, own).await,
            (None, Some(own)) => self.backend.leave(&self.ticket, Some(own)).await,
            _ => Err(Error::new(ErrorKind::Unavailable, "the join is still under way")),
        };
        match attempt {
            Ok(()) => {
                self.settled = true;
                self.marked = None;
                release_turn(&self.turn);
                Ok(())
            }
            // Dropping `self` retries in the background.
            Err(e) if removal::refused(&e) => Err(e),
            Err(_) => Ok(()),
        }
    }

    /// Everything a removal needs; the contender counts as settled from here on, and a
    /// deletion of its entry seen from here on is its own.
    fn take_removal(&mut self) -> Removal {
        self.settled = true;
        releasing(&self.turn);
        Removal {
            backend: self.backend.clone(),
            ticket: self.ticket.clone(),
            own: self.own.take(),
            joining: self.joining.take(),
            turn: self.turn.clone(),
            granted: self.granted,
            marked: self.marked.take(),
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let removal = self.take_removal();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime: nothing can run any more; the entry goes with its session.
            release_turn(&removal.turn);
            return;
        };
        rt.spawn(removal.run());
    }
}

/// A contender's removal, run on a task of its own.
struct Removal {
    backend: Arc<dyn Backend>,
    ticket: Ticket,
    own: Option<QueueEntry>,
    joining: Option<Joining>,
    turn: Turn,
    granted: bool,
    marked: Option<Marked>,
}

impl Removal {
    /// Waits for the join (if still running), removes the entry until confirmed or its
    /// session ended, and gives up the local turn — at once, or, when the server refused
    /// the removal, once the session ends (the entry stays until then, and the next
    /// local contender would only queue behind it).
    async fn run(self) -> Result<()> {
        let Removal {
            backend,
            ticket,
            own,
            joining,
            turn,
            granted,
            marked,
        } = self;
        let own = match joining {
            // A join that failed or was cut off may still have made the entry: it is
            // found by its ticket.
            Some(join) => join
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .await
                .ok()
                .map(|joined| joined.own),
            None => own,
        };
        let result = match own.as_ref() {
            Some(own) if granted => release_until_gone(&*backend, &ticket, own).await,
            own => remove_until_gone(&*backend, &ticket, own).await,
        };
        drop(marked);
        match &result {
            // Confirmed gone because its session ended: it went with the session.
            Ok(()) if over(*backend.session().borrow(), ticket.generation) => session_ended_turn(&turn),
            Ok(()) => release_turn(&turn),
            Err(e) => {
                tracing::warn!(error = %e, entry = %ticket.locator, "coord.contender_removal_refused: the entry goes when its session ends");
                let mut session = backend.session();
                let generation = ticket.generation;
                tokio::spawn(async move {
                    ended(&mut session, generation).await;
                    session_ended_turn(&turn);
                });
            }
        }
        result
    }
}

/// Waits until session `generation` is connected again.
async fn reconnected(session: &mut watch::Receiver<SessionStatus>, generation: u64) -> Result<()> {
    let status = session
        .wait_for(|s| over(*s, generation) || s.state == SessionState::Connected)
        .await
        .map_err(|_| Error::closed())?;
    if over(*status, generation) {
        return Err(session_lost(*status));
    }
    Ok(())
}

fn session_lost(status: SessionStatus) -> Error {
    if status.state == SessionState::Closed {
        return Error::closed();
    }
    Error::new(
        ErrorKind::SessionLost,
        "the session was lost while waiting; the contender is gone — call again to queue on the new session",
    )
}

/// Runs `step` unless session `generation` ends first.
async fn in_session<T>(
    session: &mut watch::Receiver<SessionStatus>,
    generation: u64,
    step: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::select! {
        r = step => r,
        _ = ended(session, generation) => Err(session_lost(*session.borrow())),
    }
}

/// How long a step of a `try_*` may go unanswered before the `try_*` gives up: a
/// quarter of the session timeout (lease TTL), at most 1 s. A silent partition (nothing
/// answers, nothing is reset) makes the session suspended only once a keep-alive is
/// overdue — seconds later on etcd — so a `try_*` does not wait for that.
pub(crate) fn try_deadline(session_timeout: Duration) -> Duration {
    (session_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Runs `step` of a `try_*` unless the session turns suspended (connection trouble) or
/// ends first, or the step goes unanswered for `deadline` (see [`try_deadline`]): a
/// `try_*` fails fast with a retryable `Unavailable` instead of waiting out an outage.
/// `write`: the step may have changed something, so its outcome is unknown.
pub(crate) async fn unless_suspended<T>(
    session: &mut watch::Receiver<SessionStatus>,
    generation: u64,
    write: bool,
    deadline: Duration,
    step: impl Future<Output = Result<T>>,
) -> Result<T> {
    let troubled = |s: &SessionStatus| over(*s, generation) || s.state == SessionState::Suspended;
    tokio::select! {
        r = tokio::time::timeout(deadline, step) => r.unwrap_or_else(|_| Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "no answer from the server within {} (connection trouble?); try again",
                humantime_ms(deadline)
            ),
        )
        .with_outcome_unknown(write))),
        status = session.wait_for(troubled) => match status {
            Ok(s) if s.state == SessionState::Suspended => Err(suspended().with_outcome_unknown(write)),
            Ok(s) => Err(session_lost(*s)),
            Err(_) => Err(Error::closed()),
        },
    }
}

/// `d` in milliseconds, for messages.
fn humantime_ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// The error of a `try_*` met by connection trouble.
pub(crate) fn suspended() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the session is suspended (connection trouble); try again once it reconnects",
    )
}

/// Whether a failed step of a waiting acquisition is worth repeating on the same session.
fn transient(e: &Error) -> bool {
    e.is_retryable() && e.kind() != ErrorKind::SessionLost
}

/// Removes the ticket's entry: [`ContenderQueue::leave`](crate::raw::ContenderQueue::leave) until the
/// server confirms it is gone or the ticket's session has ended.
///
/// # Errors
///
/// Only errors retrying cannot help.
///
/// # Cancel safety
///
/// If dropped, the entry may remain until its session ends.
pub(crate) async fn remove_until_gone(
    backend: &dyn Backend,
    ticket: &Ticket,
    own: Option<&QueueEntry>,
) -> Result<()> {
    removal::until_gone(backend.session(), ticket.generation, &ticket.locator, || {
        backend.leave(ticket, own)
    })
    .await
}

/// Removes a granted entry `own` as a release
/// ([`ContenderQueue::release`](crate::raw::ContenderQueue::release)), as [`remove_until_gone`] does.
///
/// # Errors
///
/// Only errors retrying cannot help.
///
/// # Cancel safety
///
/// If dropped, the entry may remain until its session ends.
async fn release_until_gone(backend: &dyn Backend, ticket: &Ticket, own: &QueueEntry) -> Result<()> {
    removal::until_gone(backend.session(), ticket.generation, &ticket.locator, || {
        backend.release(ticket, own)
    })
    .await
}

/// Joins `queue` with `value` and, if `wait`, waits until first; without `wait`, gives
/// up (removing the entry) when someone is ahead. Herd-free: only the entry immediately
/// ahead is watched.
///
/// # Errors
///
/// `SessionLost` if the session ended while waiting (call again to queue on the next);
/// `Closed`; the backend's errors (`Unavailable`, `Timeout` only without `wait`, or
/// when joining).
///
/// # Cancel safety
///
/// Cancel-safe: a dropped future leaves no entry behind (removed in the background) and
/// gives up its local turn.
/// `InvalidArgument` for a lock-delay over [`MAX_LOCK_DELAY`].
pub(crate) fn check_lock_delay(delay: Option<Duration>) -> Result<()> {
    match delay.filter(|d| *d > MAX_LOCK_DELAY) {
        Some(delay) => Err(Error::invalid_argument(format!(
            "a lock-delay of {:?} is over the limit of {} s; give the longest a vanished holder's \
             late writes can take",
            delay,
            MAX_LOCK_DELAY.as_secs()
        ))),
        None => Ok(()),
    }
}

pub(crate) async fn acquire(
    core: &ClientCore,
    queue: QueueSpec,
    value: Vec<u8>,
    wait: bool,
) -> Result<Option<Grant>> {
    check_lock_delay(queue.lock_delay)?;
    let started = Instant::now();
    let session_rx = core.backend.session();
    if !wait && session_rx.borrow().state == SessionState::Suspended {
        // A `try_*` does not wait out connection trouble: it says so at once, before any
        // request, and leaves nothing behind.
        return Err(suspended());
    }
    // Whether this acquisition waited for someone ahead: a local contender for the name,
    // or an entry on the server (a hand-off, in the metrics).
    let Some((turn, slot, mut waited)) = local_turn(core, &queue, session_rx, wait).await? else {
        return Ok(None);
    };
    // Lock-delay on this client: a contender that waited its local turn after the
    // previous grant's entry vanished. Newcomers, shared places and tries do not.
    let local_vanish = (queue.lock_delay.is_some() && queue.takes_turns() && waited && wait)
        .then(|| vanished_at(&turn))
        .flatten();
    let backend = core.backend.clone();
    let ticket = backend.ticket(&queue, slot)?;
    let generation = ticket.generation;
    let mut session = backend.session();
    let mut contender = Contender {
        backend: backend.clone(),
        joining: Some(joining(backend.clone(), ticket.clone(), value, wait)),
        ticket,
        own: None,
        turn,
        settled: false,
        granted: false,
        marked: None,
    };
    let joined = join(&mut contender, &mut session, generation, wait).await?;
    contender.own = Some(joined.own.clone());
    let mut own = joined.own;
    match wait_until_first(
        core,
        &contender,
        &mut own,
        joined.ahead.map(|a| contender.ticket.queue.admit(a)),
        &mut session,
        wait,
        local_vanish,
    )
    .await?
    {
        Some(waited_on_server) => waited |= waited_on_server,
        None => {
            // Not waiting: one removal attempt now, the rest in the background.
            contender.leave_soon().await?;
            return Ok(None);
        }
    }
    let hold = HoldWatch::new(
        backend.session(),
        generation,
        {
            let (backend, ticket, own, turn) = (
                backend.clone(),
                contender.ticket.clone(),
                own.clone(),
                contender.turn.clone(),
            );
            move |gone| watch_own_entry(backend, ticket, own, gone, turn)
        },
        {
            // A refused fence proves the entry gone: the turn is free, as when the entry
            // watch sees the deletion.
            let (backend, ticket) = (backend.clone(), contender.ticket.clone());
            let turn = Arc::downgrade(&contender.turn);
            move || {
                if let Some(turn) = turn.upgrade() {
                    entry_lost(&*backend, &ticket, &turn);
                }
            }
        },
    );
    contender.granted = true;
    if queue.lock_delay.is_some() {
        let id = NEXT_MARKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        core.marked_holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (contender.ticket.clone(), own.clone()));
        contender.marked = Some(Marked {
            holds: core.marked_holds.clone(),
            id,
        });
    }
    if hold.peek() == HoldState::Lost {
        // Gone with its session already: the turn is free (the entry is gone).
        granted(&contender.turn, generation);
        session_ended_turn(&contender.turn);
    } else {
        granted(&contender.turn, generation);
    }
    if wait && !matches!(queue.admission, Admission::Immediate) {
        metrics::granted(backend.kind(), queue.label, started.elapsed(), waited);
    }
    let fence = Fence::new(
        own.path.clone(),
        own.token,
        Some(hold.forfeit()),
        origin_of(&backend),
    );
    Ok(Some(Grant {
        contender,
        fence,
        hold,
    }))
}

/// This client's turn at `queue` and its slot, and whether it waited for a local
/// contender; `None` when it would have to wait and `wait` is off.
///
/// # Errors
///
/// Without `wait`, while waiting for this client's own entry's removal: `Unavailable`
/// when the session becomes suspended or the removal outlasts a try's deadline;
/// `SessionLost`, `Closed`.
async fn local_turn(
    core: &ClientCore,
    queue: &QueueSpec,
    session_rx: watch::Receiver<SessionStatus>,
    wait: bool,
) -> Result<Option<(Turn, Slot, bool)>> {
    // One local queue for every recipe, keyed by the queue's directory and class.
    let local = &core.contenders;
    let key = format!("{}\0{}", queue.dir, queue.class);
    if !queue.takes_turns() {
        // Shared places (readers, leases, barrier members, votes) hold at once: each
        // takes the client's first free slot (never waits locally), and the server
        // orders them.
        let (turn, slot) = free_slot(local, &key, &session_rx);
        return Ok(Some((turn, slot, false)));
    }
    // An exclusive grant: the client's contenders take turns locally, and only the one
    // whose turn it is has an entry on the server (slot 0).
    match local.try_turn(&key, &session_rx) {
        Some(turn) => Ok(Some((turn, 0, false))),
        // Held only by this client's own entry being removed (a guard dropped or
        // released, a try cut short): nobody holds the name, so a try waits for that
        // removal — within a try's deadline — rather than report it held.
        // It waits as a try does: not through an outage (`Unavailable` at once when the
        // session is suspended), and a removal still under way at the deadline is said
        // so (`Unavailable`, retryable) — never `None`, which would claim a holder.
        None if !wait && local.being_removed(&key) => {
            let deadline = try_deadline(core.backend.session_timeout());
            let mut session = session_rx.clone();
            let generation = session.borrow().generation;
            let waited = unless_suspended(&mut session, generation, false, deadline, async {
                Ok(local.turn(&key, session_rx).await)
            })
            .await;
            match waited {
                Ok(turn) => Ok(Some((turn, 0, false))),
                Err(e)
                    if e.kind() != ErrorKind::Unavailable
                        || session.borrow().state == SessionState::Suspended =>
                {
                    Err(e)
                }
                Err(_) if local.being_removed(&key) => Err(Error::new(
                    ErrorKind::Unavailable,
                    "this client's earlier entry for the name is still being removed (connection \
                     trouble?); try again",
                )),
                // Another local contender took the turn meanwhile.
                Err(_) => Ok(None),
            }
        }
        None if !wait => Ok(None),
        None => Ok(Some((local.turn(&key, session_rx).await, 0, true))),
    }
}

/// The join of `ticket`'s entry holding `value`, to be polled in place. A join that
/// failed for the link's or the cluster's sake (a member down, a leader election) is
/// sent again: joining twice on one ticket never makes a second entry. Not without
/// `wait`: a `try_*` fails fast with the retryable error instead (its entry, if the join
/// may have made one, is removed in the background).
fn joining(backend: Arc<dyn Backend>, ticket: Ticket, value: Vec<u8>, wait: bool) -> Joining {
    Mutex::new(Box::pin(async move {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        // Whether an earlier attempt may have made the entry: a later refusal then does
        // not mean nothing was made.
        let mut maybe_made = false;
        loop {
            match backend.join(&ticket, value.clone()).await {
                Err(e)
                    if wait
                        && e.is_retryable()
                        && matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) =>
                {
                    maybe_made |= e.outcome_unknown();
                    tracing::debug!(error = %e, "coord.join_retry");
                    backoff.wait().await;
                }
                Err(e) if maybe_made => return Err(e.with_outcome_unknown(true)),
                other => return other,
            }
        }
    }))
}

/// Polls `contender`'s join in place on session `generation`. The join stays with the
/// contender while it runs (a contender dropped meanwhile — a cancelled acquisition, a
/// session ended — has its removal finish it) and is dropped the moment it finished, so
/// it is never polled again.
///
/// # Errors
///
/// The join's, or the session's end. A join that failed for sure (refused, say) made
/// nothing: nothing is removed and the local turn is free at once, so the next call on
/// the name is not queued behind a removal the server would refuse too. One of unknown
/// outcome leaves the dropped contender to remove whatever it may have made, found by
/// its ticket.
async fn join(
    contender: &mut Contender,
    session: &mut watch::Receiver<SessionStatus>,
    generation: u64,
    wait: bool,
) -> Result<Joined> {
    let joined = {
        let Some(join) = contender.joining.as_mut() else {
            return Err(Error::new(ErrorKind::Unexpected, "no join under way"));
        };
        let join = join.get_mut().unwrap_or_else(|p| p.into_inner());
        let joining = async { Ok(join.as_mut().await) };
        let outcome = if wait {
            in_session(session, generation, joining).await?
        } else {
            // A join cut short here is finished (and its entry removed) by the dropped
            // contender's removal.
            let deadline = try_deadline(contender.backend.session_timeout());
            unless_suspended(session, generation, true, deadline, joining).await?
        };
        contender.joining = None;
        outcome
    };
    match joined {
        Ok(joined) => Ok(joined),
        Err(e) if !e.outcome_unknown() => {
            contender.settled = true;
            release_turn(&contender.turn);
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// Waits until `contender`'s entry `own` is first (its position `known` from the join,
/// if the join read it): `Some(waited)` then, whether it waited for an entry ahead;
/// `None` when it is not first and `wait` is off.
///
/// # Errors
///
/// `SessionLost` when the session ends (the entry goes with it); the backend's
/// permanent errors; without `wait`, its transient ones too.
async fn wait_until_first(
    core: &ClientCore,
    contender: &Contender,
    own: &mut QueueEntry,
    mut known: Option<Position>,
    session: &mut watch::Receiver<SessionStatus>,
    wait: bool,
    local_vanish: Option<Instant>,
) -> Result<Option<bool>> {
    let backend = &contender.backend;
    let generation = contender.ticket.generation;
    let label = contender.ticket.queue.label;
    let mut waited = false;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    // Lock-delay: the entries this contender last waited for (gone by the time it is
    // first), and whether it has held off already.
    let mut awaited: Vec<QueueEntry> = Vec::new();
    let mut held_off = false;
    // Whether the one entry ahead just went (`Position::Next`): the next read confirms
    // this contender's own entry alone.
    let mut next_gone = false;
    if mutants::active(Mutant::ExtraRequestPerLock) && matches!(known, Some(Position::First { .. })) {
        // The deliberate regression: the join's answer is read again.
        known = None;
    }
    loop {
        let position = match known.take() {
            Some(p) => p,
            None => {
                let queue = &contender.ticket.queue;
                let confirm = std::mem::take(&mut next_gone);
                let read = async {
                    if confirm {
                        backend.confirm(&contender.ticket, own).await
                    } else {
                        backend.ahead(&contender.ticket, own).await
                    }
                    .map(|a| queue.admit(a))
                };
                let read = if wait {
                    in_session(session, generation, read).await
                } else {
                    unless_suspended(
                        session,
                        generation,
                        false,
                        try_deadline(backend.session_timeout()),
                        read,
                    )
                    .await
                };
                match read {
                    Ok(p) => p,
                    Err(e) if wait && transient(&e) => {
                        tracing::debug!(error = %e, "coord.queue_read_retry");
                        reconnected(session, generation).await?;
                        backoff.wait().await;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let next = matches!(position, Position::Next(_));
        let gone = match position {
            Position::First { seen_at, mark } => {
                own.seen_at = seen_at;
                if let Some(delay) = contender.ticket.queue.lock_delay
                    && !held_off
                {
                    // The entry it waited for went without a release; or, on this
                    // client, the turn before this one ended with its entry vanishing.
                    let remote = vanished(&awaited, mark.as_ref()).map(|v| (v.to_owned(), delay));
                    let local = local_vanish
                        .and_then(|at| delay.checked_sub(at.elapsed()))
                        .filter(|left| !left.is_zero())
                        .map(|left| (LOCAL_HOLDER.to_owned(), left));
                    if let Some((vanished, left)) = remote.or(local) {
                        held_off = true;
                        hold_off(contender, own, &vanished, left, session).await?;
                        // Read again: the entry must still be there, and first.
                        continue;
                    }
                }
                return Ok(Some(waited));
            }
            Position::Behind(_) | Position::Next(_) | Position::Among(_) if !wait => return Ok(None),
            // Nothing to wait for is never a place to wait (a backend never says it): read
            // again.
            Position::Among(ahead) if ahead.is_empty() => {
                backoff.wait().await;
                continue;
            }
            // Any of them gone: read again (the backend counts what is left).
            Position::Among(ahead) => {
                awaited = ahead.clone();
                let any_gone =
                    futures::future::select_ok(ahead.iter().map(|e| Box::pin(backend.wait_gone(e))));
                in_session(session, generation, async { any_gone.await.map(drop) }).await
            }
            // The entry ahead went: read again. The read also confirms this contender's
            // own entry is still there — it may have been deleted while it waited (an
            // operator, a late delete), and a grant without an entry is no grant. Right
            // behind the first entry (`Position::Next`), where nothing else can be ahead
            // any more, that confirmation is all it reads (`ContenderQueue::confirm`).
            Position::Behind(ahead) | Position::Next(ahead) => {
                awaited = vec![ahead.clone()];
                in_session(session, generation, backend.wait_gone(&ahead)).await
            }
        };
        match gone {
            Ok(()) => {
                woken(core, label);
                waited = true;
                next_gone = next;
                if next && mutants::active(Mutant::OwnEntryUnchecked) {
                    known = Some(Position::First {
                        seen_at: own.seen_at,
                        mark: None,
                    });
                }
            }
            Err(e) if transient(&e) => {
                tracing::debug!(error = %e, "coord.queue_wait_retry");
                reconnected(session, generation).await?;
                backoff.wait().await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Lock-delay: of the entries a contender waited for (all gone now that it is first),
/// the one that went without a release, if none of them did by one — `mark` (the
/// queue's [`ReleaseMark`], read with the position) names the entry a release removed.
/// `None` when it waited for nothing (the queue was free when it joined).
fn vanished<'a>(awaited: &'a [QueueEntry], mark: Option<&ReleaseMark>) -> Option<&'a str> {
    let first = awaited.first()?;
    if mark.is_some_and(|m| awaited.iter().any(|e| m.released(e))) {
        return None;
    }
    Some(&first.path)
}

/// What a release mark names as vanished when it was this client's previous holder of
/// the name (its entry's path is not kept).
pub(crate) const LOCAL_HOLDER: &str = "-";

/// Lock-delay: holds off for `delay` after `vanished` (the entry this contender waited
/// for) went without a release, counting from now — when this contender saw it gone,
/// no earlier than its holder was last known alive. Records why in the queue's mark for
/// inspectors, within the delay (a mark that cannot be written only hides the wait).
///
/// # Errors
///
/// `SessionLost` when the session ends meanwhile (the entry goes with it).
async fn hold_off(
    contender: &Contender,
    own: &QueueEntry,
    vanished: &str,
    delay: Duration,
    session: &mut watch::Receiver<SessionStatus>,
) -> Result<()> {
    let backend = &contender.backend;
    let queue = &contender.ticket.queue;
    let until_ms = std::time::SystemTime::now()
        .checked_add(delay)
        .and_then(|until| until.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(u64::MAX, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    tracing::info!(
        entry = %vanished,
        delay_ms = delay.as_millis() as u64,
        "coord.lock_delay: the entry ahead went without a release; holding off"
    );
    metrics::lock_delay(backend.kind(), queue.label);
    let mark = ReleaseMark::Vanished {
        entry: vanished.to_owned(),
        waiter: own.path.clone(),
        until_ms,
    };
    let record = async {
        if let Err(e) = tokio::time::timeout(delay, backend.write_release_mark(queue, &mark))
            .await
            .unwrap_or_else(|_| Err(Error::new(ErrorKind::Timeout, "no answer within the lock-delay")))
        {
            tracing::debug!(error = %e, "coord.lock_delay_mark_not_written");
        }
    };
    let wait = async {
        tokio::join!(tokio::time::sleep(delay), record);
        Ok(())
    };
    in_session(session, contender.ticket.generation, wait).await
}

/// Counts a waiting contender's wake-up ([`Stats::wakeups`](crate::Stats::wakeups), and
/// the metrics).
fn woken(core: &ClientCore, label: &'static str) {
    core.wakeups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::wakeup(core.backend.kind(), label);
}

/// The first of this client's slots at `key` that none of its contenders holds, and its
/// turn.
fn free_slot(local: &LocalQueue, key: &str, session: &watch::Receiver<SessionStatus>) -> (Turn, Slot) {
    let mut slot: Slot = 0;
    loop {
        if let Some(turn) = local.try_turn(&format!("{key}\0{slot}"), session) {
            return (turn, slot);
        }
        slot += 1;
    }
}

/// A grant's entry seen gone without this client removing it: the backend is told
/// ([`ContenderQueue::entry_lost`]: on etcd, later contenders of the client take another
/// key, out of the lost guard's release's reach), then the local turn is given up —
/// unless the contender's removal had begun, which gives it up itself.
fn entry_lost(backend: &dyn Backend, ticket: &Ticket, turn: &Turn) {
    if !is_releasing(turn) && !mutants::active(Mutant::LossUntold) {
        backend.entry_lost(ticket);
    }
    lose_turn(turn);
}

/// Watches a grant's entry once someone waits on its hold, on a task of its own: its
/// deletion (by an operator) makes the hold `Lost` and frees the local turn
/// ([`entry_lost`]). The task ends then, when the entry's session is over (the hold
/// shows that by itself), or when every watch of the hold is dropped. Nothing runs for a
/// hold nobody waits on; the session's end frees the turn through the local queue.
fn watch_own_entry(backend: Arc<dyn Backend>, ticket: Ticket, own: QueueEntry, gone: EntryGone, turn: Turn) {
    let generation = ticket.generation;
    tokio::spawn(async move {
        let mut session = backend.session();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            tokio::select! {
                r = backend.wait_gone(&own) => match r {
                    Ok(()) => {
                        tracing::debug!(entry = %own.path, "coord.own_entry_gone");
                        // The turn first: whoever hears of the loss finds it free.
                        entry_lost(&*backend, &ticket, &turn);
                        gone.set();
                        return;
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::SessionLost | ErrorKind::Closed) => return,
                    Err(e) => {
                        tracing::debug!(error = %e, entry = %own.path, "coord.own_entry_watch_retry");
                    }
                },
                _ = ended(&mut session, generation) => return,
                _ = gone.unwatched() => return,
            }
            tokio::select! {
                _ = backoff.wait() => {}
                _ = ended(&mut session, generation) => return,
                _ = gone.unwatched() => return,
            }
        }
    });
}
