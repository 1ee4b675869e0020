//! Double barriers: a group of members enters together and leaves together.

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::FencingToken;
use crate::name::validate_name;
use crate::recipes::contender::Grant;

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
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) members: u32,
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
    pub(crate) barrier: DoubleBarrier,
    pub(crate) id: String,
    pub(crate) grant: Grant,
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
