//! Live cache cases: a config cache and a service cache follow their watch, start in
//! sync, fold a gap into a fresh snapshot, and end with their client.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_core::{
    CacheView, Client, ConfigCache, ConfigStore, Entry, ErrorKind, Registry, ServiceCache, ServiceInstance,
    SessionState,
};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, retrying, within};

const QUICK: Duration = Duration::from_secs(10);

/// The server's truth under `prefix`, as a config cache maps it.
async fn config_truth(client: &Client, prefix: &str) -> anyhow::Result<BTreeMap<String, Entry>> {
    let list = retrying(|| client.list(prefix)).await?;
    Ok(list.into_iter().map(|e| (e.key.clone(), e)).collect())
}

/// The server's truth for `service`, as a service cache maps it.
async fn service_truth(client: &Client, service: &str) -> anyhow::Result<BTreeMap<String, ServiceInstance>> {
    let list = retrying(|| client.instances(service)).await?;
    Ok(list.into_iter().map(|i| (i.id.clone(), i)).collect())
}

/// What both caches offer to the helpers below.
trait Live<V> {
    fn view(&self) -> CacheView<V>;
    async fn changed(&mut self) -> coord_core::Result<CacheView<V>>;
}

impl Live<Entry> for ConfigCache {
    fn view(&self) -> CacheView<Entry> {
        ConfigCache::view(self)
    }
    async fn changed(&mut self) -> coord_core::Result<CacheView<Entry>> {
        ConfigCache::changed(self).await
    }
}

impl Live<ServiceInstance> for ServiceCache {
    fn view(&self) -> CacheView<ServiceInstance> {
        ServiceCache::view(self)
    }
    async fn changed(&mut self) -> coord_core::Result<CacheView<ServiceInstance>> {
        ServiceCache::changed(self).await
    }
}

/// Waits, change by change (no polling), until `cache` is in sync and holds exactly
/// `truth`; every view on the way must pass `check`. Returns the final view.
async fn converges<V, C>(
    cache: &mut C,
    truth: &BTreeMap<String, V>,
    limit: Duration,
    what: &str,
    mut check: impl FnMut(&CacheView<V>) -> anyhow::Result<()>,
) -> anyhow::Result<CacheView<V>>
where
    V: Clone + PartialEq + Debug,
    C: Live<V>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut view = cache.view();
    loop {
        check(&view)?;
        if view.in_sync() && view.to_btree_map() == *truth {
            return Ok(view);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        view = match tokio::time::timeout(left, cache.changed()).await {
            Ok(changed) => changed.with_context(|| format!("{what}: the cache ended"))?,
            Err(_) => bail!("{what}: the cache shows {view:?} after {limit:?}, the server {truth:?}"),
        };
    }
}

fn keys<V>(view: &CacheView<V>) -> Vec<&str> {
    view.iter().map(|(k, _)| k.as_str()).collect()
}

/// A config cache starts in sync with the keys under its prefix, then follows creates,
/// updates and deletes below it (the prefix's own key included) and nothing else: not a
/// sibling sharing its text, not another prefix.
pub async fn config_cache_follows_its_prefix(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    for k in ["c/a", "c/b/deep", "cx", "other"] {
        a.put(k, b"1".to_vec()).await?;
    }
    let mut cache = b.config_cache("c").await?;
    let view = cache.view();
    ensure!(view.in_sync(), "a new cache is not in sync: {view:?}");
    ensure!(
        view.to_btree_map() == config_truth(&a, "c").await?,
        "a new cache does not hold the keys there: {view:?}"
    );
    ensure!(
        keys(&view) == ["c/a", "c/b/deep"],
        "a new cache holds {:?}",
        keys(&view)
    );
    a.put("c/a", b"2".to_vec()).await?;
    a.put("c/new", b"1".to_vec()).await?;
    a.delete("c/b/deep").await?;
    a.put("cx", b"2".to_vec()).await?;
    a.put("other", b"2".to_vec()).await?;
    a.put("c", b"own".to_vec()).await?;
    let truth = config_truth(&a, "c").await?;
    let outside = |view: &CacheView<Entry>| {
        let stray: Vec<&str> = keys(view)
            .into_iter()
            .filter(|k| *k != "c" && !k.starts_with("c/"))
            .collect();
        ensure!(
            stray.is_empty(),
            "keys outside the prefix in the cache: {stray:?}"
        );
        Ok(())
    };
    let view = converges(
        &mut cache,
        &truth,
        QUICK,
        "the cache follows the changes",
        outside,
    )
    .await?;
    ensure!(
        keys(&view) == ["c", "c/a", "c/new"],
        "the cache holds {:?}",
        keys(&view)
    );
    ensure!(
        cache.get("c/a").map(|e| e.value) == Some(b"2".to_vec()),
        "get(c/a) = {:?}",
        cache.get("c/a")
    );
    Ok(())
}

/// A service cache starts in sync with the registered instances, then follows joins,
/// updates and departures of its service and nothing of another.
pub async fn service_cache_follows_registrations(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let r1 = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    let mut cache = b.service_cache("api").await?;
    let view = cache.view();
    ensure!(view.in_sync(), "a new cache is not in sync: {view:?}");
    ensure!(keys(&view) == ["n1"], "a new cache holds {:?}", keys(&view));
    ensure!(cache.get("n1").is_some_and(|i| i.address == "h:1"), "{view:?}");
    let mut r2 = a.register("api", ServiceInstance::new("n2", "h:2")).await?;
    r2.update(ServiceInstance::new("n2", "h:22").with_metadata("v", "2"))
        .await?;
    let _other = a.register("api-v2", ServiceInstance::new("x1", "h:9")).await?;
    r1.deregister().await?;
    let truth = service_truth(&a, "api").await?;
    let only_api = |view: &CacheView<ServiceInstance>| {
        ensure!(
            !view.contains_key("x1"),
            "another service's instance is in the cache: {view:?}"
        );
        Ok(())
    };
    let view = converges(
        &mut cache,
        &truth,
        QUICK,
        "the cache follows the registry",
        only_api,
    )
    .await?;
    ensure!(keys(&view) == ["n2"], "the cache holds {:?}", keys(&view));
    let n2 = view.get("n2").context("n2")?;
    ensure!(
        n2.address == "h:22" && n2.metadata.get("v").map(String::as_str) == Some("2"),
        "n2's update is not in the cache: {n2:?}"
    );
    drop(r2);
    Ok(())
}

/// A crashed member's instance leaves the service cache once its session is gone.
pub async fn service_cache_sees_a_crashed_member_leave(ctx: Ctx) -> CaseResult {
    let (a, b, c) = (ctx.client().await?, ctx.client().await?, ctx.client().await?);
    let _stays = c.register("api", ServiceInstance::new("n2", "h:2")).await?;
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    std::mem::forget(r);
    let mut cache = b.service_cache("api").await?;
    ensure!(keys(&cache.view()) == ["n1", "n2"], "{:?}", cache.view());
    ctx.factory().crash(&a).await?;
    let truth: BTreeMap<String, ServiceInstance> =
        [("n2".to_owned(), ServiceInstance::new("n2", "h:2"))].into();
    converges(
        &mut cache,
        &truth,
        ctx.expiry_wait(),
        "the crashed member leaves",
        |_| Ok(()),
    )
    .await?;
    Ok(())
}

/// Both caches follow through session loss: of the client that registered (its instances
/// go with the session and come back, with their latest data, on the new one) and of the
/// cache's own client (its watch may have to resync); changes made meanwhile are in the
/// caches afterwards, which are in sync again.
pub async fn caches_follow_through_session_loss(ctx: Ctx) -> CaseResult {
    let (a, b, observer) = (ctx.client().await?, ctx.client().await?, ctx.client().await?);
    let mut reg = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    a.put("c/k", b"1".to_vec()).await?;
    a.put("c/gone", b"1".to_vec()).await?;
    let mut config = b.config_cache("c").await?;
    let mut services = b.service_cache("api").await?;
    let generation = b.session().borrow().generation;
    ctx.factory().kill_session(&b).await?;
    a.put("c/k", b"2".to_vec()).await?;
    a.delete("c/gone").await?;
    a.put("c/new", b"1".to_vec()).await?;
    reg.update(ServiceInstance::new("n1", "h:11")).await?;
    let r2 = a.register("api", ServiceInstance::new("n2", "h:2")).await?;
    let mut session = b.session();
    within(
        ctx.expiry_wait(),
        "b has a new session",
        session.wait_for(|s| s.generation > generation && s.state == SessionState::Connected),
    )
    .await?
    .context("b's session signal ended")?;
    // Now the registrant's session: its instances go and are registered again.
    let a_generation = a.session().borrow().generation;
    ctx.factory().kill_session(&a).await?;
    let mut session = a.session();
    within(
        ctx.expiry_wait(),
        "a has a new session",
        session.wait_for(|s| s.generation > a_generation && s.state == SessionState::Connected),
    )
    .await?
    .context("a's session signal ended")?;
    let want = [("n1", "h:11"), ("n2", "h:2")];
    eventually(
        ctx.expiry_wait(),
        "both instances are registered again",
        || async {
            let list = observer.instances("api").await?;
            let got: Vec<(&str, &str)> = list.iter().map(|i| (i.id.as_str(), i.address.as_str())).collect();
            Ok(got == want)
        },
    )
    .await?;
    let want_config = config_truth(&observer, "c").await?;
    let view = converges(
        &mut config,
        &want_config,
        ctx.expiry_wait(),
        "the config cache",
        |_| Ok(()),
    )
    .await?;
    ensure!(keys(&view) == ["c/k", "c/new"], "{view:?}");
    let want_services = service_truth(&observer, "api").await?;
    converges(
        &mut services,
        &want_services,
        ctx.expiry_wait(),
        "the service cache",
        |_| Ok(()),
    )
    .await?;
    drop((reg, r2));
    Ok(())
}

/// A config cache across a gap its watch cannot fill: it reports the gap (out of sync,
/// counted in `resyncs`), then holds the server's keys — changes and deletes made during
/// the gap included, nothing missed or left over — in sync again.
pub async fn config_cache_resyncs_after_a_gap(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("g/keep", b"1".to_vec()).await?;
    a.put("g/gone", b"1".to_vec()).await?;
    let mut cache = b.config_cache("g").await?;
    ensure!(cache.view().resyncs() == 0, "{:?}", cache.view());
    ctx.factory().begin_watch_gap(&b).await?;
    a.put("g/keep", b"2".to_vec()).await?;
    a.delete("g/gone").await?;
    a.put("g/new", b"3".to_vec()).await?;
    ctx.factory().end_watch_gap(&b).await?;
    let truth = config_truth(&a, "g").await?;
    let mut saw_out_of_sync = false;
    let mut after_resync = |view: &CacheView<Entry>| {
        saw_out_of_sync |= !view.in_sync();
        Ok(())
    };
    let mut view = cache.view();
    // Wait for the gap to be reported, then for the fresh snapshot.
    while view.resyncs() == 0 {
        after_resync(&view)?;
        view = within(ctx.expiry_wait(), "the cache reports the gap", cache.changed())
            .await?
            .context("the cache ended")?;
    }
    let view = converges(
        &mut cache,
        &truth,
        ctx.expiry_wait(),
        "after the gap",
        after_resync,
    )
    .await?;
    ensure!(view.resyncs() >= 1, "the gap was never reported: {view:?}");
    ensure!(keys(&view) == ["g/keep", "g/new"], "{view:?}");
    tracing::info!(saw_out_of_sync, "the cache's view during the gap");
    Ok(())
}

/// A service cache across a gap its watch cannot fill: as the config cache.
pub async fn service_cache_resyncs_after_a_gap(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut keep = a.register("api", ServiceInstance::new("keep", "h:1")).await?;
    let gone = a.register("api", ServiceInstance::new("gone", "h:2")).await?;
    let mut cache = b.service_cache("api").await?;
    ensure!(cache.view().resyncs() == 0, "{:?}", cache.view());
    ctx.factory().begin_watch_gap(&b).await?;
    keep.update(ServiceInstance::new("keep", "h:11")).await?;
    gone.deregister().await?;
    let _new = a.register("api", ServiceInstance::new("new", "h:3")).await?;
    ctx.factory().end_watch_gap(&b).await?;
    let truth = service_truth(&a, "api").await?;
    let mut view = cache.view();
    while view.resyncs() == 0 {
        view = within(ctx.expiry_wait(), "the cache reports the gap", cache.changed())
            .await?
            .context("the cache ended")?;
    }
    let view = converges(&mut cache, &truth, ctx.expiry_wait(), "after the gap", |_| Ok(())).await?;
    let got: Vec<(&str, &str)> = view
        .values()
        .map(|i| (i.id.as_str(), i.address.as_str()))
        .collect();
    ensure!(got == [("keep", "h:11"), ("new", "h:3")], "{view:?}");
    Ok(())
}

/// Closing the client ends its caches: `changed` fails with `Closed` (again on each
/// call), the view is out of sync and keeps its last map. A cache does not keep its
/// client's session open: dropping the client's last handle ends it the same way.
pub async fn caches_end_when_the_client_closes(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("c/k", b"1".to_vec()).await?;
    let _reg = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    let mut config = b.config_cache("c").await?;
    let mut services = b.service_cache("api").await?;
    let mut subscribed = config.subscribe();
    b.close().await?;
    for round in 0..2 {
        let err = within(QUICK, "the config cache ends", config.changed())
            .await?
            .err()
            .with_context(|| format!("call {round}: the config cache changed after close"))?;
        ensure!(
            err.kind() == ErrorKind::Closed,
            "the config cache ended with {err}"
        );
        let err = within(QUICK, "the service cache ends", services.changed())
            .await?
            .err()
            .with_context(|| format!("call {round}: the service cache changed after close"))?;
        ensure!(
            err.kind() == ErrorKind::Closed,
            "the service cache ended with {err}"
        );
    }
    ensure!(
        !config.in_sync() && !services.in_sync(),
        "a closed client's cache says it is in sync"
    );
    ensure!(keys(&config.view()) == ["c/k"], "{:?}", config.view());
    ensure!(keys(&services.view()) == ["n1"], "{:?}", services.view());
    ensure!(
        config.ended().is_some_and(|e| e.kind() == ErrorKind::Closed),
        "ended() = {:?}",
        config.ended()
    );
    // A subscriber sees the cache end: its channel closes.
    within(QUICK, "the subscriber's channel closes", async {
        while subscribed.changed().await.is_ok() {}
    })
    .await?;
    ensure!(
        !subscribed.borrow().in_sync(),
        "the subscriber's last view is in sync"
    );
    ensure!(
        b.config_cache("c").await.err().map(|e| e.kind()) == Some(ErrorKind::Closed),
        "a cache opened on a closed client"
    );

    // Opened directly: the case's context keeps a handle of every client it opens.
    let c = ctx.factory().open(ctx.namespace()).await?;
    let mut orphan = c.config_cache("c").await?;
    drop(c);
    let err = within(QUICK, "the cache of a dropped client ends", orphan.changed())
        .await?
        .err()
        .context("the cache of a dropped client changed")?;
    ensure!(err.kind() == ErrorKind::Closed, "it ended with {err}");
    Ok(())
}

/// Dropping a cache (its last clone) stops its task: a subscriber's channel closes,
/// without a change made after the drop, while changes go on that a live task would
/// deliver. A clone keeps the task running.
pub async fn dropped_cache_stops_its_task(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let config = b.config_cache("c").await?;
    let mut config_rx = config.subscribe();
    let clone = config.clone();
    drop(config);
    a.put("c/k", b"0".to_vec()).await?;
    within(
        QUICK,
        "a clone keeps the config cache running",
        config_rx.changed(),
    )
    .await?
    .context("the config cache stopped while a clone lived")?;
    drop(clone);
    let services = b.service_cache("api").await?;
    let mut services_rx = services.subscribe();
    drop(services);
    let mut regs = Vec::new();
    for i in 1..=3 {
        a.put("c/k", i.to_string().into_bytes()).await?;
        regs.push(
            a.register("api", ServiceInstance::new(format!("n{i}"), "h:1"))
                .await?,
        );
    }
    let config_seen = within(
        QUICK,
        "the dropped config cache's channel closes",
        config_rx.changed(),
    )
    .await?;
    ensure!(
        config_seen.is_err(),
        "a dropped config cache still delivered {:?}",
        config_rx.borrow()
    );
    let services_seen = within(
        QUICK,
        "the dropped service cache's channel closes",
        services_rx.changed(),
    )
    .await?;
    ensure!(
        services_seen.is_err(),
        "a dropped service cache still delivered {:?}",
        services_rx.borrow()
    );
    drop(regs);
    Ok(())
}

/// Bad names are refused up front with `InvalidArgument`, as by the watches.
pub async fn caches_reject_bad_names(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    for prefix in ["a//b", "/a", "a/../b", "a b"] {
        let err = a
            .config_cache(prefix)
            .await
            .err()
            .with_context(|| format!("prefix {prefix:?} accepted"))?;
        ensure!(
            err.kind() == ErrorKind::InvalidArgument,
            "prefix {prefix:?}: {err}"
        );
    }
    for service in ["", "a//b", "a b"] {
        let err = a
            .service_cache(service)
            .await
            .err()
            .with_context(|| format!("service {service:?} accepted"))?;
        ensure!(
            err.kind() == ErrorKind::InvalidArgument,
            "service {service:?}: {err}"
        );
    }
    ensure!(
        a.config_cache("").await?.in_sync(),
        "a cache of the whole namespace"
    );
    Ok(())
}

/// A config cache under a write storm shows only states the keys were really in, or
/// says it is out of sync. `K` writers, each its own client, put their own key as fast
/// as they can with a rising counter, recording when each write was sent and when it
/// was acknowledged. An in-sync view holding value `v_i` for each key `i` can have
/// existed only at a moment after every `v_i` was sent and before any `v_i + 1` was
/// acknowledged: if some key's value was sent only after another's successor was
/// acknowledged, no state ever had both. A watch that answers a notification by
/// re-reading the key shows it newer than keys whose notifications are still queued —
/// such a mix. The cache must also end on the final state.
pub async fn config_cache_shows_only_states_that_existed(ctx: Ctx) -> CaseResult {
    let reader = ctx.client().await?;
    storm_shows_only_states_that_existed(&ctx, &reader, None).await
}

/// The same storm, while the cache's client loses its connection again and again (each
/// cut on its next request 100 ms after it is connected again and the cache has shown a
/// new in-sync view, the link refusing for 50 ms, the session kept): a
/// read whose answer is lost is sent again on the new connection, where changes made
/// meanwhile were never notified, so what it returns must not be taken as the whole
/// state. The cache shows only states that existed, or says it is out of sync, and ends
/// on the final state.
pub async fn config_cache_shows_only_states_that_existed_through_reconnects(ctx: Ctx) -> CaseResult {
    let reader = ctx.factory().open_links(ctx.namespace(), 1).await?;
    let links = ctx.factory().links(&reader)?;
    let generation = reader.session().borrow().generation;
    storm_shows_only_states_that_existed(&ctx, &reader, Some(&links)).await?;
    ensure!(
        reader.session().borrow().generation == generation,
        "the session was replaced: the cuts were meant to be survivable, so this proves nothing"
    );
    Ok(())
}

/// A write storm under a cache of `reader`'s, judged as
/// [`config_cache_shows_only_states_that_existed`] says; with `cuts`, the links are cut
/// on their next request, again 100 ms after the cache has shown a new in-sync view
/// since the last cut, until the storm ends.
async fn storm_shows_only_states_that_existed(
    ctx: &Ctx,
    reader: &Client,
    cuts: Option<&coord_testkit::Links>,
) -> CaseResult {
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;
    const K: usize = 4;
    const WRITES: usize = 600;
    /// Every STRIDE writes a writer waits (at most `expiry_wait`) until the watcher has
    /// judged an in-sync view it had not at the writer's previous pause; the pauses are
    /// staggered between writers, so the others keep writing meanwhile. So at least
    /// WRITES / STRIDE views are judged, however busy the machine or however long a
    /// member's outage, and the storm still runs while the cache re-reads.
    const STRIDE: usize = 50;
    let gate = ctx.expiry_wait();
    let (judged_tx, judged_rx) = tokio::sync::watch::channel(0usize);
    let mut writers = Vec::new();
    for _ in 0..K {
        writers.push(ctx.client().await?);
    }
    let key = |i: usize| format!("storm/k{i}");
    // Per key, per value: (sent, acknowledged). Value 0 is written before the cache.
    /// When a write was sent and when it was acknowledged.
    type Sent = (Instant, Instant);
    let times: Arc<Mutex<Vec<Vec<Sent>>>> = Arc::new(Mutex::new(vec![Vec::new(); K]));
    for (i, w) in writers.iter().enumerate() {
        let sent = Instant::now();
        w.put(&key(i), b"0".to_vec()).await?;
        times.lock().expect("times")[i].push((sent, Instant::now()));
    }
    let mut cache = reader.config_cache("storm").await?;
    let mut rx = cache.subscribe();
    let watcher = tokio::spawn(async move {
        let mut views: Vec<Vec<usize>> = Vec::new();
        let mut out_of_sync = 0u64;
        loop {
            let view = rx.borrow_and_update().clone();
            if view.in_sync() {
                views.push(
                    (0..K)
                        .map(|i| {
                            view.get(&format!("storm/k{i}"))
                                .and_then(|e| std::str::from_utf8(&e.value).ok()?.parse().ok())
                                .unwrap_or(usize::MAX)
                        })
                        .collect(),
                );
                judged_tx.send_replace(views.len());
            } else {
                out_of_sync += 1;
            }
            if rx.changed().await.is_err() {
                return (views, out_of_sync);
            }
        }
    });
    let mut storm = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        let (w, times, k) = (w.clone(), times.clone(), key(i));
        let mut judged = judged_rx.clone();
        storm.push(tokio::spawn(async move {
            let mut passed = 0usize;
            for n in 1..=WRITES {
                let sent = Instant::now();
                w.put(&k, n.to_string().into_bytes()).await?;
                times.lock().expect("times")[i].push((sent, Instant::now()));
                if (n + i * STRIDE / K).is_multiple_of(STRIDE) {
                    let last = passed;
                    let what = format!("writer {i}, write {n}: the cache shows a new in-sync view");
                    passed = *within(gate, &what, judged.wait_for(move |c| *c > last))
                        .await?
                        .context("the cache's subscriber ended during the storm")?;
                }
            }
            anyhow::Ok(())
        }));
    }
    // The cuts go on until every writer is done. After each, the next waits until the
    // cache has shown a new in-sync view: however slow the machine, a cut never comes
    // before the cache could recover from the last one (so the storm cannot livelock
    // it), and every view judged follows a reconnect.
    let cut = std::sync::atomic::AtomicUsize::new(0);
    let mut cut_judged = judged_rx.clone();
    let cutting = async {
        let Some(links) = cuts else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if reader.session_state() != SessionState::Connected {
                continue;
            }
            let mut armed = false;
            for link in links.all() {
                if !link.reset_pending() {
                    link.reset_after_next_request(Duration::from_millis(50));
                    cut.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    armed = true;
                }
            }
            if armed {
                let last = *cut_judged.borrow_and_update();
                if cut_judged.wait_for(|c| *c > last).await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    };
    let storming = async {
        for s in storm {
            s.await.context("a writer panicked")??;
        }
        anyhow::Ok(())
    };
    tokio::select! {
        done = storming => done?,
        never = cutting => never,
    }
    for link in cuts.iter().flat_map(|l| l.all()) {
        link.disarm();
        link.pass();
    }
    let truth = config_truth(reader, "storm").await?;
    converges(&mut cache, &truth, QUICK, "after the storm", |_| Ok(())).await?;
    drop(cache);
    let (views, out_of_sync) = within(QUICK, "the cache's subscriber ends with it", watcher)
        .await?
        .context("the subscriber panicked")?;
    let times = times.lock().expect("times").clone();
    for values in &views {
        ensure!(
            values.iter().all(|v| *v <= WRITES),
            "an in-sync view lacks a key: {values:?}"
        );
        let latest_send = (0..K).map(|i| times[i][values[i]].0).max();
        let earliest_successor_ack = (0..K)
            .filter_map(|i| times[i].get(values[i] + 1).map(|t| t.1))
            .min();
        if let (Some(sent), Some(acked)) = (latest_send, earliest_successor_ack) {
            ensure!(
                sent < acked,
                "an in-sync view no state ever had: {values:?} (one key's value was sent after another key's \
                 next value was acknowledged)"
            );
        }
    }
    let cut = cut.into_inner();
    ensure!(
        cuts.is_none() || cut >= 3,
        "only {cut} cuts were made during the storm"
    );
    tracing::info!(
        views = views.len(),
        out_of_sync,
        cuts = cut,
        "views judged during the storm"
    );
    ensure!(
        views.len() >= WRITES / STRIDE,
        "only {} views were judged ({out_of_sync} out of sync)",
        views.len()
    );
    Ok(())
}

/// Commits of more keys than one ZooKeeper read request holds (100 keys: a re-read takes
/// two requests) never show up mixed: two writers commit all 100 keys at once, each
/// with its own rising generations, as fast as they can, while a config cache follows
/// them over a slowed link (so that its re-reads straddle commits); every in-sync view
/// must hold one generation in all 100 keys. Each writer pauses every 10 commits until
/// the cache has shown a new in-sync view (at most `expiry_wait`), so the case judges at
/// least 30 views however busy the machine is, and otherwise commits while the cache
/// re-reads.
pub async fn config_cache_never_mixes_commits_above_64_keys(ctx: Ctx) -> CaseResult {
    let (judged, mixed, commits, kind) = wide_commit_views(&ctx).await?;
    ensure!(
        mixed.is_empty(),
        "{} of {judged} in-sync views mixed two commits of 100 keys; the first: {}",
        mixed.len(),
        mixed[0]
    );
    println!("[{kind}] {commits} commits of 100 keys, {judged} in-sync views: none mixed");
    Ok(())
}

/// The run of [`config_cache_never_mixes_commits_above_64_keys`]: how many in-sync views
/// were judged, those that mixed two commits (described), how many commits, and the
/// backend's kind. Also for the cases that show a backend mutant caught.
///
/// # Errors
///
/// When a writer fails, the cache does not converge, or fewer views were judged than
/// the run needs.
pub async fn wide_commit_views(ctx: &Ctx) -> anyhow::Result<(usize, Vec<String>, usize, String)> {
    use coord_core::Txn;
    const KEYS: usize = 100;
    const COMMITS: usize = 150;
    const STRIDE: usize = 10;
    let writers = [ctx.client().await?, ctx.client().await?];
    let reader = ctx.client().await?;
    let all = |generation: usize| {
        (0..KEYS).fold(Txn::new(), |txn, i| {
            txn.put(format!("wide/k{i:03}"), generation.to_string().into_bytes())
        })
    };
    writers[0].commit(all(0)).await?;
    crate::util::slow_link(ctx, &reader, Duration::from_millis(3)).await?;
    let cache = reader.config_cache("wide").await?;
    let mut rx = cache.subscribe();
    let (judged_tx, judged_rx) = tokio::sync::watch::channel(0usize);
    let watcher = tokio::spawn(async move {
        let (mut judged, mut mixed) = (0usize, Vec::new());
        loop {
            let view = rx.borrow_and_update().clone();
            if view.in_sync() {
                let generations: std::collections::BTreeSet<&[u8]> =
                    view.values().map(|e| e.value.as_slice()).collect();
                if view.len() != KEYS || generations.len() != 1 {
                    mixed.push(format!(
                        "{} keys, generations {:?}",
                        view.len(),
                        generations
                            .iter()
                            .map(|g| String::from_utf8_lossy(g))
                            .collect::<Vec<_>>()
                    ));
                }
                judged += 1;
                judged_tx.send_replace(judged);
            }
            if rx.changed().await.is_err() {
                return (judged, mixed);
            }
        }
    });
    let mut storm = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        let (writer, mut judged, gate) = (writer.clone(), judged_rx.clone(), ctx.expiry_wait());
        storm.push(tokio::spawn(async move {
            let mut seen = 0;
            for n in 1..=COMMITS {
                // Two writers' 100-key commits contend: a commit whose keys kept
                // changing under every attempt says `Unavailable`, nothing written
                // (outcome known); asked again, as a caller would.
                loop {
                    match writer.commit(all(n * 2 + w)).await {
                        Err(e) if e.kind() == coord_core::ErrorKind::Unavailable && !e.outcome_unknown() => {
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                        other => break other.map(drop)?,
                    }
                }
                if n % STRIDE == w * STRIDE / 2 {
                    let last = seen;
                    seen = *within(
                        gate,
                        "the cache shows a new in-sync view",
                        judged.wait_for(|c| *c > last),
                    )
                    .await?
                    .context("the cache's subscriber ended")?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for s in storm {
        s.await.context("a writer panicked")??;
    }
    ctx.factory().delay(&reader, Duration::ZERO).await.ok();
    let truth = config_truth(&reader, "wide").await?;
    let mut cache = cache;
    converges(&mut cache, &truth, QUICK, "after the commits", |_| Ok(())).await?;
    drop(cache);
    let (judged, mixed) = within(QUICK, "the cache's subscriber ends with it", watcher)
        .await?
        .context("the subscriber panicked")?;
    ensure!(judged >= COMMITS / STRIDE, "only {judged} views were judged");
    Ok((judged, mixed, 2 * COMMITS, reader.kind().to_string()))
}
