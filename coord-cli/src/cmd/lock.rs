//! `coord lock NAME -- CMD…`.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use coord::{Client, Lock as _};
use serde_json::json;

use crate::child::{self, Held, Stop};
use crate::cmd::wait::{self, Holder, Waiting};
use crate::exit::{self, Failure};
use crate::output::Out;

/// The arguments of `coord lock`.
pub struct Lock<'a> {
    pub name: &'a str,
    pub timeout: Option<Duration>,
    pub try_once: bool,
    pub grace: Duration,
    pub command: &'a [OsString],
}

/// Takes the lock, runs the command while holding it, and releases it.
pub async fn run(client: &Client, args: Lock<'_>, stop: &mut Stop, out: Out) -> Result<ExitCode, Failure> {
    let name = args.name;
    let me = super::identity();
    let holder = || async {
        Ok(client.holder(name).await?.map(|h| Holder {
            token: h.token,
            who: h.holder,
        }))
    };
    let guard = if args.try_once {
        match client.try_lock_as(name, me).await? {
            Some(guard) => guard,
            None => {
                let held = match holder().await {
                    Ok(Some(h)) => format!(" by {}", h.describe()),
                    _ => String::new(),
                };
                return Err(Failure::new(
                    exit::BUSY,
                    "busy",
                    format!("lock {name:?} is held{held}; try again later, or wait without --try"),
                ));
            }
        }
    } else {
        let waiting = Waiting { what: "lock", name };
        match wait::wait(waiting, client.lock_as(name, me), holder, args.timeout, stop, out).await? {
            Ok(guard) => guard,
            Err(signal) => return Ok(child::stopped_by(signal)),
        }
    };
    let token = guard.token();
    out.notice(
        format!("holding lock {name:?} with fencing token {token}"),
        json!({
            "event": "acquired",
            "lock": name,
            "token": token.get(),
            "session": format!("{:x}", client.session_id()),
        }),
    );
    let env = [
        ("COORD_FENCING_TOKEN", token.get().to_string()),
        ("COORD_LOCK", name.to_owned()),
    ];
    let held = Held { what: "lock", name };
    let ran = child::run_while_held(args.command, &env, held, guard.lost(), args.grace, stop, out).await;
    if ran.is_ok() {
        if let Err(e) = guard.release().await {
            out.notice(
                format!("could not confirm the release of lock {name:?} ({e}); it ends with the session"),
                json!({"event": "release_failed", "lock": name, "message": e.to_string()}),
            );
        }
    }
    ran
}
