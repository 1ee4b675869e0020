//! Bad input: every kind of bad name, value and connection string is rejected with a
//! typed error before any network call, and nothing panics.

use anyhow::{Context as _, ensure};
use coord_core::{
    ConfigStore, Election, ErrorKind, Lock, MAX_VALUE_LEN, Registry, Result as CoordResult, ServiceInstance,
    Txn,
};

use crate::harness::{CaseResult, Ctx};

const BAD_NAMES: &[&str] = &[
    "", "/", "/a", "a/", "a//b", ".", "..", "a/../b", "a b", "ä", "a\0b", "a:b", "a*",
];

fn expect_kind<T>(what: &str, r: CoordResult<T>, kind: ErrorKind) -> CaseResult {
    match r {
        Ok(_) => anyhow::bail!("{what}: accepted, expected {kind:?}"),
        Err(e) => {
            ensure!(e.kind() == kind, "{what}: got {e}, expected {kind:?}");
            ensure!(!e.message().is_empty(), "{what}: empty error message");
            Ok(())
        }
    }
}

/// Bad names are rejected by every primitive with `InvalidArgument`.
pub async fn bad_names_rejected_everywhere(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let too_long = "a".repeat(coord_core::MAX_NAME_LEN + 1);
    let names: Vec<&str> = BAD_NAMES.iter().copied().chain([too_long.as_str()]).collect();
    for name in names {
        let inv = ErrorKind::InvalidArgument;
        expect_kind(&format!("lock({name:?})"), c.lock(name).await, inv)?;
        expect_kind(&format!("try_lock({name:?})"), c.try_lock(name).await, inv)?;
        expect_kind(
            &format!("campaign({name:?})"),
            c.campaign(name, vec![]).await,
            inv,
        )?;
        expect_kind(&format!("leader({name:?})"), c.leader(name).await, inv)?;
        expect_kind(&format!("observe({name:?})"), c.observe(name).await, inv)?;
        let inst = ServiceInstance::new("ok", "h:1");
        expect_kind(&format!("register({name:?})"), c.register(name, inst).await, inv)?;
        expect_kind(&format!("instances({name:?})"), c.instances(name).await, inv)?;
        expect_kind(
            &format!("registry watch({name:?})"),
            Registry::watch(&c, name).await,
            inv,
        )?;
        expect_kind(&format!("get({name:?})"), c.get(name).await, inv)?;
        expect_kind(&format!("put({name:?})"), c.put(name, vec![]).await, inv)?;
        expect_kind(
            &format!("cas({name:?})"),
            c.compare_and_set(name, None, vec![]).await,
            inv,
        )?;
        expect_kind(&format!("delete({name:?})"), c.delete(name).await, inv)?;
        if !name.is_empty() {
            expect_kind(&format!("list({name:?})"), c.list(name).await, inv)?;
            expect_kind(
                &format!("config watch({name:?})"),
                ConfigStore::watch(&c, name).await,
                inv,
            )?;
        }
        if !name.contains('/') || name == "/" {
            let bad_id = ServiceInstance::new(name, "h:1");
            expect_kind(
                &format!("register(id {name:?})"),
                c.register("svc", bad_id).await,
                inv,
            )?;
        }
    }
    expect_kind(
        "register(id with '/')",
        c.register("svc", ServiceInstance::new("a/b", "h")).await,
        ErrorKind::InvalidArgument,
    )?;
    ensure!(c.list("").await?.is_empty(), "bad input wrote something");
    Ok(())
}

/// Values over the limit are rejected with `InvalidArgument` everywhere.
pub async fn oversized_values_rejected(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let big = vec![0u8; MAX_VALUE_LEN + 1];
    let inv = ErrorKind::InvalidArgument;
    expect_kind("put(oversized)", c.put("k", big.clone()).await, inv)?;
    // A plain put of a megabyte (over the value limit and a transaction's byte limit
    // both) is told what is wrong with its value, not to split a transaction.
    let said = c.put("k", vec![0u8; 1 << 20]).await;
    ensure!(
        matches!(&said, Err(e) if e.to_string().contains("value") && !e.to_string().contains("transaction")),
        "a 1 MiB put was refused with {said:?}"
    );
    expect_kind(
        "cas(oversized)",
        c.compare_and_set("k", None, big.clone()).await,
        inv,
    )?;
    expect_kind(
        "commit(oversized)",
        c.commit(Txn::new().put("k", big.clone())).await,
        inv,
    )?;
    expect_kind("campaign(oversized)", c.campaign("e", big.clone()).await, inv)?;
    expect_kind(
        "lock_with(an oversized holder)",
        c.lock_with("l", coord_core::LockOptions::new().holder(big.clone()))
            .await,
        inv,
    )?;
    expect_kind(
        "rw_lock.with_options(an oversized holder)",
        c.rw_lock("rw")?
            .with_options(coord_core::LockOptions::new().holder(big.clone()))
            .map(|_| ()),
        inv,
    )?;
    let fat = ServiceInstance::new("n1", "h").with_metadata("blob", "x".repeat(MAX_VALUE_LEN));
    expect_kind("register(oversized)", c.register("svc", fat).await, inv)?;
    let mut l = c.campaign("e", b"ok".to_vec()).await?;
    expect_kind("proclaim(oversized)", l.proclaim(big).await, inv)?;
    ensure!(l.value() == b"ok", "a rejected proclaim changed the value");
    ensure!(c.get("k").await?.is_none(), "a rejected write stored something");
    Ok(())
}

/// Malformed transactions are rejected before sending.
pub async fn bad_transactions_rejected(ctx: Ctx) -> CaseResult {
    let c = ctx.client().await?;
    let inv = ErrorKind::InvalidArgument;
    expect_kind("empty txn", c.commit(Txn::new()).await, inv)?;
    expect_kind(
        "duplicate key",
        c.commit(Txn::new().put("k", vec![1]).delete("k")).await,
        inv,
    )?;
    let mut many = Txn::new();
    for i in 0..=coord_core::MAX_TXN_OPS {
        many = many.put(format!("k{i}"), vec![]);
    }
    expect_kind("oversized txn", c.commit(many).await, inv)?;
    // Each value within its limit, the whole over the request limits of the servers.
    let big = vec![7u8; 600_000];
    expect_kind(
        "two 600 kB values",
        c.commit(Txn::new().put("k", big.clone()).put("k0", big)).await,
        inv,
    )?;
    let mut heavy = Txn::new();
    for i in 0..20 {
        heavy = heavy.put(format!("k{i}"), vec![1u8; 60_000]);
    }
    expect_kind("20 values of 60 kB", c.commit(heavy).await, inv)?;
    expect_kind(
        "bad check key",
        c.commit(Txn::new().check_absent("a//b").put("k", vec![])).await,
        inv,
    )?;
    ensure!(
        c.get("k").await?.is_none() && c.get("k0").await?.is_none(),
        "a rejected txn wrote"
    );
    Ok(())
}

/// Bad connection strings fail with `ConfigInvalid`, never a panic or a hang.
pub async fn bad_connection_strings_rejected(ctx: Ctx) -> CaseResult {
    let base = ctx.factory().url_base();
    let scheme = base
        .split("://")
        .next()
        .context("url_base has no scheme")?
        .to_owned();
    let bad = [
        format!("{base}/ns?unknown_option=1"),
        format!("{base}/ns?session_timeout=fast&lease_ttl=fast&session_ttl=fast"),
        format!("{base}/a//b"),
        format!("{base}/a/../b"),
        format!("{base}/ns?x"),
        format!("{base}/ns?a=1&a=1"),
        format!("{base}/bad name"),
        format!("{scheme}:/missing-slash"),
        "no-scheme-at-all".to_owned(),
        // Empty path segments are not the root namespace.
        format!("{base}///"),
        format!("{base}//"),
        // Too many hosts to be a cluster: refused with a short message.
        format!("{scheme}://{}/ns", vec!["127.0.0.1:1"; 10_000].join(",")),
    ];
    for url in bad {
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            ctx.factory().connect_url(&url),
        )
        .await
        .with_context(|| format!("{url:?}: connect hung instead of rejecting"))?;
        let shown: String = url.chars().take(60).collect();
        if let Err(e) = &r {
            ensure!(
                e.to_string().len() < 1_000,
                "connect({shown:?}…): a {}-byte error message",
                e.to_string().len()
            );
        }
        expect_kind(&format!("connect({shown:?}…)"), r, ErrorKind::ConfigInvalid)?;
    }
    Ok(())
}
