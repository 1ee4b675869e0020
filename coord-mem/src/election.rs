//! Elections on the in-memory cluster: candidates `<ns>/elections/<name>/<session hex>`
//! holding the leader value; the lowest creation revision leads.

use async_trait::async_trait;
use coord_core::grant;
use coord_core::{
    Counter, Election, FencingToken, LeaderInfo, LeaderTracker, Leadership, Result, validate_name,
};
use futures::stream::BoxStream;

use crate::client::MemClient;
use crate::contender::{acquire, children};
use crate::watch::{self, Raw};

impl MemClient {
    fn election_dir(&self, name: &str) -> String {
        self.inner.key(&format!("elections/{name}"))
    }
}

#[async_trait]
impl Election for MemClient {
    async fn campaign(&self, name: &str, value: Vec<u8>) -> Result<Leadership> {
        grant::campaign("mem", name, value, |value| {
            acquire(
                &self.inner,
                &self.inner.elections,
                name,
                self.election_dir(name),
                value,
                true,
            )
        })
        .await
    }

    #[tracing::instrument(level = "debug", name = "coord.leader", skip(self), fields(backend = "mem"))]
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_name("election name", name).map_err(|e| e.with_operation("leader"))?;
        let dir = self.election_dir(name);
        self.inner
            .request(Counter::Read, |s| {
                children(s, &dir)
                    .min_by_key(|(_, d)| d.create_rev)
                    .map(|(_, d)| LeaderInfo {
                        token: FencingToken(d.create_rev),
                        value: d.value.clone(),
                    })
            })
            .map_err(|e| e.with_operation("leader"))
    }

    #[tracing::instrument(level = "debug", name = "coord.observe", skip(self), fields(backend = "mem"))]
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<LeaderInfo>>>> {
        validate_name("election name", name).map_err(|e| e.with_operation("observe"))?;
        let dir = self.election_dir(name);
        let prefix = format!("{dir}/");
        let mut tracker = LeaderTracker::default();
        let is_child = move |k: &str| {
            k.len() > prefix.len() && k.starts_with(&prefix) && !k[prefix.len()..].contains('/')
        };
        let watch_prefix = format!("{dir}/");
        watch::spawn(self.inner.clone(), watch_prefix, move |raw| {
            match raw {
                Raw::Snapshot(entries) => tracker.reset(
                    entries
                        .into_iter()
                        .filter(|(k, _)| is_child(k))
                        .map(|(k, d)| (k, FencingToken(d.create_rev), d.value)),
                ),
                Raw::Event(e) if is_child(&e.key) => match e.data {
                    Some(d) => tracker.put(e.key, FencingToken(d.create_rev), d.value),
                    None => tracker.remove(&e.key),
                },
                Raw::Event(_) | Raw::Resync => return Vec::new(),
            }
            tracker.changed().into_iter().collect()
        })
        .map_err(|e| e.with_operation("watch"))
    }
}
