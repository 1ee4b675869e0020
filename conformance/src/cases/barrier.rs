//! Barrier cases: waiters hold while the barrier is raised and all go on when it is
//! removed, also when the removal happens while a waiter is cut off.

use std::time::Duration;

use anyhow::ensure;

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, still_waiting, within};

const QUICK: Duration = Duration::from_secs(10);

/// Three clients wait on a raised barrier; removing it lets them all go on. A barrier
/// that is not raised does not hold anyone; raising twice and removing twice are fine.
pub async fn waiters_go_on_when_removed(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(4).await?;
    let gate = clients[0].barrier("gate")?;
    within(QUICK, "wait on a barrier never raised", gate.wait()).await??;
    gate.raise().await?;
    gate.raise().await?;
    ensure!(gate.is_raised().await?);
    let mut waiters = Vec::new();
    for c in &clients[1..] {
        let b = c.barrier("gate")?;
        waiters.push(tokio::spawn(async move { b.wait().await }));
    }
    settle().await;
    for w in &mut waiters {
        still_waiting(w, "a waiter went on through a raised barrier").await?;
    }
    gate.remove().await?;
    for w in waiters {
        within(QUICK, "a waiter goes on once the barrier is removed", w).await???;
    }
    gate.remove().await?;
    ensure!(!gate.is_raised().await?);
    Ok(())
}

/// A barrier removed while a waiter is cut off from the server still lets it go on once
/// it is back.
pub async fn removal_during_outage_is_seen(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let gate = a.barrier("gate")?;
    gate.raise().await?;
    let bb = b.barrier("gate")?;
    let mut waiter = tokio::spawn(async move { bb.wait().await });
    settle().await;
    still_waiting(&mut waiter, "the waiter went on through a raised barrier").await?;
    ctx.factory().suspend(&b, ctx.session_timeout() / 4).await?;
    gate.remove().await?;
    within(ctx.expiry_wait(), "the cut-off waiter goes on once back", waiter).await???;
    Ok(())
}
