//! Interoperability with Curator's read/write lock and kazoo's locks: contender nodes in
//! their exact layouts, made by a plain ZooKeeper client on coord's paths, and each
//! library's own rule for who holds, applied to the listing.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_conformance::{CaseResult, Ctx};
use coord_core::{Client, Lock};
use coord_zk::{ZkClient, ZkOptions};
use zookeeper_client as zkc;

use super::SESSION_TIMEOUT;
use coord_core::Granted as _;

const QUICK: Duration = Duration::from_secs(10);

/// A plain ZooKeeper client, as Curator or kazoo would use, and the options of their
/// contender nodes.
async fn raw(dir: &str) -> anyhow::Result<(zkc::Client, zkc::CreateOptions<'static>)> {
    let server = std::env::var("COORD_TEST_ZK")?;
    let raw = zkc::Client::connect(&server).await?;
    raw.mkdir(
        dir,
        &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()),
    )
    .await?;
    Ok((
        raw,
        zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all()),
    ))
}

/// A coord client in this case's namespace that names its lock contenders as kazoo does.
async fn kazoo_layout_client(ctx: &Ctx) -> anyhow::Result<Client> {
    let server = ctx.factory().real_server().context("no real server")?;
    let namespace = ctx.namespace().to_owned();
    Ok(server
        .open(|hosts| async move {
            let url = format!(
                "zk://{hosts}/{namespace}?session_timeout={}ms&lock_layout=kazoo",
                SESSION_TIMEOUT.as_millis()
            );
            ZkClient::connect(ZkOptions::from_url(&url)?).await
        })
        .await?)
}

/// The 10-digit sequence at the end of a contender name.
fn seq(name: &str) -> &str {
    &name[name.len().saturating_sub(10)..]
}

/// kazoo's rule (`Lock._get_predecessor`): among the children whose names match
/// `(__lock__|__rlock__)(-?\d{10})$` — only `__lock__` for a `ReadLock` — the one with
/// the greatest sequence below `own`'s; `None` means `own` holds.
fn kazoo_predecessor(children: &[String], own: &str, reader: bool) -> Option<String> {
    let blocks = |c: &str| {
        let name = &c[..c.len().saturating_sub(10)];
        seq(c).bytes().all(|b| b.is_ascii_digit())
            && (name.ends_with("__lock__") || (!reader && name.ends_with("__rlock__")))
    };
    children
        .iter()
        .filter(|c| blocks(c) && seq(c) < seq(own))
        .max_by_key(|c| seq(c).to_owned())
        .cloned()
}

/// Curator's rule for `InterProcessReadWriteLock`: children sorted by the sequence after
/// `__READ__`/`__WRIT__`; a reader holds if no writer is before it, a writer if first.
fn curator_holds(children: &[String], own: &str) -> bool {
    let mut sorted: Vec<&String> = children.iter().collect();
    sorted.sort_by_key(|c| seq(c).to_owned());
    let Some(i) = sorted.iter().position(|c| *c == own) else {
        return false;
    };
    if own.contains("__READ__") {
        !sorted[..i].iter().any(|c| c.contains("__WRIT__"))
    } else {
        i == 0
    }
}

/// Curator's read/write lock nodes and coord's exclude each other both ways: a Curator
/// writer blocks coord's readers and writers, a Curator reader lets coord read but not
/// write, and while coord writes, Curator's rule lets neither its reader nor its writer
/// hold.
pub async fn curator_rw_lock_nodes_exclude(ctx: Ctx) -> CaseResult {
    let client = ctx.client().await?;
    let dir = client.rw_lock_path("shared")?;
    let (raw, opts) = raw(&dir).await?;
    let rw = client.rw_lock("shared")?;
    let curator = |marker: &str| format!("{dir}/_c_6b1c1f0e-5a4f-4c1e-9a9e-1d2a3b4c5d6e-{marker}");

    // A Curator writer holds: coord neither reads nor writes, and its reader waits.
    let (_, s) = raw.create(&curator("__WRIT__"), b"", &opts).await?;
    let writer = format!("{}{s}", curator("__WRIT__"));
    ensure!(
        rw.try_read().await?.is_none(),
        "coord read beside a Curator writer"
    );
    ensure!(
        rw.try_write().await?.is_none(),
        "coord wrote beside a Curator writer"
    );
    let r = rw.clone();
    let waiter = tokio::spawn(async move { r.read().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "coord's reader did not wait for the Curator writer"
    );
    raw.delete(&writer, None).await?;
    let read = tokio::time::timeout(QUICK, waiter)
        .await
        .context("coord's reader never got in")???;
    read.release().await?;

    // A Curator reader holds: coord reads beside it, but does not write.
    let (_, s) = raw.create(&curator("__READ__"), b"", &opts).await?;
    let reader = format!("{}{s}", curator("__READ__"));
    let beside = tokio::time::timeout(QUICK, rw.read())
        .await
        .context("coord's reader waited for a Curator reader")??;
    beside.release().await?;
    ensure!(
        rw.try_write().await?.is_none(),
        "coord wrote beside a Curator reader"
    );
    raw.delete(&reader, None).await?;

    // coord writes: by Curator's rule, neither a Curator reader nor a writer arriving now
    // holds.
    let w = rw.write().await?;
    for marker in ["__READ__", "__WRIT__"] {
        let (_, s) = raw.create(&curator(marker), b"", &opts).await?;
        let own = format!("_c_6b1c1f0e-5a4f-4c1e-9a9e-1d2a3b4c5d6e-{marker}{s}");
        let children = raw.list_children(&dir).await?;
        ensure!(
            !curator_holds(&children, &own),
            "Curator's rule lets its {marker} contender hold while coord writes: {children:?}"
        );
        raw.delete(&format!("{dir}/{own}"), None).await?;
    }
    w.release().await?;
    Ok(())
}

/// kazoo's `Lock` nodes (`<hex>__lock__<seq>`) and coord's locks exclude each other both
/// ways. coord waits for a kazoo holder whichever layout it creates; a kazoo contender
/// waits for coord's only when coord creates kazoo's names (`lock_layout=kazoo`).
pub async fn kazoo_lock_nodes_exclude(ctx: Ctx) -> CaseResult {
    let curator_layout = ctx.client().await?;
    let kazoo_layout = kazoo_layout_client(&ctx).await?;
    let dir = curator_layout.lock_path("shared")?;
    let (raw, opts) = raw(&dir).await?;
    let kazoo = format!("{dir}/9f8e7d6c5b4a39281706f5e4d3c2b1a0__lock__");

    // kazoo holds: neither coord client takes the lock, and a waiter waits.
    let (_, s) = raw.create(&kazoo, b"", &opts).await?;
    let holder = format!("{kazoo}{s}");
    for c in [&curator_layout, &kazoo_layout] {
        ensure!(
            c.try_lock("shared").await?.is_none(),
            "coord took a lock kazoo holds"
        );
    }
    let c = kazoo_layout.clone();
    let waiter = tokio::spawn(async move { c.lock("shared").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !waiter.is_finished(),
        "coord's lock did not wait for the kazoo holder"
    );
    raw.delete(&holder, None).await?;
    let guard = tokio::time::timeout(QUICK, waiter)
        .await
        .context("coord never acquired after kazoo released")???;

    // coord (kazoo's names) holds: kazoo's rule makes a kazoo contender wait for it.
    let (_, s) = raw.create(&kazoo, b"", &opts).await?;
    let own = format!("9f8e7d6c5b4a39281706f5e4d3c2b1a0__lock__{s}");
    let children = raw.list_children(&dir).await?;
    let coord_node = guard
        .fence()
        .resource()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    ensure!(
        kazoo_predecessor(&children, &own, false).as_deref() == Some(coord_node.as_str()),
        "kazoo's rule does not make its contender wait for coord's {coord_node}: {children:?}"
    );
    guard.release().await?;
    let children = raw.list_children(&dir).await?;
    ensure!(
        kazoo_predecessor(&children, &own, false).is_none(),
        "after coord's release kazoo's contender should hold: {children:?}"
    );
    Ok(())
}

/// kazoo's `ReadLock` (`__rlock__`) and `Lock` (`__lock__`) on a read/write lock's path
/// and coord's read/write lock (`lock_layout=kazoo`) exclude each other both ways.
pub async fn kazoo_rw_lock_nodes_exclude(ctx: Ctx) -> CaseResult {
    let client = kazoo_layout_client(&ctx).await?;
    let dir = client.rw_lock_path("shared")?;
    let (raw, opts) = raw(&dir).await?;
    let rw = client.rw_lock("shared")?;
    let kazoo = |marker: &str| format!("{dir}/00112233445566778899aabbccddeeff{marker}");

    // A kazoo reader holds: coord reads beside it, but does not write.
    let (_, s) = raw.create(&kazoo("__rlock__"), b"", &opts).await?;
    let reader = format!("{}{s}", kazoo("__rlock__"));
    let beside = tokio::time::timeout(QUICK, rw.read())
        .await
        .context("coord's reader waited for a kazoo reader")??;
    beside.release().await?;
    ensure!(
        rw.try_write().await?.is_none(),
        "coord wrote beside a kazoo reader"
    );
    raw.delete(&reader, None).await?;

    // coord writes: kazoo's rule makes both its reader and its writer wait.
    let w = rw.write().await?;
    let coord_node = w
        .fence()
        .resource()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    for (marker, reader) in [("__rlock__", true), ("__lock__", false)] {
        let (_, s) = raw.create(&kazoo(marker), b"", &opts).await?;
        let own = format!("00112233445566778899aabbccddeeff{marker}{s}");
        let children = raw.list_children(&dir).await?;
        ensure!(
            kazoo_predecessor(&children, &own, reader).as_deref() == Some(coord_node.as_str()),
            "kazoo's rule does not make its {marker} contender wait for coord's writer {coord_node}: {children:?}"
        );
        raw.delete(&format!("{dir}/{own}"), None).await?;
    }
    w.release().await?;
    Ok(())
}

/// Curator's `InterProcessSemaphoreV2` nodes and coord's semaphore share the leases both
/// ways: Curator leases (`leases/_c_<guid>-lease-<seq>`) count against coord's permits, a
/// Curator acquirer holding the internal lock (`locks/_c_<guid>-lock-<seq>`) keeps coord's
/// waiting acquirers behind it (a try, which never waits, takes a free permit from the
/// leases), and by Curator's rule (at most `maxLeases` children of `leases`) a Curator
/// acquirer waits while coord holds every permit.
pub async fn curator_semaphore_nodes_share_leases(ctx: Ctx) -> CaseResult {
    let client = ctx.client().await?;
    let path = client.semaphore_path("pool")?;
    let (leases, locks) = (format!("{path}/leases"), format!("{path}/locks"));
    let (raw, opts) = raw(&leases).await?;
    raw.mkdir(
        &locks,
        &zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()),
    )
    .await?;
    let sem = client.semaphore("pool", 2)?;
    let curator =
        |dir: &str, marker: &str, n: u32| format!("{dir}/_c_6b1c1f0e-5a4f-4c1e-9a9e-1d2a3b4c5d6{n}-{marker}");

    // Two Curator leases hold both permits: coord waits until one goes.
    let mut held = Vec::new();
    for n in 0..2 {
        let (_, s) = raw
            .create(&curator(&leases, "lease-", n), b"10.0.0.1", &opts)
            .await?;
        held.push(format!("{}{s}", curator(&leases, "lease-", n)));
    }
    ensure!(
        sem.try_acquire().await?.is_none(),
        "coord took a third lease of two"
    );
    let s = sem.clone();
    let waiter = tokio::spawn(async move { s.acquire().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!waiter.is_finished(), "coord did not wait for Curator's leases");
    raw.delete(&held[0], None).await?;
    let lease = tokio::time::timeout(QUICK, waiter)
        .await
        .context("coord never got the freed lease")???;

    // coord and Curator hold both permits: by Curator's rule its next acquirer waits.
    let (_, s) = raw
        .create(&curator(&leases, "lease-", 2), b"10.0.0.1", &opts)
        .await?;
    let children = raw.list_children(&leases).await?;
    ensure!(
        children.len() > 2,
        "Curator's rule would grant a third lease of two: {children:?}"
    );
    raw.delete(&format!("{}{s}", curator(&leases, "lease-", 2)), None)
        .await?;
    lease.release().await?;

    // A Curator acquirer holds the internal lock: a waiting coord acquirer queues behind
    // it, but a try (which never waits) takes the free permit from the leases, and by
    // Curator's rule that acquirer's lease would then be a third of two: it waits.
    let (_, s) = raw.create(&curator(&locks, "lock-", 3), b"", &opts).await?;
    let s2 = sem.clone();
    let queued = tokio::spawn(async move { s2.acquire().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !queued.is_finished(),
        "a waiting coord acquirer did not queue behind Curator's holder of the internal lock"
    );
    let tried = sem
        .try_acquire()
        .await?
        .context("a try did not take the free permit beside Curator's acquirer at the internal lock")?;
    let (_, c) = raw
        .create(&curator(&leases, "lease-", 4), b"10.0.0.1", &opts)
        .await?;
    let children = raw.list_children(&leases).await?;
    ensure!(
        children.len() > 2,
        "Curator's rule would grant a third lease of two: {children:?}"
    );
    raw.delete(&format!("{}{c}", curator(&leases, "lease-", 4)), None)
        .await?;
    raw.delete(&format!("{}{s}", curator(&locks, "lock-", 3)), None)
        .await?;
    tried.release().await?;
    let _lease = tokio::time::timeout(QUICK, queued)
        .await
        .context("coord never acquired once the internal lock was free")???;
    raw.delete(&held[1], None).await?;
    Ok(())
}
