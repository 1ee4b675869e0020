//! Live caches: a map kept up to date from a watch by a background task, with a signal
//! of whether it is in sync with the server.
//!
//! One fold engine serves both caches: a watch's events become [`Change`]s (a snapshot,
//! a put, a delete, a resync), folded into a [`CacheView`] published on a `watch`
//! channel. [`ConfigCache`] follows [`ConfigStore::watch`] on a prefix,
//! [`ServiceCache`] follows [`Registry::watch`] on a service.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use futures::stream::BoxStream;
use futures::{FutureExt as _, StreamExt};
use tokio::sync::watch;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::primitives::config::ConfigStore;
use crate::primitives::registry::Registry;
use crate::types::{ConfigEvent, Entry};
use crate::types::{RegistryEvent, ServiceInstance};

/// A cache's map, sorted by key, and persistent: a copy shares everything but the path
/// a change rewrites (`O(log n)` nodes of up to 16 entries each, copied with their
/// values), so a view held while the cache moves on does not make each change copy
/// the whole map. Cloning it is `O(1)`.
#[derive(PartialEq, Eq)]
pub struct CacheMap<V>(imbl::OrdMap<String, V>);

impl<V> Clone for CacheMap<V> {
    fn clone(&self) -> Self {
        CacheMap(self.0.clone())
    }
}

impl<V> CacheMap<V> {
    fn new() -> Self {
        CacheMap(imbl::OrdMap::new())
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.get(key)
    }

    /// Whether `key` is in the map.
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every key and value, sorted by key.
    pub fn iter(&self) -> CacheIter<'_, V> {
        CacheIter(self.0.iter())
    }

    /// Every key, sorted.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator + '_ {
        self.0.keys()
    }

    /// Every value, sorted by key.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + '_ {
        self.0.values()
    }
}

impl<V: Clone> CacheMap<V> {
    /// The map as a `BTreeMap` (a copy: `O(n)`).
    pub fn to_btree_map(&self) -> BTreeMap<String, V> {
        self.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for CacheMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

/// What a cache holds at one moment: its map and whether the map is known to match the
/// server. Cheap to clone (the map is shared).
///
/// A view never changes; the cache publishes a new view on each change. Holding a view
/// does not make the cache copy its map: each change rewrites `O(log n)` of it.
pub struct CacheView<V> {
    entries: CacheMap<V>,
    in_sync: bool,
    resyncs: u64,
}

impl<V> CacheView<V> {
    /// An empty view, not in sync: what a cache folds its first snapshot into.
    fn empty() -> Self {
        CacheView {
            entries: CacheMap::new(),
            in_sync: false,
            resyncs: 0,
        }
    }

    /// The value under `key` (a config key, or a service instance's id).
    pub fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key)
    }

    /// Whether `key` is in the map.
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The whole map, sorted by key (a persistent map: cloning it is `O(1)`).
    pub fn entries(&self) -> &CacheMap<V> {
        &self.entries
    }

    /// Every key and value, sorted by key.
    pub fn iter(&self) -> CacheIter<'_, V> {
        self.entries.iter()
    }

    /// Every value, sorted by key.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + '_ {
        self.entries.values()
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the map is known to match the server: true from the watch's snapshot on,
    /// false from a reported gap (`Resync`) until the fresh snapshot after it, and for
    /// good once the cache has ended (its client closed). While false, the map is the
    /// last one known, possibly stale.
    ///
    /// In sync does not mean the server is reachable right now: during connection
    /// trouble the watch receives nothing, and the map is as of the last change seen.
    pub fn in_sync(&self) -> bool {
        self.in_sync
    }

    /// How many gaps (`Resync` events) the cache has been through since it started.
    pub fn resyncs(&self) -> u64 {
        self.resyncs
    }
}

impl<V: Clone> CacheView<V> {
    /// The map as a `BTreeMap` (a copy: `O(n)`).
    pub fn to_btree_map(&self) -> BTreeMap<String, V> {
        self.entries.to_btree_map()
    }
}

impl<V: Clone + PartialEq> CacheView<V> {
    /// Folds one change into the view; returns whether the view changed.
    fn apply(&mut self, change: Change<V>) -> bool {
        match change {
            Change::Snapshot(items) => {
                let map = CacheMap(items.into_iter().collect());
                if self.in_sync && self.entries == map {
                    return false;
                }
                self.entries = map;
                self.in_sync = true;
                true
            }
            Change::Put(key, value) => {
                if self.entries.get(&key) == Some(&value) {
                    return false;
                }
                self.entries.0.insert(key, value);
                true
            }
            Change::Delete(key) => {
                if !self.entries.contains_key(&key) {
                    return false;
                }
                self.entries.0.remove(&key);
                true
            }
            Change::Resync => {
                self.in_sync = false;
                self.resyncs += 1;
                true
            }
        }
    }
}

impl<V> Clone for CacheView<V> {
    fn clone(&self) -> Self {
        CacheView {
            entries: self.entries.clone(),
            in_sync: self.in_sync,
            resyncs: self.resyncs,
        }
    }
}

impl<V: PartialEq> PartialEq for CacheView<V> {
    fn eq(&self, other: &Self) -> bool {
        self.in_sync == other.in_sync && self.resyncs == other.resyncs && self.entries == other.entries
    }
}

impl<V: Eq> Eq for CacheView<V> {}

impl<V: std::fmt::Debug> std::fmt::Debug for CacheView<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheView")
            .field("in_sync", &self.in_sync)
            .field("resyncs", &self.resyncs)
            .field("entries", &self.entries)
            .finish()
    }
}

impl<'a, V> IntoIterator for &'a CacheView<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = CacheIter<'a, V>;

    fn into_iter(self) -> Self::IntoIter {
        CacheIter(self.entries.0.iter())
    }
}

impl<'a, V> IntoIterator for &'a CacheMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = CacheIter<'a, V>;

    fn into_iter(self) -> Self::IntoIter {
        CacheIter(self.0.iter())
    }
}

/// The entries of a [`CacheMap`] or [`CacheView`], sorted by key.
#[derive(Clone)]
pub struct CacheIter<'a, V>(imbl::ordmap::Iter<'a, String, V, imbl::shared_ptr::DefaultSharedPtr>);

impl<'a, V> Iterator for CacheIter<'a, V> {
    type Item = (&'a String, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<V> DoubleEndedIterator for CacheIter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

impl<V> ExactSizeIterator for CacheIter<'_, V> {}

impl<V> std::iter::FusedIterator for CacheIter<'_, V> {}

/// A watch event in the fold engine's terms.
#[derive(Debug)]
enum Change<V> {
    /// The whole map now; replaces the map and brings it in sync.
    Snapshot(Vec<(String, V)>),
    /// A key was created or changed.
    Put(String, V),
    /// A key was deleted.
    Delete(String),
    /// Changes may have been missed: out of sync, the map kept until the next snapshot.
    Resync,
}

impl From<ConfigEvent> for Change<Entry> {
    fn from(event: ConfigEvent) -> Self {
        match event {
            ConfigEvent::Snapshot(entries) => {
                Change::Snapshot(entries.into_iter().map(|e| (e.key.clone(), e)).collect())
            }
            ConfigEvent::Put(entry) => Change::Put(entry.key.clone(), entry),
            ConfigEvent::Delete(key) => Change::Delete(key),
            ConfigEvent::Resync => Change::Resync,
        }
    }
}

impl From<RegistryEvent> for Change<ServiceInstance> {
    fn from(event: RegistryEvent) -> Self {
        match event {
            RegistryEvent::Snapshot(instances) => {
                Change::Snapshot(instances.into_iter().map(|i| (i.id.clone(), i)).collect())
            }
            RegistryEvent::Joined(instance) | RegistryEvent::Updated(instance) => {
                Change::Put(instance.id.clone(), instance)
            }
            RegistryEvent::Left(id) => Change::Delete(id),
            RegistryEvent::Resync => Change::Resync,
        }
    }
}

type Changes<V> = BoxStream<'static, Result<Change<V>>>;

/// Aborts the fold task when the last handle of a cache is dropped.
struct StopOnDrop(tokio::task::AbortHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A live copy of what a watch follows, kept up to date by a background task: a
/// [`ConfigCache`] (config keys under a prefix) or a [`ServiceCache`] (a service's
/// instances); one type for both.
///
/// When the watch reports a gap, the cache is out of sync and keeps its last map until
/// the fresh snapshot replaces it wholesale.
///
/// Cheap to clone; every clone has its own [`LiveCache::changed`] position. The task
/// stops when the last clone is dropped. The cache does not keep its client's session
/// alive: when the client is closed (or its last handle dropped), the cache ends, out of
/// sync, and [`LiveCache::changed`] fails with `Closed`.
pub struct LiveCache<V> {
    /// What it follows: the config prefix, or the service.
    followed: String,
    view: watch::Receiver<CacheView<V>>,
    /// Why the watch ended, once it has.
    ended: Arc<OnceLock<Error>>,
    _task: Arc<StopOnDrop>,
}

impl<V> Clone for LiveCache<V> {
    fn clone(&self) -> Self {
        LiveCache {
            followed: self.followed.clone(),
            view: self.view.clone(),
            ended: self.ended.clone(),
            _task: self._task.clone(),
        }
    }
}

impl<V: Clone + PartialEq + Send + Sync + 'static> LiveCache<V> {
    /// Folds `changes` until the first snapshot, then hands them to a task of their own.
    async fn start(followed: &str, mut changes: Changes<V>, span: tracing::Span) -> Result<LiveCache<V>> {
        let mut view = CacheView::empty();
        while !view.in_sync {
            match changes.next().await {
                Some(Ok(change)) => {
                    view.apply(change);
                }
                Some(Err(e)) => return Err(e),
                None => return Err(ended_silently()),
            }
        }
        let (tx, rx) = watch::channel(view);
        let ended = Arc::new(OnceLock::new());
        let task = tokio::spawn(follow(changes, tx, ended.clone()).instrument(span));
        Ok(LiveCache {
            followed: followed.to_owned(),
            view: rx,
            ended,
            _task: Arc::new(StopOnDrop(task.abort_handle())),
        })
    }

    /// The latest view: the whole map, and whether it is in sync.
    pub fn view(&self) -> CacheView<V> {
        self.view.borrow().clone()
    }

    /// The value of `key` (a config key, an instance id) in the latest view.
    pub fn get(&self, key: &str) -> Option<V> {
        self.view.borrow().get(key).cloned()
    }

    /// Whether the latest view is in sync (see [`CacheView::in_sync`]).
    pub fn in_sync(&self) -> bool {
        self.view.borrow().in_sync
    }

    /// A channel that always holds the latest view, as if seen already. It closes when
    /// the cache ends or the last clone of the cache is dropped.
    pub fn subscribe(&self) -> watch::Receiver<CacheView<V>> {
        let mut rx = self.view.clone();
        rx.borrow_and_update();
        rx
    }

    /// Why the cache ended, once it has (the client was closed): it then stays out of
    /// sync for good; open a new cache on a new client.
    pub fn ended(&self) -> Option<Error> {
        self.ended.get().cloned()
    }

    /// Waits for the next change of the view — a key or instance created, changed or
    /// removed, or the cache going out of or back into sync — and returns the new view.
    /// Changes made in quick succession may be seen as one.
    ///
    /// # Errors
    ///
    /// The error that ended the watch: `Closed` once the client is closed (at once if it
    /// already was). A change folded just before the end is not returned by `changed`;
    /// [`view`](Self::view) still shows it.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a change made while no future is pending is seen by the next call.
    pub async fn changed(&mut self) -> Result<CacheView<V>> {
        if let Some(e) = self.ended() {
            self.view.borrow_and_update();
            return Err(e);
        }
        let changed = self.view.changed().await;
        let view = self.view.borrow_and_update().clone();
        match (changed, self.ended()) {
            (_, Some(e)) => Err(e),
            (Ok(()), None) => Ok(view),
            (Err(_), None) => Err(ended_silently()),
        }
    }

    /// Waits until the view is in sync (at once if it is) and returns it.
    ///
    /// # Errors
    ///
    /// As [`LiveCache::changed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn synced(&mut self) -> Result<CacheView<V>> {
        let result = self.view.wait_for(|v| v.in_sync).await.map(|v| v.clone());
        match (result, self.ended()) {
            (_, Some(e)) => Err(e),
            (Ok(view), None) => Ok(view),
            (Err(_), None) => Err(ended_silently()),
        }
    }
}

/// Folds each change into the published view until the watch ends (with the client's
/// close, typically); then records why, and marks the view out of sync. Every change
/// already waiting is folded in before the view is published, so a batch a backend
/// delivers together (one consistent read, one revision) is never seen half-applied.
async fn follow<V: Clone + PartialEq>(
    mut changes: Changes<V>,
    tx: watch::Sender<CacheView<V>>,
    ended: Arc<OnceLock<Error>>,
) {
    let error = loop {
        let mut batch = Vec::new();
        let mut end = None;
        let mut next = changes.next().await;
        loop {
            match next {
                Some(Ok(change)) => {
                    if matches!(change, Change::Resync) {
                        tracing::debug!("coord.cache.resync: out of sync until the next snapshot");
                    }
                    batch.push(change);
                }
                Some(Err(e)) => end = Some(e),
                None => end = Some(ended_silently()),
            }
            if end.is_some() {
                break;
            }
            match changes.next().now_or_never() {
                Some(n) => next = n,
                None => break,
            }
        }
        if !batch.is_empty() {
            tx.send_if_modified(|view| batch.into_iter().fold(false, |m, c| view.apply(c) | m));
        }
        if let Some(e) = end {
            break e;
        }
    };
    tracing::debug!(error = %error, "coord.cache.ended");
    let _ = ended.set(error);
    tx.send_modify(|view| view.in_sync = false);
}

fn ended_silently() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "the watch behind the cache ended without an error",
    )
}

/// A live copy of every config key under a prefix, kept up to date by a background
/// task that follows [`ConfigStore::watch`]. Made by [`Client::config_cache`].
///
/// The map goes from key (relative to the client's namespace, as in [`Entry::key`]) to
/// [`Entry`]. When the watch reports a gap ([`ConfigEvent::Resync`]), the cache is out of
/// sync and keeps its last map until the fresh snapshot replaces it wholesale.
///
/// As every [`LiveCache`]: cheap to clone, ends with its client.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use coord_core::ConfigStore;
/// let client = coord_mem::connect("mem://config-cache-doc")?;
/// client.put("flags/dark-mode", b"on".to_vec()).await?;
/// let mut flags = client.config_cache("flags").await?;
/// assert!(flags.in_sync());
/// assert_eq!(flags.get("flags/dark-mode").map(|e| e.value), Some(b"on".to_vec()));
/// client.put("flags/beta", b"off".to_vec()).await?;
/// let view = flags.changed().await?;
/// assert_eq!(view.len(), 2);
/// assert_eq!(view.get("flags/beta").map(|e| e.value.as_slice()), Some(&b"off"[..]));
/// # Ok(()) }
/// ```
pub type ConfigCache = LiveCache<Entry>;

impl LiveCache<Entry> {
    /// The prefix this config cache follows.
    pub fn prefix(&self) -> &str {
        &self.followed
    }
}

/// A live copy of the instances of one service, kept up to date by a background task
/// that follows [`Registry::watch`]. Made by [`Client::service_cache`].
///
/// The map goes from instance id to [`ServiceInstance`]. When the watch reports a gap
/// ([`RegistryEvent::Resync`]), the cache is out of sync and keeps its last map until
/// the fresh snapshot replaces it wholesale.
///
/// As every [`LiveCache`]: cheap to clone, ends with its client.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use coord_core::{Registry, ServiceInstance};
/// let client = coord_mem::connect("mem://service-cache-doc")?;
/// let mut api = client.service_cache("api").await?;
/// assert!(api.in_sync() && api.view().is_empty());
/// let reg = client.register("api", ServiceInstance::new("a1", "10.0.0.1:80")).await?;
/// let view = api.changed().await?;
/// let addresses: Vec<&str> = view.values().map(|i| i.address.as_str()).collect();
/// assert_eq!(addresses, ["10.0.0.1:80"]);
/// reg.deregister().await?;
/// assert!(api.changed().await?.is_empty());
/// # Ok(()) }
/// ```
pub type ServiceCache = LiveCache<ServiceInstance>;

impl LiveCache<ServiceInstance> {
    /// The service this cache follows.
    pub fn service(&self) -> &str {
        &self.followed
    }
}

impl<V> std::fmt::Debug for LiveCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let view = self.view.borrow();
        f.debug_struct("LiveCache")
            .field("followed", &self.followed)
            .field("len", &view.len())
            .field("in_sync", &view.in_sync())
            .finish()
    }
}

impl Client {
    /// A live cache of every config key equal to `prefix` or below it (segment-wise, as
    /// [`ConfigStore::watch`]; empty for the whole namespace). Returns once the first
    /// snapshot is in, so the cache starts in sync.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad prefix, before any network call; the watch's errors
    /// (`Unavailable`, `Timeout`, `Closed`) while waiting for the snapshot.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future stops watching and leaves nothing running.
    pub async fn config_cache(&self, prefix: &str) -> Result<ConfigCache> {
        let span = tracing::debug_span!("coord.config_cache", backend = self.kind(), prefix);
        async {
            let changes = ConfigStore::watch(self, prefix)
                .await?
                .map(|item| item.map(Change::from))
                .boxed();
            LiveCache::start(prefix, changes, tracing::Span::current()).await
        }
        .instrument(span)
        .await
        .map_err(|e: Error| e.with_operation("config_cache"))
    }

    /// A live cache of the instances of `service`. Returns once the first snapshot is
    /// in, so the cache starts in sync.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad service name, before any network call; the watch's
    /// errors (`Unavailable`, `Timeout`, `Closed`) while waiting for the snapshot.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future stops watching and leaves nothing running.
    pub async fn service_cache(&self, service: &str) -> Result<ServiceCache> {
        let span = tracing::debug_span!("coord.service_cache", backend = self.kind(), service);
        async {
            let changes = Registry::watch(self, service)
                .await?
                .map(|item| item.map(Change::from))
                .boxed();
            LiveCache::start(service, changes, tracing::Span::current()).await
        }
        .instrument(span)
        .await
        .map_err(|e: Error| e.with_operation("service_cache"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::channel::mpsc;

    use super::*;
    use crate::version::Version;

    fn entry(key: &str, value: &str, version: u64) -> Entry {
        Entry {
            key: key.to_owned(),
            value: value.as_bytes().to_vec(),
            version: Version::from_parts(version, 0),
        }
    }

    fn keys<V>(view: &CacheView<V>) -> Vec<&str> {
        view.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn fold<V: Clone + PartialEq>(events: impl IntoIterator<Item = Change<V>>) -> CacheView<V> {
        let mut view = CacheView::empty();
        for change in events {
            view.apply(change);
        }
        view
    }

    #[test]
    fn config_events_fold_into_a_map() {
        let view = fold(
            [
                ConfigEvent::Snapshot(vec![entry("c/a", "1", 1), entry("c/b", "1", 2)]),
                ConfigEvent::Put(entry("c/a", "2", 3)),
                ConfigEvent::Put(entry("c/c", "1", 4)),
                ConfigEvent::Delete("c/b".into()),
            ]
            .map(Change::from),
        );
        assert!(view.in_sync());
        assert_eq!(keys(&view), ["c/a", "c/c"]);
        assert_eq!(view.get("c/a"), Some(&entry("c/a", "2", 3)));
        assert_eq!(view.resyncs(), 0);
    }

    #[test]
    fn resync_keeps_the_map_until_the_snapshot_replaces_it() {
        let mut view = fold(
            [
                ConfigEvent::Snapshot(vec![entry("c/a", "1", 1), entry("c/b", "1", 2)]),
                ConfigEvent::Resync,
            ]
            .map(Change::from),
        );
        assert!(!view.in_sync());
        assert_eq!(view.resyncs(), 1);
        assert_eq!(
            keys(&view),
            ["c/a", "c/b"],
            "the last map stays while out of sync"
        );
        let changed = view.apply(Change::from(ConfigEvent::Snapshot(vec![
            entry("c/b", "2", 5),
            entry("c/new", "1", 6),
        ])));
        assert!(changed);
        assert!(view.in_sync());
        assert_eq!(
            keys(&view),
            ["c/b", "c/new"],
            "the snapshot replaces the map wholesale"
        );
        assert_eq!(view.get("c/b"), Some(&entry("c/b", "2", 5)));
    }

    #[test]
    fn registry_events_fold_by_instance_id() {
        let view = fold(
            [
                RegistryEvent::Snapshot(vec![ServiceInstance::new("n1", "h:1")]),
                RegistryEvent::Joined(ServiceInstance::new("n2", "h:2")),
                RegistryEvent::Updated(ServiceInstance::new("n1", "h:11").with_metadata("v", "2")),
                RegistryEvent::Left("n2".into()),
                RegistryEvent::Joined(ServiceInstance::new("n3", "h:3")),
            ]
            .map(Change::from),
        );
        assert!(view.in_sync());
        assert_eq!(keys(&view), ["n1", "n3"]);
        let n1 = view.get("n1").expect("n1");
        assert_eq!((n1.address.as_str(), n1.metadata["v"].as_str()), ("h:11", "2"));
    }

    #[test]
    fn only_real_changes_make_a_new_view() {
        let mut view = fold([Change::from(RegistryEvent::Snapshot(vec![ServiceInstance::new(
            "n1", "h:1",
        )]))]);
        assert!(
            !view.apply(Change::from(RegistryEvent::Updated(ServiceInstance::new(
                "n1", "h:1"
            ))))
        );
        assert!(!view.apply(Change::from(RegistryEvent::Left("unknown".into()))));
        assert!(
            !view.apply(Change::from(RegistryEvent::Snapshot(vec![ServiceInstance::new(
                "n1", "h:1"
            ),])))
        );
        assert!(view.apply(Change::from(RegistryEvent::Resync)));
        assert!(
            view.apply(Change::from(RegistryEvent::Snapshot(vec![ServiceInstance::new(
                "n1", "h:1"
            )]))),
            "the same map coming back in sync is a change"
        );
    }

    #[test]
    fn a_view_is_unchanged_by_later_changes() {
        let mut view = fold([Change::from(ConfigEvent::Snapshot(vec![entry("c/a", "1", 1)]))]);
        let before = view.clone();
        view.apply(Change::from(ConfigEvent::Put(entry("c/a", "2", 2))));
        assert_eq!(before.get("c/a"), Some(&entry("c/a", "1", 1)));
        assert_ne!(before, view);
    }

    type Feed = mpsc::UnboundedSender<Result<Change<Entry>>>;

    async fn fed_cache() -> (Feed, LiveCache<Entry>) {
        let (tx, rx) = mpsc::unbounded();
        tx.unbounded_send(Ok(Change::from(ConfigEvent::Snapshot(vec![entry(
            "c/a", "1", 1,
        )]))))
        .expect("feed");
        let cache = LiveCache::start("test", rx.boxed(), tracing::Span::none())
            .await
            .expect("start");
        (tx, cache)
    }

    async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .expect("in time")
    }

    #[tokio::test]
    async fn the_task_publishes_each_change() {
        let (feed, mut cache) = fed_cache().await;
        assert!(cache.in_sync());
        assert_eq!(keys(&cache.view()), ["c/a"]);
        feed.unbounded_send(Ok(Change::from(ConfigEvent::Put(entry("c/b", "1", 2)))))
            .expect("feed");
        let view = within(cache.changed()).await.expect("changed");
        assert_eq!(keys(&view), ["c/a", "c/b"]);
        feed.unbounded_send(Ok(Change::Resync)).expect("feed");
        let view = within(cache.changed()).await.expect("changed");
        assert!(!view.in_sync() && view.len() == 2);
        assert!(!cache.in_sync());
        let mut waiter = cache.clone();
        let synced = tokio::spawn(async move { waiter.synced().await });
        feed.unbounded_send(Ok(Change::from(ConfigEvent::Snapshot(vec![entry(
            "c/z", "1", 9,
        )]))))
        .expect("feed");
        let view = within(synced).await.expect("task").expect("synced");
        assert!(view.in_sync());
        assert_eq!(keys(&view), ["c/z"]);
        assert_eq!(cache.get("c/z"), Some(entry("c/z", "1", 9)));
    }

    #[tokio::test]
    async fn an_error_ends_the_cache_out_of_sync() {
        let (feed, mut cache) = fed_cache().await;
        let mut rx = cache.subscribe();
        feed.unbounded_send(Err(Error::closed())).expect("feed");
        let err = within(cache.changed()).await.expect_err("ended");
        assert_eq!(err.kind(), ErrorKind::Closed);
        assert!(!cache.in_sync());
        assert_eq!(keys(&cache.view()), ["c/a"], "the last map stays");
        let again = within(cache.changed()).await.expect_err("still ended");
        assert_eq!(again.kind(), ErrorKind::Closed);
        assert_eq!(
            within(cache.synced()).await.expect_err("never synced").kind(),
            ErrorKind::Closed
        );
        // The subscriber sees the last view, then the channel closes.
        while within(rx.changed()).await.is_ok() {}
        assert!(!rx.borrow().in_sync());
    }

    #[tokio::test]
    async fn a_stream_that_ends_silently_is_an_error() {
        let (feed, mut cache) = fed_cache().await;
        drop(feed);
        let err = within(cache.changed()).await.expect_err("ended");
        assert_eq!(err.kind(), ErrorKind::Unexpected);
    }

    #[tokio::test]
    async fn start_fails_with_the_watch_error() {
        let (tx, rx) = mpsc::unbounded::<Result<Change<Entry>>>();
        tx.unbounded_send(Err(Error::closed())).expect("feed");
        let err = LiveCache::start("test", rx.boxed(), tracing::Span::none())
            .await
            .expect_err("error");
        assert_eq!(err.kind(), ErrorKind::Closed);
    }

    #[tokio::test]
    async fn dropping_the_last_clone_stops_the_task() {
        let (feed, cache) = fed_cache().await;
        let clone = cache.clone();
        let mut rx = cache.subscribe();
        drop(cache);
        tokio::task::yield_now().await;
        assert!(!feed.is_closed(), "a clone still uses the task");
        drop(clone);
        // The aborted task drops the stream (closing the feed) and the channel's sender.
        within(async {
            while !feed.is_closed() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(within(rx.changed()).await.is_err());
    }
}
