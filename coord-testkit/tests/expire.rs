//! The crate docs' session expiry, run for real on both servers: a held lock is lost,
//! another client gets it, and the victim goes on with a new session.

use std::time::Duration;

use coord::Granted as _;
use coord::Lock as _;
use coord_testkit::{Cluster, ClusterOptions, Kind};

/// The clients' own account of each connection attempt, shown when a case fails
/// (`RUST_LOG` overrides): an attach that never completes says why.
fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "zookeeper_client=debug,coord_zk=debug,coord_testkit=debug".into()),
        )
        .with_test_writer()
        .try_init();
}

async fn expire(kind: Kind) -> anyhow::Result<()> {
    log();
    let cluster = Cluster::start(ClusterOptions::new(kind, 1)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let url = cluster.session_url("expire", std::time::Duration::from_secs(4));
    let (victim, other) = (coord::connect(&url).await?, coord::connect(&url).await?);
    let guard = victim.lock("jobs").await?;
    let generation = victim.session().borrow().generation;
    coord_testkit::expire_session(&victim, &cluster.hosts()).await?;
    // Sooner than the session timeout: the server ended the session, not a timeout.
    tokio::time::timeout(Duration::from_secs(3), guard.lost()).await?;
    let next = tokio::time::timeout(Duration::from_secs(10), other.lock("jobs")).await??;
    anyhow::ensure!(next.token() > guard.token(), "the token did not grow");
    next.release().await?;
    let mut session = victim.session();
    tokio::time::timeout(
        Duration::from_secs(10),
        session.wait_for(|s| s.generation > generation && s.state == coord::SessionState::Connected),
    )
    .await??;
    victim.close().await?;
    other.close().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_expire_session() -> anyhow::Result<()> {
    expire(Kind::Etcd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn zk_expire_session() -> anyhow::Result<()> {
    expire(Kind::Zk).await
}

/// A client whose session is taken reconnects at once and can take the session back
/// before the attach that took it has closed it: each expiry must still be quick, not
/// won by luck after many rounds of the two taking it from each other (which once ran
/// past the 30 s limit). Twenty settled clients in a row, each expired within 10 s.
#[tokio::test(flavor = "multi_thread")]
async fn zk_expire_session_wins_the_race_with_the_client() -> anyhow::Result<()> {
    log();
    let cluster = Cluster::start(ClusterOptions::new(Kind::Zk, 1)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let url = cluster.session_url("expire-race", Duration::from_secs(4));
    let mut took = Vec::new();
    for _ in 0..20 {
        let victim = coord::connect(&url).await?;
        let guard = victim.lock("jobs").await?;
        let started = std::time::Instant::now();
        coord_testkit::expire_session(&victim, &cluster.hosts()).await?;
        took.push(started.elapsed());
        tokio::time::timeout(Duration::from_secs(3), guard.lost()).await?;
        victim.close().await?;
    }
    let slowest = took.iter().max().copied().unwrap_or_default();
    anyhow::ensure!(
        slowest < Duration::from_secs(10),
        "an expiry took {slowest:?} (all: {took:?})"
    );
    Ok(())
}
