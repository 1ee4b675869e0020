//! Registry: keys `<ns>/services/<service>/<id>` under the client's lease, holding the
//! instance as JSON; re-created on every new lease; `watch` = range at revision R, then
//! watch from R+1.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use coord_core::raw::{Counter, InstanceTracker, RegistrationEntry, RegistrationHandle};
use coord_core::{
    Error, ErrorKind, Registration, Registry, RegistryEvent, Result, ServiceInstance, SessionStatus,
    validate_name,
};
use etcd_client as etcd;
use futures::stream::BoxStream;
use tracing::Instrument;

use crate::EtcdClient;
use crate::session::Inner;
use crate::watch::{self, Kv, Raw};

/// Creates the instance key under the current lease. Ok if it exists under our lease;
/// `Unavailable` (retryable) if a key of one of our earlier leases still holds it;
/// `AlreadyExists` if another live client owns it.
pub(crate) async fn create_instance(inner: &Inner, key: &str, data: &[u8]) -> Result<()> {
    let lease = inner.lease()?;
    let (k, d) = (key.to_owned(), data.to_vec());
    let resp = inner
        .call(Counter::Txn, "register", true, |mut c| async move {
            c.txn(
                etcd::Txn::new()
                    .when([etcd::Compare::create_revision(
                        k.clone(),
                        etcd::CompareOp::Equal,
                        0,
                    )])
                    .and_then([etcd::TxnOp::put(
                        k.clone(),
                        d,
                        Some(etcd::PutOptions::new().with_lease(lease.id)),
                    )])
                    .or_else([etcd::TxnOp::get(k, None)]),
            )
            .await
        })
        .await?;
    if resp.succeeded() {
        return Ok(());
    }
    let owner = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            etcd::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.lease()),
            _ => None,
        })
        .unwrap_or(0);
    if owner == lease.id {
        Ok(())
    } else if inner.is_past_session(owner) {
        Err(Error::new(
            ErrorKind::Unavailable,
            "the instance key of this client's previous lease is not gone yet",
        ))
    } else {
        Err(Error::new(
            ErrorKind::AlreadyExists,
            format!("instance {key:?} is registered by another client; pick a unique id"),
        ))
    }
}

/// Deletes the instance key if our current lease owns it.
async fn delete_own(inner: &Inner, key: &str) -> Result<()> {
    let Ok(lease) = inner.lease() else { return Ok(()) };
    let k = key.to_owned();
    match inner
        .call(Counter::Txn, "deregister", true, |mut c| async move {
            c.txn(
                etcd::Txn::new()
                    .when([etcd::Compare::lease(k.clone(), etcd::CompareOp::Equal, lease.id)])
                    .and_then([etcd::TxnOp::delete(k, None)]),
            )
            .await
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Closed => Ok(()),
        Err(e) => Err(e),
    }
}

struct EtcdRegistration {
    inner: Arc<Inner>,
    id: u64,
    key: String,
}

#[async_trait]
impl RegistrationHandle for EtcdRegistration {
    async fn update(&self, value: Vec<u8>) -> Result<()> {
        self.inner.registrations.update(self.id, value.clone());
        let Ok(lease) = self.inner.lease() else {
            return Ok(());
        };
        let k = self.key.clone();
        self.inner
            .call(Counter::Txn, "update registration", true, |mut c| async move {
                c.txn(
                    etcd::Txn::new()
                        .when([etcd::Compare::lease(k.clone(), etcd::CompareOp::Equal, lease.id)])
                        .and_then([etcd::TxnOp::put(
                            k,
                            value,
                            Some(etcd::PutOptions::new().with_lease(lease.id)),
                        )]),
                )
                .await
            })
            .await
            .map(|_| ())
    }

    fn forget(&self) {
        self.inner.registrations.remove(self.id);
    }

    async fn delete(&self) -> Result<()> {
        delete_own(&self.inner, &self.key).await
    }

    fn session(&self) -> tokio::sync::watch::Receiver<SessionStatus> {
        self.inner.session.subscribe()
    }
}

impl EtcdClient {
    fn service_dir(&self, service: &str) -> String {
        self.inner.key(&format!("services/{service}"))
    }
}

/// Instances among `kvs` that sit directly under `dir/`, by id.
fn decode(dir: &str, kvs: impl IntoIterator<Item = Kv>) -> BTreeMap<String, ServiceInstance> {
    let prefix = format!("{dir}/");
    kvs.into_iter()
        .filter_map(|kv| {
            let id = kv.key.strip_prefix(&prefix)?.to_owned();
            if id.is_empty() || id.contains('/') {
                return None;
            }
            match ServiceInstance::decode(&kv.value) {
                Ok(i) => Some((id, i)),
                Err(e) => {
                    tracing::warn!(key = %kv.key, error = %e, "coord.etcd.undecodable_instance");
                    None
                }
            }
        })
        .collect()
}

#[async_trait]
impl Registry for EtcdClient {
    async fn register(&self, service: &str, instance: ServiceInstance) -> Result<Registration> {
        validate_name("service name", service).map_err(|e| e.with_operation("register"))?;
        let data = instance.encode().map_err(|e| e.with_operation("register"))?;
        let span = tracing::debug_span!("coord.register", backend = "etcd", service, id = %instance.id);
        let key = format!("{}/{}", self.service_dir(service), instance.id);
        create_instance(&self.inner, &key, &data)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("register"))?;
        let (id, state) = self.inner.registrations.add(RegistrationEntry {
            path: key.clone(),
            data,
        });
        let handle = EtcdRegistration {
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
        fields(backend = "etcd")
    )]
    async fn instances(&self, service: &str) -> Result<Vec<ServiceInstance>> {
        validate_name("service name", service).map_err(|e| e.with_operation("instances"))?;
        let dir = self.service_dir(service);
        let (_, kvs) = watch::range(&self.inner, &format!("{dir}/")).await?;
        Ok(decode(&dir, kvs).into_values().collect())
    }

    #[tracing::instrument(
        level = "debug",
        name = "coord.registry.watch",
        skip(self),
        fields(backend = "etcd")
    )]
    async fn watch(&self, service: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        validate_name("service name", service).map_err(|e| e.with_operation("watch"))?;
        let dir = self.service_dir(service);
        let mut known = InstanceTracker::default();
        let d = dir.clone();
        watch::open(self.inner.clone(), format!("{dir}/"), move |raw| match raw {
            Raw::Snapshot(kvs) => vec![known.snapshot(decode(&d, kvs))],
            Raw::Resync => vec![RegistryEvent::Resync],
            Raw::Put(kv) => {
                let key = kv.key.clone();
                let Some((id, instance)) = decode(&d, [kv]).into_iter().next() else {
                    tracing::debug!(%key, "coord.etcd.registry_watch_skip");
                    return Vec::new();
                };
                known.put(id, instance).into_iter().collect()
            }
            Raw::Delete(key) => match key.strip_prefix(&format!("{d}/")) {
                Some(id) => known.remove(id).into_iter().collect(),
                None => Vec::new(),
            },
        })
        .await
    }
}
