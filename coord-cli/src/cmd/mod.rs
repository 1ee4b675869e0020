//! One module per subcommand family.

use std::process::ExitCode;

use futures::StreamExt as _;

use crate::child::Stop;
use crate::exit::{self, Failure};

pub mod args;
pub mod config;
pub mod elect;
pub mod inspect;
pub mod lock;
pub mod recipes;
pub mod registry;
pub mod session;
pub mod wait;

/// Prints each event of a watch with `print` until a stop signal (exit 0), a closed
/// standard output (exit 141, as a shell reports SIGPIPE), or the end of the stream (the
/// error it ended with). Written once for `config watch`, `registry watch`, `observe`.
pub async fn follow<E>(
    mut events: futures::stream::BoxStream<'static, coord::Result<E>>,
    stop: &mut Stop,
    mut print: impl FnMut(E) -> std::io::Result<()>,
) -> Result<ExitCode, Failure> {
    loop {
        let event = match crate::child::unless_stopped(stop, events.next()).await {
            Ok(Some(event)) => event?,
            Ok(None) => return Err(Failure::new(exit::UNAVAILABLE, "closed", "the watch ended")),
            Err(_) => return Ok(ExitCode::SUCCESS),
        };
        if print(event).is_err() {
            return Ok(ExitCode::from(exit::BROKEN_PIPE));
        }
    }
}

/// `host:pid`, what this process stores as its identity in lock and election entries.
pub fn identity() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}:{}", std::process::id())
}
