//! What every handle of one client shares: the backend, the engine's per-client state
//! (local turns, owed cleanups, lock-delay holds) and each primitive's own, kept by type
//! so that the engine knows no primitive. Its drop ends the session.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::local_queue::LocalQueue;
use crate::raw::Backend;

/// What every handle of one client shares: the backend and the recipes' per-client
/// state. Its drop ends the session.
pub(crate) struct ClientCore {
    pub(crate) backend: Arc<dyn Backend>,
    /// This client's contenders per queue (directory and class): an exclusive queue's
    /// take turns at its key, one on the server at a time; a shared queue's each hold a
    /// slot of their own (`<key>\0<slot>`).
    pub(crate) contenders: LocalQueue,
    /// Whether this client's registrations are re-created on every new session (started
    /// by the first registration).
    pub(crate) registrations_followed: std::sync::OnceLock<()>,
    /// Waiting contenders woken by the entry ahead of them going ((`Stats::wakeups`)).
    pub(crate) wakeups: std::sync::atomic::AtomicU64,
    /// Cleanups owed to the server (a queue take's receipt, its taker lock), finished by
    /// `Client::close` before it ends the session.
    pub(crate) pending: crate::engine::pending::Pending,
    /// Each primitive's own per-client state, one value per type ([`ClientCore::state`]).
    states: std::sync::Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// This client's grants held with a lock-delay, released with their marks by
    /// `Client::close` before it ends the session (so their waiters need not hold off).
    pub(crate) marked_holds: crate::engine::marked_holds::MarkedHolds,
    /// Where to end the session when the last handle is dropped outside the runtime.
    runtime: Option<tokio::runtime::Handle>,
}

impl Drop for ClientCore {
    fn drop(&mut self) {
        let backend = self.backend.clone();
        let close = async move {
            if let Err(e) = backend.close().await {
                tracing::debug!(error = %e, "coord.close_on_drop_failed: the session ends by timeout");
            }
        };
        match self
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        {
            Some(rt) => {
                rt.spawn(close);
            }
            // No runtime left: the backend's tasks have stopped with it, and the server
            // ends the session by timeout.
            None => tracing::debug!("coord.close_on_drop_skipped: no runtime"),
        }
    }
}

impl ClientCore {
    /// The state of a client over `backend`, with nothing held yet.
    pub(crate) fn new(backend: Arc<dyn Backend>) -> ClientCore {
        ClientCore {
            backend,
            contenders: LocalQueue::default(),
            registrations_followed: std::sync::OnceLock::new(),
            wakeups: Default::default(),
            pending: Default::default(),
            states: Default::default(),
            marked_holds: Default::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// A primitive's per-client state of type `T`, made with `T::default()` on first use
    /// and shared by every handle of the client after.
    pub(crate) fn state<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let any = states
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        match any.downcast::<T>() {
            Ok(state) => state,
            // The map holds a `T` under `T`'s id: never reached.
            Err(_) => Arc::new(T::default()),
        }
    }
}

/// A client's identity in this process: the address of its backend, shared by every
/// clone of the client and by every grant it makes.
pub(crate) fn origin_of(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}
