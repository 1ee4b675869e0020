//! The one retry schedule of coord: exponential with jitter (from `backon`), so clients
//! that failed together — every client of a server that restarted — do not retry in
//! lockstep.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Delays between retries: from `min`, doubling up to `max`, each with a random jitter,
/// never exhausted. Every retry loop of coord and its backends waits on one of these.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use coord_core::raw::Backoff;
/// let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// let first = b.next_delay();
/// assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
/// ```
#[derive(Debug)]
pub struct Backoff {
    delays: ExponentialBackoff,
    max: Duration,
}

impl Backoff {
    /// A schedule from `min` to `max`.
    pub fn new(min: Duration, max: Duration) -> Backoff {
        let delays = ExponentialBuilder::new()
            .with_jitter()
            .with_min_delay(min)
            .with_max_delay(max)
            .without_max_times()
            .build();
        Backoff { delays, max }
    }

    /// The next delay (with jitter, at most twice `max`).
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.max)
    }

    /// Sleeps for the next delay.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped sleep only uses up one delay of the schedule.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter() {
        let (min, max) = (Duration::from_millis(10), Duration::from_millis(80));
        let mut b = Backoff::new(min, max);
        let delays: Vec<Duration> = (0..20).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d >= min && *d <= max * 2), "{delays:?}");
        assert!(
            delays[10..].iter().all(|d| *d >= max),
            "never reached the cap: {delays:?}"
        );
        // Two schedules started together do not retry in lockstep.
        let mut other = Backoff::new(min, max);
        let theirs: Vec<Duration> = (0..20).map(|_| other.next_delay()).collect();
        assert_ne!(delays, theirs, "no jitter");
    }
}
