//! What the recipes' entries under a namespace mean: who holds each lock and who waits,
//! which semaphore leases are out, who leads each election, how deep each queue is —
//! read from the same layouts the recipes write, and Curator's, kazoo's and Go's.
//!
//! Each primitive declares its layout in its own file ([`Layout`]: its directory, its
//! entries' roles, its admission rule, what the config store adds); this file lists
//! them, in the order [`Client::inspect`] reports them, and [`view::read`] reads each.

use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::name::validate_name;
use crate::primitives::view::{self, Layout, RecipeKind, RecipeView};
use crate::primitives::{
    double_barrier, election, lock, registry, rw_lock, semaphore, two_phase, work_queue,
};

/// Every primitive's layout, in the order of [`RecipeKind::ALL`].
const LAYOUTS: &[&dyn Layout] = &[
    &lock::LAYOUT,
    &rw_lock::LAYOUT,
    &semaphore::LAYOUT,
    &election::LAYOUT,
    &registry::LAYOUT,
    &work_queue::LAYOUT,
    &double_barrier::LAYOUT,
    &two_phase::LAYOUT,
];

impl Client {
    /// Every recipe with a name at or below `prefix` (segment-wise; empty for the whole
    /// namespace) that has entries now: locks, read/write locks, semaphores, elections,
    /// services, queues, double barriers and two-phase commits, with who holds and who
    /// waits — read from the layouts coord, Curator, kazoo and Go's `concurrency`
    /// write. Sorted by kind, then name. Plain barriers and counters are config keys
    /// like any other and are not listed.
    ///
    /// A snapshot for people, not for decisions: each kind is read separately (on
    /// ZooKeeper, a walk of its directories), so an entry that comes or goes meanwhile
    /// may be missed or seen; nothing is locked or changed.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad prefix; `Unavailable`, `Timeout`, `Closed`,
    /// `PermissionDenied`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (reads).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::{Lock as _, RecipeKind};
    /// let client = coord_mem::connect("mem://inspect-doc")?;
    /// let _guard = client.lock_with("reports/nightly", coord_core::LockOptions::new().holder("host-a:41")).await?;
    /// let views = client.inspect("reports").await?;
    /// assert_eq!(views[0].kind, RecipeKind::Lock);
    /// assert_eq!(views[0].holders[0].value, b"host-a:41");
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, prefix: &str) -> Result<Vec<RecipeView>> {
        if !prefix.is_empty() {
            validate_name("prefix", prefix).map_err(|e| e.with_operation("inspect"))?;
        }
        let span = tracing::debug_span!("coord.inspect", backend = self.kind(), prefix);
        async {
            let mut views = Vec::new();
            for layout in LAYOUTS {
                views.extend(view::read(self, *layout, prefix, false).await?);
            }
            Ok(views)
        }
        .instrument(span)
        .await
        .map_err(|e: Error| e.with_operation("inspect"))
    }

    /// The recipe of kind `kind` named `name` as [`Client::inspect`] sees it; one with
    /// nothing in it when it has no entries.
    ///
    /// # Errors
    ///
    /// As [`Client::inspect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (reads).
    pub async fn inspect_one(&self, kind: RecipeKind, name: &str) -> Result<RecipeView> {
        validate_name("name", name).map_err(|e| e.with_operation("inspect"))?;
        let span = tracing::debug_span!("coord.inspect", backend = self.kind(), %kind, name);
        let Some(layout) = LAYOUTS.iter().find(|l| l.kind() == kind) else {
            return Ok(RecipeView::new(kind, name.to_owned()));
        };
        view::read_one(self, *layout, name)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("inspect"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_one_layout_in_order() {
        let kinds: Vec<RecipeKind> = LAYOUTS.iter().map(|l| l.kind()).collect();
        assert_eq!(kinds, RecipeKind::ALL.to_vec());
    }
}
