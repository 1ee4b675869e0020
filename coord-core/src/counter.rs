//! Shared counters: a config key holding an integer, changed by compare-and-set.

use crate::client::Client;
use crate::error::Result;
use crate::fencing::Fence;
use crate::name::validate_name;

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
    pub(crate) client: Client,
    pub(crate) key: String,
    pub(crate) fence: Option<Fence>,
}

impl Client {
    /// The shared counter at config key `key` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad key.
    pub fn counter(&self, key: &str) -> Result<SharedCounter> {
        validate_name("counter key", key).map_err(|e| e.with_operation("counter"))?;
        Ok(SharedCounter {
            client: self.clone(),
            key: key.to_owned(),
            fence: None,
        })
    }
}

impl SharedCounter {
    /// The counter's config key.
    pub fn key(&self) -> &str {
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
