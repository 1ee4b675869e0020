//! Cheap per-client counters: requests by kind, watch notifications,
//! session transitions.

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::counter::Counter;
use crate::metrics;
use crate::session::SessionState;

/// A snapshot of a client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Read requests sent.
    pub reads: u64,
    /// Single-key write requests sent.
    pub writes: u64,
    /// Multi-op requests sent.
    pub txns: u64,
    /// Watches armed.
    pub watches_set: u64,
    /// Watch notifications received.
    pub watch_events: u64,
    /// Session requests sent (keep-alives, pings, grants).
    pub session_requests: u64,
    /// Session state transitions.
    pub session_transitions: u64,
    /// Wake-ups of waiting contenders (lock and election waiters): a waiter woke because
    /// the entry ahead of it went. The holder's own bookkeeping is not counted; a release
    /// wakes exactly one waiter.
    pub wakeups: u64,
}

impl Stats {
    /// Requests that did work on data: reads + writes + txns + watches set (session
    /// keep-alives excluded).
    pub fn data_requests(&self) -> u64 {
        self.reads + self.writes + self.txns + self.watches_set
    }

    /// The counters' increase since `earlier`.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            txns: self.txns.saturating_sub(earlier.txns),
            watches_set: self.watches_set.saturating_sub(earlier.watches_set),
            watch_events: self.watch_events.saturating_sub(earlier.watch_events),
            session_requests: self.session_requests.saturating_sub(earlier.session_requests),
            session_transitions: self
                .session_transitions
                .saturating_sub(earlier.session_transitions),
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
        }
    }
}

/// The live counters a backend increments. With the `metrics` feature each count is also
/// recorded through the `metrics` facade (see [`crate::metrics`]), labelled with the
/// backend's name.
#[derive(Debug, Default)]
pub struct StatsRecorder {
    counters: [AtomicU64; 7],
    /// The `backend` label of the recorded metrics; empty for [`Default`].
    backend: &'static str,
}

impl StatsRecorder {
    /// Counters of a `backend` client (its scheme name: the metrics' `backend` label).
    pub fn new(backend: &'static str) -> Self {
        StatsRecorder {
            counters: Default::default(),
            backend,
        }
    }

    /// Adds one to `counter`.
    pub fn incr(&self, counter: Counter) {
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
        metrics::count(self.backend, counter);
        tracing::trace!(?counter, "coord.stats");
    }

    /// Counts a session transition to `to` ([`Counter::SessionTransition`], recorded with
    /// the new state).
    pub fn session_transition(&self, to: SessionState) {
        let counter = Counter::SessionTransition;
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
        metrics::session_transition(self.backend, Some(to));
        tracing::trace!(?counter, %to, "coord.stats");
    }

    /// The current values.
    pub fn snapshot(&self) -> Stats {
        let get = |c: Counter| self.counters[c as usize].load(Ordering::Relaxed);
        Stats {
            reads: get(Counter::Read),
            writes: get(Counter::Write),
            txns: get(Counter::Txn),
            watches_set: get(Counter::WatchSet),
            watch_events: get(Counter::WatchEvent),
            session_requests: get(Counter::SessionRequest),
            session_transitions: get(Counter::SessionTransition),
            wakeups: 0,
        }
    }
}
