//! `fence-sql`: what the SQL fencing gate adds to a user's transaction on PostgreSQL over
//! loopback. One connection runs the same transaction in interleaved blocks: ungated
//! (`BEGIN`, the work, `COMMIT`), gated with `SqlGate::admit` (`BEGIN`, the gate, the
//! work, `COMMIT`: one statement and one round trip more), and gated with
//! `SqlGate::begin` (the gate and `BEGIN` in one round trip, as a simple query that the
//! server plans each time). Two works: `update`, one `UPDATE … SET n = n + 1` (the
//! lightest transaction, where the gate weighs most), and `order`, a row read `FOR
//! UPDATE`, its update and an audit row inserted (a small real transaction). Each
//! subject's median and p99 per transaction, and the gated ones' ratio to the same work
//! ungated (`x_ungated`: 1.0 is free). Then the `update` work again through a proxy that
//! delays every chunk by 1 ms each way (backend `postgres+2ms`): a database across a
//! network, where round trips, not the server's work, set the cost.

use std::time::{Duration, Instant};

use anyhow::Result;
use coord::FencingToken;
use coord::fence::sql::SqlGate;
use sqlx::postgres::PgPoolOptions;

use crate::measure::{Latencies, Row};

const GATES: [&str; 3] = ["ungated", "gated-admit", "gated-begin"];

/// The works: a name and its statements.
const WORKS: [(&str, &[&str]); 2] = [
    (
        "update",
        &["UPDATE coord_bench_counter SET n = n + 1 WHERE id = 1"],
    ),
    (
        "order",
        &[
            "SELECT n FROM coord_bench_counter WHERE id = 1 FOR UPDATE",
            "UPDATE coord_bench_counter SET n = n + 1 WHERE id = 1",
            "INSERT INTO coord_bench_audit (n, at) SELECT n, now() FROM coord_bench_counter WHERE id = 1",
        ],
    ),
];

/// Runs `seconds` per subject, in blocks of `block` transactions taken in turn: over
/// loopback, then through a 1 ms proxy.
pub async fn run(url: &str, seconds: f64, block: usize) -> Result<Vec<Row>> {
    let mut rows = measure(url, "postgres", &WORKS, seconds, block).await?;
    let parsed = parse_url(url)?;
    let proxy = coord_testkit::FaultProxy::start(parsed.addr).await?;
    proxy.delay(Duration::from_millis(1));
    let slow = format!("postgres://{}@{}/{}", parsed.user, proxy.addr(), parsed.db);
    rows.extend(measure(&slow, "postgres+2ms", &WORKS[..1], seconds, block.min(10)).await?);
    Ok(rows)
}

/// The parts of `postgres://USER@HOST:PORT/DB` a proxied URL needs.
struct PgUrl {
    user: String,
    addr: std::net::SocketAddr,
    db: String,
}

fn parse_url(url: &str) -> Result<PgUrl> {
    let bad = || anyhow::anyhow!("{url:?}: fence-sql wants postgres://USER@HOST:PORT/DB (no password)");
    let rest = url.strip_prefix("postgres://").ok_or_else(bad)?;
    let (user, rest) = rest.split_once('@').ok_or_else(bad)?;
    let (host, db) = rest.split_once('/').ok_or_else(bad)?;
    use std::net::ToSocketAddrs as _;
    let addr = host.to_socket_addrs()?.next().ok_or_else(bad)?;
    Ok(PgUrl {
        user: user.to_owned(),
        addr,
        db: db.to_owned(),
    })
}

async fn measure(
    url: &str,
    backend: &str,
    works: &[(&str, &[&str])],
    seconds: f64,
    block: usize,
) -> Result<Vec<Row>> {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
    let gate = SqlGate::with_table("coord_bench_fences")?;
    gate.create_table(&pool).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS coord_bench_counter (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO coord_bench_counter (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS coord_bench_audit (id BIGSERIAL PRIMARY KEY, n BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("TRUNCATE coord_bench_audit").execute(&pool).await?;
    // The token a holder writes with; the record is raised to it once and stays.
    let token = FencingToken(1 << 40);
    let resource = format!("bench-{}", std::process::id());
    let mut rows = Vec::new();
    for &(work, statements) in works {
        let mut samples: Vec<Latencies> = vec![Latencies::default(); GATES.len()];
        let mut spent = [Duration::ZERO; 3];
        // Warm-up: every statement prepared, the record's row there.
        for i in 0..GATES.len() {
            for _ in 0..block {
                one(&pool, &gate, &resource, token, statements, i).await?;
            }
        }
        let budget = Duration::from_secs_f64(seconds);
        while spent.iter().any(|s| *s < budget) {
            for (i, subject) in samples.iter_mut().enumerate() {
                for _ in 0..block {
                    let t = Instant::now();
                    one(&pool, &gate, &resource, token, statements, i).await?;
                    let d = t.elapsed();
                    subject.push(d);
                    spent[i] += d;
                }
            }
        }
        let ungated = samples[0].ms(0.5);
        for (i, gated) in GATES.iter().enumerate() {
            let s = &samples[i];
            let mut row = Row::new("fence-sql", backend, &format!("{work}-{gated}"))
                .with("tx", s.len() as f64)
                .with("tx_p50_us", s.ms(0.5) * 1e3)
                .with("tx_p99_us", s.ms(0.99) * 1e3);
            if i > 0 && ungated > 0.0 {
                row.set("x_ungated", s.ms(0.5) / ungated);
            }
            rows.push(row);
        }
    }
    pool.close().await;
    Ok(rows)
}

/// One transaction of gate `i` doing `statements`.
async fn one(
    pool: &sqlx::PgPool,
    gate: &SqlGate,
    resource: &str,
    token: FencingToken,
    statements: &[&str],
    i: usize,
) -> Result<()> {
    let mut tx = match i {
        0 => pool.begin().await?,
        1 => gate.admit(pool.begin().await?, resource, token).await?,
        _ => gate.begin(pool, resource, token).await?,
    };
    for statement in statements {
        sqlx::query(statement).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}
