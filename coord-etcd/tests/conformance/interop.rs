//! Interoperability with Go's `recipes.RWMutex`: keys in its exact layout
//! (`<prefix>/read/<id>`, `<prefix>/write/<id>`, under a lease), made by a plain etcd
//! client on coord's prefix, and Go's own rule for whom a contender waits on.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_conformance::{CaseResult, Ctx};
use coord_core::Granted as _;
use etcd_client as etcd;

const QUICK: Duration = Duration::from_secs(10);

/// A plain etcd client on one member that answers now (a member may be down while the
/// suite runs on a cluster under member faults).
async fn live_member(endpoints: &[String]) -> anyhow::Result<etcd::Client> {
    let mut last = String::from("no members");
    for endpoint in endpoints {
        let attempt = async {
            let mut c = etcd::Client::connect([endpoint.clone()], None).await?;
            c.status().await?;
            Ok::<_, etcd::Error>(c)
        };
        match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = format!("{endpoint}: no answer"),
        }
    }
    anyhow::bail!("no etcd member answers: {last}")
}

/// Runs `op` on a live member, again on another (for up to about 20 s) when the member
/// it reached fails. Every use is idempotent (puts and deletes of fixed keys, reads).
async fn on_live_member<T, F, Fut>(endpoints: &[String], mut op: F) -> anyhow::Result<T>
where
    F: FnMut(etcd::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd::Error>>,
{
    let mut last = None;
    for _ in 0..40 {
        match live_member(endpoints).await {
            Ok(c) => match op(c).await {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(anyhow::anyhow!(e)),
            },
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt")))
}

/// Go's `waitOnLastRev(pfx)`: the key under `pfx` with the greatest mod revision below
/// `rev` (a reader passes `<prefix>/write`, a writer `<prefix>/`); `None` means the
/// contender made at `rev` holds.
async fn go_blocker(endpoints: &[String], pfx: &str, rev: i64) -> anyhow::Result<Option<String>> {
    let resp = on_live_member(endpoints, |mut c| async move {
        c.get(
            pfx,
            Some(
                etcd::GetOptions::new()
                    .with_prefix()
                    .with_sort(etcd::SortTarget::Mod, etcd::SortOrder::Descend)
                    .with_limit(1)
                    .with_max_mod_revision(rev - 1),
            ),
        )
        .await
    })
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
    let prefix = client.rw_lock_path("shared")?;
    let rw = client.rw_lock("shared")?;
    let eps = &endpoints;
    let lease = on_live_member(eps, |mut c| async move { c.lease_grant(30, None).await })
        .await?
        .id();
    let put = etcd::PutOptions::new().with_lease(lease);
    let put_key = |key: String| {
        let put = put.clone();
        async move {
            on_live_member(eps, |mut c| {
                let (key, put) = (key.clone(), put.clone());
                async move { c.put(key, "", Some(put)).await }
            })
            .await
        }
    };
    let delete_key = |key: String| async move {
        on_live_member(eps, |mut c| {
            let key = key.clone();
            async move { c.delete(key, None).await }
        })
        .await
    };

    // A Go writer holds: coord neither reads nor writes, and its reader waits.
    let writer = format!("{prefix}/write/1764000000000000001");
    put_key(writer.clone()).await?;
    ensure!(rw.try_read().await?.is_none(), "coord read beside a Go writer");
    ensure!(rw.try_write().await?.is_none(), "coord wrote beside a Go writer");
    let r = rw.clone();
    let waiter = tokio::spawn(async move { r.read().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "coord's reader did not wait for the Go writer"
    );
    delete_key(writer.clone()).await?;
    let read = tokio::time::timeout(QUICK, waiter)
        .await
        .context("coord's reader never got in")???;
    read.release().await?;

    // A Go reader holds: coord reads beside it, but does not write.
    let reader = format!("{prefix}/read/1764000000000000002");
    put_key(reader.clone()).await?;
    let beside = tokio::time::timeout(QUICK, rw.read())
        .await
        .context("coord's reader waited for a Go reader")??;
    beside.release().await?;
    ensure!(rw.try_write().await?.is_none(), "coord wrote beside a Go reader");
    delete_key(reader.clone()).await?;

    // coord writes: Go's rule makes a reader and a writer arriving now wait on its key.
    let w = rw.write().await?;
    let coord_key = w.fence().resource().to_owned();
    for (class, waits_on) in [
        ("read", format!("{prefix}/write")),
        ("write", format!("{prefix}/")),
    ] {
        let key = format!("{prefix}/{class}/1764000000000000003");
        let rev = put_key(key.clone())
            .await?
            .header()
            .map(|h| h.revision())
            .context("no header")?;
        let blocker = go_blocker(eps, &waits_on, rev).await?;
        ensure!(
            blocker.as_deref() == Some(coord_key.as_str()),
            "Go's rule makes its {class}er wait on {blocker:?}, not coord's writer {coord_key}"
        );
        delete_key(key.clone()).await?;
    }
    w.release().await?;
    on_live_member(eps, |mut c| async move { c.lease_revoke(lease).await }).await?;
    Ok(())
}
