//! The client's link and session: the shared state of one client, every request's
//! wrapper (link faults, reply faults, late writes), and session supervision:
//! keep-alive at TTL/3, suspension, local loss detection, new sessions after loss, and
//! re-registration.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use coord_core::raw::{ClientState, Counter};
use coord_core::{Error, Result, SessionState};
use coord_mem_cluster::{MemCluster, State};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error;
use crate::options::MemOptions;

/// The client's link to the cluster, driven by fault hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Talking to the cluster.
    Up,
    /// Cut off until `until`: refused (requests fail at once, as on a reset connection),
    /// or `silent` (a blackhole: requests and replies wait, unanswered, until it ends or
    /// their deadline passes).
    Down {
        /// When the link comes back.
        until: Instant,
        /// Whether the link is silent rather than refused.
        silent: bool,
    },
    /// Crashed: silent forever, nothing cleaned up.
    Crashed,
    /// Closed by the user.
    Closed,
}

/// The server's id and the generation of the current session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionSlot {
    pub id: u64,
    pub generation: u64,
    /// The server has told us the session ended (or we decided so locally).
    pub lost: bool,
}

impl Inner {
    /// Grants a new session, announces it, and re-creates registrations.
    fn start_session(self: &Arc<Self>) -> watch::Receiver<bool> {
        self.stats.incr(Counter::SessionRequest);
        let (id, expired) = self.cluster.with(|s| s.grant_session(self.options.session_ttl));
        let generation = {
            let mut slot = self.slot();
            slot.id = id;
            slot.generation += 1;
            slot.lost = false;
            slot.generation
        };
        self.session.set(SessionState::Connected, generation, &self.stats);
        expired
    }

    /// Declares the current session lost (at most once per generation).
    fn declare_lost(&self) {
        let generation = {
            let mut slot = self.slot();
            if slot.lost {
                return;
            }
            slot.lost = true;
            slot.generation
        };
        self.state().declare_lost(generation);
    }

    /// The supervision loop; ends when the client is closed or crashed.
    pub(crate) async fn supervise(self: std::sync::Arc<Self>, mut expired: watch::Receiver<bool>) {
        let ttl = self.options.session_ttl;
        let interval = ttl / 3;
        // The local deadline: last acknowledged keep-alive + TTL − margin. Reported Lost
        // then, never later than the server can expire the session.
        let margin = ttl / 10;
        let mut last_ok = Instant::now();
        let mut link_rx = self.link.subscribe();
        loop {
            let link = *link_rx.borrow_and_update();
            match link {
                Link::Closed | Link::Crashed => return,
                Link::Down { until, .. } => {
                    let generation = self.slot().generation;
                    if !self.slot().lost {
                        self.session.set(SessionState::Suspended, generation, &self.stats);
                    }
                    let local_deadline = last_ok + ttl - margin;
                    let wake = if self.slot().lost {
                        until
                    } else {
                        until.min(local_deadline)
                    };
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        _ = link_rx.changed() => continue,
                    }
                    if Instant::now() >= local_deadline {
                        self.declare_lost();
                    }
                    if Instant::now() >= until {
                        self.link.send_if_modified(|l| {
                            if *l == link {
                                *l = Link::Up;
                                true
                            } else {
                                false
                            }
                        });
                    }
                }
                Link::Up => {
                    let (id, generation, lost) = {
                        let s = self.slot();
                        (s.id, s.generation, s.lost)
                    };
                    if lost || *expired.borrow() {
                        // Never resume a session we gave up on: end it on the server so its
                        // ephemerals do not linger as zombies, then start fresh.
                        self.declare_lost();
                        self.stats.incr(Counter::SessionRequest);
                        self.cluster.with(|s| s.end_session(id));
                        expired = self.start_session();
                        last_ok = Instant::now();
                        continue;
                    }
                    if self.session.current().state != SessionState::Connected {
                        self.stats.incr(Counter::SessionRequest);
                        self.heard_now();
                        if self.cluster.with(|s| {
                            s.sweep();
                            s.keep_alive(id)
                        }) {
                            last_ok = Instant::now();
                            self.session.set(SessionState::Connected, generation, &self.stats);
                        } else {
                            self.declare_lost();
                            continue;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(interval) => {
                            self.stats.incr(Counter::SessionRequest);
                            self.heard_now();
                            let alive = self.cluster.with(|s| { s.sweep(); s.keep_alive(id) });
                            if alive {
                                last_ok = Instant::now();
                            } else {
                                self.declare_lost();
                            }
                        }
                        _ = expired.changed() => self.declare_lost(),
                        _ = link_rx.changed() => {}
                    }
                }
            }
        }
    }
}

/// Shared state of one in-memory client.
#[derive(Debug)]
pub(crate) struct Inner {
    pub cluster: MemCluster,
    pub options: MemOptions,
    pub link: tokio::sync::watch::Sender<Link>,
    pub(crate) slot: Mutex<SessionSlot>,
    /// Injected faults on replies.
    pub(crate) faults: Mutex<ReplyFaults>,
    /// When the cluster last heard from this client (a request or a keep-alive).
    pub(crate) heard: Mutex<Option<Instant>>,
    /// Writes sent into a silent link and never answered, in the order sent: they land
    /// when the link is back ([`Inner::call_write`]).
    pub(crate) late: Arc<LateWrites>,
    /// Session status, counters, registrations, closed flag.
    pub(crate) state: ClientState,
}

/// A write in flight over a silent link, its answer no longer awaited.
type LateWrite = Box<dyn FnOnce(&mut State) + Send>;

/// A client's [`LateWrite`]s, in the order sent.
pub(crate) struct LateWrites(pub(crate) Mutex<Vec<LateWrite>>);

impl std::fmt::Debug for LateWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LateWrites({})", lock_late(self).len())
    }
}

fn lock_late(late: &LateWrites) -> MutexGuard<'_, Vec<LateWrite>> {
    late.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request to apply to the store, answering `R`.
type Request<R> = Box<dyn FnOnce(&mut State) -> R + Send>;

/// A write sent and not yet applied: dropped unapplied (its caller timed out or went
/// away), it is handed to [`Inner::land_late`].
struct InFlight<'a, R: 'static> {
    f: Option<Request<R>>,
    inner: &'a Inner,
}

impl<R: 'static> Drop for InFlight<'_, R> {
    fn drop(&mut self) {
        if let Some(f) = self.f.take() {
            self.inner.land_late(Box::new(move |s| drop(f(s))));
        }
    }
}

impl std::ops::Deref for Inner {
    type Target = ClientState;

    fn deref(&self) -> &ClientState {
        &self.state
    }
}

impl Inner {
    /// The state every backend keeps (for its methods that this type shadows).
    pub(crate) fn state(&self) -> &ClientState {
        &self.state
    }

    pub(crate) fn slot(&self) -> MutexGuard<'_, SessionSlot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The full key for `rest` under the namespace.
    pub(crate) fn key(&self, rest: &str) -> String {
        if self.options.namespace.is_empty() {
            rest.to_owned()
        } else {
            format!("{}/{rest}", self.options.namespace)
        }
    }

    /// Fails unless the link is up.
    pub(crate) fn check_link(&self) -> Result<()> {
        match *self.link.borrow() {
            Link::Up => Ok(()),
            Link::Down { .. } => Err(error::cut_off()),
            Link::Closed | Link::Crashed => Err(Error::closed()),
        }
    }

    /// One request to the cluster: checks the link, counts it, expires overdue sessions.
    pub(crate) fn request<R>(&self, counter: Counter, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        self.check_link()?;
        self.heard_now();
        self.stats.incr(counter);
        // Writes still in flight from a silent spell land first, in order.
        let mut pending = lock_late(&self.late);
        Ok(self.cluster.with(|s| {
            s.sweep();
            pending.drain(..).for_each(|w| w(s));
            f(s)
        }))
    }

    /// One request to the cluster as the real servers see it: applied at once (as by
    /// [`Inner::request`]), then its reply travels back — a point where the caller's future
    /// may be dropped after the cluster applied it, delayed by the injected latency, and
    /// lost if the link went down meanwhile or a lost reply was injected (a write's
    /// outcome is then unknown).
    ///
    /// Over a silent link (a blackhole) the request waits, unanswered, until the link is
    /// back or its deadline (the session TTL) passes: then it fails with `Timeout`, its
    /// outcome unknown for a write. The recipes' writes go through [`Inner::call_write`],
    /// which lands such a request later, as a real server may (a registration's
    /// re-creation by the session task is a plain [`Inner::request`], refused on a link
    /// that is down).
    pub(crate) async fn call<R>(&self, counter: Counter, f: impl FnOnce(&mut State) -> R) -> Result<R> {
        let write = matches!(counter, Counter::Write | Counter::Txn);
        self.through_silence(write).await?;
        let out = self.request(counter, f)?;
        self.reply(write).await?;
        Ok(out)
    }

    /// A write as [`Inner::call`] sends it, except over a silent link: the request is in
    /// flight from the moment it is sent, as one sent into a real partition is. Past its
    /// deadline the caller is told `Timeout` (outcome unknown); a caller that stops
    /// waiting drops nothing. Either way the write lands once the link is back — before
    /// any later request of this client, in the order they were sent (a session's
    /// requests are applied in order) — and never if the link is reset, closed or
    /// crashed first. Its checks (a session still alive, a fence, a version) are made
    /// when it lands.
    pub(crate) async fn call_write<R, F>(&self, counter: Counter, f: F) -> Result<R>
    where
        R: 'static,
        F: FnOnce(&mut State) -> R + Send + 'static,
    {
        let mut flight = InFlight {
            f: Some(Box::new(f)),
            inner: self,
        };
        // On a timeout, or if this future is dropped while it waits, `flight` hands the
        // write to `land_late`.
        self.through_silence(true).await?;
        let Some(f) = flight.f.take() else {
            return Err(error::no_answer(self.options.session_ttl, true));
        };
        let out = self.request(counter, f)?;
        self.reply(true).await?;
        Ok(out)
    }

    /// Queues `f` behind this client's other writes in flight over the silent link, to
    /// be applied once the link is back up (by the first request then, or by the task
    /// spawned here); dropped if the link is reset, closed or crashed first.
    fn land_late(&self, f: LateWrite) {
        lock_late(&self.late).push(f);
        let mut link = self.link.subscribe();
        let (cluster, late) = (self.cluster.clone(), self.late.clone());
        tokio::spawn(async move {
            let up = match link
                .wait_for(|l| !matches!(l, Link::Down { silent: true, .. }))
                .await
            {
                Ok(l) => matches!(*l, Link::Up),
                Err(_) => false,
            };
            let mut pending = lock_late(&late);
            if !up {
                pending.clear();
                return;
            }
            if !pending.is_empty() {
                tracing::debug!(writes = pending.len(), "coord.mem.late_landing");
                cluster.with(|s| {
                    s.sweep();
                    pending.drain(..).for_each(|w| w(s));
                });
            }
        });
    }

    /// Waits while the link is silent, for at most a request's deadline.
    async fn through_silence(&self, write: bool) -> Result<()> {
        let mut rx = self.link.subscribe();
        let silent = |l: &Link| matches!(l, Link::Down { silent: true, .. });
        if !silent(&rx.borrow()) {
            return Ok(());
        }
        let deadline = self.options.session_ttl;
        match tokio::time::timeout(deadline, rx.wait_for(|l| !silent(l))).await {
            Ok(_) => Ok(()),
            Err(_) => Err(error::no_answer(deadline, write)),
        }
    }

    /// The reply of a request the cluster applied: see [`Inner::call`].
    pub(crate) async fn reply(&self, write: bool) -> Result<()> {
        tokio::task::yield_now().await;
        self.through_silence(write).await?;
        let latency = self.faults().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let lost = write && {
            let mut faults = self.faults();
            let lose = faults.lost_replies > 0;
            faults.lost_replies = faults.lost_replies.saturating_sub(1);
            lose
        };
        if lost || self.check_link().is_err() {
            if matches!(*self.link.borrow(), Link::Closed | Link::Crashed) {
                return Err(Error::closed());
            }
            return Err(error::reply_lost(write));
        }
        Ok(())
    }

    /// Notes that the cluster hears from this client now.
    pub(crate) fn heard_now(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    pub(crate) fn faults(&self) -> MutexGuard<'_, ReplyFaults> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current session unless it is lost: `(id, generation)`. A suspended session
    /// (the link down) still counts, as on the real servers, whose sessions outlive a
    /// short outage: requests on it fail (or wait) until the link is back.
    pub(crate) fn live_session(&self) -> Result<(u64, u64)> {
        if self.is_closed() {
            return Err(Error::closed());
        }
        let slot = *self.slot();
        if slot.lost
            || !matches!(
                self.session.current().state,
                SessionState::Connected | SessionState::Suspended
            )
        {
            return Err(error::session_lost());
        }
        Ok((slot.id, slot.generation))
    }

    /// Waits until the link is up (or the client is closed).
    pub(crate) async fn link_up(&self) -> Result<()> {
        let mut rx = self.link.subscribe();
        let link = *rx
            .wait_for(|l| !matches!(l, Link::Down { .. }))
            .await
            .map_err(|_| Error::closed())?;
        match link {
            Link::Up => Ok(()),
            _ => Err(Error::closed()),
        }
    }
}

/// Faults injected on a client's replies.
#[derive(Debug, Default)]
pub(crate) struct ReplyFaults {
    /// How many of the next writes are applied with their reply lost.
    pub(crate) lost_replies: usize,
    /// How long each reply takes.
    pub(crate) latency: Duration,
}
