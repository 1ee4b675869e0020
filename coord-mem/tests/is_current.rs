//! Fences a client did not grant: `is_current` refuses another namespace's; another
//! cluster's (same namespace, same path and token) never marks the granting guard lost,
//! neither through `is_current` nor through a refused fenced commit.

use coord_core::Granted as _;
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

    // The same for a fenced write made through the other cluster's client: refused
    // there (no such entry), and the guard still held on its own cluster is not told.
    use coord_core::{ConfigStore as _, Txn};
    let refused = elsewhere
        .commit(Txn::new().fenced_by(fence.clone()).put("k", b"v".to_vec()))
        .await
        .expect_err("fenced by a grant of another cluster");
    assert_eq!(refused.kind(), ErrorKind::Fenced);
    assert_eq!(
        guard.state(),
        HoldState::Held,
        "another cluster's commit forfeited the guard"
    );
    // Through its own client, a refusal still tells the guard.
    guard.release().await.expect("release");
    let late = a
        .commit(Txn::new().fenced_by(fence).put("k", b"v".to_vec()))
        .await
        .expect_err("a released grant's fence");
    assert_eq!(late.kind(), ErrorKind::Fenced);
}
