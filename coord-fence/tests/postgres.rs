//! The SQL gate on a real PostgreSQL (`COORD_TEST_PG`, a `postgres://` URL; the
//! README's test command starts one), with grants from coord's in-memory backend: a
//! paused holder's write refused (and shown to overwrite without the gate), concurrent
//! holders serialized on the resource's row, a holder paused inside its transaction
//! bounded by `lock_timeout`, `REPEATABLE READ`, and the HTTP layer's record shared by
//! two replicas.
//!
//! Unset, the cases are reported ignored — or failed when `COORD_TEST_REQUIRE` names
//! `postgres`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use coord_core::Granted as _;
use coord_core::{FencingToken, Lock as _};
use coord_fence::Error;
use coord_fence::sql::SqlGate;
use coord_mem::MemClient;
use libtest_mimic::{Arguments, Failed, Trial};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A pool on the test database, a gate over a table of this case's own, and a `work`
/// table of its own.
struct Db {
    pool: PgPool,
    gate: SqlGate,
    work: String,
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

async fn database(url: &str) -> Result<Db> {
    let pool = PgPoolOptions::new().max_connections(8).connect(url).await?;
    let n = format!("{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let gate = SqlGate::with_table(&format!("fences_{n}"))?;
    gate.create_table(&pool).await?;
    let work = format!("work_{n}");
    sqlx::query(&format!(
        "CREATE TABLE {work} (resource TEXT PRIMARY KEY, owner TEXT NOT NULL)"
    ))
    .execute(&pool)
    .await?;
    Ok(Db { pool, gate, work })
}

impl Db {
    /// Writes `owner` through the gate with `token` when `gated`; the gate's refusal,
    /// if any.
    async fn write(
        &self,
        gated: bool,
        resource: &str,
        token: FencingToken,
        owner: &str,
    ) -> Result<std::result::Result<(), Error>> {
        let mut tx = self.pool.begin().await?;
        if gated {
            tx = match self.gate.admit(tx, resource, token).await {
                Ok(tx) => tx,
                Err(e @ Error::Fenced { .. }) => return Ok(Err(e)),
                Err(e) => return Err(e.into()),
            };
        }
        sqlx::query(&format!(
            "INSERT INTO {} (resource, owner) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner",
            self.work
        ))
        .bind(resource)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    async fn owner(&self, resource: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar(&format!("SELECT owner FROM {} WHERE resource = $1", self.work))
                .bind(resource)
                .fetch_optional(&self.pool)
                .await?,
        )
    }
}

async fn a_lower_token_is_refused_and_rolled_back(url: String) -> Result {
    let db = database(&url).await?;
    db.write(true, "r", FencingToken(5), "five").await??;
    db.write(true, "r", FencingToken(5), "five again").await??;
    match db.write(true, "r", FencingToken(3), "three").await? {
        Err(Error::Fenced { token, seen, .. }) => {
            assert_eq!((token, seen), (FencingToken(3), FencingToken(5)))
        }
        other => return Err(format!("a lower token was {other:?}").into()),
    }
    assert_eq!(db.owner("r").await?.as_deref(), Some("five again"));
    assert_eq!(db.gate.seen(&db.pool, "r").await?, Some(FencingToken(5)));
    assert_eq!(db.gate.seen(&db.pool, "never").await?, None);
    Ok(())
}

/// Holder A is paused past its session; B is granted the lock and writes; A resumes
/// and writes what it was doing. Through the gate A is refused and B's row stays;
/// without the gate A overwrites B (the negative control).
async fn a_paused_holder_cannot_overwrite_its_successor(url: String) -> Result {
    for gated in [true, false] {
        let db = database(&url).await?;
        let mem = format!("mem://fence-pg-{}-{gated}?session_ttl=1s", std::process::id());
        let (a, b) = (coord_mem::connect(&mem)?, coord_mem::connect(&mem)?);
        let held = a.lock("invoices").await?;
        let token_a = held.token();
        a.backend_as::<MemClient>()
            .ok_or("not a mem client")?
            .suspend(Duration::from_secs(30));
        let successor = tokio::time::timeout(Duration::from_secs(20), b.lock("invoices")).await??;
        db.write(gated, "invoices", successor.token(), "b").await??;
        let late = db.write(gated, "invoices", token_a, "a").await?;
        let now = db.owner("invoices").await?;
        if gated {
            assert!(matches!(late, Err(Error::Fenced { .. })), "{late:?}");
            assert_eq!(now.as_deref(), Some("b"), "the successor's work was overwritten");
        } else {
            assert_eq!(
                now.as_deref(),
                Some("a"),
                "without the gate the old holder did not overwrite"
            );
        }
    }
    Ok(())
}

/// The older holder's transaction has the row; the newer holder's gate waits on it (it
/// is not admitted while the older one is open), then is admitted when the older one
/// commits; from then on the older token is refused.
async fn concurrent_holders_serialize_on_the_row(url: String) -> Result {
    let db = database(&url).await?;
    let older = db
        .gate
        .admit(db.pool.begin().await?, "r", FencingToken(10))
        .await?;
    let newer = {
        let (pool, gate) = (db.pool.clone(), db.gate.clone());
        tokio::spawn(async move {
            let tx = gate.admit(pool.begin().await?, "r", FencingToken(11)).await?;
            tx.commit().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !newer.is_finished(),
        "the newer holder was admitted while the older one's transaction was open"
    );
    older.commit().await?;
    tokio::time::timeout(Duration::from_secs(10), newer).await???;
    match db.write(true, "r", FencingToken(10), "late").await? {
        Err(Error::Fenced { seen, .. }) => assert_eq!(seen, FencingToken(11)),
        other => return Err(format!("the older token after the newer committed: {other:?}").into()),
    }
    Ok(())
}

/// A holder paused inside its gated transaction keeps the row; the next holder's gate,
/// bounded with `lock_timeout`, fails with a database error — not admitted, not a
/// refusal — and is admitted once the paused one's transaction ends.
async fn a_holder_paused_in_its_transaction_is_bounded_by_lock_timeout(url: String) -> Result {
    let db = database(&url).await?;
    let paused = db
        .gate
        .admit(db.pool.begin().await?, "r", FencingToken(1))
        .await?;
    let mut next = db.pool.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '200ms'")
        .execute(&mut *next)
        .await?;
    match db.gate.admit(next, "r", FencingToken(2)).await {
        Err(Error::Database(e)) => {
            let text = e.to_string();
            assert!(text.contains("lock timeout"), "{text}");
        }
        other => return Err(format!("the gate behind a held row: {:?}", other.map(|_| ())).into()),
    }
    paused.rollback().await?;
    db.write(true, "r", FencingToken(2), "next").await??;
    Ok(())
}

/// Under `REPEATABLE READ` an older holder whose snapshot predates a newer holder's
/// commit is not admitted either: PostgreSQL fails the upsert with a serialization
/// error (`40001`), which the gate reports as a database error.
async fn repeatable_read_never_admits_a_stale_snapshot(url: String) -> Result {
    let db = database(&url).await?;
    db.write(true, "r", FencingToken(5), "five").await??;
    let mut older = db.pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *older)
        .await?;
    sqlx::query("SELECT 1").execute(&mut *older).await?; // takes the snapshot
    db.write(true, "r", FencingToken(9), "nine").await??;
    match db.gate.admit(older, "r", FencingToken(6)).await {
        Err(Error::Fenced { .. }) | Err(Error::Database(_)) => {}
        Ok(_) => return Err("a stale snapshot was admitted".into()),
        Err(e) => return Err(e.into()),
    }
    assert_eq!(db.owner("r").await?.as_deref(), Some("nine"));
    Ok(())
}

/// `SqlGate::begin` (BEGIN and the gate in one round trip) admits and refuses as
/// `admit` does, with resource names that need quoting, and waits on the row the same.
async fn begin_admits_and_refuses_as_admit_does(url: String) -> Result {
    let db = database(&url).await?;
    for resource in [
        "plain",
        "it's",
        "back\\slash'",
        "$coord0$ and $coord1$",
        "x$coord0",
        "x$coord",
        "$",
        "x$coord0$coord1",
        "ünïcode/ok",
        "a;b --c",
    ] {
        let tx = db.gate.begin(&db.pool, resource, FencingToken(7)).await?;
        tx.commit().await?;
        assert_eq!(
            db.gate.seen(&db.pool, resource).await?,
            Some(FencingToken(7)),
            "{resource}"
        );
        match db.gate.begin(&db.pool, resource, FencingToken(6)).await {
            Err(Error::Fenced { token, seen, .. }) => {
                assert_eq!((token, seen), (FencingToken(6), FencingToken(7)), "{resource}")
            }
            other => return Err(format!("{resource}: a lower token was {:?}", other.map(|_| ())).into()),
        }
        // The refused transaction left nothing open: the same token goes again.
        db.gate
            .begin(&db.pool, resource, FencingToken(7))
            .await?
            .commit()
            .await?;
    }
    // A refusal leaves its connection clean: on a pool of one connection, the next
    // statement runs (a connection left in a failed transaction would refuse it).
    let one = PgPoolOptions::new().max_connections(1).connect(&url).await?;
    assert!(db.gate.begin(&one, "plain", FencingToken(1)).await.is_err());
    let answer: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&one).await?;
    assert_eq!(answer, 1);
    match db.gate.begin(&db.pool, "nul\0", FencingToken(1)).await {
        Err(Error::InvalidArgument(_)) => {}
        other => return Err(format!("a NUL resource: {:?}", other.map(|_| ())).into()),
    }
    // A begin cancelled while it waits on the row leaves nothing open: once the holder
    // ahead commits, no session of the pool is left inside a transaction, and the next
    // holder is admitted.
    let ahead = db.gate.begin(&db.pool, "waited", FencingToken(5)).await?;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        db.gate.begin(&db.pool, "waited", FencingToken(9)),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the begin behind an open transaction did not wait"
    );
    ahead.commit().await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND query LIKE '%' || $1 || '%'",
        )
        .bind(db.gate.table())
        .fetch_one(&db.pool)
        .await?;
        if open == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{open} sessions left inside the cancelled begin's transaction"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        db.gate.begin(&db.pool, "waited", FencingToken(12)),
    )
    .await??;
    next.commit().await?;

    // A statement the database refuses as such (a reserved word as the table's name) is
    // not worth a retry: InvalidArgument, not Unavailable.
    let reserved = SqlGate::with_table("user")?;
    let refused = reserved
        .create_table(&db.pool)
        .await
        .err()
        .ok_or("CREATE TABLE user worked")?;
    assert_eq!(
        refused.kind(),
        coord_core::ErrorKind::InvalidArgument,
        "{refused}"
    );

    // An older holder's open transaction holds the newer one's begin.
    let older = db.gate.begin(&db.pool, "r", FencingToken(10)).await?;
    let newer = {
        let (pool, gate) = (db.pool.clone(), db.gate.clone());
        tokio::spawn(async move {
            gate.begin(&pool, "r", FencingToken(11))
                .await?
                .commit()
                .await
                .map_err(Error::from)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !newer.is_finished(),
        "admitted while the older holder's transaction was open"
    );
    older.commit().await?;
    tokio::time::timeout(Duration::from_secs(10), newer).await???;
    Ok(())
}

/// The HTTP layer's record in PostgreSQL: a newer holder's request to one replica
/// fences the older holder's requests to the other.
async fn http_replicas_share_the_record(url: String) -> Result {
    use coord_fence::http::{FenceHeader, FenceLayer, FenceRequest as _, SqlSeen};
    use tower::ServiceExt as _;
    let db = database(&url).await?;
    let app = || {
        axum::Router::new()
            .route("/", axum::routing::put(|| async { "stored" }))
            .layer(FenceLayer::with_store(SqlSeen::new(
                db.pool.clone(),
                db.gate.clone(),
            )))
    };
    let (one, two) = (app(), app());
    let call = |app: axum::Router, token: u64| async move {
        let request = http::Request::put("/")
            .fence(&FenceHeader::new("invoices", FencingToken(token))?)
            .body(axum::body::Body::empty())?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(app.oneshot(request).await?.status())
    };
    assert_eq!(call(one.clone(), 100).await?, http::StatusCode::OK);
    assert_eq!(call(two.clone(), 200).await?, http::StatusCode::OK);
    assert_eq!(call(one, 100).await?, http::StatusCode::CONFLICT);
    assert_eq!(db.gate.seen(&db.pool, "invoices").await?, Some(FencingToken(200)));
    Ok(())
}

#[path = "common/history.rs"]
mod history;

/// Gate histories on PostgreSQL, judged by the sections checker (see
/// `common/history.rs`): through the gate no sections overlap; without it, they do.
async fn gate_histories_are_judged_exclusive(url: String) -> Result {
    for gated in [true, false] {
        let db = database(&url).await?;
        let log = db.work.replace("work_", "log_");
        sqlx::query(&format!(
            "CREATE TABLE {log} (seq BIGSERIAL PRIMARY KEY, holder TEXT NOT NULL, token BIGINT NOT NULL)"
        ))
        .execute(&db.pool)
        .await?;
        let write = {
            let (pool, gate, log) = (db.pool.clone(), db.gate.clone(), log.clone());
            move |holder: String, token: u64| {
                let (pool, gate, log) = (pool.clone(), gate.clone(), log.clone());
                async move {
                    let mut tx = if gated {
                        match gate.begin(&pool, "resource", FencingToken(token)).await {
                            Ok(tx) => tx,
                            Err(Error::Fenced { .. }) => return Ok(history::Wrote::Fenced),
                            Err(e) => return Err(e.into()),
                        }
                    } else {
                        pool.begin().await?
                    };
                    sqlx::query(&format!("INSERT INTO {log} (holder, token) VALUES ($1, $2)"))
                        .bind(holder)
                        .bind(token as i64)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(history::Wrote::Committed)
                }
            }
        };
        let name = format!("fence-history-pg-{}-{gated}", std::process::id());
        let late = history::run(3, &name, write).await?;
        if late < history::PAUSES {
            return Err(format!("only {late} late writes within {:?}", history::LIMIT).into());
        }
        let rows: Vec<(String, i64)> =
            sqlx::query_as(&format!("SELECT holder, token FROM {log} ORDER BY seq"))
                .fetch_all(&db.pool)
                .await?;
        let report = history::judge(rows);
        if gated && !report.is_ok() {
            return Err(format!("through the gate: {:?}", report.violations).into());
        }
        if !gated && report.is_ok() {
            return Err(format!(
                "without the gate the checker found no overlap: {:?}",
                report.summary
            )
            .into());
        }
    }
    Ok(())
}

fn trial<F, Fut>(name: &str, url: Option<&String>, case: F) -> Trial
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = Result> + 'static,
{
    let url = url.cloned();
    let required = coord_testkit::env::required("postgres");
    let ignored = url.is_none() && !required;
    Trial::test(name.to_owned(), move || {
        let Some(url) = url else {
            return Err(Failed::from(
                "COORD_TEST_REQUIRE names postgres, but COORD_TEST_PG is not set (a postgres:// URL)",
            ));
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(e.to_string()))?;
        runtime
            .block_on(async move { tokio::time::timeout(Duration::from_secs(120), case(url)).await })
            .map_err(|_| Failed::from("the case did not finish within 120 s"))?
            .map_err(|e| Failed::from(e.to_string()))
    })
    .with_ignored_flag(ignored)
}

fn main() {
    let args = Arguments::from_args();
    let url = coord_testkit::env::endpoint("COORD_TEST_PG");
    let url = url.as_ref();
    let trials = vec![
        trial(
            "postgres::a_lower_token_is_refused_and_rolled_back",
            url,
            a_lower_token_is_refused_and_rolled_back,
        ),
        trial(
            "postgres::a_paused_holder_cannot_overwrite_its_successor",
            url,
            a_paused_holder_cannot_overwrite_its_successor,
        ),
        trial(
            "postgres::concurrent_holders_serialize_on_the_row",
            url,
            concurrent_holders_serialize_on_the_row,
        ),
        trial(
            "postgres::a_holder_paused_in_its_transaction_is_bounded_by_lock_timeout",
            url,
            a_holder_paused_in_its_transaction_is_bounded_by_lock_timeout,
        ),
        trial(
            "postgres::repeatable_read_never_admits_a_stale_snapshot",
            url,
            repeatable_read_never_admits_a_stale_snapshot,
        ),
        trial(
            "postgres::http_replicas_share_the_record",
            url,
            http_replicas_share_the_record,
        ),
        trial(
            "postgres::begin_admits_and_refuses_as_admit_does",
            url,
            begin_admits_and_refuses_as_admit_does,
        ),
        trial(
            "postgres::gate_histories_are_judged_exclusive",
            url,
            gate_histories_are_judged_exclusive,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
