//! Clusters: a client given several members keeps working while any minority of them is
//! down, and through short cuts of every link.
//!
//! The link cases give one client several links of its own (one fault proxy per member,
//! or several to a standalone server, which looks the same to the client) and take them
//! down one by one. The member cases kill and restart members of a real 3-member
//! cluster; they hold the cluster's fault lock, so no other fault injector takes a
//! second member down meanwhile. The link cases hold it too, so that what they judge is
//! the client's handling of its links, not a leader election on top of a cut.
//!
//! Liveness bound: an operation must succeed within 3 session timeouts plus 10 s after a
//! member is killed, which covers the cluster electing a new leader (etcd: election
//! timeout 500 ms; ZooKeeper: a few ticks of 100 ms plus the new leader syncing), the
//! client's move to a live member, and a new session if the old one could not be kept.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::{Client, ConfigStore, HoldState, Lock, SessionState};

use crate::harness::{CaseResult, Ctx};
use crate::real_server::blocking;
use crate::util::{eventually, retrying, still_waiting, within};
use coord_core::Granted as _;

/// How long an operation may take after a member went down or a link was cut.
fn bound(ctx: &Ctx) -> Duration {
    ctx.session_timeout() * 3 + Duration::from_secs(10)
}

/// One lock cycle and one config write read back, retried while the client moves.
async fn works(ctx: &Ctx, client: &Client, round: usize) -> anyhow::Result<()> {
    let value = format!("round-{round}").into_bytes();
    within(
        bound(ctx),
        "a config write",
        retrying(|| client.put("k", value.clone())),
    )
    .await??;
    let read = within(bound(ctx), "a config read", retrying(|| client.get("k")))
        .await??
        .context("the value written is missing")?;
    ensure!(read.value == value, "read back another value");
    let guard = within(bound(ctx), "a lock", retrying(|| client.lock("l"))).await??;
    within(bound(ctx), "a release", guard.release()).await??;
    Ok(())
}

/// The member to kill in a round: the cluster's leader (`role` "leader") or a follower,
/// once the cluster has a leader.
async fn victim(cluster: &Arc<coord_testkit::Cluster>, role: &'static str) -> anyhow::Result<usize> {
    let c = cluster.clone();
    Ok(blocking(move || {
        let leader = c.wait_leader(Duration::from_secs(30))?;
        Ok(if role == "leader" {
            leader
        } else {
            (leader + 1) % c.len()
        })
    })
    .await?)
}

/// On a cluster, the fault lock, so that no member is killed while a link case runs:
/// those cases check what a client does when its links go down, and a member killed
/// meanwhile (a leader election on top of a cut) may rightly cost the session.
async fn members_left_alone(ctx: &Ctx) -> anyhow::Result<Option<coord_testkit::FaultLock>> {
    match ctx.factory().cluster() {
        Ok(cluster) => Ok(Some(blocking(move || cluster.fault_lock()).await?)),
        Err(_) => Ok(None),
    }
}

/// A connection string whose first member is dead (nothing listens there) connects, and
/// the client works: the dead member is skipped at connect and for every request.
pub async fn dead_member_in_url_is_skipped(ctx: Ctx) -> CaseResult {
    let base = ctx.factory().url_base();
    let (scheme, hosts) = base.split_once("://").context("a connection string")?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let url = format!("{scheme}://{dead},{hosts}/{}", ctx.namespace());
    for round in 0..5 {
        let client = within(bound(&ctx), "connect", ctx.factory().connect_url(&url))
            .await?
            .with_context(|| format!("connect {round} with the first member dead"))?;
        works(&ctx, &client, round).await?;
        client.close().await?;
    }
    Ok(())
}

/// A client with three links, only one of them up at a time, in turn: each time it
/// moves to the live one and keeps working — and keeps its session, since each move is
/// a reset answered at once.
pub async fn client_follows_the_live_member(ctx: Ctx) -> CaseResult {
    let _members = members_left_alone(&ctx).await?;
    let client = ctx.factory().open_links(ctx.namespace(), 3).await?;
    let links = ctx.factory().links(&client)?;
    let generation = client.session().borrow().generation;
    for round in 0..6 {
        let live = round % 3;
        for (i, link) in links.all().iter().enumerate() {
            if i == live {
                link.pass();
            } else {
                link.refuse();
            }
        }
        works(&ctx, &client, round)
            .await
            .with_context(|| format!("with only link {live} up"))?;
    }
    ensure!(
        client.session().borrow().generation == generation,
        "the session was replaced while a live member was always reachable"
    );
    client.close().await?;
    Ok(())
}

/// Every link of a multi-member client cut for a quarter of the session timeout, five
/// times: the session survives each cut (a client must not give up a session it can
/// still resume because it has several members to try).
pub async fn short_cut_of_every_link_keeps_session(ctx: Ctx) -> CaseResult {
    let _members = members_left_alone(&ctx).await?;
    let client = ctx.factory().open_links(ctx.namespace(), 3).await?;
    let links = ctx.factory().links(&client)?;
    let generation = client.session().borrow().generation;
    let cut = ctx.session_timeout() / 4;
    for round in 0..8_u32 {
        // Idle for a while first, so that the last answered request is up to a probe
        // interval old when the cut starts, as on a quiet client.
        tokio::time::sleep(ctx.session_timeout() * (round % 4) / 24_u32).await;
        links.refuse_for(cut);
        tokio::time::sleep(cut).await;
        // The liveness bound: a member killed meanwhile adds the cluster's election.
        eventually(bound(&ctx), "connected again", || async {
            Ok(client.session_state() == SessionState::Connected)
        })
        .await?;
        ensure!(
            client.session().borrow().generation == generation,
            "cut {round} of {cut:?} lost the session"
        );
        works(&ctx, &client, round as usize).await?;
    }
    client.close().await?;
    Ok(())
}

/// The cluster's leader member, then a follower, killed while one client holds a lock
/// and another waits: the clients keep working within the bound, the lock stays
/// exclusive (the waiter gets it only after the holder released it or was told it lost
/// it), tokens keep increasing, and the member comes back.
pub async fn member_killed_clients_keep_working(ctx: Ctx) -> CaseResult {
    let cluster = ctx.factory().cluster()?;
    let lock_guard = {
        let c = cluster.clone();
        blocking(move || c.fault_lock()).await?
    };
    let holder = ctx.client().await?;
    let waiter = ctx.client().await?;
    let mut last = None;
    for role in ["leader", "follower"] {
        let victim = victim(&cluster, role).await?;
        let held = within(bound(&ctx), "the holder's lock", retrying(|| holder.lock("m"))).await??;
        if let Some(previous) = last {
            ensure!(held.token() > previous, "a token went back");
        }
        let mut waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { retrying(|| waiter.lock("m")).await })
        };
        let c = cluster.clone();
        blocking(move || c.kill(victim)).await?;
        works(&ctx, &holder, 0)
            .await
            .with_context(|| format!("with the {role} member {victim} down"))?;
        // Unless the holder was told it lost the lock (its session may expire while a
        // busy machine elects a new leader), the waiter must still wait.
        if held.state() == HoldState::Held {
            still_waiting(&mut waiting, "the waiter got the lock while it was held").await?;
        }
        let token = held.token();
        let _ = held.release().await;
        let next = within(bound(&ctx), "the waiter's lock", waiting)
            .await?
            .context("the waiter's task")?
            .with_context(|| format!("the waiter failed with the {role} member down"))?;
        ensure!(next.token() > token, "the waiter's token is not larger");
        last = Some(next.token());
        next.release().await?;
        let c = cluster.clone();
        blocking(move || c.restart_member(victim)).await?;
        works(&ctx, &waiter, 1)
            .await
            .with_context(|| format!("after the {role} member {victim} came back"))?;
    }
    drop(lock_guard);
    Ok(())
}

/// Clients opened one after another while the cluster's leader member, then a follower,
/// is killed and restarted: every open succeeds within the bound (one that meets the
/// member's death or the cluster electing a leader waits and retries what it sends,
/// which is idempotent), and every client opened works.
pub async fn clients_open_while_members_die(ctx: Ctx) -> CaseResult {
    let cluster = ctx.factory().cluster()?;
    let _faults = {
        let c = cluster.clone();
        blocking(move || c.fault_lock()).await?
    };
    for role in ["leader", "follower"] {
        let victim = victim(&cluster, role).await?;
        let until = tokio::time::Instant::now() + Duration::from_secs(4);
        let opening = async {
            let mut opened = 0usize;
            while tokio::time::Instant::now() < until {
                let client = within(
                    bound(&ctx),
                    "opening a client",
                    ctx.factory().open(ctx.namespace()),
                )
                .await?
                .with_context(|| format!("opening client {opened}, the {role} member being killed"))?;
                let wrote = within(
                    bound(&ctx),
                    "a config write",
                    retrying(|| client.put("k", b"v".to_vec())),
                )
                .await;
                let _ = client.close().await;
                wrote?.with_context(|| format!("client {opened}'s first write"))?;
                opened += 1;
            }
            anyhow::Ok(opened)
        };
        let faults = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let c = cluster.clone();
            blocking(move || c.kill(victim)).await?;
            tokio::time::sleep(Duration::from_millis(2500)).await;
            let c = cluster.clone();
            blocking(move || c.restart_member(victim)).await?;
            anyhow::Ok(())
        };
        let (opened, restarted) = tokio::join!(opening, faults);
        restarted.with_context(|| format!("killing and restarting the {role} member {victim}"))?;
        let opened = opened?;
        ensure!(opened > 1, "only {opened} clients opened in 4 s");
    }
    Ok(())
}
