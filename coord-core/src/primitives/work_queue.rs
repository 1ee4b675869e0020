//! Distributed FIFO queues for low-volume work distribution.
//!
//! The queue over the config store and the contender queue: push = one transaction that
//! moves the tail and adds the item; take = under the taker lock (FIFO, herd-free), an
//! atomic remove of the oldest item, fenced by the lock, or a watch until one comes.

use std::time::Duration;

use futures::StreamExt;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::acquire;
use crate::error::{Error, ErrorKind, Result};
use crate::hold::HoldState;
use crate::name::{validate_name, validate_value};
use crate::primitives::config::{ConfigEvent, ConfigStore, Entry};
use crate::primitives::lock::{LockGuard, no_grant};
use crate::raw::mutants::{self, Mutant};
use crate::raw::{Admission, Backoff, EntryClass, QueueSpec};
use crate::txn::Txn;

/// The most items a queue may be configured to hold: every take lists the items.
pub const MAX_QUEUE_ITEMS: u32 = 10_000;

/// A bounded FIFO queue of byte items (Curator's `DistributedQueue`, Go's
/// `recipes.Queue`), for low-volume work distribution: each item is taken by exactly
/// one consumer. Made by [`Client::queue`]; cheap to clone.
///
/// Items are persistent config keys under the queue's name: `<name>/items/<seq>` (the
/// sequence zero-padded to 20 digits), with `<name>/tail` holding the next sequence.
/// [`DistributedQueue::push`] adds an item and moves the tail in one transaction, and
/// refuses to go past the queue's maximum. Consumers queue in arrival order on the
/// queue's taker lock (FIFO, herd-free); the one at the front takes the oldest item with
/// a transaction that checks the item's version and the lock's fence — an atomic remove
/// only one consumer can win — and waits, as the only consumer that watches, when there
/// is none.
///
/// # Limits
///
/// Meant for tens to thousands of items, not as a message broker: every take lists the
/// queue's items, and takes run one at a time. An item taken by a consumer that then
/// crashes is gone (at most once per item): hand work back with `push` if it must not
/// be lost.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// let client = coord_mem::connect("mem://queue-doc")?;
/// let jobs = client.queue("jobs", 100)?;
/// jobs.push(b"resize 1.png".to_vec()).await?;
/// jobs.push(b"resize 2.png".to_vec()).await?;
/// assert_eq!(jobs.len().await?, 2);
/// assert_eq!(jobs.take().await?, b"resize 1.png");
/// assert_eq!(jobs.try_take().await?.as_deref(), Some(&b"resize 2.png"[..]));
/// assert_eq!(jobs.try_take().await?, None);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DistributedQueue {
    client: Client,
    name: String,
    max_items: u32,
}

impl Client {
    /// The queue `name`, holding at most `max_items` items (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name, or `max_items` outside
    /// `1..=`[`MAX_QUEUE_ITEMS`].
    pub fn queue(&self, name: &str, max_items: u32) -> Result<DistributedQueue> {
        validate_name("queue name", name).map_err(|e| e.with_operation("queue"))?;
        if !(1..=MAX_QUEUE_ITEMS).contains(&max_items) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a queue holds 1 to {MAX_QUEUE_ITEMS} items, not {max_items}"),
            )
            .with_operation("queue"));
        }
        Ok(DistributedQueue {
            client: self.clone(),
            name: name.to_owned(),
            max_items,
        })
    }
}

impl DistributedQueue {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most items it holds.
    pub fn max_items(&self) -> u32 {
        self.max_items
    }
}

/// The consumers of a queue, taking items one at a time in arrival order (`lock-`).
const TAKERS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lock-"],
    kazoo_marker: None,
}];

/// The taker lock of queue `name`: `queues/<name>/takers`; only its holder watches for
/// items.
fn takers_queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "queue_taker",
        format!("queues/{name}/takers"),
        TAKERS,
        Admission::Exclusive,
    )
}

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
            // Racing pushes back off (with jitter) before reading the tail again.
            let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(200));
            loop {
                // The tail first, then the items: a push between the two moves the tail,
                // and this one's transaction fails and reads again — so the count it
                // checks is never below the truth.
                let (seq, tail) = match self.client.get(&self.tail_key()).await? {
                    None => (0, None),
                    Some(v) => (parse_seq(&self.tail_key(), &v.value)?, Some(v.version)),
                };
                let held = self.items().await?.len();
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
                    Err(e) if e.kind() == ErrorKind::VersionMismatch => backoff.wait().await,
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
            .items()
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
    /// Cancel-safe: a dropped take loses no item and leaves nothing behind on the taker
    /// lock. Dropped once its remove was sent, the take finishes on a task of its own:
    /// an item it removed goes to this client's next `take` or `try_take` of the queue
    /// (before any other item; a removal whose answer was lost is settled by the receipt
    /// it wrote, even after the session is gone). An item is lost only with a consumer
    /// that crashes after `take` returned it.
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
    /// `Unavailable` at once — before any request — while the session is suspended
    /// (connection trouble), and as soon as it becomes suspended while getting in line:
    /// it never waits out an outage; otherwise as [`DistributedQueue::take`].
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
            if let Some(item) = self.untaken() {
                return Ok(Some(item));
            }
            let takers = takers_queue(&self.name);
            let Some(grant) = acquire(&self.client, takers, Vec::new(), wait).await? else {
                return Ok(None);
            };
            let gate = LockGuard::new(self.name.clone(), grant);
            // A take of this client still settling (one whose future was dropped, or whose
            // taker lock went while its removal's answer was out) finishes first: an item
            // it removed is stashed, and returned here before any other.
            let settling = self.settling().lock_owned().await;
            if let Some(item) = self.untaken() {
                // Released in the background: no await may stand between taking an item
                // out of the stash and returning it.
                drop(gate);
                return Ok(Some(item));
            }
            let oldest = match self.oldest_under(&gate, wait).await {
                Ok(Some(oldest)) => oldest,
                Ok(None) => {
                    release_gate(gate).await;
                    return Ok(None);
                }
                Err(e) => {
                    release_gate(gate).await;
                    return Err(e);
                }
            };
            if mutants::active(Mutant::TakeInPlace) {
                let taken = self.remove_under(&gate, oldest).await;
                release_gate(gate).await;
                drop(settling);
                return taken;
            }
            // From the remove on, the take runs to its end on a task of its own: if this
            // future is dropped meanwhile, an item it removed is kept for this client's
            // next take instead of being lost.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let queue = self.clone();
            tokio::spawn(
                async move {
                    let taken = queue.remove_under(&gate, oldest).await;
                    // The taker lock goes first, so that the caller's next take (or
                    // `try_take`) finds it free; until `settling` is dropped, that take
                    // waits for an item this one may still stash.
                    release_gate(gate).await;
                    // Refused once the take was dropped (its pickup closed the channel).
                    if let Err(Ok(Some(item))) = tx.send(taken) {
                        queue.stash(item);
                    }
                    drop(settling);
                }
                .in_current_span(),
            );
            let mut pickup = Pickup {
                rx: Some(rx),
                queue: self.clone(),
            };
            let Some(rx) = pickup.rx.as_mut() else {
                return Err(Error::new(ErrorKind::Unexpected, "the take's pickup is gone"));
            };
            let taken = rx.await.map_err(|_| Error::closed());
            pickup.rx = None;
            taken?
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation(op))
    }

    /// Held by each of this client's takes of the queue from its removal until it settled
    /// (item returned or stashed).
    fn settling(&self) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.client
            .core()
            .settling
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.name.clone())
            .or_default()
            .clone()
    }

    /// The oldest item a dropped take of this client removed, if any.
    fn untaken(&self) -> Option<Vec<u8>> {
        let mut untaken = self
            .client
            .core()
            .untaken
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let items = untaken.get_mut(&self.name)?;
        let item = items.pop_front();
        if items.is_empty() {
            untaken.remove(&self.name);
        }
        item
    }

    /// Keeps `item`, removed for a take that was dropped, for this client's next take.
    fn stash(&self, item: Vec<u8>) {
        tracing::debug!(name = %self.name, "coord.queue_take_dropped: the item goes to this client's next take");
        self.client
            .core()
            .untaken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.name.clone())
            .or_default()
            .push_back(item);
    }

    /// The items now, oldest first: the keys right under `<name>/items/` whose last
    /// segment is a sequence number (never the keys of a queue whose name extends this
    /// one's, such as `<name>/items`).
    async fn items(&self) -> Result<Vec<Entry>> {
        let prefix = format!("{}/", self.items_prefix());
        Ok(self
            .client
            .list(&self.items_prefix())
            .await?
            .into_iter()
            .filter(|e| e.key.strip_prefix(&prefix).is_some_and(is_seq))
            .collect())
    }

    /// The oldest item while holding the taker lock `gate`; waits for one with `wait`.
    async fn oldest_under(&self, gate: &LockGuard, wait: bool) -> Result<Option<Entry>> {
        loop {
            let Some(oldest) = self.items().await?.into_iter().next() else {
                if !wait {
                    return Ok(None);
                }
                self.until_an_item(gate).await?;
                continue;
            };
            return Ok(Some(oldest));
        }
    }

    /// Removes `oldest` under the taker lock `gate`, fenced by it — or, if someone else
    /// removed it meanwhile, the next oldest; `None` when none is left. The removal leaves
    /// a receipt, `<name>/taken/<seq>` holding the gate's token (unique to this take), in
    /// the same transaction: a removal whose answer was lost is settled by reading it,
    /// even after the taker lock or the session is gone. The receipt is deleted once the
    /// take settled.
    async fn remove_under(&self, gate: &LockGuard, mut oldest: Entry) -> Result<Option<Vec<u8>>> {
        let mine = gate.token().get().to_string().into_bytes();
        loop {
            let receipt = self.receipt_key(&oldest.key);
            let txn = if mutants::active(Mutant::TakeUnchecked) {
                Txn::new().delete(oldest.key.clone())
            } else {
                Txn::new()
                    .fenced_by(gate.fence())
                    .check_version(oldest.key.clone(), oldest.version)
                    .delete(oldest.key.clone())
                    .put(receipt.clone(), mine.clone())
            };
            match self.client.commit(txn).await {
                Ok(_) => {
                    self.discard_receipt(receipt);
                    return Ok(Some(oldest.value));
                }
                // Removed by someone else (an operator, a client outside the taker
                // lock): the next one.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => {
                    match self.items().await?.into_iter().next() {
                        Some(next) => oldest = next,
                        None => return Ok(None),
                    }
                }
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    return Err(Error::new(
                        ErrorKind::SessionLost,
                        "the queue's taker lock was lost (session lost); nothing was taken — call again",
                    ));
                }
                Err(e) if e.outcome_unknown() => return self.resolve_unknown(gate, oldest, &mine, e).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// The receipt key of the item at `item_key`.
    fn receipt_key(&self, item_key: &str) -> String {
        let seq = item_key.rsplit('/').next().unwrap_or_default();
        format!("{}/taken/{seq}", self.name)
    }

    /// Deletes a receipt in the background, retried a while (one left behind only takes
    /// a key).
    fn discard_receipt(&self, receipt: String) {
        let client = self.client.clone();
        tokio::spawn(async move {
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
            for _ in 0..20 {
                match client.delete(&receipt).await {
                    Ok(_) => return,
                    Err(e) if e.kind() == ErrorKind::Closed || !e.is_retryable() => return,
                    Err(_) => backoff.wait().await,
                }
            }
        });
    }

    /// After a removal of unknown outcome: the receipt says whether it landed (it holds
    /// `mine`: this take has the item), another take removed the item, or nothing did —
    /// then, while the taker lock holds, the removal is sent again, and once it is gone
    /// nothing was taken (a late removal is refused by its fence).
    async fn resolve_unknown(
        &self,
        gate: &LockGuard,
        item: Entry,
        mine: &[u8],
        cause: Error,
    ) -> Result<Option<Vec<u8>>> {
        let receipt = self.receipt_key(&item.key);
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let read = async {
                let receipt_now = self.client.get(&receipt).await?;
                let item_now = self.client.get(&item.key).await?;
                Ok::<_, Error>((receipt_now, item_now))
            };
            match read.await {
                Ok((Some(r), _)) if r.value == mine => {
                    self.discard_receipt(receipt);
                    return Ok(Some(item.value));
                }
                // Taken by another take (this one's removal never landed).
                Ok((Some(_), _)) => return self.not_taken(),
                Ok((None, Some(v))) if v.version == item.version => {
                    if gate.state() == HoldState::Lost {
                        return Err(Error::new(
                            ErrorKind::SessionLost,
                            "the queue's taker lock was lost (session lost); nothing was taken — call again",
                        ));
                    }
                    let txn = Txn::new()
                        .fenced_by(gate.fence())
                        .check_version(item.key.clone(), item.version)
                        .delete(item.key.clone())
                        .put(receipt.clone(), mine.to_vec());
                    match self.client.commit(txn).await {
                        Ok(_) => {
                            self.discard_receipt(receipt);
                            return Ok(Some(item.value));
                        }
                        Err(e) if e.outcome_unknown() || e.is_retryable() => {
                            tracing::debug!(error = %e, "coord.queue_take_retry");
                        }
                        // Gone meanwhile, or the lock went: read again.
                        Err(e) if matches!(e.kind(), ErrorKind::VersionMismatch | ErrorKind::Fenced) => {}
                        Err(e) => return Err(e.with_outcome_unknown(true)),
                    }
                }
                // Gone or replaced with no receipt of this take: another take removed it
                // (and settled); nothing was taken here.
                Ok((None, _)) => return self.not_taken(),
                Err(e) if e.kind() == ErrorKind::Closed => return Err(cause.with_outcome_unknown(true)),
                Err(e) if e.is_retryable() => tracing::debug!(error = %e, "coord.queue_take_retry"),
                Err(e) => return Err(e.with_outcome_unknown(true)),
            }
            backoff.wait().await;
        }
    }

    fn not_taken(&self) -> Result<Option<Vec<u8>>> {
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "queue {:?}: the item being taken was removed by another consumer meanwhile; nothing was taken — call again",
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
                Some(Ok(ConfigEvent::Snapshot(entries)))
                    if entries
                        .iter()
                        .any(|e| e.key.strip_prefix(&prefix).is_some_and(is_seq)) =>
                {
                    return Ok(());
                }
                Some(Ok(ConfigEvent::Put(e))) if e.key.strip_prefix(&prefix).is_some_and(is_seq) => {
                    return Ok(());
                }
                Some(Ok(_)) => {}
            }
        }
    }
}

/// The receiving end of a take that runs on a task of its own. Dropped before the take
/// returned, it closes the channel — a later send is refused, and the task keeps the
/// item — and keeps an item sent just before: either way the item goes to the client's
/// next take, never nowhere.
struct Pickup {
    rx: Option<tokio::sync::oneshot::Receiver<Result<Option<Vec<u8>>>>>,
    queue: DistributedQueue,
}

impl Drop for Pickup {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(Ok(Some(item))) = rx.try_recv() {
                self.queue.stash(item);
            }
        }
    }
}

/// Releases a taker lock, logging a refusal (its entry then goes with the session).
async fn release_gate(gate: LockGuard) {
    if let Err(e) = gate.release().await {
        tracing::warn!(error = %e, "coord.queue_taker_release_refused");
    }
}

/// Whether `segment` is an item's sequence number (20 digits).
fn is_seq(segment: &str) -> bool {
    segment.len() == 20 && segment.bytes().all(|b| b.is_ascii_digit())
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
