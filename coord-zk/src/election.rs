//! Elections: Curator `LeaderLatch` layout, `<root>/elections/<name>/_c_<guid>-latch-<seq>`
//! holding the leader value; the lowest sequence leads.

use async_trait::async_trait;
use coord_core::grant;
use coord_core::{Counter, Election, ErrorKind, FencingToken, LeaderInfo, Leadership, Result, validate_name};
use futures::stream::BoxStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use zookeeper_client as zk;

use crate::ZkClient;
use crate::contender::{Kind, acquire, queue};
use crate::error::map;
use crate::session::Inner;

impl ZkClient {
    /// The znode an election's candidates live under (Curator `LeaderLatch` path).
    pub fn election_path(&self, name: &str) -> String {
        self.inner.path(&format!("elections/{name}"))
    }
}

/// Reads the current leader; with `watch`, also arms a child watch on the directory and
/// a data watch on the leader's node.
async fn read_leader(
    inner: &Inner,
    dir: &str,
    watch: bool,
) -> Result<(Option<LeaderInfo>, Vec<zk::OneshotWatcher>)> {
    loop {
        let d = dir.to_owned();
        let listed = if watch {
            inner
                .call(Counter::WatchSet, "observe", false, |zk| async move {
                    zk.list_and_watch_children(&d).await.map(|(c, w)| (c, Some(w)))
                })
                .await?
        } else {
            inner
                .call(Counter::Read, "leader", false, |zk| async move {
                    zk.list_children(&d).await.map(|c| (c, None))
                })
                .await?
        };
        let (children, child_watch) = match listed {
            Ok(x) => x,
            Err(zk::Error::NoNode) if !watch => return Ok((None, Vec::new())),
            Err(zk::Error::NoNode) => {
                inner.ensure_dir(dir).await?;
                continue;
            }
            Err(e) => return Err(map(e, "leader", false)),
        };
        let mut watchers: Vec<zk::OneshotWatcher> = child_watch.into_iter().collect();
        let Some(first) = queue(children, Kind::Latch).into_iter().next() else {
            return Ok((None, watchers));
        };
        let path = format!("{dir}/{first}");
        let read = inner
            .call(
                if watch { Counter::WatchSet } else { Counter::Read },
                "leader",
                false,
                |zk| async move {
                    if watch {
                        zk.get_and_watch_data(&path)
                            .await
                            .map(|(d, s, w)| (d, s, Some(w)))
                    } else {
                        zk.get_data(&path).await.map(|(d, s)| (d, s, None))
                    }
                },
            )
            .await?;
        match read {
            Ok((value, stat, data_watch)) => {
                watchers.extend(data_watch);
                let info = LeaderInfo {
                    token: FencingToken(stat.czxid as u64),
                    value,
                };
                return Ok((Some(info), watchers));
            }
            // The leader left between the two reads: look again.
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(map(e, "leader", false)),
        }
    }
}

#[async_trait]
impl Election for ZkClient {
    async fn campaign(&self, name: &str, value: Vec<u8>) -> Result<Leadership> {
        grant::campaign("zk", name, value, |value| {
            let dir = self.election_path(name);
            acquire(
                &self.inner,
                &self.inner.elections,
                name,
                dir,
                Kind::Latch,
                value,
                true,
            )
        })
        .await
    }

    #[tracing::instrument(level = "debug", name = "coord.leader", skip(self), fields(backend = "zk"))]
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_name("election name", name).map_err(|e| e.with_operation("leader"))?;
        Ok(read_leader(&self.inner, &self.election_path(name), false)
            .await?
            .0)
    }

    #[tracing::instrument(level = "debug", name = "coord.observe", skip(self), fields(backend = "zk"))]
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<Option<LeaderInfo>>>> {
        validate_name("election name", name).map_err(|e| e.with_operation("observe"))?;
        let dir = self.election_path(name);
        let inner = self.inner.clone();
        // Read once up front so errors surface to the caller.
        let (first, mut watchers) = read_leader(&inner, &dir, true)
            .await
            .map_err(|e| e.with_operation("observe"))?;
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut shown = first.clone();
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            loop {
                if watchers.is_empty() {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                } else {
                    // Any child change, leader data change or session expiry: re-read.
                    let any =
                        futures::future::select_all(watchers.into_iter().map(|w| Box::pin(w.changed())));
                    tokio::select! {
                        _ = any => inner.stats.incr(Counter::WatchEvent),
                        _ = tx.closed() => return,
                    }
                }
                // Re-read on the current (possibly new) session, waiting out outages.
                let next = loop {
                    match read_leader(&inner, &dir, true).await {
                        Ok(x) => break x,
                        Err(e) if e.kind() == ErrorKind::Closed => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "coord.zk.observe_retry");
                            tokio::select! {
                                _ = inner.session.connected() => {}
                                _ = tx.closed() => return,
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    }
                };
                let (leader, w) = next;
                watchers = w;
                let regressed = matches!((&shown, &leader), (Some(a), Some(b)) if b.token < a.token);
                if leader != shown && !regressed {
                    shown = leader.clone();
                    if tx.send(Ok(leader)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}
