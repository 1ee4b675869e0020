//! A worker that leads with a leader selector (`client.lead`): it campaigns, does
//! leader-only work with fenced writes while it leads, campaigns again after losing the
//! lead, steps down cleanly on Ctrl-C, and prints every leadership change it sees.
//! Run two or three in separate terminals and kill one; another takes over with a larger
//! token.
//!
//! `--demo` runs three candidates in one process, kills the leader's session, and prints
//! the failover.
//!
//! ```text
//! cargo run -p coord-examples --bin leader -- --name a      # terminal 1
//! cargo run -p coord-examples --bin leader -- --name b      # terminal 2
//! cargo run -p coord-examples --bin leader -- --demo
//! ```

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use coord::LeaderEvent;
use coord::Txn;
use coord::prelude::*;
use futures::StreamExt;

#[derive(Parser)]
#[command(about = "Campaign for leadership and do fenced leader-only work")]
struct Args {
    /// This worker's name (the leader value others see).
    #[arg(long)]
    name: Option<String>,
    /// Run the in-process three-candidate failover demo instead.
    #[arg(long)]
    demo: bool,
}

const ELECTION: &str = "demo-leader";

/// Leads with a leader selector — campaign, work while leading (fenced writes), campaign
/// again after a loss — and resigns when `stop` resolves.
async fn run(client: coord::Client, name: String, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let worker = client.clone();
    let who = name.clone();
    let selector = client.lead(ELECTION, name.clone().into_bytes(), move |leading| {
        let (client, name) = (worker.clone(), who.clone());
        async move {
            println!("{name}: I lead (token {})", leading.token());
            let mut beat = 0u64;
            loop {
                beat += 1;
                // Leader-only work: lands only while this term holds.
                let write = Txn::new().fenced_by(leading.fence()).put(
                    "demo-leader/state",
                    format!("{name} beat {beat} token {}", leading.token()),
                );
                // The work always waits on the loss too, so it notes the loss itself
                // before the selector cancels it.
                let beat = async {
                    client.commit(write).await?;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<_, coord::Error>(())
                };
                tokio::select! {
                    _ = leading.lost() => {
                        println!("{name}: leadership lost");
                        return;
                    }
                    r = beat => if let Err(e) = r {
                        println!("{name}: leader write refused ({}), stepping down", e.kind());
                        return;
                    },
                }
            }
        }
    })?;
    stop.await;
    let led = selector.is_leader();
    selector.stop().await?;
    if led {
        println!("{name}: resigned");
    }
    Ok(())
}

/// Prints every leadership change of the election.
async fn watch_leaders(client: coord::Client) -> anyhow::Result<()> {
    let mut changes = client.observe(ELECTION).await?;
    while let Some(change) = changes.next().await {
        match change? {
            LeaderEvent::Leader(Some(l)) => println!(
                "observer: {} leads (token {})",
                String::from_utf8_lossy(&l.value),
                l.token
            ),
            LeaderEvent::Leader(None) => println!("observer: no leader"),
            LeaderEvent::Resync => println!("observer: changes may have been missed"),
            other => println!("observer: {other:?}"),
        }
    }
    Ok(())
}

async fn worker(name: String) -> anyhow::Result<()> {
    let client = coord_examples::connect().await?;
    println!("{name}: campaigning on {} (Ctrl-C to step down)", client.kind());
    let observer = tokio::spawn(watch_leaders(client.clone()));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    run(client.clone(), name, stop).await?;
    observer.abort();
    client.close().await?;
    Ok(())
}

async fn demo() -> anyhow::Result<()> {
    let observer = coord_examples::connect().await?;
    let mut clients = Vec::new();
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    for i in 1..=3 {
        let client = coord_examples::connect().await?;
        let mut stop = stop_tx.subscribe();
        tokio::spawn(run(client.clone(), format!("node-{i}"), async move {
            let _ = stop.recv().await;
        }));
        clients.push(client);
    }
    let mut changes = observer.observe(ELECTION).await?;
    let first = loop {
        if let LeaderEvent::Leader(Some(info)) = changes.next().await.context("observe ended")?? {
            break info;
        }
    };
    let first_node = String::from_utf8_lossy(&first.value).into_owned();
    println!("observer: {first_node} leads with token {}", first.token);
    let index: usize = first_node.trim_start_matches("node-").parse::<usize>()? - 1;
    let victim = &clients[index];
    match victim.backend_as::<coord::mem::MemClient>() {
        Some(mem) => {
            println!("killing {first_node}'s session (server-side expiry)");
            mem.expire_session();
        }
        None => {
            println!("closing {first_node}'s client");
            victim.close().await?;
        }
    }
    let next = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(item) = changes.next().await {
            match item? {
                LeaderEvent::Leader(Some(info)) if info.token > first.token => return Ok(info),
                LeaderEvent::Leader(None) => println!("observer: no leader"),
                _ => {}
            }
        }
        anyhow::bail!("observe ended")
    })
    .await??;
    println!(
        "observer: failover to {} with token {} (was {})",
        String::from_utf8_lossy(&next.value),
        next.token,
        first.token
    );
    anyhow::ensure!(next.token > first.token, "token did not increase across failover");
    let _ = stop_tx.send(());
    tokio::time::sleep(Duration::from_millis(200)).await;
    for c in &clients {
        c.close().await?;
    }
    observer.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    if args.demo {
        demo().await
    } else {
        worker(
            args.name
                .unwrap_or_else(|| format!("node-{}", std::process::id())),
        )
        .await
    }
}
