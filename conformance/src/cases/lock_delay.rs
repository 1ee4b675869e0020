//! Lock-delay cases: a holder that vanishes (its entry deleted, its session killed)
//! hands over only after the delay, counted from when the waiter saw it go; a release
//! hands over at once, with no more requests than without a lock-delay; `inspect`
//! shows who holds off and until when.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, ensure};
use coord_core::{CampaignOptions, Client, HoldState, LockOptions, RecipeKind};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, settle, still_waiting, within};
use coord_core::Granted as _;
use coord_core::Lock as _;

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
    crate::util::held(&ctx, "b's guard after the lock-delay", || granted.state()).await?;
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
    let lease = a
        .semaphore("pool", 1)?
        .with_options(coord_core::LockOptions::new().lock_delay(DELAY))?
        .acquire()
        .await?;
    let sb = b
        .semaphore("pool", 1)?
        .with_options(coord_core::LockOptions::new().lock_delay(DELAY))?;
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
    let sa = a
        .semaphore("pool", 1)?
        .with_options(coord_core::LockOptions::new().lock_delay(LONG))?;
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

/// A holder that released once and took the lock again on the same session (a worker
/// loop) then has its session killed: the waiter still holds off. On etcd and mem the
/// entry's key is `<dir>/<session hex>` on every acquisition of a session, so a mark
/// naming the key alone passed the *earlier* release off as this entry's (a review
/// found it: the waiter took the lock within milliseconds).
pub async fn killed_holder_after_an_earlier_release_holds_off(ctx: Ctx) -> CaseResult {
    vanished_after_an_earlier_release(ctx, true).await
}

/// As [`killed_holder_after_an_earlier_release_holds_off`], with an operator deleting
/// the re-taken entry instead.
pub async fn deleted_holder_after_an_earlier_release_holds_off(ctx: Ctx) -> CaseResult {
    vanished_after_an_earlier_release(ctx, false).await
}

async fn vanished_after_an_earlier_release(ctx: Ctx, kill: bool) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let options = LockOptions::new().lock_delay(DELAY);
    // One round of a worker loop: take, work, release; then the next round.
    a.lock_with("res", options.clone()).await?.release().await?;
    let held = a.lock_with("res", options.clone()).await?;
    let (bc, o) = (b.clone(), options.clone());
    let mut waiting = tokio::spawn(async move { bc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 2).await?;
    settle().await;
    still_waiting(&mut waiting, "b took a held lock").await?;
    let vanished = Instant::now();
    if kill {
        ctx.factory().kill_session(&a).await?;
    } else {
        ctx.factory().operator_delete(held.fence().resource()).await?;
    }
    let next = within(ctx.expiry_wait() + DELAY * 2, "b takes the lock", waiting).await???;
    let waited = vanished.elapsed();
    ensure!(
        waited >= DELAY,
        "b took the lock {waited:?} after its holder {} vanished ({}), within the lock-delay of {DELAY:?}; \
         the holder had released once before on the same session",
        held.fence().resource(),
        if kill { "session killed" } else { "entry deleted" }
    );
    next.release().await?;
    Ok(())
}

/// The delay is kept by the contenders waiting when the holder vanished, those of the
/// holder's own client too: a second contender of the same client waits its local turn
/// while an operator deletes the holder's entry (the holder watches its hold, as one
/// that stops work on loss does, and drops its guard then: the client's turn passes on
/// with the guard); it takes the lock no earlier than the delay after.
pub async fn same_client_waiter_holds_off(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let options = LockOptions::new().lock_delay(DELAY);
    let held = a.lock_with("res", options.clone()).await?;
    let resource = held.fence().resource().to_owned();
    // The holder stops its work and drops its guard when the lock is lost (the usual
    // pattern).
    let watcher = tokio::spawn(async move {
        held.lost().await;
        drop(held);
    });
    let (ac, o) = (a.clone(), options.clone());
    let mut waiting = tokio::spawn(async move { ac.lock_with("res", o).await });
    settle().await;
    still_waiting(&mut waiting, "a second contender of a took a held lock").await?;
    let deleted = Instant::now();
    ctx.factory().operator_delete(&resource).await?;
    let next = within(LONG, "the second contender takes the lock", waiting).await???;
    let waited = deleted.elapsed();
    within(LONG, "the deleted holder sees its loss", watcher).await??;
    ensure!(
        waited >= DELAY,
        "a contender waiting (on the same client) when the holder's entry was deleted took the lock \
         {waited:?} after, within the lock-delay of {DELAY:?}"
    );
    next.release().await?;
    Ok(())
}

/// A lock-delay over [`coord_core::MAX_LOCK_DELAY`] is refused with `InvalidArgument`
/// before any request (a `Duration::MAX` made the waiter panic once); the limit itself
/// is taken.
pub async fn overlong_lock_delay_is_refused(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    for delay in [
        Duration::MAX,
        coord_core::MAX_LOCK_DELAY + Duration::from_millis(1),
    ] {
        let before = a.stats();
        let err = a
            .lock_with("res", LockOptions::new().lock_delay(delay))
            .await
            .err()
            .context("an overlong lock-delay was taken")?;
        ensure!(
            err.kind() == coord_core::ErrorKind::InvalidArgument,
            "got {err}, expected InvalidArgument"
        );
        ensure!(
            a.stats().since(&before).data_requests() == 0,
            "an overlong lock-delay sent a request before it was refused"
        );
        // A semaphore and a read/write lock refuse it as they are given it, before any
        // request (a semaphore's acquire would join its gate queue first).
        let before = a.stats();
        let err = a
            .semaphore("pool", 1)?
            .with_options(LockOptions::new().lock_delay(delay))
            .err()
            .context("a semaphore took an overlong lock-delay")?;
        ensure!(err.kind() == coord_core::ErrorKind::InvalidArgument, "got {err}");
        let err = a
            .rw_lock("rw")?
            .with_options(LockOptions::new().lock_delay(delay))
            .err()
            .context("a read/write lock took an overlong lock-delay")?;
        ensure!(err.kind() == coord_core::ErrorKind::InvalidArgument, "got {err}");
        ensure!(
            a.stats().since(&before).data_requests() == 0,
            "a semaphore or read/write lock sent a request before refusing an overlong lock-delay"
        );
    }
    a.lock_with("res", LockOptions::new().lock_delay(coord_core::MAX_LOCK_DELAY))
        .await?
        .release()
        .await?;
    Ok(())
}

/// a waiter cancelled while it holds off leaves no entry, and the
/// waiter behind it still takes the lock no earlier than the delay after the holder
/// vanished.
pub async fn cancelled_during_hold_off(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let options = LockOptions::new().lock_delay(DELAY);
    let held = a.lock_with("res", options.clone()).await?;
    let (bc, o) = (b.clone(), options.clone());
    let b_waits = tokio::spawn(async move { bc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 2).await?;
    let (cc, o) = (c.clone(), options.clone());
    let mut c_waits = tokio::spawn(async move { cc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 3).await?;
    let deleted = Instant::now();
    ctx.factory().operator_delete(held.fence().resource()).await?;
    eventually(Duration::from_secs(10), "b holds off", || async {
        Ok(a.inspect_one(RecipeKind::Lock, "res").await?.lock_delay.is_some())
    })
    .await?;
    b_waits.abort();
    let _ = b_waits.await;
    still_waiting(&mut c_waits, "c took the lock while b held off").await?;
    let next = within(LONG, "c takes the lock", c_waits).await???;
    let waited = deleted.elapsed();
    ensure!(waited >= DELAY, "c took the lock {waited:?} after the deletion");
    let view = a.inspect_one(RecipeKind::Lock, "res").await?;
    ensure!(
        view.holders.len() == 1 && view.waiters.is_empty(),
        "left behind: {view:?}"
    );
    next.release().await?;
    drop(held);
    Ok(())
}

/// a waiter whose own entry is deleted while it holds off is never
/// granted.
pub async fn own_entry_deleted_during_hold_off(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let options = LockOptions::new().lock_delay(DELAY);
    let held = a.lock_with("res", options.clone()).await?;
    let (bc, o) = (b.clone(), options.clone());
    let b_waits = tokio::spawn(async move { bc.lock_with("res", o).await });
    queued(&a, RecipeKind::Lock, "res", 2).await?;
    ctx.factory().operator_delete(held.fence().resource()).await?;
    let waiter = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    eventually(Duration::from_secs(10), "b holds off", || {
        let (a, w) = (a.clone(), waiter.clone());
        async move {
            let view = a.inspect_one(RecipeKind::Lock, "res").await?;
            if let Some(d) = view.lock_delay {
                *w.lock().unwrap_or_else(|p| p.into_inner()) = d.waiter;
                return Ok(true);
            }
            Ok(false)
        }
    })
    .await?;
    let waiter = waiter.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let resource = held.fence().resource().to_owned();
    let i = resource.find("locks/res/").context("the holder's path")?;
    ctx.factory()
        .operator_delete(&format!("{}{waiter}", &resource[..i]))
        .await?;
    match within(LONG, "b's wait ends", b_waits).await?? {
        Ok(guard) => anyhow::bail!(
            "b was granted though its entry was deleted: {guard:?} {:?}",
            guard.state()
        ),
        Err(e) => println!("[{}] b: {e}", a.kind()),
    }
    drop(held);
    Ok(())
}

/// A holder that closes its client releases with the mark: a waiter keeping a 30 s
/// lock-delay takes the lock at once (a review found `close()` counted as vanishing).
pub async fn closed_holder_hands_over_at_once(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let held = a.lock_with("res", LockOptions::new().lock_delay(LONG)).await?;
    let bc = b.clone();
    let mut waiting =
        tokio::spawn(async move { bc.lock_with("res", LockOptions::new().lock_delay(LONG)).await });
    queued(&b, RecipeKind::Lock, "res", 2).await?;
    settle().await;
    still_waiting(&mut waiting, "b took a held lock").await?;
    let closed = Instant::now();
    a.close().await?;
    let next = within(
        LONG / 2,
        "b takes the lock a released by closing its client (holding off would take 30 s)",
        waiting,
    )
    .await???;
    println!(
        "[{}] b took the lock {:?} after a closed",
        b.kind(),
        closed.elapsed()
    );
    ensure!(
        held.state() == HoldState::Lost,
        "the closed client's guard says {:?}",
        held.state()
    );
    next.release().await?;
    // The guard's own release after the close changes nothing.
    held.release().await.ok();
    Ok(())
}

/// A holder whose hold is watched (`state()` arms a watch on its entry) releases while
/// a contender of the same client waits its turn: the waiter takes the lock at once —
/// the deletion its own release caused is not a vanishing (a review found the watch
/// event, which ZooKeeper sends before the delete's reply, counted as one).
pub async fn same_client_release_with_a_watched_hold_hands_over_at_once(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    for round in 0..3 {
        let name = format!("res-{round}");
        let held = a.lock_with(&name, LockOptions::new().lock_delay(LONG)).await?;
        crate::util::held(&ctx, "a fresh guard", || held.state()).await?;
        let (ac, n) = (a.clone(), name.clone());
        let mut waiting =
            tokio::spawn(async move { ac.lock_with(&n, LockOptions::new().lock_delay(LONG)).await });
        settle().await;
        still_waiting(&mut waiting, "a second contender took a held lock").await?;
        held.release().await?;
        let next = within(
            LONG / 2,
            "the local waiter takes the released lock (holding off would take 30 s)",
            waiting,
        )
        .await???;
        next.release().await?;
    }
    Ok(())
}

/// Two contenders of the holder's client wait when its entry is deleted; the first
/// holds off and is cancelled meanwhile: the second still takes the lock no earlier
/// than the delay after the deletion (a review found the cancelled one's removal
/// cleared the record).
pub async fn same_client_waiter_cancelled_during_hold_off(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let options = LockOptions::new().lock_delay(DELAY);
    let held = a.lock_with("res", options.clone()).await?;
    let resource = held.fence().resource().to_owned();
    // Dropped once lost, as a holder that stops its work does: the turn passes on.
    let watcher = tokio::spawn(async move {
        held.lost().await;
        drop(held);
    });
    let (ac, o) = (a.clone(), options.clone());
    let first = tokio::spawn(async move { ac.lock_with("res", o).await });
    settle().await;
    let (ac, o) = (a.clone(), options.clone());
    let mut second = tokio::spawn(async move { ac.lock_with("res", o).await });
    settle().await;
    let deleted = Instant::now();
    ctx.factory().operator_delete(&resource).await?;
    within(LONG, "the deleted holder sees its loss", watcher).await??;
    // The first waiter takes its turn and holds off; cancel it then.
    tokio::time::sleep(DELAY / 3).await;
    first.abort();
    let _ = first.await;
    still_waiting(&mut second, "the second waiter took the lock").await?;
    let next = within(LONG, "the second waiter takes the lock", second).await???;
    let waited = deleted.elapsed();
    ensure!(
        waited >= DELAY,
        "the second local waiter took the lock {waited:?} after the deletion, within the delay of {DELAY:?}"
    );
    next.release().await?;
    Ok(())
}

/// A try never waits out a lock-delay: after its own client's holder lost its session,
/// `try_lock_with` on the new session answers at once.
pub async fn try_after_a_lost_session_answers_at_once(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let held = a.lock_with("res", LockOptions::new().lock_delay(LONG)).await?;
    ctx.factory().kill_session(&a).await?;
    within(ctx.expiry_wait(), "the holder sees its loss", held.lost()).await?;
    // The client declares its session lost before the server can have expired it, so
    // the old entry may still be there for a moment: try until the lock is free, each
    // try answering at once (a hold-off would take 30 s).
    let deadline = Instant::now() + ctx.expiry_wait();
    loop {
        let got = within(
            Duration::from_secs(10),
            "try_lock_with answers (holding off would take 30 s)",
            crate::util::retrying(|| a.try_lock_with("res", LockOptions::new().lock_delay(LONG))),
        )
        .await??;
        if let Some(guard) = got {
            guard.release().await?;
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the lock was still held {:?} after the holder's session was killed",
            ctx.expiry_wait()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
