//! Server-side faults: the server process paused (SIGSTOP) past the session timeout, and
//! killed (SIGKILL) and started again on its data.
//!
//! Only a factory whose server it may stop offers these faults (servers started by
//! coord's scripts with `coord-testkit`), so they are not in [`super::all`]: real
//! backends add [`all`] to their extras. Each runs alone, since every client of the
//! server is affected.

use anyhow::{Context as _, ensure};
use coord_core::{
    Client, ConfigStore, Fence, HoldState, Lock, LockGuard, Registry, ServiceInstance, SessionState, Txn,
};

use crate::factory::Faults;
use crate::harness::{Case, CaseResult, Ctx, Needs};
use crate::util::{eventually, expect_fenced_write, retrying, within};
use coord_core::Granted as _;

/// The server-fault cases, for backends whose factory can inject them.
pub fn all() -> Vec<Case> {
    const PAUSE: Needs = Needs {
        faults: Faults {
            server_pause: true,
            ..Needs::NONE.faults
        },
        exclusive: true,
        ..Needs::NONE
    };
    const RESTART: Needs = Needs {
        faults: Faults {
            server_restart: true,
            ..Needs::NONE.faults
        },
        exclusive: true,
        ..Needs::NONE
    };
    vec![
        Case {
            name: "server::paused_server_holder_lost_before_handover",
            needs: PAUSE,
            run: |ctx| Box::pin(paused_server_holder_lost_before_handover(ctx)),
        },
        Case {
            name: "server::restarted_server_keeps_data_and_tokens_rising",
            needs: RESTART,
            run: |ctx| Box::pin(restarted_server_keeps_data_and_tokens_rising(ctx)),
        },
    ]
}

async fn lock_retrying(client: &Client, name: &str) -> coord_core::Result<LockGuard> {
    retrying(|| client.lock(name)).await
}

/// After `fault`, `b` acquires `res` with a token above `stale`'s and writes `data`
/// under it; then `a`'s write with the `stale` fence is `Fenced` and changes nothing.
async fn take_over(
    ctx: &Ctx,
    b: &Client,
    a: &Client,
    stale: Fence,
    fault: &str,
) -> anyhow::Result<LockGuard> {
    let gb = within(
        ctx.expiry_wait() * 2,
        &format!("b acquires after {fault}"),
        lock_retrying(b, "res"),
    )
    .await??;
    ensure!(
        gb.token() > stale.token(),
        "token {:?} after {fault} is not above {:?}",
        gb.token(),
        stale.token()
    );
    retrying(|| b.commit(Txn::new().fenced_by(gb.fence()).put("data", b"b".to_vec()))).await?;
    expect_fenced_write(a, stale, "data", b"b").await?;
    Ok(gb)
}

/// The server stops (SIGSTOP) for three session timeouts while `a` holds a lock: `a`'s
/// guard reports `Lost` while the server is still stopped — so before the server could
/// hand the lock to anyone. After the server continues, `b` gets the lock with a higher
/// token, `a`'s guarded write is `Fenced`, and `a` gets a new session.
pub async fn paused_server_holder_lost_before_handover(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    let fence_a = ga.fence();
    a.commit(Txn::new().fenced_by(ga.fence()).put("data", b"a".to_vec()))
        .await?;
    let pause = ctx.session_timeout() * 3;
    // The server stops after this instant and continues no earlier than `pause` later.
    let before = ctx.factory().pause_server(pause).await?;
    let left = pause.saturating_sub(before.elapsed());
    within(
        left,
        "a's guard reports Lost while the server is stopped",
        ga.lost(),
    )
    .await?;
    ensure!(ga.state() == HoldState::Lost);
    // Let the server continue; b may have lost its session too and retries.
    tokio::time::sleep(pause.saturating_sub(before.elapsed())).await;
    let gb = take_over(&ctx, &b, &a, fence_a, "the pause").await?;
    eventually(ctx.expiry_wait(), "a has a session again", || async {
        Ok(a.session_state() == SessionState::Connected)
    })
    .await?;
    let tb = gb.token();
    gb.release().await?;
    let ga2 = within(ctx.expiry_wait(), "a locks again", lock_retrying(&a, "res")).await??;
    ensure!(ga2.token() > tb, "a's new token is not above b's");
    Ok(())
}

/// The server is killed (SIGKILL) and started again on its data while `a` holds a lock
/// and a registration: committed data survives; both clients get back in (on their old
/// session or a new one); the registration is there again; `a`'s guard either still
/// holds or reports `Lost`, never alongside another holder; and tokens keep rising
/// across the restart.
pub async fn restarted_server_keeps_data_and_tokens_rising(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("cfg", b"v1".to_vec()).await?;
    let _reg = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    let ga = a.lock("res").await?;
    let fence_a = ga.fence();
    a.commit(Txn::new().fenced_by(ga.fence()).put("data", b"a".to_vec()))
        .await?;
    ctx.factory().restart_server().await?;
    eventually(ctx.expiry_wait() * 2, "both clients are back", || async {
        Ok(a.session_state() == SessionState::Connected && b.session_state() == SessionState::Connected)
    })
    .await?;
    let cfg = within(ctx.expiry_wait(), "read cfg", retrying(|| b.get("cfg")))
        .await??
        .context("cfg lost in the restart")?;
    ensure!(cfg.value == b"v1", "cfg changed in the restart");
    eventually(ctx.expiry_wait(), "a's instance is registered", || async {
        Ok(b.instances("api").await?.iter().any(|i| i.id == "n1"))
    })
    .await?;
    // While a's guard is not Lost, b must not get the lock.
    if ga.state() != HoldState::Lost {
        let quick = b.try_lock("res").await;
        if let Ok(Some(_)) = quick {
            ensure!(
                ga.state() == HoldState::Lost,
                "b got the lock while a's guard still holds"
            );
        }
    }
    ga.release().await?;
    let gb = take_over(&ctx, &b, &a, fence_a, "the restart").await?;
    gb.release().await?;
    Ok(())
}
