//! Read/write lock cases: readers share, writers exclude, FIFO between the two (a queued
//! writer blocks later readers), hand-over on death, cancellation, herd-freedom.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::{ConfigStore, Txn};

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, stays_pending, still_waiting, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// Two clients read at once; a writer waits for both, then holds with a token above
/// theirs; while it holds, a reader gets nothing. A read guard's fence admits writes
/// while the read is held.
pub async fn readers_share_writer_waits(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let ra = within(QUICK, "a reads", a.rw_lock("doc")?.read()).await??;
    let rb = within(QUICK, "b reads while a reads", b.rw_lock("doc")?.read()).await??;
    crate::util::held(&ctx, "reader a", || ra.state()).await?;
    crate::util::held(&ctx, "reader b", || rb.state()).await?;
    a.commit(Txn::new().fenced_by(ra.fence()).put("seen", b"a".to_vec()))
        .await?;
    ensure!(
        c.rw_lock("doc")?.try_write().await?.is_none(),
        "try_write succeeded while two readers hold"
    );
    let cw = c.rw_lock("doc")?;
    let mut writer = tokio::spawn(async move { cw.write().await });
    settle().await;
    still_waiting(&mut writer, "the writer got the lock while readers hold").await?;
    let top = rb.token().max(ra.token());
    ra.release().await?;
    settle().await;
    still_waiting(&mut writer, "the writer got the lock while one reader holds").await?;
    rb.release().await?;
    let w = within(QUICK, "the writer holds once the readers left", writer).await???;
    ensure!(
        w.token() > top,
        "write token {} not above the readers' {top}",
        w.token()
    );
    ensure!(
        a.rw_lock("doc")?.try_read().await?.is_none(),
        "try_read succeeded while a writer holds"
    );
    w.release().await?;
    ensure!(
        a.rw_lock("doc")?.try_read().await?.is_some(),
        "try_read failed on a free lock: a failed try_read left a contender behind"
    );
    Ok(())
}

/// FIFO between readers and writers: a writer queued behind a reader blocks a reader
/// that comes after it (no writer starvation); the writer holds when the first reader
/// leaves, the second reader when the writer leaves.
pub async fn queued_writer_blocks_later_readers(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let ra = a.rw_lock("doc")?.read().await?;
    let bw = b.rw_lock("doc")?;
    let mut writer = tokio::spawn(async move { bw.write().await });
    settle().await;
    still_waiting(&mut writer, "the writer got the lock while a reader holds").await?;
    let cr = c.rw_lock("doc")?;
    let mut reader = tokio::spawn(async move { cr.read().await });
    settle().await;
    still_waiting(
        &mut reader,
        "a reader arriving after a queued writer went ahead of it",
    )
    .await?;
    ra.release().await?;
    let w = within(QUICK, "the writer holds once the reader left", writer).await???;
    settle().await;
    still_waiting(&mut reader, "the second reader holds beside the writer").await?;
    let tw = w.token();
    w.release().await?;
    let r = within(QUICK, "the second reader holds once the writer left", reader).await???;
    ensure!(r.token() > tw, "the reader's token is not above the writer's");
    Ok(())
}

/// One client's readers hold at once (each with an entry of its own); while they do,
/// another client cannot write; once both left, it can.
pub async fn readers_of_one_client_share(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let rw = a.rw_lock("doc")?;
    let r1 = within(QUICK, "the first read", rw.read()).await??;
    let r2 = within(QUICK, "a second read on the same client", rw.read()).await??;
    let r3 = within(QUICK, "a third read on the same client", rw.try_read())
        .await??
        .ok_or_else(|| anyhow::anyhow!("try_read refused beside the client's own readers"))?;
    ensure!(
        r1.fence().resource() != r2.fence().resource(),
        "two readers share one entry"
    );
    ensure!(b.rw_lock("doc")?.try_write().await?.is_none());
    r1.release().await?;
    r2.release().await?;
    ensure!(
        b.rw_lock("doc")?.try_write().await?.is_none(),
        "a writer held beside the third reader"
    );
    r3.release().await?;
    ensure!(
        b.rw_lock("doc")?.try_write().await?.is_some(),
        "try_write failed once every reader left"
    );
    Ok(())
}

/// Four clients mix reads and writes: a writer is never inside with anyone else;
/// readers may be inside together.
pub async fn writers_exclude_under_contention(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(4).await?;
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (readers, writers) = (readers.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            let rw = c.rw_lock("mixed")?;
            for round in 0..4 {
                if (i + round) % 2 == 0 {
                    let g = rw.write().await?;
                    if writers.fetch_add(1, Ordering::SeqCst) != 0 || readers.load(Ordering::SeqCst) != 0 {
                        bail!("a writer is inside with someone else");
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await?;
                } else {
                    let g = rw.read().await?;
                    readers.fetch_add(1, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        bail!("a reader is inside with a writer");
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    g.release().await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        within(Duration::from_secs(60), "a contender finishes its rounds", t).await???;
    }
    Ok(())
}

/// A crashed writer (no cleanup) lets the reader behind it in within the session
/// timeout, with a higher token.
pub async fn crashed_writer_passes_on(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let w = a.rw_lock("doc")?.write().await?;
    let token_a = w.token();
    std::mem::forget(w); // a crashed process runs no destructor
    let br = b.rw_lock("doc")?;
    let mut reader = tokio::spawn(async move { br.read().await });
    settle().await;
    still_waiting(&mut reader, "the reader got the lock while a writer holds").await?;
    ctx.factory().crash(&a).await?;
    let r = within(
        ctx.expiry_wait(),
        "the reader holds after the writer crashed",
        reader,
    )
    .await???;
    ensure!(r.token() > token_a);
    Ok(())
}

/// A reader whose session is killed lets the writer behind it in; the reader's guard
/// reports `Lost`.
pub async fn killed_reader_passes_on(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let r = a.rw_lock("doc")?.read().await?;
    let bw = b.rw_lock("doc")?;
    let mut writer = tokio::spawn(async move { bw.write().await });
    settle().await;
    still_waiting(&mut writer, "the writer got the lock while a reader holds").await?;
    ctx.factory().kill_session(&a).await?;
    let w = within(
        ctx.expiry_wait(),
        "the writer holds after the reader's session was killed",
        writer,
    )
    .await???;
    ensure!(w.token() > r.token());
    within(QUICK, "the killed reader's guard reports Lost", r.lost()).await?;
    Ok(())
}

/// A `write` future dropped while waiting leaves no contender: a reader arriving after
/// it is not blocked by it.
pub async fn dropped_write_future_leaves_no_contender(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let _ra = a.rw_lock("doc")?.read().await?;
    stays_pending(
        Duration::from_millis(500),
        "b.write while a reads",
        b.rw_lock("doc")?.write(),
    )
    .await?;
    let _r = within(
        QUICK,
        "c reads beside a; a writer entry left by b's dropped future would block it",
        c.rw_lock("doc")?.read(),
    )
    .await??;
    Ok(())
}

/// Herd-free: a reader queued behind two writers watches only the nearer one; the first
/// writer's release wakes the second writer alone (one notification), and the second's
/// release lets the reader in.
pub async fn reader_watches_only_the_nearest_writer(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let w1 = a.rw_lock("doc")?.write().await?;
    let bw = b.rw_lock("doc")?;
    let mut second = tokio::spawn(async move { bw.write().await });
    settle().await;
    let cr = c.rw_lock("doc")?;
    let mut reader = tokio::spawn(async move { cr.read().await });
    settle().await;
    still_waiting(&mut second, "the second writer holds beside the first").await?;
    still_waiting(&mut reader, "the reader holds beside a writer").await?;
    let (b_before, c_before) = (b.stats().watch_events, c.stats().watch_events);
    w1.release().await?;
    let w2 = within(QUICK, "the second writer holds", second).await???;
    settle().await;
    still_waiting(&mut reader, "the reader holds beside the second writer").await?;
    let (b_woken, c_woken) = (
        b.stats().watch_events - b_before,
        c.stats().watch_events - c_before,
    );
    ensure!(
        b_woken == 1 && c_woken == 0,
        "the first writer's release notified the second writer {b_woken} and the reader {c_woken} times; expected 1 and 0"
    );
    w2.release().await?;
    let _r = within(QUICK, "the reader holds once both writers left", reader).await???;
    Ok(())
}

/// A read/write lock and a plain lock of the same name are independent.
pub async fn independent_of_the_plain_lock(ctx: Ctx) -> CaseResult {
    use coord_core::Lock;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let _w = a.rw_lock("shared-name")?.write().await?;
    ensure!(
        b.try_lock("shared-name").await?.is_some(),
        "the plain lock waited for the read/write lock of the same name"
    );
    Ok(())
}

/// A reader whose session is killed while it waits gets `SessionLost` and leaves
/// nothing behind: once the writer leaves, another reader holds at once.
pub async fn waiter_session_lost_fails_and_leaves_nothing(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let w = a.rw_lock("doc")?.write().await?;
    let br = b.rw_lock("doc")?;
    let waiter = tokio::spawn(async move { br.read().await });
    settle().await;
    ctx.factory().kill_session(&b).await?;
    match within(ctx.expiry_wait(), "the waiting reader ends", waiter).await?? {
        Err(e) if e.kind() == coord_core::ErrorKind::SessionLost => {}
        other => bail!("a reader whose session was lost while waiting returned {other:?}"),
    }
    w.release().await?;
    let _r = within(
        QUICK,
        "another reader holds once the writer left",
        c.rw_lock("doc")?.read(),
    )
    .await??;
    Ok(())
}
