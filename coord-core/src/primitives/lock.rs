//! Distributed locks with fencing tokens.
//!
//! The lock: a queue of contenders; the first holds. Implemented for [`Client`] over the
//! backend's [`ContenderQueue`](crate::raw::ContenderQueue).

use async_trait::async_trait;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{Contender, Grant, acquire};
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::granted::{GrantParts, Granted, Sealed};
use crate::name::{validate_name, validate_value};
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView, admit_by_rule};
use crate::raw::{Admission, EntryClass, QueueSpec};

/// A fair (FIFO), herd-free distributed lock.
///
/// # Fencing
///
/// A lock gives **fenced exclusion, not mutual exclusion**. Two clients never hold the
/// same lock with overlapping *valid* tokens, but a paused holder can believe it holds a
/// lock that has already passed on. A resource outside the store is safe only if it
/// checks the [`FencingToken`]; writes to the [`ConfigStore`](crate::ConfigStore) can be
/// made conditional with [`LockGuard::fence`].
///
/// Within one client, contenders for the same name queue locally and reach the server
/// one at a time (the lock is not reentrant: a second `lock` on the same client waits
/// for the first guard's release, drop or loss).
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::Granted as _;
/// use coord_core::Lock;
/// let guard = client.lock("jobs/nightly").await?;
/// println!("holding with token {}", guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// The trait can be used as `dyn Lock`. Who holds (`host:pid`, say) and a lock-delay
/// are passed one way, in [`LockOptions`] ([`Lock::lock_with`]).
#[async_trait]
pub trait Lock: Send + Sync {
    /// Waits until this client holds the lock `name`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `SessionLost` if the session was lost while
    /// waiting (retry to queue again); `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves no contender behind; its node is removed in
    /// the background and the queue behind it moves on. Use `tokio::time::timeout` for
    /// a bounded wait.
    async fn lock(&self, name: &str) -> Result<LockGuard>;

    /// Takes the lock if it is free now; returns `None` if another contender holds it or
    /// is queued ahead. This client's own entry still being removed (a guard dropped
    /// without a release, a try cut short) is nobody's hold: the try waits for that
    /// removal, up to a quarter of the session timeout, then answers.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `Unavailable` at once — before any request —
    /// while the session is suspended (connection trouble), and as soon as it becomes
    /// suspended while trying: a `try_*` never waits out an outage (retry once it
    /// reconnects; an entry the attempt may have made is removed in the background);
    /// `Timeout` (one request's deadline); `SessionLost`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`Lock::lock`].
    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>>;

    /// As [`Lock::lock`], with `options`: a holder stored in the entry, and an optional
    /// lock-delay.
    ///
    /// # Lock-delay
    ///
    /// With [`LockOptions::lock_delay`], a contender whose turn comes because the
    /// holder ahead *vanished* — its session expired (a crash, a pause, a partition) or
    /// someone deleted its entry — holds off for the delay before it takes the lock; a
    /// holder that *releases* hands over at once. The release says so in the same
    /// request that removes its entry (a mark in the queue: on ZooKeeper the lock
    /// directory's data, on etcd the key `<namespace>/locks/<name>~lock-delay`), and
    /// the waiter reads the mark in the read that finds it first: a clean hand-over
    /// costs no extra request. A waiter that holds off writes why and until when into
    /// the same mark, which `coord inspect` shows.
    ///
    /// What it covers, and what not:
    /// - Set it on every coord contender of the name: a coord holder without it
    ///   releases without the mark, and a waiter with it then holds off as if the
    ///   holder had vanished (the safe side). The same for holders that are not coord
    ///   (Curator's `InterProcessMutex`, kazoo's `Lock`, Go's `concurrency.Mutex`):
    ///   they never write the mark, so a coord waiter holds off after each of their
    ///   releases; and they do not read it, so they take the lock at once after a
    ///   vanished holder, as they always do.
    /// - The delay is kept by the contenders waiting when the holder vanished, on
    ///   other clients and on the holder's own (a contender of the same client waiting
    ///   its turn). One that arrives after the entry is gone, with nobody waiting,
    ///   finds the lock free and takes it at once: no one saw the holder go. A `try_*`
    ///   never waits a delay out.
    /// - [`Client::close`](crate::Client::close) releases the client's grants held
    ///   with a lock-delay first, with their marks: their waiters take over at once.
    ///   Dropping the last handle instead ends the session without them, and those
    ///   waiters hold off as after a crash.
    /// - With several holders at once (a semaphore's leases, a read/write lock's
    ///   readers), a waiter judges the entries it waited for: it may hold off after a
    ///   release it could not tell from a vanishing (the safe side), and a holder that
    ///   vanishes while another releases — or before the one the waiter watches — may
    ///   be passed over without the delay.
    /// - At most [`MAX_LOCK_DELAY`](crate::MAX_LOCK_DELAY) (an hour); more is
    ///   `InvalidArgument`, before any request.
    /// - It is a courtesy to resources that cannot check a fencing token, not a
    ///   guarantee: a holder paused for longer than its session and the delay still
    ///   writes late. Fence what you can ([`LockGuard::fence`], the `coord-fence`
    ///   gates).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a lock-delay over
    /// [`MAX_LOCK_DELAY`](crate::MAX_LOCK_DELAY) and for an oversized holder;
    /// otherwise as [`Lock::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`]; a contender dropped while it holds off leaves no entry.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
    /// use std::time::Duration;
    /// use coord_core::{Lock as _, LockOptions};
    /// let options = LockOptions::new().lock_delay(Duration::from_secs(2));
    /// let guard = client.lock_with("jobs/nightly", options.clone()).await?;
    /// guard.release().await?;
    /// // Released, not vanished: the next contender takes it at once.
    /// let again = client.lock_with("jobs/nightly", options).await?;
    /// again.release().await?;
    /// # Ok(()) }
    /// ```
    async fn lock_with(&self, name: &str, options: LockOptions) -> Result<LockGuard>;

    /// As [`Lock::try_lock`], with `options` ([`Lock::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`Lock::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::lock`].
    async fn try_lock_with(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>>;

    /// Who holds the lock `name` now: its token and the `holder` it was taken with
    /// (empty without [`LockOptions::holder`], Curator's address bytes for a Curator
    /// holder); `None`
    /// when it is free. For status displays: by the time it returns, it may have
    /// changed.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn holder(&self, name: &str) -> Result<Option<LockHolder>>;
}

/// The holder of a lock as others see it ([`Lock::holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// The holder's fencing token.
    pub token: FencingToken,
    /// What the holder took the lock with ([`LockOptions::holder`]); empty if nothing.
    pub holder: Vec<u8>,
}

/// How a grant is taken ([`Lock::lock_with`], [`Semaphore::with_options`](crate::Semaphore::with_options),
/// [`RwLock::with_options`](crate::RwLock::with_options)): who holds, and a lock-delay.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use coord_core::LockOptions;
/// let options = LockOptions::new().holder("host-a:41").lock_delay(Duration::from_secs(5));
/// assert_eq!(options.lock_delay, Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// Who holds (e.g. `host:pid`), stored in the contender's entry so that others see
    /// who holds the lock or waits for it ([`Lock::holder`]); kazoo's lock identifier.
    /// Curator and etcd's `concurrency.Mutex` ignore it. Empty by default.
    pub holder: Vec<u8>,
    /// Lock-delay (Chubby's, Consul's): when the holder ahead goes without releasing —
    /// its session expired, or an operator deleted its entry — this contender takes the
    /// lock only after this long, counted from when it saw the holder gone (which is no
    /// earlier than the holder was last known alive), so that what the vanished holder
    /// still had in flight can land first. A release hands over at once. `None` (the
    /// default): no delay. See [`Lock::lock_with`] ("Lock-delay").
    pub lock_delay: Option<std::time::Duration>,
}

impl LockOptions {
    /// No holder, no lock-delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// With `holder` stored in the entry ([`LockOptions::holder`]).
    pub fn holder(mut self, holder: impl Into<Vec<u8>>) -> Self {
        self.holder = holder.into();
        self
    }

    /// With lock-delay `delay` ([`LockOptions::lock_delay`]); zero is none.
    pub fn lock_delay(mut self, delay: std::time::Duration) -> Self {
        self.lock_delay = Some(delay).filter(|d| !d.is_zero());
        self
    }
}

/// A held lock. Dropping it releases the lock in the background; prefer
/// [`LockGuard::release`], which waits for the outcome.
///
/// A guard does not keep its client's session open: when the last
/// [`Client`](crate::Client) handle is dropped or closed, the guard reports
/// [`HoldState::Lost`](crate::HoldState::Lost).
///
/// # Fencing
///
/// [`LockGuard::token`] never changes. Pass it to any resource you protect, or use
/// [`LockGuard::fence`] for guarded config writes.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    parts: GrantParts,
    contender: Option<Contender>,
}

impl LockGuard {
    /// The guard of a granted turn at lock `name`.
    pub(crate) fn new(name: impl Into<String>, grant: Grant) -> Self {
        LockGuard {
            parts: GrantParts {
                name: name.into(),
                fence: grant.fence,
                hold: grant.hold,
            },
            contender: Some(grant.contender),
        }
    }

    /// The contender behind the grant (an election's `proclaim` updates its value);
    /// `None` once it is being removed.
    pub(crate) fn contender(&self) -> Option<&Contender> {
        self.contender.as_ref()
    }

    /// Resolves once someone asked this holder to let the lock go
    /// ([`Client::revoke_lock`](crate::Client::revoke_lock), `coord revoke`, Curator's
    /// `Revoker.attemptRevoke`). A request, not a loss: the lock stays held until this
    /// holder releases it, which is what a cooperating holder then does. Opt-in and
    /// free until used: the first poll starts watching the lock's entries (Curator's
    /// `makeRevocable`); never resolves once the lock is lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping it stops watching.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::Lock as _;
    /// let client = coord_mem::connect("mem://revoke-doc")?;
    /// let guard = client.lock("nightly").await?;
    /// let other = client.clone();
    /// tokio::spawn(async move { other.revoke_lock("nightly").await });
    /// guard.revocation_requested().await; // asked to let go
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revocation_requested(&self) {
        match &self.contender {
            Some(contender) => contender.revocation_requested().await,
            None => std::future::pending().await,
        }
    }

    /// Releases the lock: removes this contender's node or key, retrying through
    /// connection trouble until the server confirms it is gone or the session that owns
    /// it has ended (then the server has removed it). The next waiter is granted the lock
    /// as soon as the server sees the removal.
    ///
    /// # Errors
    ///
    /// Only a refusal retrying cannot fix (e.g. `PermissionDenied`); the node then goes
    /// when the session ends. Releasing a lock already lost is not an error. While the
    /// server is unreachable this waits — at most until the session is declared lost,
    /// about one session timeout.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the removal goes on in the background, as on drop.
    pub async fn release(mut self) -> Result<()> {
        let span = tracing::debug_span!("coord.lock.release", name = %self.name(), token = %self.token());
        match self.contender.take() {
            Some(contender) => contender.leave().instrument(span).await,
            None => Err(Error::closed()),
        }
    }
}

impl Sealed for LockGuard {}

impl Granted for LockGuard {
    fn parts(&self) -> &GrantParts {
        &self.parts
    }
}

impl Drop for LockGuard {
    /// Releases in the background, with the same retries as [`LockGuard::release`].
    fn drop(&mut self) {
        drop(self.contender.take());
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.parts.name)
            .field("token", &self.token())
            .field("state", &self.parts.hold.peek())
            .finish()
    }
}

/// Defines a guard type of its own for a primitive held the way a lock is (a semaphore
/// lease, a read or write hold), with [`LockGuard`]'s methods and contract: each
/// primitive's grant has its own type, so a lease is never passed where a lock guard is
/// meant.
macro_rules! guard_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[must_use = concat!("dropping the guard releases the ", $what)]
        pub struct $name($crate::primitives::lock::LockGuard);

        impl $name {
            #[doc = concat!("Resolves once someone asked this holder to let the ", $what, " go (as [`LockGuard::revocation_requested`]($crate::LockGuard::revocation_requested)).")]
            ///
            /// # Cancel safety
            ///
            /// Cancel-safe.
            pub async fn revocation_requested(&self) {
                self.0.revocation_requested().await
            }

            #[doc = concat!("Gives the ", $what, " up, retrying until the server confirms its entry is gone or its session has ended.")]
            ///
            /// # Errors
            ///
            /// As [`LockGuard::release`]($crate::LockGuard::release).
            ///
            /// # Cancel safety
            ///
            /// If the future is dropped, the removal goes on in the background, as on drop.
            pub async fn release(self) -> $crate::Result<()> {
                self.0.release().await
            }
        }

        impl $crate::granted::Sealed for $name {}

        impl $crate::Granted for $name {
            fn parts(&self) -> &$crate::granted::GrantParts {
                $crate::Granted::parts(&self.0)
            }
        }

        impl From<$crate::primitives::lock::LockGuard> for $name {
            fn from(guard: $crate::primitives::lock::LockGuard) -> Self {
                $name(guard)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &$crate::Granted::name(self))
                    .field("token", &$crate::Granted::token(self))
                    .field("state", &$crate::Granted::hold(self).peek())
                    .finish()
            }
        }
    };
}
pub(crate) use guard_type;

impl crate::Client {
    async fn lock_with_options(
        &self,
        name: &str,
        options: LockOptions,
        wait: bool,
        op: &'static str,
    ) -> Result<Option<LockGuard>> {
        validate_name("lock name", name).map_err(|e| e.with_operation(op))?;
        validate_value("lock holder", &options.holder).map_err(|e| e.with_operation(op))?;
        let span = tracing::debug_span!("coord.lock", backend = self.kind(), name, op);
        let queue = queue(name).with_lock_delay(options.lock_delay);
        let grant = acquire(self.core(), queue, options.holder, wait)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation(op))?;
        Ok(grant.map(|g| LockGuard::new(name, g)))
    }

    /// Asks the holder of lock `name` to let it go (Curator's `Revoker.attemptRevoke`):
    /// marks the holder's entry with `__REVOKE__`, which a holder watching
    /// [`LockGuard::revocation_requested`] (or a Curator mutex made revocable) sees.
    /// Returns the token of the holder asked; `None` when nobody holds the lock. A
    /// request, not a removal: a holder that does not watch keeps the lock; to take a
    /// lock away, end its holder's session.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name; `PermissionDenied`; `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the request may or may not have been written.
    pub async fn revoke_lock(&self, name: &str) -> Result<Option<FencingToken>> {
        let span = tracing::debug_span!("coord.revoke_lock", backend = self.kind(), name);
        async {
            loop {
                let view = crate::primitives::view::read_one(self, &LAYOUT, name).await?;
                let Some(holder) = view.holders.into_iter().next() else {
                    return Ok(None);
                };
                let entry = crate::raw::QueueEntry {
                    path: self.backend().path(&holder.path),
                    token: holder.token,
                    seen_at: 0,
                };
                if self
                    .backend()
                    .mark(&entry, crate::engine::contender::REVOKE.to_vec())
                    .await?
                {
                    return Ok(Some(holder.token));
                }
                // Released meanwhile: ask whoever holds it now.
            }
        }
        .instrument(span)
        .await
        .map_err(|e: Error| e.with_operation("revoke_lock"))
    }
}

/// A lock's contenders: Curator's `InterProcessMutex` (`lock-`) and kazoo's `Lock`
/// (`__lock__`); a kazoo reader on the same path (`__rlock__`) is waited for like any
/// contender, as kazoo's `Lock` does.
const CONTENDERS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lock-", "__lock__", "__rlock__"],
    kazoo_marker: Some("__lock__"),
}];

/// The queue of lock `name`: `locks/<name>` (Go's `concurrency.Mutex` prefix).
pub(crate) fn queue(name: &str) -> QueueSpec {
    QueueSpec::new("lock", format!("locks/{name}"), CONTENDERS, Admission::Exclusive)
}

#[async_trait]
impl Lock for Client {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new()).await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new()).await
    }

    async fn lock_with(&self, name: &str, options: LockOptions) -> Result<LockGuard> {
        self.lock_with_options(name, options, true, "lock")
            .await?
            .ok_or_else(|| no_grant("lock"))
    }

    async fn try_lock_with(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>> {
        self.lock_with_options(name, options, false, "try_lock").await
    }

    async fn holder(&self, name: &str) -> Result<Option<LockHolder>> {
        validate_name("lock name", name).map_err(|e| e.with_operation("holder"))?;
        let span = tracing::debug_span!("coord.lock_holder", backend = self.kind(), name);
        let head = self
            .backend()
            .head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("holder"))?;
        Ok(head.map(|h| LockHolder {
            token: h.token,
            holder: h.value,
        }))
    }
}

/// A waiting acquisition can only end with a grant or an error.
pub(crate) fn no_grant(op: &'static str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "a waiting acquisition returned without a grant",
    )
    .with_operation(op)
}

impl Client {
    /// Where lock `name`'s contenders live on the server, to point other clients at it:
    /// Curator's `InterProcessMutex` and kazoo's `Lock` path on ZooKeeper, the prefix of
    /// Go's `concurrency.NewMutex` and `etcdctl lock` on etcd.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn lock_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("lock name", name)?;
        Ok(self.backend().path(&queue(name).dir))
    }
}

/// How `coord inspect` reads locks: `locks/<name>`, whose first entry holds.
pub(crate) struct LockLayout;

/// [`LockLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: LockLayout = LockLayout;

#[async_trait::async_trait]
impl Layout for LockLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::Lock
    }

    fn root(&self) -> &'static str {
        "locks"
    }

    /// By the queue's own rule: the first entry holds.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        let name = view.name.clone();
        admit_by_rule(view, participants, |_| queue(&name));
    }

    fn lock_delay_queue(&self, name: &str) -> Option<QueueSpec> {
        Some(queue(name))
    }
}

#[cfg(test)]
mod tests {
    fn send_and_sync<T: Send + Sync>() {}

    /// Guards are shared across tasks (`Arc<LockGuard>`): whatever they hold must stay
    /// `Send + Sync`.
    #[test]
    fn guards_are_send_and_sync() {
        send_and_sync::<super::LockGuard>();
        send_and_sync::<crate::Leadership>();
    }
}
