//! Lock-delay cases: a holder that vanishes (its entry deleted, its session killed)
//! hands over only after the delay, counted from when the waiter saw it go; a release
//! hands over at once, with no more requests than without a lock-delay; `inspect`
//! shows who holds off and until when.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, ensure};
use coord_core::{CampaignOptions, Client, HoldState, LockOptions, RecipeKind};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, settle, still_waiting, within};

/// Long enough that a hand-over that waited it cannot pass for one that did not, on a
/// loaded machine.
const LONG: Duration = Duration::from_secs(30);
/// Short enough to keep the cases quick; every bound on it is a lower bound.
const DELAY: Duration = Duration::from_secs(3);

/// Waits until `name`'s lock has `n` entries (its holder and waiters), as `inspect`
/// shows them.
async fn queued(client: &Client, kind: RecipeKind, name: &str, n: usize) -> anyhow::Result<()> {
    eventually(Duration::from_secs(20), "the contenders are queued", || async {
        let view = client.inspect_one(kind, name).await?;
        Ok(view.holders.len() + view.waiters.len() >= n)
    })
    .await
}

/// A holder that releases hands over at once though the waiter keeps a long
/// lock-delay, and the hand-over costs the waiter and the holder no more requests than
/// the same hand-over without one (the fewest of three each, as a request retried on a
/// loaded machine counts too).
pub async fn release_hands_over_at_once(ctx: Ctx) -> CaseResult {
    let mut fewest = [u64::MAX; 2];
    for round in 0..6 {
        let delayed = round % 2 == 1;
        let options = || {
            if delayed {
                LockOptions::new().lock_delay(LONG)
            } else {
                LockOptions::new()
            }
        };
        let name = format!("res-{round}");
        let (a, b) = (ctx.client().await?, ctx.client().await?);
        let held = a.lock_with(&name, options()).await?;
        let (bc, n, o) = (b.clone(), name.clone(), options());
        let mut waiting = tokio::spawn(async move { bc.lock_with(&n, o).await });
        queued(&a, RecipeKind::Lock, &name, 2).await?;
        settle().await;
        still_waiting(&mut waiting, "the waiter took a held lock").await?;
        let (a0, b0) = (a.stats(), b.stats());
        let released = Instant::now();
        held.release().await?;
        let next = within(LONG / 2, "the waiter takes the released lock at once", waiting).await???;
        let took = released.elapsed();
        let requests = a.stats().since(&a0).data_requests() + b.stats().since(&b0).data_requests();
        println!(
            "[{}] hand-over {} lock-delay: {requests} requests, {took:?}",
            a.kind(),
            if delayed { "with" } else { "without" }
        );
        let slot = &mut fewest[usize::from(delayed)];
        *slot = (*slot).min(requests);
        next.release().await?;
    }
    let [without, with] = fewest;
    ensure!(
        with <= without,
        "a hand-over with lock-delay took {with} requests, without {without} (the fewest of three each)"
    );
    Ok(())
}

/// An operator deletes the holder's entry: the waiter (with a lock-delay) takes the lock
/// no earlier than the delay after the deletion, and meanwhile `inspect` shows it
/// waiting, after which entry, until when. The released mark is back after its own
/// release: the next waiter takes it at once.
pub async fn deleted_holder_holds_off(ctx: Ctx) -> CaseResult {
    let (a, b, c) = (ctx.client().await?, ctx.client().await?, ctx.client().await?);
    let options = LockOptions::new().lock_delay(DELAY);
    let held = a.lock_with("res", options.clone()).await?;
    let (bc, o) = (b.clone(), options.clone());
    let mut b_waits = tokio::spawn(async move { bc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 2).await?;
    // c keeps a long delay: had it held off, it could not pass for one that did not.
    let (cc, o) = (c.clone(), LockOptions::new().lock_delay(LONG));
    let mut c_waits = tokio::spawn(async move { cc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 3).await?;
    still_waiting(&mut b_waits, "b took a held lock").await?;
    let deleted = Instant::now();
    let deleted_at = SystemTime::now();
    ctx.factory().operator_delete(held.fence().resource()).await?;
    // While b holds off, `inspect` says so.
    let mut seen_waiting = false;
    let granted = loop {
        if b_waits.is_finished() {
            break (&mut b_waits).await??;
        }
        let view = a.inspect_one(RecipeKind::Lock, "res").await?;
        if let Some(delay) = &view.lock_delay {
            ensure!(
                view.holders.is_empty(),
                "inspect shows holders {:?} while b holds off",
                view.holders
            );
            ensure!(
                view.waiters.first().map(|w| &w.path) == Some(&delay.waiter),
                "the contender holding off is not the first waiter: {view:?}"
            );
            ensure!(
                delay.until >= deleted_at + DELAY - Duration::from_millis(50),
                "inspect says b waits until {:?}, before the delay after the deletion",
                delay.until
            );
            seen_waiting = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let waited = deleted.elapsed();
    ensure!(
        waited >= DELAY,
        "b took the lock {waited:?} after its holder's entry was deleted, within the lock-delay of {DELAY:?}"
    );
    ensure!(
        seen_waiting,
        "inspect never showed b holding off (for {waited:?})"
    );
    ensure!(granted.state() == HoldState::Held);
    // b releases: c, behind it, takes the lock at once.
    still_waiting(&mut c_waits, "c took a held lock").await?;
    let released = Instant::now();
    granted.release().await?;
    let last = within(
        LONG / 2,
        "c takes the released lock (holding off would take 30 s)",
        c_waits,
    )
    .await???;
    println!(
        "[{}] c took the lock {:?} after b's release",
        c.kind(),
        released.elapsed()
    );
    last.release().await?;
    // The guard of the deleted entry says so.
    within(LONG, "the deleted holder's guard reports its loss", held.lost()).await?;
    Ok(())
}

/// The negative control of [`deleted_holder_holds_off`]: without a lock-delay, the
/// waiter takes the lock at once after an operator deletes the holder's entry.
pub async fn without_it_a_deleted_holder_hands_over_at_once(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let held = a.lock_with("res", LockOptions::new()).await?;
    let bc = b.clone();
    let waiting = tokio::spawn(async move { bc.lock_with("res", LockOptions::new()).await });
    queued(&a, RecipeKind::Lock, "res", 2).await?;
    ctx.factory().operator_delete(held.fence().resource()).await?;
    let next = within(LONG / 2, "b takes the lock", waiting).await???;
    next.release().await?;
    Ok(())
}

/// A leader's session is killed: the next candidate (with a lock-delay) leads no
/// earlier than the delay after the kill — after the server ended the session, which
/// is later still.
pub async fn killed_leader_holds_off(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let options = CampaignOptions::new().lock_delay(DELAY);
    let leading = a.campaign_with("svc", b"a".to_vec(), options.clone()).await?;
    let bc = b.clone();
    let mut waiting = tokio::spawn(async move { bc.campaign_with("svc", b"b".to_vec(), options).await });
    queued(&a, RecipeKind::Election, "svc", 2).await?;
    still_waiting(&mut waiting, "b leads beside a").await?;
    let killed = Instant::now();
    ctx.factory().kill_session(&a).await?;
    let next = within(
        ctx.expiry_wait() + DELAY * 2,
        "b leads after a's session ended",
        waiting,
    )
    .await???;
    let waited = killed.elapsed();
    ensure!(
        waited >= DELAY,
        "b led {waited:?} after a's session was killed, within the lock-delay of {DELAY:?}"
    );
    ensure!(next.token() > leading.token());
    next.resign().await?;
    Ok(())
}

/// A semaphore lease deleted by an operator frees its permit only after the delay for
/// a waiter with a lock-delay; a released lease at once (that waiter keeps a 30 s
/// delay).
pub async fn deleted_lease_holds_off(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let lease = a.semaphore("pool", 1)?.with_lock_delay(DELAY).acquire().await?;
    let sb = b.semaphore("pool", 1)?.with_lock_delay(DELAY);
    let mut waiting = tokio::spawn(async move { sb.acquire().await });
    queued(&a, RecipeKind::Semaphore, "pool", 2).await?;
    settle().await;
    still_waiting(&mut waiting, "b took a held permit").await?;
    let deleted = Instant::now();
    ctx.factory().operator_delete(lease.fence().resource()).await?;
    let next = within(LONG, "b takes the freed permit", waiting).await???;
    let waited = deleted.elapsed();
    ensure!(
        waited >= DELAY,
        "b took the permit {waited:?} after the lease was deleted, within the lock-delay of {DELAY:?}"
    );
    // Released, not deleted: a waiter takes it at once.
    let sa = a.semaphore("pool", 1)?.with_lock_delay(LONG);
    let mut waiting = tokio::spawn(async move { sa.acquire().await });
    queued(&b, RecipeKind::Semaphore, "pool", 2).await?;
    settle().await;
    still_waiting(&mut waiting, "a took a held permit").await?;
    next.release().await?;
    let again = within(
        LONG / 2,
        "a takes the released permit (holding off would take 30 s)",
        waiting,
    )
    .await???;
    again.release().await.context("releasing the last lease")?;
    Ok(())
}
