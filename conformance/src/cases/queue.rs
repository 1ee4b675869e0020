//! Distributed queue cases: FIFO, each item taken exactly once by racing consumers, take
//! waits for a push, the bound, a dropped or crashed consumer, herd-freedom.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::ErrorKind;

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, stays_pending, still_waiting, within};

const QUICK: Duration = Duration::from_secs(10);

/// Items come out in the order they went in; `len` counts them; an empty queue's
/// `try_take` is `None`.
pub async fn fifo_push_take(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let q = a.queue("jobs", 10)?;
    for i in 0..3u8 {
        q.push(vec![i]).await?;
    }
    ensure!(q.len().await? == 3);
    let consumer = b.queue("jobs", 10)?;
    for i in 0..3u8 {
        let item = within(QUICK, "take", consumer.take()).await??;
        ensure!(item == vec![i], "took {item:?}, expected [{i}]");
    }
    ensure!(
        consumer.try_take().await?.is_none(),
        "an empty queue gave an item"
    );
    ensure!(q.is_empty().await?);
    Ok(())
}

/// Two producers push 20 items each while four consumers race to take them: every item
/// is taken exactly once. Under member faults a push or a take may end with its outcome
/// unknown: such a push may or may not have added its item, such a take may have
/// removed one; the counts must stay within those bounds, and no item is taken twice.
pub async fn racing_consumers_take_each_item_once(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(6).await?;
    // Some(item): taken; None: a take of unknown outcome (an item may be gone).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let mut consumers: Vec<tokio::task::JoinHandle<anyhow::Result<()>>> = Vec::new();
    for c in &clients[2..] {
        let (q, tx) = (c.queue("jobs", 100)?, tx.clone());
        consumers.push(tokio::spawn(async move {
            loop {
                match q.take().await {
                    Ok(item) => {
                        let _ = tx.send(Some(item));
                    }
                    Err(e) if e.outcome_unknown() => {
                        let _ = tx.send(None);
                    }
                    Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(e) => return Err(anyhow::Error::from(e)),
                }
            }
        }));
    }
    let mut producers = Vec::new();
    for (p, c) in clients[..2].iter().enumerate() {
        let q = c.queue("jobs", 100)?;
        producers.push(tokio::spawn(async move {
            let (mut confirmed, mut unknown) = (0usize, 0usize);
            for i in 0..20u8 {
                loop {
                    match q.push(vec![p as u8, i]).await {
                        Ok(_) => confirmed += 1,
                        Err(e) if e.outcome_unknown() => unknown += 1,
                        Err(e) if e.is_retryable() => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        Err(e) => return Err(anyhow::Error::from(e)),
                    }
                    break;
                }
            }
            anyhow::Ok((confirmed, unknown))
        }));
    }
    let (mut pushed, mut maybe_pushed) = (0, 0);
    for p in producers {
        let (confirmed, unknown) =
            within(Duration::from_secs(60), "a producer pushes its items", p).await???;
        pushed += confirmed;
        maybe_pushed += unknown;
    }
    let (mut taken, mut maybe_taken) = (BTreeSet::new(), 0);
    while taken.len() + maybe_taken < pushed {
        match within(Duration::from_secs(30), "the next item is taken", rx.recv()).await? {
            Some(Some(item)) => ensure!(taken.insert(item.clone()), "item {item:?} was taken twice"),
            Some(None) => maybe_taken += 1,
            None => bail!("consumers ended"),
        }
    }
    settle().await;
    while let Ok(extra) = rx.try_recv() {
        match extra {
            Some(item) => ensure!(taken.insert(item.clone()), "item {item:?} was taken twice"),
            None => maybe_taken += 1,
        }
    }
    ensure!(
        taken.len() <= pushed + maybe_pushed,
        "{} items taken (and {maybe_taken} takes of unknown outcome) of {pushed} pushed and {maybe_pushed} pushes of unknown outcome",
        taken.len()
    );
    for c in consumers {
        c.abort();
    }
    Ok(())
}

/// A `take` on an empty queue waits, and gets the item pushed later.
pub async fn take_waits_for_a_push(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let q = b.queue("jobs", 10)?;
    let mut taker = tokio::spawn(async move { q.take().await });
    settle().await;
    still_waiting(&mut taker, "take returned on an empty queue").await?;
    a.queue("jobs", 10)?.push(b"job".to_vec()).await?;
    let item = within(QUICK, "the waiting take gets the pushed item", taker).await???;
    ensure!(item == b"job");
    Ok(())
}

/// A push beyond the maximum fails with a retryable `Unavailable` naming the bound, and
/// adds nothing; once an item is taken, a push fits again.
pub async fn push_beyond_the_bound_fails(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let q = c.queue("jobs", 2)?;
    q.push(b"1".to_vec()).await?;
    q.push(b"2".to_vec()).await?;
    match q.push(b"3".to_vec()).await {
        Err(e) if e.kind() == ErrorKind::Unavailable && e.message().contains("full") => {
            ensure!(e.is_retryable(), "a full queue's error is not retryable");
        }
        other => bail!("a push beyond the bound returned {other:?}"),
    }
    ensure!(q.len().await? == 2, "the refused push added an item");
    ensure!(q.take().await? == b"1");
    q.push(b"3".to_vec()).await?;
    ensure!(c.queue("x", 0).is_err(), "a queue of 0 items was accepted");
    Ok(())
}

/// A `take` dropped while waiting leaves nothing: another consumer gets the next item.
pub async fn dropped_take_leaves_nothing(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    stays_pending(
        Duration::from_millis(500),
        "a take on an empty queue",
        b.queue("jobs", 10)?.take(),
    )
    .await?;
    let q = c.queue("jobs", 10)?;
    let taker = tokio::spawn(async move { q.take().await });
    settle().await;
    a.queue("jobs", 10)?.push(b"job".to_vec()).await?;
    let item = within(
        QUICK,
        "c takes; a taker entry left by b's dropped take would block it",
        taker,
    )
    .await???;
    ensure!(item == b"job");
    Ok(())
}

/// A consumer that crashes while waiting at the front hands its place on: the next
/// consumer gets the item once the crashed one's session is gone.
pub async fn crashed_consumer_passes_on(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let qa = a.queue("jobs", 10)?;
    let first = tokio::spawn(async move { qa.take().await });
    settle().await;
    let qb = b.queue("jobs", 10)?;
    let mut second = tokio::spawn(async move { qb.take().await });
    settle().await;
    ctx.factory().crash(&a).await?;
    first.abort();
    c.queue("jobs", 10)?.push(b"job".to_vec()).await?;
    let item = within(
        ctx.expiry_wait(),
        "b takes once the crashed consumer is gone",
        &mut second,
    )
    .await???;
    ensure!(item == b"job");
    Ok(())
}

/// Herd-free: with three consumers waiting, a push notifies at most two of them (the one
/// at the front, watching the items, and the next, watching the taker lock).
pub async fn push_notifies_at_most_two_consumers(ctx: Ctx) -> CaseResult {
    let producer = ctx.client().await?;
    let consumers = ctx.clients(3).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, c) in consumers.iter().enumerate() {
        let (q, tx) = (c.queue("jobs", 10)?, tx.clone());
        tasks.push(tokio::spawn(async move {
            if let Ok(item) = q.take().await {
                let _ = tx.send((i, item));
            }
        }));
        settle().await;
    }
    // The consumers' order on the taker lock, as the server has it (under member faults
    // a consumer's join can be delayed past a later one's).
    let first = {
        let sessions: Vec<u64> = consumers.iter().map(|c| c.session_id()).collect();
        let order = std::sync::Mutex::new(Vec::<usize>::new());
        crate::util::eventually(ctx.expiry_wait(), "every consumer is queued", || async {
            let view =
                crate::util::retrying(|| producer.inspect_one(coord_core::RecipeKind::Queue, "jobs")).await?;
            let queued: Vec<usize> = view
                .holders
                .iter()
                .chain(&view.waiters)
                .filter_map(|p| sessions.iter().position(|s| *s == p.session))
                .collect();
            let full = queued.len() == sessions.len();
            *order.lock().unwrap_or_else(|p| p.into_inner()) = queued;
            Ok(full)
        })
        .await?;
        order.into_inner().unwrap_or_else(|p| p.into_inner())[0]
    };
    let before: Vec<u64> = consumers.iter().map(|c| c.stats().watch_events).collect();
    producer.queue("jobs", 10)?.push(b"job".to_vec()).await?;
    let (who, _) = within(QUICK, "a consumer takes the item", rx.recv())
        .await?
        .ok_or_else(|| anyhow::anyhow!("consumers ended"))?;
    ensure!(
        who == first,
        "consumer {who} took the item before consumer {first}, the first in line on the server"
    );
    settle().await;
    let woken = consumers
        .iter()
        .zip(&before)
        .filter(|(c, b)| c.stats().watch_events > **b)
        .count();
    ensure!(
        woken <= 2,
        "one push notified {woken} waiting consumers; expected at most 2"
    );
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// A consumer whose session is killed while it waits for an item gets `SessionLost`
/// (it took nothing); the next consumer gets the item pushed later.
pub async fn waiter_session_lost_fails_and_takes_nothing(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let qb = b.queue("jobs", 10)?;
    let waiter = tokio::spawn(async move { qb.take().await });
    settle().await;
    ctx.factory().kill_session(&b).await?;
    match within(ctx.expiry_wait(), "the waiting consumer ends", waiter).await?? {
        Err(e) if e.kind() == ErrorKind::SessionLost => {}
        other => bail!("a consumer whose session was lost while waiting returned {other:?}"),
    }
    a.queue("jobs", 10)?.push(b"job".to_vec()).await?;
    let item = within(QUICK, "c takes the item", c.queue("jobs", 10)?.take()).await??;
    ensure!(item == b"job");
    Ok(())
}

/// Queues whose names nest (`jobs` and `jobs/items`) keep their items apart: neither
/// counts, takes or waits for the other's items or its tail.
pub async fn nested_names_keep_their_items(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let (outer, inner) = (a.queue("jobs", 10)?, a.queue("jobs/items", 10)?);
    inner.push(b"inner".to_vec()).await?;
    ensure!(
        outer.len().await? == 0,
        "queue jobs counts the items of queue jobs/items"
    );
    ensure!(
        outer.try_take().await?.is_none(),
        "queue jobs took an item of queue jobs/items"
    );
    outer.push(b"outer".to_vec()).await?;
    ensure!(outer.len().await? == 1 && inner.len().await? == 1);
    ensure!(within(QUICK, "take of jobs", outer.take()).await?? == b"outer".to_vec());
    ensure!(within(QUICK, "take of jobs/items", inner.take()).await?? == b"inner".to_vec());
    ensure!(outer.try_take().await?.is_none() && inner.try_take().await?.is_none());
    Ok(())
}

/// A queue whose name extends this one's with a digit (`jobs/items/0`), and a foreign
/// key right under the items that is no sequence number (`jobs/items/0-note`), sort
/// among the item keys: neither is counted, taken or waited for as an item of `jobs`.
pub async fn keys_among_the_items_are_not_items(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore as _;
    let a = ctx.client().await?;
    let (outer, inner) = (a.queue("jobs", 10)?, a.queue("jobs/items/0", 10)?);
    inner.push(b"inner".to_vec()).await?;
    a.put("jobs/items/0-note", b"not an item".to_vec()).await?;
    ensure!(
        outer.len().await? == 0,
        "jobs counts keys that are no items of it"
    );
    ensure!(
        outer.try_take().await?.is_none(),
        "jobs took a key that is no item of it"
    );
    outer.push(b"outer".to_vec()).await?;
    ensure!(outer.len().await? == 1, "len of jobs = {}", outer.len().await?);
    ensure!(
        within(QUICK, "take of jobs", outer.take()).await?? == b"outer".to_vec(),
        "jobs' take returned something else"
    );
    ensure!(within(QUICK, "take of jobs/items/0", inner.take()).await?? == b"inner".to_vec());
    ensure!(
        a.get("jobs/items/0-note").await?.is_some(),
        "the foreign key was taken"
    );
    Ok(())
}

/// A consumer that polls with a short timeout — `timeout(0..2t, take())` in a loop, `t`
/// a take's time —
/// dropping every take that does not finish in time, at whatever point it stands — loses
/// no item: an item whose removal landed after its take was dropped goes to the
/// consumer's next take. Every item is taken exactly once, and in order.
pub async fn dropped_takes_lose_no_item(ctx: Ctx) -> CaseResult {
    use rand::{Rng as _, SeedableRng as _};
    const ITEMS: u32 = 100;
    let a = ctx.client().await?;
    let q = a.queue("jobs", ITEMS + 1)?;
    // Requests take a while (on mem, where they would not, by an injected latency), so
    // that the timeouts drop takes at every step: before, during and after the removal.
    crate::util::slow_link(&ctx, &a, Duration::from_micros(500)).await?;
    for i in 0..ITEMS {
        q.push(i.to_string().into_bytes()).await?;
    }
    // Timeouts from zero to twice a whole take's time: some drop a take before its
    // removal, some during it, some after it landed.
    let started = tokio::time::Instant::now();
    let first = within(QUICK, "the first take", q.take()).await??;
    let span = (started.elapsed() * 2).max(Duration::from_millis(4));
    let seed = rand::random::<u64>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut taken = vec![String::from_utf8(first)?.parse::<u32>()?];
    let (mut dropped, mut rounds) = (0u32, 0u32);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(50);
    while taken.len() < ITEMS as usize {
        if tokio::time::Instant::now() >= deadline {
            let left = q.len().await?;
            bail!(
                "{} of {ITEMS} items taken after {rounds} takes ({dropped} dropped; seed {seed}), {left} still queued: {} lost",
                taken.len(),
                ITEMS as usize - taken.len() - left
            );
        }
        rounds += 1;
        let limit = span.mul_f64(rng.random_range(0.0..1.0));
        match tokio::time::timeout(limit, q.take()).await {
            Ok(item) => taken.push(String::from_utf8(item?)?.parse::<u32>()?),
            Err(_) => dropped += 1,
        }
    }
    let expected: Vec<u32> = (0..ITEMS).collect();
    ensure!(
        taken == expected,
        "items taken out of order or twice ({dropped} of {rounds} takes dropped; seed {seed}): {taken:?}"
    );
    ensure!(
        q.try_take().await?.is_none() && q.is_empty().await?,
        "items left after all were taken"
    );
    println!(
        "[{}] {ITEMS} items, {rounds} takes, {dropped} dropped: none lost",
        a.kind()
    );
    ensure!(dropped > 0, "no take was dropped: the case tested nothing");
    Ok(())
}

/// A consumer that gives up on takes (a timeout, as `coord queue take --timeout` does)
/// and then closes cleanly — no drain, mid-operation — loses no item: what a dropped
/// take removed is kept on the server (its receipt) and put back at the head for the
/// next consumer. Its link is slowed so that the timeouts fall before, during and after
/// removals. With no fault, nothing is delivered twice either.
pub async fn closing_after_dropped_takes_loses_no_item(ctx: Ctx) -> CaseResult {
    use rand::{Rng as _, SeedableRng as _};
    const ITEMS: u32 = 40;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let q = a.queue("jobs", ITEMS + 1)?;
    for i in 0..ITEMS {
        q.push(i.to_string().into_bytes()).await?;
    }
    crate::util::slow_link(&ctx, &a, Duration::from_millis(10)).await?;
    let started = tokio::time::Instant::now();
    let first = within(QUICK, "the first take", q.take()).await??;
    let span = (started.elapsed() * 2).max(Duration::from_millis(4));
    let seed = rand::random::<u64>();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut taken = vec![String::from_utf8(first)?.parse::<u32>()?];
    let mut dropped = 0u32;
    for _ in 0..30 {
        let limit = span.mul_f64(rng.random_range(0.0..1.0));
        match tokio::time::timeout(limit, q.take()).await {
            Ok(item) => taken.push(String::from_utf8(item?)?.parse::<u32>()?),
            Err(_) => dropped += 1,
        }
    }
    // One more take, dropped partway, and the client closes right after: no drain.
    if let Ok(item) = tokio::time::timeout(span / 2, q.take()).await {
        taken.push(String::from_utf8(item?)?.parse::<u32>()?);
    }
    a.close().await?;
    let qb = b.queue("jobs", ITEMS + 1)?;
    let mut rest = Vec::new();
    while taken.len() + rest.len() < ITEMS as usize {
        match within(QUICK, "the next consumer takes", qb.take()).await {
            Ok(item) => rest.push(String::from_utf8(item?)?.parse::<u32>()?),
            Err(_) => break,
        }
    }
    let mut all: Vec<u32> = taken.iter().chain(&rest).copied().collect();
    all.sort_unstable();
    let expected: Vec<u32> = (0..ITEMS).collect();
    if all != expected {
        use coord_core::ConfigStore;
        let left: Vec<String> = b.list("jobs").await?.into_iter().map(|e| e.key).collect();
        bail!(
            "items lost or delivered twice after {dropped} dropped takes and a clean close (seed {seed}): \
             the closing consumer took {taken:?}, the next one {rest:?}; keys left: {left:?}"
        );
    }
    let mut in_order = rest.clone();
    in_order.sort_unstable();
    ensure!(
        in_order == rest,
        "the next consumer took items out of order: {rest:?}"
    );
    ensure!(
        qb.try_take().await?.is_none(),
        "an item left after all were taken"
    );
    println!(
        "[{}] {ITEMS} items, {dropped} takes dropped, then a clean close: none lost ({} by the next consumer)",
        b.kind(),
        rest.len()
    );
    Ok(())
}

/// A push and a `len` cost the same requests with 400 items queued as with 10: neither
/// reads every item (ZooKeeper read them in one `multi` per 64 items before).
pub async fn push_and_len_cost_does_not_grow_with_the_queue(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let q = a.queue("jobs", 1_000)?;
    let mut costs = Vec::new();
    for target in [10u64, 400] {
        while (q.len().await? as u64) < target - 1 {
            q.push(b"x".to_vec()).await?;
        }
        let before = a.stats();
        q.push(b"x".to_vec()).await?;
        let push = a.stats().since(&before).data_requests();
        let before = a.stats();
        ensure!(q.len().await? as u64 == target, "len after pushing to {target}");
        let len = a.stats().since(&before).data_requests();
        costs.push((target, push, len));
    }
    println!("[{}] queue requests (items, push, len): {costs:?}", a.kind());
    let ((_, push10, len10), (_, push400, len400)) = (costs[0], costs[1]);
    ensure!(
        push400 <= push10 && len400 <= len10,
        "requests grew with the queue: {costs:?} (items, push, len)"
    );
    Ok(())
}

/// An operator deletes a queue's tail key while items remain (a clean-up by hand), then
/// sets it back below an item: each next push goes after every item still queued —
/// none overwritten, none ahead of older items.
pub async fn tail_deleted_by_hand_keeps_order(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore as _;
    let a = ctx.client().await?;
    let q = a.queue("jobs", 10)?;
    for i in 0..3u8 {
        q.push(vec![i]).await?;
    }
    ensure!(within(QUICK, "the first take", q.take()).await?? == vec![0]);
    ensure!(a.delete("jobs/tail").await?, "the tail was not there to delete");
    let seq = within(QUICK, "a push after the tail was deleted", q.push(vec![3])).await??;
    ensure!(
        seq == 3,
        "with its tail deleted, a push went to sequence {seq}, not 3"
    );
    a.put("jobs/tail", b"1".to_vec()).await?;
    let seq = within(QUICK, "a push after the tail was set back", q.push(vec![4])).await??;
    ensure!(
        seq == 4,
        "with its tail set back, a push went to sequence {seq}, not 4"
    );
    ensure!(
        q.len().await? == 4,
        "len = {} with 4 items queued",
        q.len().await?
    );
    for i in 1..5u8 {
        let item = within(QUICK, "take", q.take()).await??;
        ensure!(
            item == vec![i],
            "took {item:?}, expected [{i}]: an item was overwritten or jumped"
        );
    }
    ensure!(q.try_take().await?.is_none(), "an item left after all were taken");
    Ok(())
}

/// An operator deletes the item a waiting take is about to remove (the taker's link
/// slowed, the delete drawn between zero and twice a take's time, so that it falls
/// before, between and after the take's read and its removal): the take waits on for
/// the next item — it never fails for it — and takes it.
pub async fn take_waits_on_when_an_operator_deletes_its_item(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore as _;
    use rand::Rng as _;
    const ROUNDS: usize = 100;
    let (a, operator) = (ctx.client().await?, ctx.client().await?);
    crate::util::slow_link(&ctx, &a, Duration::from_millis(1)).await?;
    let (q, producer) = (a.queue("jobs", 10)?, operator.queue("jobs", 10)?);
    // A take's time, from its call to its item (the second take: the first one warms).
    producer.push(b"warm-up".to_vec()).await?;
    within(QUICK, "the first take", q.take()).await??;
    producer.push(b"calibration".to_vec()).await?;
    let started = tokio::time::Instant::now();
    within(QUICK, "the second take", q.take()).await??;
    let span = (started.elapsed() * 2).max(Duration::from_millis(4));
    let mut deleted = 0;
    for round in 0..ROUNDS {
        let seq = producer.push(format!("first {round}").into_bytes()).await?;
        let key = format!("jobs/items/{seq:020}");
        let take = {
            let q = q.clone();
            tokio::spawn(async move { q.take().await })
        };
        let wait = span.mul_f64(rand::rng().random_range(0.0..1.0));
        tokio::time::sleep(wait).await;
        if !operator.delete(&key).await? {
            // The take removed it first.
            let item = within(QUICK, "the take", take).await???;
            ensure!(
                item == format!("first {round}").into_bytes(),
                "round {round}: took {item:?}"
            );
            continue;
        }
        deleted += 1;
        // Long enough for a take that lost the race to read the queue again and find it
        // empty: it must wait on, not end.
        tokio::time::sleep(span).await;
        if take.is_finished() {
            let ended = take.await?;
            bail!("round {round}: its item deleted by hand, the take ended: {ended:?}");
        }
        producer.push(format!("second {round}").into_bytes()).await?;
        let item = within(QUICK, "the take", take)
            .await??
            .map_err(|e| anyhow::anyhow!("round {round}: its item deleted by hand, the take failed: {e}"))?;
        ensure!(
            item == format!("second {round}").into_bytes(),
            "round {round}: took {:?}, expected the second item",
            String::from_utf8_lossy(&item)
        );
    }
    ensure!(
        deleted > 0,
        "the operator never deleted an item first: the case tested nothing"
    );
    println!(
        "[{}] {deleted} of {ROUNDS} items deleted by hand under a take",
        a.kind()
    );
    Ok(())
}

/// An item written by hand at the last sequence number with no tail, or a tail set by
/// hand to it: a push says it cannot go after it — it neither panics, nor loops, nor
/// wraps the tail around (which would hide its item for good).
pub async fn push_after_the_last_sequence_fails(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore as _;
    let a = ctx.client().await?;
    let last = u64::MAX.to_string().into_bytes();
    a.put(&format!("jobs/items/{}", u64::MAX), b"last".to_vec())
        .await?;
    a.put("tail-at-last/tail", last.clone()).await?;
    for name in ["jobs", "tail-at-last"] {
        let q = a.queue(name, 10)?;
        // Spawned: a panic shows as the task's error.
        let push = tokio::spawn(async move { q.push(b"next".to_vec()).await });
        match within(QUICK, "the push", push).await? {
            Ok(Err(e)) if e.kind() == ErrorKind::InvalidArgument => {}
            other => bail!("queue {name}: a push after the last sequence number: {other:?}"),
        }
    }
    ensure!(
        a.get("tail-at-last/tail").await?.map(|v| v.value) == Some(last),
        "the tail at the last sequence number wrapped around"
    );
    Ok(())
}
