//! An HTTP service behind coord's fencing layer, and workers that call it under a lock
//! with the `coord-fence` header; then a stale holder — one whose grant has passed on —
//! calls and is answered `409 Conflict`. The service is an axum app on loopback in this
//! process; coord on `mem://` unless `COORD_URL` says otherwise.
//!
//! ```text
//! cargo run -p coord-examples --bin fenced-service
//! COORD_URL=etcd://127.0.0.1:2379/demo cargo run -p coord-examples --features etcd --bin fenced-service
//! ```
//!
//! Prints `count is exact` and `stale request refused`; exits non-zero otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use clap::Parser;
use coord::fence::http::{FenceHeader, FenceLayer, FenceRequest as _};
use coord::prelude::*;

#[derive(Parser)]
#[command(about = "Workers call an HTTP service under a lock, through the fencing layer")]
struct Args {
    /// Number of workers, each with its own client (session).
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Calls per worker.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
}

/// The lock's name, and the resource the service fences.
const RESOURCE: &str = "fenced-service/counter";

/// The service: `POST /increment` adds one; only fenced requests reach it.
async fn service() -> anyhow::Result<(String, Arc<AtomicU64>)> {
    let count = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route(
            "/increment",
            post(|State(count): State<Arc<AtomicU64>>| async move {
                (count.fetch_add(1, Ordering::SeqCst) + 1).to_string()
            }),
        )
        .with_state(count.clone())
        .layer(FenceLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((base, count))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    anyhow::ensure!(
        args.workers as u64 * args.rounds >= 2,
        "--workers × --rounds must be at least 2: the stale holder is the first of several grants"
    );
    let (base, count) = service().await?;
    let http = reqwest::Client::new();
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let client = coord_examples::connect().await?;
        let (http, url, rounds) = (http.clone(), format!("{base}/increment"), args.rounds);
        workers.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..rounds {
                let guard = client.lock(RESOURCE).await?;
                let fence = FenceHeader::new(guard.name(), guard.token())?;
                let answer = http.post(&url).fence(&fence).send().await?;
                anyhow::ensure!(
                    answer.status().is_success(),
                    "the service answered {}",
                    answer.status()
                );
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
    let n = count.load(Ordering::SeqCst);
    println!(
        "count {n}, tokens {}..={}",
        tokens.first().map_or(0, |t| t.get()),
        tokens.last().map_or(0, |t| t.get())
    );
    let want = args.workers as u64 * args.rounds;
    anyhow::ensure!(n == want, "count is {n}, expected {want}");
    println!("count is exact");

    // A holder that paused while it held the first grant wakes up and calls.
    let stale = tokens
        .first()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("no grant"))?;
    let answer = http
        .post(format!("{base}/increment"))
        .fence(&FenceHeader::new(RESOURCE, stale)?)
        .send()
        .await?;
    let status = answer.status();
    let body = answer.text().await?;
    anyhow::ensure!(
        status == reqwest::StatusCode::CONFLICT && count.load(Ordering::SeqCst) == n,
        "a stale holder's request was answered {status}: {body}"
    );
    println!("stale request refused: {status}: {}", body.trim());
    Ok(())
}
