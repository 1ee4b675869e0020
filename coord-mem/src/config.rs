//! Config store on the in-memory cluster: persistent keys `<ns>/config/<key>`; version =
//! modification revision.

use async_trait::async_trait;
use coord_core::mutants::{self, Mutant};
use coord_core::raw::{Counter, KvStore, key_matches_prefix};
use coord_core::{Check, ConfigEvent, Entry, Op, OpResult, Result, Txn, Version, Versioned};
use futures::stream::BoxStream;

use crate::MemClient;
use crate::error;
use crate::watch::{self, Raw};
use coord_mem_cluster::KeyData;

fn version(d: &KeyData) -> Version {
    coord_core::raw::version(d.mod_rev, 0)
}

impl MemClient {
    fn config_root(&self) -> String {
        self.inner.key("config")
    }

    /// The namespace-relative config key of a full key, if it is one.
    fn config_key<'a>(root: &str, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(root)?.strip_prefix('/')
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl KvStore for MemClient {
    async fn get(&self, key: &str) -> Result<Option<Versioned<Vec<u8>>>> {
        let full = format!("{}/{key}", self.config_root());
        self.inner
            .call(Counter::Read, |s| {
                s.get(&full).map(|d| Versioned::new(d.value.clone(), version(d)))
            })
            .await
            .map_err(|e| e.with_operation("get"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>> {
        let root = self.config_root();
        let scan = format!("{root}/{prefix}");
        self.inner
            .call(Counter::Read, |s| {
                s.range(&scan)
                    .filter_map(|(k, d)| {
                        let rel = Self::config_key(&root, k)?;
                        key_matches_prefix(rel, prefix).then(|| Entry {
                            key: rel.to_owned(),
                            value: d.value.clone(),
                            version: version(d),
                        })
                    })
                    .collect()
            })
            .await
            .map_err(|e| e.with_operation("list"))
    }

    async fn first_in(&self, dir: &str, from: &str, to: &str, limit: usize) -> Result<(Vec<Entry>, usize)> {
        let root = self.config_root();
        let scan = format!("{root}/{dir}/");
        let (start, end) = (format!("{scan}{from}"), format!("{scan}{to}"));
        self.inner
            .call(Counter::Read, |s| {
                // Keys only, past the first `limit`: no value is copied for the count.
                let mut first = Vec::new();
                let mut count = 0;
                for (k, d) in s.range(&scan) {
                    if k.as_str() < start.as_str() {
                        continue;
                    }
                    if k.as_str() >= end.as_str() {
                        break;
                    }
                    let Some(rel) = Self::config_key(&root, k) else {
                        continue;
                    };
                    count += 1;
                    if first.len() < limit {
                        first.push(Entry {
                            key: rel.to_owned(),
                            value: d.value.clone(),
                            version: version(d),
                        });
                    }
                }
                (first, count)
            })
            .await
            .map_err(|e| e.with_operation("list"))
    }

    async fn commit(&self, txn: Txn) -> Result<Vec<OpResult>> {
        let root = self.config_root();
        self.inner
            .call_write(Counter::Txn, move |s| {
                let full = |k: &str| format!("{root}/{k}");
                for check in txn.checks() {
                    if mutants::active(Mutant::FenceIgnored) {
                        break;
                    }
                    if let Check::Fence(fence) = check {
                        let held = s
                            .get(fence.resource())
                            .is_some_and(|d| d.create_rev == fence.token().get());
                        if !held {
                            return Err(error::fenced(fence.token()));
                        }
                    }
                }
                for check in txn.checks() {
                    if let Check::Version {
                        key,
                        version: expected,
                    } = check
                    {
                        let actual = s.get(&full(key)).map(version);
                        if actual != *expected {
                            tracing::debug!(key, ?expected, ?actual, "coord.mem.version_mismatch");
                            return Err(coord_core::raw::version_mismatch(key, *expected, actual));
                        }
                    }
                }
                Ok(txn
                    .ops()
                    .iter()
                    .map(|op| match op {
                        Op::Put { key, value } => {
                            OpResult::Put(version(&s.put(&full(key), value.clone(), None)))
                        }
                        Op::Delete { key } => OpResult::Delete(s.delete(&full(key))),
                    })
                    .collect())
            })
            .await
            .and_then(|r| r)
            .map_err(|e| e.with_operation("commit"))
    }

    async fn watch(&self, prefix: &str) -> Result<BoxStream<'static, Result<ConfigEvent>>> {
        let root = self.config_root();
        let scan = format!("{root}/{prefix}");
        let prefix = prefix.to_owned();
        watch::follow(self.inner.clone(), scan, move |raw| match raw {
            Raw::Snapshot(entries) => vec![ConfigEvent::Snapshot(
                entries
                    .into_iter()
                    .filter_map(|(k, d)| {
                        let rel = Self::config_key(&root, &k)?;
                        key_matches_prefix(rel, &prefix).then(|| Entry {
                            key: rel.to_owned(),
                            value: d.value.clone(),
                            version: version(&d),
                        })
                    })
                    .collect(),
            )],
            Raw::Resync => vec![ConfigEvent::Resync],
            Raw::Event(e) => match Self::config_key(&root, &e.key) {
                Some(rel) if key_matches_prefix(rel, &prefix) => vec![match e.data {
                    Some(d) => ConfigEvent::Put(Entry {
                        key: rel.to_owned(),
                        version: version(&d),
                        value: d.value,
                    }),
                    None => ConfigEvent::Delete(rel.to_owned()),
                }],
                _ => Vec::new(),
            },
        })
        .map_err(|e| e.with_operation("watch"))
    }
}
