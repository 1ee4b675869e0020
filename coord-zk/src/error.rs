//! Every `zookeeper-client` error mapped to a coord [`ErrorKind`], with retryability
//! and unknown outcomes.

use coord_core::{Error, ErrorKind};
use zookeeper_client as zk;

/// Maps a ZooKeeper error of operation `op`. `write` marks requests that change data:
/// a connection lost or timed out after sending them leaves their outcome unknown.
pub(crate) fn map(err: zk::Error, op: &'static str, write: bool) -> Error {
    let (kind, retryable, unknown, hint) = classify(&err);
    let message = match hint {
        "" => format!("ZooKeeper: {err}"),
        hint => format!("ZooKeeper: {err}; {hint}"),
    };
    Error::new(kind, message)
        .with_operation(op)
        .with_retryable(retryable)
        .with_outcome_unknown(write && unknown)
        .with_source(err)
}

/// As [`map`], for a request on `path`: a refusal by the node's ACL names the path and
/// what to do.
pub(crate) fn map_at(err: zk::Error, op: &'static str, write: bool, path: &str) -> Error {
    match err {
        zk::Error::NoAuth => Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "ZooKeeper refused {op} on {path}: the ACL there does not grant this client's credentials \
                 that permission; connect with the credentials that created it (user:password@ in the \
                 connection string), or have an administrator change the ACL"
            ),
        )
        .with_operation(op)
        .with_retryable(false)
        .with_source(err),
        err => map(err, op, write),
    }
}

/// `(kind, retryable, outcome unknown for writes, what to do)`.
fn classify(err: &zk::Error) -> (ErrorKind, bool, bool, &'static str) {
    use ErrorKind::*;
    use zk::Error as Z;
    match err {
        Z::NoHosts => (Unavailable, true, false, "no server of the ensemble is reachable"),
        Z::Timeout => (Timeout, true, true, ""),
        Z::ConnectionLoss => (
            Unavailable,
            true,
            true,
            "the connection broke; it is being re-established",
        ),
        Z::SessionMoved => (Unavailable, true, true, "the session moved to another server"),
        Z::NotReadOnly => (Unavailable, true, false, "connected to a read-only server"),
        Z::Throttled => (Unavailable, true, false, "the server is overloaded"),
        Z::SessionExpired => (SessionLost, true, true, "a new session is being established"),
        Z::ClientClosed => (SessionLost, true, true, "the session's client was shut down"),
        Z::NoNode => (NotFound, false, false, ""),
        Z::NodeExists => (AlreadyExists, false, false, ""),
        Z::BadVersion => (VersionMismatch, false, false, ""),
        Z::NoAuth => (PermissionDenied, false, false, "check the ACLs of the namespace"),
        Z::AuthFailed => (
            PermissionDenied,
            false,
            false,
            "check the user:password in the connection string",
        ),
        Z::QuotaExceeded => (
            PermissionDenied,
            false,
            false,
            "a ZooKeeper quota on the namespace is exhausted",
        ),
        Z::NoChildrenForEphemerals => (
            InvalidArgument,
            false,
            false,
            "this name would nest under a session-bound node (an instance or contender); pick a name that does not",
        ),
        Z::NotEmpty => (Unexpected, false, false, "a node coord deletes has children"),
        Z::MarshallingError => (
            InvalidArgument,
            false,
            false,
            "the request is too large for the server",
        ),
        Z::Unimplemented => (
            Unsupported,
            false,
            false,
            "the server is too old for this request (coord needs 3.6+)",
        ),
        Z::ReconfigDisabled => (Unsupported, false, false, ""),
        Z::BadArguments(_) | Z::InvalidAcl | Z::NoWatcher | Z::RuntimeInconsistent => {
            (Unexpected, false, false, "")
        }
        // The client wraps connection-level failures (I/O errors such as a reset, "no
        // response from connection") in `Custom`: the request may have been sent.
        Z::Custom(_) => connection_failure(),
        Z::UnmarshalError { .. } | Z::UnexpectedError(_) | Z::UnexpectedErrorCode(_) => {
            (Unexpected, false, true, "")
        }
        _ => (Unexpected, false, true, ""),
    }
}

/// How a connection-level failure (`Custom`: I/O error or silent connection) maps.
fn connection_failure() -> (ErrorKind, bool, bool, &'static str) {
    (
        ErrorKind::Unavailable,
        true,
        true,
        "the connection failed; it is being re-established",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zk::Error as Z;

    #[test]
    fn table() {
        let table: &[(Z, ErrorKind, bool, bool)] = &[
            (Z::NoHosts, ErrorKind::Unavailable, true, false),
            (Z::Timeout, ErrorKind::Timeout, true, true),
            (Z::ConnectionLoss, ErrorKind::Unavailable, true, true),
            (Z::SessionMoved, ErrorKind::Unavailable, true, true),
            (Z::NotReadOnly, ErrorKind::Unavailable, true, false),
            (Z::Throttled, ErrorKind::Unavailable, true, false),
            (Z::SessionExpired, ErrorKind::SessionLost, true, true),
            (Z::ClientClosed, ErrorKind::SessionLost, true, true),
            (Z::NoNode, ErrorKind::NotFound, false, false),
            (Z::NodeExists, ErrorKind::AlreadyExists, false, false),
            (Z::BadVersion, ErrorKind::VersionMismatch, false, false),
            (Z::NoAuth, ErrorKind::PermissionDenied, false, false),
            (Z::AuthFailed, ErrorKind::PermissionDenied, false, false),
            (Z::QuotaExceeded, ErrorKind::PermissionDenied, false, false),
            (
                Z::NoChildrenForEphemerals,
                ErrorKind::InvalidArgument,
                false,
                false,
            ),
            (Z::NotEmpty, ErrorKind::Unexpected, false, false),
            (Z::MarshallingError, ErrorKind::InvalidArgument, false, false),
            (Z::Unimplemented, ErrorKind::Unsupported, false, false),
            (Z::ReconfigDisabled, ErrorKind::Unsupported, false, false),
            (Z::InvalidAcl, ErrorKind::Unexpected, false, false),
            (Z::NoWatcher, ErrorKind::Unexpected, false, false),
            (Z::RuntimeInconsistent, ErrorKind::Unexpected, false, false),
            (Z::UnexpectedErrorCode(-999), ErrorKind::Unexpected, false, true),
            (Z::UnexpectedError("x".into()), ErrorKind::Unexpected, false, true),
        ];
        for (err, kind, retryable, unknown) in table {
            let e = map(err.clone(), "op", true);
            assert_eq!(e.kind(), *kind, "{err:?}");
            assert_eq!(e.is_retryable(), *retryable, "{err:?}");
            assert_eq!(e.outcome_unknown(), *unknown, "{err:?}");
            assert!(
                !map(err.clone(), "op", false).outcome_unknown(),
                "reads never have unknown outcomes"
            );
        }
        // `Custom` cannot be built outside the client crate; its arm uses this.
        assert_eq!(connection_failure().0, ErrorKind::Unavailable);
        assert!(connection_failure().1 && connection_failure().2);
    }
}
