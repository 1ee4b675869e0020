//! Shared configuration: persistent keys with versions, compare-and-set, atomic commits,
//! guarded writes and ordered watches.

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::client::Client;
use crate::engine::client_core::origin_of;
use crate::error::{Error, ErrorKind, Result};
use crate::name::{validate_name, validate_prefix};
use crate::raw::KvStore;
use crate::txn::{OpResult, Txn};
use crate::types::{ConfigEvent, Entry};
use crate::version::{Version, Versioned};
use tracing::Instrument;

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

// The user's config store: validates, opens the span and names the operation in
// errors, once for every backend's raw key-value store.
#[async_trait]
impl ConfigStore for Client {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        validate_name("config key", key).map_err(|e| e.with_operation("get"))?;
        let span = tracing::debug_span!("coord.get", backend = self.kind(), key);
        KvStore::get(&**self.backend(), key)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("get"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        validate_prefix("config prefix", prefix).map_err(|e| e.with_operation("list"))?;
        let span = tracing::debug_span!("coord.list", backend = self.kind(), prefix);
        KvStore::list(&**self.backend(), prefix)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("list"))
    }

    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        txn.validate().map_err(|e| e.with_operation("commit"))?;
        let span = tracing::debug_span!("coord.commit", backend = self.kind(), ops = txn.ops().len());
        let fences = txn.fences();
        let backend = self.backend().clone();
        async move {
            let result = KvStore::commit(&*backend, txn).await;
            if let Err(e) = &result
                && e.kind() == ErrorKind::Fenced
            {
                // Only this client's store proves its own grants' entries gone: a fence
                // of another client may be of another cluster.
                forfeit_refused(&*backend, &fences, origin_of(&backend)).await;
            }
            result
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("commit"))
    }

    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        validate_prefix("config prefix", prefix).map_err(|e| e.with_operation("watch"))?;
        let span = tracing::debug_span!("coord.config.watch", backend = self.kind(), prefix);
        KvStore::watch(&**self.backend(), prefix)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("watch"))
    }
}

/// Tells the guards whose fence a commit was refused for that they are lost. With one
/// fence the refusal names it; with several, each is checked on its own (a commit of
/// its fence alone, which writes nothing), so that a guard still held is not declared
/// lost. A check that cannot be made leaves its guard as it is: its entry watch and
/// session still tell it. Only fences this client granted (`origin`) are told: another
/// client's fence may be of another cluster, whose entries this store does not hold.
async fn forfeit_refused(backend: &dyn crate::raw::Backend, fences: &[crate::Fence], origin: usize) {
    let own: Vec<&crate::Fence> = fences.iter().filter(|f| f.granted_by(origin)).collect();
    match (fences, own.as_slice()) {
        (_, []) => {}
        ([_], [only]) => only.refused(),
        (_, several) => {
            for &fence in several {
                let alone = Txn::new().fenced_by(fence.clone());
                if let Err(e) = KvStore::commit(backend, alone).await
                    && e.kind() == ErrorKind::Fenced
                {
                    fence.refused();
                }
            }
        }
    }
}
