//! `coord config get|put|cas|delete|list|watch`.

use std::io::Read as _;
use std::process::ExitCode;

use clap::Subcommand;
use coord::{Client, ConfigEvent, ConfigStore as _, Entry, Version};
use serde_json::json;

use crate::child::Stop;
use crate::cmd::args::*;
use crate::exit::{self, Failure};
use crate::output::{self, Out};

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print a key's value (exit 3 if absent); --json adds its version.
    #[command(
        after_help = "Examples:\n  coord config get feature/x\n  coord config get --json feature/x   # {\"key\":…,\"value\":…,\"version\":\"12.0\"}"
    )]
    Get {
        /// The key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// Print the value's bytes as they are (no escaping, no newline added).
        #[arg(long)]
        raw: bool,
    },
    /// Create or replace a key; prints the new version.
    #[command(
        after_help = "Examples:\n  coord config put feature/x on\n  coord config put service/limits - < limits.json"
    )]
    Put {
        /// The key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// The value, or - to read it from standard input.
        value: String,
    },
    /// Write a key only if it is at a version (or absent): exit 4 otherwise.
    #[command(group(clap::ArgGroup::new("condition").args(["expect", "absent"]).required(true)))]
    #[command(after_help = "\
Examples:
  v=$(coord config get --json feature/x | jq -r .version)
  coord config cas feature/x off --expect \"$v\"
  coord config cas leader-lease node-1 --absent")]
    Cas {
        /// The key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// The value, or - to read it from standard input.
        value: String,
        /// The version the key must be at, as printed by get/put (e.g. 12.0).
        #[arg(long, value_name = "VERSION")]
        expect: Option<String>,
        /// Write only if the key does not exist.
        #[arg(long)]
        absent: bool,
    },
    /// Delete a key (exit 0 whether or not it existed; --json says which).
    #[command(after_help = "Examples:\n  coord config delete feature/x")]
    Delete {
        /// The key.
        #[arg(value_parser = name_arg)]
        key: String,
    },
    /// List the keys at and below a prefix (segment-wise), sorted.
    #[command(after_help = "Examples:\n  coord config list\n  coord config list --json feature")]
    List {
        /// The prefix; empty for the whole namespace.
        #[arg(default_value = "", value_parser = prefix_arg)]
        prefix: String,
    },
    /// Print the keys under a prefix, then every change, until interrupted.
    #[command(after_help = "Examples:\n  coord config watch feature\n  coord config watch --json | jq -c .")]
    Watch {
        /// The prefix; empty for the whole namespace.
        #[arg(default_value = "", value_parser = prefix_arg)]
        prefix: String,
    },
}

/// The one-shot config commands (`watch` is [`watch`]).
pub async fn run(client: &Client, command: ConfigCommand, out: Out) -> Result<ExitCode, Failure> {
    match command {
        ConfigCommand::Get { key, raw: true } => match client.get(&key).await? {
            Some(v) => {
                use std::io::Write as _;
                let mut stdout = std::io::stdout().lock();
                if stdout.write_all(&v.value).and_then(|()| stdout.flush()).is_err() {
                    return Ok(ExitCode::from(exit::BROKEN_PIPE));
                }
                Ok(ExitCode::SUCCESS)
            }
            None => Err(Failure::new(
                exit::NOT_FOUND,
                "not found",
                format!("no key {key:?}"),
            )),
        },
        ConfigCommand::Get { key, raw: false } => match client.get(&key).await? {
            Some(v) => {
                let _ = out.result(
                    output::text(&v.value),
                    output::with_value(json!({"key": key, "version": v.version.to_string()}), &v.value),
                );
                Ok(ExitCode::SUCCESS)
            }
            None => Err(Failure::new(
                exit::NOT_FOUND,
                "not found",
                format!("no key {key:?}"),
            )),
        },
        ConfigCommand::Put { key, value } => {
            let version = client.put(&key, read_value(&value)?).await?;
            written(out, &key, version);
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Cas {
            key,
            value,
            expect,
            absent,
        } => {
            let expected = match (expect, absent) {
                (Some(v), false) => Some(v.parse::<Version>()?),
                (None, true) => None,
                _ => return Err(Failure::usage("give either --expect VERSION or --absent")),
            };
            let version = client
                .compare_and_set(&key, expected, read_value(&value)?)
                .await?;
            written(out, &key, version);
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Delete { key } => {
            let existed = client.delete(&key).await?;
            let human = if existed {
                format!("deleted {key:?}")
            } else {
                format!("{key:?} did not exist")
            };
            let _ = out.result(human, json!({"key": key, "deleted": existed}));
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::List { prefix } => {
            for e in client.list(&prefix).await? {
                let _ = entry(out, "entry", &e);
            }
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Watch { .. } => Err(Failure::usage("config watch runs on its own")),
    }
}

/// Prints the keys under `prefix`, then every change, until a stop signal (exit 0) or a
/// closed standard output (exit 141, as a shell reports SIGPIPE).
pub async fn watch(client: &Client, prefix: &str, stop: &mut Stop, out: Out) -> Result<ExitCode, Failure> {
    let events = client.watch(prefix).await?;
    super::follow(events, stop, |event| match event {
        ConfigEvent::Snapshot(entries) => out
            .result(
                format!("snapshot: {} keys", entries.len()),
                json!({"event": "snapshot", "keys": entries.len()}),
            )
            .and_then(|()| entries.iter().try_for_each(|e| entry(out, "entry", e))),
        ConfigEvent::Put(e) => entry(out, "put", &e),
        ConfigEvent::Delete(key) => {
            out.result(format!("delete {key}"), json!({"event": "delete", "key": key}))
        }
        ConfigEvent::Resync => out.result(
            "resync: changes may have been missed; a fresh snapshot follows",
            json!({"event": "resync"}),
        ),
        other => out.result(format!("{other:?}"), json!({"event": format!("{other:?}")})),
    })
    .await
}

/// The value argument, or standard input for `-`.
pub fn read_value(arg: &str) -> Result<Vec<u8>, Failure> {
    if arg != "-" {
        return Ok(arg.as_bytes().to_vec());
    }
    let mut buf = Vec::new();
    std::io::stdin().read_to_end(&mut buf).map_err(|e| {
        Failure::new(
            exit::FAILED,
            "io",
            format!("cannot read the value from standard input: {e}"),
        )
    })?;
    Ok(buf)
}

fn written(out: Out, key: &str, version: Version) {
    let _ = out.result(
        format!("{key} at version {version}"),
        json!({"key": key, "version": version.to_string()}),
    );
}

fn entry(out: Out, event: &str, e: &Entry) -> std::io::Result<()> {
    let human = match event {
        "entry" => format!("{} = {}  (version {})", e.key, output::text(&e.value), e.version),
        _ => format!(
            "{event} {} = {}  (version {})",
            e.key,
            output::text(&e.value),
            e.version
        ),
    };
    out.result(
        human,
        output::with_value(
            json!({"event": event, "key": e.key, "version": e.version.to_string()}),
            &e.value,
        ),
    )
}
