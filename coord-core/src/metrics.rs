//! coord's metrics, through the [`metrics`](https://docs.rs/metrics/0.24) facade.
//!
//! With the Cargo feature `metrics` (on `coord-core`, or `coord`'s feature of the same
//! name), every client records the metrics below to whatever `metrics` recorder the
//! application installs (for example `metrics-exporter-prometheus`); without a recorder
//! they cost next to nothing, and without the feature nothing is recorded at all.
//! [`Client::stats`](crate::Client::stats) keeps counting either way: it is per client,
//! the metrics are per process (summed over its clients, told apart by label).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `coord_requests_total` | counter | `backend`, `kind` | requests sent to the server; `kind` is `read`, `write`, `txn` (a multi-op request), `watch_set` (a watch armed) or `session` (a ping, lease grant, keep-alive or revoke) |
//! | `coord_watch_events_total` | counter | `backend` | watch notifications received from the server |
//! | `coord_session_transitions_total` | counter | `backend`, `state` | session state changes; `state` is the new one: `connected`, `suspended`, `lost` or `closed` |
//! | `coord_wakeups_total` | counter | `backend`, `primitive` | waiting contenders woken because an entry ahead of them went (a release wakes exactly one waiter) |
//! | `coord_acquire_wait_seconds` | histogram (seconds) | `backend`, `primitive` | for each grant to a waiting acquisition (`lock`, `campaign`, a semaphore's `acquire`, …), the time from the call to the grant, local queueing included; `try_*` calls, which never wait, are not recorded |
//! | `coord_handoffs_total` | counter | `backend`, `primitive` | grants to a waiting acquisition that had to wait for someone ahead (on the server, or this client's own earlier contender for the name), i.e. was not granted at once |
//!
//! `backend` is the client's scheme: `mem`, `zk` or `etcd`. `primitive` is what was
//! acquired:
//!
//! | `primitive` | acquired by |
//! |---|---|
//! | `lock` | [`Lock::lock`](crate::Lock::lock) |
//! | `election` | [`Election::campaign`](crate::Election::campaign), the leader selector |
//! | `read_lock`, `write_lock` | [`RwLock`](crate::RwLock)'s readers and writers |
//! | `semaphore` | a [`Semaphore`](crate::Semaphore) lease (waits for a free permit) |
//! | `semaphore_lock` | a semaphore's internal lock, held while acquiring a lease |
//! | `queue_taker` | a [`DistributedQueue`](crate::DistributedQueue) consumer's turn to take |
//! | `two_phase_coordinator` | a [`TwoPhaseCommit`](crate::TwoPhaseCommit)'s coordinator lock |
//!
//! The name and label constants below are the ones recorded, for filters and histogram
//! buckets, e.g. with `metrics-exporter-prometheus`:
//! `builder.set_buckets_for_metric(Matcher::Full(ACQUIRE_WAIT_SECONDS.into()), &[…])`.
//! Call `describe()` (feature `metrics`) once after installing a recorder to give it each
//! metric's unit and help text.

use std::time::Duration;

use crate::counter::Counter;
use crate::session::SessionState;

/// Counter: requests sent to the server, by `backend` and `kind` (`read`, `write`, `txn`,
/// `watch_set`, `session`).
pub const REQUESTS_TOTAL: &str = "coord_requests_total";
/// Counter: watch notifications received from the server, by `backend`.
pub const WATCH_EVENTS_TOTAL: &str = "coord_watch_events_total";
/// Counter: session state transitions, by `backend` and the new `state` (`connected`,
/// `suspended`, `lost`, `closed`).
pub const SESSION_TRANSITIONS_TOTAL: &str = "coord_session_transitions_total";
/// Counter: waiting contenders woken by the entry ahead of them going, by `backend` and
/// `primitive`.
pub const WAKEUPS_TOTAL: &str = "coord_wakeups_total";
/// Histogram, in seconds: from a waiting acquisition's call to its grant, by `backend`
/// and `primitive`.
pub const ACQUIRE_WAIT_SECONDS: &str = "coord_acquire_wait_seconds";
/// Counter: grants to a waiting acquisition that had to wait for someone ahead, by
/// `backend` and `primitive`.
pub const HANDOFFS_TOTAL: &str = "coord_handoffs_total";
/// Counter: lock-delays held (a waiting contender held off because the entry ahead
/// went without a release), by `backend` and `primitive`.
pub const LOCK_DELAYS_TOTAL: &str = "coord_lock_delays_total";

/// Label: the client's backend scheme (`mem`, `zk`, `etcd`).
pub const LABEL_BACKEND: &str = "backend";
/// Label of [`REQUESTS_TOTAL`]: the request's kind.
pub const LABEL_KIND: &str = "kind";
/// Label of [`SESSION_TRANSITIONS_TOTAL`]: the state moved to.
pub const LABEL_STATE: &str = "state";
/// Label of [`WAKEUPS_TOTAL`], [`ACQUIRE_WAIT_SECONDS`], [`HANDOFFS_TOTAL`] and
/// [`LOCK_DELAYS_TOTAL`]: what was acquired.
pub const LABEL_PRIMITIVE: &str = "primitive";

/// Registers every coord metric's unit and help text with the installed recorder. Call
/// it once after installing the recorder (descriptions given to an earlier recorder are
/// lost); recording works without it.
#[cfg(feature = "metrics")]
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(
        REQUESTS_TOTAL,
        Unit::Count,
        "Requests sent to the coordination server, by kind."
    );
    describe_counter!(
        WATCH_EVENTS_TOTAL,
        Unit::Count,
        "Watch notifications received from the coordination server."
    );
    describe_counter!(
        SESSION_TRANSITIONS_TOTAL,
        Unit::Count,
        "Session state transitions, by the state moved to."
    );
    describe_counter!(
        WAKEUPS_TOTAL,
        Unit::Count,
        "Waiting contenders woken because the entry ahead of them went."
    );
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time from a waiting acquisition's call to its grant."
    );
    describe_counter!(
        HANDOFFS_TOTAL,
        Unit::Count,
        "Grants that had to wait for someone ahead."
    );
    describe_counter!(
        LOCK_DELAYS_TOTAL,
        Unit::Count,
        "Lock-delays held: the entry ahead went without a release."
    );
}

/// The `kind` label of a request counter; `None` for the counters that are not requests.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn request_kind(counter: Counter) -> Option<&'static str> {
    match counter {
        Counter::Read => Some("read"),
        Counter::Write => Some("write"),
        Counter::Txn => Some("txn"),
        Counter::WatchSet => Some("watch_set"),
        Counter::SessionRequest => Some("session"),
        Counter::WatchEvent | Counter::SessionTransition => None,
    }
}

/// The `state` label of a session state.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn state(state: Option<SessionState>) -> &'static str {
    match state {
        Some(SessionState::Connected) => "connected",
        Some(SessionState::Suspended) => "suspended",
        Some(SessionState::Lost) => "lost",
        Some(SessionState::Closed) => "closed",
        None => "unknown",
    }
}

/// Records one count of a [`StatsRecorder`](crate::raw::StatsRecorder) counter; a session
/// transition counted without its state is labelled `unknown`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn count(backend: &'static str, counter: Counter) {
    #[cfg(feature = "metrics")]
    match (counter, request_kind(counter)) {
        (_, Some(kind)) => {
            ::metrics::counter!(REQUESTS_TOTAL, LABEL_BACKEND => backend, LABEL_KIND => kind).increment(1);
        }
        (Counter::WatchEvent, None) => {
            ::metrics::counter!(WATCH_EVENTS_TOTAL, LABEL_BACKEND => backend).increment(1);
        }
        (_, None) => session_transition(backend, None),
    }
}

/// Records a session transition to `to`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn session_transition(backend: &'static str, to: Option<SessionState>) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(SESSION_TRANSITIONS_TOTAL, LABEL_BACKEND => backend, LABEL_STATE => state(to))
        .increment(1);
}

/// Records a waiting contender's wake-up.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn wakeup(backend: &'static str, primitive: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(WAKEUPS_TOTAL, LABEL_BACKEND => backend, LABEL_PRIMITIVE => primitive).increment(1);
}

/// Records a lock-delay held.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lock_delay(backend: &'static str, primitive: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(LOCK_DELAYS_TOTAL, LABEL_BACKEND => backend, LABEL_PRIMITIVE => primitive)
        .increment(1);
}

/// Records a grant to a waiting acquisition: `waited` since its call, and whether it had
/// to wait for someone ahead (a hand-off).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn granted(backend: &'static str, primitive: &'static str, waited: Duration, handed_off: bool) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::histogram!(ACQUIRE_WAIT_SECONDS, LABEL_BACKEND => backend, LABEL_PRIMITIVE => primitive)
            .record(waited.as_secs_f64());
        if handed_off {
            ::metrics::counter!(HANDOFFS_TOTAL, LABEL_BACKEND => backend, LABEL_PRIMITIVE => primitive)
                .increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_documented_names() {
        assert_eq!(request_kind(Counter::WatchSet), Some("watch_set"));
        assert_eq!(request_kind(Counter::SessionRequest), Some("session"));
        assert_eq!(request_kind(Counter::WatchEvent), None);
        assert_eq!(
            crate::primitives::semaphore::lease_queue("s", 3).label,
            "semaphore"
        );
        for s in [
            SessionState::Connected,
            SessionState::Suspended,
            SessionState::Lost,
            SessionState::Closed,
        ] {
            assert_eq!(
                state(Some(s)),
                s.to_string(),
                "the label is the state's display name"
            );
        }
    }
}
