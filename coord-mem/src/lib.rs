//! In-memory coord backend: the embedded default, and a test double with fault
//! injection.
//!
//! Several [`MemClient`]s on one [`MemCluster`] behave like separate nodes of one
//! deployment: each has its own session with a TTL and keep-alives, locks are FIFO and
//! herd-free, elections have observers, registrations are re-created after session
//! loss, and config has compare-and-set, atomic commits, guarded writes and ordered
//! watches with `Resync` on gaps. The model follows etcd: one global revision counter,
//! per-key creation and modification revisions, an event history that can be compacted.
//!
//! # Fencing
//!
//! Tokens are the creation revision of the contender's key: strictly increasing for
//! every grant on the cluster. Guarded writes check that the contender's key still
//! exists with that revision.
//!
//! # Connection strings
//!
//! `mem://[namespace][?session_ttl=<duration>]`, on the process-wide
//! [`MemCluster::global`]. `session_ttl` defaults to 10 s (minimum 100 ms).
//!
//! # Fault injection
//!
//! [`MemClient::suspend`] (partition for a while), [`MemClient::crash`] (die without
//! cleanup), [`MemClient::expire_session`] / [`MemCluster::expire_session`] (server-side
//! expiry), [`MemCluster::compact`] (drop history so lagging watchers `Resync`). Sessions
//! run on tokio's clock: `tokio::time::pause()` and `advance()` move through timeouts.
//!
//! # Layout
//!
//! `<ns>/locks/<name>/<session hex>`, `<ns>/elections/<name>/<session hex>`,
//! `<ns>/services/<service>/<id>`, `<ns>/config/<key>`.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> coord_core::Result<()> {
//! use coord_core::prelude::*;
//! use coord_mem::{MemClient, MemCluster, MemOptions};
//!
//! let cluster = MemCluster::new();
//! let a = MemClient::connect(&cluster, MemOptions::default())?;
//! let b = MemClient::connect(&cluster, MemOptions::default())?;
//! let guard = a.lock("jobs").await?;
//! assert!(b.try_lock("jobs").await?.is_none());
//! guard.release().await?;
//! assert!(b.try_lock("jobs").await?.is_some());
//! # Ok(()) }
//! ```

mod client;
mod cluster;
mod config;
mod options;
mod queue;
mod registry;
mod session;
mod watch;

pub use client::MemClient;
pub use cluster::MemCluster;
pub use options::{KNOWN_OPTIONS, MemOptions};

/// Opens a client from a `mem://` connection string on the process-wide cluster.
///
/// # Errors
///
/// `ConfigInvalid` for a malformed string or unknown option.
pub fn connect(url: &str) -> coord_core::Result<coord_core::Client> {
    MemClient::connect_url(url)
}
