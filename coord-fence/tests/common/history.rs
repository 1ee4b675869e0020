//! Gate histories judged by coord's sections checker: workers, each with its own mem
//! client, take one lock in turn and append two rows to a log table through the gate —
//! one right after the grant, one after their "work" — and a nemesis pauses some of them
//! (their client cut off past its session) between the two. The log, in commit order, is
//! the resource's accepted writes: `coord_check::sections` judges that no two holders'
//! sections overlap and that tokens increase. Without the gate, the same run shows an
//! overlap (the negative control).
//!
//! A run goes on until `PAUSES` holders have been paused past their session and written
//! after it (each such write is what a gate must refuse), within `LIMIT`.

use std::time::{Duration, Instant};

use coord_check::sections::{Admission, LogEntry, Mode};
use coord_core::Granted as _;

/// Writes after a session ended that a run needs before it is judged.
pub const PAUSES: usize = 4;
/// The most a run may take.
pub const LIMIT: Duration = Duration::from_secs(45);

/// The session TTL of the workers' clients.
pub const TTL: Duration = Duration::from_millis(400);

/// What one worker's write did.
pub enum Wrote {
    /// Committed.
    Committed,
    /// Refused by the gate.
    Fenced,
}

/// Judges a log (rows of holder and token in commit order).
pub fn judge(
    rows: Vec<(String, i64)>,
) -> coord_check::Report<coord_check::sections::SectionsSummary, coord_check::sections::SectionViolation> {
    let log: Vec<LogEntry> = rows
        .into_iter()
        .map(|(holder, token)| LogEntry::new(holder, token as u64, Mode::Exclusive))
        .collect();
    coord_check::sections::check(Admission::Exclusive, &log)
}

/// Runs `workers` workers until `PAUSES` late writes (or `LIMIT`); `write(holder, token)`
/// appends one row, through the gate or not. Returns how many late writes there were.
pub async fn run<W, F>(
    workers: usize,
    name: &str,
    write: W,
) -> Result<usize, Box<dyn std::error::Error + Send + Sync>>
where
    W: Fn(String, u64) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Wrote, Box<dyn std::error::Error + Send + Sync>>> + Send,
{
    use coord_core::Lock as _;
    let url = format!("mem://{name}?session_ttl={}ms", TTL.as_millis());
    let late = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let deadline = Instant::now() + LIMIT;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = coord_mem::connect(&url)?;
        let (write, late) = (write.clone(), late.clone());
        tasks.push(tokio::spawn(async move {
            let mut round = 0u64;
            while late.load(std::sync::atomic::Ordering::SeqCst) < PAUSES && Instant::now() < deadline {
                round += 1;
                let Ok(Ok(guard)) =
                    tokio::time::timeout(Duration::from_secs(5), client.lock("resource")).await
                else {
                    continue;
                };
                let holder = format!("w{w}");
                let token = guard.token().get();
                write(holder.clone(), token).await?;
                // Every third turn of each worker is paused past its session: the worker
                // goes on with its work unaware, as a stopped process does.
                if round % 3 == (w as u64) % 3 {
                    let mem = client.backend_as::<coord_mem::MemClient>().ok_or("not mem")?;
                    mem.suspend(TTL * 3);
                    tokio::time::sleep(TTL * 3).await;
                    late.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                write(holder, token).await?;
                let _ = guard.release().await;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(late.load(std::sync::atomic::Ordering::SeqCst))
}
