//! The key-value store a backend implements for the config store and the recipes over
//! it (counters, the distributed queue's items, two-phase commit's plan and decision).
//!
//! [`Client`](crate::Client) validates every key, prefix and transaction first, opens
//! the operation's `tracing` span and names the operation in errors; a backend only
//! speaks to its server. Keys are relative to the namespace's config root
//! (`<namespace>/config/` in every layout).

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::{Error, ErrorKind, Result};
use crate::txn::{OpResult, Txn};
use crate::types::{ConfigEvent, Entry};
use crate::version::{Version, Versioned};

/// A config version made of two numbers: ZooKeeper's `czxid` and data version; etcd's
/// and mem's modification revision and `0`.
pub fn version(major: u64, minor: u64) -> Version {
    Version::from_parts(major, minor)
}

/// The two numbers a version was made of with [`version`].
pub fn version_parts(version: Version) -> (u64, u64) {
    version.parts()
}

/// The error of a transaction whose version check on `key` failed: `expected` (`None`:
/// absent) against `actual`, said the same way on every backend.
pub fn version_mismatch(key: &str, expected: Option<Version>, actual: Option<Version>) -> Error {
    Error::new(
        ErrorKind::VersionMismatch,
        match (expected, actual) {
            (None, Some(a)) => format!("config key {key:?} exists (version {a}); expected it absent"),
            (Some(e), None) => format!("config key {key:?} does not exist; expected version {e}"),
            (Some(e), Some(a)) => format!("config key {key:?} is at version {a}, expected {e}"),
            (None, None) => format!("config key {key:?} changed meanwhile; expected it absent"),
        },
    )
}

/// The stream of a watch task's batches, one event at a time. A backend sends the events
/// of one consistent point (an etcd watch response, a ZooKeeper read with nothing left
/// unread) as one batch: they are then ready together, so a consumer that takes what is
/// ready (as a live cache does) never sees half of one. An `Err` item is passed on as
/// it is.
///
/// # Cancel safety
///
/// Dropping the stream drops the receiver: the sending task sees its channel closed
/// and stops.
pub fn batched<E: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<Result<Vec<E>>>,
) -> BoxStream<'static, Result<E>> {
    use futures::StreamExt as _;
    let batches = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    Box::pin(batches.flat_map(|batch| {
        futures::stream::iter(match batch {
            Ok(events) => events.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })
    }))
}

/// A backend's key-value operations: reads, one atomic guarded transaction, and prefix
/// watches. Inputs arrive validated.
#[async_trait]
pub trait KvStore: Send + Sync {
    /// Reads `key`.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>>;

    /// Every key equal to `prefix` or below it (segment-wise,
    /// [`key_matches_prefix`](crate::raw::key_matches_prefix)), sorted by key.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn list(&self, prefix: &str) -> Result<Vec<Entry>>;

    /// The first `limit` keys `<dir>/<rest>` with `from <= rest < to` (byte order; at
    /// any depth below `dir`), sorted by key, and how many such keys there are in all: a
    /// queue's oldest items and its length without reading every item. `limit` 0 counts
    /// only; meant for small limits (one request). Each entry is as it was at some moment
    /// during the call, and the count of some moment too — not necessarily one moment
    /// for all (ZooKeeper lists names, then reads data): a key created meanwhile that
    /// sorts before the entries may be missing.
    ///
    /// The default reads the whole [`KvStore::list`] of `dir`; backends override it with
    /// a read whose cost does not grow with the values in the range.
    ///
    /// # Errors
    ///
    /// As [`KvStore::list`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn first_in(&self, dir: &str, from: &str, to: &str, limit: usize) -> Result<(Vec<Entry>, usize)> {
        let below = format!("{dir}/");
        let mut all: Vec<Entry> = self
            .list(dir)
            .await?
            .into_iter()
            .filter(|e| {
                e.key
                    .strip_prefix(&below)
                    .is_some_and(|rest| from <= rest && rest < to)
            })
            .collect();
        let count = all.len();
        all.truncate(limit);
        Ok((all, count))
    }

    /// Applies `txn` atomically: every check holds (fences first: `Fenced`; then
    /// versions: `VersionMismatch`) and every operation is applied, or nothing is.
    ///
    /// # Errors
    ///
    /// `Fenced`, `VersionMismatch` (nothing changed); `Unavailable`/`Timeout` with
    /// [`outcome_unknown`](crate::Error::outcome_unknown) when it may have been applied.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the commit may or may not have been applied.
    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>>;

    /// A snapshot of `prefix`, then every change in order; a gap as
    /// [`ConfigEvent::Resync`] and a new snapshot. The stream ends after an error item
    /// (`Closed` when the client is closed).
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`, for the first read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>>;
}
