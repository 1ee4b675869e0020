//! Workers increment a counter row of a SQL database under a lock, each write through the
//! SQL fencing gate in the same transaction; then a stale holder — one whose grant has
//! passed on — tries to write and is refused. SQLite by default (no server), PostgreSQL
//! with `--db postgres://…`; coord on `mem://` unless `COORD_URL` says otherwise.
//!
//! ```text
//! cargo run -p coord-examples --bin fenced-sql
//! cargo run -p coord-examples --bin fenced-sql -- --db postgres://user@127.0.0.1/app
//! COORD_URL=zk://127.0.0.1:2181/demo cargo run -p coord-examples --features zk --bin fenced-sql
//! ```
//!
//! Prints `count is exact` and `stale write refused`; exits non-zero otherwise.

use clap::Parser;
use coord::fence::Error as FenceError;
use coord::fence::sql::SqlGate;
use coord::prelude::*;

#[derive(Parser)]
#[command(about = "Workers write a database row under a lock, through the SQL fencing gate")]
struct Args {
    /// The database: `sqlite:PATH` or `postgres://…` (default: SQLite in a temporary file).
    #[arg(long)]
    db: Option<String>,
    /// Number of workers, each with its own client (session).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Increments per worker.
    #[arg(long, default_value_t = 5)]
    rounds: i64,
}

/// The lock's name, and the gate's resource: what the lock protects.
const RESOURCE: &str = "fenced-sql/counter";

/// The example's own table, and the same statements on either database (no binds, so
/// one text serves both placeholder syntaxes).
const CREATE: &str =
    "CREATE TABLE IF NOT EXISTS coord_example_counter (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)";
const INCREMENT: &str = "UPDATE coord_example_counter SET n = n + 1 WHERE id = 1";
const READ: &str = "SELECT n FROM coord_example_counter WHERE id = 1";

/// The same code on either pool type: a macro, not a generic function, to keep sqlx's
/// trait bounds out of an example.
macro_rules! on_database {
    ($pool:expr, $args:expr) => {{
        let pool = $pool;
        let gate = SqlGate::new();
        gate.create_table(&pool).await?;
        sqlx::query(CREATE).execute(&pool).await?;
        // A fresh demo: the counter at 0, and the resource's record cleared — a new
        // mem:// cluster's tokens start low again. Never clear it in production: a
        // resource takes its tokens from one coord cluster for good.
        sqlx::query("DELETE FROM coord_example_counter")
            .execute(&pool)
            .await?;
        sqlx::query("INSERT INTO coord_example_counter (id, n) VALUES (1, 0)")
            .execute(&pool)
            .await?;
        sqlx::query(&format!(
            "DELETE FROM {} WHERE resource = '{RESOURCE}'",
            gate.table()
        ))
        .execute(&pool)
        .await?;

        let mut workers = Vec::new();
        for _ in 0..$args.workers {
            let client = coord_examples::connect().await?;
            let (pool, gate, rounds) = (pool.clone(), gate.clone(), $args.rounds);
            workers.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..rounds {
                    let guard = client.lock(RESOURCE).await?;
                    // BEGIN and the gate in one round trip; Err(Fenced), rolled back,
                    // if a later holder has written.
                    let mut tx = gate.begin(&pool, RESOURCE, guard.token()).await?;
                    sqlx::query(INCREMENT).execute(&mut *tx).await?;
                    tx.commit().await?;
                    tokens.push(guard.token());
                    guard.release().await?;
                }
                client.close().await?;
                anyhow::Ok(tokens)
            }));
        }
        let mut tokens = Vec::new();
        for w in workers {
            tokens.extend(w.await??);
        }
        tokens.sort();
        let n: i64 = sqlx::query_scalar(READ).fetch_one(&pool).await?;

        // A holder that paused while it held the first grant wakes up and writes.
        let stale = tokens
            .first()
            .copied()
            .ok_or_else(|| anyhow::anyhow!("no grant"))?;
        let refused = match gate.begin(&pool, RESOURCE, stale).await {
            Err(FenceError::Fenced { .. }) => true,
            Err(e) => return Err(e.into()),
            Ok(mut tx) => {
                sqlx::query(INCREMENT).execute(&mut *tx).await?;
                tx.commit().await?;
                false
            }
        };
        let after: i64 = sqlx::query_scalar(READ).fetch_one(&pool).await?;
        (n, tokens, refused, after)
    }};
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    anyhow::ensure!(
        args.workers as i64 * args.rounds >= 2,
        "--workers × --rounds must be at least 2: the stale holder is the first of several grants"
    );
    let temp = std::env::temp_dir().join(format!("coord-fenced-sql-{}.db", std::process::id()));
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}?mode=rwc", temp.display()));
    let setup = coord_examples::connect().await?;
    println!(
        "backend {}, database {}, {} workers × {} rounds",
        setup.kind(),
        db.split('@').next_back().unwrap_or(&db),
        args.workers,
        args.rounds
    );
    setup.close().await?;
    let (n, tokens, refused, after) = if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        on_database!(sqlx::PgPool::connect(&db).await?, args)
    } else if db.starts_with("sqlite:") {
        on_database!(sqlx::SqlitePool::connect(&db).await?, args)
    } else {
        anyhow::bail!("--db {db:?}: use sqlite:PATH or postgres://…");
    };
    println!(
        "count {n}, tokens {}..={}",
        tokens.first().map_or(0, |t| t.get()),
        tokens.last().map_or(0, |t| t.get())
    );
    if args.db.is_none() {
        let _ = std::fs::remove_file(&temp);
    }
    let want = args.workers as i64 * args.rounds;
    anyhow::ensure!(n == want, "count is {n}, expected {want}");
    println!("count is exact");
    anyhow::ensure!(
        refused && after == n,
        "a stale holder's write was admitted (count {after})"
    );
    println!("stale write refused");
    Ok(())
}
