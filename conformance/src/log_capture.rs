//! Everything every crate logs, at every level, kept in memory: the secrets cases run a
//! backend's whole connect-and-use path under it and search the text for passwords and
//! key material.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured output of the process's tracing, from [`install`] on.
#[derive(Clone, Default)]
pub struct Captured {
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl Captured {
    /// All text captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

struct Sink(Captured);

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs a global subscriber that records every event and span of every crate at
/// TRACE level (with span fields), and returns the record. Call it first in a test
/// binary's `main`; a second call returns the same record.
pub fn install() -> Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            let _ = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::NEW)
                .with_ansi(false)
                .with_writer(move || Sink(writer.clone()))
                .try_init();
            captured
        })
        .clone()
}

/// Fails naming the first secret found in `text`, and when `text` holds none of the
/// `expected` markers (the capture saw nothing: the check would prove nothing).
///
/// # Errors
///
/// As above.
pub fn check(text: &str, secrets: &[&str], expected: &[&str]) -> anyhow::Result<()> {
    for marker in expected {
        anyhow::ensure!(
            text.contains(marker),
            "the capture holds no {marker:?}: it saw too little to prove anything ({} bytes)",
            text.len()
        );
    }
    for secret in secrets {
        if let Some(at) = text.find(secret) {
            let line = text[..at].rsplit('\n').next().unwrap_or("");
            anyhow::bail!("a secret appears in the tracing output, in the line starting {line:?}");
        }
    }
    Ok(())
}
