//! Elections: `<ns>/elections/<name>/<lease id hex>` holding the leader value, the
//! layout of etcd's `concurrency.Election` (`etcdctl elect <ns>/elections/<name>`).

use async_trait::async_trait;
use coord_core::grant;
use coord_core::{
    Counter, Election, FencingToken, LeaderInfo, LeaderTracker, Leadership, Result, validate_name,
};
use etcd_client as etcd;
use futures::stream::BoxStream;

use crate::EtcdClient;
use crate::contender::acquire;
use crate::watch::{self, Raw};

impl EtcdClient {
    /// The key prefix an election's candidates live under.
    pub fn election_prefix(&self, name: &str) -> String {
        self.inner.key(&format!("elections/{name}"))
    }
}

fn is_candidate(dir: &str, key: &str) -> bool {
    key.strip_prefix(dir)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

#[async_trait]
impl Election for EtcdClient {
    async fn campaign(&self, name: &str, value: Vec<u8>) -> Result<Leadership> {
        grant::campaign("etcd", name, value, |value| {
            let prefix = self.election_prefix(name);
            acquire(&self.inner, &self.inner.elections, name, prefix, value, true)
        })
        .await
    }

    #[tracing::instrument(level = "debug", name = "coord.leader", skip(self), fields(backend = "etcd"))]
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_name("election name", name).map_err(|e| e.with_operation("leader"))?;
        let dir = self.election_prefix(name);
        let d = format!("{dir}/");
        let resp = self
            .inner
            .call(Counter::Read, "leader", false, |mut c| async move {
                c.get(d, Some(etcd::GetOptions::new().with_prefix())).await
            })
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(watch::Kv::from)
            .filter(|kv| is_candidate(&dir, &kv.key))
            .min_by_key(|kv| kv.create_rev)
            .map(|kv| LeaderInfo {
                token: FencingToken(kv.create_rev as u64),
                value: kv.value,
            }))
    }

    #[tracing::instrument(level = "debug", name = "coord.observe", skip(self), fields(backend = "etcd"))]
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<LeaderInfo>>>> {
        validate_name("election name", name).map_err(|e| e.with_operation("observe"))?;
        let dir = self.election_prefix(name);
        let mut tracker = LeaderTracker::default();
        let d = dir.clone();
        watch::open(self.inner.clone(), format!("{dir}/"), move |raw| {
            match raw {
                Raw::Snapshot(kvs) => tracker.reset(
                    kvs.into_iter()
                        .filter(|kv| is_candidate(&d, &kv.key))
                        .map(|kv| (kv.key, FencingToken(kv.create_rev as u64), kv.value)),
                ),
                Raw::Put(kv) if is_candidate(&d, &kv.key) => {
                    tracker.put(kv.key, FencingToken(kv.create_rev as u64), kv.value)
                }
                Raw::Delete(key) if is_candidate(&d, &key) => tracker.remove(&key),
                Raw::Put(_) | Raw::Delete(_) | Raw::Resync => return Vec::new(),
            }
            tracker.changed().into_iter().collect()
        })
        .await
    }
}
