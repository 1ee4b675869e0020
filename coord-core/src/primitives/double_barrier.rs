//! Double barriers: a group of members enters together and leaves together.
//!
//! The double barrier over the contender queue: each member is an entry holding
//! `<state>:<id>`; `enter` watches every entry until the barrier is full (or someone saw
//! it full), `leave` until every entry is leaving or gone.

use std::time::Duration;

use futures::StreamExt;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{Grant, acquire};
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::mutants::{self, Mutant};
use crate::name::{validate_name, validate_segment_name};
use crate::primitives::lock::no_grant;
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView};
use crate::raw::{Admission, EntriesEvent, EntryClass, Member, QueueSpec};

/// The most members a double barrier may have.
pub const MAX_MEMBERS: u32 = 1000;

/// A double barrier for a fixed number of members (Curator's `DistributedDoubleBarrier`,
/// Go's `recipes.DoubleBarrier`): [`DoubleBarrier::enter`] waits until that many members
/// have arrived, [`Entered::leave`] until every member has left. Made by
/// [`Client::double_barrier`]; cheap to clone.
///
/// Each member is an entry bound to its client's session, holding its id and where it
/// is (arrived, entered, leaving): a member that crashes disappears within the session
/// timeout. Both calls take a deadline, so a member that never comes (or never leaves)
/// cannot hang the others forever: they fail with `Timeout`, naming the members present
/// and how many are missing (or, when leaving, the members still inside).
///
/// A member that sees the barrier full marks itself entered, so a member that arrives
/// last but looks late still enters after others have started to leave. A barrier name
/// serves one round at a time: start the next round once every member's `leave`
/// returned. The layout (`barriers/<name>/…` entries) is coord's own, not Curator's.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use std::time::Duration;
/// let client = coord_mem::connect("mem://double-barrier-doc")?;
/// let other = client.clone();
/// let second = tokio::spawn(async move {
///     let round = other.double_barrier("batch", 2)?.enter("w2", Duration::from_secs(5)).await?;
///     round.leave(Duration::from_secs(5)).await
/// });
/// let round = client.double_barrier("batch", 2)?.enter("w1", Duration::from_secs(5)).await?;
/// // … both members work here …
/// round.leave(Duration::from_secs(5)).await?;
/// second.await.expect("the second member ran")?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DoubleBarrier {
    client: Client,
    name: String,
    members: u32,
}

impl Client {
    /// The double barrier `name` for `members` members (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name, or `members` outside `1..=`[`MAX_MEMBERS`].
    pub fn double_barrier(&self, name: &str, members: u32) -> Result<DoubleBarrier> {
        validate_name("double barrier name", name).map_err(|e| e.with_operation("double_barrier"))?;
        if !(1..=MAX_MEMBERS).contains(&members) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("a double barrier has 1 to {MAX_MEMBERS} members, not {members}"),
            )
            .with_operation("double_barrier"));
        }
        Ok(DoubleBarrier {
            client: self.clone(),
            name: name.to_owned(),
            members,
        })
    }
}

impl DoubleBarrier {
    /// The barrier's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many members enter together.
    pub fn members(&self) -> u32 {
        self.members
    }
}

/// A member inside a double barrier, from [`DoubleBarrier::enter`]. Dropping it leaves
/// abruptly (its entry is removed in the background, as if it had crashed); prefer
/// [`Entered::leave`].
#[must_use = "dropping an entered member removes it without waiting for the others"]
pub struct Entered {
    barrier: DoubleBarrier,
    id: String,
    grant: Grant,
}

impl Entered {
    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The member entry's token (its place in arrival order).
    pub fn token(&self) -> FencingToken {
        self.grant.fence.token()
    }
}

impl std::fmt::Debug for Entered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entered")
            .field("barrier", &self.barrier.name)
            .field("id", &self.id)
            .field("token", &self.token())
            .finish()
    }
}

const ARRIVED: &str = "arrived";
const ENTERED: &str = "entered";
const LEAVING: &str = "leaving";

/// A member entry's state and id.
fn parse(member: &Member) -> (&str, &str) {
    std::str::from_utf8(&member.value)
        .ok()
        .and_then(|v| v.split_once(':'))
        .unwrap_or(("", "?"))
}

fn ids<'a>(members: impl Iterator<Item = &'a Member>) -> String {
    let ids: Vec<&str> = members.map(|m| parse(m).1).collect();
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

/// A double barrier's members (`member-`), each holding `<state>:<id>`.
const MEMBERS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["member-"],
    kazoo_marker: None,
}];

impl DoubleBarrier {
    /// Its members' queue: `barriers/<name>`; a member never waits, each watches them
    /// all.
    fn queue(&self) -> QueueSpec {
        QueueSpec::new(
            "barrier_member",
            format!("barriers/{}", self.name),
            MEMBERS,
            Admission::Immediate,
        )
    }

    /// Arrives as member `id` and waits, at most `deadline`, until the barrier is full:
    /// as many members as it has are present, or one of them saw it full.
    ///
    /// # Errors
    ///
    /// `Timeout` when the barrier is not full within `deadline`, naming the members
    /// present and how many are missing (this member's entry is removed);
    /// `InvalidArgument` for a bad id; `SessionLost` if the session was lost while
    /// waiting (the entry went with it; enter again); `Unavailable`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves no member entry behind.
    pub async fn enter(&self, id: &str, deadline: Duration) -> Result<Entered> {
        let span = tracing::debug_span!("coord.double_barrier.enter", backend = self.client.kind(), name = %self.name, id);
        self.enter_inner(id, deadline)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("double barrier enter"))
    }

    async fn enter_inner(&self, id: &str, deadline: Duration) -> Result<Entered> {
        validate_segment_name("member id", id)?;
        let grant = acquire(
            self.client.core(),
            self.queue(),
            format!("{ARRIVED}:{id}").into_bytes(),
            true,
        )
        .await?
        .ok_or_else(|| no_grant("enter"))?;
        let own = grant.fence.resource().to_owned();
        let mut entries = self.client.backend().watch_entries(&self.queue()).await?;
        let full = async {
            let mut last = Vec::new();
            loop {
                match entries.next().await {
                    None => return Err((Error::closed(), last)),
                    Some(Err(e)) => return Err((e, last)),
                    Some(Ok(EntriesEvent::Gap)) => {}
                    Some(Ok(EntriesEvent::Entries(now))) => {
                        if !now.iter().any(|m| m.path == own) {
                            return Err((
                                Error::new(
                                    ErrorKind::SessionLost,
                                    "this member's entry is gone (its session was lost, or it was deleted); enter again",
                                ),
                                now,
                            ));
                        }
                        if now.len() >= self.members as usize
                            || now.iter().any(|m| parse(m).0 != ARRIVED)
                            || mutants::active(Mutant::BarrierEnterEarly)
                        {
                            return Ok(());
                        }
                        last = now;
                    }
                }
            }
        };
        let outcome = match tokio::time::timeout(deadline, full).await {
            Ok(r) => r,
            Err(_) => Err((Error::new(ErrorKind::Timeout, String::new()), Vec::new())),
        };
        match outcome {
            Ok(()) => {
                grant
                    .contender
                    .update(format!("{ENTERED}:{id}").into_bytes())
                    .await?;
                Ok(Entered {
                    barrier: self.clone(),
                    id: id.to_owned(),
                    grant,
                })
            }
            Err((e, _)) if e.kind() != ErrorKind::Timeout => Err(e),
            Err(_) => {
                // What is present now, for the message; then this member goes.
                let present = self.present().await.unwrap_or_default();
                if let Err(e) = grant.contender.leave().await {
                    tracing::warn!(error = %e, "coord.double_barrier_removal_refused");
                }
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "double barrier {:?} was not full within {deadline:?}: {} of {} members present ({}); {} missing",
                        self.name,
                        present.len(),
                        self.members,
                        ids(present.iter()),
                        (self.members as usize).saturating_sub(present.len())
                    ),
                ))
            }
        }
    }

    /// The member entries now (the first list a fresh watch yields).
    async fn present(&self) -> Result<Vec<Member>> {
        let mut entries = self.client.backend().watch_entries(&self.queue()).await?;
        match entries.next().await {
            Some(Ok(EntriesEvent::Entries(now))) => Ok(now),
            Some(Err(e)) => Err(e),
            _ => Ok(Vec::new()),
        }
    }
}

impl Entered {
    /// Leaves: marks this member leaving and waits, at most `deadline`, until every
    /// member is leaving or gone; then removes this member's entry.
    ///
    /// # Errors
    ///
    /// `Timeout` when some members are still inside at the deadline, naming them (this
    /// member's entry is removed all the same); `Unavailable`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, this member's entry is removed in the background.
    pub async fn leave(self, deadline: Duration) -> Result<()> {
        let span = tracing::debug_span!(
            "coord.double_barrier.leave",
            backend = self.barrier.client.kind(),
            name = %self.barrier.name,
            id = %self.id
        );
        self.leave_inner(deadline)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("double barrier leave"))
    }

    async fn leave_inner(self, deadline: Duration) -> Result<()> {
        let Entered { barrier, id, grant } = self;
        // A member whose entry is gone (session lost) has left already.
        if let Err(e) = grant
            .contender
            .update(format!("{LEAVING}:{id}").into_bytes())
            .await
        {
            if e.kind() != ErrorKind::Fenced {
                return Err(e);
            }
        }
        let mut entries = barrier.client.backend().watch_entries(&barrier.queue()).await?;
        let all_leaving = async {
            let mut inside = Vec::new();
            loop {
                match entries.next().await {
                    None => return (Err(Error::closed()), inside),
                    Some(Err(e)) => return (Err(e), inside),
                    Some(Ok(EntriesEvent::Gap)) => {}
                    Some(Ok(EntriesEvent::Entries(now))) => {
                        inside = now.into_iter().filter(|m| parse(m).0 != LEAVING).collect();
                        if inside.is_empty() {
                            return (Ok(()), inside);
                        }
                    }
                }
            }
        };
        let (outcome, inside) = match tokio::time::timeout(deadline, all_leaving).await {
            Ok(r) => r,
            Err(_) => (
                Err(Error::new(ErrorKind::Timeout, String::new())),
                barrier
                    .present()
                    .await
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|m| parse(m).0 != LEAVING)
                    .collect(),
            ),
        };
        let removed = grant.contender.leave().await;
        match outcome {
            Ok(()) => removed,
            Err(e) if e.kind() == ErrorKind::Timeout => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "double barrier {:?}: members still inside after {deadline:?}: {}",
                    barrier.name,
                    ids(inside.iter())
                ),
            )),
            Err(e) => Err(e),
        }
    }
}

/// How `coord inspect` reads double barriers: `barriers/<name>`, its members.
pub(crate) struct DoubleBarrierLayout;

/// [`DoubleBarrierLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: DoubleBarrierLayout = DoubleBarrierLayout;

#[async_trait::async_trait]
impl Layout for DoubleBarrierLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::DoubleBarrier
    }

    fn root(&self) -> &'static str {
        "barriers"
    }

    /// Every member is a holder.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        view.holders = participants;
    }
}
