//! Per-name local queueing: within one client, contenders for the same lock or election
//! reach the server one at a time, so a client never has two contenders for one name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// A map of FIFO async mutexes keyed by name; entries are dropped when unused.
#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    slots: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

/// Holding this means the client's one remote contender for the name is yours.
#[derive(Debug)]
pub(crate) struct LocalTurn {
    _guard: OwnedMutexGuard<()>,
}

impl LocalQueue {
    /// Waits (FIFO) for this client's turn at `name`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future gives up its place in the queue.
    pub(crate) async fn turn(&self, name: &str) -> LocalTurn {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.retain(|_, s| Arc::strong_count(s) > 1);
            slots.entry(name.to_owned()).or_default().clone()
        };
        LocalTurn {
            _guard: slot.lock_owned().await,
        }
    }

    /// This client's turn at `name` if nobody else local holds it.
    pub(crate) fn try_turn(&self, name: &str) -> Option<LocalTurn> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|_, s| Arc::strong_count(s) > 1);
        let slot = slots.entry(name.to_owned()).or_default().clone();
        slot.try_lock_owned().ok().map(|g| LocalTurn { _guard: g })
    }
}
