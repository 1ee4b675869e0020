//! The engine every primitive shares, written once: the contender queue's wait loop
//! (local turns, join, position, wait, grant with a hold state), guaranteed removal of
//! entries and instances, and the registration lifecycle. Crate-private: primitives use
//! it, backends never see it.

pub(crate) mod client_core;
pub(crate) mod contender;
pub(crate) mod local_queue;
pub(crate) mod marked_holds;
pub(crate) mod pending;
pub(crate) mod registration;
pub(crate) mod removal;
