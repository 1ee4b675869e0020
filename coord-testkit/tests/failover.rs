//! The crate docs' failover test, run for real on both servers: a 3-member cluster, a
//! lock held and released through coord, the leader member killed, the lock taken again
//! with a larger token, the member restarted.

use std::time::Duration;

use coord::Granted as _;
use coord::Lock as _;
use coord_testkit::{Cluster, ClusterOptions, Kind};

async fn failover(kind: Kind) -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::new(kind, 3)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = coord::connect(&cluster.session_url("failover", std::time::Duration::from_secs(2))).await?;
    let guard = client.lock("jobs").await?;
    let first = guard.token();
    guard.release().await?;

    let leader = cluster
        .wait_leader(Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    cluster.kill(leader).map_err(|e| anyhow::anyhow!("{e}"))?;
    let guard = tokio::time::timeout(Duration::from_secs(30), client.lock("jobs")).await??;
    anyhow::ensure!(
        guard.token() > first,
        "the token did not grow across the failover"
    );
    guard.release().await?;

    cluster
        .restart_member(leader)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(cluster.pid(leader).is_some(), "the member did not come back");
    client.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_failover() -> anyhow::Result<()> {
    failover(Kind::Etcd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_failover() -> anyhow::Result<()> {
    failover(Kind::Zk).await
}
