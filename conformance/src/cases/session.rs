//! Session cases: states, loss and renewal, suspension, close, counters.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::{
    Client, ConfigStore, Election, ErrorKind, HoldState, Lock, Registry, ServiceInstance, SessionState,
};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, retrying, settle, still_waiting, within};
use coord_core::Granted as _;

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
    // On a cluster a member may be down meanwhile: the client keeps working, retrying.
    within(
        ctx.expiry_wait(),
        "a write on the new session",
        retrying(|| a.put("after", b"ok".to_vec())),
    )
    .await??;
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

/// When a holder and a waiter saw the lock change hands after a fault cut the holder off.
struct Handover {
    /// The holder's guard reported `Lost`.
    lost_at: tokio::time::Instant,
    /// The waiter was granted the lock.
    granted_at: tokio::time::Instant,
}

/// How a case cuts a client off.
enum Cut {
    /// Connections reset and refused.
    Suspend,
    /// Nothing passes, nothing is reset.
    Blackhole,
}

/// `a` holds a lock and `b` waits for it; `cut` silences `a` for three session timeouts.
/// Checks that `a` reports `Lost` no later than `b` is granted the lock, with a higher
/// token, and says when each happened.
async fn holder_lost_before_handover(ctx: &Ctx, cut: Cut) -> anyhow::Result<(Client, Handover)> {
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
    settle().await;
    let outage = ctx.session_timeout() * 3;
    match cut {
        Cut::Suspend => ctx.factory().suspend(&a, outage).await?,
        Cut::Blackhole => ctx.factory().blackhole(&a, outage).await?,
    }
    let (granted_at, gb) = within(ctx.expiry_wait(), "b acquires after a was cut off", waiter).await??;
    let gb = gb?;
    let lost_at = within(QUICK, "a reports Lost", lost_at).await??;
    ensure!(
        lost_at <= granted_at,
        "a reported Lost {:?} after b was granted the lock",
        lost_at - granted_at
    );
    ensure!(gb.token() > ga.token());
    Ok((a, Handover { lost_at, granted_at }))
}

/// Suspended past the timeout, a holder reports `Lost` no later than the lock is
/// granted to someone else.
pub async fn long_suspension_reports_lost_before_takeover(ctx: Ctx) -> CaseResult {
    holder_lost_before_handover(&ctx, Cut::Suspend).await?;
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

/// Dropping every handle of a client, without `close`, ends its session: a lock it held
/// passes on within the session timeout, and its guard reports `Lost`.
pub async fn dropping_last_handle_ends_session(ctx: Ctx) -> CaseResult {
    // Opened directly: the case's context keeps a handle of every client it opens.
    let a = ctx.factory().open(ctx.namespace()).await?;
    let b = ctx.client().await?;
    let g = a.lock("res").await?;
    let hold = g.hold().clone();
    // A guard left alive (even leaked) does not keep the session open.
    std::mem::forget(g);
    let mut waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    still_waiting(&mut waiter, "b got the lock while a held it").await?;
    drop(a);
    let _next = within(
        ctx.session_timeout() + Duration::from_secs(2),
        "the lock passes on after the last handle of its holder's client was dropped",
        waiter,
    )
    .await???;
    within(QUICK, "the leaked guard reports Lost", hold.lost()).await?;
    Ok(())
}

/// `close` ends every stream the client opened — config and registry watches and leader
/// observation — with a last `Closed` error, and none of them delivers a change made
/// after it.
pub async fn close_ends_every_stream(ctx: Ctx) -> CaseResult {
    use coord_core::{ConfigEvent, RegistryEvent};
    use futures::StreamExt;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut config = ConfigStore::watch(&a, "k").await?;
    let mut services = Registry::watch(&a, "api").await?;
    let mut leaders = a.observe("svc").await?;
    crate::util::next_event(&mut config, QUICK, "config snapshot").await?;
    crate::util::next_event(&mut services, QUICK, "registry snapshot").await?;
    crate::util::next_event(&mut leaders, QUICK, "first leader").await?;
    a.close().await?;
    b.put("k", b"after close".to_vec()).await?;
    let _reg = b.register("api", ServiceInstance::new("n1", "h:1")).await?;
    let _lead = b.campaign("svc", b"b".to_vec()).await?;
    let ends = |what: &'static str, items: Vec<String>| -> CaseResult {
        let data: Vec<&String> = items.iter().filter(|i| !i.starts_with("Err")).collect();
        ensure!(data.is_empty(), "{what} delivered {data:?} after close");
        ensure!(
            items.last().is_some_and(|i| i.contains("Closed")),
            "{what} ended without saying the client was closed: {items:?}"
        );
        Ok(())
    };
    let drain = |stream: futures::stream::BoxStream<'static, coord_core::Result<String>>| {
        within(QUICK, "the stream ends after close", stream.collect::<Vec<_>>())
    };
    let show = |r: coord_core::Result<String>| match r {
        Ok(e) => e,
        Err(e) => format!("Err({:?}: {e})", e.kind()),
    };
    let config: Vec<String> = drain(config.map(|r| r.map(|e: ConfigEvent| format!("{e:?}"))).boxed())
        .await?
        .into_iter()
        .map(show)
        .collect();
    ends("the config watch", config)?;
    let services: Vec<String> = drain(
        services
            .map(|r| r.map(|e: RegistryEvent| format!("{e:?}")))
            .boxed(),
    )
    .await?
    .into_iter()
    .map(show)
    .collect();
    ends("the registry watch", services)?;
    let leaders: Vec<String> = drain(leaders.map(|r| r.map(|e| format!("{e:?}"))).boxed())
        .await?
        .into_iter()
        .map(show)
        .collect();
    ends("observe", leaders)?;
    Ok(())
}

/// A holder silenced by a blackhole (no reset: only timeouts can tell) reports `Lost`
/// before the server hands its lock on. Prints the margins: how long before the
/// earliest moment the server could expire the session (the last byte it received from
/// the holder + the session timeout) the holder gave it up, and how long before the
/// next holder was granted the lock.
pub async fn blackholed_holder_lost_before_handover(ctx: Ctx) -> CaseResult {
    let (a, Handover { lost_at, granted_at }) = holder_lost_before_handover(&ctx, Cut::Blackhole).await?;
    let timeout = ctx.session_timeout();
    let heard = ctx
        .factory()
        .last_heard(&a)
        .context("the factory does not know when the server last heard from a")?;
    let expiry = heard + timeout;
    ensure!(
        lost_at <= expiry,
        "a reported Lost {:?} after the server could have expired its session",
        lost_at - expiry
    );
    let margin = expiry - lost_at;
    println!(
        "[{}] blackhole margin: Lost {} ms ({:.0}% of the {} ms timeout) before the earliest server expiry, {} ms before the hand-over",
        a.kind(),
        margin.as_millis(),
        margin.as_secs_f64() * 100.0 / timeout.as_secs_f64(),
        timeout.as_millis(),
        (granted_at - lost_at).as_millis()
    );
    Ok(())
}

/// A blackhole shorter than a third of the session timeout keeps the session and the
/// lock: the guard is never `Lost`, and it is `Held` again once the link is back.
///
/// The guard may still be `Suspended` a session timeout after the blackhole if another
/// outage began meanwhile (a cluster member killed under the client): the case then
/// waits for the guard to leave `Suspended`, which the client bounds by giving the
/// session up, and requires `Held` with the session kept.
pub async fn short_blackhole_keeps_session(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    let generation = a.session().borrow().generation;
    let blip = ctx.session_timeout() / 4;
    ctx.factory().blackhole(&a, blip).await?;
    tokio::time::sleep(blip + ctx.session_timeout()).await;
    let mut hold = g.hold().clone();
    let state = within(
        ctx.session_timeout() * 2,
        "the guard leaves Suspended (the client reconnects or gives the session up)",
        async {
            let mut state = hold.state();
            while state == HoldState::Suspended {
                state = hold.changed().await;
            }
            state
        },
    )
    .await?;
    let session = *a.session().borrow();
    ensure!(
        session.generation == generation && session.state != SessionState::Lost,
        "a blackhole of a quarter of the timeout lost the session (now {} in generation {}, was {generation})",
        session.state,
        session.generation
    );
    ensure!(
        state == HoldState::Held,
        "the guard is {state:?} after a short blackhole, with the session kept"
    );
    a.put("after", b"ok".to_vec()).await?;
    Ok(())
}

/// A slow link (every byte delayed) still works: locks hand over, the session stays.
pub async fn delayed_link_keeps_working(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let generation = a.session().borrow().generation;
    ctx.factory().delay(&a, Duration::from_millis(50)).await?;
    let ga = a.lock("res").await?;
    let mut waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    still_waiting(&mut waiter, "b got the lock while a held it").await?;
    ga.release().await?;
    let gb = within(QUICK, "b acquires from the slow holder", waiter).await???;
    let ga = within(QUICK, "a queues behind b over the slow link", async {
        let a2 = a.clone();
        let w = tokio::spawn(async move { a2.lock("res").await });
        settle().await;
        gb.release().await?;
        anyhow::Ok(w.await??)
    })
    .await??;
    crate::util::held(&ctx, "a's guard over the slow link", || ga.state()).await?;
    ctx.factory().delay(&a, Duration::ZERO).await?;
    ensure!(
        a.session().borrow().generation == generation,
        "a 50 ms delay replaced the session"
    );
    Ok(())
}
