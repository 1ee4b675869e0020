//! A recipe written outside `coord-core` ([`crate::outside_recipe`]), over
//! `coord_core::raw` alone, runs on every backend: the backend contract knows no recipe.

use std::time::Duration;

use anyhow::ensure;

use crate::harness::{CaseResult, Ctx};
use crate::outside_recipe::Turnstile;
use crate::util::{settle, still_waiting, within};

const QUICK: Duration = Duration::from_secs(10);

/// A turnstile of two permits: two clients pass at once, a third waits until one
/// leaves; an attendant queued behind waits for every pass ahead of it, while a pass
/// queued behind the attendant does not count it (the recipe's own admission rule);
/// tokens rise in arrival order; and the entries sit where the recipe declared them, in
/// the backend's native layout.
pub async fn turnstile_admits_permits_in_order(ctx: Ctx) -> CaseResult {
    let [a, b, c] = <[_; 3]>::try_from(ctx.clients(3).await?).map_err(|_| anyhow::anyhow!("3 clients"))?;
    let (ta, tb, tc) = (
        Turnstile::new(&a, "gate", 2),
        Turnstile::new(&b, "gate", 2),
        Turnstile::new(&c, "gate", 2),
    );
    let pa = within(QUICK, "a passes", ta.pass(0, b"a")).await??;
    let pb = within(QUICK, "b passes beside a", tb.pass(0, b"b")).await??;
    ensure!(pb.token() > pa.token(), "tokens do not follow arrival");
    let mut third = tokio::spawn(async move { tc.pass(0, b"c").await });
    settle().await;
    still_waiting(&mut third, "a third pass of two went through").await?;
    let ta2 = Turnstile::new(&a, "gate", 2);
    let mut attendant = tokio::spawn(async move { ta2.attend(b"attendant").await });
    settle().await;
    still_waiting(&mut attendant, "the attendant went through with passes ahead").await?;

    // The entries sit where the recipe declared them.
    match a.kind() {
        "zk" => ensure!(
            pa.path().contains("/turnstiles/gate/_c_") && pa.path().contains("-pass-"),
            "a pass is not a `pass-` node in turnstiles/gate: {}",
            pa.path()
        ),
        _ => ensure!(
            pa.path().contains("turnstiles/gate/passes/"),
            "a pass is not a key under turnstiles/gate/passes/: {}",
            pa.path()
        ),
    }

    pa.leave().await?;
    let pc = within(QUICK, "c passes once a left", &mut third).await???;
    ensure!(pc.token() > pb.token(), "c's token is not above b's");
    still_waiting(&mut attendant, "the attendant went through with b and c ahead").await?;
    pb.leave().await?;
    settle().await;
    still_waiting(&mut attendant, "the attendant went through with c ahead").await?;
    // Ahead of a new pass: c and the waiting attendant. Under the turnstile's rule only
    // c counts, so it passes at once (a rule counting every entry would hold it).
    let pd = within(
        QUICK,
        "a pass with one pass and the attendant ahead",
        Turnstile::new(&b, "gate", 2).pass(1, b"d"),
    )
    .await??;
    let c_token = pc.token();
    pc.leave().await?;
    let held = within(QUICK, "the attendant once every pass left", &mut attendant).await???;
    ensure!(held.token() > c_token, "the attendant's token is not above c's");
    ensure!(
        pd.token() > held.token(),
        "d, queued behind the attendant, has a lower token"
    );
    pd.leave().await?;
    if a.kind() != "zk" {
        ensure!(
            held.path().contains("turnstiles/gate/attendant/"),
            "the attendant is not a key under turnstiles/gate/attendant/: {}",
            held.path()
        );
    }
    held.leave().await?;
    // Nothing is left ahead: a pass goes through at once.
    let again = within(
        QUICK,
        "a pass with the turnstile empty",
        Turnstile::new(&b, "gate", 2).pass(0, b"b"),
    )
    .await??;
    again.leave().await?;
    Ok(())
}
