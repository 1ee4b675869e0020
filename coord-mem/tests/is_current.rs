//! `Client::is_current` with fences it did not grant: another namespace's is refused;
//! another cluster's (same namespace, same path and token) never marks the granting
//! guard lost.

use coord_core::{ErrorKind, HoldState, Lock as _};

#[tokio::test]
async fn foreign_fences_never_forfeit_a_held_guard() {
    let pid = std::process::id();
    let a = coord_mem::connect(&format!("mem://is-current-a-{pid}")).expect("connect");
    let other_ns = coord_mem::connect(&format!("mem://is-current-b-{pid}")).expect("connect");
    let guard = a.lock("jobs").await.expect("lock");
    let fence = guard.fence();

    let e = other_ns.is_current(&fence).await.expect_err("another namespace");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(guard.state(), HoldState::Held);

    // Another cluster, same namespace: the path is not there, the answer is false — and
    // the guard, still held on its own cluster, is not told it is lost.
    let cluster = coord_mem::MemCluster::new();
    let options = coord_mem::MemOptions {
        namespace: format!("is-current-a-{pid}"),
        ..Default::default()
    };
    let elsewhere = coord_mem::MemClient::connect(&cluster, options).expect("connect");
    assert!(!elsewhere.is_current(&fence).await.expect("answer"));
    assert_eq!(
        guard.state(),
        HoldState::Held,
        "another cluster's client forfeited the guard"
    );
    assert!(a.is_current(&fence).await.expect("answer"));
    guard.release().await.expect("release");
}
