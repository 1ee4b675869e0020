//! Every `etcd-client` error mapped to a coord [`ErrorKind`], with retryability and
//! unknown outcomes. A failed `Txn` compare is not an error here: the primitives turn it
//! into `VersionMismatch` or `Fenced` themselves.

use coord_core::{Error, ErrorKind};
use etcd_client::Error as E;
use tonic::Code;

/// Maps an etcd error of operation `op`; `write` marks requests that change data.
pub(crate) fn map(err: E, op: &'static str, write: bool) -> Error {
    let (kind, retryable, unknown) = classify(&err);
    let hint = match kind {
        ErrorKind::Unavailable => "; the cluster is unreachable or has no leader — retry",
        ErrorKind::PermissionDenied => {
            "; the user lacks a role granting this on the namespace's keys, or its credentials are wrong: \
             check the user:password in the connection string and the user's roles (etcdctl role get)"
        }
        ErrorKind::ConfigInvalid if is_auth_disabled(&err) => {
            "; the server has authentication off: remove user:password@ from the connection string"
        }
        ErrorKind::SessionLost => "; the lease is gone and a new one is being granted — retry",
        _ => "",
    };
    Error::new(kind, format!("etcd: {}{hint}", describe(&err)))
        .with_operation(op)
        .with_retryable(retryable)
        .with_outcome_unknown(write && unknown)
        .with_source(err)
}

/// `err` in words: a gRPC status by its message and the causes under it (their
/// `Display`, never the transport library's `Debug` text that etcd-client's own
/// `Display` includes).
fn describe(err: &E) -> String {
    match err {
        E::GRpcStatus(status) => {
            let mut words = vec![status.message().to_owned()];
            let mut cause = std::error::Error::source(status);
            while let Some(c) = cause {
                words.push(c.to_string());
                cause = c.source();
            }
            words.dedup();
            words.retain(|w| !w.is_empty());
            format!("{} ({})", words.join(": "), status.code().description())
        }
        E::TransportError(e) => {
            let mut words = vec![e.to_string()];
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                words.push(c.to_string());
                cause = c.source();
            }
            words.dedup();
            words.join(": ")
        }
        other => other.to_string(),
    }
}

/// Whether `err` is the member's fault, so another member may do better: it is
/// unreachable, did not answer in time, or has no leader. Never a compaction or an
/// answer about the request itself.
pub(crate) fn member_failure(err: &E) -> bool {
    let (kind, retryable, _) = classify(err);
    matches!(kind, ErrorKind::Unavailable | ErrorKind::Timeout)
        && retryable
        && !matches!(err, E::LeaseKeepAliveError(_) | E::WatchError(_))
}

fn is_auth_disabled(err: &E) -> bool {
    matches!(err, E::GRpcStatus(s) if s.message().contains("authentication is not enabled"))
}

/// `(kind, retryable, outcome unknown for writes)`.
fn classify(err: &E) -> (ErrorKind, bool, bool) {
    use ErrorKind::*;
    match err {
        E::GRpcStatus(status) => classify_status(status.code(), status.message()),
        E::TransportError(_) | E::IoError(_) => (Unavailable, true, true),
        E::WatchError(_) => (Unavailable, true, false),
        // "lease not found" means the lease is gone; anything else is a broken stream.
        E::LeaseKeepAliveError(m) if m.contains("lease not found") => (SessionLost, true, false),
        E::LeaseKeepAliveError(_) => (Unavailable, true, false),
        E::InvalidArgs(_) | E::InvalidUri(_) | E::InvalidMetadataValue(_) | E::EndpointError(_) => {
            (ConfigInvalid, false, false)
        }
        E::Utf8Error(_) | E::ElectError(_) | E::EndpointsNotManaged | E::Internal(_) => {
            (Unexpected, false, true)
        }
        #[allow(unreachable_patterns)]
        _ => (Unexpected, false, true),
    }
}

/// gRPC status codes, refined by etcd's messages where one code means several things.
fn classify_status(code: Code, message: &str) -> (ErrorKind, bool, bool) {
    use ErrorKind::*;
    match code {
        Code::Ok => (Unexpected, false, false),
        Code::Unavailable => (Unavailable, true, true),
        Code::DeadlineExceeded => (Timeout, true, true),
        Code::Cancelled => (Unavailable, true, true),
        Code::Aborted => (Unavailable, true, true),
        Code::ResourceExhausted => (Unavailable, true, false),
        Code::NotFound if message.contains("lease not found") => (SessionLost, true, false),
        // Authentication problems come with several codes (etcd 3.4).
        _ if message.contains("authentication is not enabled") => (ConfigInvalid, false, false),
        _ if message.contains("invalid auth token") => (PermissionDenied, true, false),
        _ if message.contains("authentication failed")
            || message.contains("user name not found")
            || message.contains("user name is empty") =>
        {
            (PermissionDenied, false, false)
        }
        Code::NotFound => (NotFound, false, false),
        Code::PermissionDenied | Code::Unauthenticated => (PermissionDenied, false, false),
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            if message.contains("compacted") {
                (Unavailable, false, false)
            } else if message.contains("leader") {
                (Unavailable, true, true)
            } else {
                (InvalidArgument, false, false)
            }
        }
        Code::AlreadyExists => (AlreadyExists, false, false),
        Code::Unimplemented => (Unsupported, false, false),
        // The client reports broken connections as `Unknown` "transport error".
        Code::Unknown if message.contains("transport") || message.contains("connect") => {
            (Unavailable, true, true)
        }
        Code::Internal | Code::Unknown | Code::DataLoss => (Unexpected, false, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        let table: &[(Code, &str, ErrorKind, bool, bool)] = &[
            (
                Code::Unavailable,
                "etcdserver: no leader",
                ErrorKind::Unavailable,
                true,
                true,
            ),
            (
                Code::DeadlineExceeded,
                "context deadline exceeded",
                ErrorKind::Timeout,
                true,
                true,
            ),
            (Code::Cancelled, "", ErrorKind::Unavailable, true, true),
            (Code::Aborted, "", ErrorKind::Unavailable, true, true),
            (
                Code::ResourceExhausted,
                "too many requests",
                ErrorKind::Unavailable,
                true,
                false,
            ),
            (
                Code::NotFound,
                "etcdserver: requested lease not found",
                ErrorKind::SessionLost,
                true,
                false,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: user name not found",
                ErrorKind::PermissionDenied,
                false,
                false,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
                ErrorKind::PermissionDenied,
                false,
                false,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: authentication is not enabled",
                ErrorKind::ConfigInvalid,
                false,
                false,
            ),
            (
                Code::Unauthenticated,
                "etcdserver: invalid auth token",
                ErrorKind::PermissionDenied,
                true,
                false,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: user name is empty",
                ErrorKind::PermissionDenied,
                false,
                false,
            ),
            (
                Code::PermissionDenied,
                "",
                ErrorKind::PermissionDenied,
                false,
                false,
            ),
            (
                Code::Unauthenticated,
                "",
                ErrorKind::PermissionDenied,
                false,
                false,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: request is too large",
                ErrorKind::InvalidArgument,
                false,
                false,
            ),
            (
                Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted",
                ErrorKind::Unavailable,
                false,
                false,
            ),
            (
                Code::FailedPrecondition,
                "etcdserver: leader changed",
                ErrorKind::Unavailable,
                true,
                true,
            ),
            (Code::AlreadyExists, "", ErrorKind::AlreadyExists, false, false),
            (Code::Unimplemented, "", ErrorKind::Unsupported, false, false),
            (Code::Internal, "", ErrorKind::Unexpected, false, true),
            (Code::Unknown, "", ErrorKind::Unexpected, false, true),
            (
                Code::Unknown,
                "transport error",
                ErrorKind::Unavailable,
                true,
                true,
            ),
            (Code::DataLoss, "", ErrorKind::Unexpected, false, true),
        ];
        for (code, msg, kind, retry, unknown) in table {
            let e = map(E::GRpcStatus(tonic::Status::new(*code, *msg)), "op", true);
            assert_eq!(e.kind(), *kind, "{code:?} {msg}");
            assert_eq!(e.is_retryable(), *retry, "{code:?} {msg}");
            assert_eq!(e.outcome_unknown(), *unknown, "{code:?} {msg}");
        }
    }

    #[test]
    fn client_side_table() {
        let table: Vec<(E, ErrorKind, bool)> = vec![
            (
                E::IoError(std::io::Error::other("reset")),
                ErrorKind::Unavailable,
                true,
            ),
            (E::WatchError("x".into()), ErrorKind::Unavailable, true),
            (
                E::LeaseKeepAliveError("lease not found".into()),
                ErrorKind::SessionLost,
                true,
            ),
            (
                E::LeaseKeepAliveError("channel closed".into()),
                ErrorKind::Unavailable,
                true,
            ),
            (E::InvalidArgs("x".into()), ErrorKind::ConfigInvalid, false),
            (E::EndpointError("x".into()), ErrorKind::ConfigInvalid, false),
            (E::ElectError("x".into()), ErrorKind::Unexpected, false),
            (E::EndpointsNotManaged, ErrorKind::Unexpected, false),
            (E::Internal("x".into()), ErrorKind::Unexpected, false),
        ];
        for (err, kind, retry) in table {
            let shown = err.to_string();
            let e = map(err, "op", false);
            assert_eq!(e.kind(), kind, "{shown}");
            assert_eq!(e.is_retryable(), retry, "{shown}");
            assert!(!e.outcome_unknown(), "reads never have unknown outcomes");
        }
    }
}
