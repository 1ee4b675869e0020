//! Registrations written once over a backend's [`InstanceStore`]: register, re-register
//! on every new session, update, and deregister with guaranteed removal — including the
//! node of a create whose outcome was unknown, or whose future was dropped.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::Instrument;

use crate::engine::removal;
use crate::error::{Error, Result};
use crate::name::validate_name;
use crate::raw::InstanceStore;
use crate::raw::registrations::{RegistrationEntry, Reregistered};
use crate::session::{SessionState, SessionStatus};
use crate::types::{RegistrationState, ServiceInstance};

/// Deletes `path` through `store` until gone or session `generation` has ended.
async fn delete_until_gone(store: &dyn InstanceStore, path: &str, generation: u64) -> Result<()> {
    let session = store.state().session.subscribe();
    removal::until_gone(session, generation, path, || store.delete_instance(path)).await
}

/// A node that may exist and must not outlive its create: deleted in the background on
/// drop unless disarmed.
struct Pending {
    store: Arc<dyn InstanceStore>,
    path: String,
    generation: u64,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The create went out on whichever session was current when it was sent, which
        // may be a newer one than the session current when `register` began: remove the
        // node on the session current now (a node of a session in between went with it).
        let (store, path) = (self.store.clone(), std::mem::take(&mut self.path));
        let generation = store.state().session.current().generation.max(self.generation);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = delete_until_gone(&*store, &path, generation).await {
                    tracing::warn!(error = %e, %path, "coord.register_cleanup_failed: the instance goes when the session ends");
                }
            });
        }
    }
}

/// A registration made: the handle that updates and removes it, and its state.
pub(crate) struct Registered {
    pub(crate) handle: Box<dyn RegistrationHandle>,
    pub(crate) state: tokio::sync::watch::Receiver<RegistrationState>,
}

/// `Registry::register`, for every backend: validates `service` and the instance,
/// creates `<dir>/<id>` on the current session, and records it for re-registration.
///
/// # Errors
///
/// `InvalidArgument` before any request; `AlreadyExists` when another client holds the
/// id; the store's errors.
///
/// # Cancel safety
///
/// Cancel-safe: if dropped after the create was sent — or when the create failed with
/// an unknown outcome — the node is removed in the background.
pub(crate) async fn register(
    store: &Arc<dyn InstanceStore>,
    service: &str,
    instance: &ServiceInstance,
    dir: &str,
) -> Result<Registered> {
    let op = "register";
    validate_name("service name", service).map_err(|e| e.with_operation(op))?;
    let data = instance.encode().map_err(|e| e.with_operation(op))?;
    let state = store.state();
    let span =
        tracing::debug_span!("coord.register", backend = state.session.backend(), service, id = %instance.id);
    let path = format!("{dir}/{}", instance.id);
    async {
        if state.is_closed() {
            return Err(Error::closed().with_operation(op));
        }
        let generation = state.session.current().generation;
        let mut pending = Pending {
            store: store.clone(),
            path: path.clone(),
            generation,
            armed: true,
        };
        if let Err(e) = store.create_instance(&path, &data).await {
            // Only a refusal proves nothing was made; anything else may hide a node that
            // landed (a backend that lost track of an unknown outcome included), and the
            // cleanup removes only a node of this client's current session.
            pending.armed = e.outcome_unknown() || !definitely_not_made(&e);
            return Err(e.with_operation(op));
        }
        pending.armed = false;
        let (id, rx) = state.registrations.add(RegistrationEntry {
            path: path.clone(),
            data,
        });
        let now = state.session.current().generation;
        if now != generation {
            // The session changed during the create: the new session's re-registration
            // started before this entry existed, so start one for it.
            state.registrations.set_state(id, RegistrationState::Retrying);
            reregister(store.clone(), id, now);
        }
        let handle = StoreRegistration {
            store: store.clone(),
            id,
            path,
        };
        Ok(Registered {
            handle: Box::new(handle),
            state: rx,
        })
    }
    .instrument(span)
    .await
}

/// Whether a failed create certainly made nothing: the server refused it.
fn definitely_not_made(e: &Error) -> bool {
    use crate::error::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::AlreadyExists
            | ErrorKind::PermissionDenied
            | ErrorKind::InvalidArgument
            | ErrorKind::ConfigInvalid
            | ErrorKind::Unsupported
            | ErrorKind::Closed
    )
}

/// Re-creates every registration of `store`'s client on its new session `generation`,
/// one task each (an instance may have to wait for a node of an earlier session to
/// expire), with [`RegistrationBook::reregister`](crate::raw::RegistrationBook::reregister)'s
/// retries. A task stops when that session ends; the next session starts its own.
pub(crate) fn reregister_all(store: &Arc<dyn InstanceStore>, generation: u64) {
    for (id, _) in store.state().registrations.all() {
        reregister(store.clone(), id, generation);
    }
}

/// Re-creates `store`'s registrations on every new session from now on, until the
/// client is closed: the registration lifecycle, run once per client for every backend.
pub(crate) fn follow_sessions(store: Arc<dyn InstanceStore>) {
    let mut session = store.state().session.subscribe();
    let mut seen = session.borrow().generation;
    tokio::spawn(async move {
        while session.changed().await.is_ok() {
            let now = *session.borrow_and_update();
            match now.state {
                SessionState::Closed => return,
                SessionState::Connected if now.generation > seen => {
                    seen = now.generation;
                    reregister_all(&store, now.generation);
                }
                _ => {}
            }
        }
    });
}

fn reregister(store: Arc<dyn InstanceStore>, id: u64, generation: u64) {
    tokio::spawn(async move {
        let state = store.state();
        let still_current = || !removal::over(state.session.current(), generation);
        let mut path = String::new();
        let create = |entry: RegistrationEntry| {
            path = entry.path.clone();
            let store = store.clone();
            async move { store.create_instance(&entry.path, &entry.data).await }
        };
        let outcome = state.registrations.reregister(id, still_current, create).await;
        // Deregistered while a create was under way: that create may have landed after
        // the deregistration's delete. Delete it again.
        if outcome == Reregistered::ForgottenAfterCreate && !path.is_empty() {
            if let Err(e) = delete_until_gone(&*store, &path, generation).await {
                tracing::warn!(error = %e, %path, "coord.reregister_cleanup_failed: the instance goes when the session ends");
            }
        }
    });
}

/// What a registration holds to update or remove its instance.
#[async_trait]
pub(crate) trait RegistrationHandle: Send + Sync + 'static {
    /// Replaces the instance's data on the server (if registered now) and for every
    /// later re-registration.
    async fn update(&self, value: Vec<u8>) -> Result<()>;
    /// Stops re-registering the instance. Called once, first thing on deregistration.
    fn forget(&self);
    /// One attempt to delete the instance's node of the current session.
    async fn delete(&self) -> Result<()>;
    /// The client's session status, which bounds the retries of `delete`.
    fn session(&self) -> watch::Receiver<SessionStatus>;
}

struct StoreRegistration {
    store: Arc<dyn InstanceStore>,
    id: u64,
    path: String,
}

#[async_trait]
impl RegistrationHandle for StoreRegistration {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        self.store.state().registrations.update(self.id, value.clone());
        self.store.update_instance(&self.path, &value).await
    }

    fn forget(&self) {
        self.store.state().registrations.remove(self.id);
    }

    async fn delete(&self) -> Result<()> {
        self.store.delete_instance(&self.path).await
    }

    fn session(&self) -> watch::Receiver<SessionStatus> {
        self.store.state().session.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::error::ErrorKind;
    use crate::raw::client_state::ClientState;

    /// A store whose creates land while it reports them as failed, the way a backend
    /// that lost track of an ambiguous create (or met a session switch) does.
    struct Ghostly {
        state: ClientState,
        nodes: Mutex<Vec<String>>,
        /// The error each create reports, after making its node.
        fail_with: ErrorKind,
    }

    impl crate::raw::Stateful for Ghostly {
        fn state(&self) -> &ClientState {
            &self.state
        }
    }

    #[async_trait]
    impl InstanceStore for Ghostly {
        async fn create_instance(&self, path: &str, _data: &[u8]) -> Result<()> {
            self.nodes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(path.to_owned());
            Err(Error::new(
                self.fail_with,
                "the connection failed; the re-read too",
            ))
        }

        async fn update_instance(&self, _path: &str, _data: &[u8]) -> Result<()> {
            Ok(())
        }

        async fn delete_instance(&self, path: &str) -> Result<()> {
            self.nodes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|n| n != path);
            Ok(())
        }
    }

    fn ghostly(fail_with: ErrorKind) -> Arc<Ghostly> {
        Arc::new(Ghostly {
            state: ClientState::new(
                "ghostly",
                "ns".to_owned(),
                SessionStatus::new(SessionState::Connected, 1),
            ),
            nodes: Mutex::default(),
            fail_with,
        })
    }

    async fn nodes_after_cleanup(store: &Ghostly) -> Vec<String> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.nodes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    #[tokio::test]
    async fn a_failed_create_that_is_not_a_refusal_is_cleaned_up() {
        for kind in [ErrorKind::Unavailable, ErrorKind::Timeout, ErrorKind::SessionLost] {
            let store = ghostly(kind);
            let dyn_store: Arc<dyn InstanceStore> = store.clone();
            let err = register(
                &dyn_store,
                "api",
                &ServiceInstance::new("n1", "h:1"),
                "services/api",
            )
            .await
            .err()
            .map(|e| e.kind());
            assert_eq!(err, Some(kind));
            assert!(
                nodes_after_cleanup(&store).await.is_empty(),
                "a create that failed with {kind:?} (outcome known) left its node: a ghost registration"
            );
        }
    }

    #[tokio::test]
    async fn a_refused_create_is_not_cleaned_up() {
        // Another client's node at the id: nothing of ours to delete (the delete would
        // check the owner anyway).
        let store = ghostly(ErrorKind::AlreadyExists);
        let dyn_store: Arc<dyn InstanceStore> = store.clone();
        let err = register(
            &dyn_store,
            "api",
            &ServiceInstance::new("n1", "h:1"),
            "services/api",
        )
        .await;
        assert!(err.is_err());
        assert_eq!(nodes_after_cleanup(&store).await, ["services/api/n1"]);
    }
}
