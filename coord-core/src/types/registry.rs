//! What service discovery stores and watches: instances, their changes, and whether a
//! registration is on the server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::name::{validate_segment_name, validate_value};

/// One instance of a service: a unique id within the service, an address, and free-form
/// metadata. Stored on the server as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInstance {
    /// Unique within the service; one name segment (`[A-Za-z0-9._-]`).
    pub id: String,
    /// Where to reach it, e.g. `10.0.0.7:8080`. Not interpreted by coord.
    pub address: String,
    /// Free-form key/value metadata (version, zone, weight…).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl ServiceInstance {
    /// An instance with no metadata.
    pub fn new(id: impl Into<String>, address: impl Into<String>) -> Self {
        ServiceInstance {
            id: id.into(),
            address: address.into(),
            metadata: BTreeMap::new(),
        }
    }

    /// Adds a metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Checks the id and the encoded size, and returns the JSON encoding.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad id or an encoding over the value limit.
    pub fn encode(&self) -> Result<Vec<u8>> {
        validate_segment_name("instance id", &self.id)?;
        let bytes = serde_json::to_vec(self).map_err(|e| {
            Error::new(
                crate::ErrorKind::Unexpected,
                format!("cannot encode instance: {e}"),
            )
        })?;
        validate_value("encoded instance", &bytes)?;
        Ok(bytes)
    }

    /// Decodes an instance stored by [`ServiceInstance::encode`].
    ///
    /// # Errors
    ///
    /// `Unexpected` when the stored data is not an instance (written by another tool).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| {
            Error::new(
                crate::ErrorKind::Unexpected,
                format!("stored service instance is not valid JSON of an instance: {e}"),
            )
        })
    }
}

/// A change seen by [`Registry::watch`](crate::Registry::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryEvent {
    /// The full current set, sorted by id. Always the first event, and the event after
    /// every [`RegistryEvent::Resync`].
    Snapshot(Vec<ServiceInstance>),
    /// An instance joined.
    Joined(ServiceInstance),
    /// An instance's data changed.
    Updated(ServiceInstance),
    /// The instance with this id left.
    Left(String),
    /// Changes may have been missed (session loss, history compacted); a fresh
    /// `Snapshot` follows.
    Resync,
}

/// Whether a registration is on the server now.
///
/// After session loss the instance is gone until coord re-creates it on the new session:
/// `Retrying` until then, `Registered` again after. Re-registration never gives up while
/// the client lives, even while another client holds the same id (a crashed predecessor
/// whose session has not expired yet); only an error that retrying cannot fix (a
/// refusal by the server's access control, say) ends it as `Failed`.
#[derive(Debug, Clone)]
pub enum RegistrationState {
    /// The instance is registered on the current session.
    Registered,
    /// The session was lost; coord is re-creating the instance (and retrying while that
    /// fails).
    Retrying,
    /// Re-registration failed for good (or the client was closed); the instance is not
    /// registered. Register it again once the cause is fixed.
    Failed(Error),
}

impl PartialEq for RegistrationState {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RegistrationState::Registered, RegistrationState::Registered)
            | (RegistrationState::Retrying, RegistrationState::Retrying) => true,
            (RegistrationState::Failed(a), RegistrationState::Failed(b)) => {
                a.kind() == b.kind() && a.message() == b.message()
            }
            _ => false,
        }
    }
}
