//! Service registry on the in-memory cluster: instances at
//! `<ns>/services/<service>/<id>` as JSON, bound to the session, re-created after loss.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use coord_core::raw::{Counter, InstanceTracker, RegistrationEntry, RegistrationHandle};
use coord_core::{
    Error, ErrorKind, Registration, Registry, RegistryEvent, Result, ServiceInstance, SessionStatus,
    validate_name,
};
use futures::stream::BoxStream;

use crate::client::{Inner, MemClient};
use crate::watch::{self, Raw};

struct MemRegistration {
    inner: Arc<Inner>,
    id: u64,
    key: String,
}

#[async_trait]
impl RegistrationHandle for MemRegistration {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        self.inner.registrations.update(self.id, value.clone());
        let session = self.inner.slot().id;
        let key = self.key.clone();
        self.inner.request(Counter::Write, move |s| {
            if s.get(&key).is_some_and(|d| d.owner == Some(session)) {
                s.put(&key, value, None);
            }
        })
    }

    fn forget(&self) {
        self.inner.registrations.remove(self.id);
    }

    async fn delete(&self) -> Result<()> {
        let session = self.inner.slot().id;
        let key = self.key.clone();
        self.inner.request(Counter::Txn, move |s| {
            if s.get(&key).is_some_and(|d| d.owner == Some(session)) {
                s.delete(&key);
            }
        })
    }

    fn session(&self) -> tokio::sync::watch::Receiver<SessionStatus> {
        self.inner.session.subscribe()
    }
}

impl MemClient {
    fn service_dir(&self, service: &str) -> String {
        self.inner.key(&format!("services/{service}"))
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

#[async_trait]
impl Registry for MemClient {
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration> {
        let op = "register";
        validate_name("service name", service).map_err(|e| e.with_operation(op))?;
        let data = instance.encode().map_err(|e| e.with_operation(op))?;
        let _span =
            tracing::debug_span!("coord.register", backend = "mem", service, id = %instance.id).entered();
        // (No await below: the span cannot stay entered across a suspension.)
        let (session, _) = self.inner.live_session().map_err(|e| e.with_operation(op))?;
        let key = format!("{}/{}", self.service_dir(service), instance.id);
        let created = self
            .inner
            .request(Counter::Txn, |s| match s.get(&key) {
                Some(_) => false,
                None => {
                    s.put(&key, data.clone(), Some(session));
                    true
                }
            })
            .map_err(|e| e.with_operation(op))?;
        if !created {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "instance {:?} of service {service:?} is already registered; pick a unique id",
                    instance.id
                ),
            )
            .with_operation(op));
        }
        let (id, state) = self.inner.registrations.add(RegistrationEntry {
            path: key.clone(),
            data,
        });
        let handle = MemRegistration {
            inner: self.inner.clone(),
            id,
            key,
        };
        Ok(coord_core::raw::registration(
            service,
            instance,
            Box::new(handle),
            state,
        ))
    }

    #[tracing::instrument(
        level = "debug",
        name = "coord.instances",
        skip(self),
        fields(backend = "mem")
    )]
    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>> {
        validate_name("service name", service).map_err(|e| e.with_operation("instances"))?;
        let dir = self.service_dir(service);
        let prefix = format!("{dir}/");
        let entries = self
            .inner
            .request(Counter::Read, |s| {
                s.range(&prefix)
                    .map(|(k, d)| (k.clone(), d.value.clone()))
                    .collect::<Vec<_>>()
            })
            .map_err(|e| e.with_operation("instances"))?;
        Ok(decode_children(&dir, entries.into_iter()).into_values().collect())
    }

    #[tracing::instrument(
        level = "debug",
        name = "coord.registry.watch",
        skip(self),
        fields(backend = "mem")
    )]
    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        validate_name("service name", service).map_err(|e| e.with_operation("watch"))?;
        let dir = self.service_dir(service);
        let prefix = format!("{dir}/");
        let mut known = InstanceTracker::default();
        watch::spawn(self.inner.clone(), prefix, move |raw| match raw {
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
