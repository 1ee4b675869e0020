//! `coord-bench`: coord's lock, election, registry and config paths measured beside the
//! raw round trips of the same client libraries and the Rust clients' own recipes.
//!
//! ```text
//! cargo run --release -p coord-bench -- lock --url zk://127.0.0.1:2181/bench
//! cargo run --release -p coord-bench -- lock-contended --clients 4 --url etcd://127.0.0.1:2379/bench
//! cargo run --release -p coord-bench -- report            # what scripts/bench runs
//! ```
//!
//! Every scenario prints `RESULT scenario=… backend=… subject=… key=value …` lines and
//! a markdown table. Ratios (`x_<subject>`) are coord's figure over that subject's, from
//! the same run.

mod config;
mod election;
mod fence;
mod lock;
mod measure;
mod registry;
mod report;
mod scale;
mod soak;
mod target;
mod tenfold;
mod waiters;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Counts live heap bytes, for the exact memory a queued contender keeps.
#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// Bytes on the heap now.
pub fn heap_bytes() -> usize {
    HEAP.allocated()
}

use crate::target::Target;

#[derive(Parser)]
#[command(
    version,
    about = "coord's benchmarks, side by side with the raw backends and the Rust clients' recipes"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(clap::Args, Clone)]
struct On {
    /// The server: mem://ns, zk://host:port[,…]/ns or etcd://host:port[,…]/ns.
    #[arg(long, env = "COORD_URL", default_value = "mem://coord-bench")]
    url: String,
    /// Seconds measured per subject.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

#[derive(Subcommand)]
enum Scenario {
    /// Uncontended lock cycles (lock, release) beside the raw floor and the clients' recipes.
    Lock {
        #[command(flatten)]
        on: On,
    },
    /// C clients contending for one lock: grants/s, hand-off latency, requests and wake-ups per grant.
    LockContended {
        #[command(flatten)]
        on: On,
        /// Contending clients (each its own connection).
        #[arg(long, default_value_t = 4)]
        clients: usize,
    },
    /// N clients queued on one lock, then passed through: hand-off cost and memory per queued contender.
    Waiters {
        #[command(flatten)]
        on: On,
        /// Queued clients (each its own connection).
        #[arg(long, default_value_t = 100)]
        waiters: usize,
    },
    /// Leadership hand-over after resign (follower just queued, and after 150 ms) and after the leader's session ends.
    Election {
        #[command(flatten)]
        on: On,
        /// Hand-overs timed per mode.
        #[arg(long, default_value_t = 30)]
        rounds: usize,
    },
    /// Instances registered by their own clients: until a watcher has seen all; 10% killed: until it sees the rest.
    Registry {
        #[command(flatten)]
        on: On,
        /// Instances (each its own client).
        #[arg(long, default_value_t = 1000)]
        instances: usize,
    },
    /// Config put/get/compare-and-set per second beside raw; watch delivery latency.
    Config {
        #[command(flatten)]
        on: On,
        /// Watch deliveries timed.
        #[arg(long, default_value_t = 300)]
        deliveries: usize,
    },
    /// One client, 64 tasks locking and releasing distinct names, beside the raw floor over one session.
    ManyNames {
        #[command(flatten)]
        on: On,
        /// Distinct lock names.
        #[arg(long, default_value_t = 10_000)]
        names: usize,
    },
    /// A config cache under a steady write rate on one prefix: delivery, peak heap, final state.
    Storm {
        #[command(flatten)]
        on: On,
        /// Puts per second.
        #[arg(long, default_value_t = 1000.0)]
        rate: f64,
    },
    /// Many watches of one key: one put until every watch has it.
    FanOut {
        #[command(flatten)]
        on: On,
        /// Watches (over 8 clients).
        #[arg(long, default_value_t = 1000)]
        watchers: usize,
        /// Puts timed.
        #[arg(long, default_value_t = 20)]
        rounds: usize,
    },
    /// Many instances registered by fewer clients, followed by a service cache.
    RegistryScale {
        #[command(flatten)]
        on: On,
        /// Instances.
        #[arg(long, default_value_t = 10_000)]
        instances: usize,
        /// Registering clients (each its own connection).
        #[arg(long, default_value_t = 200)]
        clients: usize,
    },
    /// Mixed lock, election, registry and config churn with faults: RSS, tasks and
    /// file descriptors over time (their slopes), errors beyond the injected ones.
    Soak {
        #[command(flatten)]
        on: On,
        /// Minutes.
        #[arg(long, default_value_t = 30.0)]
        minutes: f64,
    },
    /// A one-row transaction on PostgreSQL ungated and through the SQL fencing gate.
    FenceSql {
        /// The database: postgres://…
        #[arg(long)]
        pg: String,
        /// Seconds measured per subject.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Starts ZooKeeper and etcd, runs every scenario on mem, ZooKeeper and etcd for
    /// several rounds and writes the medians to a markdown report.
    Report(report::Args),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let rows = match cli.scenario {
            Scenario::Lock { on } => lock::uncontended(&Target::parse(&on.url)?, on.seconds, 20).await?,
            Scenario::LockContended { on, clients } => {
                lock::contended(&Target::parse(&on.url)?, clients, on.seconds, 3).await?
            }
            Scenario::Waiters { on, waiters } => waiters::run(&Target::parse(&on.url)?, waiters).await?,
            Scenario::Election { on, rounds } => election::run(&Target::parse(&on.url)?, rounds).await?,
            Scenario::Registry { on, instances } => {
                registry::run(&Target::parse(&on.url)?, instances).await?
            }
            Scenario::Config { on, deliveries } => {
                config::run(&Target::parse(&on.url)?, on.seconds, deliveries).await?
            }
            Scenario::ManyNames { on, names } => {
                scale::many_names(&Target::parse(&on.url)?, names, on.seconds).await?
            }
            Scenario::Storm { on, rate } => scale::storm(&Target::parse(&on.url)?, rate, on.seconds).await?,
            Scenario::FanOut { on, watchers, rounds } => {
                scale::fan_out(&Target::parse(&on.url)?, watchers, rounds).await?
            }
            Scenario::RegistryScale {
                on,
                instances,
                clients,
            } => scale::registry_scale(&Target::parse(&on.url)?, instances, clients).await?,
            Scenario::Soak { on, minutes } => soak::run(&[Target::parse(&on.url)?], minutes * 60.0).await?,
            Scenario::FenceSql { pg, seconds } => fence::run(&pg, seconds, 50).await?,
            Scenario::Report(args) => return report::run(args).await,
        };
        measure::print(&rows);
        Ok(())
    })
}
