//! Shared configuration: persistent keys with versions, compare-and-set, atomic commits,
//! guarded writes and ordered watches.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::{Error, ErrorKind, Result};
use crate::txn::{OpResult, Txn};
use crate::version::{Version, Versioned};

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

/// A change seen by [`ConfigStore::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Persistent, versioned keys.
///
/// Keys follow the name rules of [`validate_name`](crate::validate_name); values are at
/// most [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) bytes.
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::{ConfigStore, ErrorKind};
/// let v1 = client.put("feature/x", b"on".to_vec()).await?;
/// let v2 = client.compare_and_set("feature/x", Some(v1), b"off".to_vec()).await?;
/// let stale = client.compare_and_set("feature/x", Some(v1), b"on".to_vec()).await;
/// assert_eq!(stale.unwrap_err().kind(), ErrorKind::VersionMismatch);
/// assert_eq!(client.get("feature/x").await?.unwrap().version, v2);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait ConfigStore: Send + Sync {
    /// Reads `key`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument`, `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>>;

    /// Every key equal to `prefix` or below it (segment-wise), sorted by key. An empty
    /// prefix lists the whole namespace.
    ///
    /// # Errors
    ///
    /// `InvalidArgument`, `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn list(&self, prefix: &str) -> Result<Vec<Entry>>;

    /// Applies `txn` atomically.
    ///
    /// # Errors
    ///
    /// `Fenced` if a fence check failed (takes precedence); `VersionMismatch` if a
    /// version check failed — in both cases nothing changed. `InvalidArgument` for bad
    /// keys/values; `Unavailable`/`Timeout` with
    /// [`outcome_unknown`](crate::Error::outcome_unknown) when the request may have
    /// been applied.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the commit may or may not have been applied; read back.
    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>>;

    /// A stream of changes under `prefix` (a key or a prefix; empty for everything): a
    /// [`ConfigEvent::Snapshot`] first, then every change in order. A gap is reported as
    /// [`ConfigEvent::Resync`] followed by a fresh snapshot. Backends without
    /// [`Capabilities::every_watch_event`](crate::Capabilities) may coalesce rapid
    /// changes to one key, but always deliver the final value.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` up front; an item carries `Closed` when the client is closed
    /// (the stream then ends).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>>;

    /// Creates or replaces `key`; returns the new version.
    ///
    /// # Errors
    ///
    /// As [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Version> {
        single_put(self.commit(Txn::new().put(key, value)).await?)
    }

    /// Writes `key` only if it is at `expected` (`None`: only if absent).
    ///
    /// # Errors
    ///
    /// `VersionMismatch` when the key is at another version (or exists, for `None`).
    /// Otherwise as [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    async fn compare_and_set(&self, key: &str, expected: Option<Version>, value: Vec<u8>) -> Result<Version> {
        let txn = match expected {
            Some(v) => Txn::new().check_version(key, v),
            None => Txn::new().check_absent(key),
        };
        single_put(self.commit(txn.put(key, value)).await?)
    }

    /// Removes `key`; returns whether it existed.
    ///
    /// # Errors
    ///
    /// As [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    async fn delete(&self, key: &str) -> Result<bool> {
        match self.commit(Txn::new().delete(key)).await?.first() {
            Some(OpResult::Delete(existed)) => Ok(*existed),
            _ => Err(Error::new(
                ErrorKind::Unexpected,
                "delete returned no delete result",
            )),
        }
    }
}

fn single_put(results: Vec<OpResult>) -> Result<Version> {
    match results.first() {
        Some(OpResult::Put(v)) => Ok(*v),
        _ => Err(Error::new(ErrorKind::Unexpected, "put returned no version")),
    }
}
