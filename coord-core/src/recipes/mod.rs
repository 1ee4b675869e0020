//! Recipes, written once over the backend contract ([`crate::raw`]): every backend gets
//! the same lock and election — FIFO, herd-free, cancel-safe, with local queueing, hold
//! states and guaranteed removal — and the same registration lifecycle (register,
//! re-register on every session, deregister), so a fix to any of them is one change.

mod barrier;
pub(crate) mod contender;
mod counter;
mod double_barrier;
pub(crate) mod election;
mod leader_selector;
pub(crate) mod lock;
pub(crate) mod registration;
pub(crate) mod removal;
pub(crate) mod rw_lock;
pub(crate) mod semaphore;
mod two_phase;
mod work_queue;
