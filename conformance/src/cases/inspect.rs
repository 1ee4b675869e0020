//! The inspector: every recipe read back from the server as it stands — holders and
//! waiters in queue order, by each recipe's own admission rule.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::{Election as _, Lock as _, Origin, RecipeKind, RecipeView, Registry as _, ServiceInstance};

use crate::harness::{CaseResult, Ctx};
use crate::util::{settle, still_waiting, within};
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

fn find<'a>(views: &'a [RecipeView], kind: RecipeKind, name: &str) -> anyhow::Result<&'a RecipeView> {
    views
        .iter()
        .find(|v| v.kind == kind && v.name == name)
        .with_context(|| format!("inspect shows no {kind} {name:?}: {views:#?}"))
}

fn values(participants: &[coord_core::Participant]) -> Vec<String> {
    participants
        .iter()
        .map(|p| String::from_utf8_lossy(&p.value).into_owned())
        .collect()
}

/// Locks, read/write locks, semaphores, elections, services, queues and two-phase
/// commits with holders and waiters: the inspector shows each as the recipe admits
/// them, in queue order with their tokens, and a prefix narrows it down.
pub async fn shows_every_recipe_as_it_stands(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    // A lock held by a, waited for by b.
    let held = within(
        QUICK,
        "a locks",
        a.lock_with("jobs/nightly", coord_core::LockOptions::new().holder("a:1")),
    )
    .await??;
    let b2 = b.clone();
    let mut lock_waiter = tokio::spawn(async move {
        b2.lock_with("jobs/nightly", coord_core::LockOptions::new().holder("b:2"))
            .await
    });
    // A read/write lock read by a and b, a writer c waiting.
    let ra = a
        .rw_lock("files")?
        .with_options(coord_core::LockOptions::new().holder("a:1"))?
        .read()
        .await?;
    let rb = b.rw_lock("files")?.read().await?;
    let wc = c
        .rw_lock("files")?
        .with_options(coord_core::LockOptions::new().holder("c:3"))?;
    let mut writer = tokio::spawn(async move { wc.write().await });
    // A semaphore of 2 held by a and b, c waiting.
    let la = a.semaphore("pool", 2)?.acquire().await?;
    let lb = b.semaphore("pool", 2)?.acquire().await?;
    let sc = c.semaphore("pool", 2)?;
    let mut acquirer = tokio::spawn(async move { sc.acquire().await });
    // An election led by a, b a candidate.
    let leading = within(QUICK, "a leads", a.campaign("scheduler", "node-a")).await??;
    let b3 = b.clone();
    let mut candidate = tokio::spawn(async move { b3.campaign("scheduler", "node-b").await });
    // A service, a queue with two items.
    let registration = a
        .register("api", ServiceInstance::new("i-1", "10.0.0.1:80"))
        .await?;
    let jobs = a.queue("work", 10)?;
    jobs.push(b"one".to_vec()).await?;
    jobs.push(b"two".to_vec()).await?;
    settle().await;
    still_waiting(&mut lock_waiter, "b got a held lock").await?;
    still_waiting(&mut writer, "c wrote under two readers").await?;
    still_waiting(&mut acquirer, "a third lease of two was granted").await?;
    still_waiting(&mut candidate, "b leads beside a").await?;

    let views = a.inspect("").await?;
    let lock = find(&views, RecipeKind::Lock, "jobs/nightly")?;
    ensure!(values(&lock.holders) == ["a:1"], "lock holders: {lock:#?}");
    ensure!(values(&lock.waiters) == ["b:2"], "lock waiters: {lock:#?}");
    ensure!(
        lock.holders[0].token == held.token(),
        "the holder's token: {lock:#?}"
    );
    ensure!(
        lock.waiters[0].token > lock.holders[0].token,
        "waiters come after the holder"
    );
    let origin = lock.holders[0].origin;
    ensure!(
        origin
            == if a.kind() == "zk" {
                Origin::Coord
            } else {
                Origin::Concurrency
            },
        "coord's own entry is shown as {origin:?} on {}",
        a.kind()
    );
    if a.kind() == "zk" {
        ensure!(
            lock.holders[0].since.is_some(),
            "ZooKeeper keeps when an entry was made"
        );
    }
    ensure!(
        lock.holders[0].session != 0 && lock.holders[0].session != lock.waiters[0].session,
        "each entry names its own session: {lock:#?}"
    );

    let rw = find(&views, RecipeKind::RwLock, "files")?;
    let roles = |ps: &[coord_core::Participant]| ps.iter().map(|p| p.role).collect::<Vec<_>>();
    ensure!(roles(&rw.holders) == ["read", "read"], "rwlock holders: {rw:#?}");
    ensure!(roles(&rw.waiters) == ["write"], "rwlock waiters: {rw:#?}");
    ensure!(
        values(&rw.holders) == ["a:1", ""] && values(&rw.waiters) == ["c:3"],
        "each hold says who holds it (with_options), or nothing: {rw:#?}"
    );

    let pool = find(&views, RecipeKind::Semaphore, "pool")?;
    ensure!(
        pool.permits == Some(2),
        "the permits coord's leases record: {pool:#?}"
    );
    ensure!(pool.holders.len() == 2, "two leases held: {pool:#?}");
    ensure!(
        pool.holders.iter().map(|p| p.token).collect::<Vec<_>>() == [la.token(), lb.token()],
        "the held leases' tokens: {pool:#?}"
    );
    ensure!(!pool.waiters.is_empty(), "c waits: {pool:#?}");

    let election = find(&views, RecipeKind::Election, "scheduler")?;
    ensure!(values(&election.holders) == ["node-a"], "leader: {election:#?}");
    ensure!(
        values(&election.waiters) == ["node-b"],
        "candidates: {election:#?}"
    );
    ensure!(election.holders[0].token == leading.token());

    let api = find(&views, RecipeKind::Service, "api")?;
    ensure!(api.holders.len() == 1, "one instance: {api:#?}");
    let instance = ServiceInstance::decode(&api.holders[0].value)?;
    ensure!(instance.id == "i-1" && instance.address == "10.0.0.1:80");

    let work = find(&views, RecipeKind::Queue, "work")?;
    ensure!(work.depth == Some(2), "queue depth: {work:#?}");

    // A prefix narrows the view to the names at or below it, segment-wise.
    let narrowed = a.inspect("jobs").await?;
    ensure!(
        narrowed.iter().all(|v| v.name == "jobs/nightly") && narrowed.len() == 1,
        "inspect(\"jobs\") shows {narrowed:#?}"
    );
    ensure!(
        a.inspect("job").await?.is_empty(),
        "a prefix matches whole segments"
    );
    let one = a.inspect_one(RecipeKind::Lock, "jobs/nightly").await?;
    ensure!(one == *lock, "inspect_one differs from inspect: {one:#?}");

    // Released, the lock shows its next holder; an empty recipe shows nothing.
    held.release().await?;
    let next = within(QUICK, "b gets the lock", lock_waiter).await???;
    let lock = a.inspect_one(RecipeKind::Lock, "jobs/nightly").await?;
    ensure!(
        values(&lock.holders) == ["b:2"] && lock.waiters.is_empty(),
        "{lock:#?}"
    );
    ensure!(lock.holders[0].token == next.token());
    next.release().await?;
    let lock = a.inspect_one(RecipeKind::Lock, "jobs/nightly").await?;
    ensure!(lock.holders.is_empty() && lock.waiters.is_empty(), "{lock:#?}");

    ra.release().await?;
    rb.release().await?;
    within(QUICK, "c writes", writer).await???.release().await?;
    la.release().await?;
    within(QUICK, "c acquires", acquirer).await???.release().await?;
    leading.resign().await?;
    within(QUICK, "b leads", candidate).await???.resign().await?;
    registration.deregister().await?;
    Ok(())
}
