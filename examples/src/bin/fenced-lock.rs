//! Several workers increment one shared counter under a lock; every write is fenced by
//! the lock guard, so it lands only while the guard is held. Prints the final count and
//! the tokens; exits non-zero if the count is not exact.
//!
//! ```text
//! cargo run -p coord-examples --bin fenced-lock
//! COORD_URL=etcd://127.0.0.1:2379/demo cargo run -p coord-examples --features etcd --bin fenced-lock
//! ```

use clap::Parser;
use coord::Txn;
use coord::prelude::*;

#[derive(Parser)]
#[command(about = "Workers increment a shared counter under a fenced lock")]
struct Args {
    /// Number of workers, each with its own client (session).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Increments per worker.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
}

const COUNTER: &str = "fenced-lock/count";

/// One worker: lock, read, write the next value fenced by the guard, release.
async fn run(client: coord::Client, rounds: u64) -> anyhow::Result<Vec<u64>> {
    let mut tokens = Vec::new();
    for _ in 0..rounds {
        let guard = client.lock("fenced-lock/counter").await?;
        let current = match client.get(COUNTER).await? {
            Some(v) => std::str::from_utf8(&v.value)?.parse::<u64>()?,
            None => 0,
        };
        client
            .commit(
                Txn::new()
                    .fenced_by(guard.fence())
                    .put(COUNTER, (current + 1).to_string()),
            )
            .await?;
        tokens.push(guard.token().get());
        guard.release().await?;
    }
    Ok(tokens)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    let setup = coord_examples::connect().await?;
    println!(
        "backend {}, {} workers × {} rounds",
        setup.kind(),
        args.workers,
        args.rounds
    );
    setup.delete(COUNTER).await?;
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let client = coord_examples::connect().await?;
        workers.push(tokio::spawn(async move {
            let tokens = run(client.clone(), args.rounds).await;
            client.close().await?;
            tokens
        }));
    }
    let mut all = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        let tokens = w.await??;
        println!("worker {i}: tokens {tokens:?}");
        all.extend(tokens);
    }
    let count: u64 = match setup.get(COUNTER).await? {
        Some(v) => std::str::from_utf8(&v.value)?.parse()?,
        None => 0,
    };
    let expected = args.workers as u64 * args.rounds;
    all.sort_unstable();
    all.dedup();
    setup.close().await?;
    println!(
        "final count: {count} (expected {expected}); {} distinct tokens",
        all.len()
    );
    anyhow::ensure!(count == expected, "lost updates: count {count} != {expected}");
    anyhow::ensure!(all.len() as u64 == expected, "a token was granted twice");
    println!("count is exact");
    Ok(())
}
