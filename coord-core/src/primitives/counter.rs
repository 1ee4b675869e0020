//! Shared counters: a config key holding an integer, changed by compare-and-set.
//!
//! The shared counter over the config store: read, compute, compare-and-set (with the
//! fence when there is one), again on a version mismatch.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::Fence;
use crate::name::validate_name;
use crate::primitives::config::ConfigStore;
use crate::raw::Backoff;
use crate::txn::Txn;
use crate::types::ConfigEvent;
use crate::version::Version;

/// A shared 64-bit counter: the config key `key`, holding its value as ASCII decimal
/// (as kazoo's `Counter` stores it, and as `etcdctl get` or `zkCli` show it; an absent
/// key counts as 0). Made by [`Client::counter`]; cheap to clone.
///
/// [`SharedCounter::add`] is a compare-and-set loop: under contention every add lands
/// exactly once and returns the value it made. A write whose outcome is unknown (the
/// connection broke after sending) is returned as such, never retried blindly — it may
/// have been applied.
///
/// # Fencing
///
/// [`SharedCounter::fenced_by`] makes every write of the counter conditional on a guard
/// still being held: a stale holder's `add` or `set` fails with `Fenced` and changes
/// nothing.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use coord_core::Granted as _;
/// use coord_core::Lock;
/// let client = coord_mem::connect("mem://counter-doc")?;
/// let visits = client.counter("stats/visits")?;
/// assert_eq!(visits.get().await?, 0);
/// assert_eq!(visits.add(5).await?, 5);
/// let guard = client.lock("stats").await?;
/// assert_eq!(visits.fenced_by(guard.fence()).add(-2).await?, 3);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SharedCounter {
    client: Client,
    key: String,
    fence: Option<Fence>,
}

impl Client {
    /// The shared counter named `name`, kept at the config key `name` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn counter(&self, name: &str) -> Result<SharedCounter> {
        validate_name("counter name", name).map_err(|e| e.with_operation("counter"))?;
        Ok(SharedCounter {
            client: self.clone(),
            key: name.to_owned(),
            fence: None,
        })
    }
}

impl SharedCounter {
    /// The counter's name (its config key), as every primitive's identifier is.
    pub fn name(&self) -> &str {
        &self.key
    }

    /// This counter with every write conditional on `fence` (a lock guard's or a
    /// leadership's) still being held.
    pub fn fenced_by(&self, fence: Fence) -> SharedCounter {
        SharedCounter {
            fence: Some(fence),
            ..self.clone()
        }
    }
}

impl SharedCounter {
    /// The current value (0 when the key is absent).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the key holds something other than a decimal integer;
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn get(&self) -> Result<i64> {
        let span = tracing::debug_span!("coord.counter.get", backend = self.client.kind(), key = %self.key);
        async { Ok(self.read().await?.0) }
            .instrument(span)
            .await
            .map_err(|e: Error| e.with_operation("counter get"))
    }

    /// Adds `delta` (negative to subtract) and returns the value this add made.
    ///
    /// # Errors
    ///
    /// `Fenced` when fenced by a guard no longer held; `InvalidArgument` when the key
    /// holds something other than a decimal integer or the sum overflows an `i64`;
    /// `Unavailable`/`Timeout` — with [`outcome_unknown`](Error::outcome_unknown) when
    /// the add may have been applied (read the counter to find out); `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped after a write was sent, the add may or may not have been applied.
    pub async fn add(&self, delta: i64) -> Result<i64> {
        let span =
            tracing::debug_span!("coord.counter.add", backend = self.client.kind(), key = %self.key, delta);
        async {
            // Contention backs off (with jitter) before reading again.
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(200));
            loop {
                let (now, version) = self.read().await?;
                let next = now.checked_add(delta).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        format!("counter {:?} is {now}: adding {delta} overflows an i64", self.key),
                    )
                })?;
                match self.write(version, next).await {
                    Ok(()) => return Ok(next),
                    // Someone else changed it between the read and the write: again.
                    Err(e) if e.kind() == ErrorKind::VersionMismatch => backoff.wait().await,
                    Err(e) => return Err(e),
                }
            }
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("counter add"))
    }

    /// Sets the value.
    ///
    /// # Errors
    ///
    /// `Fenced` when fenced by a guard no longer held; `Unavailable`/`Timeout` (with
    /// [`outcome_unknown`](Error::outcome_unknown) when it may have been applied);
    /// `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the value may or may not have been set.
    pub async fn set(&self, value: i64) -> Result<()> {
        let span =
            tracing::debug_span!("coord.counter.set", backend = self.client.kind(), key = %self.key, value);
        let mut txn = Txn::new();
        if let Some(fence) = &self.fence {
            txn = txn.fenced_by(fence.clone());
        }
        self.client
            .commit(txn.put(self.key.clone(), value.to_string().into_bytes()))
            .instrument(span)
            .await
            .map(drop)
            .map_err(|e| e.with_operation("counter set"))
    }

    /// The value now, then each new value in order (a write that leaves it unchanged is
    /// not shown; with backends that coalesce rapid changes, intermediate values may be
    /// skipped, never the last). After a gap in the watch, the value then.
    ///
    /// # Errors
    ///
    /// As [`SharedCounter::get`]; an item carries the error when the value is not a
    /// decimal integer, or `Closed` (the stream then ends).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops watching.
    pub async fn watch(&self) -> Result<BoxStream<'static, Result<i64>>> {
        let span = tracing::debug_span!("coord.counter.watch", backend = self.client.kind(), key = %self.key);
        let events = ConfigStore::watch(&self.client, &self.key)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("counter watch"))?;
        let key = self.key.clone();
        let mut shown: Option<i64> = None;
        Ok(events
            .filter_map(move |event| {
                let value = match event {
                    Err(e) => Some(Err(e.with_operation("counter watch"))),
                    Ok(ConfigEvent::Snapshot(entries)) => Some(
                        entries
                            .into_iter()
                            .find(|e| e.key == key)
                            .map_or(Ok(0), |e| parse(&key, &e.value)),
                    ),
                    Ok(ConfigEvent::Put(e)) if e.key == key => Some(parse(&key, &e.value)),
                    Ok(ConfigEvent::Delete(k)) if k == key => Some(Ok(0)),
                    Ok(_) => None,
                };
                let shown_now = match value {
                    Some(Ok(v)) if shown == Some(v) => None,
                    Some(Ok(v)) => {
                        shown = Some(v);
                        Some(Ok(v))
                    }
                    other => other,
                };
                futures::future::ready(shown_now)
            })
            .boxed())
    }

    /// The value and its version (`None`: absent).
    async fn read(&self) -> Result<(i64, Option<Version>)> {
        match self.client.get(&self.key).await? {
            None => Ok((0, None)),
            Some(v) => Ok((parse(&self.key, &v.value)?, Some(v.version))),
        }
    }

    /// Writes `value` if the key is still at `version` (absent for `None`), and the fence
    /// holds.
    async fn write(&self, version: Option<Version>, value: i64) -> Result<()> {
        let mut txn = Txn::new();
        if let Some(fence) = &self.fence {
            txn = txn.fenced_by(fence.clone());
        }
        txn = match version {
            Some(v) => txn.check_version(self.key.clone(), v),
            None => txn.check_absent(self.key.clone()),
        };
        self.client
            .commit(txn.put(self.key.clone(), value.to_string().into_bytes()))
            .await
            .map(drop)
    }
}

fn parse(key: &str, value: &[u8]) -> Result<i64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "key {key:?} holds {} bytes that are not a decimal integer; a counter's key holds only its value",
                    value.len()
                ),
            )
        })
}
