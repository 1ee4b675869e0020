//! The leader selector: campaign, run the leader's work while leading, stop it when
//! leadership is lost, and campaign again — until stopped.

use tokio::sync::watch;

use crate::error::Result;
use crate::fencing::{Fence, FencingToken};
use crate::hold::{HoldState, HoldWatch};

/// What the leader's work gets for one term: the term's token and fence, the value, and
/// the hold-state signal. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leading {
    pub(crate) name: String,
    pub(crate) value: Vec<u8>,
    pub(crate) fence: Fence,
    pub(crate) hold: HoldWatch,
}

impl Leading {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value campaigned with.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The fencing token of this term.
    pub fn token(&self) -> FencingToken {
        self.fence.token()
    }

    /// What a guarded write checks; see [`Txn::fenced_by`](crate::Txn::fenced_by).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// The current hold state.
    pub fn state(&self) -> HoldState {
        self.hold.state()
    }

    /// The hold-state signal (`Suspended` is a hint to pause work that needs exclusion).
    pub fn hold(&self) -> &HoldWatch {
        &self.hold
    }

    /// Resolves when this term is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn lost(&self) {
        self.hold.lost().await
    }
}

/// Where a [`LeaderSelector`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectorState {
    /// Queued for leadership (or waiting for a session to queue on).
    Campaigning,
    /// Leading: the work runs, with this term's token.
    Leading(FencingToken),
    /// Stopped: by [`LeaderSelector::stop`], its drop, the client's close, or an error
    /// retrying cannot fix.
    Stopped,
}

/// A running leader selector, made by [`Client::lead`](crate::Client::lead): it
/// campaigns, runs the work while leading, cancels the work when leadership is lost and
/// campaigns again, until stopped. Dropping it stops it in the background (the work is
/// cancelled, the leadership resigned); prefer [`LeaderSelector::stop`].
#[must_use = "dropping the selector stops it"]
pub struct LeaderSelector {
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) state: watch::Receiver<SelectorState>,
    pub(crate) terms: watch::Receiver<u64>,
    pub(crate) done: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl LeaderSelector {
    /// Where the selector stands now.
    pub fn state(&self) -> SelectorState {
        *self.state.borrow()
    }

    /// A channel that always holds the selector's latest state.
    pub fn states(&self) -> watch::Receiver<SelectorState> {
        self.state.clone()
    }

    /// Whether this client leads now.
    pub fn is_leader(&self) -> bool {
        matches!(self.state(), SelectorState::Leading(_))
    }

    /// How many terms this selector has led so far.
    pub fn terms(&self) -> u64 {
        *self.terms.borrow()
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("state", &self.state())
            .field("terms", &self.terms())
            .finish()
    }
}
