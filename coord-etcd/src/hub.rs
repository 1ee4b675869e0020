//! One gRPC watch stream per client, shared by every watch the client sets: a
//! contender waiting for the key ahead of it, a prefix watch, a cache. Each watch has an
//! id of its own on the stream (`WatchCreateRequest.watch_id`, etcd ≥ 3.4) and its
//! responses are handed to it by that id. A stream costs an HTTP/2 stream, its decoder
//! buffer and request channel (about 30 KiB); a watch on a shared stream costs its
//! entry here and a queue of its own.
//!
//! When the stream breaks (a member failed, the client moved to another member, the
//! server ended it), every watch on it is told ([`HubWatch::message`] returns
//! `Ok(None)`), as a stream of its own would have ended; each is set again by its owner,
//! on a new stream, from where it left off. A watch whose queue overflows (its owner
//! does not keep up) is cancelled and told the same way, so one slow reader never holds
//! up the others' events nor grows without bound. Closing the client ends the stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use coord_core::Result;
use coord_core::raw::Counter;
use etcd_client as etcd;
use tokio::sync::mpsc;

use crate::session::Inner;

/// Responses queued for one watch before it counts as not keeping up.
const QUEUE: usize = 1024;

/// What the stream's reader hands a watch (boxed: a queue's first block holds 32 slots,
/// allocated with the queue, and a response is a few hundred bytes).
type Queue = mpsc::Sender<Box<etcd::WatchResponse>>;

/// The watches on one stream, by id; `ended` once its reader stopped (nothing is handed
/// on any more: a watch set now would never hear a thing).
#[derive(Debug, Default)]
struct Subscribers {
    ended: bool,
    queues: HashMap<i64, Queue>,
}

type Shared = Arc<Mutex<Subscribers>>;

/// The client's shared watch stream, opened on first use and again after it broke.
#[derive(Debug)]
pub(crate) struct WatchHub {
    stream: tokio::sync::Mutex<Option<Stream>>,
    next_id: AtomicI64,
    /// `true` once the client closed; dropped with the client: either ends the stream.
    stopped: tokio::sync::watch::Sender<bool>,
}

impl Default for WatchHub {
    fn default() -> Self {
        WatchHub {
            stream: tokio::sync::Mutex::default(),
            next_id: AtomicI64::new(0),
            stopped: tokio::sync::watch::channel(false).0,
        }
    }
}

/// One open stream: where requests go, who listens.
#[derive(Debug)]
struct Stream {
    requests: mpsc::UnboundedSender<Request>,
    subscribers: Shared,
    /// The member moves counter when it opened: a move re-opens it on the new member.
    moved: u64,
}

/// A request for the stream (boxed, as [`Queue`]'s items are).
#[derive(Debug)]
enum Request {
    Watch(Box<(Vec<u8>, etcd::WatchOptions)>),
    Cancel(i64),
}

/// One or more watches on the shared stream whose responses arrive in one queue; the
/// watches are cancelled when this is dropped.
#[derive(Debug)]
pub(crate) struct HubWatch {
    ids: Vec<i64>,
    rx: mpsc::Receiver<Box<etcd::WatchResponse>>,
    requests: mpsc::UnboundedSender<Request>,
    subscribers: Shared,
}

impl WatchHub {
    /// Ends the stream (the client closed): every watch on it sees its end.
    pub(crate) fn stop(&self) {
        self.stopped.send_replace(true);
    }

    fn id(&self) -> i64 {
        // Ids start at 1: 0 asks the server to pick one.
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Sets a watch of `key` with `options` on the shared stream (opening it first if
    /// there is none, it broke, or the client moved to another member since).
    ///
    /// # Errors
    ///
    /// The stream's opening: `Unavailable`, `Timeout`, `Closed`, permission errors.
    pub(crate) async fn watch(
        &self,
        inner: &Inner,
        key: impl Into<Vec<u8>>,
        options: etcd::WatchOptions,
    ) -> Result<HubWatch> {
        let key = key.into();
        let (tx, rx) = mpsc::channel(QUEUE);
        let id = self.id();
        let options = options.with_watch_id(id);
        let mut stream = self.stream.lock().await;
        let moved = *inner.member_moves().borrow();
        if let Some(open) = stream.as_ref().filter(|s| s.moved == moved) {
            let mut subs = open.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            if !subs.ended
                && open
                    .requests
                    .send(Request::Watch(Box::new((key.clone(), options.clone()))))
                    .is_ok()
            {
                subs.queues.insert(id, tx);
                inner.stats.incr(Counter::WatchSet);
                return Ok(HubWatch {
                    ids: vec![id],
                    rx,
                    requests: open.requests.clone(),
                    subscribers: open.subscribers.clone(),
                });
            }
            // The stream ended: open another below.
        }
        // The first watch opens the stream (its first request).
        let opened = inner
            .call(Counter::WatchSet, "watch", false, |mut c: etcd::WatchClient| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.watch(key, Some(options)).await }
            })
            .await?;
        let subscribers: Shared = Arc::default();
        subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .queues
            .insert(id, tx);
        let (requests, pending) = mpsc::unbounded_channel();
        let (sender, responses) = opened.split();
        // The writer ends with the reader (the stream then goes with both halves).
        let (reading, read_over) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(write(sender, pending, read_over));
        tokio::spawn(read(
            responses,
            subscribers.clone(),
            requests.clone(),
            inner.member_moves(),
            moved,
            self.stopped.subscribe(),
            reading,
        ));
        *stream = Some(Stream {
            requests: requests.clone(),
            subscribers: subscribers.clone(),
            moved,
        });
        Ok(HubWatch {
            ids: vec![id],
            rx,
            requests,
            subscribers,
        })
    }
}

impl HubWatch {
    /// Adds a watch of `key` with `options` on the same stream, answering into the same
    /// queue; `false` when the stream is gone (this watch then ends too).
    pub(crate) fn add(
        &mut self,
        hub: &WatchHub,
        key: impl Into<Vec<u8>>,
        options: etcd::WatchOptions,
    ) -> bool {
        let id = hub.id();
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = self.ids.iter().find_map(|i| subs.queues.get(i)).cloned() else {
            return false;
        };
        if subs.ended
            || self
                .requests
                .send(Request::Watch(Box::new((key.into(), options.with_watch_id(id)))))
                .is_err()
        {
            return false;
        }
        subs.queues.insert(id, tx);
        self.ids.push(id);
        true
    }

    /// The next response to any of these watches; `Ok(None)` once the stream broke (or
    /// this watch fell behind and was cancelled): set it again to go on.
    ///
    /// # Errors
    ///
    /// None: the `Result` keeps the shape of a stream of its own.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a response not yet returned stays queued.
    pub(crate) async fn message(&mut self) -> Result<Option<etcd::WatchResponse>> {
        Ok(self.rx.recv().await.map(|r| *r))
    }
}

impl Drop for HubWatch {
    fn drop(&mut self) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        for id in self.ids.drain(..) {
            if subs.queues.remove(&id).is_some() && !subs.ended {
                let _ = self.requests.send(Request::Cancel(id));
            }
        }
    }
}

/// Sends the stream's requests in order until the stream, its reader or every user of
/// it is gone.
async fn write(
    mut sender: etcd::WatchRequestSender,
    mut pending: mpsc::UnboundedReceiver<Request>,
    mut read_over: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let request = tokio::select! {
            r = pending.recv() => r,
            _ = &mut read_over => None,
        };
        let Some(request) = request else { return };
        let sent = match request {
            Request::Watch(watch) => {
                let (key, options) = *watch;
                sender.watch(key, Some(options)).await
            }
            Request::Cancel(id) => sender.cancel(id).await,
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Whether a watch was refused for its credentials: the stream's token (taken when the
/// stream opened) expired or was revoked, or the user may not read the range. The
/// stream is then ended, so that the watch is set again on a new stream with a fresh
/// token; refused there too, its owner reports it ([`refused`]).
fn auth_refusal(resp: &etcd::WatchResponse) -> bool {
    resp.canceled() && {
        let reason = resp.cancel_reason();
        reason.contains("permission denied")
            || reason.contains("invalid auth token")
            || reason.contains("auth revision is old")
            || reason.contains("user name")
    }
}

/// The error a watch's owner reports when the server refused the watch for its
/// credentials twice in a row (on two streams, the second with a fresh token).
pub(crate) fn refused(resp: &etcd::WatchResponse) -> Option<coord_core::Error> {
    auth_refusal(resp).then(|| {
        coord_core::Error::new(
            coord_core::ErrorKind::PermissionDenied,
            format!(
                "etcd refused the watch: {}; grant these credentials read access to the namespace",
                resp.cancel_reason()
            ),
        )
    })
}

/// Hands each response to its watch until the stream ends or the client moves to
/// another member; then tells every watch (its queue's sender goes).
async fn read(
    mut responses: etcd::WatchResponseStream,
    subscribers: Shared,
    requests: mpsc::UnboundedSender<Request>,
    mut moves: tokio::sync::watch::Receiver<u64>,
    moved: u64,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    _reading: tokio::sync::oneshot::Sender<()>,
) {
    loop {
        let message = tokio::select! {
            m = responses.message() => m,
            _ = moves.wait_for(|m| *m != moved) => break,
            // The client closed, or is gone (the sender with it).
            _ = stopped.wait_for(|s| *s) => break,
        };
        let Ok(Some(resp)) = message else { break };
        let id = resp.watch_id();
        // Refused for its credentials: handed to its watch, and the stream ends (a new
        // one takes a fresh token). A refusal no watch can be told of (some servers
        // answer it with id -1) ends the stream too, so no watch waits on it forever.
        let ends = auth_refusal(&resp) || (resp.canceled() && resp.created() && id < 0);
        let mut subs = subscribers.lock().unwrap_or_else(|p| p.into_inner());
        let Some(queue) = subs.queues.get(&id).cloned() else {
            if ends {
                tracing::debug!(reason = resp.cancel_reason(), "coord.etcd.watch_stream_refused");
                break;
            }
            continue;
        };
        let last = resp.canceled();
        match queue.try_send(Box::new(resp)) {
            // A cancelled watch hears nothing more.
            Ok(()) if last => {
                subs.queues.remove(&id);
            }
            Ok(()) => {}
            // Not keeping up (or no longer listening): every watch on that queue is
            // dropped here, so its owner sees the end and sets it again from where it
            // was. The server-side watches are cancelled.
            Err(_) => {
                let gone: Vec<i64> = subs
                    .queues
                    .iter()
                    .filter(|(_, q)| q.same_channel(&queue))
                    .map(|(i, _)| *i)
                    .collect();
                for i in gone {
                    subs.queues.remove(&i);
                    let _ = requests.send(Request::Cancel(i));
                    tracing::debug!(watch_id = i, "coord.etcd.watch_lagged");
                }
            }
        }
        if ends {
            tracing::debug!(reason = %"refused for its credentials", "coord.etcd.watch_stream_refused");
            break;
        }
    }
    // Every queue's sender held here goes: each watch sees its end once it has read
    // what was queued.
    let mut subs = subscribers.lock().unwrap_or_else(|p| p.into_inner());
    subs.ended = true;
    subs.queues.clear();
}
