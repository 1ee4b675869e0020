//! Lock cases: exclusion, FIFO, try-lock, hand-over on death, cancellation, herd-freedom.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_core::{HoldState, Lock};
use tokio::sync::Mutex;

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, retrying, settle, stays_pending, still_waiting, through_short_outage, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// Others see who holds a lock: the holder's token and what it took the lock with,
/// while waiters queue behind it; `None` once it is free.
pub async fn holder_is_visible(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    ensure!(b.holder("res").await?.is_none(), "a fresh lock has a holder");
    let g = a
        .lock_with("res", coord_core::LockOptions::new().holder("host-a:41"))
        .await?;
    let b2 = b.clone();
    let mut waiting = tokio::spawn(async move {
        b2.lock_with("res", coord_core::LockOptions::new().holder("host-b:42"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    still_waiting(&mut waiting, "b.lock_with while a holds").await?;
    let seen = b.holder("res").await?;
    ensure!(
        seen.as_ref().map(|h| (h.token, h.holder.as_slice())) == Some((g.token(), &b"host-a:41"[..])),
        "holder seen as {seen:?}, held by token {} as host-a:41",
        g.token()
    );
    g.release().await?;
    let g2 = within(QUICK, "b's grant after a's release", waiting).await???;
    let seen = a.holder("res").await?;
    ensure!(
        seen.as_ref().map(|h| (h.token, h.holder.as_slice())) == Some((g2.token(), &b"host-b:42"[..])),
        "holder seen as {seen:?} after the hand-off"
    );
    g2.release().await?;
    ensure!(
        a.holder("res").await?.is_none(),
        "a released lock still has a holder"
    );
    let e = a
        .try_lock_with(
            "res",
            coord_core::LockOptions::new().holder(vec![0u8; coord_core::MAX_VALUE_LEN + 1]),
        )
        .await;
    ensure!(
        matches!(&e, Err(e) if e.kind() == coord_core::ErrorKind::InvalidArgument),
        "an oversized holder gave {e:?}"
    );
    Ok(())
}

/// Acquire, observe `Held`, release; the lock is then free.
pub async fn acquire_and_release(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let g = c.lock("res").await?;
    ensure!(g.token().get() > 0, "token must be positive");
    crate::util::held(&ctx, "a fresh guard", || g.state()).await?;
    ensure!(g.name() == "res");
    g.release().await?;
    let again = c.try_lock("res").await?;
    ensure!(again.is_some(), "lock not free after release");
    Ok(())
}

/// `try_lock` returns `None` while another client holds the lock, leaves no contender
/// behind, and succeeds once the lock is free.
pub async fn try_lock_none_when_held(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let g = a.lock("res").await?;
    ensure!(
        b.try_lock("res").await?.is_none(),
        "try_lock succeeded while held elsewhere"
    );
    g.release().await?;
    // Had b's failed attempt left a contender, c would be queued behind it.
    let got = c.try_lock("res").await?;
    ensure!(
        got.is_some(),
        "try_lock failed on a free lock: a failed try_lock left a contender behind"
    );
    Ok(())
}

/// A guard dropped without a release is released in the background; a `try_lock` on the
/// same client right after the drop waits for that release (within a try's deadline)
/// instead of answering `None` for a lock nobody holds. Ten rounds.
pub async fn try_lock_after_dropping_own_guard_gets_it(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let mut held = c.lock("res").await?;
    for round in 1..=10 {
        drop(held);
        held = c.try_lock("res").await?.with_context(|| {
            format!("round {round}: try_lock answered None right after this client dropped its own guard")
        })?;
    }
    held.release().await?;
    Ok(())
}

/// Eight clients contend; nobody is ever inside together and tokens rise with each grant.
pub async fn mutual_exclusion_under_contention(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(8).await?;
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in clients {
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let g = c.lock("counter").await?;
                if inside.swap(true, Ordering::SeqCst) {
                    bail!("two holders inside the critical section at once");
                }
                tokens.lock().await.push(g.token());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                g.release().await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let tokens = tokens.lock().await;
    ensure!(tokens.len() == 32, "expected 32 grants, saw {}", tokens.len());
    ensure!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not strictly increasing: {tokens:?}"
    );
    Ok(())
}

/// Waiters are served in the order they queued.
pub async fn fifo_order(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(4).await?;
    let holder = clients[0].lock("q").await?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate().skip(1) {
        let (c, order) = (c.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock("q").await?;
            order.lock().await.push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await?;
            anyhow::Ok(())
        }));
        settle().await;
    }
    holder.release().await?;
    for t in tasks {
        within(QUICK, "queued waiter acquires", t).await???;
    }
    let order = order.lock().await.clone();
    ensure!(
        order == vec![1, 2, 3],
        "waiters served out of queue order: {order:?}"
    );
    Ok(())
}

/// Tokens strictly increase across holders and clients.
pub async fn tokens_increase_across_holders(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(3).await?;
    let mut last = None;
    for i in [0, 1, 0, 2, 1, 2] {
        let g = clients[i].lock("tok").await?;
        if let Some(prev) = last {
            ensure!(
                g.token() > prev,
                "token {} after {prev} did not increase",
                g.token()
            );
        }
        last = Some(g.token());
        g.release().await?;
    }
    Ok(())
}

/// A killed holder's lock passes to the next waiter once the session is gone.
pub async fn killed_holder_passes_on(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    let mut waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    still_waiting(&mut waiter, "waiter got the lock while it was held").await?;
    ctx.factory().kill_session(&a).await?;
    let gb = within(
        ctx.expiry_wait(),
        "waiter acquires after holder's session was killed",
        waiter,
    )
    .await???;
    ensure!(
        gb.token() > ga.token(),
        "new token {} not above killed holder's {}",
        gb.token(),
        ga.token()
    );
    within(QUICK, "killed holder's guard reports Lost", ga.lost()).await?;
    Ok(())
}

/// A crashed holder (no cleanup) loses the lock within the session timeout.
pub async fn crashed_holder_passes_on(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    let token_a = ga.token();
    std::mem::forget(ga); // a crashed process runs no destructor
    let waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    ctx.factory().crash(&a).await?;
    let gb = within(
        ctx.expiry_wait(),
        "waiter acquires after the holder crashed",
        waiter,
    )
    .await???;
    ensure!(gb.token() > token_a);
    Ok(())
}

/// A `lock` future dropped while waiting leaves no contender: the next waiter gets the
/// lock as soon as the holder releases.
pub async fn dropped_lock_future_leaves_no_contender(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let ga = a.lock("res").await?;
    stays_pending(Duration::from_millis(500), "b.lock while held", b.lock("res")).await?;
    let waiter = tokio::spawn(async move { c.lock("res").await });
    settle().await;
    ga.release().await?;
    let _guard = within(
        QUICK,
        "c acquires; a contender left by b's dropped future would block it",
        waiter,
    )
    .await???;
    Ok(())
}

/// Dropping a guard releases the lock in the background.
pub async fn dropped_guard_releases(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let g = a.lock("res").await?;
    drop(g);
    let _guard = within(QUICK, "lock free after the guard was dropped", b.lock("res")).await??;
    Ok(())
}

/// Only the predecessor's waiter wakes on release: each release delivers exactly one
/// watch notification to the other waiters (the releaser's own notifications, e.g. on
/// its own node, are not counted), and the lock goes to the waiters in their queue order
/// (read from the server: the order their entries were created in, which under member
/// faults need not be the order their `lock` calls began).
///
/// Under member faults a waiter's wait may fail (its session lost) or a waiter may be
/// suspended during a round; the case then says so ("session lost", "unavailable"), so
/// that it is told from a broken guarantee.
pub async fn herd_free_one_wakeup_per_release(ctx: Ctx) -> CaseResult {
    use coord_core::RecipeKind;
    const WAITERS: usize = 5;
    let holder = ctx.client().await?;
    let waiters = ctx.clients(WAITERS).await?;
    let mut holder_guard = Some(holder.lock("herd").await?);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut release_txs = Vec::new();
    for (i, w) in waiters.iter().enumerate() {
        let (w, tx) = (w.clone(), tx.clone());
        let (rel_tx, rel_rx) = tokio::sync::oneshot::channel::<()>();
        release_txs.push(Some(rel_tx));
        tokio::spawn(async move {
            match w
                .lock_with("herd", coord_core::LockOptions::new().holder(format!("w{i}")))
                .await
            {
                Ok(g) => {
                    let _ = tx.send((i, Ok(g.token())));
                    let _ = rel_rx.await;
                    let _ = g.release().await;
                }
                Err(e) => {
                    let _ = tx.send((i, Err(e)));
                }
            }
        });
        settle().await;
    }
    // The queue order, as the server has it.
    let seen = std::sync::Mutex::new(Vec::<usize>::new());
    let all = || std::iter::once(&holder).chain(waiters.iter());
    let troubled_at_start: Vec<u64> = all().map(|c| c.stats().session_transitions).collect();
    eventually(ctx.expiry_wait(), "every waiter's entry is queued", || async {
        let view = retrying(|| holder.inspect_one(RecipeKind::Lock, "herd")).await?;
        let queued: Vec<usize> = view
            .waiters
            .iter()
            .filter_map(|p| {
                std::str::from_utf8(&p.value)
                    .ok()?
                    .strip_prefix('w')?
                    .parse()
                    .ok()
            })
            .collect();
        let full = queued.len() == WAITERS;
        *seen.lock().unwrap_or_else(|p| p.into_inner()) = queued;
        Ok(full)
    })
    .await
    .map_err(|e| {
        // Under member faults the holder's session may be lost meanwhile (a waiter then
        // holds, and the queue never has every waiter) or a waiter's wait may fail: say
        // so, so that a member fault is told from a broken guarantee.
        let troubled = all()
            .zip(&troubled_at_start)
            .any(|(c, then)| c.stats().session_transitions > *then);
        let holder_state = holder_guard.as_ref().map(|g| g.state());
        match rx.try_recv() {
            Ok((i, Err(f))) => anyhow::anyhow!("waiter {i}'s wait failed while queueing: {f}"),
            Ok((i, Ok(t))) if troubled => anyhow::anyhow!(
                "waiter {i} acquired (token {t}) before the holder released, while a session was in trouble \
                 (a member unavailable; the holder {holder_state:?}): {e}"
            ),
            Ok((i, Ok(t))) => anyhow::anyhow!(
                "waiter {i} acquired (token {t}) before the holder released, no session in trouble \
                 (the holder {holder_state:?}): exclusion broken"
            ),
            _ if troubled => {
                e.context("a session was in trouble (a member unavailable) while the waiters queued")
            }
            _ => e,
        }
    })?;
    let order = seen.into_inner().unwrap_or_else(|p| p.into_inner());
    let events = |ws: &[coord_core::Client]| ws.iter().map(|w| w.stats().watch_events).collect::<Vec<u64>>();
    let transitions = |ws: &[coord_core::Client]| {
        ws.iter()
            .map(|w| w.stats().session_transitions)
            .collect::<Vec<u64>>()
    };
    let mut last: Option<coord_core::FencingToken> = None;
    // Round 0: the outside holder releases; then each round's grantee releases in turn.
    for round in 0..3usize {
        let (before, troubled_before) = (events(&waiters), transitions(&waiters));
        let releaser = match round {
            0 => {
                let g = holder_guard
                    .take()
                    .ok_or_else(|| anyhow::anyhow!("holder released twice"))?;
                g.release().await?;
                None
            }
            r => {
                let previous = order[r - 1];
                let tx = release_txs[previous]
                    .take()
                    .ok_or_else(|| anyhow::anyhow!("released twice"))?;
                tx.send(())
                    .map_err(|_| anyhow::anyhow!("waiter {previous} gone"))?;
                Some(previous)
            }
        };
        let (next, got) = within(QUICK, "next waiter acquires", rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("every waiter's task ended"))?;
        let token = got.map_err(|e| anyhow::anyhow!("waiter {next}'s wait failed: {e}"))?;
        ensure!(
            next == order[round],
            "waiter {next} acquired in round {round}, but waiter {} was next in the queue {order:?}: FIFO broken",
            order[round]
        );
        ensure!(last.is_none_or(|l| l < token), "token {token} after {last:?}");
        last = Some(token);
        settle().await;
        let after = events(&waiters);
        let woken: u64 = (0..waiters.len())
            .filter(|i| Some(*i) != releaser)
            .map(|i| after[i] - before[i])
            .sum();
        if woken != 1 {
            let troubled: Vec<usize> = transitions(&waiters)
                .iter()
                .zip(&troubled_before)
                .enumerate()
                .filter(|(_, (now, then))| now > then)
                .map(|(i, _)| i)
                .collect();
            ensure!(
                troubled.is_empty(),
                "release {round} woke {woken} waiters while the sessions of waiters {troubled:?} were in trouble \
                 (a member unavailable): not judged"
            );
            bail!("release {round} woke {woken} waiters (notifications); expected exactly 1");
        }
    }
    for t in release_txs.into_iter().flatten() {
        let _ = t.send(());
    }
    Ok(())
}

/// A guard reports `Lost` when its session is killed; releasing it then is not an error.
pub async fn guard_reports_lost_on_session_kill(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g = a.lock("res").await?;
    ctx.factory().kill_session(&a).await?;
    within(ctx.expiry_wait(), "guard reports Lost", g.lost()).await?;
    ensure!(g.state() == HoldState::Lost);
    g.release().await?;
    Ok(())
}

/// Tokens keep rising when the same client re-acquires on a new session.
pub async fn tokens_increase_across_session_loss(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g1 = a.lock("res").await?;
    let t1 = g1.token();
    ctx.factory().kill_session(&a).await?;
    within(ctx.expiry_wait(), "guard reports Lost", g1.lost()).await?;
    // g1 stays alive: a lost guard must not block a new attempt on the same client.
    let g2 = within(
        ctx.expiry_wait(),
        "re-acquire on the new session",
        retrying(|| a.lock("res")),
    )
    .await??;
    ensure!(
        g2.token() > t1,
        "token {} after session loss not above {t1}",
        g2.token()
    );
    drop(g1);
    Ok(())
}

/// Two contenders on one client queue locally; the lock is not reentrant.
pub async fn same_client_queues_locally(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let g1 = a.lock("res").await?;
    let a2 = a.clone();
    let mut second = tokio::spawn(async move { a2.lock("res").await });
    settle().await;
    still_waiting(&mut second, "second lock on the same client did not wait").await?;
    let t1 = g1.token();
    g1.release().await?;
    let g2 = within(QUICK, "second local contender acquires", second).await???;
    ensure!(g2.token() > t1);
    Ok(())
}

/// Locks with related names (`a`, `a-b`, `a/b`) are independent.
pub async fn related_names_are_independent(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let _g1 = a.lock("a").await?;
    let g2 = b.try_lock("a/b").await?;
    ensure!(g2.is_some(), "lock a/b blocked by lock a");
    let g3 = b.try_lock("a-b").await?;
    ensure!(g3.is_some(), "lock a-b blocked by lock a");
    let _g4 = b.lock("x/y").await?;
    let g5 = a.try_lock("x").await?;
    ensure!(g5.is_some(), "lock x blocked by lock x/y");
    Ok(())
}

/// An uncontended acquire + release costs the floor and nothing more: ZooKeeper 3 data
/// requests (create, list, delete), etcd and mem 2 (join, release), and no watch — a
/// grant watches its own entry only once someone waits on its hold (counted by the
/// client's stats, printed for the record). The least of five cycles counts for the
/// requests: one may also pay for re-creating a directory the server swept (ZooKeeper
/// containers); no cycle may set a watch.
pub async fn uncontended_round_trips(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let mut cycles = Vec::new();
    for _ in 0..5 {
        let before = a.stats();
        let g = a.lock("rt").await?;
        // Time for anything the grant starts in the background to show in the stats.
        tokio::time::sleep(Duration::from_millis(50)).await;
        g.release().await?;
        cycles.push(a.stats().since(&before));
    }
    let d = cycles
        .iter()
        .min_by_key(|d| d.data_requests())
        .copied()
        .unwrap_or_default();
    println!(
        "[{}] uncontended lock+release: {} requests (reads {}, writes {}, txns {}, watches {})",
        a.kind(),
        d.data_requests(),
        d.reads,
        d.writes,
        d.txns,
        d.watches_set
    );
    let floor = if a.kind() == "zk" { 3 } else { 2 };
    ensure!(
        d.data_requests() <= floor,
        "uncontended lock+release took {} requests (the floor is {floor}): {d:?}",
        d.data_requests()
    );
    let watches: u64 = cycles.iter().map(|c| c.watches_set).sum();
    ensure!(
        watches == 0,
        "{watches} watches set over {} uncontended cycles nobody waited on",
        cycles.len()
    );
    Ok(())
}

/// A release sent while the holder is cut off (briefly: its session survives) is retried
/// until the server confirms it; so is the removal of a guard dropped then. One try
/// would leave the entry under a session that lives on, and the lock stuck for everyone.
pub async fn release_during_outage_is_retried(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    for dropped in [false, true] {
        let g = a.lock("res").await?;
        let bc = b.clone();
        let mut waiter = tokio::spawn(async move { bc.lock("res").await });
        settle().await;
        still_waiting(&mut waiter, "b got the lock while a held it").await?;
        let gb = through_short_outage(&ctx, &a, async {
            if dropped {
                drop(g);
            } else {
                within(
                    ctx.expiry_wait(),
                    "release during the outage returns",
                    g.release(),
                )
                .await??;
            }
            Ok(within(QUICK, "b acquires once a's release gets through", waiter).await???)
        })
        .await?;
        gb.release().await?;
    }
    Ok(())
}

/// A holder's entry deleted from outside (an operator) ends the hold: the guard reports
/// `Lost`, and the next waiter gets the lock.
pub async fn holder_entry_deleted_reports_lost(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let g = a.lock("res").await?;
    let waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    ctx.factory().operator_delete(g.fence().resource()).await?;
    within(QUICK, "the guard reports Lost", g.lost()).await?;
    let gb = within(QUICK, "the waiter acquires", waiter).await???;
    ensure!(gb.token() > g.token());
    Ok(())
}

/// A guard whose own fence the store refused is no longer `Held`: an operator deleted its
/// entry (nobody waited on the guard, so no entry watch ran), another client took the
/// lock, and the old guard's fenced write was refused with `Fenced`. From then on the old
/// guard says `Lost` — in every clone, through its `lost()` future too — so two guards
/// never both say `Held` after the store has told one it is not. A commit fenced by two
/// guards, one of them still held, loses only the gone one. The same for a leadership
/// whose `proclaim` is refused.
pub async fn refused_fence_means_lost(ctx: Ctx) -> CaseResult {
    use coord_core::{ConfigStore, Election, HoldState, Txn};
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    // The first `state()` arms the entry watch on a task of its own, which may already
    // have seen the delete when the state is read (a multi-threaded runtime): then the
    // refusal is not what tells the guard, and the setup is made again on new names.
    let mut attempt = 0;
    let (old, other, new) = loop {
        attempt += 1;
        let old = a.lock(&format!("res{attempt}")).await?;
        let other = a.lock(&format!("other{attempt}")).await?;
        ctx.factory().operator_delete(old.fence().resource()).await?;
        let new = within(
            QUICK,
            "the next client acquires",
            b.lock(&format!("res{attempt}")),
        )
        .await??;
        ensure!(new.token() > old.token());
        match old.state() {
            HoldState::Held => break (old, other, new),
            state if attempt < 5 => {
                tracing::debug!(?state, attempt, "the entry watch told the guard first; again");
            }
            state => bail!(
                "precondition: in 5 attempts the entry watch always told the old guard first ({state:?})"
            ),
        }
    };
    let refused = a
        .commit(
            Txn::new()
                .fenced_by(other.fence())
                .fenced_by(old.fence())
                .put("k", b"stale".to_vec()),
        )
        .await;
    ensure!(
        refused
            .as_ref()
            .is_err_and(|e| e.kind() == coord_core::ErrorKind::Fenced),
        "the stale write was not refused: {refused:?}"
    );
    ensure!(
        old.state() == HoldState::Lost,
        "the guard whose fence was refused still says {:?} while another holds the lock",
        old.state()
    );
    within(QUICK, "the refused guard's lost() resolves", old.lost()).await?;
    crate::util::held(&ctx, "a guard still held, with the one refused beside it", || {
        other.state()
    })
    .await?;
    crate::util::held(&ctx, "the next client's guard", || new.state()).await?;
    // A fenced write with the live guard still goes through.
    a.commit(Txn::new().fenced_by(other.fence()).put("k", b"fresh".to_vec()))
        .await?;
    // The same client can take the lock again once the refused guard is gone.
    old.release().await?;
    new.release().await?;
    let again = within(
        QUICK,
        "the same client locks again",
        a.lock(&format!("res{attempt}")),
    )
    .await??;
    crate::util::held(&ctx, "the same client's new guard", || again.state()).await?;

    // An election: a refused proclaim ends the leadership.
    let mut leading = a.campaign("elected", b"one".to_vec()).await?;
    ctx.factory().operator_delete(leading.fence().resource()).await?;
    let proclaimed = leading.proclaim(b"two".to_vec()).await;
    ensure!(
        proclaimed
            .as_ref()
            .is_err_and(|e| e.kind() == coord_core::ErrorKind::Fenced),
        "a proclaim on a deleted entry was not refused: {proclaimed:?}"
    );
    ensure!(
        leading.state() == HoldState::Lost,
        "the leadership whose proclaim was refused still says {:?}",
        leading.state()
    );
    Ok(())
}

/// A holder's entry deleted while the holder is cut off, with the history of that
/// deletion compacted away before it reconnects, is still noticed; another entry of the
/// same client, untouched, stays held — and following both across the gap costs a few
/// requests, not a loop of them.
pub async fn holder_entry_deleted_during_gap_reports_lost(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let deleted = a.lock("res").await?;
    let kept = a.lock("other").await?;
    // The backend's watches of its own entries are set up in the background.
    settle().await;
    ctx.factory().begin_watch_gap(&a).await?;
    ctx.factory().operator_delete(deleted.fence().resource()).await?;
    // More history after the deletion, so the compaction covers it and what followed.
    for i in 0..3u8 {
        b.put("filler", vec![i]).await?;
    }
    let before = a.stats();
    ctx.factory().end_watch_gap(&a).await?;
    within(ctx.expiry_wait(), "the guard reports Lost", deleted.lost()).await?;
    // Give a watch that reopens in a loop time to show itself.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = a.stats().since(&before);
    println!(
        "[{}] own entries across a compacted gap: {} requests, {} watches set until Lost + 2 s",
        a.kind(),
        spent.data_requests(),
        spent.watches_set
    );
    ensure!(
        spent.watches_set <= 6 && spent.data_requests() <= 12,
        "{} watches set ({} requests) around one compacted gap: a watch reopening in a loop",
        spent.watches_set,
        spent.data_requests()
    );
    // Where the gap ends the session (ZooKeeper), both are lost; otherwise the untouched
    // entry is still held — once the session is out of any suspension (on a cluster, a
    // member killed meanwhile suspends it until the client has moved to another).
    let settled = tokio::time::Instant::now() + ctx.expiry_wait();
    while kept.state() == HoldState::Suspended && tokio::time::Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if a.session().borrow().generation == 1 {
        ensure!(
            kept.state() == HoldState::Held,
            "the untouched lock is {:?} after the gap",
            kept.state()
        );
    }
    Ok(())
}

/// Locks, elections and services with many distinct names leave nothing on the server
/// once released, and observed elections nobody joined leave nothing either
/// (ZooKeeper's directories are container nodes, removed when empty).
pub async fn distinct_names_leave_nothing_behind(ctx: Ctx) -> CaseResult {
    use coord_core::{Election, Registry, ServiceInstance};
    let a = ctx.client().await?;
    let mut tasks = Vec::new();
    for worker in 0..4usize {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..1000).step_by(4) {
                a.lock(&format!("jobs/{i:04}")).await?.release().await?;
            }
            for i in (worker..100).step_by(4) {
                a.campaign(&format!("leaders/{i:03}"), b"x".to_vec())
                    .await?
                    .resign()
                    .await?;
                a.register(&format!("services/{i:03}"), ServiceInstance::new("n1", "h:1"))
                    .await?
                    .deregister()
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        within(
            Duration::from_secs(40),
            "1,000 locks, 100 elections and services",
            t,
        )
        .await???;
    }
    // Observing elections nobody joins leaves nothing either.
    for i in 0..10 {
        let mut leaders = a.observe(&format!("watched/{i}")).await?;
        crate::util::next_event(&mut leaders, QUICK, "the first observation").await?;
    }
    let deadline = tokio::time::Instant::now() + QUICK;
    loop {
        let left = ctx.factory().operator_list(ctx.namespace()).await?;
        if left.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let shown: Vec<&String> = left.iter().take(5).collect();
        bail!(
            "{} nodes or keys left under the namespace after everything was released, e.g. {shown:?}",
            left.len()
        );
    }
}

/// A lock's create that reaches the server but whose answer is lost (the link resets
/// right after the request is sent) is found again by the retry, never made twice: a
/// second entry would queue the client behind its own first one — an entry nobody
/// knows of, ahead of everyone for the rest of the session.
pub async fn ambiguous_create_is_not_made_twice(ctx: Ctx) -> CaseResult {
    let a = ctx.factory().open_links(ctx.namespace(), 1).await?;
    let links = ctx.factory().links(&a)?;
    let b = ctx.client().await?;
    let bound = ctx.session_timeout() * 3 + QUICK;
    for round in 0..6 {
        for link in links.all() {
            link.reset_after_next_request(Duration::from_millis(100));
        }
        let held = within(bound, "a lock whose create was cut off", retrying(|| a.lock("m")))
            .await?
            .map_err(|e| anyhow::anyhow!("round {round}: {e}"))?;
        held.release().await?;
        // Nothing of a's is left ahead: another client takes the lock at once.
        let other = within(QUICK, "another client's lock after the release", b.lock("m"))
            .await?
            .map_err(|e| anyhow::anyhow!("round {round}: {e}"))?;
        other.release().await?;
    }
    Ok(())
}

/// A waiter's entry deleted from outside (an operator) while it queues right behind the
/// holder is never a grant: once the holder releases, the waiter confirms its own entry
/// before taking over and fails (`SessionLost`: its entry is gone) instead of holding
/// without one, and a contender arriving later gets the lock with a valid token.
pub async fn waiter_entry_deleted_is_never_a_valid_grant(ctx: Ctx) -> CaseResult {
    use anyhow::Context as _;
    use coord_core::{ConfigStore, ErrorKind, Txn};
    let (a, b, c) = (ctx.client().await?, ctx.client().await?, ctx.client().await?);
    let ga = a.lock("res").await?;
    let waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    let queued = crate::util::queued_beside(&ctx, &[ga.fence().resource().to_owned()]).await?;
    ensure!(
        queued.len() == 1,
        "expected the waiter's one entry, found {queued:?}"
    );
    ctx.factory().operator_delete(&queued[0]).await?;
    let first = ga.token();
    ga.release().await?;
    match within(QUICK, "the waiter returns", waiter).await?? {
        Ok(gb) => {
            let fenced = a
                .commit(Txn::new().fenced_by(gb.fence()).put("data", b"stale".to_vec()))
                .await
                .err()
                .context("a write fenced by the deleted waiter's grant succeeded")?;
            bail!(
                "the waiter whose entry was deleted was granted (token {}, state {:?}; a fenced write: {fenced})",
                gb.token(),
                gb.state()
            );
        }
        Err(e) => ensure!(e.kind() == ErrorKind::SessionLost, "the waiter failed with {e}"),
    }
    let gc = within(QUICK, "a later contender acquires", c.lock("res")).await??;
    ensure!(gc.token() > first, "{} after {first}", gc.token());
    ensure!(a.get("data").await?.is_none(), "a fenced commit wrote data");
    gc.release().await?;
    Ok(())
}

/// A release whose answer is lost (the delete reached the server, the link reset before
/// the reply) may still be applied late: on a cluster, the first attempt can land after
/// the retry went through another member, and after the client queued again. The
/// client's next contender on the lock must be out of its reach — its entry has another
/// path — so that the late delete (played here by an operator deleting the old path)
/// leaves the new grant valid.
pub async fn late_release_never_removes_a_newer_contender(ctx: Ctx) -> CaseResult {
    use coord_core::{ConfigStore, Txn};
    let a = ctx.factory().open_links(ctx.namespace(), 1).await?;
    let links = ctx.factory().links(&a)?;
    let b = ctx.client().await?;
    let g = a.lock("res").await?;
    let old = g.fence().resource().to_owned();
    for link in links.all() {
        link.reset_after_next_request(Duration::from_millis(100));
    }
    let bound = ctx.session_timeout() * 3 + QUICK;
    within(bound, "a release whose answer was lost", g.release()).await??;
    ensure!(
        links.all().iter().all(|l| !l.reset_pending()),
        "the armed reset never tripped: the case tested nothing"
    );
    let g2 = within(QUICK, "the next lock", a.lock("res")).await??;
    ensure!(
        g2.fence().resource() != old,
        "the next contender's entry is {old} again, which a late delete of the lost release removes"
    );
    ctx.factory().operator_delete(&old).await?;
    a.commit(Txn::new().fenced_by(g2.fence()).put("data", b"fresh".to_vec()))
        .await
        .map_err(|e| {
            anyhow::anyhow!("a write fenced by the new grant, after the old entry's late delete: {e}")
        })?;
    let waiter = tokio::spawn(async move { b.lock("res").await });
    settle().await;
    let mut waiter = waiter;
    still_waiting(&mut waiter, "another client got the lock the new grant holds").await?;
    g2.release().await?;
    within(QUICK, "the other client after the release", waiter)
        .await???
        .release()
        .await?;
    Ok(())
}

/// A holder whose entry an operator deleted, released (or dropped) after another task of
/// the same client took the lock again, removes nothing of that task's grant: the next
/// task gets the lock as soon as the loss is seen (the lost guard keeps nothing), and on
/// etcd — whose release is a plain delete of the client's key — takes another key than
/// the lost one. The second grant stays `Held`, another client keeps waiting, and the
/// second grant's fenced writes go through.
pub async fn deleted_holder_release_spares_the_next_grant(ctx: Ctx) -> CaseResult {
    let violations = deleted_holder_then_next_grant(&ctx).await?;
    ensure!(violations.is_empty(), "{}", violations.join("; "));
    Ok(())
}

/// The run of [`deleted_holder_release_spares_the_next_grant`]: what the lost guard's
/// release did to the next grant, empty if nothing. Also for the case that shows the
/// backend mutant of the loss caught.
///
/// # Errors
///
/// When a step of the run itself fails (a lock, the operator's delete).
pub async fn deleted_holder_then_next_grant(ctx: &Ctx) -> anyhow::Result<Vec<String>> {
    use coord_core::{ConfigStore, Txn};
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let generation = a.session().borrow().generation;
    let g1 = a.lock("res").await?;
    let mut second = tokio::spawn({
        let a = a.clone();
        async move { a.lock("res").await }
    });
    settle().await;
    ctx.factory().operator_delete(g1.fence().resource()).await?;
    within(QUICK, "the first guard reports Lost", g1.lost()).await?;
    let g2 = within(QUICK, "the second task of the client acquires", &mut second).await???;
    ensure!(g2.token() > g1.token(), "{} after {}", g2.token(), g1.token());
    // The first guard's release must not touch the second grant's entry.
    let _ = g1.release().await;
    settle().await;
    if a.session().borrow().generation > generation {
        bail!("the client lost the session meanwhile (a member fault?)");
    }
    let mut violations = Vec::new();
    // Suspended is fine (a member killed under a cluster's client); Lost is not.
    if g2.state() == HoldState::Lost {
        violations.push("the second grant is Lost after the first guard's release".to_owned());
    }
    if let Some(other) = b.try_lock("res").await? {
        violations.push(
            "another client got the lock the second grant holds, after the first guard's release".to_owned(),
        );
        other.release().await?;
    }
    if let Err(e) = a
        .commit(Txn::new().fenced_by(g2.fence()).put("data", b"fresh".to_vec()))
        .await
    {
        violations.push(format!("a write fenced by the second grant: {e}"));
    }
    let _ = g2.release().await;
    Ok(violations)
}

/// During a silent partition (a blackhole: nothing answers, nothing is reset, so the
/// session is not yet suspended) every `try_*` still answers within its deadline — a
/// quarter of the session timeout, at most 1 s — with a retryable `Unavailable` (never a
/// grant it cannot confirm, never `SessionLost`), and leaves nothing behind: once the
/// link is back, each succeeds.
pub async fn try_calls_fail_fast_during_a_silent_partition(ctx: Ctx) -> CaseResult {
    use coord_core::ErrorKind;
    let a = ctx.client().await?;
    let rw = a.rw_lock("rw")?;
    let sem = a.semaphore("sem", 2)?;
    let queue = a.queue("q", 10)?;
    queue.push(b"item".to_vec()).await?;
    let outage = ctx.session_timeout() / 3;
    let bound = (ctx.session_timeout() / 4).min(Duration::from_secs(1)) + Duration::from_millis(250);
    let generation = a.session().borrow().generation;
    ctx.factory().blackhole(&a, outage).await?;
    let started = tokio::time::Instant::now();
    let timed = |what: &'static str, f: futures::future::BoxFuture<'static, coord_core::Result<bool>>| async move {
        let began = tokio::time::Instant::now();
        let r = f.await;
        (what, r, began.elapsed())
    };
    let tries = futures::future::join_all([
        timed("try_lock", {
            let a = a.clone();
            Box::pin(async move { a.try_lock("l").await.map(|g| g.is_some()) })
        }),
        timed("try_read", {
            let rw = rw.clone();
            Box::pin(async move { rw.try_read().await.map(|g| g.is_some()) })
        }),
        timed("try_acquire", {
            let sem = sem.clone();
            Box::pin(async move { sem.try_acquire().await.map(|g| g.is_some()) })
        }),
        timed("try_take", {
            let queue = queue.clone();
            Box::pin(async move { queue.try_take().await.map(|i| i.is_some()) })
        }),
    ])
    .await;
    let all_answered = started.elapsed();
    for (what, r, took) in tries {
        ensure!(
            took <= bound,
            "{what} answered after {took:?} during a silent partition (bound {bound:?})"
        );
        match r {
            Ok(true) if all_answered >= outage => {} // the link came back first: fine
            Ok(got) => bail!("{what} during a silent partition returned {got} instead of failing"),
            Err(e) => ensure!(
                e.is_retryable() && e.kind() != ErrorKind::SessionLost,
                "{what} during a silent partition failed with {e} (not retryable, or SessionLost)"
            ),
        }
    }
    // Once the link is back, nothing is left in the way.
    let back = QUICK + outage;
    let mut held = Vec::new();
    let got = within(back, "try_lock after the partition", async {
        loop {
            if let Ok(Some(g)) = a.try_lock("l").await {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await?;
    held.push(Box::new(got) as Box<dyn std::any::Any + Send>);
    let item = within(back, "the queue's item after the partition", queue.take()).await??;
    ensure!(item == b"item", "the queue gave {item:?}");
    ensure!(
        a.session().borrow().generation == generation,
        "the session was replaced: the partition was meant to be survivable, so this proves nothing"
    );
    Ok(())
}

/// Every `try_*` — `try_lock`, `try_read`, `try_write`, `try_acquire`, `try_take`, and a
/// coordinator's `coordinate` (which never waits for another coordinator) — fails fast
/// during an outage the session survives, with a retryable error (never `SessionLost`,
/// never after the outage ended), and leaves nothing behind: once the link is back, each
/// succeeds at once.
pub async fn try_calls_fail_fast_during_an_outage(ctx: Ctx) -> CaseResult {
    use coord_core::ErrorKind;
    let a = ctx.client().await?;
    let rw = a.rw_lock("rw")?;
    let sem = a.semaphore("sem", 2)?;
    let queue = a.queue("q", 10)?;
    let txn = a.two_phase_commit("t")?;
    let outage = ctx.session_timeout() / 3;
    let generation = a.session().borrow().generation;
    ctx.factory().suspend(&a, outage).await?;
    let started = tokio::time::Instant::now();
    // Each call answers before the link is back: it does not wait the outage out. (How
    // soon a client notices its reset links depends on how busy the machine is; a
    // `try_*` that notices nothing gives up after a quarter of the session timeout.)
    let fast = || outage.saturating_sub(started.elapsed());
    let check = |what: &str, r: Result<coord_core::Result<bool>, anyhow::Error>| -> CaseResult {
        let r = r.map_err(|e| anyhow::anyhow!("{what} during the outage: {e}"))?;
        match r {
            Ok(got) => bail!(
                "{what} during the outage returned {} instead of failing",
                if got { "a grant" } else { "none" }
            ),
            Err(e) => {
                ensure!(
                    e.is_retryable() && e.kind() != ErrorKind::SessionLost,
                    "{what} during the outage failed with {e} (not retryable, or SessionLost)"
                );
                Ok(())
            }
        }
    };
    check(
        "try_lock",
        within(fast(), "try_lock", async {
            a.try_lock("l").await.map(|g| g.is_some())
        })
        .await,
    )?;
    check(
        "try_read",
        within(fast(), "try_read", async {
            rw.try_read().await.map(|g| g.is_some())
        })
        .await,
    )?;
    check(
        "try_write",
        within(fast(), "try_write", async {
            rw.try_write().await.map(|g| g.is_some())
        })
        .await,
    )?;
    check(
        "try_acquire",
        within(fast(), "try_acquire", async {
            sem.try_acquire().await.map(|g| g.is_some())
        })
        .await,
    )?;
    check(
        "try_take",
        within(fast(), "try_take", async {
            queue.try_take().await.map(|i| i.is_some())
        })
        .await,
    )?;
    check(
        "coordinate",
        within(fast(), "coordinate", async {
            txn.coordinate(&["p"], Duration::from_millis(100))
                .await
                .map(|_| true)
        })
        .await,
    )?;
    ensure!(
        started.elapsed() < outage,
        "the try calls took {:?}, the whole outage of {outage:?}",
        started.elapsed()
    );
    // Once the link is back, nothing is left in the way (an entry a cut-short join may
    // have made is removed in the background, with its retries' backoff).
    let back = QUICK + outage;
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Guards of three types, kept until the end of the case.
    let keep = |g: Option<Box<dyn std::any::Any + Send>>| {
        let got = g.is_some();
        held.lock().unwrap_or_else(|p| p.into_inner()).extend(g);
        got
    };
    eventually(back, "try_lock after the outage", || async {
        Ok(keep(
            a.try_lock("l").await.unwrap_or(None).map(|g| Box::new(g) as _),
        ))
    })
    .await?;
    eventually(back, "try_write after the outage", || async {
        Ok(keep(
            rw.try_write().await.unwrap_or(None).map(|g| Box::new(g) as _),
        ))
    })
    .await?;
    for _ in 0..2 {
        eventually(back, "both leases after the outage", || async {
            Ok(keep(
                sem.try_acquire().await.unwrap_or(None).map(|g| Box::new(g) as _),
            ))
        })
        .await?;
    }
    ensure!(
        a.session().borrow().generation == generation,
        "the session was replaced: the outage was meant to be survivable, so this proves nothing"
    );
    Ok(())
}

/// A revocation request reaches the holder that watches for it — asked before or after
/// it started watching — and nobody else: the waiter keeps waiting, a holder not asked
/// is not told, and the lock passes on only when the holder releases it.
pub async fn revocation_reaches_the_holder(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    ensure!(
        c.revoke_lock("res").await?.is_none(),
        "a free lock has a holder to ask"
    );
    let held = within(
        QUICK,
        "a locks",
        a.lock_with("res", coord_core::LockOptions::new().holder("a")),
    )
    .await??;
    let other = within(QUICK, "a locks another", a.lock("other")).await??;
    let b2 = b.clone();
    let mut waiter = tokio::spawn(async move { b2.lock("res").await });
    settle().await;
    stays_pending(
        Duration::from_millis(500),
        "a holder nobody asked was told",
        held.revocation_requested(),
    )
    .await?;
    let asked = c.revoke_lock("res").await?;
    ensure!(
        asked == Some(held.token()),
        "revoke_lock asked {asked:?}, the holder has {}",
        held.token()
    );
    within(QUICK, "the holder hears the request", held.revocation_requested()).await?;
    // Asked before it looked: it still hears it.
    within(QUICK, "the request is still there", held.revocation_requested()).await?;
    stays_pending(
        Duration::from_millis(300),
        "the other lock's holder was told",
        other.revocation_requested(),
    )
    .await?;
    crate::util::held(&ctx, "a request is not a loss", || held.state()).await?;
    still_waiting(&mut waiter, "the waiter took a lock only asked to go").await?;
    let token = held.token();
    held.release().await?;
    let next = within(QUICK, "the waiter gets the released lock", waiter).await???;
    ensure!(next.token() > token, "tokens");
    stays_pending(
        Duration::from_millis(300),
        "the next holder inherited the request",
        next.revocation_requested(),
    )
    .await?;
    next.release().await?;
    other.release().await?;
    Ok(())
}
