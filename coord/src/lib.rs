//! coord: leader election, fenced locks, service discovery and shared configuration,
//! over ZooKeeper, etcd or an embedded in-memory backend, with one API.
//!
//! Beyond the four primitives ([`Lock`], [`Election`], [`Registry`], [`ConfigStore`]),
//! the classic recipes, on every backend: a leader selector ([`Client::lead`]), a
//! read/write lock ([`RwLock`]), a counting semaphore ([`Semaphore`]), a barrier
//! ([`Barrier`]) and a double barrier ([`DoubleBarrier`]), a bounded FIFO queue
//! ([`DistributedQueue`]), a shared counter ([`SharedCounter`]) and two-phase commit
//! ([`TwoPhaseCommit`]). Each type's docs state its guarantees and limits.
//!
//! Pick a backend with a connection string (and, for ZooKeeper and etcd, a Cargo
//! feature); application code does not change:
//!
//! | scheme | backend | feature |
//! |---|---|---|
//! | `mem://namespace` | in-process, embedded | always |
//! | `zk://h1:2181,h2:2181/namespace` | ZooKeeper | `zk` |
//! | `etcd://h1:2379/namespace` | etcd | `etcd` |
//!
//! # Fencing
//!
//! Locks and leadership give **fenced exclusion, not mutual exclusion**: every grant
//! carries a [`FencingToken`] larger than all earlier ones for that name, and a paused
//! holder may still believe it holds a grant that has passed on. A resource outside
//! coord is safe only if it checks the token; config writes can be made conditional with
//! [`Txn::fenced_by`]. See [`coord_core`] for the full contract.
//!
//! # Metrics
//!
//! [`Client::stats`] counts one client's requests, watch events, session transitions and
//! wake-ups. With the `metrics` feature, every client also records them, with lock and
//! election wait times and hand-offs, through the [`metrics`](https://docs.rs/metrics)
//! facade to the recorder the application installs (e.g. `metrics-exporter-prometheus`).
//! The names (`coord_requests_total`, `coord_acquire_wait_seconds`, …), their labels and
//! meanings are listed in [`metrics`].
//!
//! # Examples
//!
//! ```
//! use coord::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> coord::Result<()> {
//! let client = coord::connect("mem://docs-example").await?;
//! let guard = client.lock("reports/nightly").await?;
//! client
//!     .commit(coord::Txn::new().fenced_by(guard.fence()).put("reports/last-run", b"today".to_vec()))
//!     .await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod driver;
mod options;

use tracing::Instrument;

pub use coord_core::{
    Barrier, CacheMap, CacheView, CampaignOptions, Capabilities, Check, Client, ConfigCache, ConfigEvent,
    ConfigStore, Decision, DistributedQueue, DoubleBarrier, Election, Entered, Entry, Error, ErrorKind,
    Fence, FencingToken, Granted, Head, HoldState, HoldWatch, LEADER_LOSS_GRACE, LeaderEvent, LeaderInfo,
    LeaderSelector, Leadership, Leading, Lease, Lock, LockDelayView, LockGuard, LockHolder, LockOptions,
    MAX_LOCK_DELAY, MAX_MEMBERS, MAX_NAME_LEN, MAX_PARTICIPANTS, MAX_PERMITS, MAX_QUEUE_ITEMS, MAX_TXN_BYTES,
    MAX_TXN_OPS, MAX_VALUE_LEN, Op, OpResult, Origin, Participant, ReadGuard, RecipeKind, RecipeView,
    Registration, RegistrationState, Registry, RegistryEvent, Result, RwLock, SelectorState, Semaphore,
    ServiceCache, ServiceInstance, SessionState, SessionStatus, SharedCounter, Stats, TwoPhaseCommit, Txn,
    Version, Versioned, WriteGuard, validate_name,
};
pub use options::{Options, connect_with};

/// Metric names and labels (recorded with the `metrics` feature).
pub use coord_core::metrics;

/// The traits, for `use coord::prelude::*`.
pub mod prelude {
    pub use coord_core::prelude::*;
}

/// The in-memory backend, for its fault-injection hooks in tests.
pub use coord_mem as mem;

/// The ZooKeeper backend, for options built in code and its Curator-compatible paths.
#[cfg(feature = "zk")]
pub use coord_zk as zk;

/// The etcd backend, for options built in code and its `concurrency`-compatible keys.
#[cfg(feature = "etcd")]
pub use coord_etcd as etcd;

/// Fencing gates for the data a lock protects (features `fence-postgres`,
/// `fence-sqlite`, `fence-http`, `fence-reqwest`): a database transaction, or an HTTP
/// request, admitted only while its fencing token is the highest its resource has seen.
/// See [`coord_fence`].
#[cfg(any(feature = "fence-postgres", feature = "fence-sqlite", feature = "fence-http"))]
pub use coord_fence as fence;

/// The variable [`connect_from_env`] reads.
pub const URL_VAR: &str = "COORD_URL";

/// Opens a client for `url`, choosing the backend by scheme.
///
/// # Errors
///
/// `ConfigInvalid` for a malformed string or an unknown scheme; `Unsupported` naming the
/// Cargo feature to enable when the scheme's backend is not compiled in; the backend's
/// own errors (e.g. `Unavailable`) when connecting fails.
///
/// # Cancel safety
///
/// Dropping the future abandons the connection attempt; no session is left behind
/// beyond what the server expires on its own.
pub async fn connect(url: &str) -> Result<Client> {
    let span = tracing::info_span!("coord.connect", scheme = url.split("://").next().unwrap_or(""));
    driver::connect(url).instrument(span).await
}

/// Opens a client from the `COORD_URL` environment variable, or `mem://` when unset.
///
/// `mem://` lives in this process only: locks exclude nothing across processes and
/// nothing outlives the process. A misspelt or forgotten variable would make that
/// silent, so the fallback is logged as a `WARN` (once per process) that names the
/// variable and how to set it.
///
/// # Errors
///
/// As [`connect`]; `ConfigInvalid` when `COORD_URL` is set but not UTF-8.
///
/// # Cancel safety
///
/// As [`connect`].
pub async fn connect_from_env() -> Result<Client> {
    let url = url_from(std::env::var(URL_VAR))?;
    connect(&url).await
}

/// The URL `connect_from_env` connects to, given what reading `COORD_URL` returned.
fn url_from(var: std::result::Result<String, std::env::VarError>) -> Result<String> {
    match var {
        Ok(url) => Ok(url),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::config_invalid(format!(
            "{URL_VAR} is not valid UTF-8; set it to a connection string such as \
             etcd://127.0.0.1:2379/myapp"
        ))),
        Err(std::env::VarError::NotPresent) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "{URL_VAR} is not set: coord falls back to mem://, which lives in this \
                     process only (locks exclude nothing across processes, nothing is kept); \
                     set {URL_VAR}, e.g. etcd://127.0.0.1:2379/myapp or \
                     zk://127.0.0.1:2181/myapp, or call connect(\"mem://…\") to mean it"
                );
            });
            Ok("mem://".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_scheme_is_config_invalid() {
        let e = connect("redis://h/ns").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConfigInvalid);
        for scheme in ["mem", "zk", "zk+tls", "etcd", "etcd+https"] {
            assert!(e.to_string().contains(scheme), "{e} does not name {scheme}");
        }
    }

    #[tokio::test]
    async fn disabled_backend_names_the_feature() {
        let mut disabled = Vec::new();
        if cfg!(not(feature = "etcd")) {
            disabled.push(("etcd://127.0.0.1:2379/x", "`etcd`"));
        }
        if cfg!(not(feature = "zk")) {
            disabled.push(("zk://127.0.0.1:2181/x", "`zk`"));
        }
        for (url, feature) in disabled {
            let e = connect(url).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert!(e.to_string().contains(feature), "{e}");
        }
    }

    #[cfg(feature = "zk")]
    #[tokio::test]
    async fn unreachable_zookeeper_is_a_typed_error() {
        // Port 1 on loopback: nothing listens there.
        let e = connect("zk://127.0.0.1:1/x?connect_timeout=1s")
            .await
            .unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
            "{e}"
        );
        assert!(e.is_retryable());
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
        let e = connect("zk://127.0.0.1:1/x?bogus=1").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConfigInvalid);
    }

    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn unreachable_etcd_is_a_typed_error() {
        let e = connect("etcd://127.0.0.1:1/x?connect_timeout=1s")
            .await
            .unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
            "{e}"
        );
        assert!(e.is_retryable(), "{e:?}");
        assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    }

    /// A `std::io::Write` into a shared buffer, for capturing log lines.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn unset_url_falls_back_to_mem_with_a_warning_once() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(
                url_from(Err(std::env::VarError::NotPresent)).expect("url"),
                "mem://"
            );
            assert_eq!(
                url_from(Err(std::env::VarError::NotPresent)).expect("url"),
                "mem://"
            );
            assert_eq!(url_from(Ok("zk://h/x".into())).expect("url"), "zk://h/x");
        });
        let logged = String::from_utf8_lossy(&captured.0.lock().expect("buffer")).into_owned();
        assert_eq!(logged.matches("WARN").count(), 1, "{logged}");
        for says in ["COORD_URL is not set", "mem://", "etcd://127.0.0.1:2379/myapp"] {
            assert!(
                logged.contains(says),
                "the warning does not say {says:?}: {logged}"
            );
        }
        let e = url_from(Err(std::env::VarError::NotUnicode("\u{fffd}".into()))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConfigInvalid);
    }

    #[tokio::test]
    async fn mem_connects_and_reads_env_default() {
        let c = connect("mem://facade-test").await.expect("mem connects");
        assert_eq!(c.kind(), "mem");
        assert_eq!(c.namespace(), "facade-test");
        c.close().await.expect("close");
    }
}

/// The README's code blocks, compiled and run as doc tests (they use the `serde`
/// feature's JSON helpers and the SQLite and HTTP fencing gates).
#[cfg(all(doctest, feature = "serde", feature = "fence-sqlite", feature = "fence-http"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
