//! Fencing tokens: the number that makes a lock safe to use.
//!
//! # Why fencing tokens?
//!
//! A lock service cannot give mutual exclusion to processes that pause. A holder can
//! stall (GC, swap, SIGSTOP) past its session timeout; the service then grants the lock
//! to someone else while the first holder still believes it holds it. coord therefore
//! promises *fenced* exclusion: every grant carries a [`FencingToken`] that is strictly
//! greater than every earlier grant's for the same name. A resource that remembers the
//! highest token it has seen and rejects smaller ones is safe; a resource that does not
//! check tokens is not protected by any lock, from coord or elsewhere.
//!
//! The coord [`ConfigStore`](crate::ConfigStore) checks for you: a write made
//! conditional on a [`Fence`] fails with [`ErrorKind::Fenced`](crate::ErrorKind::Fenced)
//! and changes nothing once the guard is no longer held.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::hold::Forfeit;

/// A grant's fencing token. For one name on one cluster, successive grants have
/// strictly increasing tokens, across session loss and server restarts.
///
/// ZooKeeper: the `czxid` of the contender's znode; etcd: the `create_revision` of the
/// contender's key; mem: the cluster's revision counter at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct FencingToken(pub u64);

impl FencingToken {
    /// The token as a plain number, for sending to a resource that checks it.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a guarded write checks: the backend path of a guard's own contender node or key
/// and its token. Obtain it from [`LockGuard::fence`](crate::Granted::fence) or
/// [`Leadership::fence`](crate::Granted::fence); pass it to
/// [`Txn::fenced_by`](crate::Txn::fenced_by).
///
/// A fence is plain data: it stays valid to *check* after its guard is dropped, and such
/// a check fails with `Fenced`. Only a grant makes one: a fence cannot be built by hand
/// (nor deserialized), so no write can pass a check it was not granted:
///
/// ```compile_fail
/// let forged = coord_core::Fence::new("/", coord_core::FencingToken(1));
/// ```
///
/// A write refused because of this fence tells its guard: the store has proven the
/// grant's entry gone, so the guard's [`state`](crate::Granted::state) is
/// [`Lost`](crate::HoldState::Lost) from then on, in every process-local clone.
///
/// Two fences are equal when they name the same entry and token.
#[derive(Clone)]
pub struct Fence {
    resource: String,
    token: FencingToken,
    /// Tells the grant's hold when a store refuses this fence.
    forfeit: Option<Forfeit>,
    /// The granting client's identity in this process (its backend's address), so that
    /// only a refusal by the same client's store is taken as proof the entry is gone.
    origin: usize,
}

impl PartialEq for Fence {
    fn eq(&self, other: &Self) -> bool {
        self.resource == other.resource && self.token == other.token
    }
}

impl Eq for Fence {}

impl Hash for Fence {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.resource.hash(state);
        self.token.hash(state);
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fence")
            .field("resource", &self.resource)
            .field("token", &self.token)
            .finish()
    }
}

impl Fence {
    /// A fence on the contender node/key at `resource` (a backend path) created with
    /// `token`, whose refusal makes the grant's hold lost through `forfeit`. Only the
    /// contender recipe makes fences, from a grant.
    pub(crate) fn new(
        resource: impl Into<String>,
        token: FencingToken,
        forfeit: Option<Forfeit>,
        origin: usize,
    ) -> Self {
        Fence {
            resource: resource.into(),
            token,
            forfeit,
            origin,
        }
    }

    /// Whether the client whose backend is at `origin` granted this fence.
    pub(crate) fn granted_by(&self, origin: usize) -> bool {
        self.origin == origin
    }

    /// A store refused a write because of this fence: its grant's entry is gone.
    pub(crate) fn refused(&self) {
        if let Some(f) = &self.forfeit {
            f.entry_gone();
        }
    }

    /// The backend path of the contender node or key.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The token of the grant.
    pub fn token(&self) -> FencingToken {
        self.token
    }
}
