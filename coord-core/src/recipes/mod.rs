//! Recipes, written once over the backend contract ([`crate::raw`]): every backend gets
//! the same lock and election — FIFO, herd-free, cancel-safe, with local queueing, hold
//! states and guaranteed removal — so a fix to any of them is one change.

pub(crate) mod contender;
mod election;
mod lock;
