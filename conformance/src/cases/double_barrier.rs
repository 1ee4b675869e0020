//! Double barrier cases: members enter together and leave together; a missing member
//! makes the others time out with its absence named; a crashed member does not hang the
//! others' leave; a dropped enter leaves nothing.

use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::ErrorKind;

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, still_waiting, within};

const QUICK: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(30);

/// Three members: the first two wait in `enter` until the third arrives; then all three
/// leave, and none returns from `leave` before the last has called it.
pub async fn members_enter_and_leave_together(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let ba = a.double_barrier("round", 3)?;
    let bb = b.double_barrier("round", 3)?;
    let mut first = tokio::spawn(async move { ba.enter("a", LONG).await });
    let mut second = tokio::spawn(async move { bb.enter("b", LONG).await });
    settle().await;
    still_waiting(&mut first, "a entered before the barrier was full").await?;
    still_waiting(&mut second, "b entered before the barrier was full").await?;
    let mc = within(
        QUICK,
        "the third member enters",
        c.double_barrier("round", 3)?.enter("c", LONG),
    )
    .await??;
    let ma = within(QUICK, "a enters once the third arrived", first).await???;
    let mb = within(QUICK, "b enters once the third arrived", second).await???;
    let mut leaving_a = tokio::spawn(async move { ma.leave(LONG).await });
    let mut leaving_b = tokio::spawn(async move { mb.leave(LONG).await });
    settle().await;
    still_waiting(&mut leaving_a, "a left while c is still inside").await?;
    still_waiting(&mut leaving_b, "b left while c is still inside").await?;
    within(QUICK, "c leaves", mc.leave(LONG)).await??;
    within(QUICK, "a leaves once all left", leaving_a).await???;
    within(QUICK, "b leaves once all left", leaving_b).await???;
    Ok(())
}

/// A member that never comes: the others' `enter` fails with `Timeout` at its deadline,
/// naming who is present and how many are missing, and leaves nothing behind (the next
/// round starts clean).
pub async fn missing_member_times_out_and_is_named(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ba = a.double_barrier("round", 3)?;
    let other = b.double_barrier("round", 3)?;
    let peer = tokio::spawn(async move { other.enter("b", Duration::from_secs(2)).await });
    match ba.enter("a", Duration::from_secs(1)).await {
        Err(e) if e.kind() == ErrorKind::Timeout => {
            let m = e.message();
            ensure!(
                m.contains("1 missing") && m.contains('b'),
                "the timeout says {m:?}"
            );
        }
        other => bail!("enter with a member missing returned {other:?}"),
    }
    match within(QUICK, "b's enter ends", peer).await?? {
        Err(e) if e.kind() == ErrorKind::Timeout => {}
        other => bail!("b's enter with two members missing returned {other:?}"),
    }
    // Nothing was left: a fresh round of one enters and leaves at once.
    let solo = a.double_barrier("round", 1)?.enter("a", QUICK).await?;
    solo.leave(QUICK).await?;
    ensure!(
        a.double_barrier("round", 0).is_err(),
        "a barrier of no members was accepted"
    );
    Ok(())
}

/// A member that crashes inside the barrier does not hang the others' `leave`: its
/// entry goes with its session, which counts as left.
pub async fn crashed_member_counts_as_left(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let (ba, bb) = (a.double_barrier("round", 3)?, b.double_barrier("round", 3)?);
    let ea = tokio::spawn(async move { ba.enter("a", LONG).await });
    let eb = tokio::spawn(async move { bb.enter("b", LONG).await });
    let mc = c.double_barrier("round", 3)?.enter("c", LONG).await?;
    let (ma, mb) = (
        within(QUICK, "a enters", ea).await???,
        within(QUICK, "b enters", eb).await???,
    );
    std::mem::forget(mc); // a crashed process runs no destructor
    ctx.factory().crash(&c).await?;
    let leaving = tokio::spawn(async move { ma.leave(LONG).await });
    within(
        ctx.expiry_wait(),
        "b leaves once the crashed member is gone",
        mb.leave(LONG),
    )
    .await??;
    within(QUICK, "a leaves too", leaving).await???;
    Ok(())
}

/// A member that stays inside: the others' `leave` fails with `Timeout` naming it.
pub async fn member_still_inside_is_named(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ba = a.double_barrier("round", 2)?;
    let ea = tokio::spawn(async move { ba.enter("a", LONG).await });
    let mb = b.double_barrier("round", 2)?.enter("b", LONG).await?;
    let ma = within(QUICK, "a enters", ea).await???;
    match ma.leave(Duration::from_secs(1)).await {
        Err(e) if e.kind() == ErrorKind::Timeout => {
            ensure!(e.message().contains(": b"), "the timeout says {:?}", e.message());
        }
        other => bail!("leave with a member inside returned {other:?}"),
    }
    within(QUICK, "b leaves once a is gone", mb.leave(LONG)).await??;
    Ok(())
}

/// An `enter` dropped while waiting leaves no member behind: a barrier of two is not
/// full with it.
pub async fn dropped_enter_leaves_nothing(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let _ = tokio::time::timeout(
        Duration::from_millis(500),
        a.double_barrier("round", 2)?.enter("a", LONG),
    )
    .await;
    settle().await;
    match b
        .double_barrier("round", 2)?
        .enter("b", Duration::from_secs(1))
        .await
    {
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(()),
        Err(e) => Err(anyhow::Error::from(e).context("b's enter failed otherwise than by waiting")),
        Ok(_) => bail!("a dropped enter still counted: b entered alone"),
    }
}

/// A member whose session is killed while it waits in `enter` gets `SessionLost`, and
/// does not count towards the barrier.
pub async fn waiter_session_lost_fails_and_does_not_count(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let ba = a.double_barrier("round", 2)?;
    let waiter = tokio::spawn(async move { ba.enter("a", LONG).await });
    settle().await;
    ctx.factory().kill_session(&a).await?;
    match within(ctx.expiry_wait(), "the waiting member ends", waiter).await?? {
        Err(e) if e.kind() == ErrorKind::SessionLost => {}
        other => bail!("a member whose session was lost while entering returned {other:?}"),
    }
    match b
        .double_barrier("round", 2)?
        .enter("b", Duration::from_secs(1))
        .await
    {
        Err(e) if e.kind() == ErrorKind::Timeout => {}
        other => bail!("the lost member still counted: {other:?}"),
    }
    let bc = c.double_barrier("round", 2)?;
    let cc = tokio::spawn(async move { bc.enter("c", LONG).await });
    let mb = within(
        QUICK,
        "b enters with c",
        b.double_barrier("round", 2)?.enter("b", LONG),
    )
    .await??;
    let mc = within(QUICK, "c enters with b", cc).await???;
    let lc = tokio::spawn(async move { mc.leave(LONG).await });
    mb.leave(LONG).await?;
    within(QUICK, "c leaves", lc).await???;
    Ok(())
}
