//! The backend side of a session-bound node: what a guard, leadership or registration
//! holds so it can update or remove its node. Implemented by backends, not by users.

use async_trait::async_trait;

use crate::error::Result;

/// A backend's handle on one session-bound node or key (a lock or election contender, a
/// registered instance). Owned by exactly one guard, leadership or registration, so it
/// is removed at most once and never by a clone.
#[async_trait]
pub trait EphemeralHandle: Send + Sync + 'static {
    /// Replaces the node's data (election `proclaim`, registration update). For a
    /// registration the new data is also what re-registration after session loss uses.
    async fn update(&self, value: Vec<u8>) -> Result<()>;

    /// Removes the node and waits for the server's answer. Removing a node that is
    /// already gone (session lost, deleted by an operator) is not an error.
    async fn remove(self: Box<Self>) -> Result<()>;

    /// Queues the removal on a background task with its own deadline; used on drop.
    fn remove_in_background(self: Box<Self>);
}
