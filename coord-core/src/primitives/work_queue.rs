//! Distributed FIFO queues for low-volume work distribution.
//!
//! The queue over the config store and the contender queue: push = one transaction that
//! moves the tail and adds the item; take = under the taker lock (FIFO, herd-free), an
//! atomic remove of the oldest item, fenced by the lock, or a watch until one comes.

use std::time::Duration;

use futures::StreamExt;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{acquire, suspended, try_deadline, unless_suspended};
use crate::error::{Error, ErrorKind, Result};
use crate::granted::Granted as _;
use crate::hold::HoldState;
use crate::mutants::{self, Mutant};
use crate::name::{validate_name, validate_value};
use crate::primitives::config::ConfigStore;
use crate::primitives::lock::{LockGuard, no_grant};
use crate::primitives::view::{Layout, RecipeKind, RecipeView, matching, split_role};
use crate::raw::{Admission, Backoff, EntryClass, KvStore, QueueSpec};
use crate::session::SessionState;
use crate::txn::Txn;
use crate::types::{ConfigEvent, Entry};

/// How many keys one read of the oldest item fetches (more when keys that are no items
/// sort among them).
const OLDEST_PAGE: usize = 4;

/// The most items a queue may be configured to hold. A push, a take and `len` read the
/// oldest item and a count, never every item's value; but on ZooKeeper the count is a
/// listing of the names in the namespace's one config directory (every key of the
/// namespace, each name its key's length plus 4 bytes): 10,000 items of a queue with a
/// short name list in about 400 KB, read on every push and take. Past ~25,000 such keys
/// the listing passes 1 MB: coord still reads it (40,000 keys measured), but Java
/// clients (Curator, `zkCli.sh`) refuse a reply past their default `jute.maxbuffer`, so
/// the namespace's config directory could no longer be listed next to them.
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
/// Meant for tens to thousands of items, not as a message broker: takes run one at a
/// time. A push, a take and `len` read the tail, the oldest item and a count — never
/// every item's value. Keys a foreign writer puts right under an item's key
/// (`<name>/items/<seq>/…`) count as items in `len` and the bound. The bound counts
/// queued items, not items a take removed and has not settled (its receipt): with
/// takes cut short, the queue can hold one more item per receipt left, until the next
/// take puts them back.
///
/// # Operators
///
/// An item deleted by hand is gone: a take waiting for it waits on for the next. A
/// tail deleted by hand is repaired by the next push, which goes past every item and
/// receipt still there (reading them all, that once) — never onto an item or ahead of
/// one. A tail set back by hand (to a smaller number) is found only when a push's
/// sequence meets an item still queued — then repaired the same way; set back below
/// every item queued, pushes go ahead of them, and one set onto an item a take has
/// removed but not settled (a receipt) keeps that item from being put back. Until a
/// push repairs it, items at or past a tail set back are not seen by takes and `len`.
///
/// # Delivery
///
/// A take removes its item and writes a receipt holding it (`<name>/taken/<seq>.<token>`)
/// in one transaction, fenced by the taker lock; the receipt is deleted once `take` has
/// returned the item, before the taker lock is released. A receipt some take left
/// behind — dropped (a timeout, a cancelled task), its client closed or crashed, its
/// session lost, its answer lost — is put back at the head of the queue by the next
/// holder of the taker lock, before it takes anything. So no exit loses an item: one
/// is lost only if the process that `take` returned it to loses it. An item can be
/// delivered twice: when the consumer it was returned to crashes (or loses its session)
/// before its receipt is deleted. [`Client::close`] finishes those deletions first.
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

/// How long a take keeps trying to delete its receipt once it returned its item.
const SETTLE_FOR: Duration = Duration::from_secs(30);

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
            // Set once the tail was found behind an item (set back or deleted by hand).
            let mut behind = false;
            loop {
                // The tail first, then the items: a push between the two moves the tail,
                // and this one's transaction fails and reads again — so the count it
                // checks is never below the truth.
                let (next, tail) = self.tail().await?;
                // With no tail (a new queue, or one whose tail was deleted by hand) or a
                // tail behind an item, the next sequence is past every item and receipt:
                // a push never lands before items still queued, nor on one.
                let seq = if tail.is_none() || behind {
                    self.past_every_item(next).await?
                } else {
                    next
                };
                let held = self.count(Some(seq)).await?;
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
                    .check_absent(self.item_key(seq))
                    .put(
                        self.tail_key(),
                        seq.checked_add(1)
                            .ok_or_else(|| past_the_last(&self.name, &self.tail_key()))?
                            .to_string()
                            .into_bytes(),
                    )
                    .put(self.item_key(seq), item.clone());
                match self.client.commit(txn).await {
                    Ok(_) => return Ok(seq),
                    // Another push moved the tail — or the tail is behind an item: read
                    // again.
                    Err(e) if e.kind() == ErrorKind::VersionMismatch => {
                        // Behind only if the tail is still as read (no other push moved
                        // it) and the item key is taken.
                        if !behind
                            && self.tail().await?.1 == tail
                            && self.client.get(&self.item_key(seq)).await?.is_some()
                        {
                            tracing::warn!(
                                queue = %self.name, seq,
                                "coord.queue_tail_behind: the tail is at or behind an item (set back or deleted by hand); pushing past every item"
                            );
                            behind = true;
                        } else {
                            backoff.wait().await;
                        }
                    }
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
        async { self.count(Self::bound(self.tail().await?)).await }
            .await
            .map_err(|e| e.with_operation("queue len"))
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
    /// lock. Dropped once its remove was sent, the item it may have removed is in its
    /// receipt, and the next take (of any client) puts it back at the head of the queue
    /// first. See the type's "Delivery".
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
            // This client's previous take of the queue may still be settling (deleting
            // its receipt, then releasing the taker lock): waited for, so that a try
            // does not find the lock busy with this client's own settle. A try does not
            // wait out an outage for it.
            let settling = self.settling();
            if wait {
                drop(settling.lock().await);
            } else {
                let mut session = self.client.backend().session();
                let generation = session.borrow().generation;
                if session.borrow().state == SessionState::Suspended {
                    return Err(suspended());
                }
                drop(
                    unless_suspended(
                        &mut session,
                        generation,
                        false,
                        try_deadline(self.client.session_timeout()),
                        async { Ok(settling.lock().await) },
                    )
                    .await?,
                );
            }
            let takers = takers_queue(&self.name);
            let Some(grant) = acquire(self.client.core(), takers, Vec::new(), wait).await? else {
                return Ok(None);
            };
            let gate = LockGuard::new(self.name.clone(), grant);
            // Dropped at any await below, the gate is released in the background; an
            // item a removal in flight took is in its receipt, put back by the next
            // holder.
            let taken = if wait {
                self.take_under(&gate, true).await
            } else {
                // A try does not wait out an outage here either: cut short, a removal
                // it sent is in its receipt, put back by the next take.
                let mut session = self.client.backend().session();
                let generation = gate.hold().generation();
                let deadline = try_deadline(self.client.session_timeout());
                unless_suspended(
                    &mut session,
                    generation,
                    true,
                    deadline,
                    self.take_under(&gate, false),
                )
                .await
            };
            match taken {
                Ok(Some((item, receipt))) => {
                    // No await between here and returning the item.
                    self.settle(gate, receipt);
                    Ok(Some(item))
                }
                // A try does not wait for the release either: the taker lock goes in the
                // background (dropped), as a try's cut-short entry does.
                Ok(None) if !wait => Ok(None),
                Err(e) if !wait => Err(e),
                Ok(None) => {
                    release_gate(gate).await;
                    Ok(None)
                }
                Err(e) => {
                    release_gate(gate).await;
                    Err(e)
                }
            }
        }
        .instrument(span)
        .await
        .map_err(|e| e.with_operation(op))
    }

    /// Under the taker lock `gate`: puts back what earlier takes left in receipts, then
    /// takes the oldest item (waiting for one with `wait`); the item and its receipt.
    async fn take_under(&self, gate: &LockGuard, wait: bool) -> Result<Option<(Vec<u8>, String)>> {
        // Its receipts and its oldest item, read at once.
        let (receipts, items) = self.contents().await?;
        let oldest = if !receipts.is_empty() && !mutants::active(Mutant::TakeWithoutReceipt) {
            self.put_back_receipts(gate, receipts).await?;
            self.oldest_under(gate, wait).await?
        } else {
            match items {
                Some(oldest) => Some(oldest),
                None => self.oldest_under(gate, wait).await?,
            }
        };
        let Some(mut oldest) = oldest else {
            return Ok(None);
        };
        loop {
            match self.remove_under(gate, oldest).await? {
                Some(taken) => return Ok(Some(taken)),
                // Every item it found was removed by someone else (an operator): a take
                // waits on for the next.
                None if wait => match self.oldest_under(gate, true).await? {
                    Some(next) => oldest = next,
                    None => return Ok(None),
                },
                None => return Ok(None),
            }
        }
    }

    /// The queue's receipts (oldest first) and its oldest item now: the receipts are
    /// few (one per take cut short), the items are not read beyond the oldest.
    async fn contents(&self) -> Result<(Vec<Entry>, Option<Entry>)> {
        let taken = format!("{}/", self.receipts_prefix());
        let (listed, oldest) =
            futures::future::try_join(self.client.list(&self.receipts_prefix()), self.oldest()).await?;
        let receipts = listed
            .into_iter()
            .filter(|e| {
                e.key
                    .strip_prefix(&taken)
                    .is_some_and(|r| parse_receipt(r).is_some())
            })
            .collect();
        Ok((receipts, oldest))
    }

    /// Deletes `receipt` once its take returned the item, then releases the taker lock,
    /// on a task [`Client::close`] finishes first. The receipt goes before the lock, so
    /// the next holder never puts back an item that was delivered.
    fn settle(&self, gate: LockGuard, receipt: String) {
        let client = self.client.clone();
        // Takes of one queue by one client settle one at a time (they hold the taker
        // lock until settled), so this is free: held until the settle ends.
        let settling = self.settling().try_lock_owned().ok();
        self.client.core().pending.spawn(async move {
            let _settling = settling;
            let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(500));
            let until = tokio::time::Instant::now() + SETTLE_FOR;
            loop {
                match client.delete(&receipt).await {
                    Ok(_) => break,
                    Err(e) if e.is_retryable() && tokio::time::Instant::now() < until => backoff.wait().await,
                    // Left behind, the receipt puts its item back at the head of the
                    // queue: delivered again, never lost. So does one whose taker lock
                    // went first (the next holder may put it back before this delete).
                    Err(e) => {
                        tracing::debug!(error = %e, receipt, "coord.queue_receipt_left: its item may be delivered again");
                        break;
                    }
                }
            }
            release_gate(gate).await;
        });
    }

    /// Held by this client's take of the queue while it settles.
    fn settling(&self) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.client
            .core()
            .state::<Settling>()
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(self.name.clone())
            .or_default()
            .clone()
    }

    /// Puts every receipt another take left behind back at the head of the queue, under
    /// the taker lock `gate` (its holder is the only one taking, and takes settle their
    /// receipts before they release the lock): each at its own item key, which sorts
    /// before every item still queued (sequences only grow), in one transaction fenced
    /// by the lock that checks the receipt is still as read.
    async fn put_back_receipts(&self, gate: &LockGuard, receipts: Vec<Entry>) -> Result<()> {
        let prefix = format!("{}/", self.receipts_prefix());
        for receipt in receipts {
            let Some((seq, _token)) = receipt.key.strip_prefix(&prefix).and_then(parse_receipt) else {
                continue; // not a receipt of this layout
            };
            let item = self.item_key(seq);
            let txn = Txn::new()
                .fenced_by(gate.fence())
                .check_version(receipt.key.clone(), receipt.version)
                .check_absent(item.clone())
                .delete(receipt.key.clone())
                .put(item, receipt.value);
            match self.client.commit(txn).await {
                Ok(_) => tracing::debug!(receipt = %receipt.key, "coord.queue_item_put_back"),
                // Deleted or changed meanwhile (its take settled after all), or its
                // item key is taken: left as it is.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => {}
                Err(e) if e.kind() == ErrorKind::Fenced => return Err(gate_lost()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The queue's tail now: the next sequence number (0 with no tail yet) and the tail
    /// key's version (`None`: no tail).
    async fn tail(&self) -> Result<(u64, Option<crate::Version>)> {
        Ok(match self.client.get(&self.tail_key()).await? {
            None => (0, None),
            Some(v) => (parse_seq(&self.tail_key(), &v.value)?, Some(v.version)),
        })
    }

    /// The first sequence number at or past `from` that is past every item and every
    /// receipt of the queue: where a push goes when the tail cannot be trusted (none, or
    /// behind an item). A new queue's costs two reads (its receipts, none; a count of its
    /// items, 0); every item's key and value are read only when there are items (a tail
    /// deleted by hand, or set back).
    async fn past_every_item(&self, from: u64) -> Result<u64> {
        // Receipts first, then items: a receipt put back between the two reads (under
        // the taker lock: the receipt deleted, its item made) is seen as one or the other.
        let receipt_at = format!("{}/", self.receipts_prefix());
        let receipts = self.client.list(&self.receipts_prefix()).await?;
        let mut seqs: Vec<(u64, String)> = receipts
            .into_iter()
            .filter_map(|e| Some((parse_receipt(e.key.strip_prefix(&receipt_at)?)?.0, e.key)))
            .collect();
        if self.count(None).await? > 0 {
            let item_at = format!("{}/", self.items_prefix());
            let items = self.client.list(&self.items_prefix()).await?;
            seqs.extend(items.into_iter().filter_map(|e| {
                let seq = e
                    .key
                    .strip_prefix(&item_at)
                    .filter(|k| is_seq(k))?
                    .parse::<u64>()
                    .ok()?;
                Some((seq, e.key))
            }));
        }
        let mut next = from;
        for (seq, key) in seqs {
            next = next.max(
                seq.checked_add(1)
                    .ok_or_else(|| past_the_last(&self.name, &key))?,
            );
        }
        Ok(next)
    }

    /// The sequence every item is below: the tail's, when there is one.
    fn bound(tail: (u64, Option<crate::Version>)) -> Option<u64> {
        tail.1.map(|_| tail.0)
    }

    /// The range of item keys, as `first_in` bounds: item keys are 20 digits, each below
    /// `below` (the tail) when there is one (keys of a queue whose name extends this one's,
    /// `<name>/items/7/…`, sort outside it). With no tail (deleted by hand while items
    /// remain), every 20-digit key.
    fn item_range(below: Option<u64>) -> (String, String) {
        let to = match below {
            Some(seq) => format!("{seq:020}"),
            None => format!("{}\u{1}", "9".repeat(20)),
        };
        (format!("{:020}", 0), to)
    }

    /// The oldest item now: the first key right under `<name>/items/` that is a
    /// sequence number below the tail, read without reading every item. A key that is no
    /// item but sorts among them (one nested under an item's key) is passed over.
    async fn oldest(&self) -> Result<Option<Entry>> {
        let tail = self.tail().await?;
        let prefix = format!("{}/", self.items_prefix());
        let (mut from, to) = Self::item_range(Self::bound(tail));
        loop {
            let (page, _) = KvStore::first_in(
                &**self.client.backend(),
                &self.items_prefix(),
                &from,
                &to,
                OLDEST_PAGE,
            )
            .await?;
            let full = page.len() == OLDEST_PAGE;
            let mut last = None;
            for e in page {
                if e.key.strip_prefix(&prefix).is_some_and(is_seq) {
                    return Ok(Some(e));
                }
                last = Some(e.key);
            }
            match last.and_then(|k| k.strip_prefix(&prefix).map(str::to_owned)) {
                // Past the last key passed over.
                Some(rest) if full => from = format!("{rest}\0"),
                _ => return Ok(None),
            }
        }
    }

    /// How many items the queue holds (keys in the item range below `below`): a count,
    /// no value read.
    async fn count(&self, below: Option<u64>) -> Result<usize> {
        let (from, to) = Self::item_range(below);
        Ok(
            KvStore::first_in(&**self.client.backend(), &self.items_prefix(), &from, &to, 0)
                .await?
                .1,
        )
    }

    /// The oldest item while holding the taker lock `gate`; waits for one with `wait`.
    async fn oldest_under(&self, gate: &LockGuard, wait: bool) -> Result<Option<Entry>> {
        // Woken for an item it then does not find (deleted by hand meanwhile, or an item
        // key at or past a tail set back by hand, not yet repaired by a push): it waits
        // a while before watching again, instead of spinning.
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        let mut woken = false;
        loop {
            let Some(oldest) = self.oldest().await? else {
                if !wait {
                    return Ok(None);
                }
                if woken {
                    backoff.wait().await;
                }
                self.until_an_item(gate).await?;
                woken = true;
                continue;
            };
            return Ok(Some(oldest));
        }
    }

    /// Removes `oldest` under the taker lock `gate`, fenced by it — or, if someone else
    /// removed it meanwhile, the next oldest; `None` when none is left. The removal
    /// writes a receipt holding the item, `<name>/taken/<seq>.<gate's token>`, in the same
    /// transaction: until the take settles, the item lives on the server, never only in
    /// this process. Returns the item and its receipt's key.
    async fn remove_under(&self, gate: &LockGuard, mut oldest: Entry) -> Result<Option<(Vec<u8>, String)>> {
        let token = gate.token().get();
        loop {
            let receipt = self.receipt_key(&oldest.key, token);
            let txn = if mutants::active(Mutant::TakeUnchecked) {
                Txn::new()
                    .delete(oldest.key.clone())
                    .put(receipt.clone(), oldest.value.clone())
            } else if mutants::active(Mutant::TakeWithoutReceipt) {
                Txn::new()
                    .fenced_by(gate.fence())
                    .check_version(oldest.key.clone(), oldest.version)
                    .delete(oldest.key.clone())
            } else {
                Txn::new()
                    .fenced_by(gate.fence())
                    .check_version(oldest.key.clone(), oldest.version)
                    .delete(oldest.key.clone())
                    .put(receipt.clone(), oldest.value.clone())
            };
            match self.client.commit(txn).await {
                Ok(_) => return self.delivered(gate, oldest.value, receipt),
                // Removed by someone else (an operator, a client outside the taker
                // lock): the next one.
                Err(e) if e.kind() == ErrorKind::VersionMismatch => match self.oldest().await? {
                    Some(next) => oldest = next,
                    None => return Ok(None),
                },
                Err(e) if e.kind() == ErrorKind::Fenced => return Err(gate_lost()),
                Err(e) if e.outcome_unknown() => return self.resolve_unknown(gate, oldest, receipt, e).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// The item a removal took, to return — unless the taker lock is already lost: the
    /// next holder may then put the receipt back (or has), so the item is left to it
    /// (back at the head of the queue) instead of being delivered twice.
    fn delivered(
        &self,
        gate: &LockGuard,
        item: Vec<u8>,
        receipt: String,
    ) -> Result<Option<(Vec<u8>, String)>> {
        if gate.hold().peek() == HoldState::Lost {
            return Err(Error::new(
                ErrorKind::SessionLost,
                "the queue's taker lock was lost (session lost) as an item was taken: it was not taken here, \
                 and goes back to the head of the queue — call again",
            ));
        }
        Ok(Some((item, receipt)))
    }

    fn receipts_prefix(&self) -> String {
        format!("{}/taken", self.name)
    }

    /// The receipt key of the item at `item_key` taken under the taker lock grant `token`.
    fn receipt_key(&self, item_key: &str, token: u64) -> String {
        let seq = item_key.rsplit('/').next().unwrap_or_default();
        format!("{}/{seq}.{token:020}", self.receipts_prefix())
    }

    /// After a removal of unknown outcome: its receipt (named by this take's token) says
    /// it landed; otherwise, while the taker lock holds and the item is as read, the
    /// removal is sent again. Once the lock is lost nothing is known to be taken — and
    /// nothing is lost: a removal that lands late leaves its receipt, which the next
    /// holder of the lock puts back at the head.
    async fn resolve_unknown(
        &self,
        gate: &LockGuard,
        item: Entry,
        receipt: String,
        cause: Error,
    ) -> Result<Option<(Vec<u8>, String)>> {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            let read = async {
                let receipt_now = self.client.get(&receipt).await?;
                let item_now = self.client.get(&item.key).await?;
                Ok::<_, Error>((receipt_now, item_now))
            };
            match read.await {
                Ok((Some(_), _)) => return self.delivered(gate, item.value, receipt),
                Ok((None, Some(v))) if v.version == item.version => {
                    if gate.hold().peek() == HoldState::Lost {
                        return Err(Error::new(
                            ErrorKind::SessionLost,
                            "the queue's taker lock was lost (session lost) while an item was being taken: \
                             nothing was taken here (a removal that lands late puts its item back at the \
                             head of the queue) — call again",
                        ));
                    }
                    let txn = Txn::new()
                        .fenced_by(gate.fence())
                        .check_version(item.key.clone(), item.version)
                        .delete(item.key.clone())
                        .put(receipt.clone(), item.value.clone());
                    match self.client.commit(txn).await {
                        Ok(_) => return self.delivered(gate, item.value, receipt),
                        Err(e) if e.outcome_unknown() || e.is_retryable() => {
                            tracing::debug!(error = %e, "coord.queue_take_retry");
                        }
                        // Gone meanwhile, or the lock went: read again.
                        Err(e) if matches!(e.kind(), ErrorKind::VersionMismatch | ErrorKind::Fenced) => {}
                        Err(e) => return Err(e.with_outcome_unknown(true)),
                    }
                }
                // Gone or replaced with no receipt of this take: another take removed it
                // (this one's removal never landed, or landed and was put back after
                // the lock went); nothing was taken here.
                Ok((None, _)) => return self.not_taken(),
                Err(e) if e.kind() == ErrorKind::Closed => return Err(cause.with_outcome_unknown(true)),
                Err(e) if e.is_retryable() => tracing::debug!(error = %e, "coord.queue_take_retry"),
                Err(e) => return Err(e.with_outcome_unknown(true)),
            }
            backoff.wait().await;
        }
    }

    fn not_taken<T>(&self) -> Result<T> {
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

/// A push with nowhere to go: `key` (an item, a receipt or the tail) stands at the last
/// sequence number.
fn past_the_last(queue: &str, key: &str) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!(
            "queue {queue:?}: {key:?} stands at the last sequence number ({}), so no push can go after it; \
             remove it by hand",
            u64::MAX
        ),
    )
}

/// Releases a taker lock, logging a refusal (its entry then goes with the session).
async fn release_gate(gate: LockGuard) {
    if let Err(e) = gate.release().await {
        tracing::warn!(error = %e, "coord.queue_taker_release_refused");
    }
}

/// The taker lock lost under a take: nothing was taken.
fn gate_lost() -> Error {
    Error::new(
        ErrorKind::SessionLost,
        "the queue's taker lock was lost (session lost); nothing was taken — call again",
    )
}

/// A receipt's name, `<seq>.<token>` (both 20 digits): the item's sequence and the
/// taker lock grant's token.
fn parse_receipt(name: &str) -> Option<(u64, u64)> {
    let (seq, token) = name.split_once('.')?;
    (is_seq(seq) && is_seq(token)).then(|| Some((seq.parse().ok()?, token.parse().ok()?)))?
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

/// Per queue name, held by this client's take of that queue while it settles (receipt
/// deleted, taker lock released): a `try_take` right after a `take` waits for it instead
/// of finding the taker lock busy with this client's own settle. One per client.
#[derive(Default)]
struct Settling(std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>);

/// How `coord inspect` reads distributed queues: the consumers waiting in `queues/<name>/takers`, and its depth from the config store.
pub(crate) struct QueueLayout;

/// [`QueueLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: QueueLayout = QueueLayout;

#[async_trait::async_trait]
impl Layout for QueueLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::Queue
    }

    fn root(&self) -> &'static str {
        "queues"
    }

    fn name_and_role(&self, rel: &str, _name: &str) -> Option<(String, &'static str)> {
        split_role(rel, &[("takers", "")])
    }

    /// The queues with items or a tail in the config store.
    async fn config_names(&self, client: &Client, prefix: &str, exact: bool) -> Result<Vec<String>> {
        let names = client
            .list(prefix)
            .await?
            .into_iter()
            .filter_map(|e| match e.key.rsplit_once('/') {
                Some((name, "tail")) => Some(name.to_owned()),
                _ => {
                    let (rest, _) = e.key.rsplit_once('/')?;
                    let name = rest.strip_suffix("/items")?;
                    is_item_key(name, &e.key).then(|| name.to_owned())
                }
            });
        Ok(matching(names, prefix, exact))
    }

    /// Its depth: the items now.
    async fn fill(&self, client: &Client, view: &mut RecipeView) -> Result<()> {
        let items = client.list(&format!("{}/items", view.name)).await?;
        view.depth = Some(items.iter().filter(|e| is_item_key(&view.name, &e.key)).count());
        Ok(())
    }
}

/// Whether `key` is an item of queue `name`: `<name>/items/<20 digits>`.
fn is_item_key(name: &str, key: &str) -> bool {
    key.strip_prefix(name)
        .and_then(|r| r.strip_prefix("/items/"))
        .is_some_and(|seq| seq.len() == 20 && seq.bytes().all(|b| b.is_ascii_digit()))
}
