//! The backend side of a registration: what a [`Registration`](crate::Registration)
//! holds so it can update or remove its instance. Implemented by backends.

use async_trait::async_trait;

use tokio::sync::watch;

use crate::error::Result;
use crate::session::SessionStatus;

/// A backend's handle on one registration. Owned by exactly one
/// [`Registration`](crate::Registration); the recipe there retries removal (on
/// `deregister` and on drop) until it is confirmed or the session has ended.
#[async_trait]
pub trait RegistrationHandle: Send + Sync + 'static {
    /// Replaces the instance's data on the server (if it is registered now) and for every
    /// later re-registration.
    async fn update(&self, value: Vec<u8>) -> Result<()>;

    /// Stops re-registering the instance on later sessions. Called once, first thing on
    /// deregistration.
    fn forget(&self);

    /// One attempt to delete the instance's node or key of the current session: `Ok`
    /// once it is gone, including when it already was (session lost, deleted from
    /// outside).
    async fn delete(&self) -> Result<()>;

    /// The client's session status, which bounds the retries of
    /// [`RegistrationHandle::delete`].
    fn session(&self) -> watch::Receiver<SessionStatus>;
}
