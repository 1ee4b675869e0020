//! What a backend provides to run the suite: independent clients in a fresh namespace,
//! and faults injected from outside the client.

use std::time::Duration;

use async_trait::async_trait;
use coord_core::{Client, Error, ErrorKind, Result};

use crate::real_server::RealServer;

/// Faults a factory can inject. A case that needs a missing one is reported ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// [`Factory::kill_session`]: end a client's session from outside (ZooKeeper: attach
    /// with the session id and password and close; etcd: revoke the lease).
    pub kill_session: bool,
    /// [`Factory::crash`]: the client process "dies": no more traffic, no cleanup.
    pub crash: bool,
    /// [`Factory::suspend`]: cut a client off from the server for a while.
    pub suspend: bool,
    /// [`Factory::begin_watch_gap`]/[`Factory::end_watch_gap`]: make a client's open
    /// watches miss history they cannot recover.
    pub watch_gap: bool,
    /// [`Factory::blackhole`]: silence a client's connection both ways, without a reset.
    pub blackhole: bool,
    /// [`Factory::delay`]: delay a client's traffic both ways.
    pub delay: bool,
    /// [`Factory::operator_delete`] and [`Factory::operator_list`]: act on the server as an
    /// operator would, beside coord.
    pub operator: bool,
    /// [`Factory::open_links`]: a client with several links (one per member, or several
    /// to a standalone server) whose faults can be set one by one.
    pub links: bool,
    /// [`Factory::pause_server`]: stop the server process (SIGSTOP) for a while.
    pub server_pause: bool,
    /// [`Factory::restart_server`]: kill the server process (SIGKILL) and start it again
    /// on its data.
    pub server_restart: bool,
    /// [`Factory::cluster`]: kill, pause and restart single members of a cluster of at
    /// least 3.
    pub member_faults: bool,
    /// [`Factory::lose_replies`]: the server applies a client's next writes, and their
    /// replies are lost.
    pub reply_loss: bool,
}

/// Another program writing coord's config keys on the server — a raw client of the
/// backend, as zkCli, kazoo, Curator or etcdctl would — for the histories that check
/// coord stays exact beside it. Each write acts on the key's own node or key.
#[async_trait]
pub trait ForeignWriter: Send + Sync {
    /// Writes `value` to config key `key` unconditionally (creating it when absent):
    /// the version coord reports for it afterwards.
    async fn put(&self, key: &str, value: &[u8]) -> Result<coord_core::Version>;

    /// Deletes config key `key` (ZooKeeper: with whatever children coord gave it):
    /// whether it existed.
    async fn delete(&self, key: &str) -> Result<bool>;

    /// Reads config key `key` as of now, past any lag of the member it is on (ZooKeeper:
    /// after a `sync`; etcd reads are linearizable): its value and the version coord
    /// reports for it.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the server does not answer (or the raw client's session
    /// expired); `InvalidArgument` for a key coord's layout cannot hold.
    async fn read(&self, key: &str) -> Result<Option<(Vec<u8>, coord_core::Version)>>;

    /// Starts recording every write to the config keys beginning with `prefix`, as the
    /// backend itself records them — where it keeps such a record (etcd: its revision
    /// history, followed by a watch of its own from the current revision). `None` where it
    /// keeps none (ZooKeeper: a watch there is a one-shot trigger, not a record).
    ///
    /// # Errors
    ///
    /// `Unavailable` when the starting revision cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned [`Recording`] without [`Recording::finish`] leaves its
    /// watch task running until the runtime ends; call `finish`.
    async fn record(&self, prefix: &str) -> Result<Option<Box<dyn Recording>>> {
        let _ = prefix;
        Ok(None)
    }
}

/// One write of a backend's own record ([`ForeignWriter::record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedWrite {
    /// The revision it committed at: on etcd shared by the writes of one transaction
    /// (mem gives each write a revision of its own).
    pub revision: u64,
    /// The config key, as coord names it.
    pub key: String,
    /// The value it set; `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// A recording started by [`ForeignWriter::record`].
#[async_trait]
pub trait Recording: Send {
    /// Every write recorded, in commit order, up to and including revision `last` (the
    /// revision of a write that the caller made last), waiting at most `within` for the
    /// record to reach it.
    ///
    /// # Errors
    ///
    /// `Unavailable` when the record broke off and could not be resumed from where it
    /// stopped (history compacted meanwhile), or did not reach `last` in time.
    async fn finish(self: Box<Self>, last: u64, within: Duration) -> Result<Vec<RecordedWrite>>;
}

/// A backend under test.
///
/// Cases call [`Factory::open`] for every client they need, each in the case's own
/// fresh namespace, so cases never see each other's data.
///
/// # Errors
///
/// A fault or operator method fails with `Unsupported` when the factory cannot inject it
/// (its [`Faults`] flag is off), `NotFound` for a client it did not open, and with the
/// server's error otherwise.
///
/// # Cancel safety
///
/// The suite awaits every method to completion (or abandons the whole case at its
/// deadline), so implementations need not be cancel-safe.
#[async_trait]
pub trait Factory: Send + Sync + 'static {
    /// The backend's name (`mem`, `zk`, `etcd`), shown as the test kind.
    fn name(&self) -> &str;

    /// The faults this factory can inject.
    fn faults(&self) -> Faults;

    /// The session timeout / lease TTL of the clients it opens — the one the server
    /// granted, where it grants more than asked (ZooKeeper's `minSessionTimeout`). Cases
    /// wait at most a small multiple of it for expiry-driven changes.
    fn session_timeout(&self) -> Duration;

    /// The server settings beyond the defaults this backend's server has (all of them
    /// unless the factory finds otherwise); cases needing one it lacks are ignored.
    fn server_settings(&self) -> crate::harness::ServerSettings {
        crate::harness::ServerSettings::ALL
    }

    /// Opens a new, independent client (its own session) under `namespace`.
    async fn open(&self, namespace: &str) -> Result<Client>;

    /// The start of a connection string for this backend, without namespace or options,
    /// e.g. `zk://127.0.0.1:2181` or `mem://`. Used by the bad-input cases.
    fn url_base(&self) -> String;

    /// Opens a client from a full connection string (bad-input cases).
    async fn connect_url(&self, url: &str) -> Result<Client>;

    /// Ends `client`'s current session from outside, as the server would on expiry.
    async fn kill_session(&self, client: &Client) -> Result<()> {
        let _ = client;
        Err(unsupported("kill_session"))
    }

    /// The real server behind this factory, if any. The default `crash`, `suspend`,
    /// `begin_watch_gap`, `pause_server` and `restart_server` use its fault proxies and
    /// process control; without one they fail with `Unsupported`.
    fn real_server(&self) -> Option<&RealServer> {
        None
    }

    /// Makes `client` stop as a crashed process would: no more requests, no cleanup.
    async fn crash(&self, client: &Client) -> Result<()> {
        self.real_server()
            .ok_or_else(|| unsupported("crash"))?
            .cut_off(client)
    }

    /// Cuts `client` off from the server for `duration`.
    async fn suspend(&self, client: &Client, duration: Duration) -> Result<()> {
        self.real_server()
            .ok_or_else(|| unsupported("suspend"))?
            .suspend(client, duration)
    }

    /// Silences `client`'s connection both ways for `duration`: nothing passes, nothing is
    /// reset (a silent partition; only timeouts can tell).
    async fn blackhole(&self, client: &Client, duration: Duration) -> Result<()> {
        self.real_server()
            .ok_or_else(|| unsupported("blackhole"))?
            .links(client)?
            .blackhole_for(duration);
        Ok(())
    }

    /// Delays `client`'s traffic by `delay` each way until `delay` is zero again.
    async fn delay(&self, client: &Client, delay: Duration) -> Result<()> {
        let proxy = self
            .real_server()
            .ok_or_else(|| unsupported("delay"))?
            .links(client)?;
        if delay.is_zero() {
            proxy.pass();
        } else {
            proxy.delay(delay);
        }
        Ok(())
    }

    /// When the server last received bytes from `client` (for measuring how long before
    /// the server can expire its session the client gives it up), if known.
    fn last_heard(&self, client: &Client) -> Option<tokio::time::Instant> {
        self.real_server()?.links(client).ok()?.last_upstream()
    }

    /// Opens a client under `namespace` through `n` links of its own (the `i`th to member
    /// `i mod members`), for cases that cut single links: see [`Factory::links`].
    async fn open_links(&self, namespace: &str, n: usize) -> Result<Client> {
        let _ = (namespace, n);
        Err(unsupported("open_links"))
    }

    /// The links of a client opened by [`Factory::open`] or [`Factory::open_links`].
    fn links(&self, client: &Client) -> Result<coord_testkit::Links> {
        self.real_server()
            .ok_or_else(|| unsupported("links"))?
            .links(client)
    }

    /// The cluster's member processes, to kill, pause and restart one.
    fn cluster(&self) -> Result<std::sync::Arc<coord_testkit::Cluster>> {
        self.real_server()
            .and_then(|s| s.cluster().cloned())
            .filter(|c| c.len() >= 3)
            .ok_or_else(|| unsupported("member faults"))
    }

    /// Makes the server apply `client`'s next `n` writes while their replies are lost:
    /// the client sees each fail with an unknown outcome.
    async fn lose_replies(&self, client: &Client, n: usize) -> Result<()> {
        let _ = (client, n);
        Err(unsupported("lose_replies"))
    }

    /// A foreign writer on the config keys `client` sees (its namespace), connected on
    /// its own: see [`ForeignWriter`]. Part of the `operator` faults.
    async fn foreign_writer(&self, client: &Client) -> Result<Box<dyn ForeignWriter>> {
        let _ = client;
        Err(unsupported("foreign_writer"))
    }

    /// Whether a read (`get`, `list`) sees every write that finished before it began,
    /// whichever member each client is on. ZooKeeper serves reads from the member a
    /// client is on, which may lag the leader (it orders reads per client only): its
    /// ensembles say `false`, and the histories leave reads out there.
    fn linearizable_reads(&self) -> bool {
        true
    }

    /// Deletes the node or key at `path` (a backend path, e.g. a fence's resource) from
    /// outside coord, as an operator would.
    async fn operator_delete(&self, path: &str) -> Result<()> {
        let _ = path;
        Err(unsupported("operator_delete"))
    }

    /// Every node or key the server stores under `namespace`, as an operator listing it
    /// would see them (the namespace's own node excluded), sorted.
    async fn operator_list(&self, namespace: &str) -> Result<Vec<String>> {
        let _ = namespace;
        Err(unsupported("operator_list"))
    }

    /// Stops `client`'s watches from receiving anything until [`Factory::end_watch_gap`].
    async fn begin_watch_gap(&self, client: &Client) -> Result<()> {
        self.real_server()
            .ok_or_else(|| unsupported("begin_watch_gap"))?
            .cut_off(client)
    }

    /// Makes the history since [`Factory::begin_watch_gap`] unrecoverable (compaction,
    /// session loss) and lets `client`'s watches resume.
    async fn end_watch_gap(&self, client: &Client) -> Result<()> {
        let _ = client;
        Err(unsupported("end_watch_gap"))
    }

    /// Stops the server process (every client's connection goes silent), and lets it
    /// continue `duration` later. Returns the instant just before the stop began: it may
    /// wait for another fault injector's member fault to end first, so measure from the
    /// returned instant, not from the call. The resume happens even if the case ends
    /// first.
    async fn pause_server(&self, duration: Duration) -> Result<tokio::time::Instant> {
        self.real_server()
            .ok_or_else(|| unsupported("pause_server"))?
            .pause(duration)
            .await
    }

    /// Kills the server process without a clean shutdown and starts it again on the same
    /// address and data; returns once it answers.
    async fn restart_server(&self) -> Result<()> {
        self.real_server()
            .ok_or_else(|| unsupported("restart_server"))?
            .restart()
            .await
    }
}

fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("this factory cannot inject {what}"),
    )
}
