//! Leader selector cases: leads and re-queues, hands over when the work returns, cancels
//! the work on loss and campaigns again, stops (and drops) cleanly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::ensure;
use coord_core::{Client, Election, FencingToken, LeaderSelector, SelectorState};
use tokio::sync::mpsc;

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, settle, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// A selector whose work reports each term's token on `terms` and then runs until the
/// term ends; `dropped` is set when a term's work is dropped.
fn lead_forever(
    client: &Client,
    who: &'static str,
    terms: mpsc::UnboundedSender<(&'static str, FencingToken)>,
    dropped: Arc<AtomicBool>,
) -> anyhow::Result<LeaderSelector> {
    struct OnDrop(Arc<AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    Ok(client.lead("svc", who.as_bytes().to_vec(), move |leading| {
        let (terms, dropped) = (terms.clone(), dropped.clone());
        async move {
            let _flag = OnDrop(dropped);
            let _ = terms.send((who, leading.token()));
            std::future::pending::<()>().await;
        }
    })?)
}

/// Two selectors whose work returns at once take turns: each leads again and again
/// (re-queued at the back), with tokens rising term after term.
pub async fn work_that_returns_hands_over(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut selectors = Vec::new();
    for (c, who) in [(&a, "a"), (&b, "b")] {
        let tx = tx.clone();
        selectors.push(c.lead("svc", who.as_bytes().to_vec(), move |leading| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((who, leading.token()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })?);
    }
    let mut last = FencingToken(0);
    let mut seen = (0, 0);
    while seen.0 < 2 || seen.1 < 2 {
        let (who, token) = within(QUICK, "the next term", rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("selectors ended"))?;
        ensure!(token > last, "term token {token} not above the previous {last}");
        last = token;
        if who == "a" {
            seen.0 += 1
        } else {
            seen.1 += 1
        }
        ensure!(seen.0 + seen.1 < 20, "one selector keeps the lead: {seen:?}");
    }
    for s in selectors {
        s.stop().await?;
    }
    // A campaign under way is withdrawn in the background, as a dropped `campaign` is.
    eventually(QUICK, "no leader is left after both stopped", || async {
        Ok(a.leader("svc").await?.is_none())
    })
    .await?;
    Ok(())
}

/// A leader whose session is killed has its work cancelled; the other selector leads,
/// and the first campaigns again on its new session by itself, leading once the other
/// stops.
pub async fn lost_term_cancels_work_and_requeues(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a_dropped = Arc::new(AtomicBool::new(false));
    let sa = lead_forever(&a, "a", tx.clone(), a_dropped.clone())?;
    let (who, ta) = within(QUICK, "a leads", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "a");
    let sb = lead_forever(&b, "b", tx.clone(), Arc::new(AtomicBool::new(false)))?;
    // b queues behind a before a's session goes.
    settle().await;
    ctx.factory().kill_session(&a).await?;
    let (who, tb) = within(
        ctx.expiry_wait(),
        "b leads after a's session was killed",
        rx.recv(),
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "b" && tb > ta, "{who} led with {tb} after a's {ta}");
    eventually(QUICK, "a's work is cancelled", || async {
        Ok(a_dropped.load(Ordering::SeqCst))
    })
    .await?;
    eventually(
        ctx.expiry_wait(),
        "a campaigns again on its new session",
        || async { Ok(sa.state() == SelectorState::Campaigning && a.leader("svc").await?.is_some()) },
    )
    .await?;
    sb.stop().await?;
    let (who, ta2) = within(QUICK, "a leads again once b stopped", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "a" && ta2 > tb);
    ensure!(sa.terms() == 2, "a led {} terms", sa.terms());
    sa.stop().await?;
    Ok(())
}

/// A term's work learns of its loss and may end on its own: its `Leading::lost`
/// resolves, and what it does then (here: waits a little, as a flush would, and reports)
/// completes before the selector cancels anything — within `LEADER_LOSS_GRACE`.
pub async fn lost_term_work_notes_its_loss(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let selector = a.lead("svc", b"a".to_vec(), move |leading| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(("leads", leading.token()));
            leading.lost().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(("noted its loss", leading.token()));
        }
    })?;
    let (what, token) = within(QUICK, "a leads", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(what == "leads");
    ctx.factory().kill_session(&a).await?;
    let (what, noted) = within(ctx.expiry_wait(), "the work notes its loss", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the selector ended"))?;
    ensure!(
        what == "noted its loss" && noted == token,
        "the work was cancelled before it could end its term: then {what} ({noted})"
    );
    selector.stop().await?;
    Ok(())
}

/// A lost term's work never runs beside the next leader's: `a` is cut off by a silent
/// partition (a blackhole: only timeouts can tell) while its work ignores the loss; the
/// selector cancels that work before the server can expire `a`'s session and let `b`'s
/// work start. Also: the selector stops saying `Leading` as soon as the term is lost.
pub async fn lost_term_work_ends_before_the_next_term(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let a_ended = Arc::new(std::sync::Mutex::new(None::<tokio::time::Instant>));
    struct OnDrop(Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::time::Instant::now());
        }
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let sa = a.lead("svc", b"a".to_vec(), {
        let (tx, a_ended) = (tx.clone(), a_ended.clone());
        move |leading| {
            let (tx, a_ended) = (tx.clone(), a_ended.clone());
            async move {
                let _flag = OnDrop(a_ended);
                let _ = tx.send(("a", leading.token(), tokio::time::Instant::now()));
                // Ignores its loss: runs until cancelled.
                std::future::pending::<()>().await;
            }
        }
    })?;
    let (who, ta, _) = within(QUICK, "a leads", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "a");
    let sb = b.lead("svc", b"b".to_vec(), move |leading| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(("b", leading.token(), tokio::time::Instant::now()));
            std::future::pending::<()>().await;
        }
    })?;
    settle().await;
    let mut a_state = sa.subscribe();
    ctx.factory().blackhole(&a, ctx.session_timeout() * 3).await?;
    let (who, tb, b_started) = within(ctx.expiry_wait(), "b leads after a was cut off", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "b" && tb > ta, "{who} led with {tb} after a's {ta}");
    let a_ended = (*a_ended.lock().unwrap_or_else(|p| p.into_inner()))
        .ok_or_else(|| anyhow::anyhow!("a's lost term's work still runs while b leads"))?;
    ensure!(
        a_ended <= b_started,
        "a's lost term's work ran {:?} beside b's term",
        a_ended - b_started
    );
    ensure!(
        !matches!(*a_state.borrow_and_update(), SelectorState::Leading(t) if t == ta),
        "a's selector still says it leads its lost term"
    );
    sa.stop().await?;
    sb.stop().await?;
    Ok(())
}

/// A work that panics ends its term as a loss would: the selector does not stay
/// `Leading` with nobody leading on the server, and it campaigns again and leads its
/// next term.
pub async fn panicking_work_ends_the_term(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let terms = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sa = a.lead("svc", b"a".to_vec(), move |leading| {
        let tx = tx.clone();
        let _ = tx.send(leading.token());
        // Odd terms: the work's constructor panics, before it returns a future; even
        // terms: the work's future does.
        if terms.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            panic!(
                "the work's own bug (in its constructor) {}",
                crate::harness::EXPECTED_PANIC
            );
        }
        async move {
            panic!("the work's own bug {}", crate::harness::EXPECTED_PANIC);
        }
    })?;
    let mut last = within(QUICK, "a leads", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the selector ended"))?;
    for n in 1..=2 {
        let next = within(QUICK, "a leads again after its work panicked", rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the selector ended after panic {n}"))?;
        ensure!(next > last, "the next term's token {next} is not above {last}");
        last = next;
    }
    // Between terms nobody is left leading a panicked term: another candidate can win.
    sa.stop().await?;
    ensure!(
        b.leader("svc").await?.is_none(),
        "a stopped selector left a leader behind"
    );
    Ok(())
}

/// Stopping a leading selector cancels its work and resigns at once; dropping one does
/// the same in the background.
pub async fn stop_and_drop_resign(ctx: Ctx) -> CaseResult {
    let (a, b, c) = (ctx.client().await?, ctx.client().await?, ctx.client().await?);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let a_dropped = Arc::new(AtomicBool::new(false));
    let sa = lead_forever(&a, "a", tx.clone(), a_dropped.clone())?;
    within(QUICK, "a leads", rx.recv()).await?;
    let sb = lead_forever(&b, "b", tx.clone(), Arc::new(AtomicBool::new(false)))?;
    sa.stop().await?;
    ensure!(a_dropped.load(Ordering::SeqCst), "a's work still runs after stop");
    let (who, _) = within(QUICK, "b leads once a stopped", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "b");
    let sc = lead_forever(&c, "c", tx.clone(), Arc::new(AtomicBool::new(false)))?;
    drop(sb);
    let (who, _) = within(QUICK, "c leads once b's selector was dropped", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("ended"))?;
    ensure!(who == "c");
    sc.stop().await?;
    ensure!(
        a.lead("bad//name", Vec::new(), |_| async {}).is_err(),
        "a bad name was accepted"
    );
    Ok(())
}
