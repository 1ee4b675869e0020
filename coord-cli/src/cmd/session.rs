//! `coord session`: a health check.

use std::process::ExitCode;
use std::time::Instant;

use coord::{Client, ConfigStore as _, SessionState};
use serde_json::json;

use crate::exit::{self, Failure};
use crate::output::Out;

/// The key read to time a round trip (absent or not, the read costs one request).
const PROBE_KEY: &str = "coord-cli-probe";

pub async fn run(client: &Client, out: Out) -> Result<ExitCode, Failure> {
    let sent = Instant::now();
    // Connected but not answering is unavailable too, for a health check.
    client.get(PROBE_KEY).await.map_err(Failure::connecting)?;
    let round_trip = sent.elapsed();
    let server = client.server_version().await.unwrap_or(None);
    let state = client.session_state();
    let human = format!(
        "backend     {}\nnamespace   {}\nsession     {:#x}\nstate       {state}\nserver      {}\nround trip  {:.1} ms",
        client.kind(),
        if client.namespace().is_empty() {
            "(root)"
        } else {
            client.namespace()
        },
        client.session_id(),
        server.as_deref().unwrap_or("unknown"),
        round_trip.as_secs_f64() * 1e3,
    );
    let _ = out.result(
        human,
        json!({
            "backend": client.kind(),
            "namespace": client.namespace(),
            "session": format!("{:x}", client.session_id()),
        "session_timeout_ms": client.session_timeout().as_millis() as u64,
            "state": state.to_string(),
            "server_version": server,
            "round_trip_ms": round_trip.as_secs_f64() * 1e3,
        }),
    );
    Ok(match state {
        SessionState::Connected => ExitCode::SUCCESS,
        _ => ExitCode::from(exit::UNAVAILABLE),
    })
}
