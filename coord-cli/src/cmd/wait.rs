//! Waiting for a lock or a leadership: the progress line (who holds it, for how long),
//! `--timeout`, and stop signals. Written once for `coord lock` and `coord elect`.

use std::future::Future;
use std::time::Duration;

use coord::FencingToken;
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::time::Instant;

use crate::child::Stop;
use crate::exit::{self, Failure};
use crate::output::{self, Out, Progress};

/// How often the holder is read again while waiting.
const POLL: Duration = Duration::from_secs(1);

/// What is waited for, for messages: `lock` or `leadership`, and its name.
pub struct Waiting<'a> {
    pub what: &'static str,
    pub name: &'a str,
}

/// The holder as others see it: its token and identity (`host:pid` for coord's own).
/// Several holders (a semaphore's leases, a read/write lock's readers) are one `Holder`
/// with the newest token and a description of them all in `shown`.
pub struct Holder {
    pub token: FencingToken,
    pub who: Vec<u8>,
    pub shown: Option<String>,
    /// When the holder's entry was made, if the server says.
    pub since: Option<std::time::SystemTime>,
}

impl Holder {
    /// One holder.
    pub fn one(token: FencingToken, who: Vec<u8>) -> Holder {
        Holder {
            token,
            who,
            shown: None,
            since: None,
        }
    }

    /// The holder a participant of the inspector is, with its entry's age.
    pub fn of(p: &coord::Participant) -> Holder {
        Holder {
            since: p.since,
            ..Holder::one(p.token, p.value.clone())
        }
    }

    /// Several holders, as the inspector sees them; `None` when there are none.
    /// A semaphore's leases hold its permit count, not an identity: `identities` false.
    pub fn several(holders: &[coord::Participant], what: &str, identities: bool) -> Option<Holder> {
        let newest = holders.iter().map(|p| p.token).max()?;
        let each: Vec<String> = holders
            .iter()
            .map(|p| Holder::one(p.token, if identities { p.value.clone() } else { Vec::new() }).describe())
            .collect();
        Some(Holder {
            token: newest,
            who: Vec::new(),
            shown: Some(format!("{} {what}: {}", holders.len(), each.join(", "))),
            since: holders.iter().filter_map(|p| p.since).min(),
        })
    }

    pub fn describe(&self) -> String {
        if let Some(shown) = &self.shown {
            shown.clone()
        } else if self.who == b"__REVOKE__" {
            format!("a holder asked to let go (token {})", self.token)
        } else if self.who.is_empty() {
            format!("token {}", self.token)
        } else {
            format!("{} (token {})", output::text(&self.who), self.token)
        }
    }
}

/// Waits for `acquire`, showing who holds it (read with `holder` every second) until
/// it completes, `timeout` passes (a [`exit::TIMEOUT`] failure naming the holder), or a
/// stop signal comes (`Ok(Err(signal))`). Dropping `acquire` on the way out leaves no
/// contender behind.
pub async fn wait<T, A, H, HF>(
    waiting: Waiting<'_>,
    acquire: A,
    mut holder: H,
    timeout: Option<Duration>,
    stop: &mut Stop,
    out: Out,
) -> Result<Result<T, Signal>, Failure>
where
    A: Future<Output = coord::Result<T>>,
    H: FnMut() -> HF,
    HF: Future<Output = coord::Result<Option<Holder>>>,
{
    if timeout == Some(Duration::ZERO) {
        return Err(Failure::usage(
            "--timeout 0 never waits: use --try to fail at once when held",
        ));
    }
    let started = Instant::now();
    let deadline = timeout.map(|t| started + t);
    let mut progress = Progress::new(out);
    let mut poll = tokio::time::interval_at(started + POLL / 2, POLL);
    let mut seen: Option<(FencingToken, Instant)> = None;
    let mut last: Option<Holder> = None;
    tokio::pin!(acquire);
    loop {
        tokio::select! {
            got = &mut acquire => {
                progress.finish();
                return Ok(Ok(got?));
            }
            _ = poll.tick() => {
                // Bounded, so that the grant, the deadline and signals wait at most this.
                let Ok(Ok(Some(h))) = tokio::time::timeout(POLL, holder()).await else { continue };
                let since = match seen {
                    Some((token, since)) if token == h.token => since,
                    _ => seen.insert((h.token, Instant::now())).1,
                };
                // The entry's age when the server tells it (the holder may have queued
                // for part of it); else how long this waiter has seen it hold.
                let age = h.since.and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
                let line = format!(
                    "waiting for {} {:?}: held by {} ({})",
                    waiting.what,
                    waiting.name,
                    h.describe(),
                    match age {
                        Some(age) => format!("its entry made {} ago", output::ago(age)),
                        None => format!("seen holding for {}", output::ago(since.elapsed())),
                    },
                );
                let mut detail = json!({
                    "event": "waiting",
                    "what": waiting.what,
                    "name": waiting.name,
                    "token": h.token.get(),
                    "holder": h.describe(),
                    "seen_for_ms": since.elapsed().as_millis() as u64,
                });
                if let Some(age) = age {
                    detail["entry_age_ms"] = json!(age.as_millis() as u64);
                }
                let detail = output::with_value(detail, &h.who);
                progress.show(&h.token.to_string(), &line, detail);
                last = Some(h);
            }
            () = sleep_until(deadline) => {
                progress.finish();
                let held = last.map(|h| format!(", held by {}", h.describe())).unwrap_or_default();
                return Err(Failure::new(
                    exit::TIMEOUT,
                    "timeout",
                    format!(
                        "gave up waiting for {} {:?} after {}{held}; raise --timeout or try later",
                        waiting.what,
                        waiting.name,
                        output::timeout_shown(timeout.unwrap_or_default()),
                    ),
                ));
            }
            signal = stop.next() => {
                progress.finish();
                return Ok(Err(signal));
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
