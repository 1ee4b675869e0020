//! `coord-testkit`: start ZooKeeper and etcd servers or clusters on loopback for tests
//! run by other processes, and inject member faults into them.
//!
//! ```text
//! coord-testkit start zk --members 3 --dir DIR [--tls CERTS] [--extra LINE]… [--server-defaults]
//!     starts the members, prints `host:port,host:port,…` and leaves them running
//! coord-testkit start postgres --dir DIR [--extra SETTING=VALUE]…
//!     starts PostgreSQL, prints its URL `postgres://coord@127.0.0.1:PORT/postgres`
//! coord-testkit member DIR I kill|stop|start|restart|pause|resume [--for SECONDS]
//! coord-testkit leader DIR     prints the leader member's index
//! coord-testkit stop DIR       kills every member
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use coord_testkit::{Cluster, ClusterOptions, Kind};

#[derive(Parser)]
#[command(
    about = "Start ZooKeeper or etcd servers and clusters (or PostgreSQL) on loopback for tests, and inject member faults"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a server (1 member) or cluster and leave it running; print its members.
    Start {
        /// zk, etcd or postgres.
        kind: Kind,
        /// How many members.
        #[arg(long, default_value_t = 1)]
        members: usize,
        /// The cluster's directory (cleared first).
        #[arg(long)]
        dir: PathBuf,
        /// Serve clients over TLS with the certificates in this directory.
        #[arg(long)]
        tls: Option<PathBuf>,
        /// Extra zoo.cfg line (ZooKeeper), argument (etcd) or setting=value (PostgreSQL);
        /// repeatable.
        #[arg(long, allow_hyphen_values = true)]
        extra: Vec<String>,
        /// The first member's client port (default: a free one).
        #[arg(long)]
        port: Option<u16>,
        /// Run with the server's own default settings, as a deployment does (ZooKeeper:
        /// 2 s ticks, so sessions of 4 s at least, and empty containers swept once a
        /// minute; etcd: 100 ms heartbeats, 1 s election timeout), not the short ones
        /// tests use.
        #[arg(long)]
        server_defaults: bool,
    },
    /// Act on one member.
    Member {
        /// The cluster's directory.
        dir: PathBuf,
        /// The member's index (0-based).
        index: usize,
        /// What to do.
        action: Action,
        /// With `pause`: resume after this many seconds (from a detached process).
        #[arg(long = "for")]
        seconds: Option<f64>,
    },
    /// Print the index of the current leader member.
    Leader {
        /// The cluster's directory.
        dir: PathBuf,
    },
    /// Kill every member.
    Stop {
        /// The cluster's directory.
        dir: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Action {
    Kill,
    Stop,
    Start,
    Restart,
    Pause,
    Resume,
}

fn run(cli: Cli) -> Result<(), coord_testkit::Error> {
    match cli.command {
        Cmd::Start {
            kind,
            members,
            dir,
            tls,
            extra,
            port,
            server_defaults,
        } => {
            let cluster = Cluster::start(ClusterOptions {
                dir: Some(dir),
                tls,
                extra,
                port,
                server_defaults,
                ..ClusterOptions::new(kind, members)
            })?;
            if cluster.kind() == Kind::Postgres {
                println!("{}", cluster.url(""));
            } else {
                println!("{}", cluster.hosts());
            }
            cluster.detach();
        }
        Cmd::Member {
            dir,
            index,
            action,
            seconds,
        } => {
            let cluster = Cluster::attach(dir)?;
            match action {
                Action::Kill => cluster.kill(index)?,
                Action::Stop => cluster.stop(index)?,
                Action::Start => cluster.restart_member(index)?,
                Action::Restart => cluster.restart(index)?,
                Action::Pause => match seconds {
                    Some(s) => cluster.pause_for(index, Duration::from_secs_f64(s.max(0.0)))?,
                    None => cluster.pause(index)?,
                },
                Action::Resume => cluster.resume(index)?,
            }
        }
        Cmd::Leader { dir } => {
            let cluster = Cluster::attach(dir)?;
            println!("{}", cluster.wait_leader(Duration::from_secs(10))?);
        }
        Cmd::Stop { dir } => Cluster::attach(dir)?.shutdown()?,
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coord-testkit: {e}");
            ExitCode::FAILURE
        }
    }
}
