//! Two-phase commit cases: all commit, one abort, a missing vote, a crashed coordinator,
//! a crashed participant, a decision read after the fact, a stale coordinator fenced.

use std::time::Duration;

use anyhow::{bail, ensure};
use coord_core::{Decision, ErrorKind};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, retrying, settle, within};

const LONG: Duration = Duration::from_secs(30);
const QUICK: Duration = Duration::from_secs(10);

/// Coordinates transaction `t` as a caller would through an outage: `coordinate` fails
/// at once with `Unavailable` (retryable, nothing written) while the session is
/// suspended — a member killed under the suite on a cluster — or when a step goes
/// unanswered past the `try` deadline (a quarter of the session timeout) on a busy
/// machine; it is called again then.
async fn coordinate(
    client: coord_core::Client,
    participants: &'static [&'static str],
    deadline: Duration,
) -> coord_core::Result<Decision> {
    loop {
        match client
            .two_phase_commit("t")?
            .coordinate(participants, deadline)
            .await
        {
            Err(e) if e.kind() == ErrorKind::Unavailable && e.is_retryable() && !e.outcome_unknown() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// Every participant votes commit: the coordinator and both participants get `Commit`,
/// and it stays readable.
pub async fn all_commit_commits(ctx: Ctx) -> CaseResult {
    let [c, p1, p2] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let coordinator = tokio::spawn(coordinate(c, &["p1", "p2"], LONG));
    let t1 = p1.two_phase_commit("t")?;
    let v1 = tokio::spawn(async move { retrying(|| t1.vote("p1", true, LONG)).await });
    let t2 = p2.two_phase_commit("t")?;
    let d2 = within(
        QUICK,
        "p2 learns the decision",
        retrying(|| t2.vote("p2", true, LONG)),
    )
    .await??;
    ensure!(d2 == Decision::Commit, "p2 got {d2:?}");
    ensure!(within(QUICK, "p1's decision", v1).await??? == Decision::Commit);
    ensure!(within(QUICK, "the coordinator's decision", coordinator).await??? == Decision::Commit);
    ensure!(p1.two_phase_commit("t")?.decision().await? == Some(Decision::Commit));
    Ok(())
}

/// One participant votes abort: everyone gets `Abort`, without waiting for the deadline.
pub async fn one_abort_aborts(ctx: Ctx) -> CaseResult {
    let [c, p1, p2] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let coordinator = tokio::spawn(coordinate(c, &["p1", "p2"], LONG));
    let t1 = p1.two_phase_commit("t")?;
    let v1 = tokio::spawn(async move { retrying(|| t1.vote("p1", true, LONG)).await });
    let t2 = p2.two_phase_commit("t")?;
    let d2 = within(
        QUICK,
        "p2 learns the decision",
        retrying(|| t2.vote("p2", false, LONG)),
    )
    .await??;
    ensure!(d2 == Decision::Abort);
    ensure!(within(QUICK, "p1's decision", v1).await??? == Decision::Abort);
    ensure!(within(QUICK, "the coordinator's decision", coordinator).await??? == Decision::Abort);
    Ok(())
}

/// A participant that never votes (or crashed before voting): `Abort` at the
/// coordinator's deadline, for the coordinator and the participant that voted commit.
pub async fn missing_vote_aborts_at_the_deadline(ctx: Ctx) -> CaseResult {
    let (c, p1) = (ctx.client().await?, ctx.client().await?);
    let coordinator = tokio::spawn(coordinate(c, &["p1", "p2"], Duration::from_secs(1)));
    let t1 = p1.two_phase_commit("t")?;
    let d1 = within(
        QUICK,
        "p1 learns the decision",
        retrying(|| t1.vote("p1", true, LONG)),
    )
    .await??;
    ensure!(d1 == Decision::Abort, "p1 got {d1:?} with p2's vote missing");
    ensure!(within(QUICK, "the coordinator's decision", coordinator).await??? == Decision::Abort);
    Ok(())
}

/// A coordinator that crashes before deciding: the participants' deadline writes
/// `Abort`, the same for all; a later coordinator finds that decision and keeps it.
pub async fn crashed_coordinator_aborts_at_the_participants_deadline(ctx: Ctx) -> CaseResult {
    let [c, p1, p2] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let txn = c.two_phase_commit("t")?;
    let coordinator = tokio::spawn(async move { txn.coordinate(&["p1", "p2", "p3"], LONG).await });
    settle().await;
    ctx.factory().crash(&c).await?;
    coordinator.abort();
    let t1 = p1.two_phase_commit("t")?;
    let v1 = tokio::spawn(async move { t1.vote("p1", true, Duration::from_secs(2)).await });
    let d2 = within(
        LONG,
        "p2's decision",
        p2.two_phase_commit("t")?.vote("p2", true, Duration::from_secs(2)),
    )
    .await??;
    ensure!(d2 == Decision::Abort, "p2 got {d2:?} with the coordinator gone");
    ensure!(within(QUICK, "p1's decision", v1).await??? == Decision::Abort);
    let again = within(
        QUICK,
        "a new coordinator",
        p1.two_phase_commit("t")?.coordinate(&["p1"], QUICK),
    )
    .await??;
    ensure!(
        again == Decision::Abort,
        "a later coordinator changed the decision to {again:?}"
    );
    Ok(())
}

/// A participant whose session ends after voting commit: its vote goes with its session,
/// so the transaction aborts at the coordinator's deadline instead of committing.
pub async fn vote_goes_with_the_session(ctx: Ctx) -> CaseResult {
    let [c, p1, p2] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let generation = c.session().borrow().generation;
    let t1 = p1.two_phase_commit("t")?;
    let _voter = tokio::spawn(async move { t1.vote("p1", true, LONG).await });
    settle().await;
    ctx.factory().crash(&p1).await?;
    // Past the session timeout: p1's vote is gone before the coordinator looks.
    tokio::time::sleep(ctx.expiry_wait()).await;
    let coordinator = tokio::spawn(coordinate(c.clone(), &["p1", "p2"], Duration::from_secs(2)));
    let d2 = within(
        LONG,
        "p2's decision",
        p2.two_phase_commit("t")?.vote("p2", true, QUICK),
    )
    .await??;
    ensure!(
        d2 == Decision::Abort,
        "committed with a vote whose session is gone"
    );
    match within(QUICK, "the coordinator's decision", coordinator).await?? {
        Ok(decision) => ensure!(
            decision == Decision::Abort,
            "the coordinator decided {decision:?}"
        ),
        // A member fault can end the coordinator's own session too: its lock goes with
        // it, and its decision is refused. That is the guarantee, not this case's subject.
        Err(e) if e.kind() == ErrorKind::Fenced && c.session().borrow().generation > generation => {
            bail!("the coordinator lost the session meanwhile (a member fault?): {e}")
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// A second coordinator while one runs is refused; bad participant lists are refused.
pub async fn one_coordinator_at_a_time(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let generation = a.session().borrow().generation;
    // Each coordinator asks again through `Unavailable` (see `coordinate`). Of the two,
    // exactly one must then be refused with `AlreadyExists` and the other decide `Abort`
    // (no votes).
    let first = tokio::spawn(coordinate(a.clone(), &["p1"], Duration::from_secs(3)));
    settle().await;
    let second = within(
        QUICK * 2,
        "the second coordinator",
        coordinate(b.clone(), &["p1"], QUICK),
    )
    .await?;
    let first = within(QUICK, "the first coordinator decides", first).await??;
    let (refused, decided) = match (first, second) {
        (decided, Err(e)) if e.kind() == ErrorKind::AlreadyExists => ("second", decided),
        (Err(e), decided) if e.kind() == ErrorKind::AlreadyExists => ("first", decided),
        (first, second) => {
            bail!("neither coordinator was refused: the first returned {first:?}, the second {second:?}")
        }
    };
    match decided {
        Ok(d) => ensure!(
            d == Decision::Abort,
            "the coordinator decided {d:?} ({refused} refused)"
        ),
        // Its lock went with its session (a member killed under it on a cluster).
        Err(e) if e.kind() == ErrorKind::Fenced && a.session().borrow().generation > generation => {
            bail!("the coordinator lost the session meanwhile (a member fault?): {e}")
        }
        Err(e) => bail!("the coordinator failed ({refused} refused): {e}"),
    }
    for bad in [&[][..], &["p", "p"][..], &["bad/id"][..]] {
        match b.two_phase_commit("u")?.coordinate(bad, QUICK).await {
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {}
            other => bail!("participants {bad:?} returned {other:?}"),
        }
    }
    Ok(())
}

/// A coordinator whose lock went with its session cannot decide: when the last vote
/// comes, its `commit` is refused (`Fenced`) and nothing is written; the participant
/// aborts at its deadline.
pub async fn stale_coordinator_cannot_decide(ctx: Ctx) -> CaseResult {
    let (c, p1) = (ctx.client().await?, ctx.client().await?);
    let txn = c.two_phase_commit("t")?;
    let coordinator = tokio::spawn(async move { txn.coordinate(&["p1"], LONG).await });
    settle().await;
    ctx.factory().kill_session(&c).await?;
    settle().await;
    let d1 = within(
        LONG,
        "p1's decision",
        p1.two_phase_commit("t")?.vote("p1", true, Duration::from_secs(3)),
    )
    .await??;
    match within(LONG, "the stale coordinator ends", coordinator).await?? {
        Err(e) if e.kind() == ErrorKind::Fenced => {}
        other => bail!("a coordinator without its lock returned {other:?}"),
    }
    ensure!(
        d1 == Decision::Abort,
        "p1 got {d1:?}: a stale coordinator decided"
    );
    Ok(())
}

/// A coordinator whose decision landed while its reply was lost, and whose session was
/// then lost before it could send the decision again, reports the decision that stands
/// (or that the outcome is unknown) — never "fenced: decided nothing" while the
/// participants commit.
pub async fn landed_decision_is_reported_after_session_loss(ctx: Ctx) -> CaseResult {
    use coord_core::ConfigStore;
    use futures::StreamExt;
    let (c, p1, p2, o) = (
        ctx.client().await?,
        ctx.client().await?,
        ctx.client().await?,
        ctx.client().await?,
    );
    let coordinator = tokio::spawn({
        let t = c.two_phase_commit("t")?;
        async move { t.coordinate(&["p1", "p2"], Duration::from_secs(20)).await }
    });
    eventually(QUICK, "the plan is written", || async {
        Ok(o.get("t/plan").await?.is_some())
    })
    .await?;
    // The coordinator's next write is its decision: applied, its reply lost.
    ctx.factory().lose_replies(&c, 1).await?;
    let mut decision = o.watch("t/decision").await?;
    let (v1, v2) = (p1.two_phase_commit("t")?, p2.two_phase_commit("t")?);
    let votes = tokio::spawn(async move {
        tokio::join!(
            v1.vote("p1", true, Duration::from_secs(20)),
            v2.vote("p2", true, Duration::from_secs(20))
        )
    });
    // The moment the decision lands, the coordinator's session goes.
    within(QUICK, "the decision lands", async {
        while let Some(event) = decision.next().await {
            if let coord_core::ConfigEvent::Put(_) = event? {
                return Ok::<_, anyhow::Error>(());
            }
        }
        bail!("the decision watch ended")
    })
    .await??;
    ctx.factory().kill_session(&c).await?;
    match within(QUICK, "the coordinator returns", coordinator).await?? {
        Ok(d) => ensure!(d == Decision::Commit, "the coordinator reports {d:?}"),
        Err(e) => ensure!(
            e.outcome_unknown(),
            "the coordinator reports {e} (kind {:?}, outcome known) while its commit decision landed",
            e.kind()
        ),
    }
    let (d1, d2) = within(QUICK, "the votes return", votes).await??;
    ensure!(d1? == Decision::Commit && d2? == Decision::Commit);
    ensure!(o.two_phase_commit("t")?.decision().await? == Some(Decision::Commit));
    Ok(())
}

/// A coordinator never says the decision's outcome is unknown while it wrote no
/// decision, nor that another coordinator runs when only its own earlier entry is still
/// being removed. The reply to its lock entry's join is lost (applied): like a `try_*`,
/// it fails fast — `Unavailable`, retryable, no unknown decision — and removes the entry
/// in the background (the next seven replies lost too, so the removal outlasts a try's
/// deadline). Called again, it waits for that removal and says `Unavailable` while it
/// lasts — never `AlreadyExists` — and, called again, decides `Abort` at its deadline
/// (p1 never votes).
pub async fn coordinator_rides_out_lost_replies_before_deciding(ctx: Ctx) -> CaseResult {
    let (c, o) = (ctx.client().await?, ctx.client().await?);
    ctx.factory().lose_replies(&c, 8).await?;
    let decided = within(
        QUICK,
        "the coordinator's decision",
        coordinate(c.clone(), &["p1"], Duration::from_secs(1)),
    )
    .await?;
    match decided {
        Ok(d) => ensure!(d == Decision::Abort, "decided {d:?} with p1's vote missing"),
        Err(e) => bail!("the coordinator gave up before deciding: {e}"),
    }
    ensure!(o.two_phase_commit("t")?.decision().await? == Some(Decision::Abort));
    Ok(())
}
