//! The gates' error.

use std::fmt;

use coord_core::FencingToken;

/// Why a gate did not admit a write.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The resource has seen a higher token than this write's: a later holder has
    /// written, and this holder's grant is over. The write was not made (a SQL gate
    /// rolled its transaction back). Not retryable with this token.
    Fenced {
        /// The resource the write was for.
        resource: String,
        /// The write's token.
        token: FencingToken,
        /// The highest token the resource has seen.
        seen: FencingToken,
    },
    /// The input alone shows the write cannot be gated: an empty resource name, a
    /// token above what the store can hold, a bad table name.
    InvalidArgument(String),
    /// The database failed the gate's statement (connection, permissions, a missing
    /// table — see [`SqlGate::create_table`](crate::sql::SqlGate::create_table) — or a
    /// serialization failure under `REPEATABLE READ`/`SERIALIZABLE`, which a concurrent
    /// later holder causes). Whether the transaction can go on is the database's say.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    Database(sqlx::Error),
}

impl Error {
    /// The matching coord error kind: `Fenced`, `InvalidArgument` (also for a statement
    /// the database refused as such: SQLSTATE classes 42 and 28 — a reserved word as the
    /// table's name, a missing table, no privilege), or `Unavailable` for any other
    /// database failure (whether a retry can help is the database's say).
    pub fn kind(&self) -> coord_core::ErrorKind {
        match self {
            Error::Fenced { .. } => coord_core::ErrorKind::Fenced,
            Error::InvalidArgument(_) => coord_core::ErrorKind::InvalidArgument,
            // The statement itself was refused (SQLSTATE class 42: syntax, an unknown
            // table, no privilege; class 28: credentials): not worth retrying.
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(sqlx::Error::Database(e))
                if e.code()
                    .is_some_and(|c| c.starts_with("42") || c.starts_with("28")) =>
            {
                coord_core::ErrorKind::InvalidArgument
            }
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(_) => coord_core::ErrorKind::Unavailable,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Fenced {
                resource,
                token,
                seen,
            } => write!(
                f,
                "fenced: {resource:?} has seen token {seen}, above this write's {token}: a later holder has written; the write was not made"
            ),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(e) => write!(f, "the fencing gate's statement failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Database(e)
    }
}
