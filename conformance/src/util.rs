//! Small helpers for writing cases.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{Stream, StreamExt};

/// Checks that a hold is valid: `Held` — or, on a cluster whose members the suite kills,
/// `Suspended` while the connection is in trouble (a member down) and `Held` again
/// within 10 s. Without member faults a suspension is a failure: nothing should trouble
/// the connection. `Lost` fails; a suspension that does not pass is said as
/// `unavailable` (the harness runs such a case again on a cluster).
///
/// # Errors
///
/// When the hold is `Lost`, `Suspended` with no member faults, or still `Suspended`
/// after 10 s.
///
/// # Cancel safety
///
/// Cancel-safe: it only reads the state.
pub async fn held(
    ctx: &crate::harness::Ctx,
    what: &str,
    state: impl Fn() -> coord_core::HoldState,
) -> anyhow::Result<()> {
    use coord_core::HoldState;
    let member_faults = ctx.factory().cluster().is_ok();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match state() {
            HoldState::Held => return Ok(()),
            HoldState::Lost => bail!("{what}: the hold is Lost"),
            HoldState::Suspended if !member_faults => {
                bail!("{what}: the hold is Suspended though no member is down")
            }
            HoldState::Suspended if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            HoldState::Suspended => {
                bail!("{what}: the hold stayed Suspended for 10 s (connection unavailable)")
            }
        }
    }
}

/// Awaits `fut` for at most `limit`; the error names `what` was awaited.
///
/// # Errors
///
/// When the limit passes first.
///
/// # Cancel safety
///
/// Cancel-safe: it only awaits what it is given.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow::anyhow!("{what}: did not happen within {limit:?}"))
}

/// Asserts that `fut` does *not* complete within `wait` (and drops it).
///
/// # Errors
///
/// When it completes.
///
/// # Cancel safety
///
/// Cancel-safe: it only awaits what it is given.
pub async fn stays_pending<T>(
    wait: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> anyhow::Result<()> {
    match tokio::time::timeout(wait, fut).await {
        Ok(_) => bail!("{what}: completed but should still be waiting"),
        Err(_) => Ok(()),
    }
}

/// Polls `check` every 50 ms until it returns `Ok(true)`, for at most `limit`.
///
/// # Errors
///
/// When the limit passes, with the last error of `check` if any.
///
/// # Cancel safety
///
/// Cancel-safe: it only awaits what it is given.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            return match last_err {
                Some(e) => Err(e.context(format!("{what}: not true within {limit:?}"))),
                None => bail!("{what}: not true within {limit:?}"),
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next item of a watch stream, within `limit`.
///
/// # Errors
///
/// When the stream ends, yields an error, or is silent for `limit`.
///
/// # Cancel safety
///
/// Cancel-safe: it only awaits what it is given.
pub async fn next_event<T, S>(stream: &mut S, limit: Duration, what: &str) -> anyhow::Result<T>
where
    S: Stream<Item = coord_core::Result<T>> + Unpin,
{
    match tokio::time::timeout(limit, stream.next()).await {
        Err(_) => bail!("{what}: no event within {limit:?}"),
        Ok(None) => bail!("{what}: the stream ended silently"),
        Ok(Some(item)) => item.with_context(|| format!("{what}: the stream yielded an error")),
    }
}

/// A short pause that lets a request reach the server before the next step (used only
/// to order contenders, never to assert timing).
///
/// # Cancel safety
///
/// Cancel-safe (a sleep).
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(250)).await;
}

/// Runs `op` again every 100 ms while it fails with a retryable error (the client is
/// reconnecting or opening a new session); returns its first other outcome.
///
/// # Errors
///
/// The first error that is not retryable.
///
/// # Cancel safety
///
/// Cancel-safe if `op`'s futures are.
pub async fn retrying<T, F, Fut>(mut op: F) -> coord_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = coord_core::Result<T>>,
{
    loop {
        match op().await {
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            other => return other,
        }
    }
}

/// Checks that a write to `key` fenced by a stale `fence` fails with `Fenced` (retrying
/// while the client reconnects) and that `key` still holds `expect`.
///
/// # Errors
///
/// When the write succeeds, fails otherwise, or `key` changed.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped check may leave a write in flight, which is fenced anyway.
pub async fn expect_fenced_write(
    client: &coord_core::Client,
    fence: coord_core::Fence,
    key: &str,
    expect: &[u8],
) -> anyhow::Result<()> {
    use coord_core::ConfigStore as _;
    let stale = retrying(|| {
        client.commit(
            coord_core::Txn::new()
                .fenced_by(fence.clone())
                .put(key, b"stale".to_vec()),
        )
    })
    .await;
    let err = match stale {
        Ok(_) => bail!("a stale holder's guarded write succeeded"),
        Err(e) => e,
    };
    anyhow::ensure!(
        err.kind() == coord_core::ErrorKind::Fenced,
        "stale write failed with {err}, expected Fenced"
    );
    let now = retrying(|| client.get(key))
        .await?
        .context("fenced key missing")?;
    anyhow::ensure!(now.value == expect, "a fenced write changed {key}");
    Ok(())
}

/// Cuts `client` off for a quarter of the session timeout (its connections reset and
/// refused) — short enough for its session to survive — and runs `during`, which sees
/// the outage and its end; then checks that the session was indeed kept: a case about
/// retrying through an outage proves nothing if the session went and took its nodes.
///
/// # Errors
///
/// `during`'s error, the fault's, or a replaced session.
///
/// # Cancel safety
///
/// Cancel-safe as `during`; the outage ends by itself.
pub async fn through_short_outage<T>(
    ctx: &crate::harness::Ctx,
    client: &coord_core::Client,
    during: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let generation = client.session().borrow().generation;
    ctx.factory().suspend(client, ctx.session_timeout() / 4).await?;
    let out = during.await?;
    anyhow::ensure!(
        client.session().borrow().generation == generation,
        "the session was replaced: the outage was meant to be survivable, so this proves nothing"
    );
    Ok(out)
}

/// Checks that a spawned waiter (a lock or campaign in its own task) is still waiting:
/// one that finished either got what it waited for (`what` happened while it should
/// not) or failed — a failure is reported as such, never counted as getting it.
///
/// # Errors
///
/// When the waiter finished, with which way it did.
///
/// # Cancel safety
///
/// Cancel-safe: it only looks at a finished task's output.
pub async fn still_waiting<T, E: std::fmt::Display>(
    waiter: &mut tokio::task::JoinHandle<Result<T, E>>,
    what: &str,
) -> anyhow::Result<()> {
    if !waiter.is_finished() {
        return Ok(());
    }
    match (&mut *waiter).await {
        Ok(Ok(_)) => bail!("{what}"),
        Ok(Err(e)) => bail!("the waiter failed instead of waiting: {e}"),
        Err(e) => bail!("the waiter's task ended: {e}"),
    }
}

/// Slows `client`'s link by `delay` each way where the backend can (a real server's
/// fault proxy); whether it did. Any failure but `Unsupported` is an error.
///
/// # Errors
///
/// What the factory's `delay` failed with, unless it is `Unsupported`.
pub async fn slow_link(
    ctx: &crate::harness::Ctx,
    client: &coord_core::Client,
    delay: Duration,
) -> anyhow::Result<bool> {
    match ctx.factory().delay(client, delay).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == coord_core::ErrorKind::Unsupported => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Where config key `key` (without `/`) of `client`'s namespace lives on the server: the
/// znode (ZooKeeper), key (etcd, mem) a foreign writer writes — the namespace's root
/// (as the lock layout shows it) followed by `config/<key>`.
///
/// # Errors
///
/// When the client's lock layout does not end in `locks/<name>`.
pub fn config_key_path(client: &coord_core::Client, key: &str) -> anyhow::Result<String> {
    let lock = client.lock_path("x")?;
    let root = lock
        .strip_suffix("locks/x")
        .ok_or_else(|| anyhow::anyhow!("the lock layout {lock:?} does not end in locks/x"))?;
    Ok(format!("{root}config/{key}"))
}

/// The other entries queued in the directory of `held` (backend paths of granted
/// entries, all in one directory), as an operator listing the server sees them: the
/// waiters' entries, for a case that deletes one from outside.
pub async fn queued_beside(ctx: &crate::harness::Ctx, held: &[String]) -> anyhow::Result<Vec<String>> {
    let dir = held
        .first()
        .and_then(|p| p.rsplit_once('/'))
        .map(|(d, _)| d.to_owned())
        .unwrap_or_default();
    Ok(ctx
        .factory()
        .operator_list(ctx.namespace())
        .await?
        .into_iter()
        .filter(|p| {
            !held.contains(p)
                && p.strip_prefix(&dir)
                    .and_then(|r| r.strip_prefix('/'))
                    .is_some_and(|r| !r.is_empty() && !r.contains('/'))
        })
        .collect())
}
