//! The registrations a client re-creates on every new session, and their state signals.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, ErrorKind, Result};
use crate::raw::Backoff;
use crate::types::RegistrationState;

/// One registration: the backend path of its node or key and its latest data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationEntry {
    /// Backend path (znode path, etcd key, mem key).
    pub path: String,
    /// Latest data (the JSON instance).
    pub data: Vec<u8>,
}

/// Publishes `state` if it differs from the current one.
fn set(tx: &watch::Sender<RegistrationState>, state: RegistrationState) {
    tx.send_if_modified(|now| {
        let changed = *now != state;
        if changed {
            *now = state;
        }
        changed
    });
}

#[derive(Debug)]
struct Slot {
    entry: RegistrationEntry,
    state: watch::Sender<RegistrationState>,
}

/// A client's live registrations by handle id, each with the state its
/// [`Registration`](crate::Registration) shows. Thread-safe.
#[derive(Debug, Default)]
pub struct RegistrationBook {
    entries: Mutex<HashMap<u64, Slot>>,
    next: AtomicU64,
}

/// How [`RegistrationBook::reregister`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reregistered {
    /// The instance is registered on the session.
    Created,
    /// The session ended (or the client closed) first; the next session retries.
    SessionOver,
    /// Failed for good (the state says why).
    Failed,
    /// Deregistered before any create was tried.
    Forgotten,
    /// Deregistered while a create was tried: it may have landed after the
    /// deregistration's delete, and must be deleted again.
    ForgottenAfterCreate,
}

/// Whether re-registering after `e` can ever succeed. An id another client holds may be
/// freed (typically a crashed predecessor whose session has not expired yet), so
/// `AlreadyExists` is retried; refusals and bad input are not.
fn permanent(e: &Error) -> bool {
    !e.is_retryable() && e.kind() != ErrorKind::AlreadyExists
}

impl RegistrationBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Slot>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a registration that was just created (state `Registered`); returns its
    /// id and the state signal for its `Registration`.
    pub fn add(&self, entry: RegistrationEntry) -> (u64, watch::Receiver<RegistrationState>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (state, rx) = watch::channel(RegistrationState::Registered);
        self.lock().insert(id, Slot { entry, state });
        (id, rx)
    }

    /// The entry `id`, if still registered.
    pub fn get(&self, id: u64) -> Option<RegistrationEntry> {
        self.lock().get(&id).map(|s| s.entry.clone())
    }

    /// Replaces the data of `id` (later re-registrations use it).
    pub fn update(&self, id: u64, data: Vec<u8>) {
        if let Some(s) = self.lock().get_mut(&id) {
            s.entry.data = data;
        }
    }

    /// Forgets `id` (no more re-registration); returns its entry.
    pub fn remove(&self, id: u64) -> Option<RegistrationEntry> {
        self.lock().remove(&id).map(|s| s.entry)
    }

    /// Forgets everything (on close); every registration reports `Failed(Closed)`.
    pub fn clear(&self) {
        for (_, slot) in self.lock().drain() {
            slot.state
                .send_replace(RegistrationState::Failed(Error::closed()));
        }
    }

    /// Every id and entry now.
    pub fn all(&self) -> Vec<(u64, RegistrationEntry)> {
        self.lock().iter().map(|(k, v)| (*k, v.entry.clone())).collect()
    }

    /// Sets the state `id` shows (watchers are woken only by a change).
    pub fn set_state(&self, id: u64, state: RegistrationState) {
        if let Some(s) = self.lock().get(&id) {
            set(&s.state, state);
        }
    }

    /// Every registration is gone with the session: they show `Retrying` until
    /// re-created.
    pub fn session_lost(&self) {
        for slot in self.lock().values() {
            set(&slot.state, RegistrationState::Retrying);
        }
    }

    /// Re-creates registration `id` on a new session with `create`, retrying with a
    /// jittered backoff (`Retrying` meanwhile) until it succeeds (`Registered`), the
    /// registration is removed, `still_current()` turns false (the session ended again;
    /// the next session retries), or an error shows retrying cannot help
    /// (`Failed(error)`, logged). It never gives up otherwise: an id held by another
    /// client is retried until that client lets go.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future stops retrying; a create already sent may land.
    pub async fn reregister<F, Fut>(
        &self,
        id: u64,
        still_current: impl Fn() -> bool,
        mut create: F,
    ) -> Reregistered
    where
        F: FnMut(RegistrationEntry) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut warned = false;
        let mut tried = false;
        loop {
            let Some(entry) = self.get(id) else {
                return if tried {
                    Reregistered::ForgottenAfterCreate
                } else {
                    Reregistered::Forgotten
                };
            };
            if !still_current() {
                return Reregistered::SessionOver;
            }
            let path = entry.path.clone();
            tried = true;
            match create(entry).await {
                Ok(()) if self.get(id).is_none() => return Reregistered::ForgottenAfterCreate,
                Ok(()) => {
                    tracing::info!(%path, "coord.reregistered");
                    self.set_state(id, RegistrationState::Registered);
                    return Reregistered::Created;
                }
                Err(e) if permanent(&e) => {
                    tracing::warn!(%path, error = %e, "coord.reregister_failed: the instance stays unregistered");
                    self.set_state(id, RegistrationState::Failed(e));
                    return Reregistered::Failed;
                }
                Err(e) => {
                    if e.kind() == ErrorKind::AlreadyExists && !warned {
                        warned = true;
                        tracing::warn!(%path, "coord.reregister_conflict: another client holds this instance id; retrying until it is free");
                    } else {
                        tracing::debug!(%path, error = %e, "coord.reregister_retry");
                    }
                    self.set_state(id, RegistrationState::Retrying);
                    backoff.wait().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn entry() -> RegistrationEntry {
        RegistrationEntry {
            path: "svc/a".into(),
            data: b"{}".to_vec(),
        }
    }

    /// An id taken by someone else is retried past any fixed patience, and the state
    /// says so meanwhile.
    #[tokio::test(start_paused = true)]
    async fn retries_a_taken_id_until_free() {
        let book = RegistrationBook::default();
        let (id, mut state) = book.add(entry());
        book.session_lost();
        assert_eq!(state.borrow_and_update().clone(), RegistrationState::Retrying);
        let attempts = AtomicUsize::new(0);
        book.reregister(
            id,
            || true,
            |_| {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 100 {
                        Err(Error::new(ErrorKind::AlreadyExists, "taken"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .await;
        assert_eq!(attempts.load(Ordering::SeqCst), 101);
        assert_eq!(state.borrow().clone(), RegistrationState::Registered);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_fail_and_removal_stops() {
        let book = RegistrationBook::default();
        let (id, state) = book.add(entry());
        book.reregister(
            id,
            || true,
            |_| async { Err(Error::new(ErrorKind::PermissionDenied, "acl")) },
        )
        .await;
        assert!(
            matches!(state.borrow().clone(), RegistrationState::Failed(e) if e.kind() == ErrorKind::PermissionDenied)
        );
        let (id, _) = book.add(entry());
        book.remove(id);
        book.reregister(
            id,
            || true,
            |_| async { panic!("a removed registration was re-created") },
        )
        .await;
        book.clear();
        assert!(matches!(state.borrow().clone(), RegistrationState::Failed(_)));
    }
}
