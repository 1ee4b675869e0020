//! Service registry on the in-memory cluster: instances at
//! `<ns>/services/<service>/<id>` as JSON, bound to the session, re-created after loss.

use std::collections::BTreeMap;

use async_trait::async_trait;
use coord_core::raw::{Counter, InstanceStore, InstanceTracker, RegistrationEntry, RegistryStore};
use coord_core::{RegistryEvent, Result, ServiceInstance};
use futures::stream::BoxStream;

use crate::MemClient;
use crate::watch::{self, Raw};

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl InstanceStore for MemClient {
    async fn create_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        let (session, _) = self.inner.live_session()?;
        let entry = RegistrationEntry {
            path: path.to_owned(),
            data: data.to_vec(),
        };
        let created = crate::registry::create_instance(&self.inner, session, &entry);
        if created.is_ok() {
            self.inner.reply(true).await?;
        }
        created
    }

    async fn update_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        let session = self.inner.slot().id;
        let (key, value) = (path.to_owned(), data.to_vec());
        self.inner
            .call_write(Counter::Write, move |s| {
                if s.get(&key).is_some_and(|d| d.owner == Some(session)) {
                    s.put(&key, value, None);
                }
            })
            .await
    }

    async fn delete_instance(&self, path: &str) -> Result<()> {
        let session = self.inner.slot().id;
        let key = path.to_owned();
        self.inner
            .call_write(Counter::Txn, move |s| {
                if s.get(&key).is_some_and(|d| d.owner == Some(session)) {
                    s.delete(&key);
                }
            })
            .await
    }
}

fn decode_children(
    dir: &str,
    entries: impl Iterator<Item = (String, Vec<u8>)>,
) -> BTreeMap<String, ServiceInstance> {
    let prefix_len = dir.len() + 1;
    entries
        .filter(|(k, _)| k.len() > prefix_len && !k[prefix_len..].contains('/'))
        .filter_map(|(k, v)| match ServiceInstance::decode(&v) {
            Ok(i) => Some((k[prefix_len..].to_owned(), i)),
            Err(e) => {
                tracing::warn!(key = %k, error = %e, "coord.mem.undecodable_instance");
                None
            }
        })
        .collect()
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl RegistryStore for MemClient {
    async fn instances(&self, dir: &str) -> Result<Vec<ServiceInstance>> {
        let dir = dir.to_owned();
        let prefix = format!("{dir}/");
        let entries = self
            .inner
            .call(Counter::Read, |s| {
                s.range(&prefix)
                    .map(|(k, d)| (k.clone(), d.value.clone()))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|e| e.with_operation("instances"))?;
        Ok(decode_children(&dir, entries.into_iter()).into_values().collect())
    }

    async fn watch_instances(&self, dir: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        let dir = dir.to_owned();
        let prefix = format!("{dir}/");
        let mut known = InstanceTracker::default();
        watch::follow(self.inner.clone(), prefix, move |raw| match raw {
            Raw::Snapshot(entries) => {
                vec![known.snapshot(decode_children(
                    &dir,
                    entries.into_iter().map(|(k, d)| (k, d.value)),
                ))]
            }
            Raw::Resync => vec![RegistryEvent::Resync],
            Raw::Event(e) => {
                let id = match e.key.get(dir.len() + 1..) {
                    Some(id) if !id.contains('/') => id.to_owned(),
                    _ => return Vec::new(),
                };
                let event = match e.data {
                    None => known.remove(&id),
                    Some(d) => decode_children(&dir, std::iter::once((e.key.clone(), d.value)))
                        .remove(&id)
                        .and_then(|instance| known.put(id, instance)),
                };
                event.into_iter().collect()
            }
        })
        .map_err(|e| e.with_operation("watch"))
    }
}

/// Creates a registration's key under session `id`: replaces a key of a session that is
/// gone; `AlreadyExists` while another live session holds it.
pub(crate) fn create_instance(
    inner: &crate::session::Inner,
    id: u64,
    entry: &RegistrationEntry,
) -> Result<()> {
    let key = entry.path.clone();
    let data = entry.data.clone();
    let created = inner.request(Counter::Txn, |s| match s.get(&key) {
        Some(existing) if existing.owner == Some(id) => true,
        Some(existing) if existing.owner.is_some_and(|o| s.session_alive(o)) => false,
        _ => {
            s.delete(&key);
            s.put(&key, data, Some(id));
            true
        }
    })?;
    if created {
        Ok(())
    } else {
        Err(crate::error::instance_taken(&entry.path))
    }
}
