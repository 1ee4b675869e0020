//! Two-phase commit coordinated through the store.
//!
//! Two-phase commit over the store: the coordinator's lock (a contender queue), votes as
//! session-bound entries, the plan and the decision as config keys; the decision is
//! created once (`check_absent`), the coordinator's under its lock's fence.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use tracing::Instrument;

use crate::client::Client;
use crate::engine::contender::{acquire, try_deadline, unless_suspended};
use crate::error::{Error, ErrorKind, Result};
use crate::fencing::Fence;
use crate::granted::Granted as _;
use crate::mutants::{self, Mutant};
use crate::name::{validate_name, validate_segment_name};
use crate::primitives::config::ConfigStore;
use crate::primitives::lock::{LockGuard, no_grant};
use crate::primitives::view::{Layout, Participant, RecipeKind, RecipeView, matching, split_role};
use crate::raw::{Admission, Backoff, EntriesEvent, EntryClass, QueueSpec};
use crate::txn::Txn;
use crate::types::ConfigEvent;

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
/// Made by [`Client::two_phase_commit`]; cheap to clone.
///
/// - [`TwoPhaseCommit::coordinate`] takes the transaction's coordinator lock, persists the
///   plan (the participants), waits for their votes, and persists `commit` once every
///   participant voted commit — or `abort` on the first abort vote, or at its deadline.
/// - [`TwoPhaseCommit::vote`] records this participant's vote, bound to its session, and
///   waits for the decision; at its deadline without one, it persists `abort`.
/// - [`TwoPhaseCommit::decision`] reads the decision, e.g. after a restart.
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
/// let txn = client.two_phase_commit("transfer-42")?;
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
pub struct TwoPhaseCommit {
    client: Client,
    name: String,
}

impl Client {
    /// The two-phase commit transaction `name` (no request).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad name.
    pub fn two_phase_commit(&self, name: &str) -> Result<TwoPhaseCommit> {
        validate_name("two-phase commit name", name).map_err(|e| e.with_operation("two_phase_commit"))?;
        Ok(TwoPhaseCommit {
            client: self.clone(),
            name: name.to_owned(),
        })
    }
}

impl TwoPhaseCommit {
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

/// How many times a decision is sent before its error is returned (about 30 s of
/// connection trouble).
const DECIDE_ATTEMPTS: u32 = 30;

/// The coordinators of a transaction (`lock-`): one at a time.
const COORDINATORS: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["lock-"],
    kazoo_marker: None,
}];

/// The participants' votes (`vote-`), each a session-bound entry holding its decision.
const VOTES: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["vote-"],
    kazoo_marker: None,
}];

/// The coordinator lock of transaction `name`: `transactions/<name>/coordinator`.
fn coordinator_queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "two_phase_coordinator",
        format!("transactions/{name}/coordinator"),
        COORDINATORS,
        Admission::Exclusive,
    )
}

/// The votes of transaction `name`: `transactions/<name>/votes`; a vote never waits, the
/// coordinator watches them all.
fn votes_queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "two_phase_vote",
        format!("transactions/{name}/votes"),
        VOTES,
        Admission::Immediate,
    )
}

impl TwoPhaseCommit {
    fn plan_key(&self) -> String {
        format!("{}/plan", self.name)
    }

    fn decision_key(&self) -> String {
        format!("{}/decision", self.name)
    }

    /// The decision, if one was written.
    ///
    /// # Errors
    ///
    /// `Unexpected` when the decision key holds something else; `Unavailable`,
    /// `Timeout`, `Closed`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe (a read).
    pub async fn decision(&self) -> Result<Option<Decision>> {
        let span = tracing::debug_span!("coord.transaction.decision", backend = self.client.kind(), name = %self.name);
        self.read_decision()
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("two_phase decision"))
    }

    async fn read_decision(&self) -> Result<Option<Decision>> {
        match self.client.get(&self.decision_key()).await? {
            None => Ok(None),
            Some(v) => Decision::parse(&v.value).map(Some).ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("key {:?} holds no decision", self.decision_key()),
                )
            }),
        }
    }

    /// Coordinates the transaction among `participants`: persists the plan, waits for
    /// their votes, and persists the decision — `commit` once every participant voted
    /// commit, `abort` on the first abort vote or when `deadline` passes first. Returns
    /// the decision (one written earlier, if any).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for an empty, oversized or duplicated participant list;
    /// `AlreadyExists` when another coordinator runs the transaction; `Unavailable` at
    /// once while the session is suspended (like a `try_*`, coordinating does not wait
    /// out an outage to start); `Fenced` when this coordinator lost its lock and no
    /// decision was written (it decided nothing — a decision written by an attempt whose
    /// answer was lost is read and returned instead);
    /// `Unavailable`/`Timeout` — with [`outcome_unknown`](Error::outcome_unknown) only
    /// when the decision may have been written (read it with
    /// [`TwoPhaseCommit::decision`]); once it holds the coordinator lock, connection
    /// trouble (a member down, a leader election) is ridden out: the plan and the
    /// decision are sent again (a failure before deciding is never an unknown decision);
    /// `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped before deciding, the coordinator lock is given up and the participants
    /// abort at their deadlines; dropped while writing the decision, it may or may not
    /// have been written.
    pub async fn coordinate(&self, participants: &[&str], deadline: Duration) -> Result<Decision> {
        let span = tracing::debug_span!(
            "coord.transaction.coordinate",
            backend = self.client.kind(),
            name = %self.name,
            participants = participants.len()
        );
        self.coordinate_inner(participants, deadline)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("two_phase coordinate"))
    }

    async fn coordinate_inner(&self, participants: &[&str], deadline: Duration) -> Result<Decision> {
        validate_participants(participants)?;
        // Like a `try_*`, coordinating fails fast during an outage.
        let mut session = self.client.core().backend.session();
        let generation = session.borrow().generation;
        if let Some(decided) = unless_suspended(
            &mut session,
            generation,
            false,
            try_deadline(self.client.session_timeout()),
            self.read_decision(),
        )
        .await?
        {
            return Ok(decided);
        }
        let lock = coordinator_queue(&self.name);
        // A failed try leaves no lock entry behind (removed in the background) and no
        // decision: its error never says the decision's outcome is unknown.
        let gate = acquire(self.client.core(), lock, Vec::new(), false)
            .await
            .map_err(|e| e.with_outcome_unknown(false))?
            .map(|g| LockGuard::new(self.name.clone(), g))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::AlreadyExists,
                    format!("another coordinator runs transaction {:?}", self.name),
                )
            })?;
        let decided = async {
            self.write_plan(participants, gate.fence()).await?;
            let outcome = match tokio::time::timeout(deadline, self.votes(participants)).await {
                Ok(r) => r?,
                Err(_) => Decision::Abort,
            };
            self.decide(outcome, Some(gate.fence())).await
        }
        .await;
        if let Err(e) = gate.release().await {
            tracing::warn!(error = %e, "coord.two_phase_coordinator_release_refused");
        }
        decided
    }

    /// Persists the plan under `fence`, through connection trouble: a put of the same
    /// value under the same fence is safe to send again, and no plan is a decision — so
    /// a failure here is never an unknown decision.
    async fn write_plan(&self, participants: &[&str], fence: Fence) -> Result<()> {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut attempts = 0;
        loop {
            attempts += 1;
            let txn = Txn::new()
                .fenced_by(fence.clone())
                .put(self.plan_key(), participants.join(",").into_bytes());
            match self.client.commit(txn).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_retryable() && attempts < DECIDE_ATTEMPTS => {
                    tracing::debug!(error = %e, "coord.transaction_plan_retry");
                    backoff.wait().await;
                }
                // Nothing decided: the outcome of a plan write is no decision's.
                Err(e) => return Err(e.with_outcome_unknown(false)),
            }
        }
    }

    /// Watches the votes until every participant voted commit (`Commit`) or one voted
    /// abort (`Abort`).
    async fn votes(&self, participants: &[&str]) -> Result<Decision> {
        let queue = votes_queue(&self.name);
        let mut entries = self.client.backend().watch_entries(&queue).await?;
        while let Some(event) = entries.next().await {
            let EntriesEvent::Entries(now) = event? else {
                continue;
            };
            let votes: BTreeMap<&str, Decision> = now
                .iter()
                .filter_map(|m| {
                    let v = std::str::from_utf8(&m.value).ok()?;
                    let (vote, id) = v.split_once(':')?;
                    Some((id, Decision::parse(vote.as_bytes())?))
                })
                .collect();
            let mut all_commit = true;
            for p in participants {
                match votes.get(p) {
                    Some(Decision::Abort) => return Ok(Decision::Abort),
                    Some(Decision::Commit) => {}
                    None => all_commit = false,
                }
            }
            if all_commit {
                return Ok(Decision::Commit);
            }
        }
        Err(Error::closed())
    }

    /// Writes `outcome` unless a decision exists (under `fence` when given); returns the
    /// decision in force. Retried through connection trouble (a create that fails if a
    /// decision exists is safe to send again: a retry after one that landed finds it).
    /// Once an attempt's outcome is unknown, no later failure is reported as "nothing
    /// decided" without reading the decision: a `Fenced` refusal after it (the fence went
    /// with the session) is answered by what is persisted, and running out of attempts
    /// says the outcome is unknown.
    async fn decide(&self, outcome: Decision, fence: Option<Fence>) -> Result<Decision> {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut attempts = 0;
        // Whether an attempt may have written the decision.
        let mut maybe_written = false;
        loop {
            attempts += 1;
            let mut txn = Txn::new();
            if let Some(fence) = &fence {
                txn = txn.fenced_by(fence.clone());
            }
            if !mutants::active(Mutant::DecisionOverwritten) {
                txn = txn.check_absent(self.decision_key());
            }
            let txn = txn.put(self.decision_key(), outcome.as_str().as_bytes().to_vec());
            let failed = match self.client.commit(txn).await {
                Ok(_) => return Ok(outcome),
                Err(e) => e,
            };
            maybe_written |= failed.outcome_unknown();
            let settled = match failed.kind() {
                // Decided already (a participant's abort at its deadline, or this
                // coordinator's own earlier attempt): that stands.
                ErrorKind::VersionMismatch => true,
                // The fence is gone, so no attempt can land from now on (each is
                // conditional on it); one sent earlier may have.
                ErrorKind::Fenced if maybe_written => true,
                _ => false,
            };
            if settled {
                match self.read_decision().await {
                    Ok(Some(d)) => return Ok(d),
                    // Fenced, and nothing was written: this coordinator decided nothing.
                    Ok(None) if failed.kind() == ErrorKind::Fenced => return Err(failed),
                    Ok(None) => {}
                    Err(e) if e.is_retryable() && attempts < DECIDE_ATTEMPTS => {}
                    Err(e) => return Err(e.with_outcome_unknown(maybe_written)),
                }
            } else if !(failed.is_retryable() && attempts < DECIDE_ATTEMPTS) {
                let unknown = maybe_written || failed.outcome_unknown();
                return Err(failed.with_outcome_unknown(unknown));
            } else {
                tracing::debug!(error = %failed, "coord.transaction_decide_retry");
            }
            backoff.wait().await;
        }
    }

    /// Votes as participant `id` (`commit` true to commit), bound to this client's
    /// session, and waits for the decision; if none comes within `deadline`, persists
    /// `abort`. Returns the decision in force (one written earlier, if any, without
    /// voting).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a bad id; `Unavailable`/`Timeout` — with
    /// [`outcome_unknown`](Error::outcome_unknown) when an `abort` may have been
    /// written; `Closed`.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the vote is withdrawn (in the background) and counts as missing.
    pub async fn vote(&self, id: &str, commit: bool, deadline: Duration) -> Result<Decision> {
        let span = tracing::debug_span!("coord.transaction.vote", backend = self.client.kind(), name = %self.name, id, commit);
        self.vote_inner(id, commit, deadline)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("two_phase vote"))
    }

    async fn vote_inner(&self, id: &str, commit: bool, deadline: Duration) -> Result<Decision> {
        validate_segment_name("participant id", id)?;
        if let Some(decided) = self.read_decision().await? {
            return Ok(decided);
        }
        let vote = if commit { Decision::Commit } else { Decision::Abort };
        let queue = votes_queue(&self.name);
        let ballot = acquire(
            self.client.core(),
            queue,
            format!("{}:{id}", vote.as_str()).into_bytes(),
            true,
        )
        .await?
        .ok_or_else(|| no_grant("vote"))?;
        let decided = match tokio::time::timeout(deadline, self.until_decided()).await {
            Ok(r) => r,
            Err(_) => self.decide(Decision::Abort, None).await,
        };
        if let Err(e) = ballot.contender.leave().await {
            tracing::warn!(error = %e, "coord.two_phase_vote_removal_refused");
        }
        decided
    }

    /// Waits until a decision is written, through watch gaps.
    async fn until_decided(&self) -> Result<Decision> {
        let key = self.decision_key();
        let mut events = ConfigStore::watch(&self.client, &key).await?;
        while let Some(event) = events.next().await {
            let value = match event? {
                ConfigEvent::Snapshot(entries) => entries.into_iter().find(|e| e.key == key).map(|e| e.value),
                ConfigEvent::Put(e) if e.key == key => Some(e.value),
                _ => None,
            };
            if let Some(d) = value.as_deref().and_then(Decision::parse) {
                return Ok(d);
            }
        }
        Err(Error::closed())
    }
}

/// How `coord inspect` reads two-phase commits: `transactions/<name>`, its coordinator and votes, and its plan and decision from the config store.
pub(crate) struct TwoPhaseLayout;

/// [`TwoPhaseLayout`], for `inspect.rs`'s list.
pub(crate) const LAYOUT: TwoPhaseLayout = TwoPhaseLayout;

#[async_trait::async_trait]
impl Layout for TwoPhaseLayout {
    fn kind(&self) -> RecipeKind {
        RecipeKind::TwoPhaseCommit
    }

    fn root(&self) -> &'static str {
        "transactions"
    }

    fn name_and_role(&self, rel: &str, _name: &str) -> Option<(String, &'static str)> {
        split_role(rel, &[("coordinator", "coordinator"), ("votes", "vote")])
    }

    /// The coordinator and every vote are holders.
    fn admit(&self, view: &mut RecipeView, participants: Vec<Participant>) {
        view.holders = participants;
    }

    /// The two-phase commits with a plan or a decision in the config store.
    async fn config_names(&self, client: &Client, prefix: &str, exact: bool) -> Result<Vec<String>> {
        let names = client.list(prefix).await?.into_iter().filter_map(|e| {
            let (name, last) = e.key.rsplit_once('/')?;
            (last == "plan" || last == "decision").then(|| name.to_owned())
        });
        Ok(matching(names, prefix, exact))
    }

    /// Its plan and decision, as stored.
    async fn fill(&self, client: &Client, view: &mut RecipeView) -> Result<()> {
        view.plan = client.get(&format!("{}/plan", view.name)).await?.map(|v| v.value);
        view.decision = client
            .get(&format!("{}/decision", view.name))
            .await?
            .map(|v| v.value);
        Ok(())
    }
}
