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
/// let v1 = client.put("feature/x", "on").await?;
/// let v2 = client.compare_and_set("feature/x", Some(v1), "off").await?;
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
    /// changes to one key, but always deliver the final value, and then deliver changes
    /// in batches that are ready together: after each batch the keys are in a state they
    /// really were in at one moment (a [`ConfigCache`](crate::ConfigCache) applies a
    /// batch at once, so its in-sync views are all such states). Under writes faster than
    /// the backend can re-read, the watch reports `Resync` rather than show a mix.
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

    /// Creates or replaces `key`; returns the new version. The value is anything that
    /// becomes bytes: `&str`, `String`, `&[u8]`, `Vec<u8>`, `bytes::Bytes`, `[u8; N]`.
    ///
    /// # Errors
    ///
    /// As [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    async fn put<V>(&self, key: &str, value: V) -> Result<Version>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        single_put(self.commit(Txn::new().put(key, value)).await?)
    }

    /// Writes `key` only if it is at `expected` (`None`: only if absent). The value is
    /// anything that becomes bytes, as for [`ConfigStore::put`].
    ///
    /// # Errors
    ///
    /// `VersionMismatch` when the key is at another version (or exists, for `None`).
    /// Otherwise as [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    async fn compare_and_set<V>(&self, key: &str, expected: Option<Version>, value: V) -> Result<Version>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        let txn = match expected {
            Some(v) => Txn::new().check_version(key, v),
            None => Txn::new().check_absent(key),
        };
        single_put(self.commit(txn.put(key, value)).await?)
    }

    /// Reads `key` and decodes its value from JSON.
    ///
    /// # Errors
    ///
    /// `Decode` when the stored value is not JSON of `T` (read it with
    /// [`ConfigStore::get`] to see what is there); otherwise as [`ConfigStore::get`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
    /// use coord_core::ConfigStore;
    /// #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    /// struct Limits { rps: u32 }
    /// let v1 = client.put_json("service/limits", &Limits { rps: 100 }).await?;
    /// let read = client.get_json::<Limits>("service/limits").await?.unwrap();
    /// assert_eq!((read.value, read.version), (Limits { rps: 100 }, v1));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "serde")]
    async fn get_json<T>(&self, key: &str) -> Result<Option<Versioned<T>>>
    where
        T: serde::de::DeserializeOwned,
        Self: Sized,
    {
        match self.get(key).await? {
            Some(v) => Ok(Some(v.json().map_err(|e| e.with_operation("get_json"))?)),
            None => Ok(None),
        }
    }

    /// Encodes `value` as JSON and writes it to `key`, as [`ConfigStore::put`].
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when `value` cannot be encoded or is too large; otherwise as
    /// [`ConfigStore::commit`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    #[cfg(feature = "serde")]
    async fn put_json<T>(&self, key: &str, value: &T) -> Result<Version>
    where
        T: serde::Serialize + Sync + ?Sized,
        Self: Sized,
    {
        let bytes = crate::version::to_json(value).map_err(|e| e.with_operation("put_json"))?;
        self.put(key, bytes).await
    }

    /// Encodes `value` as JSON and writes it to `key` only if the key is at `expected`,
    /// as [`ConfigStore::compare_and_set`]: a read-modify-write of a typed value.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when `value` cannot be encoded; otherwise as
    /// [`ConfigStore::compare_and_set`].
    ///
    /// # Cancel safety
    ///
    /// As [`ConfigStore::commit`].
    #[cfg(feature = "serde")]
    async fn compare_and_set_json<T>(
        &self,
        key: &str,
        expected: Option<Version>,
        value: &T,
    ) -> Result<Version>
    where
        T: serde::Serialize + Sync + ?Sized,
        Self: Sized,
    {
        let bytes = crate::version::to_json(value).map_err(|e| e.with_operation("compare_and_set_json"))?;
        self.compare_and_set(key, expected, bytes).await
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
