//! What a client counts: the kinds of requests and events, for its stats and metrics.

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// A read request (get, list, children, range).
    Read,
    /// A single-key write request (create, set, delete, put).
    Write,
    /// A multi-op request (ZooKeeper `multi`, etcd `Txn`).
    Txn,
    /// A watch armed on the server.
    WatchSet,
    /// A watch notification received from the server.
    WatchEvent,
    /// A session request (ZooKeeper ping, etcd lease grant/keep-alive/revoke).
    SessionRequest,
    /// A session state transition.
    SessionTransition,
}
