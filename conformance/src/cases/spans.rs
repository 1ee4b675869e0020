//! Spans stay with their operation: while a public operation awaits the server, events
//! of other tasks on the same thread are not recorded inside its span. (A span held with
//! `Span::enter` across an `.await` stays entered on the thread while the operation is
//! suspended, so whatever the thread runs next logs under it.) Run from a test binary
//! that installs [`log_capture`] first.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use coord_core::ServiceInstance;
use coord_core::prelude::*;

use crate::harness::{CaseResult, Ctx};
use crate::log_capture;

const PROBE: &str = "coord-span-probe";

/// Connects, registers, locks and closes on a single-threaded runtime while a probe task
/// logs every millisecond on the same thread; no probe event may carry a coord span.
///
/// # Errors
///
/// Names the span a probe event was recorded in, or a failed step.
pub async fn operations_keep_their_spans(ctx: Ctx) -> CaseResult {
    let captured = log_capture::install();
    let url = format!("{}/{}", ctx.factory().url_base(), ctx.namespace());
    let factory = ctx.factory();
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> CaseResult {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async {
                    let probe = tokio::spawn(async {
                        loop {
                            tracing::info!(target: "coord_span_probe", "{PROBE}");
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    });
                    let client = factory.connect_url(&url).await?;
                    let reg = client
                        .register("svc", ServiceInstance::new("p1", "10.0.0.1:80"))
                        .await?;
                    let guard = client.lock("res").await?;
                    guard.release().await?;
                    reg.deregister().await?;
                    client.close().await?;
                    probe.abort();
                    anyhow::Ok(())
                })
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the probe thread panicked"))?
    })?;
    let text = captured.text();
    let probes: Vec<&str> = text.lines().filter(|l| l.contains(PROBE)).collect();
    ensure!(
        probes.len() > 3,
        "the capture holds {} probe events: it proves nothing",
        probes.len()
    );
    ensure!(
        text.contains("coord.register"),
        "the capture holds no coord.register span"
    );
    for line in probes {
        let before = line.split("coord_span_probe").next().context("probe line")?;
        ensure!(
            !before.contains("coord."),
            "an event of another task was recorded inside a coord span: {line}"
        );
    }
    Ok(())
}
