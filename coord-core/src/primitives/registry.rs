//! Service discovery: session-bound instance registrations and their watch.

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::registration::RegistrationHandle;
use crate::engine::removal;
use crate::error::{Error, Result};
use crate::name::validate_name;
use crate::primitives::view::{Layout, Origin, Participant, RecipeKind, RecipeView};
use crate::types::{RegistrationState, RegistryEvent, ServiceInstance};

/// Service discovery.
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::{Registry, ServiceInstance};
/// let reg = client.register("api", ServiceInstance::new("a1", "10.0.0.1:80")).await?;
/// assert_eq!(client.instances("api").await?.len(), 1);
/// reg.deregister().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Registry: Send + Sync {
    /// Registers `instance` under `service`, bound to this client's session. After
    /// session loss it is re-registered automatically with its latest data.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad service name, instance id or oversized instance;
    /// `AlreadyExists` if another client registered the same id; `Unavailable`,
    /// `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: if the future is dropped after the server created the instance, it
    /// is removed in the background.
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration>;

    /// The instances of `service`, sorted by id.
    ///
    /// # Errors
    ///
    /// `InvalidArgument`, `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>>;

    /// A stream that yields the full current set first, then each change, in order. A gap
    /// is reported as [`RegistryEvent::Resync`] followed by a fresh snapshot.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` up front; an item carries `Closed` when the client is closed
    /// (the stream then ends).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>>;
}

/// A live registration. Dropping it deregisters in the background; prefer
/// [`Registration::deregister`].
#[must_use = "dropping the registration deregisters the instance"]
pub struct Registration {
    service: String,
    instance: ServiceInstance,
    handle: Option<Box<dyn RegistrationHandle>>,
    state: watch::Receiver<RegistrationState>,
}

impl Registration {
    /// A registration of `instance` under `service`.
    pub(crate) fn new(
        service: impl Into<String>,
        instance: ServiceInstance,
        handle: Box<dyn RegistrationHandle>,
        state: watch::Receiver<RegistrationState>,
    ) -> Self {
        Registration {
            service: service.into(),
            instance,
            handle: Some(handle),
            state,
        }
    }

    /// Whether the instance is on the server now (see [`RegistrationState`]).
    pub fn state(&self) -> RegistrationState {
        self.state.borrow().clone()
    }

    /// Waits for the next change of [`Registration::state`] and returns the new state.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a change made while no future is pending is seen by the next call.
    pub async fn changed(&mut self) -> RegistrationState {
        match self.state.changed().await {
            Ok(()) => self.state.borrow_and_update().clone(),
            // The client forgot the registration (closed): its last state stands.
            Err(_) => self.state.borrow().clone(),
        }
    }

    /// The service name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The instance as last registered or updated.
    pub fn instance(&self) -> &ServiceInstance {
        &self.instance
    }

    /// Replaces the instance's address and metadata (the id cannot change). Later
    /// re-registrations use the new data.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` if the id differs or the data is too large; `Unavailable`,
    /// `Timeout`. When the server is unreachable the new data is still kept for the
    /// next re-registration.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the update may or may not have reached the server.
    pub async fn update(&mut self, instance: ServiceInstance) -> Result<()> {
        if instance.id != self.instance.id {
            return Err(Error::invalid_argument(format!(
                "instance id cannot change from {:?} to {:?}; register a new instance instead",
                self.instance.id, instance.id
            )));
        }
        let bytes = instance.encode()?;
        let span = tracing::debug_span!("coord.registry.update", service = %self.service, id = %instance.id);
        let handle = self.handle.as_ref().ok_or_else(Error::closed)?;
        let result = handle.update(bytes).instrument(span).await;
        self.instance = instance;
        result
    }

    /// Removes the instance: it is no longer re-registered, and its node or key is
    /// deleted, retrying through connection trouble until the server confirms or the
    /// session has ended (taking the instance along).
    ///
    /// # Errors
    ///
    /// Only a refusal retrying cannot fix; the instance then goes when the session ends.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal goes on in the background, as on drop; it is never
    /// re-registered.
    pub async fn deregister(mut self) -> Result<()> {
        let span = tracing::debug_span!("coord.registry.deregister", service = %self.service, id = %self.instance.id);
        match self.handle.take() {
            Some(handle) => {
                handle.forget();
                let guard = Deregistering(Some(handle));
                guard.run().instrument(span).await
            }
            None => Err(Error::closed()),
        }
    }
}

/// A deregistration under way: finished in the background if its future is dropped.
struct Deregistering(Option<Box<dyn RegistrationHandle>>);

impl Deregistering {
    async fn run(mut self) -> Result<()> {
        let Some(handle) = self.0.as_deref() else {
            return Ok(());
        };
        let result = delete_until_gone(handle).await;
        self.0 = None;
        result
    }
}

impl Drop for Deregistering {
    fn drop(&mut self) {
        let Some(handle) = self.0.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            if let Err(e) = delete_until_gone(&*handle).await {
                tracing::warn!(error = %e, "coord.deregister_failed: the instance goes when the session ends");
            }
        });
    }
}

async fn delete_until_gone(handle: &dyn RegistrationHandle) -> Result<()> {
    let session = handle.session();
    let generation = session.borrow().generation;
    removal::until_gone(session, generation, "registration", || handle.delete()).await
}

impl Drop for Registration {
    /// Deregisters in the background, with the same retries as
    /// [`Registration::deregister`].
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.forget();
            drop(Deregistering(Some(handle)));
        }
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("service", &self.service)
            .field("instance", &self.instance)
            .field("state", &*self.state.borrow())
            .finish()
    }
}

impl Client {
    /// The backend directory of `service`'s instances.
    fn service_dir(&self, service: &str) -> String {
        self.backend().path(&format!("services/{service}"))
    }
}

// The user's registry: validates, opens the span, names the operation in errors and
// runs the registration lifecycle, once for every backend's raw instance store.
#[async_trait]
impl Registry for Client {
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration> {
        validate_name("service name", service).map_err(|e| e.with_operation("register"))?;
        // The backend as the store registrations are written through (shared with the
        // session follower, which outlives any one call).
        let store: std::sync::Arc<dyn crate::raw::InstanceStore> = self.backend().clone();
        self.core()
            .registrations_followed
            .get_or_init(|| crate::engine::registration::follow_sessions(store.clone()));
        let made =
            crate::engine::registration::register(&store, service, &instance, &self.service_dir(service))
                .await?;
        Ok(Registration::new(service, instance, made.handle, made.state))
    }

    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>> {
        validate_name("service name", service).map_err(|e| e.with_operation("instances"))?;
        let span = tracing::debug_span!("coord.instances", backend = self.kind(), service);
        self.backend()
            .instances(&self.service_dir(service))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("instances"))
    }

    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        validate_name("service name", service).map_err(|e| e.with_operation("watch"))?;
        let span = tracing::debug_span!("coord.registry.watch", backend = self.kind(), service);
        self.backend()
            .watch_instances(&self.service_dir(service))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("watch"))
    }
}

/// How `coord inspect` reads services: `services/<name>`, its instances.
pub(crate) struct ServiceLayout;

/// [`ServiceLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: ServiceLayout = ServiceLayout;

#[async_trait::async_trait]
impl Layout for ServiceLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::Service
    }

    fn root(&self) -> &'static str {
        "services"
    }

    /// An instance is named by its id, which tells nothing; coord's registry writes the
    /// instance in its own encoding.
    fn origin(&self, entry: &crate::raw::Surveyed) -> Origin {
        if ServiceInstance::decode(&entry.value).is_ok() {
            Origin::Coord
        } else {
            Origin::of(&entry.name)
        }
    }

    /// Every instance is a holder.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        view.holders = participants;
    }
}
