//! The registrations a client re-creates on every new session.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{ErrorKind, Result};

/// One registration: the backend path of its node or key and its latest data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationEntry {
    /// Backend path (znode path, etcd key, mem key).
    pub path: String,
    /// Latest data (the JSON instance).
    pub data: Vec<u8>,
}

/// A client's live registrations by handle id. Thread-safe.
#[derive(Debug, Default)]
pub struct RegistrationBook {
    entries: Mutex<HashMap<u64, RegistrationEntry>>,
    next: AtomicU64,
}

impl RegistrationBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, RegistrationEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a registration; returns its id.
    pub fn add(&self, entry: RegistrationEntry) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, entry);
        id
    }

    /// The entry `id`, if still registered.
    pub fn get(&self, id: u64) -> Option<RegistrationEntry> {
        self.lock().get(&id).cloned()
    }

    /// Replaces the data of `id` (later re-registrations use it).
    pub fn update(&self, id: u64, data: Vec<u8>) {
        if let Some(e) = self.lock().get_mut(&id) {
            e.data = data;
        }
    }

    /// Forgets `id` (no more re-registration); returns its entry.
    pub fn remove(&self, id: u64) -> Option<RegistrationEntry> {
        self.lock().remove(&id)
    }

    /// Forgets everything (on close).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Every id and entry now.
    pub fn all(&self) -> Vec<(u64, RegistrationEntry)> {
        self.lock().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    /// Re-creates registration `id` on a new session with `create`, retrying every
    /// 200 ms (e.g. while a node of the previous session has not expired yet) until it
    /// succeeds, the registration is removed, `still_current()` turns false (the session
    /// ended again), another client turns out to own the id (`AlreadyExists`, logged), or
    /// `patience` runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future stops retrying; a create already sent may land.
    pub async fn reregister<F, Fut>(
        &self,
        id: u64,
        patience: Duration,
        still_current: impl Fn() -> bool,
        mut create: F,
    ) where
        F: FnMut(RegistrationEntry) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let until = tokio::time::Instant::now() + patience;
        loop {
            let Some(entry) = self.get(id) else { return };
            if !still_current() || tokio::time::Instant::now() > until {
                return;
            }
            let path = entry.path.clone();
            match create(entry).await {
                Ok(()) => {
                    tracing::info!(%path, "coord.reregistered");
                    return;
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    tracing::warn!(%path, "coord.reregister_conflict: another live client owns this instance id");
                    return;
                }
                Err(e) => {
                    tracing::debug!(%path, error = %e, "coord.reregister_retry");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}
