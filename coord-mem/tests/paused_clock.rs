//! Sessions run on tokio's clock: with a paused clock a test moves through session
//! timeouts instantly, as the crate docs promise.

use std::time::Duration;

use coord_core::prelude::*;
use coord_core::{HoldState, SessionState};
use coord_mem::{MemClient, MemCluster, MemOptions};
use tokio::time::Instant;

fn options() -> MemOptions {
    MemOptions {
        namespace: "paused".into(),
        session_ttl: Duration::from_secs(30),
    }
}

#[tokio::test(start_paused = true)]
async fn crashed_holder_expires_after_ttl_on_a_paused_clock() {
    let cluster = MemCluster::new();
    let a = MemClient::connect(&cluster, options()).unwrap();
    let b = MemClient::connect(&cluster, options()).unwrap();
    let held = a.lock("job").await.unwrap();
    let token = held.token();
    std::mem::forget(held);
    a.backend_as::<MemClient>().expect("mem").crash();
    let start = Instant::now();
    let g = b.lock("job").await.unwrap();
    let waited = start.elapsed();
    assert!(g.token() > token);
    assert!(
        waited >= Duration::from_secs(30),
        "granted after {waited:?}, before the TTL"
    );
    assert!(
        waited <= Duration::from_secs(41),
        "granted after {waited:?}: expiry is late"
    );
    assert_eq!(cluster.session_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn advance_past_ttl_while_suspended_loses_the_session() {
    let cluster = MemCluster::new();
    let client = MemClient::connect(&cluster, options()).unwrap();
    let g = client.lock("job").await.unwrap();
    client
        .backend_as::<MemClient>()
        .expect("mem")
        .suspend(Duration::from_secs(60));
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    assert_eq!(client.session_state(), SessionState::Suspended);
    assert_eq!(g.state(), HoldState::Suspended);
    tokio::time::advance(Duration::from_secs(30)).await;
    g.lost().await;
    let mut session = client.session();
    session
        .wait_for(|s| s.generation == 2 && s.state == SessionState::Connected)
        .await
        .unwrap();
    assert!(client.lock("job").await.unwrap().token() > g.token());
}
