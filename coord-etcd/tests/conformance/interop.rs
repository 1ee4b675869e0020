//! Interoperability with Go's `recipes.RWMutex`: keys in its exact layout
//! (`<prefix>/read/<id>`, `<prefix>/write/<id>`, under a lease), made by a plain etcd
//! client on coord's prefix, and Go's own rule for whom a contender waits on.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_conformance::{CaseResult, Ctx};
use etcd_client as etcd;

use super::etcd_of;

const QUICK: Duration = Duration::from_secs(10);

/// Go's `waitOnLastRev(pfx)`: the key under `pfx` with the greatest mod revision below
/// `rev` (a reader passes `<prefix>/write`, a writer `<prefix>/`); `None` means the
/// contender made at `rev` holds.
async fn go_blocker(raw: &mut etcd::Client, pfx: &str, rev: i64) -> anyhow::Result<Option<String>> {
    let resp = raw
        .get(
            pfx,
            Some(
                etcd::GetOptions::new()
                    .with_prefix()
                    .with_sort(etcd::SortTarget::Mod, etcd::SortOrder::Descend)
                    .with_limit(1)
                    .with_max_mod_revision(rev - 1),
            ),
        )
        .await?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned()))
}

/// Go's `recipes.RWMutex` keys and coord's read/write lock exclude each other both ways:
/// a Go writer blocks coord's readers and writers, a Go reader lets coord read but not
/// write, and while coord writes, Go's rule makes a new Go reader and writer wait on
/// coord's key.
pub async fn go_rwmutex_keys_exclude(ctx: Ctx) -> CaseResult {
    let endpoints: Vec<String> = std::env::var("COORD_TEST_ETCD")?
        .split(',')
        .map(|a| format!("http://{a}"))
        .collect();
    let client = ctx.client().await?;
    let prefix = etcd_of(&client)?.rw_lock_prefix("shared");
    let rw = client.rw_lock("shared")?;
    let mut raw = etcd::Client::connect(endpoints, None).await?;
    let lease = raw.lease_grant(30, None).await?.id();
    let put = etcd::PutOptions::new().with_lease(lease);

    // A Go writer holds: coord neither reads nor writes, and its reader waits.
    let writer = format!("{prefix}/write/1764000000000000001");
    raw.put(writer.as_str(), "", Some(put.clone())).await?;
    ensure!(rw.try_read().await?.is_none(), "coord read beside a Go writer");
    ensure!(rw.try_write().await?.is_none(), "coord wrote beside a Go writer");
    let r = rw.clone();
    let waiter = tokio::spawn(async move { r.read().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "coord's reader did not wait for the Go writer"
    );
    raw.delete(writer.as_str(), None).await?;
    let read = tokio::time::timeout(QUICK, waiter)
        .await
        .context("coord's reader never got in")???;
    read.release().await?;

    // A Go reader holds: coord reads beside it, but does not write.
    let reader = format!("{prefix}/read/1764000000000000002");
    raw.put(reader.as_str(), "", Some(put.clone())).await?;
    let beside = tokio::time::timeout(QUICK, rw.read())
        .await
        .context("coord's reader waited for a Go reader")??;
    beside.release().await?;
    ensure!(rw.try_write().await?.is_none(), "coord wrote beside a Go reader");
    raw.delete(reader.as_str(), None).await?;

    // coord writes: Go's rule makes a reader and a writer arriving now wait on its key.
    let w = rw.write().await?;
    let coord_key = w.fence().resource().to_owned();
    for (class, waits_on) in [
        ("read", format!("{prefix}/write")),
        ("write", format!("{prefix}/")),
    ] {
        let key = format!("{prefix}/{class}/1764000000000000003");
        let rev = raw
            .put(key.as_str(), "", Some(put.clone()))
            .await?
            .header()
            .map(|h| h.revision())
            .context("no header")?;
        let blocker = go_blocker(&mut raw, &waits_on, rev).await?;
        ensure!(
            blocker.as_deref() == Some(coord_key.as_str()),
            "Go's rule makes its {class}er wait on {blocker:?}, not coord's writer {coord_key}"
        );
        raw.delete(key.as_str(), None).await?;
    }
    w.release().await?;
    raw.lease_revoke(lease).await?;
    Ok(())
}
