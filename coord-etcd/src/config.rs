//! Config store: persistent keys `<ns>/config/<key>`; version = `mod_revision` (unique
//! across the cluster's history, so a deleted and recreated key never reuses one);
//! commits are one `Txn` whose `Else` branch reads back what the checks looked at, so a
//! failure is told apart as `Fenced` or `VersionMismatch` in the same round trip.

use async_trait::async_trait;
use coord_core::raw::{Counter, KvStore, key_matches_prefix, version_mismatch};
use coord_core::{
    Check, ConfigEvent, Entry, Error, ErrorKind, Op, OpResult, Result, Txn, Version, Versioned,
};
use etcd_client as etcd;
use futures::stream::BoxStream;

use crate::EtcdClient;
use crate::watch::{self, Kv, Raw};

fn version(rev: i64) -> Version {
    coord_core::raw::version(rev as u64, 0)
}

impl EtcdClient {
    fn config_root(&self) -> String {
        self.inner.key("config/")
    }

    /// The deliberate bug `CasReadThenWrite` (coord's own tests only): each version check
    /// of `txn` made by a read, before the write and apart from it.
    async fn check_then_write(&self, txn: &Txn) -> Result<()> {
        for check in txn.checks() {
            if let Check::Version {
                key,
                version: expected,
            } = check
            {
                let k = format!("{}{key}", self.config_root());
                let resp = self
                    .inner
                    .call(Counter::Read, "commit", false, move |mut c: etcd::KvClient| {
                        let k = k.clone();
                        async move { c.get(k, None).await }
                    })
                    .await?;
                let actual = resp.kvs().first().map(|kv| version(kv.mod_revision()));
                if actual != *expected {
                    return Err(version_mismatch(key, *expected, actual));
                }
            }
        }
        Ok(())
    }
}

fn entry(root: &str, prefix: &str, kv: Kv) -> Option<Entry> {
    let key = kv.key.strip_prefix(root)?.to_owned();
    key_matches_prefix(&key, prefix).then(|| Entry {
        key,
        value: kv.value,
        version: version(kv.mod_rev),
    })
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl KvStore for EtcdClient {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        let k = format!("{}{key}", self.config_root());
        let resp = self
            .inner
            .call(Counter::Read, "get", false, move |mut c: etcd::KvClient| {
                let k = k.clone();
                async move { c.get(k, None).await }
            })
            .await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| Versioned::new(kv.value().to_vec(), version(kv.mod_revision()))))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        let root = self.config_root();
        let (_, kvs) = watch::range(&self.inner, &format!("{root}{prefix}")).await?;
        Ok(kvs
            .into_iter()
            .filter_map(|kv| entry(&root, prefix, kv))
            .collect())
    }

    async fn first_in(&self, dir: &str, from: &str, to: &str, limit: usize) -> Result<(Vec<Entry>, usize)> {
        // One range read with a limit: etcd sorts by key and counts the whole range.
        let root = self.config_root();
        let end = format!("{root}{dir}/{to}");
        let from = format!("{root}{dir}/{from}");
        let resp = self
            .inner
            .call(Counter::Read, "list", false, move |mut c: etcd::KvClient| {
                let from = from.clone();
                let options = etcd::GetOptions::new().with_range(end.clone());
                // A limit of 0 means none to etcd: count only then.
                let options = if limit == 0 {
                    options.with_count_only()
                } else {
                    options.with_limit(limit as i64)
                };
                async move { c.get(from, Some(options)).await }
            })
            .await?;
        let count = usize::try_from(resp.count()).unwrap_or(usize::MAX);
        let entries = resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let key = std::str::from_utf8(kv.key())
                    .ok()?
                    .strip_prefix(&root)?
                    .to_owned();
                Some(Entry {
                    key,
                    value: kv.value().to_vec(),
                    version: version(kv.mod_revision()),
                })
            })
            .collect();
        Ok((entries, count))
    }

    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        let root = self.config_root();
        let full = |k: &str| format!("{root}{k}");
        if let ([], [Op::Put { key, value }]) = (txn.checks(), txn.ops()) {
            // Nothing to check: a plain `Put`, cheaper for etcd than a `Txn`.
            let (k, v) = (full(key), value.clone());
            let resp = self
                .inner
                .call(Counter::Write, "commit", true, move |mut c: etcd::KvClient| {
                    let (k, v) = (k.clone(), v.clone());
                    async move { c.put(k, v, None).await }
                })
                .await?;
            let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
            return Ok(vec![OpResult::Put(version(rev))]);
        }
        let mut compares = Vec::new();
        let mut diagnose = Vec::new();
        for check in txn.checks() {
            match check {
                Check::Version {
                    key,
                    version: Some(v),
                } => {
                    compares.push(etcd::Compare::mod_revision(
                        full(key),
                        etcd::CompareOp::Equal,
                        coord_core::raw::version_parts(*v).0 as i64,
                    ));
                    diagnose.push(etcd::TxnOp::get(full(key), None));
                }
                Check::Version { key, version: None } => {
                    compares.push(etcd::Compare::create_revision(
                        full(key),
                        etcd::CompareOp::Equal,
                        0,
                    ));
                    diagnose.push(etcd::TxnOp::get(full(key), None));
                }
                Check::Fence(f) => {
                    compares.push(etcd::Compare::create_revision(
                        f.resource(),
                        etcd::CompareOp::Equal,
                        f.token().get() as i64,
                    ));
                    diagnose.push(etcd::TxnOp::get(f.resource(), None));
                }
            }
        }
        let ops: Vec<etcd::TxnOp> = txn
            .ops()
            .iter()
            .map(|op| match op {
                Op::Put { key, value } => etcd::TxnOp::put(full(key), value.clone(), None),
                Op::Delete { key } => etcd::TxnOp::delete(full(key), None),
            })
            .collect();
        if coord_core::mutants::active(coord_core::mutants::Mutant::CasReadThenWrite) {
            self.check_then_write(&txn).await?;
            compares.clear();
        }
        let request = etcd::Txn::new().when(compares).and_then(ops).or_else(diagnose);
        let resp = self
            .inner
            .call(Counter::Txn, "commit", true, move |mut c: etcd::KvClient| {
                let request = request.clone();
                async move { c.txn(request).await }
            })
            .await?;
        let responses = resp.op_responses();
        if !resp.succeeded() {
            // Which check failed? Fences take precedence.
            for (check, response) in txn.checks().iter().zip(&responses) {
                if let (Check::Fence(f), etcd::TxnOpResponse::Get(g)) = (check, response) {
                    let held = g
                        .kvs()
                        .first()
                        .is_some_and(|kv| kv.create_revision() == f.token().get() as i64);
                    if !held {
                        return Err(Error::new(
                            ErrorKind::Fenced,
                            format!(
                                "the guard with token {} is no longer held; nothing was written",
                                f.token()
                            ),
                        )
                        .with_operation("commit"));
                    }
                }
            }
            let mismatch = txn
                .checks()
                .iter()
                .zip(&responses)
                .find_map(|(check, response)| match (check, response) {
                    (
                        Check::Version {
                            key,
                            version: expected,
                        },
                        etcd::TxnOpResponse::Get(g),
                    ) => {
                        let actual = g.kvs().first().map(|kv| version(kv.mod_revision()));
                        (actual != *expected).then(|| version_mismatch(key, *expected, actual))
                    }
                    _ => None,
                })
                .unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::VersionMismatch,
                        "a checked config key changed; nothing was written",
                    )
                });
            tracing::debug!(error = %mismatch, "coord.etcd.version_mismatch");
            return Err(mismatch);
        }
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok(responses
            .iter()
            .map(|r| match r {
                etcd::TxnOpResponse::Delete(d) => OpResult::Delete(d.deleted() > 0),
                _ => OpResult::Put(version(rev)),
            })
            .collect())
    }

    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        let root = self.config_root();
        let scan = format!("{root}{prefix}");
        let prefix = prefix.to_owned();
        watch::follow(self.inner.clone(), scan, move |raw| match raw {
            Raw::Snapshot(kvs) => vec![ConfigEvent::Snapshot(
                kvs.into_iter()
                    .filter_map(|kv| entry(&root, &prefix, kv))
                    .collect(),
            )],
            Raw::Resync => vec![ConfigEvent::Resync],
            Raw::Put(kv) => entry(&root, &prefix, kv)
                .map(ConfigEvent::Put)
                .into_iter()
                .collect(),
            Raw::Delete(key) => match key.strip_prefix(&root) {
                Some(k) if key_matches_prefix(k, &prefix) => vec![ConfigEvent::Delete(k.to_owned())],
                _ => Vec::new(),
            },
        })
        .await
    }
}
