//! Failover across the cluster's members: one gRPC client per member in the connection
//! string, one of them current. Every request goes to the current member; a request that
//! fails because of the member (it refuses connections, does not answer, or has lost its
//! leader) makes the next member current. A member that comes back is used again when
//! the rotation reaches it.
//!
//! `etcd-client` balances one channel over all members, but a member that is down when
//! a request is routed to it fails that request; and a request can go to any member, so
//! with one member down most requests fail. Pinning one member and moving on failure
//! keeps a client working while any minority is down.

use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client as etcd;
use tokio::sync::{OnceCell, watch};

/// The members of one client and the one in use.
pub(crate) struct Members {
    urls: Vec<String>,
    options: etcd::ConnectOptions,
    clients: Vec<OnceCell<etcd::Client>>,
    current: AtomicUsize,
    /// Bumped on every move to another member: long-lived streams (watches) follow.
    moved: watch::Sender<u64>,
}

/// The member a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberId(usize);

impl Members {
    /// Members at `urls` (at least one), connected lazily with `options`.
    pub(crate) fn new(urls: Vec<String>, options: etcd::ConnectOptions) -> Members {
        let clients = urls.iter().map(|_| OnceCell::new()).collect();
        Members {
            urls,
            options,
            clients,
            current: AtomicUsize::new(0),
            moved: watch::Sender::new(0),
        }
    }

    /// How many members there are.
    pub(crate) fn len(&self) -> usize {
        self.urls.len()
    }

    /// The current member's client, connecting it first if needed (with credentials,
    /// connecting authenticates, which is a request). A member that cannot be connected
    /// makes the next one current; after trying each once, the last error.
    ///
    /// # Errors
    ///
    /// The etcd error of the last member tried.
    pub(crate) async fn client(&self) -> std::result::Result<(MemberId, &etcd::Client), etcd::Error> {
        let mut last = None;
        for _ in 0..self.len() {
            let i = self.current.load(Ordering::Acquire) % self.len();
            let url = &self.urls[i];
            let connected = self.clients[i]
                .get_or_try_init(|| etcd::Client::connect([url.as_str()], Some(self.options.clone())))
                .await;
            match connected {
                Ok(c) => return Ok((MemberId(i), c)),
                Err(e) if crate::error::member_failure(&e) => {
                    tracing::debug!(member = %url, error = %e, "coord.etcd.member_unreachable");
                    self.failed(MemberId(i));
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| etcd::Error::InvalidArgs("no etcd endpoints".into())))
    }

    /// `member` failed a request: if it is still current, the next one becomes current.
    pub(crate) fn failed(&self, member: MemberId) {
        let n = self.len();
        let next = (member.0 + 1) % n;
        if n > 1
            && self
                .current
                .compare_exchange(member.0, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            tracing::info!(from = %self.urls[member.0], to = %self.urls[next], "coord.etcd.member_switch");
            self.moved.send_modify(|n| *n += 1);
        }
    }

    /// Changes whenever another member becomes current.
    pub(crate) fn moves(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }
}

/// Whether the request behind `e` can never have reached a server: the connection
/// itself could not be made. Such a request is safe to send again, writes included.
pub(crate) fn never_sent(e: &etcd::Error) -> bool {
    let text = match e {
        etcd::Error::GRpcStatus(s) => s.message().to_owned(),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    };
    text.contains("tcp connect error")
        || text.contains("error trying to connect")
        || text.contains("Connection refused")
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("urls", &self.urls)
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
