//! What a backend implements for the service registry: session-bound instances
//! ([`InstanceStore`]) and reading a service's instances ([`RegistryStore`]).
//!
//! [`Client`](crate::Client) validates, opens spans, names the operation in errors and
//! runs the registration lifecycle (the record of what to re-create, re-creating it on
//! every new session, guaranteed removal) once, for every backend.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::Result;
use crate::raw::client_state::Stateful;
use crate::types::{RegistryEvent, ServiceInstance};

/// How a backend keeps one instance's session-bound node or key, always on its current
/// session. Each backend implements it once; everything else about registrations —
/// validation, the record of what to re-create, re-creating it on every new session,
/// guaranteed removal — is written once in `coord-core`.
#[async_trait]
pub trait InstanceStore: Stateful + Send + Sync + 'static {
    /// Creates the node at `path` holding `data`, bound to the current session.
    ///
    /// # Errors
    ///
    /// `AlreadyExists` while another client's node holds `path`; `Unavailable` (retried)
    /// while a node of one of this client's earlier sessions still does; `SessionLost`,
    /// `Unavailable`, `Timeout` (with [`outcome_unknown`](crate::Error::outcome_unknown)
    /// when the create may have landed); `PermissionDenied`, `InvalidArgument`.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the node may exist; the callers in `coord-core` remove
    /// it in that case.
    async fn create_instance(&self, path: &str, data: &[u8]) -> Result<()>;

    /// Replaces the data at `path` if the current session owns it; nothing otherwise
    /// (re-registration writes the new data later).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout` (outcome unknown), `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the data may or may not have been written.
    async fn update_instance(&self, path: &str, data: &[u8]) -> Result<()>;

    /// One attempt to delete `path` if the current session owns it: `Ok` once it is not
    /// the current session's any more (including when it never was).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `SessionLost` (the callers retry until the session
    /// ends); `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the delete may or may not have happened.
    async fn delete_instance(&self, path: &str) -> Result<()>;
}

/// How a backend reads a service's instances, at `dir` (the service's directory, from
/// [`Backend::path`](crate::raw::Backend::path) of `services/<service>`): ids are the
/// entries' last segments, values the instances' JSON.
#[async_trait]
pub trait RegistryStore: Send + Sync {
    /// The instances registered at `dir` now.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`, `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn instances(&self, dir: &str) -> Result<Vec<ServiceInstance>>;

    /// A [`RegistryEvent::Snapshot`] of `dir`, then every change (an instance added,
    /// updated or removed); [`RegistryEvent::Resync`] and a new snapshot where changes
    /// may have been missed. The stream ends after an error item (`Closed` when the
    /// client is closed).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`, for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch_instances(&self, dir: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>>;
}
