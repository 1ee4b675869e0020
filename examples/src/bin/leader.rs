//! Three in-process candidates elect a leader; the leader's session is killed and the
//! failover is printed with fencing tokens.
//!
//! ```text
//! cargo run -p coord-examples --bin leader
//! ```

use std::time::Duration;

use anyhow::Context as _;
use coord::prelude::*;
use coord::{ErrorKind, Txn};
use futures::StreamExt;

/// One candidate: campaign, do leader-only work with fenced writes until leadership is
/// lost, then campaign again.
async fn run(client: coord::Client, node: String) -> anyhow::Result<()> {
    loop {
        let leadership = match client.campaign("demo-leader", node.clone().into_bytes()).await {
            Ok(l) => l,
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Closed => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        println!("{node}: I lead (token {})", leadership.token());
        loop {
            let write = Txn::new().fenced_by(leadership.fence()).put(
                "demo-leader-state",
                format!("{node} at token {}", leadership.token()).into_bytes(),
            );
            tokio::select! {
                _ = leadership.lost() => break,
                r = client.commit(write) => if let Err(e) = r {
                    println!("{node}: leader write refused ({}), stepping down", e.kind());
                    break;
                },
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("{node}: leadership lost");
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let observer = coord::connect_from_env().await?;
    let mut clients = Vec::new();
    for i in 1..=3 {
        let client = coord::connect_from_env().await?;
        tokio::spawn(run(client.clone(), format!("node-{i}")));
        clients.push(client);
    }
    let mut changes = observer.observe("demo-leader").await?;
    let first = loop {
        if let Some(info) = changes.next().await.context("observe ended")?? {
            break info;
        }
    };
    let first_node = String::from_utf8_lossy(&first.value).into_owned();
    println!("observer: {first_node} leads with token {}", first.token);
    let index: usize = first_node.trim_start_matches("node-").parse::<usize>()? - 1;
    let victim = &clients[index];
    match victim.backend().as_any().downcast_ref::<coord::mem::MemClient>() {
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
                Some(info) if info.token > first.token => return Ok(info),
                Some(_) => {}
                None => println!("observer: no leader"),
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
    for c in &clients {
        c.close().await?;
    }
    observer.close().await?;
    Ok(())
}
