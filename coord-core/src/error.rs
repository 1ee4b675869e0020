//! The one error type of coord: an [`ErrorKind`], whether a retry can help, and whether
//! a failed write may nevertheless have been applied.

use std::fmt;

/// What went wrong, in terms a caller can act on.
///
/// Every backend maps each of its client's errors to exactly one kind. The kind says
/// what to do next; [`Error::is_retryable`] and [`Error::outcome_unknown`] refine it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument is malformed: a bad name, an oversized value, an empty instance id.
    /// Fix the input; retrying the same call cannot help.
    InvalidArgument,
    /// The connection string or options are malformed or contradictory.
    ConfigInvalid,
    /// The backend cannot do this (see [`crate::Capabilities`]), or its feature is not
    /// compiled in.
    Unsupported,
    /// The key, node or instance does not exist.
    NotFound,
    /// Something with this identity already exists (e.g. an instance id registered by
    /// another client).
    AlreadyExists,
    /// A compare-and-set saw a different version than the caller expected.
    VersionMismatch,
    /// A guarded write was rejected because its guard (lock or leadership) is no longer
    /// held. Nothing was changed.
    Fenced,
    /// The session the operation depended on is gone; everything bound to it was
    /// released. A new session is being established.
    SessionLost,
    /// The backend cannot be reached right now (connection refused, suspended session,
    /// no quorum). Usually retryable.
    Unavailable,
    /// The operation did not finish in time.
    Timeout,
    /// Authentication or authorization failed.
    PermissionDenied,
    /// The client was closed.
    Closed,
    /// A stored value is not in the form asked for, e.g. `get_json` of a value that is
    /// not JSON of that type. Read it as bytes to see what is there.
    Decode,
    /// A bug or a backend answer coord does not understand. Please report it.
    Unexpected,
}

impl ErrorKind {
    /// A short stable name for the kind, as used in messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::ConfigInvalid => "invalid configuration",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NotFound => "not found",
            ErrorKind::AlreadyExists => "already exists",
            ErrorKind::VersionMismatch => "version mismatch",
            ErrorKind::Fenced => "fenced",
            ErrorKind::SessionLost => "session lost",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::Closed => "closed",
            ErrorKind::Decode => "cannot decode",
            ErrorKind::Unexpected => "unexpected",
        }
    }

    /// Whether an error of this kind is, by default, worth retrying.
    pub fn default_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::SessionLost | ErrorKind::Unavailable | ErrorKind::Timeout
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every coord operation.
///
/// It carries a [`ErrorKind`], a message that says what was wrong and what to do, the
/// operation that failed, whether retrying can help, and whether the outcome of a
/// write is unknown (the request may have been applied before the connection broke).
///
/// # Examples
///
/// ```
/// use coord_core::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::Unavailable, "connection refused").with_operation("put");
/// assert!(e.is_retryable());
/// assert_eq!(e.kind(), ErrorKind::Unavailable);
/// assert_eq!(e.to_string(), "put: unavailable: connection refused");
/// ```
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    operation: Option<&'static str>,
    retryable: bool,
    outcome_unknown: bool,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    /// A new error of `kind`; retryability defaults from the kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            operation: None,
            retryable: kind.default_retryable(),
            outcome_unknown: false,
            source: None,
        }
    }

    /// Shorthand for an [`ErrorKind::InvalidArgument`] error.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for an [`ErrorKind::ConfigInvalid`] error.
    pub fn config_invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::ConfigInvalid, message)
    }

    /// Shorthand for an [`ErrorKind::Closed`] error.
    pub fn closed() -> Self {
        Error::new(
            ErrorKind::Closed,
            "the client was closed; open a new client to continue",
        )
    }

    /// Names the public operation that failed (e.g. `"lock"`).
    pub fn with_operation(mut self, operation: &'static str) -> Self {
        self.operation = Some(operation);
        self
    }

    /// Overrides whether retrying can help.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Marks a failed write whose request may have been applied (the connection broke
    /// after it was sent). Read back before retrying a non-idempotent write.
    pub fn with_outcome_unknown(mut self, unknown: bool) -> Self {
        self.outcome_unknown = unknown;
        self
    }

    /// Attaches the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message, without operation or kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The operation that failed, when known.
    pub fn operation(&self) -> Option<&'static str> {
        self.operation
    }

    /// Whether the same call may succeed if retried.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// Whether a write may have been applied despite this error.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome_unknown
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(op) = self.operation {
            write!(f, "{op}: ")?;
        }
        write!(f, "{}: {}", self.kind, self.message)?;
        if self.outcome_unknown {
            f.write_str(" (outcome unknown: the write may have been applied)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(op) = self.operation {
            d.field("operation", &op);
        }
        d.field("retryable", &self.retryable)
            .field("outcome_unknown", &self.outcome_unknown);
        if let Some(s) = &self.source {
            d.field("source", &s.to_string());
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The result of every coord operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_operation_kind_and_unknown_outcome() {
        let e = Error::new(ErrorKind::Unavailable, "connection reset")
            .with_operation("put")
            .with_outcome_unknown(true);
        assert_eq!(
            e.to_string(),
            "put: unavailable: connection reset (outcome unknown: the write may have been applied)"
        );
        assert!(e.is_retryable());
    }

    #[test]
    fn only_transient_kinds_retry_by_default() {
        assert!(!Error::invalid_argument("x").is_retryable());
        assert!(!Error::new(ErrorKind::Fenced, "x").is_retryable());
        assert!(Error::new(ErrorKind::Timeout, "x").is_retryable());
        assert!(
            !Error::new(ErrorKind::Timeout, "x")
                .with_retryable(false)
                .is_retryable()
        );
    }
}
