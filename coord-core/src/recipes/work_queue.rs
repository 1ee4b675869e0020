//! The queue over the config store and the contender queue: push = one transaction that
//! moves the tail and adds the item; take = under the taker lock (FIFO, herd-free), an
//! atomic remove of the oldest item, fenced by the lock, or a watch until one comes.

use futures::StreamExt;
use tracing::Instrument;

use crate::config::{ConfigEvent, ConfigStore, Entry};
use crate::error::{Error, ErrorKind, Result};
use crate::hold::HoldState;
use crate::lock::LockGuard;
use crate::name::validate_value;
use crate::raw::{QueueId, QueueKind};
use crate::recipes::contender::acquire;
use crate::recipes::lock::no_grant;
use crate::txn::Txn;
use crate::work_queue::DistributedQueue;

impl DistributedQueue {
    fn tail_key(&self) -> String {
        format!("{}/tail", self.name)
    }

    fn items_prefix(&self) -> String {
        format!("{}/items", self.name)
    }

    fn item_key(&self, seq: u64) -> String {
        format!("{}/items/{seq:020}", self.name)
    }

    /// Adds `item` at the end; returns its sequence number.
    ///
    /// # Errors
    ///
    /// `Unavailable` (retryable) when the queue holds its maximum; `InvalidArgument` for
    /// an oversized item or a tail key that is not a number; `Unavailable`/`Timeout` —
    /// with [`outcome_unknown`](Error::outcome_unknown) when the item may have been
    /// added (it is never added twice by a retry inside); `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped after a write was sent, the item may or may not have been added.
    pub async fn push(&self, item: impl Into<Vec<u8>>) -> Result<u64> {
        let item = item.into();
        let span = tracing::debug_span!("coord.queue.push", backend = self.client.kind(), name = %self.name);
        async {
            validate_value("queue item", &item)?;
            loop {
                // The tail first, then the items: a push between the two moves the tail,
                // and this one's transaction fails and reads again — so the count it
                // checks is never below the truth.
                let (seq, tail) = match self.client.get(&self.tail_key()).await? {
                    None => (0, None),
                    Some(v) => (parse_seq(&self.tail_key(), &v.value)?, Some(v.version)),
                };
                let held = self.client.list(&self.items_prefix()).await?.len();
                if held >= self.max_items as usize {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "queue {:?} is full ({held} items, its maximum {}); push again once consumers took some",
                            self.name, self.max_items
                        ),
                    ));
                }
                let txn = match tail {
                    Some(v) => Txn::new().check_version(self.tail_key(), v),
                    None => Txn::new().check_absent(self.tail_key()),
                };
                let txn = txn
                    .put(self.tail_key(), (seq + 1).to_string().into_bytes())
                    .put(self.item_key(seq), item.clone());
                match self.client.commit(txn).await {
                    Ok(_) => return Ok(seq),
                    // Another push moved the tail: read again.
                    Err(e) if e.kind() == ErrorKind::VersionMismatch => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation("queue push"))
    }

    /// How many items the queue holds now.
    ///
    /// # Errors
    ///
    /// `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn len(&self) -> Result<usize> {
        Ok(self
            .client
            .list(&self.items_prefix())
            .await
            .map_err(|e| e.with_operation("queue len"))?
            .len())
    }

    /// Whether the queue holds no item now.
    ///
    /// # Errors
    ///
    /// As [`DistributedQueue::len`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// Takes the oldest item, waiting (in arrival order, herd-free) until there is one.
    /// The item is this consumer's alone.
    ///
    /// # Errors
    ///
    /// `SessionLost` if the session was lost while waiting (call again);
    /// `Unavailable`/`Timeout` — with [`outcome_unknown`](Error::outcome_unknown) when
    /// the session was lost just as an item was being taken (it may be gone);
    /// `Closed`, `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe until an item is removed: a dropped take leaves nothing behind on the
    /// taker lock. Dropped while its remove is under way, the item may be gone.
    pub async fn take(&self) -> Result<Vec<u8>> {
        self.take_one(true, "queue take")
            .await?
            .ok_or_else(|| no_grant("queue take"))
    }

    /// Takes the oldest item if there is one now and no other consumer is waiting ahead;
    /// `None` otherwise.
    ///
    /// # Errors
    ///
    /// As [`DistributedQueue::take`].
    ///
    /// # Cancel safety
    ///
    /// As [`DistributedQueue::take`].
    pub async fn try_take(&self) -> Result<Option<Vec<u8>>> {
        self.take_one(false, "queue try_take").await
    }

    async fn take_one(&self, wait: bool, op: &'static str) -> Result<Option<Vec<u8>>> {
        let span =
            tracing::debug_span!("coord.queue.take", backend = self.client.kind(), name = %self.name, wait);
        async {
            let takers = QueueId::new(QueueKind::Takers, self.name.clone());
            let Some(grant) = acquire(&self.client, takers, Vec::new(), wait).await? else {
                return Ok(None);
            };
            let gate = LockGuard::new(self.name.clone(), grant);
            let taken = self.take_under(&gate, wait).await;
            if let Err(e) = gate.release().await {
                tracing::warn!(error = %e, "coord.queue_taker_release_refused");
            }
            taken
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation(op))
    }

    /// Takes the oldest item while holding the taker lock `gate`; waits for one with
    /// `wait`.
    async fn take_under(&self, gate: &LockGuard, wait: bool) -> Result<Option<Vec<u8>>> {
        loop {
            let items = self.client.list(&self.items_prefix()).await?;
            let Some(oldest) = items.into_iter().next() else {
                if !wait {
                    return Ok(None);
                }
                self.until_an_item(gate).await?;
                continue;
            };
            let txn = Txn::new()
                .fenced_by(gate.fence())
                .check_version(oldest.key.clone(), oldest.version)
                .delete(oldest.key.clone());
            match self.client.commit(txn).await {
                Ok(_) => return Ok(Some(oldest.value)),
                // Removed by someone else (an operator, a client outside the taker
                // lock): the next one.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => continue,
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    return Err(Error::new(
                        ErrorKind::SessionLost,
                        "the queue's taker lock was lost (session lost); nothing was taken — call again",
                    ));
                }
                Err(e) if e.outcome_unknown() => return self.resolve_unknown(gate, oldest, e).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// After a remove of unknown outcome: while the taker lock holds, nobody else takes,
    /// so the item gone means this consumer took it; still there, it is taken again.
    async fn resolve_unknown(&self, gate: &LockGuard, item: Entry, cause: Error) -> Result<Option<Vec<u8>>> {
        loop {
            if gate.state() == HoldState::Lost {
                return Err(cause.with_outcome_unknown(true));
            }
            match self.client.get(&item.key).await {
                Ok(None) => return Ok(Some(item.value)),
                Ok(Some(v)) if v.version == item.version => {
                    let txn = Txn::new()
                        .fenced_by(gate.fence())
                        .check_version(item.key.clone(), item.version)
                        .delete(item.key.clone());
                    match self.client.commit(txn).await {
                        Ok(_) => return Ok(Some(item.value)),
                        Err(e) if e.outcome_unknown() || e.is_retryable() => {
                            tracing::debug!(error = %e, "coord.queue_take_retry");
                        }
                        Err(e) if e.kind() == ErrorKind::VersionMismatch => {}
                        Err(e) => return Err(e.with_outcome_unknown(true)),
                    }
                }
                // Replaced under the same key: not this item any more; nothing taken.
                Ok(Some(_)) => return self.not_taken(),
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "coord.queue_take_retry");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.with_outcome_unknown(true)),
            }
        }
    }

    fn not_taken(&self) -> Result<Option<Vec<u8>>> {
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "queue {:?}: the item being taken was replaced meanwhile; nothing was taken — call again",
                self.name
            ),
        ))
    }

    /// Waits until the queue may hold an item, watching its items (the only consumer
    /// that does, as the holder of the taker lock); fails with `SessionLost` if the lock
    /// is lost meanwhile.
    async fn until_an_item(&self, gate: &LockGuard) -> Result<()> {
        let mut events = ConfigStore::watch(&self.client, &self.items_prefix()).await?;
        let prefix = format!("{}/", self.items_prefix());
        loop {
            let event = tokio::select! {
                e = events.next() => e,
                _ = gate.lost() => return Err(Error::new(
                    ErrorKind::SessionLost,
                    "the queue's taker lock was lost while waiting for an item (session lost); nothing was taken — call again",
                )),
            };
            match event {
                None => return Err(Error::closed()),
                Some(Err(e)) => return Err(e),
                Some(Ok(ConfigEvent::Snapshot(entries))) if !entries.is_empty() => return Ok(()),
                Some(Ok(ConfigEvent::Put(e))) if e.key.starts_with(&prefix) => return Ok(()),
                Some(Ok(_)) => {}
            }
        }
    }
}

fn parse_seq(key: &str, value: &[u8]) -> Result<u64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("key {key:?} is a queue's tail but does not hold a sequence number"),
            )
        })
}
