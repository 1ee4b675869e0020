//! Fencing cases: guarded writes by current and stale holders.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::{ConfigStore, Election, ErrorKind, Lock, Txn};

use crate::harness::{CaseResult, Ctx};
use crate::util::{expect_fenced_write, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// The holder's guarded multi-key write succeeds atomically.
pub async fn holder_guarded_write_succeeds(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    a.commit(
        Txn::new()
            .fenced_by(g.fence())
            .put("data/x", b"1".to_vec())
            .put("data/y", b"2".to_vec()),
    )
    .await?;
    ensure!(a.get("data/x").await?.context("x missing")?.value == b"1");
    ensure!(a.get("data/y").await?.context("y missing")?.value == b"2");
    Ok(())
}

/// A holder whose session was killed cannot write with its old guard: `Fenced`, and
/// nothing changes — even after the lock passed on.
pub async fn stale_lock_holder_is_fenced(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    a.commit(Txn::new().fenced_by(ga.fence()).put("data", b"a".to_vec()))
        .await?;
    let fence_a = ga.fence();
    ctx.factory().kill_session(&a).await?;
    let gb = within(ctx.expiry_wait(), "b acquires", b.lock("res")).await??;
    b.commit(Txn::new().fenced_by(gb.fence()).put("data", b"b".to_vec()))
        .await?;
    // The stale holder tries to write, as a paused process would on waking up.
    within(
        ctx.expiry_wait(),
        "stale write answered",
        expect_fenced_write(&a, fence_a, "data", b"b"),
    )
    .await??;
    Ok(())
}

/// After release, the old guard's fence no longer admits writes.
pub async fn released_guard_is_fenced(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    let fence = g.fence();
    g.release().await?;
    let err = a
        .commit(Txn::new().fenced_by(fence).put("data", b"late".to_vec()))
        .await
        .err()
        .context("write with a released guard's fence succeeded")?;
    ensure!(err.kind() == ErrorKind::Fenced, "got {err}");
    ensure!(a.get("data").await?.is_none(), "a fenced commit wrote data");
    Ok(())
}

/// A resigned leader's guarded write fails with `Fenced`; the new leader's succeeds.
pub async fn stale_leader_is_fenced(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let la = a.campaign("svc", b"a".to_vec()).await?;
    let fence_a = la.fence();
    let bc = b.clone();
    let waiting = tokio::spawn(async move { bc.campaign("svc", b"b".to_vec()).await });
    la.resign().await?;
    let lb = within(QUICK, "b leads", waiting).await???;
    let err = a
        .commit(Txn::new().fenced_by(fence_a).put("state", b"a".to_vec()))
        .await
        .err()
        .context("resigned leader's guarded write succeeded")?;
    ensure!(err.kind() == ErrorKind::Fenced, "got {err}");
    b.commit(Txn::new().fenced_by(lb.fence()).put("state", b"b".to_vec()))
        .await?;
    ensure!(b.get("state").await?.context("state missing")?.value == b"b");
    Ok(())
}

/// A failed fence takes precedence over a failed version check, and nothing changes.
pub async fn fence_failure_takes_precedence(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let v1 = a.put("k", b"1".to_vec()).await?;
    a.put("k", b"2".to_vec()).await?;
    let g = a.lock("res").await?;
    let fence = g.fence();
    g.release().await?;
    let err = a
        .commit(
            Txn::new()
                .fenced_by(fence)
                .check_version("k", v1)
                .put("k", b"3".to_vec()),
        )
        .await
        .err()
        .context("commit with stale fence and stale version succeeded")?;
    ensure!(err.kind() == ErrorKind::Fenced, "got {err}, expected Fenced");
    ensure!(a.get("k").await?.context("k missing")?.value == b"2");
    Ok(())
}

/// `is_current` answers whether a fence's grant is the live holder: true while held (from
/// any client of the cluster), false once released, once the lock has passed on after
/// the holder's session was killed, and for a semaphore lease and a leadership alike.
pub async fn is_current_follows_the_grant(ctx: Ctx) -> CaseResult {
    use coord_core::HoldState;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let g = a.lock("res").await?;
    let fence = g.fence();
    ensure!(
        a.is_current(&fence).await?,
        "the holder's own fence is not current"
    );
    ensure!(
        b.is_current(&fence).await?,
        "another client does not see the holder's fence as current"
    );
    g.release().await?;
    ensure!(!a.is_current(&fence).await?, "a released grant is current");
    ensure!(
        !b.is_current(&fence).await?,
        "a released grant is current to another client"
    );

    let lease = a.semaphore("pool", 2)?.acquire().await?;
    let leadership = a.campaign("svc", b"a".to_vec()).await?;
    let (lease_fence, lead_fence) = (lease.fence(), leadership.fence());
    ensure!(b.is_current(&lease_fence).await? && b.is_current(&lead_fence).await?);
    ctx.factory().kill_session(&a).await?;
    // Once the server has ended a's session, its grants are not current, and the
    // guards whose fences were refused say so.
    within(
        ctx.expiry_wait(),
        "the killed session's grants stop being current",
        async {
            while b.is_current(&lease_fence).await? || b.is_current(&lead_fence).await? {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, anyhow::Error>(())
        },
    )
    .await??;
    // Another client's `false` leaves the guards to their own session, which ends too.
    within(ctx.expiry_wait(), "the lease reports its loss", lease.lost()).await?;
    within(
        ctx.expiry_wait(),
        "the leadership reports its loss",
        leadership.lost(),
    )
    .await?;
    ensure!(lease.state() == HoldState::Lost && leadership.state() == HoldState::Lost);
    Ok(())
}

/// An operator deletes a holder's entry; nobody waits on the guard (no entry watch): the
/// first `is_current` says false and the guard turns `Lost` from then on.
pub async fn is_current_false_marks_the_guard_lost(ctx: Ctx) -> CaseResult {
    use coord_core::HoldState;
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    ctx.factory().operator_delete(g.fence().resource()).await?;
    ensure!(
        !a.is_current(&g.fence()).await?,
        "a deleted entry's fence is current"
    );
    ensure!(
        g.state() == HoldState::Lost,
        "the guard says {:?} after is_current said false",
        g.state()
    );
    // A fence from another namespace (the same path shape, another grant) is not current.
    Ok(())
}
