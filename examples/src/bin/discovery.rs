//! Registers this process as an instance of a service, with metadata, and keeps a live
//! view of the service's members (a `ServiceCache`), printing it whenever it changes.
//! Run several; stop one with Ctrl-C (it deregisters) or kill -9 it (it disappears when
//! its session times out).
//!
//! ```text
//! cargo run -p coord-examples --bin discovery -- --id a --address 127.0.0.1:8001
//! ```

use std::time::Duration;

use clap::Parser;
use coord::ServiceInstance;
use coord::prelude::*;

#[derive(Parser)]
#[command(about = "Register an instance and watch the service")]
struct Args {
    /// The service name.
    #[arg(long, default_value = "demo-api")]
    service: String,
    /// This instance's id (default: derived from the process id).
    #[arg(long)]
    id: Option<String>,
    /// The address others should use.
    #[arg(long, default_value = "127.0.0.1:8080")]
    address: String,
    /// A `zone` metadata entry.
    #[arg(long, default_value = "a")]
    zone: String,
    /// Exit after this many seconds (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

async fn run(client: coord::Client, args: Args) -> anyhow::Result<()> {
    let id = args.id.unwrap_or_else(|| format!("pid-{}", std::process::id()));
    // The cache folds the registry watch into a map of id → instance, kept up to date in
    // the background; a gap (session loss, compaction) marks it out of sync until a fresh
    // snapshot replaces it.
    let mut members = client.service_cache(&args.service).await?;
    let me = ServiceInstance::new(id, args.address).with_metadata("zone", args.zone);
    let registration = client.register(&args.service, me.clone()).await?;
    println!("registered {} at {} in {}", me.id, me.address, args.service);
    let stop = async {
        if args.seconds == 0 {
            let _ = tokio::signal::ctrl_c().await;
        } else {
            tokio::time::sleep(Duration::from_secs(args.seconds)).await;
        }
    };
    tokio::pin!(stop);
    let mut view = members.view();
    loop {
        let list: Vec<String> = view
            .values()
            .map(|i| format!("{} at {} {:?}", i.id, i.address, i.metadata))
            .collect();
        let sync = if view.in_sync() {
            ""
        } else {
            " (out of sync: changes may be missing; a fresh list follows)"
        };
        println!("members{sync}: {list:?}");
        tokio::select! {
            _ = &mut stop => break,
            changed = members.changed() => view = changed?,
        }
    }
    registration.deregister().await?;
    client.close().await?;
    println!("deregistered");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    run(coord_examples::connect().await?, args).await
}
