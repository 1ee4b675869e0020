//! Leader election with fencing tokens, and observation of leader changes.
//!
//! The election: a queue of candidates holding their values; the first leads. Leader
//! observation turns the backend's head changes into [`LeaderEvent`]s: no duplicates,
//! tokens never going back, gaps reported.

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{Grant, acquire};
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::granted::Granted as _;
use crate::hold::HoldState;
use crate::name::{validate_name, validate_value};
use crate::primitives::lock::{LockGuard, no_grant};
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView, admit_by_rule};
use crate::raw::{Admission, EntryClass, HeadEvent, QueueSpec};

/// The current leader of an election as others see it: the first entry of its queue.
pub type LeaderInfo = crate::types::Head;

/// What [`Election::observe`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// The current leader, or `None` when there is none. The first event, every change
    /// after it, and the event after every [`LeaderEvent::Resync`].
    Leader(Option<LeaderInfo>),
    /// Leader changes may have been missed (history compacted, session lost): leaders
    /// that came and went meanwhile are not reported. A `Leader` with the current leader
    /// follows. Never a silent gap.
    Resync,
}

impl LeaderEvent {
    /// The leader this event reports: `Some` for [`LeaderEvent::Leader`] with a leader,
    /// `None` for no leader and for [`LeaderEvent::Resync`] (tell them apart with
    /// [`LeaderEvent::is_resync`]).
    pub fn leader(&self) -> Option<&LeaderInfo> {
        match self {
            LeaderEvent::Leader(l) => l.as_ref(),
            LeaderEvent::Resync => None,
        }
    }

    /// Whether this event says changes may have been missed.
    pub fn is_resync(&self) -> bool {
        matches!(self, LeaderEvent::Resync)
    }
}

/// Leader election.
///
/// Candidates queue in FIFO order; the first leads. Leadership is bound to the
/// client's session: it ends with [`Leadership::resign`], when the `Leadership` is
/// dropped, or when the session is lost.
///
/// # Fencing
///
/// Leadership is fenced, not exclusive: a paused leader may still believe it leads after
/// its session is gone. Check [`Leadership::token`] at every resource you protect, or
/// make config writes conditional with [`Leadership::fence`].
///
/// # Examples
///
/// ```
/// # async fn demo(client: coord_core::Client) -> coord_core::Result<()> {
/// use coord_core::Granted as _;
/// use coord_core::Election;
/// let leadership = client.campaign("scheduler", b"node-1".to_vec()).await?;
/// assert_eq!(client.leader("scheduler").await?.unwrap().token, leadership.token());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
///
/// The trait can be used as `dyn Election`; [`Election::campaign`], generic over the
/// value, needs a concrete type such as [`Client`](crate::Client).
#[async_trait]
pub trait Election: Send + Sync {
    /// Enters the election `name` with `value` (anything that becomes bytes: `&str`,
    /// `String`, `&[u8]`, `Vec<u8>`, `bytes::Bytes`) and waits until this client leads.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name or oversized value; `SessionLost` if the session
    /// was lost while waiting; `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves no candidate behind (removed in the
    /// background).
    async fn campaign<V>(&self, name: &str, value: V) -> Result<Leadership>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized;

    /// The current leader of `name`, if any.
    ///
    /// # Errors
    ///
    /// `InvalidArgument`, `Unavailable`, `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>>;

    /// A stream of leader changes for `name`: the current leader (or `None`) first, then
    /// every change, including `None` when there is no leader. Successive leaders have
    /// strictly increasing tokens; a proclaim yields the same token with a new value. A
    /// gap the backend cannot fill is reported as [`LeaderEvent::Resync`] followed by the
    /// current leader.
    ///
    /// Backends without [`Capabilities::every_leader_change`](crate::Capabilities)
    /// may also skip a leader that came and went between two reads, but never show a
    /// token lower than one already shown.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` up front; stream items carry `Unavailable`/`Closed` when the
    /// client can no longer observe (the stream then ends).
    ///
    /// # Cancel safety
    ///
    /// Dropping the stream stops observing; nothing is left on the server.
    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<LeaderEvent>>>;
}

/// This client's leadership of an election. Dropping it resigns in the background;
/// prefer [`Leadership::resign`]. Like a lock guard, it does not keep the client's
/// session open.
#[must_use = "dropping the leadership resigns it"]
pub struct Leadership {
    /// The candidate's grant, held like a lock's (its drop resigns in the background).
    guard: LockGuard,
    value: Vec<u8>,
}

impl Leadership {
    /// The leadership of election `name` from a granted turn, campaigned with `value`.
    pub(crate) fn new(name: impl Into<String>, value: Vec<u8>, grant: Grant) -> Self {
        Leadership {
            guard: LockGuard::new(name, grant),
            value,
        }
    }

    /// The value last campaigned with or proclaimed.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Publishes a new value without giving up leadership; observers see the same token
    /// with the new value.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an oversized value; `SessionLost` or `Fenced` if leadership
    /// was lost; `Unavailable`, `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the new value may or may not have been written; [`Leadership::value`]
    /// keeps the old one.
    pub async fn proclaim(&mut self, value: impl Into<Vec<u8>>) -> Result<()> {
        let value = value.into();
        validate_value("leader value", &value)?;
        if self.state() == HoldState::Lost {
            return Err(Error::new(
                crate::ErrorKind::Fenced,
                format!("leadership of {:?} was lost; campaign again", self.name()),
            ));
        }
        let span =
            tracing::debug_span!("coord.election.proclaim", name = %self.name(), token = %self.token());
        let contender = self.guard.contender().ok_or_else(Error::closed)?;
        let updated = contender.update(value.clone()).instrument(span).await;
        if let Err(e) = &updated
            && e.kind() == ErrorKind::Fenced
        {
            // The store proved the candidate's entry gone: no longer leading.
            self.guard.fence().refused();
        }
        updated?;
        self.value = value;
        Ok(())
    }

    /// Gives up leadership: removes the candidate's node or key, retrying until the
    /// server confirms or the session that owns it has ended. The next candidate takes
    /// over.
    ///
    /// # Errors
    ///
    /// Only a refusal retrying cannot fix; the candidate then goes when the session
    /// ends. Resigning a lost leadership is not an error.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the removal goes on in the background, as on drop.
    pub async fn resign(self) -> Result<()> {
        let span = tracing::debug_span!("coord.election.resign", name = %self.name(), token = %self.token());
        self.guard.release().instrument(span).await
    }
}

impl crate::granted::Sealed for Leadership {}

impl crate::granted::Granted for Leadership {
    fn parts(&self) -> &crate::granted::GrantParts {
        self.guard.parts()
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("token", &self.token())
            .field("state", &self.state())
            .finish()
    }
}

/// An election's candidates: Curator's `LeaderLatch` (`latch-`).
const CANDIDATES: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["latch-"],
    kazoo_marker: None,
}];

/// The queue of election `name`: `elections/<name>` (Go's `concurrency.Election`
/// prefix).
pub(crate) fn queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "election",
        format!("elections/{name}"),
        CANDIDATES,
        Admission::Exclusive,
    )
}

/// How [`Client::campaign_with`] campaigns.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use coord_core::CampaignOptions;
/// let options = CampaignOptions::new().lock_delay(Duration::from_secs(5));
/// assert_eq!(options.lock_delay, Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CampaignOptions {
    /// Lock-delay: when the leader ahead goes without resigning (its session expired,
    /// its entry deleted), this candidate becomes leader only after this long; after a
    /// resignation at once. As
    /// [`Lock::lock_with`](crate::Lock::lock_with) describes, including
    /// what it does not cover. `None` (the default): no delay.
    pub lock_delay: Option<std::time::Duration>,
}

impl CampaignOptions {
    /// No lock-delay.
    pub fn new() -> Self {
        Self::default()
    }

    /// With lock-delay `delay` ([`CampaignOptions::lock_delay`]); zero is none.
    pub fn lock_delay(mut self, delay: std::time::Duration) -> Self {
        self.lock_delay = Some(delay).filter(|d| !d.is_zero());
        self
    }
}

impl Client {
    /// As [`Election::campaign`], with `options` (a lock-delay).
    ///
    /// # Errors
    ///
    /// As [`Election::campaign`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> coord_core::Result<()> {
    /// use std::time::Duration;
    /// use coord_core::CampaignOptions;
    /// let client = coord_mem::connect("mem://campaign-with-doc")?;
    /// let options = CampaignOptions::new().lock_delay(Duration::from_secs(5));
    /// let leadership = client.campaign_with("scheduler", b"node-1".to_vec(), options).await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn campaign_with(
        &self,
        name: &str,
        value: impl Into<Vec<u8>>,
        options: CampaignOptions,
    ) -> Result<Leadership> {
        let value = value.into();
        validate_name("election name", name).map_err(|e| e.with_operation("campaign"))?;
        validate_value("leader value", &value).map_err(|e| e.with_operation("campaign"))?;
        let span = tracing::debug_span!("coord.campaign", backend = self.kind(), name);
        let queue = queue(name).with_lock_delay(options.lock_delay);
        let grant = acquire(self.core(), queue, value.clone(), true)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("campaign"))?
            .ok_or_else(|| no_grant("campaign"))?;
        Ok(Leadership::new(name, value, grant))
    }
}

#[async_trait]
impl Election for Client {
    async fn campaign<V>(&self, name: &str, value: V) -> Result<Leadership>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        self.campaign_with(name, value, CampaignOptions::new()).await
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_name("election name", name).map_err(|e| e.with_operation("leader"))?;
        let span = tracing::debug_span!("coord.leader", backend = self.kind(), name);
        self.backend()
            .head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("leader"))
    }

    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        validate_name("election name", name).map_err(|e| e.with_operation("observe"))?;
        let span = tracing::debug_span!("coord.observe", backend = self.kind(), name);
        let heads = self
            .backend()
            .watch_head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("observe"))?;
        let mut view = LeaderView::default();
        Ok(heads
            .filter_map(move |item| futures::future::ready(view.next(item)))
            .boxed())
    }
}

/// What an observer has been shown.
#[derive(Debug, Default)]
struct LeaderView {
    /// The last leader shown; `None` before the first event and after a gap.
    shown: Option<Option<LeaderInfo>>,
    /// The highest token shown: a read that returns a lower one is stale.
    highest: Option<FencingToken>,
}

impl LeaderView {
    fn next(&mut self, item: Result<HeadEvent>) -> Option<Result<LeaderEvent>> {
        match item {
            Err(e) => Some(Err(e.with_operation("observe"))),
            Ok(HeadEvent::Gap) => {
                self.shown = None;
                Some(Ok(LeaderEvent::Resync))
            }
            Ok(HeadEvent::Head(head)) => {
                if self.shown.as_ref() == Some(&head) {
                    return None;
                }
                if let (Some(info), Some(top)) = (&head, self.highest) {
                    if info.token < top {
                        return None;
                    }
                }
                if let Some(info) = &head {
                    self.highest = Some(info.token);
                }
                self.shown = Some(head.clone());
                Some(Ok(LeaderEvent::Leader(head)))
            }
        }
    }
}

impl Client {
    /// Where election `name`'s candidates live: Curator's `LeaderLatch` path, the prefix
    /// of Go's `concurrency.NewElection` and `etcdctl elect`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn election_path(&self, name: &str) -> Result<String> {
        crate::name::validate_name("election name", name)?;
        Ok(self.backend().path(&queue(name).dir))
    }
}

/// How `coord inspect` reads elections: `elections/<name>`, whose first candidate leads.
pub(crate) struct ElectionLayout;

/// [`ElectionLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: ElectionLayout = ElectionLayout;

#[async_trait::async_trait]
impl Layout for ElectionLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::Election
    }

    fn root(&self) -> &'static str {
        "elections"
    }

    /// By the queue's own rule: the first entry holds.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        let name = view.name.clone();
        admit_by_rule(view, participants, |_| queue(&name));
    }

    fn lock_delay_queue(&self, name: &str) -> Option<QueueSpec> {
        Some(queue(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(token: u64, value: &[u8]) -> Result<HeadEvent> {
        Ok(HeadEvent::Head(Some(LeaderInfo {
            token: FencingToken(token),
            value: value.to_vec(),
        })))
    }

    #[test]
    fn filters_repeats_and_stale_reads_and_reports_gaps() {
        let mut v = LeaderView::default();
        let shown = |e: Option<Result<LeaderEvent>>| e.map(|r| r.expect("no error"));
        assert_eq!(
            shown(v.next(Ok(HeadEvent::Head(None)))),
            Some(LeaderEvent::Leader(None))
        );
        assert_eq!(shown(v.next(Ok(HeadEvent::Head(None)))), None, "a repeat");
        assert!(matches!(
            shown(v.next(head(5, b"a"))),
            Some(LeaderEvent::Leader(Some(_)))
        ));
        assert_eq!(shown(v.next(head(3, b"old"))), None, "a token going back");
        assert!(shown(v.next(head(5, b"b"))).is_some(), "a proclaim is a change");
        assert_eq!(shown(v.next(Ok(HeadEvent::Gap))), Some(LeaderEvent::Resync));
        assert!(
            shown(v.next(head(5, b"b"))).is_some(),
            "after a gap the current leader is shown again"
        );
    }
}
