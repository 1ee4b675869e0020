//! Real ZooKeeper and etcd servers for tests, as Curator's `TestingServer` /
//! `TestingCluster` and kazoo's harness provide: a standalone server or a 3-member
//! ensemble / cluster on loopback, started from the Debian packages' binaries in a
//! temporary directory; member faults (stop, kill, pause, restart) and the current
//! leader; a client's session expired from outside ([`expire_session`]); etcd history
//! compaction ([`Cluster::compact`]); and a TCP [`FaultProxy`] per client link that
//! resets, blackholes or delays traffic.
//!
//! Install the servers first: `apt-get install zookeeper etcd-server etcd-client`
//! (`libnetty-java` too for ZooKeeper with TLS). [`Cluster::start`] says which package is
//! missing.
//!
//! # Testing your own failover logic
//!
//! Start a 3-member cluster, hold a lock through coord, kill the cluster's leader, and
//! check that your code still gets the lock (here: that the next holder gets a larger
//! fencing token) — the same test runs on ZooKeeper with [`Kind::Zk`]:
//!
//! ```no_run
//! use std::time::Duration;
//! use coord::{Granted as _, Lock as _};
//! use coord_testkit::{Cluster, ClusterOptions, Kind};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cluster = Cluster::start(ClusterOptions::new(Kind::Etcd, 3))?;
//! let url = format!("{}?lease_ttl=2s", cluster.url("myapp"));
//! let client = coord::connect(&url).await?;
//!
//! let guard = client.lock("jobs").await?;
//! let first = guard.token();
//! guard.release().await?;
//!
//! // Crash the leader member; the client moves to a live member.
//! let leader = cluster.wait_leader(Duration::from_secs(10))?;
//! cluster.kill(leader)?;
//! let guard = client.lock("jobs").await?;
//! assert!(guard.token() > first);
//! guard.release().await?;
//!
//! // Bring it back on its data.
//! cluster.restart_member(leader)?;
//! # Ok(())
//! # }
//! ```
//!
//! Each client can go through its own [`FaultProxy`] per member ([`ProxyMap::open`]), to
//! cut that one client off, silence it, or delay it, while the others go on.
//!
//! # Scripts
//!
//! The `coord-testkit` command starts the same clusters for tests in other processes
//! (`coord-testkit start zk --members 3 --dir D` prints the member list) and injects the
//! same member faults (`coord-testkit member D 0 kill`); [`Cluster::attach`] controls a
//! cluster it started.

pub mod cluster;
pub mod env;
pub mod proxy;
pub mod session;

pub use cluster::{Cluster, ClusterOptions, Error, FaultLock, Kind};
pub use proxy::{FaultProxy, Links, ProxyMap};
pub use session::expire_session;
