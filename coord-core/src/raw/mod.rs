//! The backend contract: everything a backend sees, and nothing else. Applications
//! never need this module (the `coord` facade does not re-export it).
//!
//! coord-core is built in layers that only look down (`coord-core/tests/layers.rs`
//! keeps it so, and keeps files from importing each other in a ring):
//!
//! 1. **The primitives** (`coord-core/src/primitives/`, one file each: the user type,
//!    its whole API and docs, its queue declared as data, its admission rule, the
//!    layout `inspect` reads), over
//! 2. **the client** ([`Client`](crate::Client): validates input, opens `tracing`
//!    spans, names the operation in errors, once for every backend), over
//! 3. **the engine** (`coord-core/src/engine/`, crate-private): the contender queue's
//!    wait loop, local turns, hold states, guaranteed removal, and the registration
//!    lifecycle (re-created on every new session), written once, over
//! 4. **this contract**, implemented once per backend in its native layout, knowing no
//!    primitive, over
//! 5. **the shared types** (`types/` and the files at the crate's root): what the
//!    contract's reads return and the user API hands on.
//!
//! The contract has 20 required methods (`coord-core/tests/contract.rs` keeps it at
//! most that); everything else is provided:
//!
//! - the state every backend keeps beside its connection: [`ClientState`], behind the
//!   one accessor [`Stateful::state`]; the session, [`Backend`] (its id and `close`;
//!   its kind, namespace, paths, capabilities, status and counters come from the
//!   state);
//! - a raw key-value store with guarded transactions and prefix watches: [`KvStore`];
//! - session-bound instances: [`InstanceStore`] (create, update, delete one instance on
//!   the current session) and [`RegistryStore`] (read and watch a service);
//! - the [`ContenderQueue`]: join with a value (entry and fencing token), read the
//!   entries ahead of it ([`Ahead`]), wait until an entry is gone, update or remove
//!   one's own entry — for any queue a recipe declares in a [`QueueSpec`] (its
//!   directory, entry classes and [`Admission`] rule). Where an entry stands is decided
//!   once, above the store, by [`QueueSpec::admit`]; a backend only reads.
//!   Revocation's write ([`ContenderQueue::mark`]) and inspection's listing
//!   ([`ContenderQueue::survey`]) are optional, `Unsupported` by default behind
//!   [`Capabilities`](crate::Capabilities).
//!
//! The backends have the same file set (`lib options session error config registry
//! queue watch`): a file of one can be read side by side with another's.

mod backend;
mod backoff;
pub(crate) mod client_state;
pub(crate) mod connstr;
mod instances;
mod kv;
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
    Admission, AdmissionRule, Ahead, ContenderQueue, EntriesEvent, EntryClass, HeadEvent, Joined, Member,
    Position, QueueEntry, QueueSpec, ReleaseMark, Slot, Surveyed, Ticket, release_mark_key,
};
