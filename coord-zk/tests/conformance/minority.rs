//! A member cut off from the rest of the ensemble while its clients still reach it.
//!
//! Such a follower keeps answering its clients' pings and local reads until it gives
//! up on the leader (`syncLimit · tickTime`: 10 s with ZooKeeper's defaults), while the
//! leader expires those clients' sessions one session timeout after it last heard of
//! them and grants their locks to others. A client must not take its member's answers
//! for proof that its session lives: only answers that passed through the leader (a
//! `sync`, a write) keep a guard `Held`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_conformance::real_server::blocking;
use coord_conformance::util::{retrying, within};
use coord_conformance::{CaseResult, Cluster, Ctx, FaultProxy};
use coord_core::{HoldState, Lock};

/// How long the follower is cut off: past the leader's expiry of its clients' sessions
/// (one session timeout) and the other client's grant, short of the follower's own
/// give-up (`syncLimit` 50 ticks of 100 ms = 5 s, the ratio of ZooKeeper's defaults:
/// 10 s beside sessions of 4 s and more).
const CUT: Duration = Duration::from_secs(4);

/// Puts the follower's configuration back and restarts it, also when the case fails.
struct Restore {
    cluster: Arc<Cluster>,
    member: usize,
    done: bool,
}

impl Restore {
    async fn now(mut self) -> anyhow::Result<()> {
        self.done = true;
        let (c, i) = (self.cluster.clone(), self.member);
        blocking(move || {
            c.restore_config(i)?;
            c.restart(i)
        })
        .await?;
        Ok(())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if !self.done {
            let (c, i) = (self.cluster.clone(), self.member);
            // On the blocking pool: the member comes back even if the case panicked.
            std::thread::spawn(move || {
                let _ = c.restore_config(i);
                let _ = c.restart(i);
            });
        }
    }
}

/// A client on a follower cut off from the leader (the client's own link is fine) holds
/// a lock; another client on the majority gets the lock once the leader expired the
/// first one's session. By then the first guard must have stopped saying `Held`.
pub async fn cut_off_follower_does_not_keep_held(ctx: Ctx) -> CaseResult {
    let cluster = ctx.factory().cluster()?;
    let c = cluster.clone();
    let _faults = blocking(move || c.fault_lock()).await?;
    let c = cluster.clone();
    let leader = blocking(move || c.wait_leader(Duration::from_secs(30))).await?;
    let follower = (leader + 1) % cluster.len();
    let others: Vec<usize> = (0..cluster.len()).filter(|j| *j != follower).collect();
    // The follower reaches every other member through a proxy of its own.
    let mut proxies = Vec::new();
    let mut routes = Vec::new();
    for &j in &others {
        let (peer, election) = cluster.quorum_addrs(j)?;
        let (p, e) = (FaultProxy::start(peer).await?, FaultProxy::start(election).await?);
        routes.push((j, p.addr(), e.addr()));
        proxies.push(p);
        proxies.push(e);
    }
    let restore = Restore {
        cluster: cluster.clone(),
        member: follower,
        done: false,
    };
    let c = cluster.clone();
    blocking(move || {
        c.route_quorum(follower, &routes, &["syncLimit=50".to_owned()])?;
        c.restart(follower)?;
        c.wait_leader(Duration::from_secs(30)).map(drop)
    })
    .await?;
    let outcome = judge(&ctx, &cluster, follower, &others, &proxies).await;
    for p in &proxies {
        p.pass();
    }
    restore.now().await?;
    outcome
}

async fn judge(
    ctx: &Ctx,
    cluster: &Cluster,
    follower: usize,
    others: &[usize],
    proxies: &[FaultProxy],
) -> CaseResult {
    let timeout = ctx.session_timeout();
    let url = |members: &[usize]| {
        let hosts: Vec<String> = members.iter().map(|i| cluster.addr(*i).to_string()).collect();
        format!(
            "zk://{}/{}?session_timeout={}ms&connect_timeout=10s",
            hosts.join(","),
            ctx.namespace(),
            timeout.as_millis()
        )
    };
    let follower_url = url(&[follower]);
    let minority = within(
        ctx.expiry_wait(),
        "connect to the follower",
        retrying(|| ctx.factory().connect_url(&follower_url)),
    )
    .await??;
    let majority = ctx.factory().connect_url(&url(others)).await?;
    let held = within(
        ctx.expiry_wait(),
        "the lock on the follower",
        retrying(|| minority.lock("res")),
    )
    .await??;
    // When the guard stops saying Held, as its own state reports it.
    let watcher = {
        let hold = held.hold().clone();
        tokio::spawn(async move {
            loop {
                if hold.state() != HoldState::Held {
                    return tokio::time::Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let cut_at = tokio::time::Instant::now();
    for p in proxies {
        p.blackhole_for(CUT);
    }
    let next = within(
        CUT,
        "the majority's client acquires once the leader expired the follower's client",
        retrying(|| majority.lock("res")),
    )
    .await
    .with_context(|| format!("the follower's guard is {:?}", held.state()))??;
    let granted_at = tokio::time::Instant::now();
    ensure!(
        next.token() > held.token(),
        "tokens {} then {}",
        held.token(),
        next.token()
    );
    if !watcher.is_finished() {
        bail!(
            "the guard on the cut-off follower still says Held {:?} after the cut, when the majority granted \
             the lock to another client (session timeout {timeout:?}): its member's answers were taken for \
             proof the session lives",
            granted_at - cut_at
        );
    }
    let left_at = watcher.await?;
    ensure!(
        left_at <= granted_at,
        "the guard left Held {:?} after the other grant",
        left_at - granted_at
    );
    next.release().await?;
    drop(held);
    let _ = majority.close().await;
    let _ = minority.close().await;
    Ok(())
}
