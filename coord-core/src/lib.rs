//! The coord contract: backend-agnostic coordination primitives with fencing tokens.
//!
//! coord gives applications four primitives behind one API — [`Election`], [`Lock`],
//! [`Registry`] (service discovery) and [`ConfigStore`] — with adapters for ZooKeeper
//! (`coord-zk`), etcd (`coord-etcd`) and an in-memory backend (`coord-mem`). This crate
//! holds what every backend shares: the traits, the erased [`Client`], the
//! [`Error`]/[`ErrorKind`] taxonomy, name and value rules, fencing tokens, and the
//! connection-string parser. Applications normally depend on the `coord` facade.
//!
//! The recipes built on them: [`Client::lead`] (leader selector), [`RwLock`],
//! [`Semaphore`], [`Barrier`], [`DoubleBarrier`], [`DistributedQueue`],
//! [`SharedCounter`] and [`TwoPhaseCommit`] (two-phase commit). Live caches
//! ([`ConfigCache`], [`ServiceCache`]) keep a map of a config prefix or a service's
//! instances up to date from a watch, with whether it is in sync.
//!
//! Three layers, each in its own place: the user API ([`Client`] and the primitives,
//! one file each under `src/primitives/`); the engine every primitive shares, written
//! once (`src/engine/`: the contender queue's wait loop, guaranteed removal, the
//! registration lifecycle); and the backend contract in [`raw`], which each backend
//! implements in its native layout knowing no primitive. Applications never need
//! [`raw`].
//!
//! # Naming
//!
//! One scheme across the primitives:
//!
//! - **Identifiers**: every primitive is made from a client with a name and answers
//!   `name()` (a double barrier's member also has its `id()`: the member, not the
//!   barrier; a registration its `service()` and `instance()`).
//! - **Grants**: each has a guard type of its own — [`LockGuard`] (lock),
//!   [`Leadership`] (election), [`ReadGuard`] and [`WriteGuard`] (read/write lock),
//!   [`Lease`] (semaphore), [`Leading`] (leader selector), [`Entered`] (double barrier),
//!   [`Registration`] (registry). The exclusive ones answer `token()`, `fence()`,
//!   `hold()`, `state()` and `lost()`; every one is given up with a verb of its
//!   primitive (`release`, `resign`, `leave`, `deregister`), and on drop.
//! - **State**: `state()` is the value now; `subscribe()` a `tokio::sync::watch`
//!   channel that always holds the latest (caches, the leader selector). On [`Client`],
//!   whose state is its session's, they are `session_state()` and `session()`.
//! - **Timeouts** are the caller's: wrap any call in `tokio::time::timeout` (every
//!   call is cancel-safe). A `Duration` parameter is part of a protocol, never a bare
//!   call timeout: a two-phase commit's deadline decides `Abort` and persists it; a
//!   double barrier's is how long a member waits for the others before it leaves the
//!   barrier and reports who was missing (Curator's `enter(maxWait)` and
//!   `leave(maxWait)`).
//! - **Atomic writes and two-phase commit**: [`Txn`] is one atomic, optionally fenced
//!   commit of several config writes; [`TwoPhaseCommit`] is the protocol by which
//!   separate processes agree to commit or abort.
//!
//! # Sessions
//!
//! A [`Client`] owns one session. Everything ephemeral — lock holds, candidacies,
//! registrations — is bound to it. Its [`SessionState`] moves between `Connected`,
//! `Suspended` and `Lost`; after `Lost` a new session is established automatically,
//! registrations are re-created, and every guard of the old session reports
//! [`HoldState::Lost`].
//!
//! # Why fencing tokens?
//!
//! A lock service cannot give mutual exclusion to processes that pause: a holder that
//! stalls past its session timeout still believes it holds the lock after it has passed
//! on. coord therefore promises **fenced exclusion**. Every grant carries a
//! [`FencingToken`] strictly greater than every earlier grant's for the same name;
//! a resource that rejects tokens lower than the highest it has seen is safe. Config
//! writes can be made conditional on a guard with [`Txn::fenced_by`]: a stale
//! holder's write fails with [`ErrorKind::Fenced`] and changes nothing.
//!
//! # Cancellation
//!
//! Every async method documents its cancel safety. A dropped `lock`/`campaign` future
//! leaves no contender behind; a dropped guard releases in the background.
//!
//! # Names and values
//!
//! Names are `/`-separated segments of `[A-Za-z0-9._-]` (see [`validate_name`]), values
//! at most [`MAX_VALUE_LEN`] bytes — the same on every backend, checked before any
//! network call.

mod capabilities;
mod client;
mod counter;
mod engine;
mod error;
mod fencing;
mod granted;
mod hold;
pub mod metrics;
#[doc(hidden)]
pub mod mutants;
mod name;
mod primitives;
pub mod raw;
mod session;
mod stats;
mod txn;
mod types;
mod version;

pub use capabilities::Capabilities;
pub use client::{CLOSE_FLUSH, Client};
pub use engine::contender::MAX_LOCK_DELAY;
pub use error::{Error, ErrorKind, Result};
pub use fencing::{Fence, FencingToken};
pub use granted::Granted;
pub use hold::{HoldState, HoldWatch};
pub use name::{MAX_NAME_LEN, MAX_VALUE_LEN, validate_name};
pub use primitives::barrier::Barrier;
pub use primitives::cache::{CacheIter, CacheMap, CacheView, ConfigCache, LiveCache, ServiceCache};
pub use primitives::config::ConfigStore;
pub use primitives::counter::SharedCounter;
pub use primitives::double_barrier::{DoubleBarrier, Entered, MAX_MEMBERS};
pub use primitives::election::{CampaignOptions, Election, LeaderEvent, LeaderInfo, Leadership};
pub use primitives::leader_selector::{LEADER_LOSS_GRACE, LeaderSelector, Leading, SelectorState};
pub use primitives::lock::{Lock, LockGuard, LockHolder, LockOptions};
pub use primitives::registry::{Registration, Registry};
pub use primitives::rw_lock::{ReadGuard, RwLock, WriteGuard};
pub use primitives::semaphore::{Lease, MAX_PERMITS, Semaphore};
pub use primitives::two_phase::{Decision, MAX_PARTICIPANTS, TwoPhaseCommit};
pub use primitives::view::{LockDelayView, Origin, Participant, RecipeKind, RecipeView};
pub use primitives::work_queue::{DistributedQueue, MAX_QUEUE_ITEMS};
pub use session::{SessionState, SessionStatus};
pub use stats::Stats;
pub use txn::{Check, MAX_TXN_BYTES, MAX_TXN_OPS, Op, OpResult, Txn};
pub use types::{ConfigEvent, Entry, Head, RegistrationState, RegistryEvent, ServiceInstance};
pub use version::{Version, Versioned};

/// The traits, for `use coord_core::prelude::*`.
pub mod prelude {
    pub use crate::{ConfigStore, Election, Granted, Lock, Registry};
}
