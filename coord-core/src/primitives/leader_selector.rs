//! The leader selector: campaign, run the leader's work while leading, stop it when
//! leadership is lost, and campaign again — until stopped.
//!
//! The leader selector's loop, over the election: campaign (again after every loss, with
//! backoff while no session is up), run the work while leading, cancel it on loss, and
//! resign when the work ends or the selector stops.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::watch;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::granted::Granted as _;
use crate::hold::HoldState;
use crate::name::{validate_name, validate_value};
use crate::primitives::election::CampaignOptions;
use crate::raw::Backoff;

/// What the leader's work gets for one term: the term's token and fence, the value, and
/// the hold-state signal. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leading {
    parts: crate::granted::GrantParts,
    value: Vec<u8>,
}

impl Leading {
    /// The value campaigned with.
    pub fn value(&self) -> &[u8] {
        &self.value
    }
}

impl crate::granted::Sealed for Leading {}

impl crate::granted::Granted for Leading {
    fn parts(&self) -> &crate::granted::GrantParts {
        &self.parts
    }
}

/// Where a [`LeaderSelector`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectorState {
    /// Queued for leadership (or waiting for a session to queue on).
    Campaigning,
    /// Leading: the work runs, with this term's token.
    Leading(FencingToken),
    /// Stopped: by [`LeaderSelector::stop`], its drop, the client's close, or an error
    /// retrying cannot fix.
    Stopped,
}

/// A running leader selector, made by [`Client::lead`](crate::Client::lead): it
/// campaigns, runs the work while leading, cancels the work when leadership is lost and
/// campaigns again, until stopped. Dropping it stops it in the background (the work is
/// cancelled, the leadership resigned); prefer [`LeaderSelector::stop`].
#[must_use = "dropping the selector stops it"]
pub struct LeaderSelector {
    stop: watch::Sender<bool>,
    state: watch::Receiver<SelectorState>,
    terms: watch::Receiver<u64>,
    done: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl LeaderSelector {
    /// Where the selector stands now.
    pub fn state(&self) -> SelectorState {
        *self.state.borrow()
    }

    /// A channel that always holds the selector's latest state.
    pub fn subscribe(&self) -> watch::Receiver<SelectorState> {
        self.state.clone()
    }

    /// Whether this client leads now.
    pub fn is_leader(&self) -> bool {
        matches!(self.state(), SelectorState::Leading(_))
    }

    /// How many terms this selector has led so far.
    pub fn terms(&self) -> u64 {
        *self.terms.borrow()
    }
}

impl Drop for LeaderSelector {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("state", &self.state())
            .field("terms", &self.terms())
            .finish()
    }
}

impl Client {
    /// Leads election `name` with `value` for as long as the returned selector runs
    /// (Curator's `LeaderSelector` with auto-requeue): campaigns, calls `work` with the
    /// term's [`Leading`] once this client leads, and
    ///
    /// - when `work` returns, resigns and campaigns again (at the back of the queue, so
    ///   other candidates get their turn);
    /// - when leadership is lost (session lost, node or key deleted), says
    ///   [`SelectorState::Campaigning`] at once and lets `work` end on its own: its
    ///   [`Leading::lost`] resolves, and it has a grace — [`LEADER_LOSS_GRACE`] (1 s) or
    ///   half of [`Client::loss_margin`], whichever is shorter — to note the loss, log,
    ///   flush or clean up before it is cancelled (its future dropped); then campaigns
    ///   again. Nothing fenced by the term succeeds any more. The grace ends before the
    ///   server can expire a cut-off session, so a lost term's work never runs beside
    ///   the next leader's (save for a paused process, which only fencing stops);
    /// - when `work` panics, ends the term as when it returns (the panic is logged);
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
    /// use coord_core::Granted as _;
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
        self.lead_with(name, value, CampaignOptions::new(), work)
    }

    /// As [`Client::lead`], campaigning with `options` (a lock-delay: see
    /// [`CampaignOptions::lock_delay`]).
    ///
    /// # Errors
    ///
    /// As [`Client::lead`].
    pub fn lead_with<F, Fut>(
        &self,
        name: &str,
        value: impl Into<Vec<u8>>,
        options: CampaignOptions,
        work: F,
    ) -> Result<LeaderSelector>
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
            (value, options),
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

/// The longest a term's work may go on after the term is lost, to end on its own,
/// before it is cancelled. The grace is shorter where the session's loss margin is: half
/// of [`Client::loss_margin`], so that a work cut off by a partition is cancelled before
/// the server can expire the session and let the next leader's work start.
pub const LEADER_LOSS_GRACE: Duration = Duration::from_secs(1);

/// How long a lost term's work may go on: [`LEADER_LOSS_GRACE`], or half the client's
/// loss margin if that is shorter.
fn loss_grace(client: &Client) -> Duration {
    LEADER_LOSS_GRACE.min(client.loss_margin() / 2)
}

/// A term shorter than this is followed by a growing pause before the next campaign.
const SHORT_TERM: Duration = Duration::from_millis(100);

async fn select_loop<F, Fut>(
    client: Client,
    name: String,
    (value, options): (Vec<u8>, CampaignOptions),
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
            r = client.campaign_with(&name, value.clone(), options.clone()) => match r {
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
        if leadership.hold().peek() == HoldState::Lost {
            // Lost before it began (its session ended as it was granted): never said
            // to lead; campaign again.
            let _ = leadership.resign().await;
            tokio::select! {
                _ = stopped(&mut stop) => break Ok(()),
                _ = requeue.wait() => continue,
            }
        }
        let leading = Leading {
            parts: crate::granted::GrantParts {
                name: name.clone(),
                fence: leadership.fence(),
                hold: leadership.hold().clone(),
            },
            value: value.clone(),
        };
        state.send_replace(SelectorState::Leading(leadership.token()));
        terms.send_modify(|n| *n += 1);
        tracing::debug!(token = %leadership.token(), "coord.lead_term_started");
        let began = tokio::time::Instant::now();
        // A panic in the work ends its term as a loss would (the selector resigns and
        // campaigns again); it never takes the selector down with it.
        // (The work's constructor too: a panic there ends the term the same way.)
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(leading)));
        let mut term: std::pin::Pin<Box<dyn Future<Output = std::thread::Result<()>> + Send>> = match made {
            Ok(fut) => Box::pin(std::panic::AssertUnwindSafe(fut).catch_unwind()),
            Err(panic) => Box::pin(std::future::ready(Err(panic))),
        };
        let (stopping, lost) = tokio::select! {
            biased;
            ended = &mut term => {
                if ended.is_err() {
                    tracing::error!(token = %leadership.token(), "coord.lead_work_panicked");
                }
                (false, false)
            }
            _ = leadership.lost() => (false, true),
            _ = stopped(&mut stop) => (true, false),
        };
        if lost {
            // Nobody may believe this term leads any more.
            state.send_replace(SelectorState::Campaigning);
            let grace = loss_grace(&client);
            tracing::debug!(token = %leadership.token(), grace_ms = grace.as_millis() as u64, "coord.lead_term_lost");
            // The work learns of the loss for sure: it is polled again now that the hold
            // is lost (so its own `Leading::lost` resolves at once — the session may have
            // ended between its poll above and the selector's), and has the grace to end
            // on its own (log, flush, clean up; nothing fenced succeeds any more).
            let ended = tokio::select! {
                r = tokio::time::timeout(grace, &mut term) => r.is_ok(),
                _ = stopped(&mut stop) => false,
            };
            if !ended {
                tracing::debug!(token = %leadership.token(), "coord.lead_work_cancelled_after_grace");
            }
        }
        // The work's future (cancelled if still running) goes before the resignation; a
        // panic while it is dropped ends nothing more than the term.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(term))).is_err() {
            tracing::error!(token = %leadership.token(), "coord.lead_work_panicked_on_drop");
        }
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
