//! Distributed FIFO queues for low-volume work distribution.

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::name::validate_name;

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
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) max_items: u32,
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
