//! `coord queue|counter|barrier|txn`: the recipes that hold nothing while a command
//! runs, one request or one wait each.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use coord::Client;
use serde_json::json;

use crate::child::{self, Stop};
use crate::cmd::args::*;
use crate::exit::{self, Failure};
use crate::output::{self, Out};

#[derive(Debug, Subcommand)]
pub(crate) enum QueueCommand {
    /// Add an item at the tail; prints its sequence number.
    #[command(
        after_help = "Examples:\n  coord queue push jobs 'resize 1.png'\n  coord queue push jobs - < job.json"
    )]
    Push {
        /// The queue's name.
        #[arg(value_parser = name_arg)]
        name: String,
        /// The item, or - to read it from standard input.
        item: String,
        /// Refuse the push (exit 69, retry later) while the queue holds this many items.
        #[arg(long, default_value_t = coord::MAX_QUEUE_ITEMS, value_parser = clap::value_parser!(u32).range(1..=i64::from(coord::MAX_QUEUE_ITEMS)))]
        max: u32,
    },
    /// Take the oldest item (each item goes to exactly one taker) and print it; waits
    /// for one unless --try.
    #[command(
        after_help = "Examples:\n  coord queue take jobs\n  coord queue take --try jobs || echo empty\n  coord queue take --timeout 30s --json jobs"
    )]
    Take {
        /// The queue's name.
        #[arg(value_parser = name_arg)]
        name: String,
        /// Give up waiting after this long; exit 124.
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
        /// Do not wait: exit 3 at once if the queue is empty.
        #[arg(long = "try", conflicts_with = "timeout")]
        try_once: bool,
    },
    /// Print how many items the queue holds.
    #[command(after_help = "Examples:\n  coord queue len jobs")]
    Len {
        /// The queue's name.
        #[arg(value_parser = name_arg)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum CounterCommand {
    /// Print the counter (0 when absent).
    #[command(after_help = "Examples:\n  coord counter get visits")]
    Get {
        /// The counter's config key.
        #[arg(value_parser = name_arg)]
        key: String,
    },
    /// Add DELTA (may be negative) and print the new value; every add lands once.
    #[command(after_help = "Examples:\n  coord counter add visits 1\n  coord counter add visits -5")]
    Add {
        /// The counter's config key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// What to add.
        #[arg(allow_negative_numbers = true)]
        delta: i64,
    },
    /// Set the counter.
    #[command(after_help = "Examples:\n  coord counter set visits 0")]
    Set {
        /// The counter's config key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// The new value.
        #[arg(allow_negative_numbers = true)]
        value: i64,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum BarrierCommand {
    /// Raise the barrier (a persistent key: it stays up until removed).
    #[command(after_help = "Examples:\n  coord barrier raise deploy/freeze")]
    Raise {
        /// The barrier's config key.
        #[arg(value_parser = name_arg)]
        key: String,
    },
    /// Remove the barrier, releasing everyone waiting.
    #[command(after_help = "Examples:\n  coord barrier remove deploy/freeze")]
    Remove {
        /// The barrier's config key.
        #[arg(value_parser = name_arg)]
        key: String,
    },
    /// Wait until the barrier is removed (at once if it is not raised).
    #[command(
        after_help = "Examples:\n  coord barrier wait deploy/freeze && ./deploy.sh\n  coord barrier wait --timeout 10m deploy/freeze"
    )]
    Wait {
        /// The barrier's config key.
        #[arg(value_parser = name_arg)]
        key: String,
        /// Give up waiting after this long; exit 124.
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
    },
    /// Print whether the barrier is raised (exit 3 when it is not).
    #[command(after_help = "Examples:\n  coord barrier status deploy/freeze")]
    Status {
        /// The barrier's config key.
        #[arg(value_parser = name_arg)]
        key: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum TwoPhaseCommand {
    /// Print a two-phase commit's persisted decision, commit or abort (exit 3 when it
    /// has none yet).
    #[command(
        after_help = "Examples:\n  coord two-phase decision orders/4711\n  coord two-phase decision --json orders/4711"
    )]
    Decision {
        /// The transaction's name.
        #[arg(value_parser = name_arg)]
        name: String,
    },
}

/// `coord queue push|take|len`.
pub async fn queue(
    client: &Client,
    command: QueueCommand,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    match command {
        QueueCommand::Push { name, item, max } => {
            let item = super::config::read_value(&item)?;
            let seq = client.queue(&name, max)?.push(item).await?;
            let _ = out.result(
                format!("pushed to {name:?} (item {seq})"),
                json!({"queue": name, "seq": seq}),
            );
            Ok(ExitCode::SUCCESS)
        }
        QueueCommand::Take {
            name,
            timeout,
            try_once,
        } => {
            let queue = client.queue(&name, coord::MAX_QUEUE_ITEMS)?;
            let item = if try_once {
                queue.try_take().await?.ok_or_else(|| {
                    Failure::new(exit::NOT_FOUND, "empty", format!("queue {name:?} is empty"))
                })?
            } else {
                match waited(stop, timeout, queue.take(), &format!("an item of queue {name:?}")).await? {
                    Ok(item) => item,
                    Err(code) => return Ok(code),
                }
            };
            let _ = out.result(
                output::text(&item),
                output::with_value(json!({"queue": name}), &item),
            );
            Ok(ExitCode::SUCCESS)
        }
        QueueCommand::Len { name } => {
            let len = client.queue(&name, coord::MAX_QUEUE_ITEMS)?.len().await?;
            let _ = out.result(len, json!({"queue": name, "len": len}));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `coord counter get|add|set`.
pub async fn counter(client: &Client, command: CounterCommand, out: Out) -> Result<ExitCode, Failure> {
    let (key, value) = match command {
        CounterCommand::Get { key } => {
            let v = client.counter(&key)?.get().await?;
            (key, v)
        }
        CounterCommand::Add { key, delta } => {
            let v = client.counter(&key)?.add(delta).await?;
            (key, v)
        }
        CounterCommand::Set { key, value } => {
            client.counter(&key)?.set(value).await?;
            (key, value)
        }
    };
    let _ = out.result(value, json!({"counter": key, "value": value}));
    Ok(ExitCode::SUCCESS)
}

/// `coord barrier raise|remove|wait|status`.
pub async fn barrier(
    client: &Client,
    command: BarrierCommand,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    match command {
        BarrierCommand::Raise { key } => {
            client.barrier(&key)?.raise().await?;
            let _ = out.result(
                format!("barrier {key:?} raised"),
                json!({"barrier": key, "raised": true}),
            );
        }
        BarrierCommand::Remove { key } => {
            client.barrier(&key)?.remove().await?;
            let _ = out.result(
                format!("barrier {key:?} removed"),
                json!({"barrier": key, "raised": false}),
            );
        }
        BarrierCommand::Status { key } => {
            let raised = client.barrier(&key)?.is_raised().await?;
            let human = format!(
                "barrier {key:?} is {}",
                if raised { "raised" } else { "not raised" }
            );
            let _ = out.result(human, json!({"barrier": key, "raised": raised}));
            if !raised {
                return Ok(ExitCode::from(exit::NOT_FOUND));
            }
        }
        BarrierCommand::Wait { key, timeout } => {
            let barrier = client.barrier(&key)?;
            if let Err(code) = waited(
                stop,
                timeout,
                barrier.wait(),
                &format!("barrier {key:?} to be removed"),
            )
            .await?
            {
                return Ok(code);
            }
            let _ = out.result(
                format!("barrier {key:?} is down"),
                json!({"barrier": key, "raised": false}),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `coord two-phase decision`.
pub async fn two_phase(client: &Client, command: TwoPhaseCommand, out: Out) -> Result<ExitCode, Failure> {
    match command {
        TwoPhaseCommand::Decision { name } => match client.two_phase_commit(&name)?.decision().await? {
            Some(decision) => {
                let text = match decision {
                    coord::Decision::Commit => "commit",
                    coord::Decision::Abort => "abort",
                };
                let _ = out.result(text, json!({"two_phase": name, "decision": text}));
                Ok(ExitCode::SUCCESS)
            }
            None => Err(Failure::new(
                exit::NOT_FOUND,
                "not found",
                format!("two-phase commit {name:?} has no decision (yet)"),
            )),
        },
    }
}

/// Waits for `fut` until `timeout` (a [`exit::TIMEOUT`] failure naming `what`) or a stop
/// signal (`Ok(Err(status))`).
async fn waited<T>(
    stop: &mut Stop,
    timeout: Option<Duration>,
    fut: impl std::future::Future<Output = coord::Result<T>>,
    what: &str,
) -> Result<Result<T, ExitCode>, Failure> {
    let bounded = async {
        match timeout {
            Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| {
                Failure::new(
                    exit::TIMEOUT,
                    "timeout",
                    format!(
                        "gave up waiting for {what} after {}; raise --timeout or try later",
                        crate::output::timeout_shown(t)
                    ),
                )
            }),
            None => Ok(fut.await),
        }
    };
    match child::unless_stopped(stop, bounded).await {
        Ok(done) => Ok(Ok(done??)),
        Err(signal) => Ok(Err(child::stopped_by(signal))),
    }
}
