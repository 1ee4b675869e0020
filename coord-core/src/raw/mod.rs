//! The backend contract: everything a backend sees, and nothing else. Applications
//! never need this module (the `coord` facade does not re-export it).
//!
//! coord is built in three layers, each in its own place:
//!
//! 1. **The user API**: [`Client`](crate::Client) and the primitives
//!    (`coord-core/src/primitives/`, one file each: the type, its whole API and docs,
//!    its algorithm). `Client` validates input, opens `tracing` spans and names the
//!    operation in errors, once for every backend.
//! 2. **The engine** (`coord-core/src/engine/`, crate-private): the contender queue's
//!    wait loop, local turns, hold states, guaranteed removal, and the registration
//!    lifecycle (re-created on every new session), written once.
//! 3. **This contract**, implemented once per backend in its native layout, knowing no
//!    primitive:
//!    - the session: [`Backend`] (state signal, id, close, where a path lives), kept
//!      with [`ClientState`];
//!    - a raw key-value store with guarded transactions and prefix watches:
//!      [`KvStore`];
//!    - session-bound instances: [`InstanceStore`] (create, update, delete one instance
//!      on the current session) and [`RegistryStore`] (read and watch a service);
//!    - the contender [`Queue`]: join with a value (entry and fencing token), read the
//!      entry's position, wait until an entry is gone, update or remove one's own entry
//!      — for any queue a recipe declares in a [`QueueSpec`] (its directory, entry
//!      classes and [`Admission`] rule).
//!
//! The backends have the same file set (`lib options session error config registry
//! queue watch`): a file of one can be read side by side with another's.

mod backend;
mod backoff;
pub(crate) mod client_state;
pub(crate) mod connstr;
mod instances;
mod kv;
pub mod mutants;
mod queue;
#[cfg(feature = "reach")]
pub mod reach;
pub(crate) mod registrations;
pub(crate) mod session_signal;
#[cfg(feature = "tls-probe")]
pub mod tls_probe;
pub(crate) mod trackers;

pub use crate::name::{key_matches_prefix, validate_prefix, validate_segment_name, validate_value};
pub use crate::raw::client_state::{ClientState, Stateful};
pub use crate::raw::connstr::{ConnectionString, HostPort, Options, TLS_OPTIONS, TlsFiles};
pub use crate::raw::registrations::{RegistrationBook, RegistrationEntry, Reregistered};
pub use crate::raw::session_signal::SessionSignal;
pub use crate::raw::trackers::{HeadTracker, InstanceTracker};
pub use crate::stats::{Counter, StatsRecorder};
pub use backend::{AsAny, Backend};
pub use backoff::Backoff;
pub use instances::{InstanceStore, RegistryStore};
pub use kv::{KvStore, batched, version, version_mismatch, version_parts};
pub use queue::{
    Admission, AdmissionRule, Ahead, EntriesEvent, EntryClass, HeadEvent, Joined, Member, Position, Queue,
    QueueEntry, QueueSpec, ReleaseMark, Slot, Surveyed, Ticket, release_mark_key,
};
