//! Shared counter cases: atomic adds under contention, absent is zero, set, watch, the
//! fence, and values that are not counters.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::{ConfigStore, ErrorKind, Lock};

use crate::harness::{CaseResult, Ctx};
use crate::util::{next_event, retrying, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// Five clients add 1 twenty times each at once: every add returned a value of its own,
/// and the counter ends at the number of adds that landed. An add whose outcome is
/// unknown (a connection lost under a member fault) may or may not have landed: the
/// total must lie between the adds confirmed and those plus the unknown ones.
pub async fn adds_are_atomic_under_contention(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(5).await?;
    let mut tasks = Vec::new();
    for c in clients {
        tasks.push(tokio::spawn(async move {
            let counter = c.counter("hits")?;
            let (mut seen, mut unknown) = (Vec::new(), 0u64);
            for _ in 0..20 {
                match counter.add(1).await {
                    Ok(v) => seen.push(v),
                    Err(e) if e.outcome_unknown() => unknown += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            anyhow::Ok((seen, unknown))
        }));
    }
    let (mut all, mut unknown) = (BTreeSet::new(), 0u64);
    for t in tasks {
        let (seen, maybe) = within(Duration::from_secs(60), "an adder finishes", t).await???;
        unknown += maybe;
        for v in seen {
            ensure!(all.insert(v), "two adds returned {v}");
        }
    }
    let c = ctx.client().await?;
    let counter = c.counter("hits")?;
    let total = retrying(|| counter.get()).await?;
    let confirmed = all.len() as i64;
    ensure!(
        (confirmed..=confirmed + unknown as i64).contains(&total),
        "the counter is {total} after {confirmed} confirmed adds and {unknown} of unknown outcome"
    );
    ensure!(
        all.iter().all(|v| (1..=total).contains(v)),
        "an add returned a value outside 1..={total}: {all:?}"
    );
    Ok(())
}

/// An absent counter is 0; `set` and `add` (also negative) change it, and the key holds
/// the value in decimal.
pub async fn get_set_add(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let counter = c.counter("n")?;
    ensure!(counter.get().await? == 0, "an absent counter is not 0");
    counter.set(40).await?;
    ensure!(counter.add(2).await? == 42);
    ensure!(counter.add(-50).await? == -8);
    let stored = c.get("n").await?.ok_or_else(|| anyhow::anyhow!("no key"))?;
    ensure!(
        stored.value == b"-8",
        "the key holds {:?}",
        String::from_utf8_lossy(&stored.value)
    );
    Ok(())
}

/// A watch shows the value now, then each new value; a delete shows 0.
pub async fn watch_follows_the_value(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut values = a.counter("n")?.watch().await?;
    ensure!(next_event(&mut values, QUICK, "the first value").await? == 0);
    let counter = b.counter("n")?;
    counter.add(5).await?;
    ensure!(next_event(&mut values, QUICK, "the value after add(5)").await? == 5);
    counter.set(2).await?;
    ensure!(next_event(&mut values, QUICK, "the value after set(2)").await? == 2);
    b.delete("n").await?;
    ensure!(next_event(&mut values, QUICK, "the value after the delete").await? == 0);
    Ok(())
}

/// A counter fenced by a lock guard changes while the guard holds; once released, its
/// `add` and `set` fail with `Fenced` and change nothing.
pub async fn fenced_writes_refused_after_release(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let guard = c.lock("owner").await?;
    let fenced = c.counter("n")?.fenced_by(guard.fence());
    ensure!(fenced.add(3).await? == 3);
    guard.release().await?;
    match fenced.add(1).await {
        Err(e) if e.kind() == ErrorKind::Fenced => {}
        other => bail!("a stale holder's add returned {other:?}, expected Fenced"),
    }
    match fenced.set(100).await {
        Err(e) if e.kind() == ErrorKind::Fenced => {}
        other => bail!("a stale holder's set returned {other:?}, expected Fenced"),
    }
    ensure!(
        c.counter("n")?.get().await? == 3,
        "a refused write changed the counter"
    );
    Ok(())
}

/// A key that holds something other than a decimal integer is `InvalidArgument` for
/// `get` and `add`, which change nothing; an add past `i64::MAX` too.
pub async fn non_counter_values_are_errors(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    c.put("n", b"twelve".to_vec()).await?;
    for (what, r) in [
        ("get", c.counter("n")?.get().await),
        ("add", c.counter("n")?.add(1).await),
    ] {
        match r {
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {}
            other => bail!("{what} of a non-counter returned {other:?}"),
        }
    }
    ensure!(c.get("n").await?.is_some_and(|v| v.value == b"twelve"));
    let big = c.counter("big")?;
    big.set(i64::MAX).await?;
    match big.add(1).await {
        Err(e) if e.kind() == ErrorKind::InvalidArgument => {}
        other => bail!("an overflowing add returned {other:?}"),
    }
    ensure!(big.get().await? == i64::MAX);
    ensure!(c.counter("bad//key").is_err(), "a bad key was accepted");
    Ok(())
}
