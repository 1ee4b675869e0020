//! What the config store reads and watches: keys with values and versions, and the
//! changes of a watched prefix.

#[cfg(feature = "serde")]
use crate::error::Result;
use crate::version::Version;
#[cfg(feature = "serde")]
use crate::version::Versioned;

/// One key with its value and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key, relative to the client's namespace.
    pub key: String,
    /// The value.
    pub value: Vec<u8>,
    /// The version to pass to compare-and-set.
    pub version: Version,
}

impl Entry {
    /// The value decoded from JSON, with its key and version.
    ///
    /// # Errors
    ///
    /// `Decode` when the value is not JSON of `T`.
    #[cfg(feature = "serde")]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<Versioned<T>> {
        crate::version::from_json(&self.key, &self.value).map(|v| Versioned::new(v, self.version))
    }
}

/// A change seen by [`ConfigStore::watch`](crate::ConfigStore::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigEvent {
    /// Every key under the watched prefix now, sorted by key. Always the first event,
    /// and the event after every [`ConfigEvent::Resync`].
    Snapshot(Vec<Entry>),
    /// A key was created or changed.
    Put(Entry),
    /// A key was deleted.
    Delete(String),
    /// Changes may have been missed (history compacted, session lost); a fresh
    /// `Snapshot` follows. Never a silent gap.
    Resync,
}
