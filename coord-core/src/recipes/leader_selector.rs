//! The leader selector's loop, over the election: campaign (again after every loss, with
//! backoff while no session is up), run the work while leading, cancel it on loss, and
//! resign when the work ends or the selector stops.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use crate::client::Client;
use crate::election::Election;
use crate::error::{Error, ErrorKind, Result};
use crate::leader_selector::{LeaderSelector, Leading, SelectorState};
use crate::name::{validate_name, validate_value};
use crate::raw::Backoff;

impl Client {
    /// Leads election `name` with `value` for as long as the returned selector runs
    /// (Curator's `LeaderSelector` with auto-requeue): campaigns, calls `work` with the
    /// term's [`Leading`] once this client leads, and
    ///
    /// - when `work` returns, resigns and campaigns again (at the back of the queue, so
    ///   other candidates get their turn);
    /// - when leadership is lost (session lost, node or key deleted), cancels `work` —
    ///   drops its future; `work` that waits on [`Leading::lost`] itself is polled once
    ///   more first, so it can note the loss — and campaigns again;
    /// - when the selector is stopped or dropped, cancels `work` and resigns.
    ///
    /// Campaign failures that retrying can help (`SessionLost`, `Unavailable`,
    /// `Timeout`) are retried with backoff; others stop the selector, and
    /// [`LeaderSelector::stop`] returns them.
    ///
    /// # Fencing
    ///
    /// Each term has its own token; fence the work's writes with [`Leading::fence`], so a
    /// term that is lost while its work still runs cannot write.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name or oversized value; `Unsupported` outside a tokio
    /// runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use coord_core::{ConfigStore, Txn};
    /// let client = coord_mem::connect("mem://selector-doc")?;
    /// let worker = client.clone();
    /// let selector = client.lead("scheduler", b"node-1".to_vec(), move |leading| {
    ///     let client = worker.clone();
    ///     async move {
    ///         // Leader-only work; writes land only while this term holds.
    ///         let write = Txn::new().fenced_by(leading.fence()).put("scheduler/owner", b"node-1".to_vec());
    ///         let _ = client.commit(write).await;
    ///         leading.lost().await; // work until the term ends
    ///     }
    /// })?;
    /// while !selector.is_leader() {
    ///     tokio::task::yield_now().await;
    /// }
    /// selector.stop().await?;
    /// # Ok(()) }
    /// ```
    pub fn lead<F, Fut>(&self, name: &str, value: impl Into<Vec<u8>>, work: F) -> Result<LeaderSelector>
    where
        F: FnMut(Leading) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let value = value.into();
        validate_name("election name", name).map_err(|e| e.with_operation("lead"))?;
        validate_value("leader value", &value).map_err(|e| e.with_operation("lead"))?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::Unsupported,
                "lead runs the selector on a tokio task: call it inside a tokio runtime",
            )
            .with_operation("lead")
        })?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (state_tx, state_rx) = watch::channel(SelectorState::Campaigning);
        let (terms_tx, terms_rx) = watch::channel(0u64);
        let span = tracing::debug_span!("coord.lead", backend = self.kind(), name);
        let run = select_loop(
            self.clone(),
            name.to_owned(),
            value,
            work,
            stop_rx,
            state_tx,
            terms_tx,
        )
        .instrument(span);
        Ok(LeaderSelector {
            stop: stop_tx,
            state: state_rx,
            terms: terms_rx,
            done: Some(rt.spawn(run)),
        })
    }
}

impl LeaderSelector {
    /// Stops the selector: cancels the work if it runs, resigns, and waits until done. A
    /// campaign under way is withdrawn in the background, as a dropped
    /// [`campaign`](crate::Election::campaign) future is.
    ///
    /// # Errors
    ///
    /// The error that stopped the selector on its own, if one did (e.g.
    /// `PermissionDenied`); a resignation the server refused.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the selector still stops (in the background).
    pub async fn stop(mut self) -> Result<()> {
        self.stop.send_replace(true);
        match self.done.take() {
            Some(task) => task.await.map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("the leader selector's task failed: {e}"),
                )
            })?,
            None => Ok(()),
        }
    }
}

/// Resolves once the selector is told to stop (or its handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A term shorter than this is followed by a growing pause before the next campaign.
const SHORT_TERM: Duration = Duration::from_millis(100);

async fn select_loop<F, Fut>(
    client: Client,
    name: String,
    value: Vec<u8>,
    mut work: F,
    mut stop: watch::Receiver<bool>,
    state: watch::Sender<SelectorState>,
    terms: watch::Sender<u64>,
) -> Result<()>
where
    F: FnMut(Leading) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut requeue = Backoff::new(Duration::from_millis(10), Duration::from_secs(2));
    let outcome = loop {
        state.send_replace(SelectorState::Campaigning);
        let leadership = tokio::select! {
            _ = stopped(&mut stop) => break Ok(()),
            r = client.campaign(&name, value.clone()) => match r {
                Ok(l) => l,
                Err(e) if e.kind() == ErrorKind::Closed => break Ok(()),
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "coord.lead_campaign_retry");
                    tokio::select! {
                        _ = stopped(&mut stop) => break Ok(()),
                        _ = backoff.wait() => continue,
                    }
                }
                Err(e) => break Err(e),
            },
        };
        backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let leading = Leading {
            name: name.clone(),
            value: value.clone(),
            fence: leadership.fence(),
            hold: leadership.hold().clone(),
        };
        state.send_replace(SelectorState::Leading(leadership.token()));
        terms.send_modify(|n| *n += 1);
        tracing::debug!(token = %leadership.token(), "coord.lead_term_started");
        let began = tokio::time::Instant::now();
        let mut term = Box::pin(work(leading));
        // The work is polled first, so work that waits on the loss itself sees it.
        let stopping = tokio::select! {
            biased;
            _ = &mut term => false,
            _ = leadership.lost() => {
                tracing::debug!(token = %leadership.token(), "coord.lead_term_lost");
                false
            }
            _ = stopped(&mut stop) => true,
        };
        // The work's future (cancelled if still running) goes before the resignation.
        drop(term);
        if let Err(e) = leadership.resign().await {
            tracing::warn!(error = %e, "coord.lead_resign_refused");
            if stopping {
                break Err(e);
            }
        }
        if stopping {
            break Ok(());
        }
        // A term that ended at once (work that returns immediately) is not followed by a
        // campaign at once: the next one waits, longer each time, until a term lasts.
        if began.elapsed() < SHORT_TERM {
            tokio::select! {
                _ = stopped(&mut stop) => break Ok(()),
                _ = requeue.wait() => {}
            }
        } else {
            requeue = Backoff::new(Duration::from_millis(10), Duration::from_secs(2));
        }
    };
    state.send_replace(SelectorState::Stopped);
    outcome
}
