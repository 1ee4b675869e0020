//! What the seeded history tests share: which seeds run, reaching a client's fault
//! hooks, and running histories side by side.

use std::future::Future;

use coord_core::Client;
use coord_mem::MemClient;
use futures::StreamExt as _;

/// The seeds to run: `COORD_HISTORY_SEED=n` replays one, `COORD_HISTORY_SEEDS=n` runs
/// `1..=n` (40 by default).
pub fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("COORD_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("COORD_HISTORY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40u64);
    (1..=n).collect()
}

/// The in-memory backend of `client`, for its fault hooks.
pub fn mem(client: &Client) -> &MemClient {
    client.backend_as::<MemClient>().expect("a mem client")
}

/// Runs `history` for every seed, `at_once` at a time (each on a cluster of its own: a
/// history mostly waits), on a runtime of two workers.
pub fn run_seeds<T, F, Fut>(seeds: &[u64], at_once: usize, history: F) -> Vec<(u64, T)>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = T>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        futures::stream::iter(seeds.iter().map(|&seed| {
            let run = history(seed);
            async move { (seed, run.await) }
        }))
        .buffer_unordered(at_once)
        .collect()
        .await
    })
}
