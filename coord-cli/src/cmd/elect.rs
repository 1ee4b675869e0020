//! `coord elect`, `coord leader`, `coord observe`.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use coord::Granted as _;
use coord::{Client, Election as _, LeaderEvent, LeaderInfo};
use serde_json::json;

use crate::child::{self, Held, Stop};
use crate::cmd::args::*;
use crate::cmd::wait::{self, Holder, Waiting};
use crate::exit::{self, Failure};
use crate::output::{self, Out};

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name.
    #[arg(value_parser = name_arg)]
    pub(crate) name: String,
    /// The value others see while this candidate leads (e.g. its address).
    pub(crate) value: String,
    /// Give up campaigning after this long; exit 124.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub(crate) timeout: Option<Duration>,
    /// After SIGTERM on a lost leadership, wait this long before SIGKILL. The default is
    /// safe, as `coord lock`'s (the command is gone before the server can expire the
    /// session and another candidate lead); a longer one lets a command that ignores
    /// SIGTERM run on beside the next leader.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub(crate) grace: Option<Duration>,
    /// Lock-delay: when the leader ahead vanishes without resigning (its session
    /// expired, or its entry was deleted), lead only this long after seeing it go; a
    /// resignation hands over at once. As `coord lock --lock-delay`.
    #[arg(long, value_parser = lock_delay_arg, value_name = "DURATION")]
    pub(crate) lock_delay: Option<Duration>,
    /// A command to run while leading, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// The arguments of `coord elect`.
pub struct Campaign<'a> {
    pub name: &'a str,
    pub value: &'a str,
    pub timeout: Option<Duration>,
    pub grace: Option<Duration>,
    /// Hold off this long after a leader ahead vanished (`--lock-delay`).
    pub lock_delay: Option<Duration>,
    pub command: &'a [OsString],
}

/// Campaigns, then runs the command while leading, or holds the leadership until
/// stopped; resigns at the end.
pub async fn campaign(
    client: &Client,
    args: Campaign<'_>,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    let name = args.name;
    let leader = || async {
        let view = client.inspect_one(coord::RecipeKind::Election, name).await?;
        Ok(view.holders.first().map(Holder::of))
    };
    let waiting = Waiting {
        what: "leadership",
        name,
    };
    let mut options = coord::CampaignOptions::new();
    if let Some(delay) = args.lock_delay {
        options = options.lock_delay(delay);
    }
    let campaign = client.campaign_with(name, args.value, options);
    let leadership = match wait::wait(waiting, campaign, leader, args.timeout, stop, out).await? {
        Ok(leadership) => leadership,
        Err(signal) => return Ok(child::stopped_by(signal)),
    };
    let token = leadership.token();
    let event = json!({
        "event": "leading",
        "election": name,
        "value": args.value,
        "token": token.get(),
        "session": format!("{:x}", client.session_id()),
        "session_timeout_ms": client.session_timeout().as_millis() as u64,
    });
    let held = Held {
        what: "leadership",
        name,
    };
    let ran = if args.command.is_empty() {
        let _ = out.result(
            format!(
                "leading {name:?} as {:?} with fencing token {token}; Ctrl-C to resign",
                args.value
            ),
            event,
        );
        tokio::select! {
            () = leadership.lost() => Err(Failure::new(
                exit::LOST,
                "lost",
                format!("the leadership of {name:?} was lost (session expired or the entry was deleted)"),
            )),
            _ = stop.next() => Ok(ExitCode::SUCCESS),
        }
    } else {
        out.notice(format!("leading {name:?} with fencing token {token}"), event);
        let grace = crate::cmd::lock::checked_grace(client, args.grace, "leadership", out);
        let env = [
            ("COORD_FENCING_TOKEN", token.get().to_string()),
            ("COORD_ELECTION", name.to_owned()),
            ("COORD_FENCE_RESOURCE", name.to_owned()),
            ("COORD_FENCE", crate::cmd::lock::fence_header(name, token)),
            ("COORD_LEADER_VALUE", args.value.to_owned()),
        ];
        child::run_while_held(
            args.command,
            &env,
            held,
            async {
                leadership.lost().await;
                child::Ending::Lost
            },
            child::Stopping {
                grace,
                leftovers: child::Leftovers::Stop,
            },
            stop,
            out,
        )
        .await
    };
    if ran.is_ok() {
        if let Err(e) = leadership.resign().await {
            out.notice(
                format!("could not confirm resigning {name:?} ({e}); it ends with the session"),
                json!({"event": "resign_failed", "election": name, "message": e.to_string()}),
            );
        }
    }
    ran
}

fn leader_line(name: &str, leader: Option<&LeaderInfo>) -> (String, serde_json::Value) {
    match leader {
        Some(l) => (
            format!("{} (token {})", output::text(&l.value), l.token),
            output::with_value(
                json!({"election": name, "leader": true, "token": l.token.get()}),
                &l.value,
            ),
        ),
        None => ("no leader".to_owned(), json!({"election": name, "leader": false})),
    }
}

/// Prints the current leader; exit 3 when there is none.
pub async fn leader(client: &Client, name: &str, out: Out) -> Result<ExitCode, Failure> {
    let current = client.leader(name).await?;
    let (human, json) = leader_line(name, current.as_ref());
    let _ = out.result(human, json);
    Ok(match current {
        Some(_) => ExitCode::SUCCESS,
        None => ExitCode::from(exit::NOT_FOUND),
    })
}

/// Streams leader changes until stopped.
pub async fn observe(client: &Client, name: &str, stop: &mut Stop, out: Out) -> Result<ExitCode, Failure> {
    let events = client.observe(name).await?;
    super::follow(events, stop, |event| match event {
        LeaderEvent::Leader(l) => {
            let (human, json) = leader_line(name, l.as_ref());
            out.result(human, json)
        }
        LeaderEvent::Resync => out.result(
            "resync: leader changes may have been missed; the current leader follows",
            json!({"election": name, "event": "resync"}),
        ),
        other => out.result(
            format!("{other:?}"),
            json!({"election": name, "event": format!("{other:?}")}),
        ),
    })
    .await
}
