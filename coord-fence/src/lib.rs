//! Fencing-token gates: the half of fencing that lives where the protected data lives.
//!
//! A lock cannot give mutual exclusion to a process that pauses (GC, swap, SIGSTOP, a
//! partition) past its session: the lock service grants the name to the next holder
//! while the paused one still believes it holds. What keeps the data safe is the store
//! refusing a write whose fencing token is below the highest one it has seen — every
//! grant's token is above every earlier grant's of the same name (see
//! [`coord_core::FencingToken`]). coord's own config store checks tokens
//! ([`Txn::fenced_by`](coord_core::Txn::fenced_by)); a gate of this crate makes another
//! store check them:
//!
//! - [`sql::SqlGate`] (features `postgres`, `sqlite`): a database transaction of the
//!   user's own `sqlx` pool, admitted only while its token is the highest seen for its
//!   resource — in the same transaction as the user's writes.
//!
//! # What a gate guarantees, and what it does not
//!
//! Once a holder's gated transaction has committed, no transaction gated with a lower
//! token for the same resource commits: it is refused with [`Error::Fenced`] and rolled
//! back. Data written *outside* a gate (another table written without the gate, a file,
//! a call to another service) is not protected. Tokens order the grants of one coord
//! cluster: a resource must take its tokens from one ZooKeeper ensemble or one etcd
//! cluster (coord's tokens are the ensemble's `czxid` and the cluster's revision, which
//! also order grants of different names on it).

mod error;
#[cfg(feature = "http")]
pub mod http;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod sql;

/// The longest resource name a gate takes, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

pub use error::Error;
