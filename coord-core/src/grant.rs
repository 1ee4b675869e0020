//! For backends: what a contender queue yields when it grants a turn, and the part of
//! `lock`, `try_lock` and `campaign` every backend shares around it: name and value
//! validation before any request, a `tracing` span, the operation named in errors, and
//! the guard or leadership built from the grant.

use std::future::Future;

use tracing::Instrument;

use crate::{
    EphemeralHandle, Error, ErrorKind, Fence, HoldWatch, Leadership, LockGuard, Result, validate_name,
    validate_value,
};

/// A granted turn: the contender node's fence, its hold state, and the handle that
/// removes (or updates) the node.
pub struct Grant {
    /// Token and identity of the contender node.
    pub fence: Fence,
    /// Follows the node's session: `Held`, `Suspended`, `Lost`.
    pub hold: HoldWatch,
    /// Removes the node on release or drop; updates its data on `proclaim`.
    pub handle: Box<dyn EphemeralHandle>,
}

/// `Lock::lock` around a backend's `acquire` (which waits for the turn): validates
/// `name` first, so `acquire` is only called for a valid name.
///
/// # Errors
///
/// `InvalidArgument` for a bad name; otherwise `acquire`'s error, tagged `lock`.
///
/// # Cancel safety
///
/// As cancel-safe as `acquire`'s future: dropping it must remove the contender.
pub async fn lock<F, Fut>(backend: &'static str, name: &str, acquire: F) -> Result<LockGuard>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Option<Grant>>>,
{
    validate_name("lock name", name).map_err(|e| e.with_operation("lock"))?;
    let span = tracing::debug_span!("coord.lock", backend, name);
    let grant = acquire()
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("lock"))?
        .ok_or_else(|| no_grant("lock"))?;
    Ok(LockGuard::new(name, grant.fence, grant.hold, grant.handle))
}

/// `Lock::try_lock` around a backend's `acquire` (which must not wait: `None` when
/// another contender is ahead). Validates `name` first.
///
/// # Errors
///
/// `InvalidArgument` for a bad name; otherwise `acquire`'s error, tagged `try_lock`.
///
/// # Cancel safety
///
/// As cancel-safe as `acquire`'s future.
pub async fn try_lock<F, Fut>(backend: &'static str, name: &str, acquire: F) -> Result<Option<LockGuard>>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Option<Grant>>>,
{
    validate_name("lock name", name).map_err(|e| e.with_operation("try_lock"))?;
    let span = tracing::debug_span!("coord.try_lock", backend, name);
    let grant = acquire()
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("try_lock"))?;
    Ok(grant.map(|g| LockGuard::new(name, g.fence, g.hold, g.handle)))
}

/// `Election::campaign` around a backend's `acquire` (which waits for the turn and is
/// given a copy of `value` to store in the candidate node). Validates `name` and
/// `value` first.
///
/// # Errors
///
/// `InvalidArgument` for a bad name or oversized value; otherwise `acquire`'s error,
/// tagged `campaign`.
///
/// # Cancel safety
///
/// As cancel-safe as `acquire`'s future: dropping it must remove the candidate.
pub async fn campaign<F, Fut>(
    backend: &'static str,
    name: &str,
    value: Vec<u8>,
    acquire: F,
) -> Result<Leadership>
where
    F: FnOnce(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Option<Grant>>>,
{
    validate_name("election name", name).map_err(|e| e.with_operation("campaign"))?;
    validate_value("leader value", &value).map_err(|e| e.with_operation("campaign"))?;
    let span = tracing::debug_span!("coord.campaign", backend, name);
    let grant = acquire(value.clone())
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("campaign"))?
        .ok_or_else(|| no_grant("campaign"))?;
    Ok(Leadership::new(
        name,
        grant.fence,
        value,
        grant.hold,
        grant.handle,
    ))
}

fn no_grant(op: &'static str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "a waiting acquisition returned without a grant",
    )
    .with_operation(op)
}
