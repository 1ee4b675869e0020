//! The conformance suite against the in-memory backend (always runs; no server).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use coord_conformance::{Factory, Faults, ForeignWriter, RecordedWrite, Recording};
use coord_core::{Client, Error, ErrorKind, Result};
use coord_mem::{MemClient, MemCluster, MemOptions};

/// Short TTL so expiry-driven cases finish quickly.
const TTL: Duration = Duration::from_secs(1);

struct MemFactory {
    cluster: MemCluster,
}

fn mem(client: &Client) -> Result<&MemClient> {
    client
        .backend_as::<MemClient>()
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "not a mem client"))
}

/// Writes coord's config keys in the store directly (see [`ForeignWriter`]).
struct MemForeign {
    cluster: MemCluster,
    client: Client,
}

impl MemForeign {
    fn key(&self, key: &str) -> Result<String> {
        coord_conformance::util::config_key_path(&self.client, key)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))
    }
}

#[async_trait]
impl ForeignWriter for MemForeign {
    async fn put(&self, key: &str, value: &[u8]) -> Result<coord_core::Version> {
        let key = self.key(key)?;
        let data = self.cluster.with(|s| s.put(&key, value.to_vec(), None));
        Ok(coord_core::raw::version(data.mod_rev, 0))
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        Ok(self.cluster.delete_key(&self.key(key)?))
    }

    async fn read(&self, key: &str) -> Result<Option<(Vec<u8>, coord_core::Version)>> {
        let key = self.key(key)?;
        Ok(self.cluster.with(|s| {
            s.get(&key)
                .map(|d| (d.value.clone(), coord_core::raw::version(d.mod_rev, 0)))
        }))
    }

    async fn record(&self, prefix: &str) -> Result<Option<Box<dyn Recording>>> {
        self.cluster.record_writes();
        Ok(Some(Box::new(MemRecording {
            cluster: self.cluster.clone(),
            root: self.key("")?,
            prefix: self.key(prefix)?,
        })))
    }
}

/// The in-memory store's own record of every write ([`MemCluster::writes`]).
struct MemRecording {
    cluster: MemCluster,
    root: String,
    prefix: String,
}

#[async_trait]
impl Recording for MemRecording {
    async fn finish(self: Box<Self>, last: u64, _within: Duration) -> Result<Vec<RecordedWrite>> {
        Ok(self
            .cluster
            .writes(&self.prefix)
            .into_iter()
            .filter(|(revision, _, _)| *revision <= last)
            .filter_map(|(revision, key, value)| {
                Some(RecordedWrite {
                    revision,
                    key: key.strip_prefix(&self.root)?.to_owned(),
                    value,
                })
            })
            .collect())
    }
}

#[async_trait]
impl Factory for MemFactory {
    fn name(&self) -> &str {
        "mem"
    }

    fn faults(&self) -> Faults {
        Faults {
            kill_session: true,
            crash: true,
            suspend: true,
            watch_gap: true,
            // The in-memory link can be refused or silent; replies can be delayed.
            blackhole: true,
            delay: true,
            operator: true,
            // One in-memory store, no members to link to one by one.
            links: false,
            // No server process: the in-memory cluster lives in the test process.
            server_pause: false,
            server_restart: false,
            member_faults: false,
            reply_loss: true,
        }
    }

    fn session_timeout(&self) -> Duration {
        TTL
    }

    async fn open(&self, namespace: &str) -> Result<Client> {
        let options = MemOptions {
            namespace: namespace.to_owned(),
            session_ttl: TTL,
        };
        MemClient::connect(&self.cluster, options)
    }

    fn url_base(&self) -> String {
        "mem://".to_owned()
    }

    async fn connect_url(&self, url: &str) -> Result<Client> {
        coord_mem::connect(url)
    }

    async fn kill_session(&self, client: &Client) -> Result<()> {
        let id = client.session_id();
        if self.cluster.expire_session(id) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::NotFound,
                format!("session {id} is not alive"),
            ))
        }
    }

    async fn crash(&self, client: &Client) -> Result<()> {
        mem(client)?.crash();
        Ok(())
    }

    async fn suspend(&self, client: &Client, duration: Duration) -> Result<()> {
        mem(client)?.suspend(duration);
        Ok(())
    }

    fn last_heard(&self, client: &Client) -> Option<tokio::time::Instant> {
        mem(client).ok()?.last_heard()
    }

    async fn blackhole(&self, client: &Client, duration: Duration) -> Result<()> {
        mem(client)?.blackhole(duration);
        Ok(())
    }

    async fn lose_replies(&self, client: &Client, n: usize) -> Result<()> {
        mem(client)?.lose_replies(n);
        Ok(())
    }

    async fn delay(&self, client: &Client, delay: Duration) -> Result<()> {
        mem(client)?.delay_replies(delay);
        Ok(())
    }

    async fn foreign_writer(&self, client: &Client) -> Result<Box<dyn ForeignWriter>> {
        Ok(Box::new(MemForeign {
            cluster: self.cluster.clone(),
            client: client.clone(),
        }))
    }

    async fn operator_delete(&self, path: &str) -> Result<()> {
        self.cluster.delete_key(path);
        Ok(())
    }

    async fn operator_list(&self, namespace: &str) -> Result<Vec<String>> {
        Ok(self.cluster.keys_with_prefix(&format!("{namespace}/")))
    }

    async fn begin_watch_gap(&self, client: &Client) -> Result<()> {
        // Cut off for less than the TTL: watches stall, the session survives.
        mem(client)?.suspend(TTL / 2);
        Ok(())
    }

    async fn end_watch_gap(&self, client: &Client) -> Result<()> {
        self.cluster.compact();
        mem(client)?.resume();
        Ok(())
    }
}

fn main() {
    let factory: Arc<dyn Factory> = Arc::new(MemFactory {
        cluster: MemCluster::new(),
    });
    coord_conformance::run_main("mem", Some(factory), "");
}
