//! `coord inspect [PREFIX] [--watch]`: who holds what, and who waits, under a namespace.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use coord::{Client, Participant, RecipeKind, RecipeView};
use serde_json::{Value, json};

use crate::child::{self, Stop};
use crate::exit::{self, Failure};
use crate::output::{self, Out};

/// How often `--watch` reads again.
const REFRESH: Duration = Duration::from_secs(1);

/// Prints the recipes under `prefix` once, or with `watch` again whenever they change.
pub async fn run(
    client: &Client,
    prefix: &str,
    watch: bool,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    let mut shown: Option<Vec<RecipeView>> = None;
    loop {
        let views = match child::unless_stopped(stop, client.inspect(prefix)).await {
            Ok(views) => views?,
            Err(signal) => {
                return Ok(if watch {
                    ExitCode::SUCCESS
                } else {
                    child::stopped_by(signal)
                });
            }
        };
        if shown.as_ref() != Some(&views) {
            if print(client, &views, watch, out).is_err() {
                return Ok(ExitCode::from(exit::BROKEN_PIPE));
            }
            shown = Some(views);
        }
        if !watch {
            return Ok(ExitCode::SUCCESS);
        }
        if child::unless_stopped(stop, tokio::time::sleep(REFRESH))
            .await
            .is_err()
        {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

fn print(client: &Client, views: &[RecipeView], watch: bool, out: Out) -> std::io::Result<()> {
    if out.json() {
        // The same recipe objects with and without --watch; --watch puts a snapshot line
        // (no "kind") before each set.
        if watch {
            out.result(
                "",
                json!({
                    "event": "snapshot",
                    "at": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                    "recipes": views.len(),
                }),
            )?;
        }
        return views.iter().try_for_each(|v| out.result("", to_json(v)));
    }
    let mut text = String::new();
    if watch {
        text.push_str(&format!(
            "-- {} {}\n",
            client.kind(),
            humantime::format_rfc3339_seconds(SystemTime::now())
        ));
    }
    if views.is_empty() {
        text.push_str("nothing held, waited for or queued\n");
    }
    for v in views {
        text.push_str(&describe(v));
    }
    out.result(text.trim_end(), Value::Null)
}

/// A recipe as text: a heading, then one line per holder and waiter.
fn describe(v: &RecipeView) -> String {
    let mut heading = format!("{} {}", v.kind, v.name);
    match v.kind {
        RecipeKind::Semaphore => {
            let permits = v.permits.map_or_else(|| "?".to_owned(), |n| n.to_string());
            heading.push_str(&format!("  ({} of {permits} leases held)", v.holders.len()));
        }
        RecipeKind::Queue => {
            heading.push_str(&format!("  ({} items)", v.depth.unwrap_or(0)));
        }
        RecipeKind::TwoPhaseCommit => {
            let decision = v
                .decision
                .as_deref()
                .map_or_else(|| "undecided".to_owned(), output::text);
            heading.push_str(&format!("  ({decision})"));
        }
        _ => {}
    }
    let mut text = format!("{heading}\n");
    let (holding, waiting) = labels(v.kind);
    for p in &v.holders {
        text.push_str(&format!("  {holding:<9} {}\n", participant_line(p)));
    }
    for p in &v.waiters {
        text.push_str(&format!("  {waiting:<9} {}", participant_line(p)));
        if let Some(delay) = v.lock_delay.as_ref().filter(|d| d.waiter == p.path) {
            let left = delay.until.duration_since(SystemTime::now()).unwrap_or_default();
            text.push_str(&format!(
                "  holding off (lock-delay) until {} ({} from now): {} went without a release",
                output::time(delay.until, false),
                output::ago(left),
                delay.vanished
            ));
        }
        text.push('\n');
    }
    text
}

/// What holders and waiters are called for a kind.
fn labels(kind: RecipeKind) -> (&'static str, &'static str) {
    match kind {
        RecipeKind::Election => ("leader", "candidate"),
        RecipeKind::Service => ("instance", ""),
        RecipeKind::Queue => ("taking", "waiting"),
        RecipeKind::DoubleBarrier => ("member", ""),
        RecipeKind::TwoPhaseCommit => ("entry", ""),
        _ => ("holder", "waiting"),
    }
}

fn participant_line(p: &Participant) -> String {
    let mut line = format!("token {}", p.token);
    if !p.role.is_empty() {
        line.push_str(&format!("  {}", p.role));
    }
    if p.role == "lease" {
        // A lease's value is the semaphore's permit count, shown in the heading.
    } else if p.value == REVOKE {
        line.push_str("  (asked to let go: coord revoke; its identity was overwritten)");
    } else if p.value.is_empty() {
        line.push_str("  (no identity)");
    } else {
        line.push_str(&format!("  {}", output::text(&p.value)));
    }
    line.push_str(&format!("  session {:x}  {}", p.session, origin_label(p.origin)));
    if let Some(age) = p.since.and_then(|t| SystemTime::now().duration_since(t).ok()) {
        line.push_str(&format!("  since {} ago", output::ago(age)));
    }
    line
}

fn origin_label(origin: coord::Origin) -> &'static str {
    match origin {
        coord::Origin::Coord => "coord",
        coord::Origin::Curator => "Curator",
        coord::Origin::Kazoo => "kazoo",
        coord::Origin::Concurrency => "etcd concurrency layout (coord or Go)",
        _ => "unknown layout",
    }
}

fn to_json(v: &RecipeView) -> Value {
    let people = |ps: &[Participant]| -> Vec<Value> { ps.iter().map(participant_json).collect() };
    let mut object = json!({
        "kind": v.kind.as_str(),
        "name": v.name,
        "holders": people(&v.holders),
        "waiters": people(&v.waiters),
    });
    if let Some(n) = v.permits {
        object["permits"] = json!(n);
    }
    if let Some(n) = v.depth {
        object["depth"] = json!(n);
    }
    if let Some(plan) = &v.plan {
        object["plan"] = json!(output::text(plan));
    }
    if let Some(decision) = &v.decision {
        object["decision"] = json!(output::text(decision));
    }
    if let Some(delay) = &v.lock_delay {
        object["lock_delay"] = json!({
            "waiter": delay.waiter,
            "vanished": delay.vanished,
            "until": output::time(delay.until, true),
        });
    }
    object
}

fn participant_json(p: &Participant) -> Value {
    let mut object = json!({
        "token": p.token.get(),
        "session": format!("{:x}", p.session),
        "origin": p.origin.as_str(),
        "path": p.path,
    });
    if !p.role.is_empty() {
        object["role"] = json!(p.role);
    }
    if let Some(since) = p.since {
        // A time as a time, an age as a duration.
        object["since"] = json!(humantime::format_rfc3339_millis(since).to_string());
        if let Ok(age) = SystemTime::now().duration_since(since) {
            object["age_ms"] = json!(age.as_millis() as u64);
        }
    }
    if p.value == REVOKE {
        object["revoke_requested"] = json!(true);
    }
    output::with_value(object, &p.value)
}

/// What a revocation request writes into the holder's entry (Curator's `Revoker`).
const REVOKE: &[u8] = b"__REVOKE__";
