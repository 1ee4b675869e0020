//! The backend contract: what a backend implements and the helpers every backend shares.
//! Applications never need this module (the `coord` facade does not re-export it).
//!
//! coord is built in three layers:
//!
//! 1. **The user API** (the crate root): [`Client`](crate::Client), the primitives'
//!    traits and guards, errors, tokens.
//! 2. **Recipes, written once** over this contract (`coord-core`'s `recipes` module):
//!    the lock and the election — the contender queue's wait loop, local queueing, hold
//!    state, guaranteed removal, leader observation.
//! 3. **This contract**, implemented once per backend in its native layout:
//!    - the session: [`Backend`] (state signal, id, close), kept with [`ClientState`];
//!    - key-value operations with guarded transactions and prefix watches: the backend's
//!      [`ConfigStore`](crate::ConfigStore);
//!    - session-bound registrations: an [`InstanceStore`] (create, update, delete one
//!      instance on the current session); [`register`] and [`reregister_all`] do the
//!      rest, with the [`RegistrationBook`];
//!    - the contender [`Queue`]: join with a value (entry and fencing token), read the
//!      entry ahead, wait until an entry is gone, update or remove one's own entry.
//!
//! A backend's queue file (`coord-mem/src/queue.rs`, `coord-zk/src/queue.rs`,
//! `coord-etcd/src/queue.rs`) can be read side by side with another's: the same methods
//! in the same order, each speaking to its own server.

mod backend;
mod backoff;
mod instances;
mod kv;
pub mod mutants;
mod queue;
#[cfg(feature = "tls-probe")]
pub mod tls_probe;

pub use crate::client_state::ClientState;
pub use crate::connstr::{ConnectionString, HostPort, Options, TLS_OPTIONS, TlsFiles};
pub use crate::name::{key_matches_prefix, validate_prefix, validate_segment_name, validate_value};
pub use crate::registrations::{RegistrationBook, RegistrationEntry, Reregistered};
pub use crate::session_signal::SessionSignal;
pub use crate::stats::{Counter, StatsRecorder};
pub use crate::trackers::{InstanceTracker, LeaderTracker};
pub use backend::{Backend, backend, into_client};
pub use backoff::Backoff;
pub use instances::{InstanceStore, RegistryStore};
pub use kv::KvStore;
pub use queue::{
    Admission, EntriesEvent, EntryClass, HeadEvent, Joined, Member, Position, Queue, QueueEntry, QueueSpec,
    Slot, Ticket,
};
