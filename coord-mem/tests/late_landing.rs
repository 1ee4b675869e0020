//! A write sent into a silent link (a blackhole) lands when the link is back, as one
//! sent into a real partition may: its caller was told `Timeout` with the outcome
//! unknown, never "not applied".

use std::time::Duration;

use coord_core::ErrorKind;
use coord_core::prelude::*;
use coord_mem::{MemClient, MemCluster, MemOptions};

fn options(ttl: Duration) -> MemOptions {
    MemOptions {
        namespace: "late".into(),
        session_ttl: ttl,
    }
}

/// A cluster of its own with two clients on it, `a` (the one faulted) and `b`.
fn two_clients(ttl: Duration) -> (coord_core::Client, coord_core::Client, MemClient) {
    let cluster = MemCluster::new();
    let a = MemClient::connect(&cluster, options(ttl)).expect("a mem client");
    let b = MemClient::connect(&cluster, options(ttl)).expect("a mem client");
    let mem = a.backend_as::<MemClient>().expect("mem").clone();
    (a, b, mem)
}

#[tokio::test(start_paused = true)]
async fn a_blackholed_write_lands_when_the_link_is_back() {
    let ttl = Duration::from_secs(2);
    let (a, b, mem) = two_clients(ttl);
    a.put("k", "before").await.unwrap();
    mem.blackhole(ttl * 2);
    let err = a.put("k", "during").await.expect_err("no answer in a blackhole");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.outcome_unknown(), "a write into silence may land: {err}");
    // Not yet: the link is still silent.
    assert_eq!(b.get("k").await.unwrap().unwrap().value, b"before");
    tokio::time::sleep(ttl * 2).await;
    // The link is back: the write lands.
    let landed = async {
        loop {
            if b.get("k").await.unwrap().unwrap().value == b"during" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(ttl, landed)
        .await
        .expect("the blackholed write never landed");
}

#[tokio::test(start_paused = true)]
async fn a_blackholed_write_is_lost_with_a_crashed_client() {
    let ttl = Duration::from_secs(2);
    let (a, b, mem) = two_clients(ttl);
    mem.blackhole(ttl * 2);
    let err = a.put("k", "during").await.expect_err("no answer in a blackhole");
    assert!(err.outcome_unknown(), "{err}");
    mem.crash();
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        b.get("k").await.unwrap(),
        None,
        "a crashed client's silent write landed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_blackholed_write_whose_caller_gave_up_lands_too() {
    let ttl = Duration::from_secs(2);
    let (a, b, mem) = two_clients(ttl);
    mem.blackhole(ttl * 2);
    // The caller stops waiting long before the request's deadline: the request was
    // sent all the same.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), a.put("k", "sent")).await;
    assert!(gave_up.is_err(), "a blackholed put answered: {gave_up:?}");
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(
        b.get("k").await.unwrap().map(|e| e.value),
        Some(b"sent".to_vec()),
        "a write whose caller gave up in the silence never landed"
    );
}

/// On a runtime with two workers, where a landing task and the next request race: 20
/// rounds, each with its own cluster (about 7 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_writes_land_before_the_next_request_in_the_order_sent() {
    let ttl = Duration::from_millis(300);
    for round in 0..20 {
        let (a, b, mem) = two_clients(ttl);
        mem.blackhole(ttl + Duration::from_millis(30));
        // One write waits out its deadline, one is given up on at once.
        let first = a.put("k", "first").await;
        assert!(first.is_err(), "a blackholed put answered");
        let second = tokio::time::timeout(Duration::from_millis(5), a.put("k", "second")).await;
        assert!(second.is_err(), "a blackholed put answered");
        // Once the link is back, this client's next write is applied after both.
        loop {
            match a.put("k", "third").await {
                Ok(_) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            b.get("k").await.unwrap().unwrap().value,
            b"third",
            "round {round}: a late write overtook a later one"
        );
    }
}
