//! Two-phase commit coordinated through the store.

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::name::{validate_name, validate_segment_name};

/// The most participants a transaction may name.
pub const MAX_PARTICIPANTS: usize = 1000;

/// A transaction's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Every participant voted to commit, in time: apply the work.
    Commit,
    /// A participant voted to abort, did not vote in time, or the coordinator did not
    /// decide in time: undo the work.
    Abort,
}

impl Decision {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Decision::Commit => "commit",
            Decision::Abort => "abort",
        }
    }

    pub(crate) fn parse(value: &[u8]) -> Option<Decision> {
        match value.split(|b| *b == b':').next() {
            Some(b"commit") => Some(Decision::Commit),
            Some(b"abort") => Some(Decision::Abort),
            _ => None,
        }
    }
}

/// A two-phase commit coordinated through the store: a coordinator names the
/// participants, each votes commit or abort, and one decision is persisted for all.
/// Made by [`Client::transaction`]; cheap to clone.
///
/// - [`Transaction::coordinate`] takes the transaction's coordinator lock, persists the
///   plan (the participants), waits for their votes, and persists `commit` once every
///   participant voted commit — or `abort` on the first abort vote, or at its deadline.
/// - [`Transaction::vote`] records this participant's vote, bound to its session, and
///   waits for the decision; at its deadline without one, it persists `abort`.
/// - [`Transaction::decision`] reads the decision, e.g. after a restart.
///
/// Recovery: the decision is written once (a create that fails if one exists), so the
/// first decision — the coordinator's, or a participant's `abort` at its deadline —
/// is the only one, and every participant reads the same. A coordinator that crashes
/// before deciding leads to `abort` at the participants' deadlines. A participant that
/// crashes before voting, or whose session is lost with its vote, leaves its vote
/// missing: `abort` at the coordinator's deadline. A decision once written survives
/// everything; a participant that restarts reads it.
///
/// The plan and the decision are persistent config keys `<name>/plan` and
/// `<name>/decision`, kept until deleted (they are the record of the outcome); votes
/// are entries under `transactions/<name>/votes`.
///
/// # Fencing
///
/// The coordinator's decision is written under its coordinator lock's fence: a
/// coordinator that lost its lock (a paused process, a lost session) cannot write a
/// decision, and no decision is ever overwritten.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> coord_core::Result<()> {
/// use std::time::Duration;
/// use coord_core::Decision;
/// let client = coord_mem::connect("mem://2pc-doc")?;
/// let txn = client.transaction("transfer-42")?;
/// let coordinator = {
///     let txn = txn.clone();
///     tokio::spawn(async move { txn.coordinate(&["bank-a", "bank-b"], Duration::from_secs(5)).await })
/// };
/// let a = { let txn = txn.clone(); tokio::spawn(async move { txn.vote("bank-a", true, Duration::from_secs(5)).await }) };
/// let b = txn.vote("bank-b", true, Duration::from_secs(5)).await?;
/// assert_eq!(b, Decision::Commit);
/// assert_eq!(a.await.expect("ran")?, Decision::Commit);
/// assert_eq!(coordinator.await.expect("ran")?, Decision::Commit);
/// assert_eq!(txn.decision().await?, Some(Decision::Commit));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Transaction {
    pub(crate) client: Client,
    pub(crate) name: String,
}

impl Client {
    /// The two-phase commit transaction `name` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn transaction(&self, name: &str) -> Result<Transaction> {
        validate_name("transaction name", name).map_err(|e| e.with_operation("transaction"))?;
        Ok(Transaction {
            client: self.clone(),
            name: name.to_owned(),
        })
    }
}

impl Transaction {
    /// The transaction's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Checks a participant list: valid ids, no duplicates, 1 to [`MAX_PARTICIPANTS`].
pub(crate) fn validate_participants(participants: &[&str]) -> Result<()> {
    if participants.is_empty() || participants.len() > MAX_PARTICIPANTS {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "a transaction names 1 to {MAX_PARTICIPANTS} participants, not {}",
                participants.len()
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in participants {
        validate_segment_name("participant id", p)?;
        if !seen.insert(*p) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("participant {p:?} is named twice"),
            ));
        }
    }
    Ok(())
}
