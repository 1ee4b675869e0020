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
use coord_core::Granted as _;
use coord_core::{HoldState, Lock};

/// Puts the follower's configuration back and restarts it before it lets the fault lock
/// go (its fields drop after [`Drop::drop`]), also when the case fails, panics or is
/// cancelled: no other fault injector takes a member down before this one is back.
struct Restore {
    cluster: Arc<Cluster>,
    member: usize,
    proxies: Vec<FaultProxy>,
    done: bool,
    _faults: coord_testkit::FaultLock,
}

impl Restore {
    fn undo(&self) -> Result<(), coord_testkit::Error> {
        for p in &self.proxies {
            p.pass();
        }
        self.cluster.restore_config(self.member)?;
        self.cluster.restart(self.member)
    }

    /// Undoes it on the blocking pool; the fault lock goes with `self` after.
    async fn now(mut self) -> anyhow::Result<()> {
        self.done = true;
        let (c, i) = (self.cluster.clone(), self.member);
        for p in &self.proxies {
            p.pass();
        }
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
            // Synchronous: the member is back before the fault lock is released.
            let _ = self.undo();
        }
    }
}

/// A client on a follower cut off from the leader (the client's own link is fine) holds
/// a lock; another client on the majority gets the lock once the leader expired the
/// first one's session. By then the first guard must have stopped saying `Held`.
///
/// The follower gives up on the leader only after 3 session timeouts (its `syncLimit`
/// raised so: ZooKeeper's defaults give 10 s beside sessions from 4 s), and the cut
/// lasts 2.5 of them: past the leader's expiry of the session and the other client's
/// grant, short of the follower dropping its clients.
pub async fn cut_off_follower_does_not_keep_held(ctx: Ctx) -> CaseResult {
    let cluster = ctx.factory().cluster()?;
    let c = cluster.clone();
    let faults = blocking(move || c.fault_lock()).await?;
    let c = cluster.clone();
    let leader = blocking(move || c.wait_leader(Duration::from_secs(30))).await?;
    let follower = (leader + 1) % cluster.len();
    let others: Vec<usize> = (0..cluster.len()).filter(|j| *j != follower).collect();
    let tick = cluster
        .zk_setting(follower, "tickTime")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis);
    let timeout = ctx.session_timeout();
    let sync_limit = (timeout * 3).as_millis().div_ceil(tick.as_millis().max(1)) + 1;
    let cut = timeout * 5 / 2;
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
        proxies,
        done: false,
        _faults: faults,
    };
    let c = cluster.clone();
    blocking(move || {
        c.route_quorum(follower, &routes, &[format!("syncLimit={sync_limit}")])?;
        c.restart(follower)?;
        c.wait_leader(Duration::from_secs(30)).map(drop)
    })
    .await?;
    let outcome = judge(&ctx, &cluster, follower, &others, &restore.proxies, cut).await;
    let restored = restore.now().await;
    match (outcome, restored) {
        (Err(e), Err(r)) => Err(e.context(format!("and restoring the follower failed: {r}"))),
        (Err(e), Ok(())) => Err(e),
        (Ok(()), r) => r,
    }
}

async fn judge(
    ctx: &Ctx,
    cluster: &Cluster,
    follower: usize,
    others: &[usize],
    proxies: &[FaultProxy],
    cut: Duration,
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
        p.blackhole_for(cut);
    }
    let next = within(
        cut,
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
