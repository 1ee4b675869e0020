//! The counting semaphore, Curator's `InterProcessSemaphoreV2` algorithm over the
//! contender queue: take the semaphore's internal lock (FIFO, herd-free), join the leases
//! and wait until fewer than `permits` leases are ahead — watching them, as the only
//! acquirer that does — then give the internal lock up.

use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::lock::LockGuard;
use crate::raw::{Admission, EntryClass, QueueSpec};
use crate::recipes::contender::acquire;
use crate::recipes::lock::no_grant;
use crate::semaphore::Semaphore;

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
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.take(true, "acquire")
            .await?
            .ok_or_else(|| no_grant("acquire"))
    }

    /// Takes a lease if one is free now; `None` when every permit is held or another
    /// acquirer is at the front (which waits only while every permit is held).
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
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.take(false, "try_acquire").await
    }

    async fn take(&self, wait: bool, op: &'static str) -> Result<Option<LockGuard>> {
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

    async fn take_inner(&self, wait: bool) -> Result<Option<LockGuard>> {
        let gate = gate_queue(&self.name);
        let leases = lease_queue(&self.name, self.permits);
        let Some(gate) = acquire(&self.client, gate, Vec::new(), wait).await? else {
            return Ok(None);
        };
        let gate = LockGuard::new(self.name.clone(), gate);
        // Leases are made only under the internal lock, so the oldest lease coord made
        // holds the count every held lease of coord's agrees on.
        if let Some(oldest) = self.client.backend().head(&leases).await? {
            if let Some(stored) = std::str::from_utf8(&oldest.value)
                .ok()
                .and_then(|v| v.parse::<u32>().ok())
            {
                if stored != self.permits {
                    release_gate(gate).await;
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!(
                            "semaphore {:?} is held with {stored} permits, not {}: every client must use the same count \
                             (it can change once no lease is held)",
                            self.name, self.permits
                        ),
                    ));
                }
            }
        }
        let lease = acquire(&self.client, leases, self.permits.to_string().into_bytes(), wait).await;
        release_gate(gate).await;
        Ok(lease?.map(|g| LockGuard::new(self.name.clone(), g)))
    }
}

/// Gives the internal lock up; a removal the server refuses is logged (the entry goes
/// with the session, as any contender's).
async fn release_gate(gate: LockGuard) {
    if let Err(e) = gate.release().await {
        tracing::warn!(error = %e, "coord.semaphore_gate_release_refused");
    }
}
