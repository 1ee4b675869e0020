//! The `metrics` feature records coord's counters and latencies: a lock cycle on the
//! in-memory backend, seen through a process-wide debugging recorder (this binary holds
//! this one test, so nothing else records into it).

use std::time::Duration;

use coord_core::metrics::{
    ACQUIRE_WAIT_SECONDS, HANDOFFS_TOTAL, REQUESTS_TOTAL, SESSION_TRANSITIONS_TOTAL, WAKEUPS_TOTAL,
    WATCH_EVENTS_TOTAL,
};
use coord_core::prelude::*;
use coord_core::{SessionState, Stats};
use coord_mem::{MemClient, MemCluster, MemOptions};
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};

/// How long a holder keeps a lock its waiter queues behind.
const HOLD: Duration = Duration::from_millis(150);

type Recorded = Vec<(
    CompositeKey,
    Option<Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The metric `name` of `kind` with exactly `labels`.
fn find<'a>(
    recorded: &'a Recorded,
    kind: MetricKind,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a (
    CompositeKey,
    Option<Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)> {
    recorded.iter().find(|(key, ..)| {
        let k = key.key();
        key.kind() == kind
            && k.name() == name
            && k.labels().count() == labels.len()
            && labels
                .iter()
                .all(|(l, v)| k.labels().any(|x| x.key() == *l && x.value() == *v))
    })
}

/// A counter's value; 0 if never recorded.
fn counter(recorded: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
    match find(recorded, MetricKind::Counter, name, labels) {
        Some((_, _, _, DebugValue::Counter(n))) => *n,
        None => 0,
        Some(other) => panic!("{name} {labels:?} is not a counter: {other:?}"),
    }
}

/// Polls `done` every 10 ms for up to 5 s.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn a_lock_cycle_records_requests_waits_handoffs_and_transitions() -> coord_core::Result<()> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");
    coord_core::metrics::describe();

    let cluster = MemCluster::new();
    let a = MemClient::connect(&cluster, MemOptions::default())?;
    let b = MemClient::connect(&cluster, MemOptions::default())?;

    // On the server: b waits for a's entry, and is handed the lock on its release.
    let held = a.lock("remote").await?;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("remote").await }
    });
    wait_until("b queues behind a", || {
        cluster
            .keys_with_prefix("")
            .iter()
            .filter(|k| k.contains("locks/remote/"))
            .count()
            == 2
    })
    .await;
    tokio::time::sleep(HOLD).await;
    held.release().await?;
    let handed = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("b is granted once a releases")
        .expect("b's task")?;
    handed.release().await?;

    // Within one client: a's second contender for a name waits locally for its first.
    let first = a.lock("local").await?;
    let second = tokio::spawn({
        let a = a.clone();
        async move { a.lock("local").await }
    });
    tokio::time::sleep(HOLD).await;
    first.release().await?;
    tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second contender is granted once the first releases")
        .expect("the second contender's task")?
        .release()
        .await?;

    // A session lost (expired by the server) and replaced by a new one.
    let generation = a.session().borrow().generation;
    let mem = a.backend_as::<MemClient>().expect("a mem client");
    assert!(mem.expire_session(), "a's session was live");
    let mut session = a.session();
    tokio::time::timeout(
        Duration::from_secs(5),
        session.wait_for(|s| s.generation > generation && s.state == SessionState::Connected),
    )
    .await
    .expect("a new session within 5 s")
    .expect("the session channel");

    a.close().await?;
    b.close().await?;
    // One thread (`#[tokio::test]`): nothing records between these two reads.
    let stats = [a.stats(), b.stats()];
    let total = |f: fn(&Stats) -> u64| stats.iter().map(f).sum::<u64>();
    let recorded: Recorded = snapshotter.snapshot().into_vec();
    let mem_label = ("backend", "mem");

    // Requests by kind: the metrics count what `Client::stats` counts.
    let requests = |kind: &str| counter(&recorded, REQUESTS_TOTAL, &[mem_label, ("kind", kind)]);
    assert!(
        requests("write") + requests("txn") > 0,
        "joining a lock queue writes: {recorded:#?}"
    );
    assert_eq!(requests("read"), total(|s| s.reads));
    assert_eq!(requests("write"), total(|s| s.writes));
    assert_eq!(requests("txn"), total(|s| s.txns));
    assert_eq!(requests("watch_set"), total(|s| s.watches_set));
    assert_eq!(requests("session"), total(|s| s.session_requests));
    assert_eq!(
        counter(&recorded, WATCH_EVENTS_TOTAL, &[mem_label]),
        total(|s| s.watch_events)
    );

    // Wait time: four grants to `lock`, two of them after waiting out a hold.
    let lock_labels = [mem_label, ("primitive", "lock")];
    let Some((_, unit, _, DebugValue::Histogram(waits))) = find(
        &recorded,
        MetricKind::Histogram,
        ACQUIRE_WAIT_SECONDS,
        &lock_labels,
    ) else {
        panic!("no lock wait-time histogram: {recorded:#?}");
    };
    assert_eq!(*unit, Some(Unit::Seconds), "described in seconds");
    assert_eq!(waits.len(), 4, "one sample per grant: {waits:?}");
    // (At least: under load an uncontended grant may be slow too.)
    let waited_out = waits.iter().filter(|w| w.0 >= HOLD.as_secs_f64() / 2.0).count();
    assert!(waited_out >= 2, "the two waiters waited out a hold: {waits:?}");

    // Hand-offs: b's grant (on the server) and a's second contender's (locally).
    assert_eq!(counter(&recorded, HANDOFFS_TOTAL, &lock_labels), 2);
    let wakeups = counter(&recorded, WAKEUPS_TOTAL, &lock_labels);
    assert!(wakeups >= 1, "b was woken by a's release");
    assert_eq!(wakeups, total(|s| s.wakeups));

    // Session transitions, by the state moved to.
    let transitions = |state: &str| {
        counter(
            &recorded,
            SESSION_TRANSITIONS_TOTAL,
            &[mem_label, ("state", state)],
        )
    };
    assert!(transitions("lost") >= 1, "a's session expired: {recorded:#?}");
    assert!(transitions("connected") >= 1, "a's new session connected");
    assert_eq!(transitions("closed"), 2, "both clients closed");
    assert_eq!(
        ["connected", "suspended", "lost", "closed", "unknown"]
            .into_iter()
            .map(transitions)
            .sum::<u64>(),
        total(|s| s.session_transitions)
    );
    Ok(())
}
