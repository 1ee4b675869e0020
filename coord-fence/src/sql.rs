//! The SQL gate: a database transaction admitted only while its fencing token is the
//! highest its resource has seen (PostgreSQL with feature `postgres`, SQLite with
//! feature `sqlite`, both through the user's own `sqlx` pool and transactions).
//!
//! # Schema
//!
//! One row per resource in one table (`coord_fences` unless named otherwise), which
//! [`SqlGate::create_table`] creates, or the user's own migration:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS coord_fences (
//!     resource TEXT PRIMARY KEY NOT NULL,  -- what the lock protects, e.g. its name
//!     token    BIGINT NOT NULL             -- the highest fencing token admitted
//! );
//! ```
//!
//! The gate's statement, in the user's transaction, raises the row to the transaction's
//! token unless a higher one is there (an upsert whose update is conditional):
//!
//! ```sql
//! INSERT INTO coord_fences (resource, token) VALUES ($1, $2)
//! ON CONFLICT (resource) DO UPDATE SET token = excluded.token
//!     WHERE coord_fences.token <= excluded.token
//! RETURNING token
//! ```
//!
//! No row back means a higher token was seen: the transaction is rolled back and the
//! gate says [`Error::Fenced`]. A shell script can run the same statement through
//! `psql` with `$COORD_FENCING_TOKEN` (see the README).

use std::future::Future;
use std::pin::Pin;

use coord_core::FencingToken;
use sqlx::Transaction;

use crate::Error;

/// The table a gate keeps its tokens in unless told otherwise.
pub const DEFAULT_TABLE: &str = "coord_fences";

pub use crate::MAX_RESOURCE_LEN;

/// A fencing gate over one table of the user's database (see the [module](self) docs
/// for its schema and statement).
///
/// # Fencing
///
/// [`SqlGate::admit`] runs, in the caller's transaction, before or after its writes:
/// once a transaction admitted with token `t` for a resource has committed, every
/// transaction for that resource with a token below `t` is refused — whichever started
/// first. Concurrent holders serialize on the resource's row (PostgreSQL locks it until
/// the transaction ends; SQLite has one writer at a time), so the older holder's
/// transaction either commits before the newer one's gate runs, or is refused. The
/// same token is admitted any number of times (one holder's many transactions).
///
/// What the gate protects is what is written in the gated transaction, and nothing
/// else.
///
/// A holder paused *inside* a gated transaction (SIGSTOP, a long GC) keeps its
/// connection and its lock on the resource's row: the next holder's gate waits until
/// the paused one resumes (and commits first — legitimately: it was admitted while it
/// held) or its database session ends. Bound that wait on the server:
/// PostgreSQL's `idle_in_transaction_session_timeout` ends such a session, and
/// `lock_timeout` bounds the next holder's wait (its gate then fails with
/// [`Error::Database`]); SQLite's busy timeout (sqlx: 5 s) does the latter.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use coord_fence::sql::SqlGate;
/// use coord_core::{Granted as _, Lock as _};
/// let client = coord_mem::connect("mem://sql-gate-doc")?;
/// let pool = sqlx::sqlite::SqlitePoolOptions::new()
///     .max_connections(1)
///     .connect("sqlite::memory:")
///     .await?;
/// let gate = SqlGate::new();
/// gate.create_table(&pool).await?;
/// sqlx::query("CREATE TABLE invoices (id INTEGER PRIMARY KEY, state TEXT)")
///     .execute(&pool)
///     .await?;
///
/// let guard = client.lock("invoices").await?;
/// let mut tx = gate.admit(pool.begin().await?, "invoices", guard.token()).await?;
/// sqlx::query("INSERT INTO invoices (state) VALUES ('sent')")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqlGate {
    table: String,
}

impl Default for SqlGate {
    fn default() -> Self {
        SqlGate::new()
    }
}

impl SqlGate {
    /// A gate over the table [`DEFAULT_TABLE`] (`coord_fences`).
    pub fn new() -> SqlGate {
        SqlGate {
            table: DEFAULT_TABLE.to_owned(),
        }
    }

    /// A gate over `table` (`name` or `schema.name`: letters, digits and `_`, not
    /// starting with a digit).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for any other name: it is written into the gate's
    /// statements, never bound.
    pub fn with_table(table: &str) -> Result<SqlGate, Error> {
        let plain = |part: &str| {
            !part.is_empty()
                && part.len() <= 63
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !part.starts_with(|c: char| c.is_ascii_digit())
        };
        let parts: Vec<&str> = table.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| plain(p)) {
            return Err(Error::InvalidArgument(format!(
                "{table:?} is not a table name the gate takes: use letters, digits and _ (not first), optionally schema.table"
            )));
        }
        Ok(SqlGate {
            table: table.to_owned(),
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The `CREATE TABLE IF NOT EXISTS` statement of the gate's table, for a migration
    /// of the user's own.
    pub fn schema(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (resource TEXT PRIMARY KEY NOT NULL, token BIGINT NOT NULL)",
            self.table
        )
    }

    /// Creates the gate's table if it is not there ([`SqlGate::schema`]).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the database refuses it (no `CREATE` privilege: run the
    /// schema as a migration instead).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: one idempotent statement; dropped, the table is there or not.
    pub async fn create_table<DB: GateDatabase>(&self, pool: &sqlx::Pool<DB>) -> Result<(), Error> {
        let mut conn = pool.acquire().await?;
        DB::execute(&mut conn, &self.schema()).await?;
        Ok(())
    }

    /// Admits `tx` for `resource` with `token`, or refuses it: raises the resource's
    /// highest-seen token to `token` in `tx` itself, and returns `tx` for the caller's
    /// writes and commit. Run it before the writes (they are not wasted on a refusal) or
    /// after them, but in the same transaction.
    ///
    /// # Fencing
    ///
    /// See [`SqlGate`]: after this returns `Ok`, `tx` holds the resource's row until it
    /// ends, so a later holder's gate waits for it (PostgreSQL's row lock, SQLite's one
    /// writer) and then admits the later holder; once a later holder's gated
    /// transaction has committed, this returns [`Error::Fenced`] for every lower token.
    ///
    /// # Errors
    ///
    /// - [`Error::Fenced`] when the resource has seen a higher token: `tx` was rolled
    ///   back; the caller's grant is over (a later holder has written).
    /// - [`Error::InvalidArgument`] for an empty or over-long `resource`, or a token
    ///   above `i64::MAX` (`BIGINT`): nothing was sent; `tx` is rolled back.
    /// - [`Error::Database`] when the statement failed (`tx` rolled back): a missing
    ///   table ([`SqlGate::create_table`]), a lost connection, or under `REPEATABLE
    ///   READ`/`SERIALIZABLE` a serialization failure caused by a concurrent later holder
    ///   (PostgreSQL `40001`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `tx`, which sqlx rolls back: nothing is admitted.
    pub async fn admit<'t, DB: GateDatabase>(
        &self,
        mut tx: Transaction<'t, DB>,
        resource: &str,
        token: FencingToken,
    ) -> Result<Transaction<'t, DB>, Error> {
        let bigint = match check(resource, token) {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        };
        let raised = DB::fetch_token(&mut tx, &self.raise_sql::<DB>(), resource, Some(bigint)).await;
        match raised {
            Ok(Some(_)) => Ok(tx),
            Ok(None) => {
                let seen = DB::fetch_token(&mut tx, &self.seen_sql::<DB>(), resource, None).await;
                let _ = tx.rollback().await;
                let seen = seen?.and_then(|t| u64::try_from(t).ok()).unwrap_or(u64::MAX);
                Err(Error::Fenced {
                    resource: resource.to_owned(),
                    token,
                    seen: FencingToken(seen),
                })
            }
            Err(e) => {
                let _ = tx.rollback().await;
                Err(Error::Database(e))
            }
        }
    }

    /// Begins a transaction on `pool` already admitted for `resource` with `token`: as
    /// `pool.begin()` followed by [`SqlGate::admit`], in one round trip on PostgreSQL
    /// (the `BEGIN` and the gate's statement go together), so that a gated transaction
    /// costs no more round trips than an ungated one. The pair goes as a simple query,
    /// which the server parses and plans each time: where round trips are cheap
    /// (loopback) [`SqlGate::admit`]'s prepared statement costs less; across a network,
    /// this does (`BENCHMARKS.md`, `fence-sql`).
    ///
    /// # Fencing
    ///
    /// As [`SqlGate::admit`].
    ///
    /// # Errors
    ///
    /// As [`SqlGate::admit`]; [`Error::Database`] also when no connection can be had.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future rolls the transaction back: nothing is admitted. On
    /// PostgreSQL the `BEGIN` runs on a task of its own to its end (a wait on the row
    /// included), and its transaction is then rolled back and its connection returned
    /// clean.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// use coord_fence::sql::SqlGate;
    /// use coord_core::FencingToken;
    /// let gate = SqlGate::new();
    /// gate.create_table(&pool).await?;
    /// let tx = gate.begin(&pool, "invoices", FencingToken(7)).await?;
    /// tx.commit().await?;
    /// assert!(gate.begin(&pool, "invoices", FencingToken(6)).await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn begin<DB: GateDatabase>(
        &self,
        pool: &sqlx::Pool<DB>,
        resource: &str,
        token: FencingToken,
    ) -> Result<Transaction<'static, DB>, Error> {
        let bigint = check(resource, token)?;
        match DB::begin_gated(pool, self, resource, bigint).await {
            Ok(tx) => Ok(tx),
            Err(Refusal::Fenced) => {
                let seen = self.seen(pool, resource).await?.unwrap_or(FencingToken(u64::MAX));
                Err(Error::Fenced {
                    resource: resource.to_owned(),
                    token,
                    seen,
                })
            }
            Err(Refusal::Other(e)) => Err(e),
        }
    }

    /// The highest token `resource` has seen (`None` before its first admission).
    ///
    /// # Errors
    ///
    /// [`Error::Database`], [`Error::InvalidArgument`] for an empty resource.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a read.
    pub async fn seen<DB: GateDatabase>(
        &self,
        pool: &sqlx::Pool<DB>,
        resource: &str,
    ) -> Result<Option<FencingToken>, Error> {
        check(resource, FencingToken(0))?;
        let mut conn = pool.acquire().await?;
        let seen = DB::fetch_token(&mut conn, &self.seen_sql::<DB>(), resource, None).await?;
        Ok(seen.and_then(|t| u64::try_from(t).ok()).map(FencingToken))
    }

    fn raise_sql<DB: GateDatabase>(&self) -> String {
        let (p1, p2) = DB::PLACEHOLDERS;
        let t = &self.table;
        format!(
            "INSERT INTO {t} (resource, token) VALUES ({p1}, {p2}) \
             ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE {t}.token <= excluded.token \
             RETURNING token"
        )
    }

    fn seen_sql<DB: GateDatabase>(&self) -> String {
        format!(
            "SELECT token FROM {} WHERE resource = {}",
            self.table,
            DB::PLACEHOLDERS.0
        )
    }
}

/// The token as `BIGINT`, once the input is known good.
fn check(resource: &str, token: FencingToken) -> Result<i64, Error> {
    if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN {
        return Err(Error::InvalidArgument(format!(
            "a resource name is 1 to {MAX_RESOURCE_LEN} bytes, not {}",
            resource.len()
        )));
    }
    if resource.contains('\0') {
        return Err(Error::InvalidArgument(
            "a resource name cannot contain a NUL character (no SQL text column holds one)".to_owned(),
        ));
    }
    i64::try_from(token.get())
        .map_err(|_| Error::InvalidArgument(format!("token {token} is above what a BIGINT column holds")))
}

/// Why [`GateDatabase::begin_gated`] did not begin: fenced (the seen token is read
/// after), or an error.
#[doc(hidden)]
#[derive(Debug)]
pub enum Refusal {
    /// A higher token was seen.
    Fenced,
    /// Anything else.
    Other(Error),
}

/// A future of the gate's statements.
type StatementFuture<'c, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>;

mod sealed {
    pub trait Sealed {}
}

/// A database the SQL gate runs on: `sqlx::Postgres` (feature `postgres`) and
/// `sqlx::Sqlite` (feature `sqlite`). Sealed: its methods are the gate's own.
pub trait GateDatabase: sqlx::Database + sealed::Sealed {
    /// The first two bind placeholders in the database's syntax.
    #[doc(hidden)]
    const PLACEHOLDERS: (&'static str, &'static str);

    /// Runs `sql` (no binds).
    #[doc(hidden)]
    fn execute<'c>(conn: &'c mut Self::Connection, sql: &'c str) -> StatementFuture<'c, ()>;

    /// Begins a transaction on `pool` admitted for `resource` with `token` (checked).
    #[doc(hidden)]
    fn begin_gated<'p>(
        pool: &'p sqlx::Pool<Self>,
        gate: &'p SqlGate,
        resource: &'p str,
        token: i64,
    ) -> Pin<Box<dyn Future<Output = Result<Transaction<'static, Self>, Refusal>> + Send + 'p>>;

    /// Runs `sql` with `resource` (and `token`, when given) bound; the first column of
    /// the one row back, if any.
    #[doc(hidden)]
    fn fetch_token<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
        resource: &'c str,
        token: Option<i64>,
    ) -> StatementFuture<'c, Option<i64>>;
}

macro_rules! gate_database {
    ($db:ty, $placeholders:expr, $begin_gated:path) => {
        impl sealed::Sealed for $db {}

        impl GateDatabase for $db {
            const PLACEHOLDERS: (&'static str, &'static str) = $placeholders;

            fn begin_gated<'p>(
                pool: &'p sqlx::Pool<Self>,
                gate: &'p SqlGate,
                resource: &'p str,
                token: i64,
            ) -> Pin<Box<dyn Future<Output = Result<Transaction<'static, Self>, Refusal>> + Send + 'p>> {
                Box::pin($begin_gated(pool, gate, resource, token))
            }

            fn execute<'c>(conn: &'c mut Self::Connection, sql: &'c str) -> StatementFuture<'c, ()> {
                Box::pin(async move {
                    sqlx::query(sql).execute(&mut *conn).await?;
                    Ok(())
                })
            }

            fn fetch_token<'c>(
                conn: &'c mut Self::Connection,
                sql: &'c str,
                resource: &'c str,
                token: Option<i64>,
            ) -> StatementFuture<'c, Option<i64>> {
                Box::pin(async move {
                    let query = sqlx::query_scalar::<_, i64>(sql).bind(resource);
                    let query = match token {
                        Some(t) => query.bind(t),
                        None => query,
                    };
                    query.fetch_optional(&mut *conn).await
                })
            }
        }
    };
}

#[cfg(feature = "postgres")]
gate_database!(sqlx::Postgres, ("$1", "$2"), postgres_begin_gated);
#[cfg(feature = "sqlite")]
gate_database!(sqlx::Sqlite, ("?1", "?2"), begin_then_admit);

/// The gate's statement and `BEGIN` in one simple query (one round trip). The statement
/// runs in the query's implicit transaction, which the `BEGIN` after it turns into the
/// caller's transaction (its row lock held to the commit); a refusal fails the implicit
/// transaction before the `BEGIN`, leaving the connection idle and clean. The values are
/// written into the text — the token a number, the resource dollar-quoted with a tag it
/// does not contain (no escapes, whatever `standard_conforming_strings` says) — and a
/// refusal is a division by zero (`22012`), the one error this statement can raise
/// that way: the upsert returned no row.
#[cfg(feature = "postgres")]
async fn postgres_begin_gated(
    pool: &sqlx::Pool<sqlx::Postgres>,
    gate: &SqlGate,
    resource: &str,
    token: i64,
) -> Result<Transaction<'static, sqlx::Postgres>, Refusal> {
    let tag = dollar_tag(resource);
    let t = gate.table();
    let sql = format!(
        "WITH raised AS (INSERT INTO {t} (resource, token) VALUES ({tag}{resource}{tag}, {token}) \
         ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE {t}.token <= excluded.token \
         RETURNING token) SELECT 1 / (SELECT count(*) FROM raised)::int; BEGIN"
    );
    // On a task of its own: sqlx rolls a transaction back when dropped, but not one
    // whose BEGIN is still on its way, and a dropped `begin_with` would leave its
    // connection in the pool inside the server's transaction, holding the row. The task
    // runs the BEGIN to its end; if the caller is gone by then, the transaction is dropped
    // and rolled back.
    let pool = pool.clone();
    let begun = tokio::spawn(async move { pool.begin_with(sql).await });
    match begun.await {
        Ok(Ok(tx)) => Ok(tx),
        Ok(Err(sqlx::Error::Database(e))) if e.code().as_deref() == Some("22012") => Err(Refusal::Fenced),
        Ok(Err(e)) => Err(Refusal::Other(Error::Database(e))),
        // The task panicked or its runtime is shutting down.
        Err(_) => Err(Refusal::Other(Error::Database(sqlx::Error::WorkerCrashed))),
    }
}

/// A dollar-quote tag (`$coordN$`) that occurs in `$tag{resource}$tag` only at its two
/// ends — not inside the resource, and not across its end and the closing tag.
#[cfg(feature = "postgres")]
fn dollar_tag(resource: &str) -> String {
    (0u32..)
        .map(|n| format!("$coord{n}$"))
        .find(|tag| {
            let quoted = format!("{tag}{resource}{tag}");
            quoted[1..].find(tag.as_str()) == Some(quoted.len() - tag.len() - 1)
        })
        .unwrap_or_default()
}

/// `pool.begin()`, then the gate's statement: for a database in the process, where a
/// round trip costs nothing.
#[cfg(feature = "sqlite")]
async fn begin_then_admit<DB: GateDatabase>(
    pool: &sqlx::Pool<DB>,
    gate: &SqlGate,
    resource: &str,
    token: i64,
) -> Result<Transaction<'static, DB>, Refusal> {
    let tx = pool
        .begin()
        .await
        .map_err(|e| Refusal::Other(Error::Database(e)))?;
    let token = FencingToken(u64::try_from(token).unwrap_or(0));
    match gate.admit(tx, resource, token).await {
        Ok(tx) => Ok(tx),
        Err(Error::Fenced { .. }) => Err(Refusal::Fenced),
        Err(e) => Err(Refusal::Other(e)),
    }
}
