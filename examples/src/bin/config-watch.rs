//! `config-watch watch [PREFIX]` prints every change under a prefix, as it happens;
//! `config-watch set KEY VALUE` writes a key with compare-and-set (re-reading and
//! retrying if someone else wrote it in between).
//!
//! ```text
//! cargo run -p coord-examples --bin config-watch -- watch app
//! cargo run -p coord-examples --bin config-watch -- set app/feature on
//! ```

use std::time::Duration;

use clap::{Parser, Subcommand};
use coord::prelude::*;
use coord::{ConfigEvent, ErrorKind};
use futures::StreamExt;

#[derive(Parser)]
#[command(about = "Watch or write shared configuration")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every change under PREFIX (empty: everything).
    Watch {
        #[arg(default_value = "")]
        prefix: String,
        /// Exit after this many seconds (0: run until Ctrl-C).
        #[arg(long, default_value_t = 0)]
        seconds: u64,
    },
    /// Write KEY=VALUE with compare-and-set.
    Set { key: String, value: String },
}

async fn watch(client: &coord::Client, prefix: &str, seconds: u64) -> anyhow::Result<()> {
    let mut changes = ConfigStore::watch(client, prefix).await?;
    let stop = async {
        if seconds == 0 {
            let _ = tokio::signal::ctrl_c().await;
        } else {
            tokio::time::sleep(Duration::from_secs(seconds)).await;
        }
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            event = changes.next() => match event {
                Some(Ok(ConfigEvent::Snapshot(entries))) => {
                    println!("snapshot: {} keys", entries.len());
                    for e in entries {
                        println!("  {} = {:?} (version {})", e.key, String::from_utf8_lossy(&e.value), e.version);
                    }
                }
                Some(Ok(ConfigEvent::Put(e))) => {
                    println!("put {} = {:?} (version {})", e.key, String::from_utf8_lossy(&e.value), e.version)
                }
                Some(Ok(ConfigEvent::Delete(key))) => println!("delete {key}"),
                Some(Ok(ConfigEvent::Resync)) => println!("resync: changes were missed; a fresh snapshot follows"),
                Some(Ok(other)) => println!("{other:?}"),
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
        }
    }
}

async fn set(client: &coord::Client, key: &str, value: &str) -> anyhow::Result<()> {
    loop {
        let current = client.get(key).await?;
        let expected = current.as_ref().map(|v| v.version);
        match client
            .compare_and_set(key, expected, value.as_bytes().to_vec())
            .await
        {
            Ok(version) => {
                println!(
                    "{key}: {:?} -> {value:?} (version {version})",
                    current.map(|v| String::from_utf8_lossy(&v.value).into_owned())
                );
                return Ok(());
            }
            Err(e) if e.kind() == ErrorKind::VersionMismatch => println!("{key} changed meanwhile; retrying"),
            Err(e) => return Err(e.into()),
        }
    }
}

async fn run(client: coord::Client, args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Watch { prefix, seconds } => watch(&client, &prefix, seconds).await?,
        Command::Set { key, value } => set(&client, &key, &value).await?,
    }
    client.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    coord_examples::init_logging();
    let args = Args::parse();
    run(coord_examples::connect().await?, args).await
}
