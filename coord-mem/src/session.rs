//! Client-side session supervision: keep-alive at TTL/3, suspension, local loss
//! detection, new sessions after loss, and re-registration.

use std::sync::Arc;

use coord_core::raw::{Counter, RegistrationEntry};
use coord_core::{Result, SessionState};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Inner;

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

/// Creates a registration's key under session `id`: replaces a key of a session that is
/// gone; `AlreadyExists` while another live session holds it.
pub(crate) fn create_instance(inner: &Inner, id: u64, entry: &RegistrationEntry) -> Result<()> {
    let key = entry.path.clone();
    let data = entry.data.clone();
    let created = inner.request(Counter::Txn, |s| match s.get(&key) {
        Some(existing) if existing.owner == Some(id) => true,
        Some(existing) if existing.owner.is_some_and(|o| s.session_alive(o)) => false,
        _ => {
            s.delete(&key);
            s.put(&key, data, Some(id));
            true
        }
    })?;
    if created {
        Ok(())
    } else {
        Err(crate::error::instance_taken(&entry.path))
    }
}
