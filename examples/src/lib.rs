//! Shared bits of the coord examples: logging and connecting from `COORD_URL`.

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings only).
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// Connects to the backend `COORD_URL` names (default `mem://`), explaining how to fix
/// a scheme whose feature is not compiled in.
///
/// # Errors
///
/// The connection error, with a hint for `Unsupported`.
///
/// # Cancel safety
///
/// As [`coord::connect`].
pub async fn connect() -> anyhow::Result<coord::Client> {
    coord::connect_from_env().await.map_err(|e| {
        if e.kind() == coord::ErrorKind::Unsupported {
            anyhow::anyhow!("{e}\nhint: cargo run -p coord-examples --features zk,etcd --bin …")
        } else {
            anyhow::anyhow!(
                "cannot connect to {}: {e}",
                std::env::var(coord::URL_VAR).unwrap_or_else(|_| "mem://".into())
            )
        }
    })
}
