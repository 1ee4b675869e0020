//! Config store: one persistent znode per key, `<root>/config/<key with '/' as ':'>`
//! (a flat directory, so keys never nest and `multi` needs no parents).
//!
//! Version = the node's `czxid` and data version together. ZooKeeper restarts data
//! versions at 0 when a node is recreated, and a `multi` can check only a data version
//! or that a node exists — never a `czxid` — so each key node carries an **incarnation
//! marker**: an empty child `i-<64 random bits>` that lives and dies with its node. A
//! marker is only ever trusted as read together with its node's stat (one
//! `getChildren2`, atomic): "the node with this `czxid` has child `i-…`". A `multi` that
//! checks that child and the data version then holds only for that very incarnation
//! and version: a delete, recreate and rewrite to the same data version in between
//! removes the child, and no other incarnation has it. So:
//!
//! - `put` is one `setData`, whatever the contention: it never fails because others
//!   write the key too. A new key is created with its marker in one `multi`.
//! - compare-and-set reads the node with its children, then sends one `multi` (`check`
//!   the marker, `setData` at the version).
//! - multi-key commits read every key they touch the same way (pipelined), then send
//!   one `multi` with the same marker checks.
//!
//! Nodes without a marker — written by other clients (kazoo's `Counter`, `zkCli`,
//! Curator) or an earlier coord — are read the same way (the marker is invisible to
//! `get`, `list` and watches). A compare-and-set on one first adds a marker
//! (`multi[create marker, check data version]`), then reads the node again: wherever
//! the marker landed, the read says which incarnation has it, so a key deleted and
//! recreated meanwhile fails the check instead of passing it. Markers of an earlier
//! coord (named by the `czxid`, made by a second request after the node, so possibly
//! under a later incarnation) are never trusted. Deleting a key deletes its children in
//! the same `multi`; an operator deletes a key with `deleteall` (`delete` refuses a node
//! with a child).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use async_trait::async_trait;
use coord_core::raw::{Backoff, Counter, KvStore, key_matches_prefix};
use coord_core::{
    Check, ConfigEvent, Entry, Error, ErrorKind, Op, OpResult, Result, Txn, Version, Versioned,
};
use futures::stream::BoxStream;
use std::time::Duration;
use zookeeper_client as zk;

use crate::ZkClient;
use crate::error::{map, map_at};
use crate::options::ZkAcl;
use crate::session::Inner;
use crate::watch::{self, DirFollower};

/// How many times a commit is retried when a key it did not check changed under it.
const COMMIT_ATTEMPTS: usize = 16;

fn version(stat: &zk::Stat) -> Version {
    coord_core::raw::version(stat.czxid as u64, u64::from(stat.version as u32))
}

fn node_name(key: &str) -> String {
    key.replace('/', ":")
}

fn key_of(name: &str) -> String {
    name.replace(':', "/")
}

/// How many times [`KvStore::first_in`] reads again when a node it listed went
/// before its data was read.
const FIRST_BELOW_ATTEMPTS: usize = 5;

fn config_dir(inner: &Inner) -> String {
    inner.path("config")
}

fn node_path(inner: &Inner, key: &str) -> String {
    format!("{}/{}", config_dir(inner), node_name(key))
}

/// The prefix of an incarnation marker's name.
const MARKER_PREFIX: &str = "i-";

/// A fresh incarnation marker's name: `i-<64 random bits in hex>`.
fn new_marker() -> String {
    format!("{MARKER_PREFIX}{:016x}", uuid::Uuid::new_v4().as_u64_pair().0)
}

/// The incarnation markers a client knows: key node path → (`czxid`, marker). A marker
/// seen together with a node's `czxid` (or made with it) names that incarnation for as
/// long as it exists, so a compare-and-set whose version has that `czxid` can check it
/// without reading first. Bounded: emptied when full.
#[derive(Debug, Default)]
pub(crate) struct MarkerCache(std::sync::Mutex<HashMap<String, (i64, String)>>);

/// The most markers a client remembers.
const MARKER_CACHE: usize = 4096;

impl MarkerCache {
    fn remember(&self, path: &str, czxid: i64, marker: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MARKER_CACHE && !map.contains_key(path) {
            map.clear();
        }
        map.insert(path.to_owned(), (czxid, marker.to_owned()));
    }

    /// The marker of `path`'s incarnation `czxid`, if known.
    fn of(&self, path: &str, czxid: i64) -> Option<String> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(path).filter(|(c, _)| *c == czxid).map(|(_, m)| m.clone())
    }

    fn forget(&self, path: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(path);
    }
}

/// A key node as one atomic read: its stat and its children.
#[derive(Debug, Clone)]
struct Node {
    stat: zk::Stat,
    children: Vec<String>,
}

impl Node {
    /// A marker of this incarnation, if it has one (earlier coord's `czxid`-named
    /// markers are not trusted: they may sit under a later incarnation).
    fn marker(&self) -> Option<&str> {
        self.children
            .iter()
            .map(String::as_str)
            .find(|c| c.starts_with(MARKER_PREFIX) && c.len() == MARKER_PREFIX.len() + 16)
    }
}

/// What a failing `multi` op means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// A fence check: the guard is gone.
    Fence,
    /// A check the caller asked for.
    Version,
    /// A key the caller did not check changed since our read: retry.
    Race,
}

/// Reads the stat of each path in one pipelined round.
async fn stats(inner: &Inner, paths: &[String]) -> Result<Vec<Option<zk::Stat>>> {
    let futures = paths.iter().map(|p| {
        let p = p.clone();
        inner.call_mapped(Counter::Read, "commit", false, |zk| async move {
            zk.check_stat(&p).await
        })
    });
    futures::future::try_join_all(futures).await
}

/// Reads each node with its children (`getChildren2`: its stat and children at one
/// moment) in one pipelined round; `None` for a node that is gone.
async fn nodes(inner: &Inner, paths: &[String]) -> Result<Vec<Option<Node>>> {
    let futures = paths.iter().map(|p| {
        let p = p.clone();
        async move {
            let path = p.clone();
            match inner
                .call(Counter::Read, "commit", false, |zk| async move {
                    zk.get_children(&path).await
                })
                .await?
            {
                Ok((children, stat)) => {
                    let node = Node { stat, children };
                    if let Some(marker) = node.marker() {
                        inner.markers.remember(&p, node.stat.czxid, marker);
                    }
                    Ok(Some(node))
                }
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(map_at(e, "commit", false, &p)),
            }
        }
    });
    futures::future::try_join_all(futures).await
}

/// Reads every key under `prefix` (segment-wise), sorted by key.
async fn read_entries(inner: &Inner, prefix: &str) -> Result<Vec<Entry>> {
    // One state of the prefix's keys (see `children_with_data`): a list is a snapshot
    // that existed, also above 64 keys; writes to other keys do not disturb it.
    let dir = config_dir(inner);
    let keep = |name: &str| key_matches_prefix(&key_of(name), prefix);
    let mut entries: Vec<Entry> = crate::session::children_with_data(inner, &dir, keep, "list")
        .await?
        .into_iter()
        .map(|(name, value, stat)| Entry {
            key: key_of(&name),
            value,
            version: version(&stat),
        })
        .collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(entries)
}

/// One attempt at a commit; `Ok(None)` means "raced with a concurrent change, retry".
/// Reads what the transaction touches, checks its fences and versions, and sends one
/// `multi` guarded by the versions read, so nothing changes under it unnoticed.
async fn commit_once(inner: &Inner, txn: &Txn, caught_up: &mut bool) -> Result<Option<Vec<OpResult>>> {
    let fences: Vec<&coord_core::Fence> = txn
        .checks()
        .iter()
        .filter_map(|c| match c {
            Check::Fence(f) => Some(f),
            _ => None,
        })
        .collect();
    let keys = touched_keys(txn);
    let fence_paths: Vec<String> = fences.iter().map(|f| f.resource().to_owned()).collect();
    let key_paths: Vec<String> = keys.iter().map(|k| node_path(inner, k)).collect();
    let (fence_stats, key_nodes) =
        futures::future::try_join(stats(inner, &fence_paths), nodes(inner, &key_paths)).await?;
    // The fence's node must be the very node of the grant: its create zxid is the token.
    let live = fences
        .iter()
        .zip(&fence_stats)
        .all(|(f, stat)| stat.as_ref().is_some_and(|s| s.czxid as u64 == f.token().get()));
    if !live {
        return Err(fenced());
    }
    let current: HashMap<&str, Option<&Node>> = keys
        .iter()
        .map(String::as_str)
        .zip(key_nodes.iter().map(Option::as_ref))
        .collect();
    let checked = match check_versions(txn, &current) {
        // A refusal decided by a read: only once the member caught up with the leader
        // (its copy may lag a write that finished before this call began).
        Err(e) if e.kind() == ErrorKind::VersionMismatch && !*caught_up => {
            *caught_up = true;
            crate::session::catch_up(inner, &config_dir(inner), "commit").await?;
            return Ok(None);
        }
        other => other?,
    };
    // A checked key without a marker of its own cannot be checked exactly in one
    // `multi`: it gets one first, and the commit reads again.
    let unmarked: Vec<&str> = checked
        .keys()
        .filter(|k| {
            current
                .get(*k)
                .copied()
                .flatten()
                .is_some_and(|n| n.marker().is_none())
        })
        .copied()
        .collect();
    if !unmarked.is_empty() {
        for key in unmarked {
            if let Some(node) = current.get(key).copied().flatten() {
                mark(inner, &node_path(inner, key), &node.stat).await?;
            }
        }
        return Ok(None);
    }
    let planned = plan(inner, txn, &fences, &current, &checked)?;
    let Some(results) = send(inner, &planned).await? else {
        return Ok(None);
    };
    let mut out = planned.op_results(&results)?;
    read_back_create_stats(inner, &planned, &mut out).await?;
    Ok(Some(out))
}

/// A transaction that needs no read first: a single unconditional put, or a single
/// compare-and-set of the key it puts.
enum Single<'t> {
    Put(&'t str, &'t [u8]),
    Cas(&'t str, Option<Version>, &'t [u8]),
}

impl<'t> Single<'t> {
    fn of(txn: &'t Txn) -> Option<Self> {
        let [Op::Put { key, value }] = txn.ops() else {
            return None;
        };
        match txn.checks() {
            [] => Some(Single::Put(key, value)),
            [
                Check::Version {
                    key: checked,
                    version,
                },
            ] if checked == key => Some(Single::Cas(key, *version, value)),
            _ => None,
        }
    }

    async fn run(self, inner: &Inner) -> Result<Version> {
        match self {
            Single::Put(key, value) => put(inner, key, value).await,
            Single::Cas(key, None, value) => match create_key(inner, key, value).await? {
                Some(v) => Ok(v),
                None => Err(mismatch_now(inner, key, None).await),
            },
            Single::Cas(key, Some(expected), value) => cas(inner, key, expected, value).await,
        }
    }
}

/// Last writer wins: one `setData` when the key exists, else a create (and its
/// marker). Contention never fails it: a create that loses to another turns into a
/// `setData`, a `setData` whose node was just deleted into a create.
async fn put(inner: &Inner, key: &str, value: &[u8]) -> Result<Version> {
    let path = node_path(inner, key);
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(100));
    let mut round = 0;
    loop {
        round += 1;
        if round > 2 {
            backoff.wait().await; // a key deleted and created again as fast as we write
        }
        let (p, d) = (path.clone(), value.to_vec());
        match inner
            .call(Counter::Write, "commit", true, |zk| async move {
                zk.set_data(&p, &d, None).await
            })
            .await?
        {
            Ok(stat) => return Ok(version(&stat)),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_at(e, "commit", true, &path)),
        }
        if let Some(v) = create_key(inner, key, value).await? {
            return Ok(v);
        }
    }
}

/// Creates `key` with its incarnation marker (one `multi`): its version, or `None` if
/// it exists.
async fn create_key(inner: &Inner, key: &str, value: &[u8]) -> Result<Option<Version>> {
    let path = node_path(inner, key);
    for _ in 0..5 {
        let marker = new_marker();
        let ops = [
            PlannedOp::Create(path.clone(), value.to_vec()),
            PlannedOp::Create(key_marker(&path, &marker), Vec::new()),
        ];
        match write_multi(inner, &ops).await? {
            Ok(results) => {
                let created = match results.first() {
                    Some(zk::MultiWriteResult::Create { stat, .. }) if !unknown_major(version(stat)) => {
                        version(stat)
                    }
                    // No stat from this server (ZOOKEEPER-4026): the marker's, made in
                    // the same `multi`, tells.
                    _ => created_version(inner, &key_marker(&path, &marker)).await?,
                };
                // Made in one `multi` with the node: this incarnation's marker.
                let czxid = coord_core::raw::version_parts(created).0 as i64;
                inner.markers.remember(&path, czxid, &marker);
                return Ok(Some(created));
            }
            Err((0, zk::Error::NodeExists)) => return Ok(None),
            // The config directory does not exist yet (or went as an empty container).
            Err((0, zk::Error::NoNode)) => inner.ensure_dir(&config_dir(inner)).await?,
            Err((_, e)) => return Err(map_at(e, "commit", true, &path)),
        }
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        "the config directory kept disappearing while a key was created in it; nothing was written — retry",
    ))
}

/// Whether a version's `czxid` is one a server left out of a `multi` result.
fn unknown_major(v: Version) -> bool {
    let major = coord_core::raw::version_parts(v).0;
    major == 0 || major == u64::MAX
}

/// Gives the node at `path`, read as `stat`, a marker of its own: created only while
/// the node is still at the data version read. Where it lands is known only from the
/// next read of the node with its children (a node deleted and recreated at the same
/// data version meanwhile gets it instead, which that read then says).
async fn mark(inner: &Inner, path: &str, stat: &zk::Stat) -> Result<()> {
    let ops = [
        PlannedOp::Create(format!("{path}/{}", new_marker()), Vec::new()),
        PlannedOp::Check(path.to_owned(), stat.version),
    ];
    match write_multi(inner, &ops).await? {
        // Marked, or changed (or gone) since the read: the next read tells.
        Ok(_) | Err((_, zk::Error::BadVersion | zk::Error::NoNode | zk::Error::NodeExists)) => Ok(()),
        Err((_, e)) => Err(map_at(e, "commit", true, path)),
    }
}

/// Compare-and-set of an existing key: reads the node with its children, then one
/// `multi` that checks its marker and writes at the data version. A node without a
/// marker gets one first (see [`mark`]) and is read again.
async fn cas(inner: &Inner, key: &str, expected: Version, value: &[u8]) -> Result<Version> {
    let path = node_path(inner, key);
    let (czxid, data_version) = incarnation(expected);
    if let Some(marker) = inner.markers.of(&path, czxid) {
        let ops = marked_set(&path, &marker, value, data_version);
        match write_multi(inner, &ops).await? {
            Ok(results) => return set_result(&results, ops.len() - 1),
            Err((_, zk::Error::NoAuth)) => return Err(map_at(zk::Error::NoAuth, "commit", true, &path)),
            // The marker is gone (so is that incarnation) or the data version moved on:
            // the read below tells which.
            Err((0, _)) => inner.markers.forget(&path),
            Err(_) => {}
        }
    }
    let mut caught_up = false;
    for _ in 0..4 {
        let node = nodes(inner, std::slice::from_ref(&path)).await?.pop().flatten();
        let actual = node.as_ref().map(|n| version(&n.stat));
        let Some(node) = node.filter(|_| actual == Some(expected)) else {
            // A refusal decided by a read: only once the member caught up with the
            // leader (its copy may lag a write that finished before this call began).
            if !caught_up {
                caught_up = true;
                crate::session::catch_up(inner, &config_dir(inner), "commit").await?;
                continue;
            }
            return Err(mismatch(key, Some(expected), actual));
        };
        let Some(marker) = node.marker() else {
            mark(inner, &path, &node.stat).await?;
            continue;
        };
        let ops = marked_set(&path, marker, value, data_version);
        return match write_multi(inner, &ops).await? {
            Ok(results) => set_result(&results, ops.len() - 1),
            Err((_, zk::Error::NoAuth)) => Err(map_at(zk::Error::NoAuth, "commit", true, &path)),
            Err(_) => Err(mismatch_now(inner, key, Some(expected)).await),
        };
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "config key {key:?} kept changing while it was marked for compare-and-set; nothing was written — retry"
        ),
    ))
}

/// The `multi` of a compare-and-set: the incarnation's marker is there, and the node
/// at the data version gets `value` (the result of the set is the last one).
fn marked_set(path: &str, marker: &str, value: &[u8], data_version: i32) -> Vec<PlannedOp> {
    let set = PlannedOp::Set(path.to_owned(), value.to_vec(), data_version);
    if coord_core::mutants::active(coord_core::mutants::Mutant::MarkerUnchecked) {
        return vec![set];
    }
    vec![PlannedOp::Check(format!("{path}/{marker}"), -1), set]
}

/// The `czxid` and data version a version was made of.
fn incarnation(v: Version) -> (i64, i32) {
    let (czxid, data_version) = coord_core::raw::version_parts(v);
    (czxid as i64, data_version as u32 as i32)
}

/// Sends `ops` as one `multi`: the results, or the index and error of the op that
/// failed it (nothing written).
async fn write_multi(
    inner: &Inner,
    ops: &[PlannedOp],
) -> Result<std::result::Result<Vec<zk::MultiWriteResult>, (usize, zk::Error)>> {
    let ops = ops.to_vec();
    let acl = inner.acl();
    let committed = inner
        .call(Counter::Txn, "commit", true, |zk| async move {
            let mut writer = zk.new_multi_writer();
            for op in &ops {
                op.add_to(&mut writer, acl)?;
            }
            Ok(writer.commit().await)
        })
        .await?
        .map_err(|e| map(e, "commit", true))?;
    match committed {
        Ok(r) => Ok(Ok(r)),
        Err(zk::MultiWriteError::OperationFailed { index, source }) => Ok(Err((index, source))),
        Err(zk::MultiWriteError::RequestFailed { source }) => Err(map(source, "commit", true)),
    }
}

/// The version written by the `setData` at `index` of a `multi`.
fn set_result(results: &[zk::MultiWriteResult], index: usize) -> Result<Version> {
    match results.get(index) {
        Some(zk::MultiWriteResult::SetData { stat }) => Ok(version(stat)),
        other => Err(Error::new(
            ErrorKind::Unexpected,
            format!("unexpected multi result {other:?}"),
        )),
    }
}

/// The `VersionMismatch` of a failed check on `key`, with the version it has now (if
/// that read fails, without it: nothing was written either way).
async fn mismatch_now(inner: &Inner, key: &str, expected: Option<Version>) -> Error {
    match stats(inner, &[node_path(inner, key)]).await {
        Ok(read) => mismatch(
            key,
            expected,
            read.first().copied().flatten().as_ref().map(version),
        ),
        Err(_) => Error::new(
            ErrorKind::VersionMismatch,
            format!("config key {key:?} is no longer at version {expected:?}; nothing was written"),
        ),
    }
}

/// Every key the transaction checks or writes, sorted, once each.
fn touched_keys(txn: &Txn) -> Vec<String> {
    let mut keys = BTreeSet::new();
    for c in txn.checks() {
        if let Check::Version { key, .. } = c {
            keys.insert(key.clone());
        }
    }
    for op in txn.ops() {
        keys.insert(match op {
            Op::Put { key, .. } | Op::Delete { key } => key.clone(),
        });
    }
    keys.into_iter().collect()
}

/// The version checks against what was read (`current`): each checked key and the
/// version it must still have, or `VersionMismatch` for the first that differs.
fn check_versions<'t>(
    txn: &'t Txn,
    current: &HashMap<&str, Option<&Node>>,
) -> Result<HashMap<&'t str, Option<Version>>> {
    let mut checked = HashMap::new();
    for c in txn.checks() {
        if let Check::Version {
            key,
            version: expected,
        } = c
        {
            let actual = current
                .get(key.as_str())
                .copied()
                .flatten()
                .map(|n| version(&n.stat));
            if actual != *expected {
                return Err(mismatch(key, *expected, actual));
            }
            checked.insert(key.as_str(), *expected);
        }
    }
    Ok(checked)
}

/// A transaction as one `multi`: fence checks, version checks, then the ops, each
/// guarded by the version read.
struct Planned {
    /// Each planned op, tagged with what its failure means.
    plan: Vec<(Tag, PlannedOp)>,
    /// For each of the transaction's ops: its plan index (`usize::MAX`: nothing to
    /// report), and whether it is a delete.
    result_slots: Vec<(usize, bool)>,
    /// Index of each planned op's first `multi` result (an `AssertAbsent` takes two).
    starts: Vec<usize>,
}

fn plan(
    inner: &Inner,
    txn: &Txn,
    fences: &[&coord_core::Fence],
    current: &HashMap<&str, Option<&Node>>,
    checked: &HashMap<&str, Option<Version>>,
) -> Result<Planned> {
    let tag_for = |key: &str| {
        if checked.contains_key(key) {
            Tag::Version
        } else {
            Tag::Race
        }
    };
    let mut plan: Vec<(Tag, PlannedOp)> = Vec::new();
    for f in fences {
        plan.push((Tag::Fence, PlannedOp::Check(f.resource().to_owned(), -1)));
    }
    let ops_keys: BTreeSet<&str> = txn
        .ops()
        .iter()
        .map(|op| match op {
            Op::Put { key, .. } | Op::Delete { key } => key.as_str(),
        })
        .collect();
    for (key, expected) in checked {
        if ops_keys.contains(key) {
            continue; // the op itself carries the check
        }
        let path = node_path(inner, key);
        match (expected, current.get(key).copied().flatten()) {
            (Some(_), Some(node)) => {
                push_marker_check(&mut plan, &path, node);
                plan.push((Tag::Version, PlannedOp::Check(path, node.stat.version)));
            }
            (None, None) => plan.push((Tag::Version, PlannedOp::AssertAbsent(path))),
            _ => {
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    "version check disagrees with its read",
                ));
            }
        }
    }
    let mut result_slots = Vec::new();
    for op in txn.ops() {
        match op {
            Op::Put { key, value } => {
                let path = node_path(inner, key);
                match current.get(key.as_str()).copied().flatten() {
                    Some(node) => {
                        if checked.contains_key(key.as_str()) {
                            push_marker_check(&mut plan, &path, node);
                        }
                        result_slots.push((plan.len(), false));
                        plan.push((
                            tag_for(key),
                            PlannedOp::Set(path, value.clone(), node.stat.version),
                        ));
                    }
                    None => {
                        // A new key is born with its marker.
                        result_slots.push((plan.len(), false));
                        plan.push((tag_for(key), PlannedOp::Create(path.clone(), value.clone())));
                        plan.push((
                            tag_for(key),
                            PlannedOp::Create(format!("{path}/{}", new_marker()), Vec::new()),
                        ));
                    }
                }
            }
            Op::Delete { key } => {
                let path = node_path(inner, key);
                match current.get(key.as_str()).copied().flatten() {
                    Some(node) => {
                        if checked.contains_key(key.as_str()) {
                            push_marker_check(&mut plan, &path, node);
                        }
                        // Its children (the markers) go with the node; a child added
                        // since the read fails the node's delete (a race: read again).
                        for child in &node.children {
                            plan.push((tag_for(key), PlannedOp::Delete(format!("{path}/{child}"), -1)));
                        }
                        result_slots.push((plan.len(), true));
                        plan.push((tag_for(key), PlannedOp::Delete(path, node.stat.version)));
                    }
                    None => {
                        result_slots.push((usize::MAX, false));
                        plan.push((tag_for(key), PlannedOp::AssertAbsent(path)));
                    }
                }
            }
        }
    }
    let starts: Vec<usize> = plan
        .iter()
        .scan(0, |next, (_, p)| {
            let start = *next;
            *next += p.arity();
            Some(start)
        })
        .collect();
    Ok(Planned {
        plan,
        result_slots,
        starts,
    })
}

/// Checks the incarnation marker of a checked node, so the `multi` fails if the node
/// read was deleted and created again since (its data version starts over). Commits
/// mark every checked node before they plan, so each has one.
fn push_marker_check(plan: &mut Vec<(Tag, PlannedOp)>, path: &str, node: &Node) {
    if let Some(marker) = node.marker() {
        plan.push((Tag::Version, PlannedOp::Check(format!("{path}/{marker}"), -1)));
    }
}

/// Sends the planned `multi`: its results, or `None` when it raced with a concurrent
/// change (or found the config directory missing, now made): try again.
async fn send(inner: &Inner, planned: &Planned) -> Result<Option<Vec<zk::MultiWriteResult>>> {
    let ops: Vec<PlannedOp> = planned.plan.iter().map(|(_, p)| p.clone()).collect();
    match write_multi(inner, &ops).await? {
        Ok(r) => Ok(Some(r)),
        Err((index, source)) => {
            let which = planned.starts.iter().rposition(|s| *s <= index).unwrap_or(0);
            let (tag, op) = &planned.plan[which];
            let creates = matches!(op, PlannedOp::Create(..) | PlannedOp::AssertAbsent(_));
            if matches!(source, zk::Error::NoAuth) {
                return Err(map_at(source, "commit", true, op.path()));
            }
            match (tag, &source) {
                (Tag::Fence, _) => Err(fenced()),
                // The config directory does not exist yet.
                (_, zk::Error::NoNode) if creates => {
                    inner.ensure_dir(&config_dir(inner)).await?;
                    Ok(None)
                }
                (Tag::Version, _) => Err(Error::new(
                    ErrorKind::VersionMismatch,
                    format!("a checked config key changed before the commit ({source}); nothing was written"),
                )),
                (Tag::Race, _) => Ok(None),
            }
        }
    }
}

impl Planned {
    /// The transaction's results from the `multi`'s.
    fn op_results(&self, results: &[zk::MultiWriteResult]) -> Result<Vec<OpResult>> {
        let mut out = Vec::with_capacity(self.result_slots.len());
        for &(slot, is_delete) in &self.result_slots {
            if slot == usize::MAX {
                out.push(OpResult::Delete(false));
                continue;
            }
            if is_delete {
                out.push(OpResult::Delete(true));
                continue;
            }
            let stat = match results.get(self.starts[slot]) {
                Some(zk::MultiWriteResult::SetData { stat })
                | Some(zk::MultiWriteResult::Create { stat, .. }) => *stat,
                other => {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        format!("unexpected multi result {other:?}"),
                    ));
                }
            };
            out.push(OpResult::Put(version(&stat)));
        }
        Ok(out)
    }
}

/// Some servers return no stat for a create inside multi (ZOOKEEPER-4026): the
/// version of each key the commit created is read from its marker, created in the same
/// `multi` (so with the same `czxid`) — never from the key's node, which another writer
/// may have changed since. The write is applied whatever happens to that read, so a
/// failed read never reports the commit as not applied: it is retried, and then
/// reported with an unknown outcome (the strongest true thing a caller can act on).
async fn read_back_create_stats(inner: &Inner, planned: &Planned, out: &mut [OpResult]) -> Result<()> {
    for (i, &(slot, is_delete)) in planned.result_slots.iter().enumerate() {
        let OpResult::Put(v) = out[i] else { continue };
        if is_delete || !unknown_major(v) {
            continue;
        }
        let Some((_, marker)) = planned.plan.get(slot + 1) else {
            continue;
        };
        out[i] = OpResult::Put(created_version(inner, marker.path()).await?);
    }
    Ok(())
}

/// The path of a key node's marker.
fn key_marker(path: &str, marker: &str) -> String {
    format!("{path}/{marker}")
}

/// The version of a key node just created in one `multi` with the marker at
/// `marker_path`: the marker's `czxid` is the node's, its data version 0.
///
/// # Errors
///
/// Outcome unknown (the write *was* applied) when the marker is gone already — the key
/// deleted or its marker removed by another writer at once — so that the version the
/// write made cannot be told, or when reading it keeps failing.
async fn created_version(inner: &Inner, marker_path: &str) -> Result<Version> {
    match read_back(inner, marker_path).await? {
        Some(stat) => Ok(coord_core::raw::version(stat.czxid as u64, 0)),
        None => Err(Error::new(
            ErrorKind::Unavailable,
            "the write was applied, but another writer deleted the key (or its marker) at once, so the \
             version it made cannot be told",
        )
        .with_operation("commit")
        .with_retryable(false)
        .with_outcome_unknown(true)),
    }
}

/// The stat of `path`, just written by a commit that succeeded: read again on retryable
/// failures for a while.
///
/// # Errors
///
/// The last failure, as outcome-unknown (the commit *was* applied; only its version is
/// unknown).
async fn read_back(inner: &Inner, path: &str) -> Result<Option<zk::Stat>> {
    let deadline = tokio::time::Instant::now() + inner.options.session_timeout * 2;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
    loop {
        let p = path.to_owned();
        match inner
            .call_mapped(Counter::Read, "commit", false, |zk| async move {
                zk.check_stat(&p).await
            })
            .await
        {
            Ok(stat) => return Ok(stat),
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "coord.zk.commit_read_back_retry");
                backoff.wait().await;
            }
            Err(e) => {
                return Err(Error::new(
                    e.kind(),
                    format!(
                        "the commit was applied, but reading back its new version failed: {}",
                        e.message()
                    ),
                )
                .with_retryable(false)
                .with_outcome_unknown(true));
            }
        }
    }
}

/// One planned `multi` operation.
#[derive(Debug, Clone)]
enum PlannedOp {
    Check(String, i32),
    Set(String, Vec<u8>, i32),
    Create(String, Vec<u8>),
    Delete(String, i32),
    /// Create then delete: fails if the node exists, changes nothing otherwise.
    AssertAbsent(String),
}

impl PlannedOp {
    /// How many `multi` ops it takes.
    fn arity(&self) -> usize {
        match self {
            PlannedOp::AssertAbsent(_) => 2,
            _ => 1,
        }
    }

    /// The znode it works on.
    fn path(&self) -> &str {
        match self {
            PlannedOp::Check(p, _)
            | PlannedOp::Set(p, ..)
            | PlannedOp::Create(p, _)
            | PlannedOp::Delete(p, _)
            | PlannedOp::AssertAbsent(p) => p,
        }
    }

    /// Adds it to `w`; created nodes get `acl`.
    fn add_to(&self, w: &mut zk::MultiWriter<'_>, acl: ZkAcl) -> std::result::Result<(), zk::Error> {
        match self {
            PlannedOp::Check(p, v) => w.add_check_version(p, *v)?,
            PlannedOp::Set(p, d, v) => w.add_set_data(p, d, Some(*v))?,
            PlannedOp::Create(p, d) => w.add_create(p, d, &acl.persistent())?,
            PlannedOp::Delete(p, v) => w.add_delete(p, Some(*v))?,
            PlannedOp::AssertAbsent(p) => {
                w.add_create(p, &[], &acl.persistent())?;
                w.add_delete(p, None)?;
            }
        }
        Ok(())
    }
}

fn fenced() -> Error {
    Error::new(
        ErrorKind::Fenced,
        "the guard of this write is no longer held (its znode is gone); nothing was written",
    )
}

fn mismatch(key: &str, expected: Option<Version>, actual: Option<Version>) -> Error {
    tracing::debug!(key, ?expected, ?actual, "coord.zk.version_mismatch");
    coord_core::raw::version_mismatch(key, expected, actual)
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl KvStore for ZkClient {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        let path = node_path(&self.inner, key);
        match self
            .inner
            .call(Counter::Read, "get", false, |zk| async move {
                zk.get_data(&path).await
            })
            .await?
        {
            Ok((data, stat)) => Ok(Some(Versioned::new(data, version(&stat)))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_at(e, "get", false, &node_path(&self.inner, key))),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        read_entries(&self.inner, prefix).await
    }

    async fn first_in(&self, dir: &str, from: &str, to: &str, limit: usize) -> Result<(Vec<Entry>, usize)> {
        // The directory's names (no data), then the data of the first `limit` only, as
        // Curator's queue does. A node gone before its data was read: read again.
        let below = format!("{dir}/");
        let config = config_dir(&self.inner);
        let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_millis(200));
        for attempt in 0..FIRST_BELOW_ATTEMPTS {
            if attempt > 0 {
                backoff.wait().await;
            }
            let mut keys: Vec<String> = crate::session::children(&self.inner, &config, "list")
                .await?
                .iter()
                .map(|name| key_of(name))
                .filter(|key| {
                    key.strip_prefix(&below)
                        .is_some_and(|rest| from <= rest && rest < to)
                })
                .collect();
            keys.sort();
            let count = keys.len();
            keys.truncate(limit);
            let paths: Vec<String> = keys.iter().map(|k| node_path(&self.inner, k)).collect();
            let data = crate::session::data_of(&self.inner, &paths, "list").await?;
            if data.iter().any(Option::is_none) {
                continue;
            }
            let entries = keys
                .into_iter()
                .zip(data)
                .filter_map(|(key, d)| {
                    d.map(|(value, stat)| Entry {
                        key,
                        value,
                        version: version(&stat),
                    })
                })
                .collect();
            return Ok((entries, count));
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "the first keys below {dir:?} kept going while they were read ({FIRST_BELOW_ATTEMPTS} attempts); \
                 nothing was read — retry"
            ),
        ))
    }

    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        if let Some(single) = Single::of(&txn) {
            return single
                .run(&self.inner)
                .await
                .map(|v| vec![OpResult::Put(v)])
                .map_err(|e| e.with_operation("commit"));
        }
        // Contention backs off (with jitter) between attempts, so racing writers spread
        // out instead of colliding again at once.
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(200));
        let mut caught_up = false;
        for attempt in 0..COMMIT_ATTEMPTS {
            if attempt > 0 {
                backoff.wait().await;
            }
            if let Some(results) = commit_once(&self.inner, &txn, &mut caught_up)
                .await
                .map_err(|e| e.with_operation("commit"))?
            {
                return Ok(results);
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("the keys kept changing under {COMMIT_ATTEMPTS} attempts; nothing was written — retry"),
        )
        .with_operation("commit"))
    }

    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        // One server watch and one re-read per change for every stream of this client
        // watching the prefix (see `fanout`).
        let connected = || self.inner.session.current().state == coord_core::SessionState::Connected;
        let deadline = self.inner.options.request_deadline();
        if let Some(joined) = self.inner.config_feeds.join(prefix, deadline, connected).await {
            return joined;
        }
        let inner = self.inner.clone();
        let dir = config_dir(&inner);
        // Arm the watch before the snapshot so no change after the snapshot is missed.
        let watcher = watch::arm(&inner, &dir).await?;
        let entries = read_entries(&inner, prefix).await?;
        let follower = ConfigFollower {
            prefix: prefix.to_owned(),
            dir: dir.clone(),
            known: entries.iter().map(|e| (e.key.clone(), e.clone())).collect(),
        };
        let (stream, fan) = inner.config_feeds.start(prefix);
        tokio::spawn(watch::follow(
            inner,
            dir,
            watcher,
            ConfigEvent::Snapshot(entries),
            follower,
            fan,
        ));
        Ok(stream)
    }
}

/// What a config watch on one prefix has reported: each key's entry.
struct ConfigFollower {
    prefix: String,
    /// The config directory.
    dir: String,
    known: BTreeMap<String, Entry>,
}

impl ConfigFollower {
    /// The watched key a notification names, if any (markers and other prefixes are
    /// not).
    fn key_of_event(&self, event: &zk::WatchedEvent) -> Option<String> {
        let name = event.path.strip_prefix(&self.dir)?.strip_prefix('/')?;
        let key = key_of(name);
        (!name.contains('/') && key_matches_prefix(&key, &self.prefix)).then_some(key)
    }
}

impl DirFollower for ConfigFollower {
    type Event = ConfigEvent;

    /// The keys the notifications name, re-read in one pipelined read.
    async fn changed(
        &mut self,
        inner: &Inner,
        events: Option<&[zk::WatchedEvent]>,
    ) -> Result<Vec<ConfigEvent>> {
        let Some(events) = events else {
            // Reconnected: changes during the outage may not be replayed; re-read, diff.
            return Ok(diff(&mut self.known, read_entries(inner, &self.prefix).await?));
        };
        let keys: BTreeSet<String> = events.iter().filter_map(|e| self.key_of_event(e)).collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let paths: Vec<String> = keys.iter().map(|k| node_path(inner, k)).collect();
        let data = crate::session::data_of(inner, &paths, "watch").await?;
        let mut out = Vec::new();
        for (key, read) in keys.into_iter().zip(data) {
            match read {
                Some((value, stat)) => {
                    let version = version(&stat);
                    if self.known.get(&key).map(|e| e.version) != Some(version) {
                        let entry = Entry { key, value, version };
                        self.known.insert(entry.key.clone(), entry.clone());
                        out.push(ConfigEvent::Put(entry));
                    }
                }
                None => {
                    if self.known.remove(&key).is_some() {
                        out.push(ConfigEvent::Delete(key));
                    }
                }
            }
        }
        Ok(out)
    }

    async fn resnapshot(&mut self, inner: &Inner) -> Result<ConfigEvent> {
        let entries = read_entries(inner, &self.prefix).await?;
        self.known = entries.iter().map(|e| (e.key.clone(), e.clone())).collect();
        Ok(ConfigEvent::Snapshot(entries))
    }

    fn current(&self) -> ConfigEvent {
        ConfigEvent::Snapshot(self.known.values().cloned().collect())
    }

    fn resync() -> ConfigEvent {
        ConfigEvent::Resync
    }
}

/// The events that bring `known` to `now`, applied to `known`.
fn diff(known: &mut BTreeMap<String, Entry>, now: Vec<Entry>) -> Vec<ConfigEvent> {
    let mut out = Vec::new();
    let present: BTreeSet<String> = now.iter().map(|e| e.key.clone()).collect();
    let gone: Vec<String> = known.keys().filter(|k| !present.contains(*k)).cloned().collect();
    for k in gone {
        known.remove(&k);
        out.push(ConfigEvent::Delete(k));
    }
    for e in now {
        if known.get(&e.key).map(|k| k.version) != Some(e.version) {
            known.insert(e.key.clone(), e.clone());
            out.push(ConfigEvent::Put(e));
        }
    }
    out
}
