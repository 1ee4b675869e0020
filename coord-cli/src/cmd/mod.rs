//! One module per subcommand family.

pub mod config;
pub mod elect;
pub mod lock;
pub mod registry;
pub mod session;
pub mod wait;

/// `host:pid`, what this process stores as its identity in lock and election entries.
pub fn identity() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
