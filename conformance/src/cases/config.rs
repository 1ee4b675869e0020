//! Config cases: versions, compare-and-set, listing, atomic commits, ordered watches,
//! `Resync` on gaps.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_core::{ConfigEvent, ConfigStore, Entry, ErrorKind, OpResult, Txn};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, next_event, retrying, through_short_outage, within};

const QUICK: Duration = Duration::from_secs(10);

/// get/put/delete round trip, with a new version on each write.
pub async fn put_get_delete(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    ensure!(a.get("k").await?.is_none(), "fresh key exists");
    let v1 = a.put("k", b"one".to_vec()).await?;
    let got = a.get("k").await?.context("key missing after put")?;
    ensure!(
        got.value == b"one" && got.version == v1,
        "read {got:?}, wrote version {v1}"
    );
    let v2 = a.put("k", b"two".to_vec()).await?;
    ensure!(v2 != v1, "version unchanged by a write");
    ensure!(a.delete("k").await?, "delete of an existing key reported absent");
    ensure!(a.get("k").await?.is_none(), "key exists after delete");
    ensure!(!a.delete("k").await?, "delete of a missing key reported present");
    let big = vec![7u8; coord_core::MAX_VALUE_LEN];
    a.put("big", big.clone()).await?;
    ensure!(
        a.get("big").await?.context("big missing")?.value == big,
        "largest value not stored intact"
    );
    Ok(())
}

/// Values given as any byte-like type (`&str`, `String`, `&[u8]`, arrays, `Vec<u8>`) are
/// stored as their bytes, for config, campaign and proclaim alike; JSON helpers round-trip
/// a struct with its version, compare-and-set it, and name a value that is not JSON of
/// the type asked for as `Decode`.
pub async fn typed_values(ctx: Ctx) -> CaseResult {
    use coord_core::Election as _;
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Limits {
        rps: u32,
        zones: Vec<String>,
    }
    let a = ctx.client().await?;
    a.put("str", "text").await?;
    a.put("string", String::from("owned")).await?;
    a.put("slice", &b"\x00\x01"[..]).await?;
    a.put("array", [1u8, 2, 3]).await?;
    for (key, want) in [
        ("str", &b"text"[..]),
        ("string", b"owned"),
        ("slice", b"\x00\x01"),
        ("array", &[1, 2, 3]),
    ] {
        let got = a.get(key).await?.with_context(|| format!("{key} missing"))?;
        ensure!(got.value == want, "{key} read back as {:?}", got.value);
    }

    let limits = Limits {
        rps: 100,
        zones: vec!["a".into(), "b".into()],
    };
    let v1 = a.put_json("limits", &limits).await?;
    let read = a.get_json::<Limits>("limits").await?.context("limits missing")?;
    ensure!(
        read.value == limits && read.version == v1,
        "read back {read:?}, wrote {v1}"
    );
    let raw = a.get("limits").await?.context("limits missing")?;
    ensure!(
        raw.value == br#"{"rps":100,"zones":["a","b"]}"#,
        "stored as {:?}, not plain JSON other tools can read",
        String::from_utf8_lossy(&raw.value)
    );
    let v2 = a
        .compare_and_set_json("limits", Some(v1), &Limits { rps: 5, ..limits })
        .await?;
    let stale = a
        .compare_and_set_json(
            "limits",
            Some(v1),
            &Limits {
                rps: 1,
                zones: vec![],
            },
        )
        .await;
    ensure!(
        matches!(&stale, Err(e) if e.kind() == ErrorKind::VersionMismatch),
        "a stale typed compare-and-set gave {stale:?}"
    );
    let listed = a.list("limits").await?;
    let entry = listed.first().context("limits not listed")?.json::<Limits>()?;
    ensure!(entry.value.rps == 5 && entry.version == v2, "listed {entry:?}");
    let wrong = a.get_json::<Vec<u64>>("str").await;
    ensure!(
        matches!(&wrong, Err(e) if e.kind() == ErrorKind::Decode),
        "decoding text as a list gave {wrong:?}"
    );

    let mut leading = a.campaign("typed", "node-1").await?;
    ensure!(
        leading.value() == b"node-1",
        "campaign value {:?}",
        leading.value()
    );
    leading.proclaim(String::from("node-1 at 10.0.0.1")).await?;
    let leader = a.leader("typed").await?.context("no leader")?;
    ensure!(
        leader.value == b"node-1 at 10.0.0.1",
        "leader value {:?}",
        leader.value
    );
    leading.resign().await?;
    Ok(())
}

/// Compare-and-set with a stale version fails with `VersionMismatch` and changes nothing.
pub async fn cas_rejects_stale_version(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let v1 = a.put("k", b"1".to_vec()).await?;
    let v2 = b.compare_and_set("k", Some(v1), b"2".to_vec()).await?;
    let err = a
        .compare_and_set("k", Some(v1), b"3".to_vec())
        .await
        .err()
        .context("stale CAS succeeded")?;
    ensure!(err.kind() == ErrorKind::VersionMismatch, "got {err}");
    let now = a.get("k").await?.context("k missing")?;
    ensure!(
        now.value == b"2" && now.version == v2,
        "stale CAS changed the key: {now:?}"
    );
    Ok(())
}

/// CAS with `None` creates only if absent.
pub async fn cas_create_if_absent(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.compare_and_set("k", None, b"a".to_vec()).await?;
    let err = b
        .compare_and_set("k", None, b"b".to_vec())
        .await
        .err()
        .context("second create succeeded")?;
    ensure!(err.kind() == ErrorKind::VersionMismatch, "got {err}");
    ensure!(a.get("k").await?.context("k")?.value == b"a");
    let err = a
        .compare_and_set(
            "missing",
            Some(a.get("k").await?.context("k")?.version),
            b"x".to_vec(),
        )
        .await
        .err()
        .context("CAS on a missing key succeeded")?;
    ensure!(err.kind() == ErrorKind::VersionMismatch, "got {err}");
    Ok(())
}

/// A version from before a delete-and-recreate is stale (no ABA).
pub async fn cas_detects_recreate(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let v1 = a.put("k", b"1".to_vec()).await?;
    a.delete("k").await?;
    a.put("k", b"1".to_vec()).await?;
    let err = a
        .compare_and_set("k", Some(v1), b"2".to_vec())
        .await
        .err()
        .context("a version from before delete+recreate was accepted (ABA)")?;
    ensure!(err.kind() == ErrorKind::VersionMismatch, "got {err}");
    Ok(())
}

/// `list` is segment-wise and sorted.
pub async fn list_prefix_is_segment_wise(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    for k in ["a/y", "ab", "a", "a/x", "a/x/deep", "b"] {
        a.put(k, k.as_bytes().to_vec()).await?;
    }
    let keys = |v: Vec<Entry>| v.into_iter().map(|e| e.key).collect::<Vec<_>>();
    let under_a = keys(a.list("a").await?);
    ensure!(
        under_a == ["a", "a/x", "a/x/deep", "a/y"],
        "list(a) = {under_a:?}"
    );
    let all = keys(a.list("").await?);
    ensure!(
        all == ["a", "a/x", "a/x/deep", "a/y", "ab", "b"],
        "list('') = {all:?}"
    );
    ensure!(a.list("zz").await?.is_empty());
    Ok(())
}

/// A commit applies all ops or none.
pub async fn commit_all_or_nothing(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let va = a.put("a", b"1".to_vec()).await?;
    a.put("a", b"2".to_vec()).await?;
    let err = a
        .commit(
            Txn::new()
                .check_version("a", va)
                .put("b", b"x".to_vec())
                .delete("a"),
        )
        .await
        .err()
        .context("commit with a stale check succeeded")?;
    ensure!(err.kind() == ErrorKind::VersionMismatch, "got {err}");
    ensure!(a.get("b").await?.is_none(), "failed commit wrote b");
    ensure!(
        a.get("a").await?.context("a")?.value == b"2",
        "failed commit touched a"
    );
    let va = a.get("a").await?.context("a")?.version;
    let results = a
        .commit(
            Txn::new()
                .check_version("a", va)
                .check_absent("b")
                .put("b", b"x".to_vec())
                .delete("a")
                .delete("none"),
        )
        .await?;
    ensure!(results.len() == 3, "results {results:?}");
    ensure!(
        matches!(results[0], OpResult::Put(_))
            && results[1] == OpResult::Delete(true)
            && results[2] == OpResult::Delete(false),
        "results {results:?}"
    );
    ensure!(
        a.get("a").await?.is_none() && a.get("b").await?.is_some(),
        "commit not fully applied"
    );
    Ok(())
}

/// A watch yields a snapshot, then every change in order.
pub async fn watch_snapshot_then_ordered_changes(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("w/0", b"init".to_vec()).await?;
    a.put("other", b"x".to_vec()).await?;
    let mut w = b.watch("w").await?;
    match next_event(&mut w, QUICK, "snapshot").await? {
        ConfigEvent::Snapshot(entries) => {
            ensure!(
                entries.len() == 1 && entries[0].key == "w/0" && entries[0].value == b"init",
                "{entries:?}"
            )
        }
        other => bail!("first event {other:?}, expected Snapshot"),
    }
    a.put("w/1", b"a".to_vec()).await?;
    a.put("w/1", b"b".to_vec()).await?;
    a.put("wx", b"not mine".to_vec()).await?;
    a.put("w/2", b"c".to_vec()).await?;
    a.delete("w/1").await?;
    let want = [
        ("put", "w/1", "a"),
        ("put", "w/1", "b"),
        ("put", "w/2", "c"),
        ("delete", "w/1", ""),
    ];
    for (i, (kind, key, value)) in want.iter().enumerate() {
        let ev = next_event(&mut w, QUICK, "change").await?;
        let ok = match (&ev, *kind) {
            (ConfigEvent::Put(e), "put") => e.key == *key && e.value == value.as_bytes(),
            (ConfigEvent::Delete(k), "delete") => k == key,
            _ => false,
        };
        ensure!(ok, "event {i}: got {ev:?}, expected {kind} {key}={value}");
    }
    Ok(())
}

/// A watch's snapshot of more keys than one read returns (120 keys of 4 KiB: etcd reads
/// it in two pages, ZooKeeper in two multiReads; 120 is under etcd's 128 operations per
/// `Txn`) is whole and of one moment: while a writer commits every key at once with a
/// rising generation, each of 12 snapshots holds all 120 keys, of one generation. Read in pages at different
/// revisions, a snapshot would mix two commits.
pub async fn watch_snapshot_of_many_keys_is_one_moment(ctx: Ctx) -> CaseResult {
    const KEYS: usize = 120;
    const SNAPSHOTS: usize = 12;
    let (writer, reader) = (ctx.client().await?, ctx.client().await?);
    let all = |generation: usize| {
        (0..KEYS).fold(Txn::new(), |txn, i| {
            let mut value = generation.to_string().into_bytes();
            value.resize(4 << 10, b' ');
            txn.put(format!("many/k{i:03}"), value)
        })
    };
    writer.commit(all(0)).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let storm = tokio::spawn({
        let (writer, stop, committed) = (writer.clone(), stop.clone(), committed.clone());
        async move {
            let mut n = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match writer.commit(all(n)).await {
                    Ok(_) => {
                        committed.store(n, std::sync::atomic::Ordering::Relaxed);
                        n += 1;
                    }
                    // A commit whose keys changed under it (ZooKeeper): asked again.
                    Err(e) if e.kind() == ErrorKind::Unavailable && !e.outcome_unknown() => {}
                    Err(e) => return Err(anyhow::anyhow!(e)),
                }
            }
            Ok(n)
        }
    });
    let mut generations_seen = std::collections::BTreeSet::new();
    // The writer under way first, so snapshots are taken while it commits. A writer
    // that failed says why (on a cluster, a member killed meanwhile: the harness runs
    // the case again); a leader election may hold its commits up to the expiry wait.
    within(
        QUICK.max(ctx.expiry_wait()),
        "the writer's first commits",
        async {
            while committed.load(std::sync::atomic::Ordering::Relaxed) < 2 && !storm.is_finished() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        },
    )
    .await?;
    if storm.is_finished() {
        let ended = storm.await.context("writer")?;
        bail!("the writer ended before its second commit: {ended:?}");
    }
    let during = committed.load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..SNAPSHOTS {
        let mut w = reader.watch("many").await?;
        match next_event(&mut w, QUICK, "snapshot").await? {
            ConfigEvent::Snapshot(entries) => {
                let generations: std::collections::BTreeSet<String> = entries
                    .iter()
                    .map(|e| String::from_utf8_lossy(&e.value).trim_end().to_owned())
                    .collect();
                ensure!(
                    entries.len() == KEYS && generations.len() == 1,
                    "snapshot {i}: {} keys of generations {generations:?}",
                    entries.len()
                );
                generations_seen.extend(generations);
            }
            other => bail!("first event {other:?}, expected Snapshot"),
        }
    }
    let after = committed.load(std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let commits = storm.await.context("writer")??;
    ensure!(
        after > during,
        "no commit landed while the {SNAPSHOTS} snapshots were read: the case judged nothing"
    );
    println!(
        "[{}] {SNAPSHOTS} snapshots of {KEYS} keys, each of one generation ({} generations across them, {commits} commits)",
        reader.kind(),
        generations_seen.len()
    );
    Ok(())
}

/// Under rapid writes a watch delivers changes in order and ends on the final value.
pub async fn watch_delivers_final_value(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut w = b.watch("seq").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    for i in 0..50u32 {
        a.put("seq", i.to_string().into_bytes()).await?;
    }
    let mut last: Option<u32> = None;
    loop {
        let ev = next_event(&mut w, QUICK, "reaching the final value").await?;
        let value = match ev {
            ConfigEvent::Put(e) => std::str::from_utf8(&e.value)?.parse::<u32>()?,
            ConfigEvent::Snapshot(entries) => match entries.first() {
                Some(e) => std::str::from_utf8(&e.value)?.parse::<u32>()?,
                None => continue,
            },
            ConfigEvent::Resync => {
                last = None;
                continue;
            }
            ConfigEvent::Delete(k) => bail!("unexpected delete of {k}"),
            other => bail!("unexpected event {other:?}"),
        };
        if let Some(prev) = last {
            ensure!(value > prev, "value {value} delivered after {prev}: out of order");
        }
        last = Some(value);
        if value == 49 {
            return Ok(());
        }
    }
}

/// Watching a key sees the key and keys below it, not siblings sharing its text.
pub async fn watch_key_is_segment_wise(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let mut w = a.watch("k").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    a.put("kx", b"no".to_vec()).await?;
    a.put("k/child", b"yes".to_vec()).await?;
    match next_event(&mut w, QUICK, "child change").await? {
        ConfigEvent::Put(e) => ensure!(
            e.key == "k/child",
            "saw {e:?}: a sibling key leaked into the watch"
        ),
        other => bail!("got {other:?}"),
    }
    Ok(())
}

/// A gap the watch cannot fill is reported as `Resync` followed by a fresh snapshot
/// with the current state — never a silent miss.
pub async fn watch_resync_on_gap(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("g/keep", b"1".to_vec()).await?;
    a.put("g/gone", b"1".to_vec()).await?;
    let mut w = b.watch("g").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    ctx.factory().begin_watch_gap(&b).await?;
    a.put("g/keep", b"2".to_vec()).await?;
    a.delete("g/gone").await?;
    a.put("g/new", b"3".to_vec()).await?;
    ctx.factory().end_watch_gap(&b).await?;
    let mut saw_resync = false;
    loop {
        match next_event(&mut w, ctx.expiry_wait(), "events after the gap").await? {
            ConfigEvent::Resync => saw_resync = true,
            ConfigEvent::Snapshot(entries) => {
                ensure!(saw_resync, "snapshot after a gap without a preceding Resync");
                let view: Vec<(String, Vec<u8>)> = entries.into_iter().map(|e| (e.key, e.value)).collect();
                let want = vec![
                    ("g/keep".to_owned(), b"2".to_vec()),
                    ("g/new".to_owned(), b"3".to_vec()),
                ];
                ensure!(view == want, "snapshot after Resync {view:?}, expected {want:?}");
                return Ok(());
            }
            other => bail!(
                "event {other:?} across an unrecoverable gap: changes were delivered as if nothing was missed"
            ),
        }
    }
}

/// The snapshot reflects the state when `watch` returns: a change made right after it
/// returns is delivered as a change, not folded into the snapshot.
pub async fn watch_snapshot_is_taken_at_call(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    a.put("s/old", b"1".to_vec()).await?;
    let mut w = a.watch("s").await?;
    a.put("s/new", b"2".to_vec()).await?;
    match next_event(&mut w, QUICK, "snapshot").await? {
        ConfigEvent::Snapshot(entries) => {
            let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
            ensure!(
                keys == ["s/old"],
                "snapshot {keys:?} includes a change made after watch returned"
            );
        }
        other => bail!("first event {other:?}, expected Snapshot"),
    }
    match next_event(&mut w, QUICK, "change after the call").await? {
        ConfigEvent::Put(e) => ensure!(e.key == "s/new" && e.value == b"2", "got {e:?}"),
        other => bail!("got {other:?}, expected Put(s/new)"),
    }
    Ok(())
}

/// A commit whose answer arrives and whose link is then cut for a session timeout
/// (before any follow-up request gets through) is reported applied, or as of unknown
/// outcome — never as not applied when it was: five creating commits, each followed by
/// such a cut, each checked against the key afterwards. (A follow-up read must not
/// decide a write's outcome.)
pub async fn applied_commit_is_never_reported_not_applied(ctx: Ctx) -> CaseResult {
    let client = ctx.client().await?;
    let links = ctx.factory().links(&client)?;
    let mut failed = 0;
    for round in 0..6 {
        let key = format!("k{round}");
        // The commit's own reads come first on some backends: cut after its first,
        // second or third answer.
        for link in links.all() {
            link.reset_after_reply(round % 3 + 1, ctx.session_timeout());
        }
        let outcome = client.commit(Txn::new().put(&key, b"v".to_vec())).await;
        let there = retrying(|| client.get(&key)).await?.is_some();
        match outcome {
            Ok(_) => ensure!(there, "round {round}: a commit reported applied left no key"),
            Err(e) if e.outcome_unknown() => failed += 1,
            Err(e) => {
                ensure!(
                    !there,
                    "round {round}: the commit failed with {e}, saying it was not applied, but the key is there"
                );
                failed += 1;
            }
        }
        for link in links.all() {
            link.pass();
        }
    }
    tracing::info!(failed, "commits that reported a failure");
    Ok(())
}

/// A watch keeps delivering changes made after its client reconnected on the same
/// session, not only the re-read on reconnect: the watch is registered again with the
/// server.
pub async fn watch_follows_changes_after_a_reconnect(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    a.put("k", b"0".to_vec()).await?;
    let mut w = b.watch("k").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    through_short_outage(&ctx, &b, async {
        eventually(ctx.session_timeout() * 2, "reconnected", || async {
            Ok(b.session_state() == coord_core::SessionState::Connected)
        })
        .await
    })
    .await?;
    for i in 1..=5u32 {
        a.put("k", i.to_string().into_bytes()).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        let ev = next_event(&mut w, QUICK, "the changes after the reconnect").await?;
        let entry = match ev {
            ConfigEvent::Put(e) => e,
            ConfigEvent::Snapshot(entries) => match entries.into_iter().next() {
                Some(e) => e,
                None => continue,
            },
            ConfigEvent::Resync => continue,
            ConfigEvent::Delete(k) => bail!("unexpected delete of {k}"),
            other => bail!("unexpected event {other:?}"),
        };
        if entry.value == b"5" {
            return Ok(());
        }
    }
}

/// Last-writer-wins puts never fail for contention: eight clients put one key 25 times
/// each at once, and every put succeeds (a backend that writes with an optimistic check
/// retries, backing off, rather than giving up). Only connection trouble (an unknown
/// outcome, a lost session) is sent again.
pub async fn contended_puts_all_succeed(ctx: Ctx) -> CaseResult {
    let clients = ctx.clients(8).await?;
    let mut writers = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        writers.push(tokio::spawn(async move {
            for n in 0..25u32 {
                loop {
                    match c.put("hot", format!("{i}:{n}").into_bytes()).await {
                        Ok(_) => break,
                        // Connection trouble (a member killed under the suite on a
                        // cluster) is no contention: that put is sent again.
                        Err(e)
                            if e.outcome_unknown()
                                || matches!(e.kind(), ErrorKind::SessionLost | ErrorKind::Timeout) =>
                        {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            coord_core::Result::Ok(())
        }));
    }
    for w in writers {
        within(Duration::from_secs(30), "a writer's puts", w)
            .await??
            .map_err(|e: coord_core::Error| anyhow::anyhow!("a put under contention failed: {e}"))?;
    }
    Ok(())
}

/// A list of one prefix is not disturbed by writes to other keys: while four clients
/// create, rewrite and delete keys under `churn/` as fast as they can, 30 lists of
/// `mine/` (70 keys: more than one read chunk on ZooKeeper) each succeed with exactly
/// its keys. Only connection trouble (a member killed under the suite on a cluster) is
/// read again; a list refused because other keys kept changing fails the case.
pub async fn list_ignores_writes_to_other_keys(ctx: Ctx) -> CaseResult {
    let reader = ctx.client().await?;
    let mut expected = Vec::new();
    for i in 0..70u32 {
        let key = format!("mine/{i:03}");
        reader.put(&key, i.to_string().into_bytes()).await?;
        expected.push(key);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut churners = Vec::new();
    for (i, c) in ctx.clients(4).await?.into_iter().enumerate() {
        let stop = stop.clone();
        churners.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let key = format!("churn/{i}/{}", n % 8);
                // Creates and deletes change the directory's children; puts of a key
                // that exists change a node. Errors here are not the case's subject.
                let _ = c.put(&key, n.to_string().into_bytes()).await;
                if n.is_multiple_of(2) {
                    let _ = c.delete(&key).await;
                }
            }
        }));
    }
    let mut outcome = Ok(());
    let mut lists = 0;
    while lists < 30 {
        match within(Duration::from_secs(30), "a list under churn", reader.list("mine")).await? {
            Ok(entries) => {
                let keys: Vec<String> = entries.into_iter().map(|e| e.key).collect();
                if keys != expected {
                    outcome = Err(anyhow::anyhow!("list(mine) under churn = {keys:?}"));
                    break;
                }
                lists += 1;
            }
            Err(e)
                if e.outcome_unknown() || matches!(e.kind(), ErrorKind::SessionLost | ErrorKind::Timeout) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                outcome = Err(anyhow::anyhow!(
                    "list(mine) failed while only other keys changed (after {lists} lists): {e}"
                ));
                break;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in churners {
        let _ = within(Duration::from_secs(30), "a churner stops", c).await?;
    }
    outcome
}

/// Several watches of one prefix on one client: each snapshot is taken between its own
/// call and return (a later watch of the prefix is not handed an older state the client
/// already saw), each stream gets every change, and the watches do not multiply the
/// client's reads per change (ZooKeeper: one re-read per change for all of them).
pub async fn watches_of_one_prefix_share_their_reads(ctx: Ctx) -> CaseResult {
    const WATCHES: usize = 40;
    const PUTS: u32 = 5;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut streams = Vec::new();
    for i in 0..WATCHES {
        // A write just before the call is in the snapshot; one just after is a change.
        b.put("fan/before", i.to_string().into_bytes()).await?;
        let mut w = a.watch("fan").await?;
        a.put("fan/after", i.to_string().into_bytes()).await?;
        match next_event(&mut w, QUICK, "snapshot").await? {
            ConfigEvent::Snapshot(entries) => {
                let value = |key: &str| {
                    entries
                        .iter()
                        .find(|e| e.key == key)
                        .map(|e| String::from_utf8_lossy(&e.value).into_owned())
                };
                ensure!(
                    value("fan/before").as_deref() == Some(i.to_string().as_str()),
                    "watch {i}: the snapshot shows fan/before = {:?}, written before the call as {i}",
                    value("fan/before")
                );
                let before = i.checked_sub(1).map(|p| p.to_string());
                ensure!(
                    value("fan/after") == before,
                    "watch {i}: the snapshot shows fan/after = {:?}, expected {before:?} (the write after the call folded in)",
                    value("fan/after")
                );
            }
            other => bail!("watch {i}: first event {other:?}, expected Snapshot"),
        }
        streams.push(w);
    }
    // Every stream sees the last write of the setup.
    let last = (WATCHES - 1).to_string().into_bytes();
    for (i, w) in streams.iter_mut().enumerate() {
        until_value(w, "fan/after", &last)
            .await
            .with_context(|| format!("watch {i} after the setup"))?;
    }
    let before = a.stats();
    for n in 0..PUTS {
        let value = format!("put{n}").into_bytes();
        b.put("fan/key", value.clone()).await?;
        for (i, w) in streams.iter_mut().enumerate() {
            until_value(w, "fan/key", &value)
                .await
                .with_context(|| format!("watch {i}, put {n}"))?;
        }
    }
    let spent = a.stats().since(&before);
    println!(
        "[{}] {WATCHES} watches of one prefix, {PUTS} puts: {} requests, {} watches set",
        a.kind(),
        spent.data_requests(),
        spent.watches_set
    );
    ensure!(
        spent.data_requests() <= 2 * u64::from(PUTS) + 2,
        "{} requests for {PUTS} puts seen by {WATCHES} watches of one client: the watches read each change apart",
        spent.data_requests()
    );
    Ok(())
}

/// Reads `w` until `key` has `value` (in a put or a snapshot).
async fn until_value(
    w: &mut futures::stream::BoxStream<'static, coord_core::Result<ConfigEvent>>,
    key: &str,
    value: &[u8],
) -> anyhow::Result<()> {
    loop {
        match next_event(w, QUICK, "a change").await? {
            ConfigEvent::Put(e) if e.key == key && e.value == value => return Ok(()),
            ConfigEvent::Snapshot(entries) if entries.iter().any(|e| e.key == key && e.value == value) => {
                return Ok(());
            }
            _ => {}
        }
    }
}

/// A second watch of a prefix the client already watches returns while the prefix is
/// being written without pause, as a first watch does. (A review found ZooKeeper's
/// shared feed took a joiner only after a round with nothing left to carry: while a key
/// was written faster than the client's read round trip, `watch()` did not return until
/// the writes stopped.)
pub async fn watch_joining_a_busy_prefix_returns(ctx: Ctx) -> CaseResult {
    use futures::StreamExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    b.put("busy/k", b"0".to_vec()).await?;
    let mut first = a.watch("busy").await?;
    // A slow link for the watching client: each of its reads spans several writes.
    ctx.factory().delay(&a, Duration::from_millis(30)).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let _ = b.put("busy/k", n.to_string().into_bytes()).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        }
    });
    let reader = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(Ok(_)) = first.next().await {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A first watch of another prefix, for comparison.
    let t = tokio::time::Instant::now();
    let fresh = tokio::time::timeout(Duration::from_secs(10), a.watch("calm")).await;
    let fresh_took = t.elapsed();
    let seen_before = seen.load(Ordering::Relaxed);
    let t = tokio::time::Instant::now();
    let joining = a.watch("busy");
    tokio::pin!(joining);
    let joined = tokio::time::timeout(QUICK, &mut joining).await.is_ok();
    let seen_during = seen.load(Ordering::Relaxed) - seen_before;
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap_or(0);
    let after_stop = if joined {
        None
    } else {
        let t2 = tokio::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), &mut joining).await;
        Some((r.is_ok(), t2.elapsed()))
    };
    let took = t.elapsed();
    reader.abort();
    ctx.factory().delay(&a, Duration::ZERO).await.ok();
    ensure!(
        joined,
        "a second watch of a prefix the client watches did not return within {QUICK:?} while another \
         client wrote one key every 5 ms ({writes} writes; a first watch of another prefix took \
         {fresh_took:?}, ok: {}; the first stream got {seen_during} events meanwhile); once the \
         writes stopped it returned: {after_stop:?} (total {took:?})",
        fresh.is_ok()
    );
    Ok(())
}

/// During an outage, a second watch of a prefix the client already watches fails (or
/// returns) as a first watch does, instead of waiting the outage out (`Barrier::wait`
/// documents `Unavailable`/`Timeout` "if the watch cannot start"; a review found a
/// joiner of a shared ZooKeeper feed waited for the connection without a deadline).
pub async fn watch_joining_during_an_outage_does_not_wait_it_out(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let _first = a.watch("o").await?;
    let outage = ctx.session_timeout() * 5;
    ctx.factory().suspend(&a, outage).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = tokio::time::Instant::now();
    let (fresh, joined) = tokio::join!(
        async {
            let r = tokio::time::timeout(outage * 2, a.watch("p")).await;
            (r.map(|r| r.map(drop).map_err(|e| e.kind())), t.elapsed())
        },
        async {
            let r = tokio::time::timeout(outage * 2, a.watch("o")).await;
            (r.map(|r| r.map(drop).map_err(|e| e.kind())), t.elapsed())
        }
    );
    println!("outage {outage:?}: first watch {fresh:?}; joining watch {joined:?}");
    ensure!(
        joined.1 <= fresh.1 + ctx.session_timeout(),
        "during an outage of {outage:?}, a first watch of another prefix ended after {:?} with {:?}; \
         a second watch of the watched prefix waited {:?} (ended with {:?})",
        fresh.1,
        fresh.0,
        joined.1,
        joined.0
    );
    Ok(())
}

/// A watch joining a prefix the client already watches, while other prefixes change
/// and the client's link is slow, still gets a snapshot holding every write made before
/// its call. (A review found ZooKeeper's shared feed could hand a joiner the state at
/// the end of a round that read nothing — one of other prefixes' notifications — from
/// before the joiner's call.)
pub async fn watch_joining_beside_other_prefixes_is_fresh(ctx: Ctx) -> CaseResult {
    use futures::StreamExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const JOINS: u32 = 20;
    let (a, b, c, d) = (
        ctx.client().await?,
        ctx.client().await?,
        ctx.client().await?,
        ctx.client().await?,
    );
    b.put("fan/before", b"start".to_vec()).await?;
    let mut first = a.watch("fan").await?;
    let drain = tokio::spawn(async move { while let Some(Ok(_)) = first.next().await {} });
    ctx.factory().delay(&a, Duration::from_millis(100)).await?;
    // Another key of the prefix written without pause keeps the feed's rounds reading
    // over the slow link; other prefixes, written as often, end rounds that read nothing
    // of "fan".
    let stop = Arc::new(AtomicBool::new(false));
    let churn = |client: coord_core::Client, key: &'static str| {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let _ = client.put(key, n.to_string().into_bytes()).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let churns = [churn(c, "zz/x"), churn(d, "fan/k")];
    let mut outcome = Ok(());
    for i in 0..JOINS {
        let value = format!("v{i}");
        b.put("fan/before", value.clone().into_bytes()).await?;
        let mut w = a.watch("fan").await?;
        match next_event(&mut w, QUICK, "snapshot").await? {
            ConfigEvent::Snapshot(entries) => {
                let seen = entries
                    .iter()
                    .find(|e| e.key == "fan/before")
                    .map(|e| String::from_utf8_lossy(&e.value).into_owned());
                if seen.as_deref() != Some(value.as_str()) {
                    outcome = Err(anyhow::anyhow!(
                        "join {i}: the snapshot shows fan/before = {seen:?}, written as {value:?} before the call"
                    ));
                    break;
                }
            }
            other => {
                outcome = Err(anyhow::anyhow!(
                    "join {i}: first event {other:?}, expected Snapshot"
                ));
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for churn in churns {
        let _ = churn.await;
    }
    drain.abort();
    ctx.factory().delay(&a, Duration::ZERO).await?;
    outcome
}
