//! `coord`: locks, elections, shared configuration and service discovery from the shell,
//! the same on ZooKeeper, etcd and the in-memory backend.
//!
//! `coord lock NAME -- CMD…` runs a command while it holds a lock, with the fencing token
//! in `COORD_FENCING_TOKEN`, and stops it if the lock is lost. See `coord --help`.

mod child;
mod cmd;
mod exit;
mod guard;
mod output;
mod tree;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::cmd::args::{name_arg, prefix_arg};
use crate::exit::Failure;
use crate::output::Out;

/// Coordinate processes from the shell: locks with fencing tokens, leader election,
/// shared configuration and service discovery, on ZooKeeper, etcd or memory.
#[derive(Debug, Parser)]
#[command(
    name = "coord",
    version,
    after_help = AFTER_HELP,
    after_long_help = AFTER_HELP,
)]
pub struct Cli {
    /// Where to coordinate: zk://HOST:2181,…/NAMESPACE, etcd://HOST:2379,…/NAMESPACE
    /// (etcd+https://, zk+tls:// with TLS). mem:// is refused but by `coord session`: it
    /// lives in this one process.
    #[arg(
        long,
        env = "COORD_URL",
        global = true,
        value_name = "URL",
        hide_env_values = true
    )]
    url: Option<String>,

    /// Print one JSON object per line instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// The session timeout (ZooKeeper) or lease TTL (etcd) for this run, e.g. 5s: how
    /// long the servers keep coord's locks after it stops answering. Adds the backend's
    /// option to the URL (session_timeout=, lease_ttl=, session_ttl=).
    #[arg(long, global = true, value_parser = humantime::parse_duration, value_name = "DURATION")]
    session_timeout: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

const AFTER_HELP: &str = concat!(
    "\
Examples:
  export COORD_URL=etcd://127.0.0.1:2379/myapp
  coord lock nightly-report -- ./report.sh        # one at a time, token in $COORD_FENCING_TOKEN
  coord elect scheduler \"$(hostname)\" -- ./scheduler
  coord lock -n 3 gpu -- ./train.sh              # at most 3 at once
  coord config put feature/x on && coord config get feature/x
  coord queue push jobs 'resize 1.png' && coord queue take jobs
  coord inspect                                  # who holds what, who waits
  coord session                                  # health check: exit 0 when connected

Set RUST_LOG=coord=debug for the library's logs on standard error.

",
    exit::table!()
);

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a command while holding a lock, a semaphore lease or a read/write lock.
    ///
    /// Waits for the lock (showing who holds it meanwhile), runs the command with
    /// COORD_FENCING_TOKEN and COORD_LOCK in its environment (and, for coord's fencing
    /// gates, COORD_FENCE_RESOURCE, the lock's name, and COORD_FENCE, the value of an
    /// HTTP `coord-fence` header: for the lock and --write, not for leases or readers,
    /// who hold beside each other), releases the lock when it exits and exits with its
    /// status. With -n N, up to N commands hold the name at
    /// once (a semaphore's leases); with --read, any number of readers hold it together
    /// while no writer does, and --write holds it alone (a read/write lock).
    ///
    /// If the lock is lost while the command runs (session expired, entry deleted), the
    /// command gets SIGTERM at once and SIGKILL after --grace, and coord exits with 125.
    /// The default grace ends before the server can expire the session and grant the
    /// lock to anyone else: half the time between coord declaring the session lost and
    /// the earliest expiry (ZooKeeper: 15% of the session timeout, 1.5s at 10s; etcd:
    /// 5% of the lease TTL, 500ms at 10s). Pass the token to whatever the command
    /// writes, so that a stale holder's writes are rejected whatever the timing.
    #[command(after_help = "\
Examples:
  coord lock backups -- ./backup.sh
  coord lock --timeout 5m db-migrate -- ./migrate --fence \"$COORD_FENCING_TOKEN\"
  coord lock --try cron/cleanup -- ./cleanup || echo \"another host runs it\"
  coord lock -n 3 gpu -- ./train.sh                 # at most 3 at once
  coord lock --read schema -- ./report.sh           # readers share; a --write waits
  coord lock --write schema -- ./migrate.sh
  coord lock --revocable cache-warm -- ./warm.sh    # `coord revoke cache-warm` stops it

The command runs in a process group of its own, and SIGTERM and SIGKILL reach
everything it started (a script's children too) - unless coord runs in a terminal's
foreground, where the command stays in the terminal's job (it can read the terminal;
Ctrl-C and Ctrl-Z reach it) and the signals reach its own process only: a shell script
run that way should `exec` its last command or trap TERM to stop its children.
When the command exits on its own, whatever it left running (its group, and any
process it orphaned, also one that left the group) gets SIGTERM, then SIGKILL after
--grace, before the lock is released; with --wait-for-children the lock is kept until
all of it has exited instead (flock's behaviour). If coord itself is killed, all of
it - the command, its group and what left the group - gets SIGTERM at once and SIGKILL
after --grace, also while --wait-for-children waits. The command's
COORD_URL is coord's without user:password@: a nested coord reaches the same backend.
COORD_PID is coord's: `kill $COORD_PID` stops coord ($PPID is the guard between them).

A name is used in one mode by all its holders: a plain lock, -n N and --read/--write
keep their entries apart and would not exclude each other, so coord refuses (exit 4)
a mode other than the one the name is held or waited for in.")]
    Lock(cmd::lock::LockArgs),

    /// Ask the holder of a lock to let it go.
    ///
    /// Marks the holder's entry as Curator's `Revoker` does: a `coord lock --revocable`
    /// holder stops its command and releases; a holder that does not watch for requests
    /// keeps the lock. Prints the token of the holder asked; exit 3 when nobody holds
    /// the lock.
    #[command(
        after_help = "Examples:\n  coord revoke nightly-report\n  coord revoke --json nightly-report   # {\"lock\":…,\"token\":…}"
    )]
    Revoke {
        /// The lock's name.
        #[arg(value_parser = name_arg)]
        name: String,
    },

    /// Campaign for leadership; print it, or run a command while leading.
    ///
    /// Without a command, prints the leadership and holds it until interrupted
    /// (Ctrl-C, SIGTERM), then resigns. With one, runs it with COORD_FENCING_TOKEN,
    /// COORD_ELECTION, COORD_LEADER_VALUE, COORD_FENCE_RESOURCE and COORD_FENCE (as
    /// `coord lock` does) in its environment and resigns when it
    /// exits; a lost leadership stops it as `coord lock` does.
    #[command(after_help = "\
Examples:
  coord elect scheduler \"$(hostname)\" -- ./scheduler --active
  coord elect --json scheduler node-1               # prints {\"event\":\"leading\",…}
  coord leader scheduler                            # who leads now")]
    Elect(cmd::elect::ElectArgs),

    /// Print the current leader of an election (exit 3 when there is none).
    #[command(after_help = "Examples:\n  coord leader scheduler\n  coord leader --json scheduler")]
    Leader {
        /// The election's name.
        #[arg(value_parser = name_arg)]
        name: String,
    },

    /// Stream the leader of an election as it changes, "no leader" included.
    #[command(
        after_help = "Examples:\n  coord observe scheduler\n  coord observe --json scheduler | jq .value"
    )]
    Observe {
        /// The election's name.
        #[arg(value_parser = name_arg)]
        name: String,
    },

    /// Read, write and watch shared configuration keys.
    #[command(
        subcommand,
        after_help = "Examples:\n  coord config put feature/x on\n  coord config get feature/x\n  coord config watch feature"
    )]
    Config(cmd::config::ConfigCommand),

    /// List, watch and register service instances.
    #[command(
        subcommand,
        after_help = "Examples:\n  coord registry register api node-1 10.0.0.7:8080 -- ./server\n  coord registry list api\n  coord registry watch api"
    )]
    Registry(cmd::registry::RegistryCommand),

    /// A bounded FIFO queue of items: push, take (waiting), and its length.
    #[command(
        subcommand,
        after_help = "Examples:\n  coord queue push jobs \"resize 42.png\"\n  coord queue take jobs\n  coord queue len jobs"
    )]
    Queue(cmd::recipes::QueueCommand),

    /// A shared 64-bit counter: get, add, set (ASCII decimal at a config key).
    #[command(
        subcommand,
        after_help = "Examples:\n  coord counter add visits 1\n  coord counter get visits"
    )]
    Counter(cmd::recipes::CounterCommand),

    /// A barrier: raise it, remove it, or wait until it is removed.
    #[command(
        subcommand,
        after_help = "Examples:\n  coord barrier raise deploy/freeze\n  coord barrier wait deploy/freeze\n  coord barrier remove deploy/freeze"
    )]
    Barrier(cmd::recipes::BarrierCommand),

    /// Two-phase commits: read a transaction's decision.
    #[command(
        subcommand,
        alias = "txn",
        after_help = "Examples:\n  coord two-phase decision orders/4711"
    )]
    TwoPhase(cmd::recipes::TwoPhaseCommand),

    /// Show who holds what and who waits: locks, read/write locks, semaphores,
    /// elections, services, queues, double barriers and two-phase commits.
    ///
    /// Reads the layouts coord writes, and Curator's, kazoo's and Go's `concurrency`
    /// on the same paths (each entry says which made it). A snapshot for people: each
    /// kind is read separately. With --watch, prints again whenever it changes (read
    /// every second) until interrupted. --json prints one object per recipe, the same
    /// with --watch (which adds a line {"event":"snapshot",…} before each set); times
    /// are RFC 3339 ("since"), ages milliseconds ("age_ms"; ZooKeeper only: etcd keeps
    /// no creation time).
    #[command(after_help = "\
Examples:
  coord inspect                         # everything in the namespace
  coord inspect jobs                    # names at or below jobs/
  coord inspect --json | jq 'select(.kind == \"lock\") | .holders[0].token'
  coord inspect --json --watch | jq 'select(.kind == \"lock\") | .holders[0].token'
  coord inspect --watch scheduler")]
    Inspect {
        /// Only names at or below this prefix (whole segments).
        #[arg(default_value = "", value_parser = prefix_arg)]
        prefix: String,
        /// Print again whenever something changes, until interrupted.
        #[arg(long)]
        watch: bool,
    },

    /// Connect and report the backend, session and server: a health check.
    ///
    /// Exits 0 when connected, 69 when the servers cannot be reached, 77 for wrong
    /// credentials, 2 for a bad URL.
    #[command(after_help = "Examples:\n  coord session\n  coord --url zk://10.0.0.1:2181/app session --json")]
    Session,

    /// Print a shell completion script (needs no backend).
    #[command(after_help = "\
Examples:
  coord completions bash > ~/.local/share/bash-completion/completions/coord
  coord completions zsh > ~/.zfunc/_coord
  coord completions fish > ~/.config/fish/completions/coord.fish")]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == guard::ARG) {
        return guard::main(&args[2..]);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let out = Out::new(cli.json);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out.failure(&Failure::new(exit::FAILED, "io", format!("cannot start: {e}")));
            return ExitCode::from(exit::FAILED);
        }
    };
    let result = runtime.block_on(run(cli, out));
    // A name lookup still running on a blocking thread (the resolver's own timeout can
    // be longer than --timeout) must not hold up the exit.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(f) => {
            out.failure(&f);
            ExitCode::from(f.code)
        }
    }
}

/// Prints clap's error (help and version too) and exits as clap would; a command to run
/// given without `--` before it gets a hint.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    if e.kind() == ErrorKind::UnknownArgument {
        let args: Vec<OsString> = std::env::args_os().collect();
        // The subcommand as clap finds it, not any argument spelled `lock` (a key, a value).
        let runs_a_command = <Cli as clap::CommandFactory>::command()
            .ignore_errors(true)
            .try_get_matches_from(&args)
            .ok()
            .and_then(|m| m.subcommand_name().map(str::to_owned))
            .is_some_and(|c| c == "lock" || c == "elect" || c == "register");
        if runs_a_command && !args.iter().any(|a| a == "--") {
            eprintln!("\nhint: the command to run goes after `--`, e.g. coord lock NAME -- ./job.sh ARG…");
        }
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE))
}

/// What `mem://` means on the command line: nothing another process can see.
const MEM_REFUSED: &str = "mem:// lives inside this one coord process: a lock there excludes no \
other process, and whatever is written is gone when coord exits, so the command line refuses it \
(except for `coord session`). Use a ZooKeeper or etcd server: scripts/etcd-server start 2379 (or \
scripts/zk-server start 2181) in coord's repository starts one on loopback, then \
COORD_URL=etcd://127.0.0.1:2379/myapp (or zk://127.0.0.1:2181/myapp)";

async fn run(cli: Cli, out: Out) -> Result<ExitCode, Failure> {
    if let Command::Completions { shell } = cli.command {
        let mut command = <Cli as clap::CommandFactory>::command();
        // Into a buffer first: clap_complete panics on a failed write (a closed pipe).
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, "coord", &mut script);
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        return Ok(match stdout.write_all(&script).and_then(|()| stdout.flush()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(exit::BROKEN_PIPE),
        });
    }
    let url = cli.url.ok_or_else(|| {
        Failure::usage("no backend given: pass --url (e.g. etcd://127.0.0.1:2379/myapp) or set COORD_URL")
    })?;
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .unwrap_or_default();
    if scheme == "mem" && !matches!(cli.command, Command::Session) {
        return Err(Failure::usage(MEM_REFUSED));
    }
    // The command's URL: the user's (a nested coord may give its own --session-timeout).
    child::pass_url_to_commands(&url);
    let url = match cli.session_timeout {
        Some(timeout) => with_session_timeout(&url, &scheme, timeout)?,
        None => url,
    };
    if cli.json
        && matches!(
            cli.command,
            Command::Config(cmd::config::ConfigCommand::Get { raw: true, .. })
        )
    {
        return Err(Failure::usage(
            "--raw prints the bare value; it cannot be --json too",
        ));
    }
    // A command that cannot run is found before anything is taken for it.
    match &cli.command {
        Command::Lock(a) => child::check_runnable(&a.command)?,
        Command::Elect(a) => child::check_runnable(&a.command)?,
        Command::Registry(cmd::registry::RegistryCommand::Register { command, .. }) => {
            child::check_runnable(command)?
        }
        _ => {}
    }
    let mut stop = child::Stop::install()?;
    let started = std::time::Instant::now();
    let connecting = async {
        match connect_bound(&cli.command) {
            None => coord::connect(&url).await.map_err(Failure::connecting),
            Some(Bound::Try) => tokio::time::timeout(TRY_CONNECT, coord::connect(&url))
                .await
                .map_err(|_| {
                    Failure::new(
                        exit::UNAVAILABLE,
                        "unavailable",
                        format!(
                            "no session within {} (--try does not wait for the servers); nothing was taken",
                            humantime::format_duration(TRY_CONNECT)
                        ),
                    )
                })?
                .map_err(Failure::connecting),
            Some(Bound::Timeout(limit)) => tokio::time::timeout(limit, coord::connect(&url))
                .await
                .map_err(|_| {
                    Failure::new(
                        exit::TIMEOUT,
                        "timeout",
                        format!(
                            "no session within --timeout {}; nothing was taken",
                            humantime::format_duration(limit)
                        ),
                    )
                })?
                .map_err(Failure::connecting),
        }
    };
    let client = match child::unless_stopped(&mut stop, connecting).await {
        Ok(connected) => connected?,
        Err(signal) => return Ok(child::stopped_by(signal)),
    };
    let mut command = cli.command;
    spend(&mut command, started.elapsed());
    let result = match command {
        Command::Lock(a) => {
            let conflict = a.conflict_exit_code;
            let ran = cmd::lock::run(
                &client,
                cmd::lock::Lock {
                    name: &a.name,
                    mode: match (a.permits, a.read, a.write) {
                        (Some(n), _, _) => cmd::lock::Mode::Permits(n),
                        (None, true, _) => cmd::lock::Mode::Read,
                        (None, false, true) => cmd::lock::Mode::Write,
                        (None, false, false) => cmd::lock::Mode::Exclusive,
                    },
                    timeout: a.timeout,
                    try_once: a.try_once,
                    grace: a.grace,
                    revocable: a.revocable,
                    identity: a.identity.as_deref(),
                    wait_for_children: a.wait_for_children,
                    lock_delay: a.lock_delay,
                    command: &a.command,
                },
                &mut stop,
                out,
            )
            .await;
            // flock's -E: one status for "someone else has it" (held under --try, or
            // not granted within --timeout).
            match (ran, conflict) {
                (Err(mut f), Some(code)) if f.code == exit::BUSY || f.code == exit::TIMEOUT => {
                    f.code = code;
                    Err(f)
                }
                (ran, _) => ran,
            }
        }
        Command::Revoke { name } => one_shot(&mut stop, cmd::lock::revoke(&client, &name, out)).await,
        Command::Elect(a) => {
            cmd::elect::campaign(
                &client,
                cmd::elect::Campaign {
                    name: &a.name,
                    value: &a.value,
                    timeout: a.timeout,
                    grace: a.grace,
                    lock_delay: a.lock_delay,
                    command: &a.command,
                },
                &mut stop,
                out,
            )
            .await
        }
        Command::Leader { name } => one_shot(&mut stop, cmd::elect::leader(&client, &name, out)).await,
        Command::Observe { name } => cmd::elect::observe(&client, &name, &mut stop, out).await,
        Command::Config(cmd::config::ConfigCommand::Watch { prefix }) => {
            cmd::config::watch(&client, &prefix, &mut stop, out).await
        }
        Command::Config(c) => one_shot(&mut stop, cmd::config::run(&client, c, out)).await,
        Command::Registry(cmd::registry::RegistryCommand::List { service }) => {
            one_shot(&mut stop, cmd::registry::list(&client, &service, out)).await
        }
        Command::Registry(c) => cmd::registry::run(&client, c, &mut stop, out).await,
        Command::Queue(c) => cmd::recipes::queue(&client, c, &mut stop, out).await,
        Command::Counter(c) => one_shot(&mut stop, cmd::recipes::counter(&client, c, out)).await,
        Command::Barrier(c) => cmd::recipes::barrier(&client, c, &mut stop, out).await,
        Command::TwoPhase(c) => one_shot(&mut stop, cmd::recipes::two_phase(&client, c, out)).await,
        Command::Inspect { prefix, watch } => {
            cmd::inspect::run(&client, &prefix, watch, &mut stop, out).await
        }
        Command::Session => one_shot(&mut stop, cmd::session::run(&client, out)).await,
        Command::Completions { .. } => Ok(ExitCode::SUCCESS),
    };
    // Ends the session now: whatever it still holds is released at once, not by timeout
    // (bounded: if the servers do not answer, the session ends by timeout instead).
    let _ = child::unless_stopped(&mut stop, tokio::time::timeout(CLOSE_TIMEOUT, client.close())).await;
    result
}

/// `url` with `--session-timeout` as the backend's own option (refused when the URL
/// already sets it).
fn with_session_timeout(url: &str, scheme: &str, timeout: Duration) -> Result<String, Failure> {
    let option = match scheme {
        "zk" | "zk+tls" => "session_timeout",
        "etcd" | "etcd+https" => "lease_ttl",
        "mem" => "session_ttl",
        // An unknown scheme: connecting says so.
        _ => return Ok(url.to_owned()),
    };
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    if query.split('&').any(|kv| kv.split('=').next() == Some(option)) {
        return Err(Failure::usage(format!(
            "--session-timeout and the URL's {option}= both set the session timeout; give one"
        )));
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{separator}{option}={}ms", timeout.as_millis()))
}

/// How a command's own `--try` or `--timeout` bounds the connect too.
enum Bound {
    /// `--try`: at most [`TRY_CONNECT`].
    Try,
    /// `--timeout`: the connect counts toward it.
    Timeout(Duration),
}

/// How long `--try` waits for a session.
const TRY_CONNECT: Duration = Duration::from_secs(2);

fn connect_bound(command: &Command) -> Option<Bound> {
    let (timeout, try_once) = match command {
        Command::Lock(a) => (a.timeout, a.try_once),
        Command::Elect(a) => (a.timeout, false),
        Command::Queue(cmd::recipes::QueueCommand::Take {
            timeout, try_once, ..
        }) => (*timeout, *try_once),
        Command::Barrier(cmd::recipes::BarrierCommand::Wait { timeout, .. }) => (*timeout, false),
        _ => (None, false),
    };
    match (try_once, timeout) {
        (true, _) => Some(Bound::Try),
        (false, Some(limit)) => Some(Bound::Timeout(limit)),
        (false, None) => None,
    }
}

/// Takes what the connect took off the command's `--timeout`, which bounds both.
fn spend(command: &mut Command, elapsed: Duration) {
    let timeout = match command {
        Command::Lock(a) => &mut a.timeout,
        Command::Elect(a) => &mut a.timeout,
        Command::Queue(cmd::recipes::QueueCommand::Take { timeout, .. }) => timeout,
        Command::Barrier(cmd::recipes::BarrierCommand::Wait { timeout, .. }) => timeout,
        _ => return,
    };
    if let Some(t) = timeout {
        output::remember_timeout(*t);
        // Never zero: that is a usage error of its own.
        *t = t.saturating_sub(elapsed).max(Duration::from_millis(1));
    }
}

/// How long closing the session may take before coord exits anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A command that holds nothing: a stop signal ends it at once (exit 128+N).
async fn one_shot(
    stop: &mut child::Stop,
    command: impl std::future::Future<Output = Result<ExitCode, Failure>>,
) -> Result<ExitCode, Failure> {
    child::unless_stopped(stop, command)
        .await
        .unwrap_or_else(|signal| Ok(child::stopped_by(signal)))
}
