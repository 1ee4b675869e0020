//! Session cases: states, loss and renewal, suspension, close, counters.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::{
    ConfigStore, Election, ErrorKind, HoldState, Lock, Registry, ServiceInstance, SessionState,
};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, within};

const QUICK: Duration = Duration::from_secs(10);

/// A new client is connected, with a session id and generation 1.
pub async fn starts_connected(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    ensure!(
        a.session_state() == SessionState::Connected,
        "state {}",
        a.session_state()
    );
    ensure!(a.session().borrow().generation >= 1);
    ensure!(a.session_id() != 0, "session id is 0");
    ensure!(!a.kind().is_empty() && a.namespace() == ctx.namespace());
    Ok(())
}

/// A killed session is reported lost and replaced by a new one.
pub async fn kill_reported_then_new_session(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let (id, generation) = (a.session_id(), a.session().borrow().generation);
    let mut rx = a.session();
    ctx.factory().kill_session(&a).await?;
    within(
        ctx.expiry_wait(),
        "new connected session",
        rx.wait_for(|s| s.generation > generation && s.state == SessionState::Connected),
    )
    .await??;
    ensure!(a.session_id() != id, "session id unchanged after loss");
    ensure!(
        a.stats().session_transitions >= 2,
        "transitions not counted: {:?}",
        a.stats()
    );
    a.put("after", b"ok".to_vec()).await?;
    Ok(())
}

/// A short suspension keeps the session: guards go `Suspended` then `Held` again.
pub async fn short_suspension_keeps_session(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    let generation = a.session().borrow().generation;
    let mut hold = g.hold().clone();
    ctx.factory().suspend(&a, ctx.session_timeout() / 4).await?;
    let s = within(QUICK, "guard suspended", hold.changed()).await?;
    ensure!(s == HoldState::Suspended, "guard went {s:?}, expected Suspended");
    let s = within(QUICK, "guard held again", hold.changed()).await?;
    ensure!(s == HoldState::Held, "guard went {s:?}, expected Held");
    ensure!(
        a.session().borrow().generation == generation,
        "a short suspension replaced the session"
    );
    Ok(())
}

/// Suspended past the timeout, a holder reports `Lost` no later than the lock is
/// granted to someone else.
pub async fn long_suspension_reports_lost_before_takeover(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    let lost_at = {
        let h = ga.hold().clone();
        tokio::spawn(async move {
            h.lost().await;
            tokio::time::Instant::now()
        })
    };
    let waiter = tokio::spawn(async move {
        let g = b.lock("res").await;
        (tokio::time::Instant::now(), g)
    });
    ctx.factory().suspend(&a, ctx.session_timeout() * 3).await?;
    let (granted_at, gb) =
        within(ctx.expiry_wait(), "b acquires after a's session expired", waiter).await??;
    let gb = gb?;
    let lost_at = within(QUICK, "a reports Lost", lost_at).await??;
    ensure!(
        lost_at <= granted_at,
        "a reported Lost {:?} after b was granted the lock",
        lost_at - granted_at
    );
    ensure!(gb.token() > ga.token());
    Ok(())
}

/// `close` releases everything the session held and later calls fail with `Closed`.
pub async fn close_releases_everything(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let g = a.lock("res").await?;
    let l = a.campaign("svc", b"a".to_vec()).await?;
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    a.close().await?;
    ensure!(
        a.session_state() == SessionState::Closed,
        "state {}",
        a.session_state()
    );
    let _guard = within(QUICK, "lock free after close", b.lock("res")).await??;
    eventually(QUICK, "no leader after close", || async {
        Ok(b.leader("svc").await?.is_none())
    })
    .await?;
    eventually(QUICK, "instance gone after close", || async {
        Ok(b.instances("api").await?.is_empty())
    })
    .await?;
    let err = a
        .put("k", b"v".to_vec())
        .await
        .err()
        .context("put after close succeeded")?;
    ensure!(err.kind() == ErrorKind::Closed, "got {err}");
    drop((g, l, r));
    Ok(())
}

/// Counters move with requests.
pub async fn stats_count_requests(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let before = a.stats();
    a.put("k", b"v".to_vec()).await?;
    a.get("k").await?;
    let delta = a.stats().since(&before);
    ensure!(delta.data_requests() >= 2, "two requests counted as {delta:?}");
    ensure!(delta.reads >= 1, "a get was not counted as a read: {delta:?}");
    Ok(())
}
