//! Registry: keys `<ns>/services/<service>/<id>` under the client's lease, holding the
//! instance as JSON; re-created on every new lease; `watch` = range at revision R, then
//! watch from R+1.

use std::collections::BTreeMap;

use async_trait::async_trait;
use coord_core::raw::{Counter, InstanceStore, InstanceTracker, RegistryStore};
use coord_core::{Error, ErrorKind, RegistryEvent, Result, ServiceInstance};
use etcd_client as etcd;
use futures::stream::BoxStream;

use crate::EtcdClient;
use crate::session::Inner;
use crate::watch::{self, Kv, Raw};

/// Creates the instance key under the current lease. Ok if it exists under our lease;
/// `Unavailable` (retryable) if a key of one of our earlier leases still holds it;
/// `AlreadyExists` if another live client owns it.
pub(crate) async fn create_instance(inner: &Inner, key: &str, data: &[u8]) -> Result<()> {
    let lease = inner.lease()?;
    let put = etcd::TxnOp::put(
        key,
        data.to_vec(),
        Some(etcd::PutOptions::new().with_lease(lease.id)),
    );
    let resp = inner
        .at_incarnation(
            Counter::Txn,
            "register",
            key,
            0,
            vec![put],
            vec![etcd::TxnOp::get(key, None)],
        )
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
        .call(Counter::Txn, "deregister", true, move |mut c: etcd::KvClient| {
            let k = k.clone();
            async move {
                c.txn(
                    etcd::Txn::new()
                        .when([etcd::Compare::lease(k.clone(), etcd::CompareOp::Equal, lease.id)])
                        .and_then([etcd::TxnOp::delete(k, None)]),
                )
                .await
            }
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::Closed => Ok(()),
        Err(e) => Err(e),
    }
}

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl InstanceStore for EtcdClient {
    async fn create_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        create_instance(&self.inner, path, data).await
    }

    async fn update_instance(&self, path: &str, data: &[u8]) -> Result<()> {
        let Ok(lease) = self.inner.lease() else {
            return Ok(());
        };
        let (k, value) = (path.to_owned(), data.to_vec());
        self.inner
            .call(
                Counter::Txn,
                "update registration",
                true,
                move |mut c: etcd::KvClient| {
                    let (k, value) = (k.clone(), value.clone());
                    async move {
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
                    }
                },
            )
            .await
            .map(|_| ())
    }

    async fn delete_instance(&self, path: &str) -> Result<()> {
        delete_own(&self.inner, path).await
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

// The backend contract: plumbing, kept out of users' docs.
#[doc(hidden)]
#[async_trait]
impl RegistryStore for EtcdClient {
    async fn instances(&self, dir: &str) -> Result<Vec<ServiceInstance>> {
        let dir = dir.to_owned();
        let (_, kvs) = watch::range(&self.inner, &format!("{dir}/")).await?;
        Ok(decode(&dir, kvs).into_values().collect())
    }

    async fn watch_instances(&self, dir: &str) -> Result<BoxStream<'static, Result<RegistryEvent>>> {
        let dir = dir.to_owned();
        let mut known = InstanceTracker::default();
        let d = dir.clone();
        watch::follow(self.inner.clone(), format!("{dir}/"), move |raw| match raw {
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
