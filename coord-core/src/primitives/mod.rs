//! The primitives, one file each: the type a user holds, its whole API and docs, and
//! its algorithm, written once over the backend contract ([`crate::raw`]) with the
//! engine ([`crate::engine`]).

pub(crate) mod barrier;
pub(crate) mod cache;
pub(crate) mod config;
pub(crate) mod counter;
pub(crate) mod double_barrier;
pub(crate) mod election;
pub(crate) mod inspect;
pub(crate) mod leader_selector;
pub(crate) mod lock;
pub(crate) mod registry;
pub(crate) mod rw_lock;
pub(crate) mod semaphore;
pub(crate) mod two_phase;
pub(crate) mod view;
pub(crate) mod work_queue;
