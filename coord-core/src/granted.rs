//! The one set of accessors every grant offers: [`Granted`].

/// What a grant is made of: its primitive's name, its fence and its hold state. Every
/// grant type keeps one and offers it through [`Granted`].
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct GrantParts {
    pub(crate) name: String,
    pub(crate) fence: crate::fencing::Fence,
    pub(crate) hold: crate::hold::HoldWatch,
}

mod sealed {
    pub trait Sealed {}
}

pub(crate) use sealed::Sealed;

/// What every grant offers — a [`LockGuard`](crate::LockGuard), a
/// [`ReadGuard`](crate::ReadGuard) or [`WriteGuard`](crate::WriteGuard), a semaphore
/// [`Lease`](crate::Lease), a [`Leadership`](crate::Leadership), a selector's
/// [`Leading`](crate::Leading): its name, its fencing token and fence, and its hold
/// state. Written once here; import it (it is in the prelude) to call these on any of
/// them.
///
/// # Fencing
///
/// [`Granted::state`] says what the client knows, not what the server has done: a
/// paused holder may still read `Held` after its session is gone. Check
/// [`Granted::token`] at every resource you protect, or guard writes with
/// [`Granted::fence`] ([`Txn::fenced_by`](crate::Txn::fenced_by)).
pub trait Granted: Sealed {
    /// The grant's parts (its name, fence and hold state).
    #[doc(hidden)]
    fn parts(&self) -> &GrantParts;

    /// The name of the primitive granted (the lock's, the election's, …).
    fn name(&self) -> &str {
        &self.parts().name
    }

    /// The grant's fencing token: greater than every earlier grant's of the same name.
    fn token(&self) -> crate::fencing::FencingToken {
        self.parts().fence.token()
    }

    /// What a guarded write checks; see [`Txn::fenced_by`](crate::Txn::fenced_by).
    fn fence(&self) -> crate::fencing::Fence {
        self.parts().fence.clone()
    }

    /// The hold-state signal: `Held`, `Suspended` or `Lost`, with a future on loss.
    fn hold(&self) -> &crate::hold::HoldWatch {
        &self.parts().hold
    }

    /// The current hold state (no request: it follows the session, and the grant's
    /// entry from the first call on; see [`HoldWatch`](crate::HoldWatch)).
    fn state(&self) -> crate::hold::HoldState {
        self.parts().hold.state()
    }

    /// Resolves when the grant is lost: the session ended, or its node or key was
    /// deleted by someone else (watched from the first call on; see [`HoldWatch`](crate::HoldWatch)).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    fn lost(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.parts().hold.lost()
    }
}
