//! Session states: what a client knows about the session its ephemerals are
//! bound to.

use std::fmt;

/// The state of a client's session.
///
/// `Connected` → `Suspended` (connection trouble; the session may still be alive) →
/// `Connected` again, or `Lost` (the session is gone or may be gone; everything bound to
/// it is released) → a new session is established automatically → `Connected` with a
/// higher [`SessionStatus::generation`]. `Closed` after [`Client::close`](crate::Client::close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// The session is alive and the client is in contact with the server.
    Connected,
    /// The client lost contact; the session may still be alive. Guards report
    /// [`HoldState::Suspended`](crate::HoldState::Suspended): stop acting on them until
    /// the state returns to `Connected`.
    Suspended,
    /// The session is gone or may be gone. Every lock, leadership and registration bound
    /// to it is released; registrations are re-created on the next session.
    Lost,
    /// The client was closed.
    Closed,
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionState::Connected => "connected",
            SessionState::Suspended => "suspended",
            SessionState::Lost => "lost",
            SessionState::Closed => "closed",
        })
    }
}

/// A session state together with the generation of the session it describes.
///
/// The generation starts at 1 and increases by one each time a new session is
/// established. A watcher that sees a higher generation knows every earlier session was
/// lost, even if it never observed the `Lost` state itself (watch channels keep only the
/// latest value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionStatus {
    /// The state.
    pub state: SessionState,
    /// Which session of this client the state refers to.
    pub generation: u64,
}

impl SessionStatus {
    /// A status in `state` for session `generation`.
    pub fn new(state: SessionState, generation: u64) -> Self {
        SessionStatus { state, generation }
    }
}
