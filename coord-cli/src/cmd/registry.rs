//! `coord registry list|watch|register`.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use coord::{Client, Registry as _, RegistryEvent, ServiceInstance};
use serde_json::json;

use crate::child::{self, Held, Stop};
use crate::cmd::args::*;
use crate::exit::Failure;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub(crate) enum RegistryCommand {
    /// List a service's instances.
    #[command(
        after_help = "Examples:\n  coord registry list api\n  coord registry list --json api | jq -r .address"
    )]
    List {
        /// The service.
        #[arg(value_parser = name_arg)]
        service: String,
    },
    /// Print a service's instances, then every change, until interrupted.
    #[command(after_help = "Examples:\n  coord registry watch api")]
    Watch {
        /// The service.
        #[arg(value_parser = name_arg)]
        service: String,
    },
    /// Register an instance until interrupted, or while a command runs.
    ///
    /// The registration is bound to coord's session: it disappears if coord dies, and
    /// is re-created after a lost session.
    #[command(after_help = "\
Examples:
  coord registry register api node-1 10.0.0.7:8080 --meta zone=a -- ./server
  coord registry register api node-1 10.0.0.7:8080   # until Ctrl-C")]
    Register {
        /// The service.
        #[arg(value_parser = name_arg)]
        service: String,
        /// The instance's id, unique within the service.
        #[arg(value_parser = segment_arg)]
        id: String,
        /// Where to reach it, e.g. 10.0.0.7:8080.
        address: String,
        /// Metadata, KEY=VALUE (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
        metadata: Vec<(String, String)>,
        /// A command to run while registered, after `--`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
}

/// Prints a service's instances.
pub async fn list(client: &Client, service: &str, out: Out) -> Result<ExitCode, Failure> {
    for i in client.instances(service).await? {
        let _ = instance(out, "instance", &i);
    }
    Ok(ExitCode::SUCCESS)
}

/// `watch` and `register` (`list` is [`list`]).
pub async fn run(
    client: &Client,
    command: RegistryCommand,
    stop: &mut Stop,
    out: Out,
) -> Result<ExitCode, Failure> {
    match command {
        RegistryCommand::List { service } => list(client, &service, out).await,
        RegistryCommand::Watch { service } => {
            let events = client.watch(&service).await?;
            super::follow(events, stop, |event| match event {
                RegistryEvent::Snapshot(all) => out
                    .result(
                        format!("snapshot: {} instances", all.len()),
                        json!({"event": "snapshot", "instances": all.len()}),
                    )
                    .and_then(|()| all.iter().try_for_each(|i| instance(out, "instance", i))),
                RegistryEvent::Joined(i) => instance(out, "joined", &i),
                RegistryEvent::Updated(i) => instance(out, "updated", &i),
                RegistryEvent::Left(id) => {
                    out.result(format!("left {id}"), json!({"event": "left", "id": id}))
                }
                RegistryEvent::Resync => out.result(
                    "resync: changes may have been missed; a fresh snapshot follows",
                    json!({"event": "resync"}),
                ),
                other => out.result(format!("{other:?}"), json!({"event": format!("{other:?}")})),
            })
            .await
        }
        RegistryCommand::Register {
            service,
            id,
            address,
            metadata,
            command,
        } => {
            let mut wanted = ServiceInstance::new(id, address);
            wanted.metadata.extend(metadata);
            let registration =
                match child::unless_stopped(stop, client.register(&service, wanted.clone())).await {
                    Ok(registered) => registered?,
                    Err(signal) => return Ok(child::stopped_by(signal)),
                };
            let event = json!({"event": "registered", "service": service, "id": wanted.id, "address": wanted.address});
            let ran = if command.is_empty() {
                let _ = out.result(
                    format!(
                        "registered {} in {service:?} at {}; Ctrl-C to deregister",
                        wanted.id, wanted.address
                    ),
                    event,
                );
                let _ = stop.next().await;
                Ok(ExitCode::SUCCESS)
            } else {
                out.notice(format!("registered {} in {service:?}", wanted.id), event);
                // A lost session does not end a registration: it is re-created on the
                // next one, so the command is never stopped for it.
                let held = Held {
                    what: "registration",
                    name: &service,
                };
                let never = std::future::pending::<child::Ending>();
                child::run_while_held(
                    &command,
                    &[],
                    held,
                    never,
                    child::Stopping {
                        // Nothing else takes the registration's place meanwhile: what
                        // the command leaves running gets a second to finish.
                        grace: Duration::from_secs(1),
                        leftovers: child::Leftovers::Stop,
                    },
                    stop,
                    out,
                )
                .await
            };
            if let Err(e) = registration.deregister().await {
                out.notice(
                    format!("could not confirm the deregistration ({e}); it ends with the session"),
                    json!({"event": "deregister_failed", "message": e.to_string()}),
                );
            }
            ran
        }
    }
}

fn instance(out: Out, event: &str, i: &ServiceInstance) -> std::io::Result<()> {
    let meta: Vec<String> = i.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let human = format!(
        "{}{} {} {}",
        if event == "instance" {
            String::new()
        } else {
            format!("{event} ")
        },
        i.id,
        i.address,
        meta.join(" ")
    );
    out.result(
        human.trim_end(),
        json!({"event": event, "id": i.id, "address": i.address, "metadata": i.metadata}),
    )
}
