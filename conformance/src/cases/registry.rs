//! Registry cases: listing, removal, crash departure, re-registration, watch.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use coord_core::{ErrorKind, Registry, RegistryEvent, ServiceInstance, SessionState};

use crate::harness::{CaseResult, Ctx};
use crate::util::{eventually, next_event, through_short_outage, within};

const QUICK: Duration = Duration::from_secs(10);

fn ids(list: &[ServiceInstance]) -> Vec<&str> {
    list.iter().map(|i| i.id.as_str()).collect()
}

/// Instances from two clients are listed, sorted by id, metadata intact.
pub async fn register_and_list(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let i2 = ServiceInstance::new("n2", "10.0.0.2:80").with_metadata("zone", "b");
    let _r2 = b.register("api", i2.clone()).await?;
    let _r1 = a
        .register("api", ServiceInstance::new("n1", "10.0.0.1:80"))
        .await?;
    let list = a.instances("api").await?;
    ensure!(ids(&list) == ["n1", "n2"], "listed {:?}", ids(&list));
    ensure!(list[1] == i2, "metadata lost: {:?}", list[1]);
    ensure!(
        a.instances("api-v2").await?.is_empty(),
        "another service's list is not empty"
    );
    Ok(())
}

/// `deregister` removes the instance.
pub async fn deregister_removes(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    r.deregister().await?;
    ensure!(
        a.instances("api").await?.is_empty(),
        "instance listed after deregister"
    );
    Ok(())
}

/// Dropping the registration removes the instance.
pub async fn dropped_registration_removes(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    drop(r);
    eventually(QUICK, "instance gone after drop", || async {
        Ok(a.instances("api").await?.is_empty())
    })
    .await
}

/// An id registered by another live client is refused with `AlreadyExists`.
pub async fn duplicate_id_rejected(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let _r = a.register("api", ServiceInstance::new("n1", "a:1")).await?;
    let err = b
        .register("api", ServiceInstance::new("n1", "b:1"))
        .await
        .err()
        .context("duplicate instance id accepted")?;
    ensure!(err.kind() == ErrorKind::AlreadyExists, "got {err}");
    ensure!(
        a.instances("api").await?[0].address == "a:1",
        "first registration was overwritten"
    );
    Ok(())
}

/// `update` changes what others see.
pub async fn update_is_visible(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    r.update(ServiceInstance::new("n1", "h:2").with_metadata("v", "2"))
        .await?;
    let list = b.instances("api").await?;
    ensure!(
        list.len() == 1 && list[0].address == "h:2" && list[0].metadata["v"] == "2",
        "{list:?}"
    );
    let err = r
        .update(ServiceInstance::new("other", "h:3"))
        .await
        .err()
        .context("id change accepted")?;
    ensure!(err.kind() == ErrorKind::InvalidArgument);
    Ok(())
}

/// A crashed member disappears within the session timeout plus a margin.
pub async fn crashed_member_disappears(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    std::mem::forget(r);
    ctx.factory().crash(&a).await?;
    eventually(ctx.expiry_wait(), "crashed member disappears", || async {
        Ok(b.instances("api").await?.is_empty())
    })
    .await
}

/// After session loss the instance is re-registered with its latest data.
pub async fn reregisters_after_session_loss(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    r.update(ServiceInstance::new("n1", "h:9").with_metadata("gen", "2"))
        .await?;
    let generation = a.session().borrow().generation;
    ctx.factory().kill_session(&a).await?;
    let mut session = a.session();
    tokio::time::timeout(
        ctx.expiry_wait(),
        session.wait_for(|s| s.generation > generation && s.state == SessionState::Connected),
    )
    .await
    .context("no new session after kill")??;
    eventually(
        ctx.expiry_wait(),
        "instance re-registered with latest data",
        || async {
            let list = b.instances("api").await?;
            Ok(list.len() == 1
                && list[0].address == "h:9"
                && list[0].metadata.get("gen").map(String::as_str) == Some("2"))
        },
    )
    .await?;
    drop(r);
    Ok(())
}

/// `watch` yields the full set first, then joins, updates and departures in order.
pub async fn watch_snapshot_then_changes(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let r1 = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    let mut w = b.watch("api").await?;
    match next_event(&mut w, QUICK, "snapshot").await? {
        RegistryEvent::Snapshot(list) => ensure!(ids(&list) == ["n1"], "snapshot {:?}", ids(&list)),
        other => anyhow::bail!("first event {other:?}, expected Snapshot"),
    }
    let mut r2 = a.register("api", ServiceInstance::new("n2", "h:2")).await?;
    match next_event(&mut w, QUICK, "join").await? {
        RegistryEvent::Joined(i) => ensure!(i.id == "n2", "joined {i:?}"),
        other => anyhow::bail!("got {other:?}, expected Joined(n2)"),
    }
    r2.update(ServiceInstance::new("n2", "h:22")).await?;
    match next_event(&mut w, QUICK, "update").await? {
        RegistryEvent::Updated(i) => ensure!(i.address == "h:22", "updated {i:?}"),
        other => anyhow::bail!("got {other:?}, expected Updated(n2)"),
    }
    r1.deregister().await?;
    match next_event(&mut w, QUICK, "leave").await? {
        RegistryEvent::Left(id) => ensure!(id == "n1", "left {id}"),
        other => anyhow::bail!("got {other:?}, expected Left(n1)"),
    }
    Ok(())
}

/// A watcher sees a crashed member leave.
pub async fn watch_sees_crash_departure(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    std::mem::forget(r);
    let mut w = b.watch("api").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    ctx.factory().crash(&a).await?;
    let deadline = tokio::time::Instant::now() + ctx.expiry_wait();
    loop {
        let left = tokio::time::Instant::now() >= deadline;
        ensure!(!left, "crashed member never reported as left");
        match next_event(&mut w, ctx.expiry_wait(), "departure").await? {
            RegistryEvent::Left(id) if id == "n1" => return Ok(()),
            RegistryEvent::Snapshot(list) if list.is_empty() => return Ok(()),
            _ => {}
        }
    }
}

/// The snapshot reflects the set when `watch` returns: an instance registered right
/// after it returns arrives as `Joined`.
pub async fn watch_snapshot_is_taken_at_call(ctx: Ctx) -> CaseResult {
    let a = ctx.client().await?;
    let mut w = a.watch("api").await?;
    let _r = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    match next_event(&mut w, QUICK, "snapshot").await? {
        RegistryEvent::Snapshot(list) => {
            ensure!(list.is_empty(), "snapshot {:?} includes a later join", ids(&list))
        }
        other => anyhow::bail!("first event {other:?}, expected Snapshot"),
    }
    match next_event(&mut w, QUICK, "join").await? {
        RegistryEvent::Joined(i) => ensure!(i.id == "n1", "joined {i:?}"),
        other => anyhow::bail!("got {other:?}, expected Joined(n1)"),
    }
    Ok(())
}

/// A watch that misses history it cannot recover (compaction, session loss) reports
/// `Resync`, then a snapshot of the current set — never the missed changes as if
/// nothing was lost.
pub async fn watch_resync_on_gap(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut keep = a.register("api", ServiceInstance::new("keep", "h:1")).await?;
    let gone = a.register("api", ServiceInstance::new("gone", "h:2")).await?;
    let mut w = b.watch("api").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    ctx.factory().begin_watch_gap(&b).await?;
    keep.update(ServiceInstance::new("keep", "h:11")).await?;
    gone.deregister().await?;
    let _new = a.register("api", ServiceInstance::new("new", "h:3")).await?;
    ctx.factory().end_watch_gap(&b).await?;
    let mut saw_resync = false;
    loop {
        match next_event(&mut w, ctx.expiry_wait(), "events after the gap").await? {
            RegistryEvent::Resync => saw_resync = true,
            RegistryEvent::Snapshot(list) => {
                ensure!(saw_resync, "snapshot after a gap without a preceding Resync");
                let view: Vec<(&str, &str)> =
                    list.iter().map(|i| (i.id.as_str(), i.address.as_str())).collect();
                let want = [("keep", "h:11"), ("new", "h:3")];
                ensure!(view == want, "snapshot after Resync {view:?}, expected {want:?}");
                return Ok(());
            }
            other => anyhow::bail!(
                "event {other:?} across an unrecoverable gap: changes were delivered as if nothing was missed"
            ),
        }
    }
}

/// After session loss a registration whose id another client took meanwhile reports
/// `Retrying`, keeps retrying (well past three session timeouts), and is `Registered`
/// again — with its own data — as soon as the id is free.
pub async fn reregistration_waits_for_a_taken_id(ctx: Ctx) -> CaseResult {
    use coord_core::RegistrationState;
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut reg = a.register("api", ServiceInstance::new("n1", "a:1")).await?;
    ensure!(reg.state() == RegistrationState::Registered, "{:?}", reg.state());
    // Cut a off long enough for the server to expire its session and the instance.
    ctx.factory().suspend(&a, ctx.session_timeout() * 3).await?;
    eventually(ctx.expiry_wait(), "a's instance expires", || async {
        Ok(b.instances("api").await?.is_empty())
    })
    .await?;
    let taken = b.register("api", ServiceInstance::new("n1", "b:1")).await?;
    let b_generation = b.session().borrow().generation;
    eventually(ctx.expiry_wait() * 2, "a is back on a new session", || async {
        Ok(a.session_state() == SessionState::Connected && a.session().borrow().generation > 1)
    })
    .await?;
    // Past the patience an earlier version had (three session timeouts).
    let hold_on = ctx.session_timeout() * 3 + Duration::from_secs(1);
    let until = tokio::time::Instant::now() + hold_on;
    while tokio::time::Instant::now() < until {
        if reg.state() != RegistrationState::Retrying {
            // b losing its session (a member killed under it) frees the id: then a may
            // take it, and this run proves nothing. The server says whether b's instance
            // is still there (b's client may learn of its loss later).
            let b_listed = b.instances("api").await?.iter().any(|i| i.address == "b:1");
            ensure!(
                b_listed && b.session().borrow().generation == b_generation,
                "the session was replaced under b while it held the id (a member fault): the id was free"
            );
            bail!("while b holds the id, a's registration is {:?}", reg.state());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(
        b.session().borrow().generation == b_generation,
        "the session was replaced under b while it held the id (a member fault): the id was free"
    );
    ensure!(
        b.instances("api").await?[0].address == "b:1",
        "a took over b's live registration"
    );
    taken.deregister().await?;
    let state = within(ctx.expiry_wait(), "a's registration comes back", async {
        loop {
            let s = reg.changed().await;
            if s != RegistrationState::Retrying {
                return s;
            }
        }
    })
    .await?;
    ensure!(
        state == RegistrationState::Registered,
        "a's registration is {state:?}"
    );
    eventually(QUICK, "a's instance is listed again", || async {
        Ok(b.instances("api").await?.first().map(|i| i.address.clone()) == Some("a:1".into()))
    })
    .await?;
    Ok(())
}

/// A deregistration sent while the client is cut off (briefly: its session survives) is
/// retried until the server confirms it; so is the removal of a registration dropped
/// then. One try would leave the instance listed under a session that lives on.
pub async fn deregister_during_outage_is_retried(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    for dropped in [false, true] {
        let reg = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
        through_short_outage(&ctx, &a, async {
            if dropped {
                drop(reg);
            } else {
                within(
                    ctx.expiry_wait(),
                    "deregister during the outage returns",
                    reg.deregister(),
                )
                .await??;
            }
            eventually(QUICK, "the instance is gone", || async {
                Ok(b.instances("api").await?.is_empty())
            })
            .await
        })
        .await?;
    }
    Ok(())
}

/// A registry watch keeps delivering joins and departures that happen after its client
/// reconnected on the same session.
pub async fn watch_follows_changes_after_a_reconnect(ctx: Ctx) -> CaseResult {
    let (a, b) = (ctx.client().await?, ctx.client().await?);
    let mut w = b.watch("api").await?;
    next_event(&mut w, QUICK, "snapshot").await?;
    through_short_outage(&ctx, &b, async {
        eventually(ctx.session_timeout() * 2, "reconnected", || async {
            Ok(b.session_state() == SessionState::Connected)
        })
        .await
    })
    .await?;
    let reg = a.register("api", ServiceInstance::new("n1", "h:1")).await?;
    loop {
        match next_event(&mut w, QUICK, "the join after the reconnect").await? {
            RegistryEvent::Joined(i) if i.id == "n1" => break,
            RegistryEvent::Snapshot(all) if all.iter().any(|i| i.id == "n1") => break,
            _ => {}
        }
    }
    reg.deregister().await?;
    loop {
        match next_event(&mut w, QUICK, "the departure after the reconnect").await? {
            RegistryEvent::Left(id) if id == "n1" => return Ok(()),
            RegistryEvent::Snapshot(all) if all.is_empty() => return Ok(()),
            _ => {}
        }
    }
}

/// A registration whose create reached the server while its answer was lost (the link
/// reset right after the request, and stayed down a while) fails, and leaves no instance
/// behind: whatever the create made is removed once the link is back, while the session
/// lives on — no ghost registered for the session's whole life with no handle to it.
pub async fn failed_register_leaves_no_ghost(ctx: Ctx) -> CaseResult {
    let a = ctx.factory().open_links(ctx.namespace(), 1).await?;
    let links = ctx.factory().links(&a)?;
    let b = ctx.client().await?;
    let generation = a.session().borrow().generation;
    // Warm up the service's directory, so the next request is the instance's create.
    drop(a.register("api", ServiceInstance::new("warm", "h:1")).await?);
    eventually(QUICK, "the warm-up instance leaves", || async {
        Ok(b.instances("api").await?.is_empty())
    })
    .await?;
    for link in links.all() {
        link.reset_after_next_request(ctx.session_timeout() / 4);
    }
    let outcome = within(
        ctx.expiry_wait(),
        "register with its answer lost",
        a.register("api", ServiceInstance::new("n1", "h:1")),
    )
    .await?;
    ensure!(
        links.all().iter().all(|l| !l.reset_pending()),
        "the armed reset never tripped: the case tested nothing"
    );
    match outcome {
        // Recovered inside: a registration with its handle, which is fine.
        Ok(r) => {
            ensure!(ids(&b.instances("api").await?) == ["n1"]);
            r.deregister().await?;
        }
        Err(e) => {
            println!("[{}] register with its answer lost: {e}", a.kind());
            eventually(
                ctx.expiry_wait(),
                "the failed registration's instance is gone",
                || async { Ok(b.instances("api").await?.is_empty()) },
            )
            .await?;
        }
    }
    ensure!(
        a.session().borrow().generation == generation,
        "the session was replaced, which removes a ghost by itself: the case proves nothing"
    );
    Ok(())
}
