//! Leader election with fencing tokens, and observation of leader changes.

use async_trait::async_trait;
use futures::stream::BoxStream;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::fencing::{Fence, FencingToken};
use crate::handle::EphemeralHandle;
use crate::hold::{HoldState, HoldWatch};
use crate::name::validate_value;

/// The current leader of an election as others see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's fencing token (strictly greater than every earlier leader's).
    pub token: FencingToken,
    /// The value the leader campaigned with or last proclaimed.
    pub value: Vec<u8>,
}

/// Leader election.
///
/// Candidates queue in FIFO order; the first leads. Leadership is bound to the
/// client's session: it ends with [`Leadership::resign`], when the `Leadership` is
/// dropped, or when the session is lost.
///
/// # Fencing
///
/// Leadership is fenced, not exclusive: a paused leader may still believe it leads after
/// its session is gone. Check [`Leadership::token`] at every resource you protect, or
/// make config writes conditional with [`Leadership::fence`].
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::Election;
/// let leadership = client.campaign("scheduler", b"node-1".to_vec()).await?;
/// assert_eq!(client.leader("scheduler").await?.unwrap().token, leadership.token());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Election: Send + Sync {
    /// Enters the election `name` with `value` and waits until this client leads.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name or oversized value; `SessionLost` if the session
    /// was lost while waiting; `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves no candidate behind (removed in the
    /// background).
    async fn campaign(&self, name: &str, value: Vec<u8>) -> Result<Leadership>;

    /// The current leader of `name`, if any.
    ///
    /// # Errors
    ///
    /// `InvalidArgument`, `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>>;

    /// A stream of leader changes for `name`: the current leader (or `None`) first, then
    /// every change, including `None` when there is no leader. Successive leaders have
    /// strictly increasing tokens; a proclaim yields the same token with a new value.
    ///
    /// Backends without [`Capabilities::every_leader_change`](crate::Capabilities)
    /// may skip a leader that came and went between two reads, but never show a token
    /// lower than one already shown.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` up front; stream items carry `Unavailable`/`Closed` when the
    /// client can no longer observe (the stream then ends).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops observing; nothing is left on the server.
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<LeaderInfo>>>>;
}

/// This client's leadership of an election. Dropping it resigns in the background;
/// prefer [`Leadership::resign`].
#[must_use = "dropping the leadership resigns it"]
pub struct Leadership {
    name: String,
    fence: Fence,
    value: Vec<u8>,
    hold: HoldWatch,
    handle: Option<Box<dyn EphemeralHandle>>,
}

impl Leadership {
    /// For backends: a leadership of `name` whose candidate node is described by `fence`.
    pub fn new(
        name: impl Into<String>,
        fence: Fence,
        value: Vec<u8>,
        hold: HoldWatch,
        handle: Box<dyn EphemeralHandle>,
    ) -> Self {
        Leadership {
            name: name.into(),
            fence,
            value,
            hold,
            handle: Some(handle),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this term.
    pub fn token(&self) -> FencingToken {
        self.fence.token()
    }

    /// What a guarded write checks; see [`Txn::fenced_by`](crate::Txn::fenced_by).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// The value last campaigned with or proclaimed.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The hold-state signal.
    pub fn hold(&self) -> &HoldWatch {
        &self.hold
    }

    /// The current hold state.
    pub fn state(&self) -> HoldState {
        self.hold.state()
    }

    /// Resolves when leadership is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// Publishes a new value without giving up leadership; observers see the same token
    /// with the new value.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an oversized value; `SessionLost` or `Fenced` if leadership
    /// was lost; `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the new value may or may not have been written; [`Leadership::value`]
    /// keeps the old one.
    pub async fn proclaim(&mut self, value: Vec<u8>) -> Result<()> {
        validate_value("leader value", &value)?;
        if self.state() == HoldState::Lost {
            return Err(Error::new(
                crate::ErrorKind::Fenced,
                format!("leadership of {:?} was lost; campaign again", self.name),
            ));
        }
        let span = tracing::debug_span!("coord.election.proclaim", name = %self.name, token = %self.token());
        let handle = self.handle.as_ref().ok_or_else(Error::closed)?;
        handle.update(value.clone()).instrument(span).await?;
        self.value = value;
        Ok(())
    }

    /// Gives up leadership and waits for the server to confirm; the next candidate takes
    /// over.
    ///
    /// # Errors
    ///
    /// `Unavailable`/`Timeout` if the server could not be told; the candidate node then
    /// goes when the session ends. Resigning a lost leadership is not an error.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal may or may not have been sent.
    pub async fn resign(mut self) -> Result<()> {
        let span = tracing::debug_span!("coord.election.resign", name = %self.name, token = %self.token());
        match self.handle.take() {
            Some(handle) => handle.remove().instrument(span).await,
            None => Err(Error::closed()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.remove_in_background();
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("token", &self.token())
            .field("state", &self.state())
            .finish()
    }
}
