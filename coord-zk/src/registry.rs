//! Registry: ephemeral znodes `<root>/services/<service>/<id>` holding the instance as
//! JSON; re-created after session loss; watched with a persistent recursive watch.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use coord_core::raw::{Counter, InstanceStore, InstanceTracker, RegistryStore};
use coord_core::{Error, ErrorKind, RegistryEvent, Result, ServiceInstance};
use futures::stream::BoxStream;
use zookeeper_client as zk;

use crate::ZkClient;
use crate::error::{map, map_at};
use crate::session::Inner;
use crate::watch::{self, DirFollower};

/// Creates the instance node on the current session. Ok if it exists and is ours;
/// `Unavailable` (retryable) if a node of one of our earlier sessions still holds it;
/// `AlreadyExists` if another live client owns it.
pub(crate) async fn create_instance(inner: &Inner, path: &str, data: &[u8]) -> Result<()> {
    let dir = path
        .rsplit_once('/')
        .map(|(d, _)| d.to_owned())
        .unwrap_or_default();
    let mut dir_attempts = 0;
    loop {
        let (p, d) = (path.to_owned(), data.to_vec());
        let options = inner.acl().ephemeral();
        let created = inner
            .call(Counter::Write, "register", true, |zk| async move {
                zk.create(&p, &d, &options).await
            })
            .await?;
        match created {
            Ok(_) => return Ok(()),
            // The service's directory is missing, or was just deleted as an empty
            // container: make it again.
            Err(zk::Error::NoNode) if dir_attempts < 5 => {
                inner.ensure_dir(&dir).await?;
                dir_attempts += 1;
            }
            Err(e @ (zk::Error::NodeExists | zk::Error::ConnectionLoss)) => {
                let p = path.to_owned();
                // After a lost connection the create may have landed: a failed read of
                // the node leaves that open, and says so.
                let maybe_made = e == zk::Error::ConnectionLoss;
                let stat = inner
                    .call_mapped(Counter::Read, "register", false, |zk| async move {
                        zk.check_stat(&p).await
                    })
                    .await
                    .map_err(|e| {
                        let unknown = maybe_made || e.outcome_unknown();
                        e.with_outcome_unknown(unknown)
                    })?;
                let Some(stat) = stat else { continue };
                if stat.ephemeral_owner == inner.session_id() {
                    return Ok(());
                }
                if inner.is_past_session(stat.ephemeral_owner) {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "the instance node of this client's previous session has not expired yet",
                    ));
                }
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("instance {path:?} is registered by another client; pick a unique id"),
                ));
            }
            Err(e) => return Err(map_at(e, "register", true, &dir)),
        }
    }
}

/// Deletes the instance node if the current session owns it.
async fn delete_own(inner: &Inner, path: &str) -> Result<()> {
    let p = path.to_owned();
    let stat = match inner
        .call(Counter::Read, "deregister", false, |zk| async move {
            zk.check_stat(&p).await
        })
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(map(e, "deregister", false)),
        Err(e) if matches!(e.kind(), ErrorKind::Closed | ErrorKind::SessionLost) => return Ok(()),
        Err(e) => return Err(e),
    };
    let Some(stat) = stat else { return Ok(()) };
    if stat.ephemeral_owner != inner.session_id() {
        return Ok(());
    }
    let p = path.to_owned();
    match inner
        .call(Counter::Write, "deregister", true, |zk| async move {
            zk.delete(&p, Some(stat.version)).await
        })
        .await?
    {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        // Updated between our read and the delete: read again.
        Err(zk::Error::BadVersion) => Err(Error::new(
            ErrorKind::Unavailable,
            "the instance changed while it was being deleted; retry",
        )),
        Err(e) => Err(map(e, "deregister", true)),
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl InstanceStore for ZkClient {
    async fn create_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        create_instance(&self.inner, path, data).await
    }

    async fn update_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        let p = path.to_owned();
        let stat = self
            .inner
            .call_mapped(Counter::Read, "update registration", false, |zk| async move {
                zk.check_stat(&p).await
            })
            .await?;
        match stat {
            Some(stat) if stat.ephemeral_owner == self.inner.session_id() => {
                let (p, d) = (path.to_owned(), data.to_vec());
                self.inner
                    .call_mapped(Counter::Write, "update registration", true, |zk| async move {
                        zk.set_data(&p, &d, Some(stat.version)).await
                    })
                    .await
                    .map(|_| ())
            }
            // Not (yet) re-registered: the new data is used when it is.
            _ => Ok(()),
        }
    }

    async fn delete_instance(&self, path: &str) -> Result<()> {
        delete_own(&self.inner, path).await
    }
}

/// Reads every instance under `dir` (ids are the child names).
async fn read_instances(inner: &Inner, dir: &str) -> Result<BTreeMap<String, ServiceInstance>> {
    // One state of the whole service, also above 64 instances.
    let read = crate::session::children_with_data(inner, dir, |_| true, "instances").await?;
    let mut out = BTreeMap::new();
    for (id, bytes, stat) in read {
        if stat.ephemeral_owner == 0 {
            continue; // a nested service's directory, not an instance
        }
        match ServiceInstance::decode(&bytes) {
            Ok(i) => {
                out.insert(id, i);
            }
            Err(e) => tracing::warn!(%id, error = %e, "coord.zk.undecodable_instance"),
        }
    }
    Ok(out)
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl RegistryStore for ZkClient {
    async fn instances(&self, dir: &str) -> Result<Vec<ServiceInstance>> {
        Ok(read_instances(&self.inner, dir).await?.into_values().collect())
    }

    async fn watch_instances(&self, dir: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        // One server watch and one re-read per change for every stream of this client
        // watching the service (see `fanout`).
        let connected = || self.inner.session.current().state == coord_core::SessionState::Connected;
        let deadline = self.inner.options.request_deadline();
        if let Some(joined) = self.inner.registry_feeds.join(dir, deadline, connected).await {
            return joined;
        }
        let dir = dir.to_owned();
        let inner = self.inner.clone();
        // Arm the watch before the snapshot so no change after the snapshot is missed.
        let watcher = watch::arm(&inner, &dir).await?;
        let mut known = InstanceTracker::default();
        let first = known.snapshot(read_instances(&inner, &dir).await?);
        let follower = RegistryFollower {
            dir: dir.clone(),
            known,
        };
        let (stream, fan) = inner.registry_feeds.start(&dir);
        tokio::spawn(watch::follow(inner, dir, watcher, first, follower, fan));
        Ok(stream)
    }
}

/// What a watch on one service has reported: its instances.
struct RegistryFollower {
    dir: String,
    known: InstanceTracker,
}

impl DirFollower for RegistryFollower {
    type Event = RegistryEvent;

    /// The instances the notifications name, re-read in one pipelined read; after a
    /// reconnect, every instance.
    async fn changed(
        &mut self,
        inner: &Inner,
        events: Option<&[zk::WatchedEvent]>,
    ) -> Result<Vec<RegistryEvent>> {
        let Some(events) = events else {
            return Ok(self.known.diff_to(read_instances(inner, &self.dir).await?));
        };
        let ids: BTreeSet<&str> = events
            .iter()
            .filter_map(|e| e.path.strip_prefix(&self.dir)?.strip_prefix('/'))
            .filter(|id| !id.is_empty() && !id.contains('/'))
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let paths: Vec<String> = ids.iter().map(|id| format!("{}/{id}", self.dir)).collect();
        let data = crate::session::data_of(inner, &paths, "instances").await?;
        let mut out = Vec::new();
        for (id, read) in ids.into_iter().zip(data) {
            let event = match read {
                // A nested service's directory, not an instance.
                Some((_, stat)) if stat.ephemeral_owner == 0 => None,
                Some((bytes, _)) => match ServiceInstance::decode(&bytes) {
                    Ok(i) => self.known.put(id.to_owned(), i),
                    Err(e) => {
                        tracing::warn!(%id, error = %e, "coord.zk.undecodable_instance");
                        None
                    }
                },
                None => self.known.remove(id),
            };
            out.extend(event);
        }
        Ok(out)
    }

    async fn resnapshot(&mut self, inner: &Inner) -> Result<RegistryEvent> {
        Ok(self.known.snapshot(read_instances(inner, &self.dir).await?))
    }

    fn current(&self) -> RegistryEvent {
        self.known.current()
    }

    fn resync() -> RegistryEvent {
        RegistryEvent::Resync
    }
}
