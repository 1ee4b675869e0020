//! The SQL gate on SQLite (a real database file, several connections), with grants from
//! coord's in-memory backend: a holder paused past its session writes after its
//! successor — refused through the gate, an overwrite without it (the negative control).

#![cfg(feature = "sqlite")]

use std::time::Duration;

use coord_core::Granted as _;
use coord_core::{FencingToken, HoldState, Lock as _};
use coord_fence::Error;
use coord_fence::sql::SqlGate;
use coord_mem::MemClient;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A pool on a database file of its own, with the gate's table and a `work` table.
async fn database(dir: &tempfile::TempDir, gate: &SqlGate) -> Result<SqlitePool> {
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("data.db"))
        .create_if_missing(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    gate.create_table(&pool).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS work (resource TEXT PRIMARY KEY, owner TEXT NOT NULL)")
        .execute(&pool)
        .await?;
    Ok(pool)
}

/// Writes `owner` as the resource's owner, through the gate with `token` when a gate is
/// given; the gate's refusal, if any.
async fn write(
    pool: &SqlitePool,
    gate: Option<&SqlGate>,
    resource: &str,
    token: FencingToken,
    owner: &str,
) -> Result<std::result::Result<(), Error>> {
    let mut tx = pool.begin().await?;
    if let Some(gate) = gate {
        tx = match gate.admit(tx, resource, token).await {
            Ok(tx) => tx,
            Err(e @ Error::Fenced { .. }) => return Ok(Err(e)),
            Err(e) => return Err(e.into()),
        };
    }
    sqlx::query("INSERT INTO work (resource, owner) VALUES (?1, ?2) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner")
        .bind(resource)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Ok(()))
}

async fn owner(pool: &SqlitePool, resource: &str) -> Result<Option<String>> {
    Ok(sqlx::query_scalar("SELECT owner FROM work WHERE resource = ?1")
        .bind(resource)
        .fetch_optional(pool)
        .await?)
}

#[tokio::test]
async fn a_lower_token_is_refused_and_rolled_back() -> Result {
    let dir = tempfile::tempdir()?;
    let gate = SqlGate::new();
    let pool = database(&dir, &gate).await?;
    write(&pool, Some(&gate), "r", FencingToken(5), "five").await??;
    // The same holder's next transaction: the same token is admitted again.
    write(&pool, Some(&gate), "r", FencingToken(5), "five again").await??;
    match write(&pool, Some(&gate), "r", FencingToken(3), "three").await? {
        Err(Error::Fenced {
            resource,
            token,
            seen,
        }) => {
            assert_eq!(
                (resource.as_str(), token, seen),
                ("r", FencingToken(3), FencingToken(5))
            );
        }
        other => panic!("a lower token was {other:?}"),
    }
    assert_eq!(owner(&pool, "r").await?.as_deref(), Some("five again"));
    // Other resources are apart.
    write(&pool, Some(&gate), "other", FencingToken(1), "one").await??;
    let seen = gate.seen(&pool, "r").await?;
    assert_eq!(seen, Some(FencingToken(5)));
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_before_any_statement() -> Result {
    let dir = tempfile::tempdir()?;
    let gate = SqlGate::new();
    let pool = database(&dir, &gate).await?;
    for (resource, token) in [("", 1), ("r", u64::MAX)] {
        match gate
            .admit(pool.begin().await?, resource, FencingToken(token))
            .await
        {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{resource:?}/{token}: {:?}", other.map(|_| ())),
        }
    }
    assert!(SqlGate::with_table("coord_fences; DROP TABLE work").is_err());
    assert!(SqlGate::with_table("app.fences").is_ok());
    // A table that is not there: a database error, not a refusal.
    let missing = SqlGate::with_table("not_created")?;
    match missing.admit(pool.begin().await?, "r", FencingToken(1)).await {
        Err(Error::Database(_)) => {}
        other => panic!("a missing table: {:?}", other.map(|_| ())),
    }
    Ok(())
}

/// Holder A is paused past its session (its link cut: it cannot even learn it lost); B
/// is granted the lock and writes; A resumes and writes what it was doing. Through the
/// gate A's write is refused and B's stays; without the gate A overwrites B.
#[tokio::test]
async fn a_paused_holder_cannot_overwrite_its_successor() -> Result {
    for gated in [true, false] {
        let dir = tempfile::tempdir()?;
        let gate = SqlGate::new();
        let pool = database(&dir, &gate).await?;
        let url = format!("mem://fence-sqlite-{}-{gated}?session_ttl=1s", std::process::id());
        let (a, b) = (coord_mem::connect(&url)?, coord_mem::connect(&url)?);
        let held = a.lock("invoices").await?;
        let token_a = held.token();
        a.backend_as::<MemClient>()
            .ok_or("not a mem client")?
            .suspend(Duration::from_secs(30));
        let successor = tokio::time::timeout(Duration::from_secs(20), b.lock("invoices")).await??;
        assert!(successor.token() > token_a);
        let g = gated.then_some(&gate);
        write(&pool, g, "invoices", successor.token(), "b").await??;
        // A resumes: it goes on with the work it started while it held.
        let refused = write(&pool, g, "invoices", token_a, "a").await?;
        let now = owner(&pool, "invoices").await?;
        if gated {
            assert!(
                matches!(refused, Err(Error::Fenced { .. })),
                "the paused holder's gated write was {refused:?}"
            );
            assert_eq!(now.as_deref(), Some("b"), "the successor's work was overwritten");
        } else {
            // The negative control: the same run without the gate shows the overwrite.
            assert_eq!(
                now.as_deref(),
                Some("a"),
                "without the gate the old holder did not overwrite"
            );
        }
        assert_ne!(successor.state(), HoldState::Lost);
    }
    Ok(())
}

/// Two holders' transactions open at once: the older one (lower token) took the row
/// first and commits; the newer one, admitted after, commits too — and from then on the
/// older token is refused.
#[tokio::test]
async fn concurrent_transactions_serialize_on_the_resource() -> Result {
    let dir = tempfile::tempdir()?;
    let gate = SqlGate::new();
    let pool = database(&dir, &gate).await?;
    let older = gate.admit(pool.begin().await?, "r", FencingToken(10)).await?;
    let newer = {
        let (pool, gate) = (pool.clone(), gate.clone());
        tokio::spawn(async move {
            let tx = gate.admit(pool.begin().await?, "r", FencingToken(11)).await?;
            tx.commit().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    older.commit().await?;
    newer.await??;
    match write(&pool, Some(&gate), "r", FencingToken(10), "late").await? {
        Err(Error::Fenced { seen, .. }) => assert_eq!(seen, FencingToken(11)),
        other => panic!("the older token after the newer committed: {other:?}"),
    }
    Ok(())
}

#[path = "common/history.rs"]
mod history;

/// Gate histories on SQLite, judged by the sections checker (see `common/history.rs`):
/// through the gate no sections overlap; without it, they do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_histories_are_judged_exclusive() -> Result {
    for gated in [true, false] {
        let dir = tempfile::tempdir()?;
        let gate = SqlGate::new();
        let pool = database(&dir, &gate).await?;
        sqlx::query("CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, holder TEXT NOT NULL, token BIGINT NOT NULL)")
            .execute(&pool)
            .await?;
        let write = {
            let (pool, gate) = (pool.clone(), gate.clone());
            move |holder: String, token: u64| {
                let (pool, gate) = (pool.clone(), gate.clone());
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
                    sqlx::query("INSERT INTO log (holder, token) VALUES (?1, ?2)")
                        .bind(holder)
                        .bind(token as i64)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(history::Wrote::Committed)
                }
            }
        };
        let name = format!("fence-history-sqlite-{}-{gated}", std::process::id());
        let late = history::run(3, &name, write).await?;
        assert!(
            late >= history::PAUSES,
            "only {late} late writes within {:?}",
            history::LIMIT
        );
        let rows: Vec<(String, i64)> = sqlx::query_as("SELECT holder, token FROM log ORDER BY seq")
            .fetch_all(&pool)
            .await?;
        let report = history::judge(rows);
        if gated {
            assert!(report.is_ok(), "through the gate: {:?}", report.violations);
        } else {
            assert!(
                !report.is_ok(),
                "without the gate the checker found no overlap: {:?}",
                report.summary
            );
        }
    }
    Ok(())
}
