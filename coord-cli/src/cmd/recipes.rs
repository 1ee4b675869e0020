//! `coord queue|counter|barrier|txn`: the recipes that hold nothing while a command
//! runs, one request or one wait each.

use std::process::ExitCode;
use std::time::Duration;

use coord::Client;
use serde_json::json;

use crate::child::{self, Stop};
use crate::exit::{self, Failure};
use crate::output::{self, Out};
use crate::{BarrierCommand, CounterCommand, QueueCommand, TwoPhaseCommand};

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
