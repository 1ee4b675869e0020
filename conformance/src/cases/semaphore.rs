//! Counting semaphore cases: at most `permits` holders, FIFO, herd-free, a crashed
//! holder's lease returned, a dropped acquisition leaving nothing, the stored count.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::{ErrorKind, HoldState};

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, stays_pending, still_waiting, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// With two permits, two clients hold at once and a third waits until one leaves; its
/// token is above both.
pub async fn at_most_permits_hold(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let la = within(QUICK, "a acquires", a.semaphore("pool", 2)?.acquire()).await??;
    let lb = within(QUICK, "b acquires beside a", b.semaphore("pool", 2)?.acquire()).await??;
    crate::util::held(&ctx, "lease a", || la.state()).await?;
    crate::util::held(&ctx, "lease b", || lb.state()).await?;
    ensure!(
        c.semaphore("pool", 2)?.try_acquire().await?.is_none(),
        "try_acquire got a third lease of two"
    );
    let sc = c.semaphore("pool", 2)?;
    let mut waiter = tokio::spawn(async move { sc.acquire().await });
    settle().await;
    still_waiting(&mut waiter, "a third lease of two was granted").await?;
    let top = la.token().max(lb.token());
    la.release().await?;
    let lc = within(QUICK, "c acquires once a lease is back", waiter).await???;
    ensure!(
        lc.token() > top,
        "the new lease's token is not above the earlier ones"
    );
    lb.release().await?;
    lc.release().await?;
    ensure!(
        a.semaphore("pool", 2)?.try_acquire().await?.is_some(),
        "try_acquire failed with every lease back: a failed try left something behind"
    );
    Ok(())
}

/// One client holds several leases of one semaphore at once.
pub async fn one_client_holds_several(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let s = a.semaphore("pool", 3)?;
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(within(QUICK, &format!("lease {i} on one client"), s.acquire()).await??);
    }
    ensure!(
        b.semaphore("pool", 3)?.try_acquire().await?.is_none(),
        "a fourth lease of three"
    );
    for l in held {
        l.release().await?;
    }
    ensure!(b.semaphore("pool", 3)?.try_acquire().await?.is_some());
    Ok(())
}

/// Six clients, two permits, three rounds each: never more than two inside.
pub async fn never_more_than_permits_under_contention(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(6).await?;
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in clients {
        let (inside, peak) = (inside.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let s = c.semaphore("pool", 2)?;
            for _ in 0..3 {
                let l = s.acquire().await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                if now > 2 {
                    bail!("{now} holders inside a semaphore of two");
                }
                // Long enough for the next acquirer to get its lease meanwhile.
                tokio::time::sleep(Duration::from_millis(100)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                l.release().await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        within(Duration::from_secs(60), "an acquirer finishes its rounds", t).await???;
    }
    ensure!(
        peak.load(Ordering::SeqCst) == 2,
        "the two permits were never both used"
    );
    Ok(())
}

/// `try_acquire` answers from the leases, not from who happens to be at the internal
/// lock: ten concurrent tries (five tasks of each of two clients) on an idle semaphore
/// of ten permits all get a lease, an eleventh try gets `None`, and a try beside a
/// waiting `acquire` (at the internal lock while every permit is held) gets `None` too
/// and leaves nothing behind. A try with another count is refused even when it races.
pub async fn concurrent_tries_on_an_idle_semaphore_all_hold(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut tasks = Vec::new();
    for c in [&a, &b] {
        for _ in 0..5 {
            let s = c.semaphore("pool", 10)?;
            tasks.push(tokio::spawn(async move { s.try_acquire().await }));
        }
    }
    let mut leases = Vec::new();
    for t in tasks {
        if let Some(l) = within(QUICK, "a try answers", t).await??? {
            leases.push(l);
        }
    }
    ensure!(
        leases.len() == 10,
        "{} of 10 concurrent tries on an idle 10-permit semaphore got a lease",
        leases.len()
    );
    let mut tokens: Vec<_> = leases.iter().map(|l| l.token()).collect();
    tokens.sort();
    tokens.dedup();
    ensure!(tokens.len() == 10, "two leases share a token");
    ensure!(
        a.semaphore("pool", 10)?.try_acquire().await?.is_none(),
        "an eleventh lease was granted"
    );
    // A waiting acquirer at the internal lock while every permit is held: tries still
    // answer None at once, and a released permit goes to the waiter.
    let waiter = {
        let s = b.semaphore("pool", 10)?;
        tokio::spawn(async move { s.acquire().await })
    };
    settle().await;
    ensure!(
        within(
            QUICK,
            "a try beside a waiter",
            a.semaphore("pool", 10)?.try_acquire()
        )
        .await??
        .is_none(),
        "a try was granted an 11th lease beside a waiter"
    );
    leases
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no lease"))?
        .release()
        .await?;
    let got = within(QUICK, "the waiter gets the released permit", waiter).await???;
    crate::util::held(&ctx, "the lease", || got.state()).await?;
    got.release().await?;
    for l in leases {
        l.release().await?;
    }
    // Another count beside a held lease is refused, also on the try path.
    let held = a.semaphore("pool", 10)?.try_acquire().await?;
    ensure!(held.is_some());
    match b.semaphore("pool", 3)?.try_acquire().await {
        Err(e) if e.kind() == ErrorKind::InvalidArgument => {}
        other => bail!("a try with another count beside a held lease: {other:?}"),
    }
    Ok(())
}

/// FIFO and herd-free: three clients wait behind one lease of one; each release grants
/// the next in arrival order and notifies at most two waiting clients (the one at the
/// front, watching the leases, and the next, watching the internal lock), however many
/// wait.
pub async fn fifo_and_herd_free(ctx: Ctx) -> CaseResult {
    let holder = ctx.client().await?;
    let waiters = ctx.clients(3).await?;
    let mut first = Some(holder.semaphore("pool", 1)?.acquire().await?);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut release_txs = Vec::new();
    for (i, w) in waiters.iter().enumerate() {
        let (s, tx) = (w.semaphore("pool", 1)?, tx.clone());
        let (rel_tx, rel_rx) = tokio::sync::oneshot::channel::<()>();
        release_txs.push(Some(rel_tx));
        tokio::spawn(async move {
            if let Ok(l) = s.acquire().await {
                let _ = tx.send(i);
                let _ = rel_rx.await;
                let _ = l.release().await;
            }
        });
        settle().await;
    }
    let events = |ws: &[coord_core::Client]| ws.iter().map(|w| w.stats().watch_events).collect::<Vec<u64>>();
    for round in 0..3usize {
        let before = events(&waiters);
        match round {
            0 => {
                let l = first.take().ok_or_else(|| anyhow::anyhow!("released twice"))?;
                l.release().await?
            }
            r => release_txs[r - 1]
                .take()
                .ok_or_else(|| anyhow::anyhow!("released twice"))?
                .send(())
                .map_err(|_| anyhow::anyhow!("waiter {} gone", r - 1))?,
        }
        let next = within(QUICK, "the next waiter acquires", rx.recv()).await?;
        ensure!(next == Some(round), "waiter {next:?} acquired in round {round}");
        settle().await;
        let after = events(&waiters);
        let woken = (0..waiters.len())
            .filter(|i| round == 0 || *i != round - 1)
            .filter(|i| after[*i] > before[*i])
            .count();
        ensure!(
            woken <= 2,
            "release {round} notified {woken} waiting clients; expected at most 2"
        );
    }
    for t in release_txs.into_iter().flatten() {
        let _ = t.send(());
    }
    Ok(())
}

/// A crashed holder (no cleanup) gives its lease back within the session timeout.
pub async fn crashed_holder_returns_its_lease(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let l = a.semaphore("pool", 1)?.acquire().await?;
    let token = l.token();
    std::mem::forget(l); // a crashed process runs no destructor
    let s = b.semaphore("pool", 1)?;
    let mut waiter = tokio::spawn(async move { s.acquire().await });
    settle().await;
    still_waiting(&mut waiter, "a second lease of one was granted").await?;
    ctx.factory().crash(&a).await?;
    let lb = within(ctx.expiry_wait(), "b acquires after the holder crashed", waiter).await???;
    ensure!(lb.token() > token);
    Ok(())
}

/// A holder whose session is killed reports `Lost`, and its lease goes to the waiter.
pub async fn killed_holder_reports_lost(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let l = a.semaphore("pool", 1)?.acquire().await?;
    let s = b.semaphore("pool", 1)?;
    let waiter = tokio::spawn(async move { s.acquire().await });
    settle().await;
    ctx.factory().kill_session(&a).await?;
    let _lb = within(
        ctx.expiry_wait(),
        "b acquires after a's session was killed",
        waiter,
    )
    .await???;
    within(QUICK, "the killed holder's lease reports Lost", l.lost()).await?;
    Ok(())
}

/// An `acquire` dropped while waiting leaves nothing: the next acquirer gets the lease as
/// soon as the holder releases it.
pub async fn dropped_acquire_leaves_nothing(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let la = a.semaphore("pool", 1)?.acquire().await?;
    stays_pending(
        Duration::from_millis(500),
        "b.acquire while the only lease is held",
        b.semaphore("pool", 1)?.acquire(),
    )
    .await?;
    let s = c.semaphore("pool", 1)?;
    let waiter = tokio::spawn(async move { s.acquire().await });
    settle().await;
    la.release().await?;
    let _lc = within(
        QUICK,
        "c acquires; a lease or internal-lock entry left by b's dropped future would block it",
        waiter,
    )
    .await???;
    Ok(())
}

/// A client asking for another permit count while leases are held gets
/// `InvalidArgument`, and takes nothing; once no lease is held, its count applies.
pub async fn permit_count_mismatch_is_an_error(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let la = a.semaphore("pool", 2)?.acquire().await?;
    match b.semaphore("pool", 3)?.acquire().await {
        Err(e) if e.kind() == ErrorKind::InvalidArgument => {
            ensure!(
                e.message().contains('2'),
                "the error does not name the stored count: {e}"
            );
        }
        Err(e) => bail!("expected InvalidArgument for another count, got {e}"),
        Ok(_) => bail!("a client with 3 permits acquired beside leases made with 2"),
    }
    let second = a
        .semaphore("pool", 2)?
        .try_acquire()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the refused acquisition left something behind"))?;
    second.release().await?;
    la.release().await?;
    let lb = within(
        QUICK,
        "b's count applies once nothing is held",
        b.semaphore("pool", 3)?.acquire(),
    )
    .await??;
    lb.release().await?;
    ensure!(a.semaphore("x", 0).is_err(), "zero permits accepted");
    Ok(())
}

/// An acquirer whose session is killed while it waits (at the front, watching the
/// leases) gets `SessionLost` and leaves nothing behind: the next acquirer gets the lease
/// once the holder releases it.
pub async fn waiter_session_lost_fails_and_leaves_nothing(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let la = a.semaphore("pool", 1)?.acquire().await?;
    let sb = b.semaphore("pool", 1)?;
    let waiter = tokio::spawn(async move { sb.acquire().await });
    settle().await;
    ctx.factory().kill_session(&b).await?;
    match within(ctx.expiry_wait(), "the waiting acquirer ends", waiter).await?? {
        Err(e) if e.kind() == ErrorKind::SessionLost => {}
        other => bail!("an acquirer whose session was lost while waiting returned {other:?}"),
    }
    la.release().await?;
    let _lc = within(
        QUICK,
        "c acquires once the holder released",
        c.semaphore("pool", 1)?.acquire(),
    )
    .await??;
    Ok(())
}

/// A `try_acquire` with one permit racing a waiting `acquire` with five on an idle
/// semaphore (the try skips the internal lock, so it can land between the waiter's count
/// check and its lease): the two never both hold — one is refused with
/// `InvalidArgument`. The try is started at 24 points across the waiter's acquisition
/// (its link slowed where the backend can).
pub async fn counts_never_mix_when_a_try_races_a_waiter(ctx: Ctx) -> CaseResult {
    const TRIALS: u64 = 24;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let delayed = crate::util::slow_link(&ctx, &a, Duration::from_millis(20)).await?;
    let started = tokio::time::Instant::now();
    a.semaphore("calibrate", 5)?.acquire().await?.release().await?;
    let span = started.elapsed();
    let mut outcomes = Vec::new();
    for trial in 0..TRIALS {
        let name = format!("mixed{trial}");
        let wide = a.semaphore(&name, 5)?;
        let narrow = b.semaphore(&name, 1)?;
        let waiter = tokio::spawn(async move { wide.acquire().await });
        if delayed {
            tokio::time::sleep(span.mul_f64(trial as f64 / TRIALS as f64)).await;
        } else {
            for _ in 0..trial {
                tokio::task::yield_now().await;
            }
        }
        let tried = narrow.try_acquire().await;
        let waited = within(QUICK, "the waiter", waiter).await??;
        match (&tried, &waited) {
            (Ok(Some(t)), Ok(w)) if t.state() == HoldState::Held && w.state() == HoldState::Held => {
                bail!(
                    "trial {trial}: a one-permit lease (try_acquire, token {}) and a five-permit lease (acquire, token {}) \
                     of semaphore {name:?} hold at once; neither was refused for its count",
                    t.token(),
                    w.token()
                );
            }
            _ => {}
        }
        outcomes.push(format!(
            "{trial}: try {:?} / acquire {:?}",
            tried.as_ref().map(|o| o.is_some()).map_err(|e| e.kind()),
            waited.as_ref().map(|_| ()).map_err(|e| e.kind())
        ));
        if let Ok(Some(t)) = tried {
            let _ = t.release().await;
        }
        if let Ok(w) = waited {
            let _ = w.release().await;
        }
    }
    tracing::debug!(?outcomes, "tries racing waiters");
    Ok(())
}

/// A waiter's lease entry deleted from outside (an operator) while it waits is never a
/// grant: once a holder releases, the waiter confirms its own entry before holding and
/// fails (`SessionLost`: its entry is gone) instead of holding without one — so no
/// acquirer's lease holds beside it past the permits. With one permit (the waiter right
/// behind the holder) and with two (the waiter among the holders).
pub async fn waiter_entry_deleted_is_never_a_valid_grant(ctx: Ctx) -> CaseResult {
    for permits in [1u32, 2] {
        waiter_entry_deleted_with(&ctx, permits).await?;
    }
    Ok(())
}

async fn waiter_entry_deleted_with(ctx: &Ctx, permits: u32) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let name = format!("pool{permits}");
    let mut held = Vec::new();
    for _ in 0..permits {
        held.push(a.semaphore(&name, permits)?.acquire().await?);
    }
    let sb = b.semaphore(&name, permits)?;
    let waiter = tokio::spawn(async move { sb.acquire().await });
    settle().await;
    let paths: Vec<String> = held.iter().map(|l| l.fence().resource().to_owned()).collect();
    let queued = crate::util::queued_beside(ctx, &paths).await?;
    ensure!(
        queued.len() == 1,
        "{permits} permits: expected the waiter's one lease entry, found {queued:?}"
    );
    ctx.factory().operator_delete(&queued[0]).await?;
    let released = held.remove(0);
    let first = released.token();
    released.release().await?;
    match within(QUICK, "the waiter returns", waiter).await?? {
        Ok(lb) => {
            let lc = c.semaphore(&name, permits)?.try_acquire().await?;
            bail!(
                "{permits} permits: the waiter whose lease entry was deleted was granted (token {}, state {:?}); another acquirer {}",
                lb.token(),
                lb.state(),
                if lc.is_some() {
                    "holds beside it"
                } else {
                    "was refused"
                }
            );
        }
        Err(e) => ensure!(
            e.kind() == ErrorKind::SessionLost,
            "{permits} permits: the waiter failed with {e}"
        ),
    }
    let lc = within(QUICK, "c acquires", c.semaphore(&name, permits)?.acquire()).await??;
    ensure!(lc.token() > first, "c's token is not above the released holder's");
    Ok(())
}
