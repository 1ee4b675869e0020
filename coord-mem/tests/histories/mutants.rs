//! Negative controls with coord's own mutants (feature `mutants`).

use super::*;

// ---------------------------------------------------------------------------------------
// Negative controls with coord's own mutants (feature `mutants`)

/// Runs `history` over seeds (the plan's, then more) with `mutant` switched on, until a
/// run reports a violation; fails if none does within `MUTANT_MAX_SEEDS`.
#[cfg(feature = "mutants")]
pub(crate) fn caught_with<F, Fut>(mutant: coord_core::mutants::Mutant, what: &str, history: F) -> String
where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    caught_with_all(&[mutant], what, history)
}

/// As [`caught_with`], with several mutants switched on together (a bug that takes two
/// slips to do harm).
#[cfg(feature = "mutants")]
pub(crate) fn caught_with_all<F, Fut>(all: &[coord_core::mutants::Mutant], what: &str, history: F) -> String
where
    F: Fn(u64) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    use coord_core::mutants;
    let plan = plan();
    let mutant = all;
    for m in all {
        mutants::set(*m, true);
    }
    let (mut caught, mut tried) = (0usize, 0usize);
    block_on(async {
        let mut seeds = plan.seeds.clone();
        let mut next = seeds.iter().max().map_or(0, |s| s + 1);
        loop {
            for (_, violated) in run_all(
                &seeds,
                move |seed| async move { Ok::<_, String>(history(seed).await) },
            )
            .await
            {
                tried += 1;
                caught += usize::from(matches!(violated, Ok(true)));
            }
            if caught > 0 || tried as u64 >= MUTANT_MAX_SEEDS {
                break;
            }
            seeds = (next..next + parallel() as u64).collect();
            next += parallel() as u64;
        }
    });
    for m in all {
        mutants::set(*m, false);
    }
    assert!(
        caught > 0,
        "the {what} mutant ({mutant:?}) was never caught in {tried} seeds"
    );
    let line = format!("mutant {what} ({mutant:?}) caught in {caught}/{tried}");
    println!("histories {line}");
    line
}

#[cfg(feature = "mutants")]
#[test]
pub(crate) fn library_mutants_are_caught() {
    use coord_core::mutants::Mutant;
    let _one = one_at_a_time();
    let exclusion = |kind: Kind| {
        move |seed| async move {
            exclusion_history(seed, kind, true)
                .await
                .map(|r| r.violated())
                .unwrap_or(false)
        }
    };
    caught_with(Mutant::FenceIgnored, "fence ignored, lock", exclusion(Kind::Lock));
    caught_with(
        Mutant::FenceIgnored,
        "fence ignored, semaphore",
        exclusion(Kind::Semaphore),
    );
    let queue = |seed| async move {
        queue_history(seed)
            .await
            .map(|r| !r.violations.is_empty())
            .unwrap_or(false)
    };
    caught_with(Mutant::MarkUnchecked, "mark unchecked", exclusion(Kind::Lock));
    // Caught by what the handles say (the beliefs), under a nemesis of entry deletes.
    let beliefs = |kind: Kind| {
        move |seed| async move {
            exclusion_history_under(seed, kind, true, Profile::EntryDeletes)
                .await
                .map(|r| r.violated())
                .unwrap_or(false)
        }
    };
    caught_with(
        Mutant::OwnEntryUnchecked,
        "own entry unchecked",
        beliefs(Kind::Lock),
    );
    caught_with(Mutant::LeaveByKey, "leave by key", beliefs(Kind::Lock));
    caught_with(Mutant::TakeWithoutReceipt, "take without a receipt", queue);
    caught_with(Mutant::TakeUnchecked, "take unchecked", queue);
}
