//! Distributed counting semaphores with fencing tokens.
//!
//! The counting semaphore, Curator's `InterProcessSemaphoreV2` algorithm over the
//! contender queue: take the semaphore's internal lock (FIFO, herd-free), join the leases
//! and wait until fewer than `permits` leases are ahead — watching them, as the only
//! acquirer that does — then give the internal lock up.

use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{acquire, suspended, try_deadline, unless_suspended};
use crate::error::{Error, ErrorKind, Result};
use crate::name::{validate_name, validate_value};
use crate::primitives::lock::{LockGuard, guard_type, no_grant};
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView, split_role};
use crate::raw::{Admission, EntryClass, QueueSpec};
use crate::session::SessionState;

guard_type!(
    /// A semaphore lease, held until released or dropped: one of the semaphore's
    /// `permits`, with a fencing token above every earlier lease's of the semaphore.
    /// Releasing (or dropping) it returns the permit; it is lost with the session.
    Lease,
    "lease"
);

/// The most permits a semaphore may have: the one acquirer that waits watches every
/// lease ahead of it.
pub const MAX_PERMITS: u32 = 1000;

/// A fair (FIFO), herd-free counting semaphore: at most `permits` leases are held at
/// once. Made by [`Client::semaphore`]; cheap to clone.
///
/// Each lease is bound to the client's session: a holder that crashes gives its lease
/// back when its session ends (within the session timeout or lease TTL). Acquirers queue
/// in arrival order on the semaphore's internal lock; only the one at the front watches
/// the leases, and it holds the internal lock only until it has its lease — so a release
/// notifies one waiting client, however many wait. One client may hold several leases
/// at once.
///
/// The permit count is stored with every lease coord makes; a client that asks for
/// another count while leases are held gets an error instead of silently changing the
/// limit. Once no lease is held, the next acquirer's count applies.
///
/// On the server: ZooKeeper, Curator's `InterProcessSemaphoreV2` layout
/// (`semaphores/<name>/locks` for the internal lock, `semaphores/<name>/leases` for
/// `_c_<guid>-lease-<seq>` leases), so coord and Curator share a semaphore on the same
/// path when both use the same count (Curator stores no count: coord checks only the
/// counts coord wrote); etcd and mem, the same two directories of keys under the lease.
///
/// # Fencing
///
/// Every lease has a [`FencingToken`](crate::FencingToken) above every earlier lease's on
/// the semaphore; up to `permits` holders hold at once, so their tokens overlap by
/// design. A lease's [`fence`](crate::Granted::fence) makes a config write conditional
/// on that lease still being held.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use coord_core::Granted as _;
/// let client = coord_mem::connect("mem://semaphore-doc")?;
/// let slots = client.semaphore("gpu", 2)?;
/// let a = slots.acquire().await?;
/// let b = slots.acquire().await?;
/// assert!(slots.try_acquire().await?.is_none(), "both permits are held");
/// a.release().await?;
/// let c = slots.acquire().await?;
/// assert!(c.token() > b.token());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    client: Client,
    name: String,
    permits: u32,
    /// Who holds the leases this handle takes (see [`Semaphore::with_options`]).
    holder: Vec<u8>,
    /// See [`Semaphore::with_options`].
    lock_delay: Option<std::time::Duration>,
}

impl Client {
    /// The counting semaphore `name` with `permits` leases (no request; each acquisition
    /// is a few).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name, or `permits` outside `1..=`[`MAX_PERMITS`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        validate_name("semaphore name", name).map_err(|e| e.with_operation("semaphore"))?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a semaphore needs 1 to {MAX_PERMITS} permits, not {permits}"),
            )
            .with_operation("semaphore"));
        }
        Ok(Semaphore {
            client: self.clone(),
            name: name.to_owned(),
            permits,
            holder: Vec::new(),
            lock_delay: None,
        })
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many leases hold at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The same semaphore, whose leases taken from now on are taken with `options`
    /// (which replace any given before):
    ///
    /// - [`LockOptions::holder`](crate::LockOptions::holder) (an identity such as
    ///   `host:pid`) follows the permit count in each lease's value, on a line of its
    ///   own (`3\nhost-a:41`), and [`Client::inspect`] shows it as the lease's value.
    ///   Empty by default (the value is the count alone).
    /// - [`LockOptions::lock_delay`](crate::LockOptions::lock_delay): a lease that
    ///   frees because its holder vanished (session expired, entry deleted) is taken by
    ///   a waiter only after the delay; a released lease at once. As
    ///   [`Lock::lock_with`](crate::Lock::lock_with) describes, including what it does
    ///   not cover; with several leases going at once, a waiter may hold off after a
    ///   release it could not tell from a vanishing.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the holder is over the value size limit, or the lock-delay
    /// over [`MAX_LOCK_DELAY`](crate::MAX_LOCK_DELAY) — before any request.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::{LockOptions, RecipeKind};
    /// let client = coord_mem::connect("mem://semaphore-holder-doc")?;
    /// let gpu = client.semaphore("gpu", 2)?.with_options(LockOptions::new().holder("host-a:41"))?;
    /// let lease = gpu.acquire().await?;
    /// let view = client.inspect_one(RecipeKind::Semaphore, "gpu").await?;
    /// assert_eq!(view.holders[0].value, b"host-a:41");
    /// assert_eq!(view.permits, Some(2));
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(mut self, options: crate::LockOptions) -> Result<Semaphore> {
        validate_value("semaphore holder", &options.holder).map_err(|e| e.with_operation("semaphore"))?;
        crate::engine::contender::check_lock_delay(options.lock_delay)
            .map_err(|e| e.with_operation("semaphore"))?;
        self.holder = options.holder;
        self.lock_delay = options.lock_delay.filter(|d| !d.is_zero());
        Ok(self)
    }

    /// A lease's value: the permit count, then the holder on a line of its own.
    fn lease_value(&self) -> Vec<u8> {
        let mut value = self.permits.to_string().into_bytes();
        if !self.holder.is_empty() {
            value.push(b'\n');
            value.extend_from_slice(&self.holder);
        }
        value
    }
}

/// The permit count and the holder a lease of coord's records (see
/// [`Semaphore::with_options`]); `None` for another library's lease (Curator writes the
/// host's address).
pub(crate) fn parse_lease(value: &[u8]) -> Option<(u32, &[u8])> {
    let (count, holder) = match value.iter().position(|&b| b == b'\n') {
        Some(i) => (&value[..i], &value[i + 1..]),
        None => (value, &value[value.len()..]),
    };
    let count = std::str::from_utf8(count).ok()?.parse().ok()?;
    Some((count, holder))
}

/// The acquirers of a semaphore's internal lock: Curator's `InterProcessSemaphoreV2`
/// `locks` mutex (`lock-`).
const ACQUIRERS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lock-"],
    kazoo_marker: None,
}];

/// A semaphore's leases: Curator's `InterProcessSemaphoreV2` `leases` (`lease-`).
const LEASES: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lease-"],
    kazoo_marker: None,
}];

/// Semaphore `name`'s directory: `semaphores/<name>`, Curator's layout.
pub(crate) fn dir(name: &str) -> String {
    format!("semaphores/{name}")
}

/// The internal lock of semaphore `name`: `semaphores/<name>/locks`, held only while
/// acquiring a lease, so that one acquirer at a time watches the leases.
pub(crate) fn gate_queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "semaphore_lock",
        format!("{}/locks", dir(name)),
        ACQUIRERS,
        Admission::Exclusive,
    )
}

/// The leases of semaphore `name`: `semaphores/<name>/leases`, held while fewer than
/// `permits` are ahead.
pub(crate) fn lease_queue(name: &str, permits: u32) -> QueueSpec {
    QueueSpec::new(
        "semaphore",
        format!("{}/leases", dir(name)),
        LEASES,
        Admission::Permits(permits),
    )
}

impl Semaphore {
    /// Waits until this client holds a lease: fewer than `permits` others are held.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` if leases made with another permit count are held;
    /// `SessionLost` if the session was lost while waiting (call again to queue on the
    /// new one); `Unavailable`, `Timeout`, `Closed`, `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves neither a lease nor a place on the internal
    /// lock behind (removed in the background), and the acquirers behind it move on.
    pub async fn acquire(&self) -> Result<Lease> {
        self.take(true, "acquire")
            .await?
            .ok_or_else(|| no_grant("acquire"))
    }

    /// Takes a lease if one is free now; `None` when every permit is held. An acquirer
    /// busy at the internal lock (of this client or another) does not make it fail: a
    /// try does not take that lock, so on an idle semaphore of `n` permits, `n`
    /// concurrent tries all get a lease.
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
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        self.take(false, "try_acquire").await
    }

    async fn take(&self, wait: bool, op: &'static str) -> Result<Option<Lease>> {
        let span = tracing::debug_span!(
            "coord.semaphore",
            backend = self.client.kind(),
            name = %self.name,
            permits = self.permits,
            op
        );
        self.take_inner(wait)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation(op))
    }

    async fn take_inner(&self, wait: bool) -> Result<Option<Lease>> {
        let leases = lease_queue(&self.name, self.permits).with_lock_delay(self.lock_delay);
        if !wait {
            return self.try_take(leases).await;
        }
        let Some(gate) = acquire(self.client.core(), gate_queue(&self.name), Vec::new(), true).await? else {
            return Ok(None);
        };
        let gate = LockGuard::new(self.name.clone(), gate);
        // Leases are made only under the internal lock, so the oldest lease coord made
        // holds the count every held lease of coord's agrees on.
        if let Err(e) = self.check_count(&leases).await {
            release_gate(gate).await;
            return Err(e);
        }
        let lease = acquire(self.client.core(), leases.clone(), self.lease_value(), true).await;
        release_gate(gate).await;
        let Some(lease) = lease?.map(|g| Lease::from(LockGuard::new(self.name.clone(), g))) else {
            return Ok(None);
        };
        // A try (which skips the internal lock) with another count may have made its
        // lease between the check above and this one's: checked again now that this one
        // holds. Of two leases of different counts, each sees the older one and at
        // least one of them refuses.
        if let Err(e) = self.check_count(&leases).await {
            let _ = lease.release().await;
            return Err(e);
        }
        Ok(Some(lease))
    }

    /// A lease if fewer than `permits` are held now, without the internal lock: the
    /// lock only keeps waiting acquirers from all watching the leases, and a try never
    /// waits. Taking it would make a try fail whenever another acquirer (of this client
    /// or another) held it for a moment on an idle semaphore. Admission is the same: a
    /// lease holds while fewer than `permits` leases are older, so a try's lease never
    /// makes more than `permits` hold, and one that finds them all held is removed.
    async fn try_take(&self, leases: QueueSpec) -> Result<Option<Lease>> {
        self.check_count_unless_suspended(&leases).await?;
        let Some(grant) = acquire(self.client.core(), leases.clone(), self.lease_value(), false).await?
        else {
            return Ok(None);
        };
        let lease = Lease::from(LockGuard::new(self.name.clone(), grant));
        // Without the internal lock, a lease of another count may have been made beside
        // this one: checked again now that this one holds.
        if let Err(e) = self.check_count_unless_suspended(&leases).await {
            let _ = lease.release().await;
            return Err(e);
        }
        Ok(Some(lease))
    }

    /// [`Semaphore::check_count`] for a try: fails at once, retryable, when the session
    /// is or becomes suspended instead of waiting out the outage.
    async fn check_count_unless_suspended(&self, leases: &QueueSpec) -> Result<()> {
        let mut session = self.client.backend().session();
        let generation = session.borrow().generation;
        if session.borrow().state == SessionState::Suspended {
            return Err(suspended());
        }
        unless_suspended(
            &mut session,
            generation,
            false,
            try_deadline(self.client.session_timeout()),
            self.check_count(leases),
        )
        .await
    }

    /// Refuses a permit count other than the one the oldest held lease of coord's was
    /// made with.
    async fn check_count(&self, leases: &QueueSpec) -> Result<()> {
        let Some(oldest) = self.client.backend().head(leases).await? else {
            return Ok(());
        };
        match parse_lease(&oldest.value).map(|(count, _)| count) {
            Some(stored) if stored != self.permits => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "semaphore {:?} is held with {stored} permits, not {}: every client must use the same count \
                     (it can change once no lease is held)",
                    self.name, self.permits
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Gives the internal lock up; a removal the server refuses is logged (the entry goes
/// with the session, as any contender's).
async fn release_gate(gate: LockGuard) {
    if let Err(e) = gate.release().await {
        tracing::warn!(error = %e, "coord.semaphore_gate_release_refused");
    }
}

impl Client {
    /// Where semaphore `name` lives: Curator's `InterProcessSemaphoreV2` path (its
    /// internal lock under `locks`, its leases under `leases`).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn semaphore_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("semaphore name", name)?;
        Ok(self.backend().path(&dir(name)))
    }
}

/// How `coord inspect` reads semaphores: `semaphores/<name>`, its leases and acquirers.
pub(crate) struct SemaphoreLayout;

/// [`SemaphoreLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: SemaphoreLayout = SemaphoreLayout;

#[async_trait::async_trait]
impl Layout for SemaphoreLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::Semaphore
    }

    fn root(&self) -> &'static str {
        "semaphores"
    }

    fn name_and_role(&self, rel: &str, _name: &str) -> Option<(String, &'static str)> {
        split_role(rel, &[("leases", "lease"), ("locks", "acquirer")])
    }

    /// The first `permits` leases hold (every lease, when no lease of coord's says how
    /// many); a waiting acquirer is shown once, by its lease beyond the permits.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        let (leases, acquirers): (Vec<_>, Vec<_>) = participants.into_iter().partition(|p| p.role == "lease");
        view.permits = leases
            .first()
            .and_then(|p| parse_lease(&p.value))
            .map(|(count, _)| count);
        // A lease of coord's shows its holder as its value (the count is in `permits`).
        let leases: Vec<Participant> = leases
            .into_iter()
            .map(|mut p| {
                if let Some((_, holder)) = parse_lease(&p.value) {
                    p.value = holder.to_vec();
                }
                p
            })
            .collect();
        let held = view.permits.map_or(leases.len(), |n| n as usize);
        let mut it = leases.into_iter();
        view.holders.extend(it.by_ref().take(held));
        view.waiters.extend(it);
        // A waiting acquirer holds the acquirers' lock and a lease beyond the permits at
        // once: one waiter, shown once (by its lease).
        let waiting: std::collections::HashSet<u64> = view.waiters.iter().map(|p| p.session).collect();
        view.waiters
            .extend(acquirers.into_iter().filter(|p| !waiting.contains(&p.session)));
    }

    fn lock_delay_queue(&self, name: &str) -> Option<QueueSpec> {
        Some(lease_queue(name, 1))
    }
}
