//! Registers this process as an instance of a service, with metadata, and prints the
//! service's members as they join and leave. Run several; stop one with Ctrl-C (it
//! deregisters) or kill -9 it (it disappears when its session times out).
//!
//! ```text
//! cargo run -p coord-examples --bin discovery -- --id a --address 127.0.0.1:8001
//! ```

use std::time::Duration;

use clap::Parser;
use coord::prelude::*;
use coord::{RegistryEvent, ServiceInstance};
use futures::StreamExt;

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
    let mut members = Registry::watch(&client, &args.service).await?;
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
    loop {
        tokio::select! {
            _ = &mut stop => break,
            event = members.next() => match event {
                Some(Ok(RegistryEvent::Snapshot(list))) => {
                    println!("members: {:?}", list.iter().map(|i| &i.id).collect::<Vec<_>>());
                }
                Some(Ok(RegistryEvent::Joined(i))) => println!("joined: {} at {} {:?}", i.id, i.address, i.metadata),
                Some(Ok(RegistryEvent::Updated(i))) => println!("updated: {} at {}", i.id, i.address),
                Some(Ok(RegistryEvent::Left(id))) => println!("left: {id}"),
                Some(Ok(RegistryEvent::Resync)) => println!("(resync: changes may have been missed; a fresh list follows)"),
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
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
