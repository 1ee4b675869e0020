//! `coord lock [-n N | --read | --write] NAME -- CMD…`: a lock, a semaphore's lease, or
//! either side of a read/write lock, held while a command runs.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use coord::Granted as _;
use coord::{Client, FencingToken, Lease, LockGuard, LockOptions, ReadGuard, RecipeKind, WriteGuard};
use serde_json::json;

use crate::child::{self, Held, Stop};
use crate::cmd::args::*;
use crate::cmd::wait::{self, Holder, Waiting};
use crate::exit::{self, Failure};
use crate::output::Out;
use coord::Lock as _;

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// The lock's name: segments of [A-Za-z0-9._-] separated by '/'.
    #[arg(value_parser = name_arg)]
    pub(crate) name: String,
    /// Let up to N commands hold the name at once (a semaphore with N permits; every
    /// holder must use the same N).
    #[arg(short = 'n', long = "permits", value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=i64::from(coord::MAX_PERMITS)), conflicts_with_all = ["read", "write"])]
    pub(crate) permits: Option<u32>,
    /// Hold the read side of a read/write lock: shared with other readers, excluded by
    /// a writer.
    #[arg(long, conflicts_with = "write")]
    pub(crate) read: bool,
    /// Hold the write side of a read/write lock: alone, excluding readers.
    #[arg(long)]
    pub(crate) write: bool,
    /// Give up waiting after this long (e.g. 30s, 5m); exit 124.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub(crate) timeout: Option<Duration>,
    /// Do not wait: exit 75 at once if the lock is held.
    #[arg(long = "try", conflicts_with = "timeout")]
    pub(crate) try_once: bool,
    /// After SIGTERM on a lost lock, wait this long before SIGKILL. The default is safe
    /// (the command is gone before anyone else can be granted the lock); a longer one
    /// lets a command that ignores SIGTERM run on beside the next holder.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub(crate) grace: Option<Duration>,
    /// Let go when asked: `coord revoke NAME` (or Curator's `Revoker`) stops the command
    /// as a lost lock does (SIGTERM, SIGKILL after --grace), releases the lock, and coord
    /// exits 123.
    #[arg(long, conflicts_with_all = ["permits", "read", "write"])]
    pub(crate) revocable: bool,
    /// When the command exits, keep the lock until everything it started has exited
    /// too (flock's behaviour), instead of stopping what it left running (SIGTERM,
    /// SIGKILL after --grace) and releasing at once.
    #[arg(long)]
    pub(crate) wait_for_children: bool,
    /// What the lock's entry names as its holder, as `coord inspect` and waiters show it
    /// (default: HOST:PID).
    #[arg(long, value_name = "ID", value_parser = identity_arg)]
    pub(crate) identity: Option<String>,
    /// Lock-delay: when the holder ahead vanishes without releasing (its session
    /// expired: a crash, a pause, a partition; or its entry was deleted), take the lock
    /// only this long after seeing it go (e.g. 10s), so what it still had in flight can
    /// land first; a release hands over at once. Give every holder of the name the same
    /// delay. `coord inspect` shows who holds off, until when. At most 1h.
    #[arg(long, value_parser = lock_delay_arg, value_name = "DURATION")]
    pub(crate) lock_delay: Option<Duration>,
    /// The exit status when --try finds the lock held or --timeout passes (default 75
    /// and 124), as flock's -E.
    #[arg(long, short = 'E', value_name = "CODE")]
    pub(crate) conflict_exit_code: Option<u8>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Which grant the command runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The lock: one holder at a time.
    Exclusive,
    /// A lease of a semaphore with this many permits.
    Permits(u32),
    /// The shared (reading) side of a read/write lock.
    Read,
    /// The exclusive (writing) side of a read/write lock.
    Write,
}

impl Mode {
    /// What is held, for messages and `--json`.
    fn what(self) -> &'static str {
        match self {
            Mode::Exclusive => "lock",
            Mode::Permits(_) => "semaphore lease",
            Mode::Read => "read lock",
            Mode::Write => "write lock",
        }
    }
}

/// The arguments of `coord lock`.
pub struct Lock<'a> {
    pub name: &'a str,
    pub mode: Mode,
    pub timeout: Option<Duration>,
    pub try_once: bool,
    pub grace: Option<Duration>,
    /// Stop the command and release when someone asks (`coord revoke`).
    pub revocable: bool,
    /// What the entry says holds it (default `host:pid`).
    pub identity: Option<&'a str>,
    /// Hold until what the command started has exited too, instead of stopping it.
    pub wait_for_children: bool,
    /// Hold off this long after a holder ahead vanished (`--lock-delay`).
    pub lock_delay: Option<Duration>,
    pub command: &'a [OsString],
}

/// The grant, whichever recipe made it.
enum Grant {
    Lock(LockGuard),
    Lease(Lease),
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Grant {
    fn token(&self) -> FencingToken {
        match self {
            Grant::Lock(g) => g.token(),
            Grant::Lease(g) => g.token(),
            Grant::Read(g) => g.token(),
            Grant::Write(g) => g.token(),
        }
    }

    async fn lost(&self) {
        match self {
            Grant::Lock(g) => g.lost().await,
            Grant::Lease(g) => g.lost().await,
            Grant::Read(g) => g.lost().await,
            Grant::Write(g) => g.lost().await,
        }
    }

    /// Resolves when the grant is lost, or — with `revocable` — someone asked for it.
    async fn ended(&self, revocable: bool) -> child::Ending {
        let lost = async {
            self.lost().await;
            child::Ending::Lost
        };
        let revoked = async {
            match self {
                Grant::Lock(g) if revocable => g.revocation_requested().await,
                _ => std::future::pending().await,
            }
            child::Ending::Revoked
        };
        tokio::select! {
            biased;
            ending = lost => ending,
            ending = revoked => ending,
        }
    }

    async fn release(self) -> coord::Result<()> {
        match self {
            Grant::Lock(g) => g.release().await,
            Grant::Lease(g) => g.release().await,
            Grant::Read(g) => g.release().await,
            Grant::Write(g) => g.release().await,
        }
    }
}

/// Takes the grant (waiting, or once with `--try`), keeping lock-delay `delay`; `None`
/// when `--try` found it taken.
async fn take(
    client: &Client,
    name: &str,
    mode: Mode,
    wait: bool,
    me: &str,
    delay: Option<Duration>,
) -> coord::Result<Option<Grant>> {
    let delay = delay.unwrap_or_default();
    // Who holds and the lock-delay, one way for every mode.
    let options = LockOptions::new().holder(me).lock_delay(delay);
    let semaphore = |n| client.semaphore(name, n)?.with_options(options.clone());
    let rw = || client.rw_lock(name)?.with_options(options.clone());
    Ok(match (mode, wait) {
        (Mode::Exclusive, true) => Some(Grant::Lock(client.lock_with(name, options).await?)),
        (Mode::Exclusive, false) => client.try_lock_with(name, options).await?.map(Grant::Lock),
        (Mode::Permits(n), true) => Some(Grant::Lease(semaphore(n)?.acquire().await?)),
        (Mode::Permits(n), false) => semaphore(n)?.try_acquire().await?.map(Grant::Lease),
        (Mode::Read, true) => Some(Grant::Read(rw()?.read().await?)),
        (Mode::Read, false) => rw()?.try_read().await?.map(Grant::Read),
        (Mode::Write, true) => Some(Grant::Write(rw()?.write().await?)),
        (Mode::Write, false) => rw()?.try_write().await?.map(Grant::Write),
    })
}

/// Who holds it now, as the progress line shows it.
async fn holders(client: &Client, name: &str, mode: Mode) -> coord::Result<Option<Holder>> {
    match mode {
        Mode::Exclusive => {
            let view = client.inspect_one(RecipeKind::Lock, name).await?;
            Ok(view.holders.first().map(Holder::of))
        }
        Mode::Permits(n) => {
            let view = client.inspect_one(RecipeKind::Semaphore, name).await?;
            Ok(Holder::several(&view.holders, &format!("of {n} leases"), false))
        }
        Mode::Read | Mode::Write => {
            let view = client.inspect_one(RecipeKind::RwLock, name).await?;
            let what = match view.holders.first().map(|p| p.role) {
                Some("write") => "writer",
                _ => "readers",
            };
            Ok(Holder::several(&view.holders, what, true))
        }
    }
}

/// The recipe each mode keeps its entries in: the modes of different recipes share no
/// layout, so on one name they would not exclude each other.
fn kind(mode: Mode) -> RecipeKind {
    match mode {
        Mode::Exclusive => RecipeKind::Lock,
        Mode::Permits(_) => RecipeKind::Semaphore,
        Mode::Read | Mode::Write => RecipeKind::RwLock,
    }
}

/// The flag that takes `kind`, for messages.
fn flag(kind: RecipeKind) -> &'static str {
    match kind {
        RecipeKind::Semaphore => "-n N",
        RecipeKind::RwLock => "--read/--write",
        _ => "no mode flag",
    }
}

/// Refuses `name` in `mode` while it is in use (held or waited for) in a mode of
/// another recipe: `coord lock NAME`, `-n N NAME` and `--read`/`--write NAME` keep their
/// entries in three layouts, which would not exclude each other.
async fn refuse_other_modes(client: &Client, name: &str, mode: Mode) -> Result<(), Failure> {
    for other in [RecipeKind::Lock, RecipeKind::Semaphore, RecipeKind::RwLock] {
        if other == kind(mode) {
            continue;
        }
        let view = client.inspect_one(other, name).await?;
        if !view.holders.is_empty() || !view.waiters.is_empty() {
            return Err(Failure::new(
                exit::CONFLICT,
                "conflict",
                format!(
                    "{name:?} is in use as a {} ({} held, {} waiting, taken with {}), and a {} would not exclude it: \
                     use the same mode as every other holder of {name:?}, or another name",
                    match other {
                        RecipeKind::Semaphore => "semaphore",
                        RecipeKind::RwLock => "read/write lock",
                        _ => "lock",
                    },
                    view.holders.len(),
                    view.waiters.len(),
                    flag(other),
                    mode.what()
                ),
            ));
        }
    }
    Ok(())
}

/// The default `--grace`: half the time between coord learning that its session is lost
/// and the earliest moment the server can expire it, so that the command is killed
/// before anyone else can be granted what it held.
pub fn default_grace(client: &Client) -> Duration {
    client.loss_margin() / 2
}

/// Takes the grant, runs the command while holding it, and releases it.
pub async fn run(client: &Client, args: Lock<'_>, stop: &mut Stop, out: Out) -> Result<ExitCode, Failure> {
    let (name, mode) = (args.name, args.mode);
    let me = args.identity.map_or_else(super::identity, str::to_owned);
    let grace = checked_grace(client, args.grace, mode.what(), out);
    refuse_other_modes(client, name, mode).await?;
    let grant = if args.try_once {
        match take(client, name, mode, false, &me, args.lock_delay).await? {
            Some(grant) => grant,
            None => {
                let held = match holders(client, name, mode).await {
                    Ok(Some(h)) => format!(" by {}", h.describe()),
                    _ => String::new(),
                };
                return Err(Failure::new(
                    exit::BUSY,
                    "busy",
                    format!(
                        "{} {name:?} is held{held}; try again later, or wait without --try",
                        mode.what()
                    ),
                ));
            }
        }
    } else {
        let waiting = Waiting {
            what: mode.what(),
            name,
        };
        let acquire = async {
            take(client, name, mode, true, &me, args.lock_delay)
                .await?
                .ok_or_else(no_grant)
        };
        match wait::wait(
            waiting,
            acquire,
            || holders(client, name, mode),
            args.timeout,
            stop,
            out,
        )
        .await?
        {
            Ok(grant) => grant,
            Err(signal) => return Ok(child::stopped_by(signal)),
        }
    };
    // Checked again now that this grant's entry exists: of two started at once in
    // different modes, at least one sees the other (both may, and both refuse).
    if let Err(refused) = refuse_other_modes(client, name, mode).await {
        let _ = grant.release().await;
        return Err(refused);
    }
    let token = grant.token();
    let mut event = json!({
        "event": "acquired",
        "lock": name,
        "what": mode.what(),
        "token": token.get(),
        "session": format!("{:x}", client.session_id()),
        "session_timeout_ms": client.session_timeout().as_millis() as u64,
    });
    if let Mode::Permits(n) = mode {
        event["permits"] = json!(n);
    }
    out.notice(
        format!("holding {} {name:?} with fencing token {token}", mode.what()),
        event,
    );
    let mut env = vec![
        ("COORD_FENCING_TOKEN", token.get().to_string()),
        ("COORD_LOCK", name.to_owned()),
    ];
    // A gate admits one holder's token at a time: the highest refuses the others. Only
    // exclusive holders get what a gate reads; leases and readers hold beside each
    // other, and a gate would fence the older ones while they still hold.
    if matches!(mode, Mode::Exclusive | Mode::Write) {
        env.push(("COORD_FENCE_RESOURCE", name.to_owned()));
        env.push(("COORD_FENCE", fence_header(name, token)));
    }
    let held = Held {
        what: mode.what(),
        name,
    };
    let ran = child::run_while_held(
        args.command,
        &env,
        held,
        grant.ended(args.revocable),
        child::Stopping {
            grace,
            leftovers: if args.wait_for_children {
                child::Leftovers::WaitFor
            } else {
                child::Leftovers::Stop
            },
        },
        stop,
        out,
    )
    .await;
    if ran.as_ref().is_ok() || ran.as_ref().is_err_and(|f| f.code == exit::REVOKED) {
        if let Err(e) = grant.release().await {
            out.notice(
                format!(
                    "could not confirm the release of {} {name:?} ({e}); it ends with the session",
                    mode.what()
                ),
                json!({"event": "release_failed", "lock": name, "message": e.to_string()}),
            );
        }
    }
    ran
}

/// `--grace`, or its safe default; a grace past the safe margin is the user's choice,
/// said once on standard error.
pub fn checked_grace(client: &Client, grace: Option<Duration>, what: &str, out: Out) -> Duration {
    let margin = client.loss_margin();
    match grace {
        None => default_grace(client),
        Some(g) => {
            if g >= margin {
                out.notice(
                    format!(
                        "--grace {} is longer than the {} between a lost session and its expiry on the server: \
                         a command that ignores SIGTERM may run on while the next holder of the {what} works",
                        humantime::format_duration(g),
                        humantime::format_duration(margin),
                    ),
                    json!({"event": "unsafe_grace", "grace_ms": g.as_millis() as u64, "margin_ms": margin.as_millis() as u64}),
                );
            }
            g
        }
    }
}

fn no_grant() -> coord::Error {
    coord::Error::new(
        coord::ErrorKind::Unavailable,
        "the wait ended without a grant; try again",
    )
}

/// `coord revoke NAME`: asks the lock's holder to let go.
pub async fn revoke(client: &Client, name: &str, out: Out) -> Result<ExitCode, Failure> {
    match client.revoke_lock(name).await? {
        Some(token) => {
            let _ = out.result(
                format!("asked the holder of lock {name:?} (token {token}) to let go"),
                json!({"lock": name, "token": token.get()}),
            );
            Ok(ExitCode::SUCCESS)
        }
        None => Err(Failure::new(
            exit::NOT_FOUND,
            "not found",
            format!("nobody holds lock {name:?}"),
        )),
    }
}

/// The `coord-fence` header's value for `name`'s grant with `token`, as coord's HTTP
/// gate reads it (`resource=NAME; token=N`): exported to commands as `$COORD_FENCE`.
pub(crate) fn fence_header(name: &str, token: coord::FencingToken) -> String {
    format!("resource={name}; token={token}")
}
