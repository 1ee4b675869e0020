//! All four coord primitives in a few seconds, on whatever backend `COORD_URL` names
//! (default: the embedded in-memory backend).
//!
//! ```text
//! cargo run -p coord-examples --bin quickstart
//! ```

use std::time::Duration;

use coord::prelude::*;
use coord::{ConfigEvent, RegistryEvent, ServiceInstance, Txn};
use futures::StreamExt;

async fn run(client: coord::Client) -> anyhow::Result<()> {
    println!(
        "connected: backend {}, namespace {:?}",
        client.kind(),
        client.namespace()
    );

    // Shared configuration: versions and compare-and-set, plus a watch.
    let mut changes = ConfigStore::watch(&client, "settings").await?;
    if let Some(Ok(ConfigEvent::Snapshot(entries))) = changes.next().await {
        println!("config: watching settings/, {} keys now", entries.len());
    }
    let v1 = client.put("settings/greeting", b"hello".to_vec()).await?;
    client
        .compare_and_set("settings/greeting", Some(v1), b"hello, coord".to_vec())
        .await?;
    let stale = client
        .compare_and_set("settings/greeting", Some(v1), b"lost update".to_vec())
        .await;
    println!(
        "config: a write with a stale version fails: {}",
        stale
            .map(|_| "no!".to_owned())
            .unwrap_or_else(|e| e.kind().to_string())
    );
    for _ in 0..2 {
        if let Some(Ok(ConfigEvent::Put(e))) = changes.next().await {
            println!(
                "config: watch saw {} = {:?}",
                e.key,
                String::from_utf8_lossy(&e.value)
            );
        }
    }

    // Service discovery: a registration bound to this client's session.
    let mut members = Registry::watch(&client, "quickstart-api").await?;
    let registration = client
        .register(
            "quickstart-api",
            ServiceInstance::new("node-1", "127.0.0.1:8080").with_metadata("zone", "a"),
        )
        .await?;
    while let Some(event) = members.next().await {
        if let RegistryEvent::Joined(i) = event? {
            println!("registry: {} joined at {} {:?}", i.id, i.address, i.metadata);
            break;
        }
    }
    println!(
        "registry: instances now {:?}",
        client
            .instances("quickstart-api")
            .await?
            .iter()
            .map(|i| &i.id)
            .collect::<Vec<_>>()
    );

    // Leader election with a fencing token.
    let leadership = client
        .campaign("quickstart-scheduler", b"node-1".to_vec())
        .await?;
    let leader = client.leader("quickstart-scheduler").await?;
    println!(
        "election: leading with token {}; leader() sees token {:?}",
        leadership.token(),
        leader.map(|l| l.token.get())
    );

    // A fenced lock: the write only lands while the guard is held.
    let guard = client.lock("quickstart-report").await?;
    client
        .commit(
            Txn::new()
                .fenced_by(guard.fence())
                .put("reports/last", b"written under the lock".to_vec()),
        )
        .await?;
    let fence = guard.fence();
    guard.release().await?;
    let late = client
        .commit(
            Txn::new()
                .fenced_by(fence)
                .put("reports/last", b"too late".to_vec()),
        )
        .await;
    println!(
        "lock: fenced write after release fails: {}",
        late.map(|_| "no!".to_owned())
            .unwrap_or_else(|e| e.kind().to_string())
    );

    leadership.resign().await?;
    registration.deregister().await?;
    println!("stats: {:?}", client.stats());
    client.close().await?;
    println!("done");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let client = coord_examples::connect().await?;
    tokio::time::timeout(Duration::from_secs(30), run(client)).await?
}
