//! Human-readable lines or one JSON object per line (`--json`).
//!
//! Results go to standard output; progress, notices and errors to standard error — so
//! that a command run under `coord lock` keeps standard output to itself.

use std::io::{IsTerminal as _, Write as _};

use serde_json::{Map, Value, json};

use crate::exit::Failure;

/// Where and how to print.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    json: bool,
}

impl Out {
    pub fn new(json: bool) -> Out {
        Out { json }
    }

    /// Whether `--json` was given.
    pub fn json(self) -> bool {
        self.json
    }

    /// A result line on standard output: `human` as text, or `json` as one object.
    ///
    /// # Errors
    ///
    /// When standard output is gone (e.g. `coord config watch | head -1` after `head`
    /// exits): streaming commands then stop.
    pub fn result(self, human: impl std::fmt::Display, json: Value) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        if self.json {
            writeln!(stdout, "{json}")?;
        } else {
            writeln!(stdout, "{human}")?;
        }
        stdout.flush()
    }

    /// A notice on standard error (progress, what coord did around a command).
    pub fn notice(self, human: impl std::fmt::Display, json: Value) {
        let mut stderr = std::io::stderr().lock();
        let _ = if self.json {
            writeln!(stderr, "{json}")
        } else {
            writeln!(stderr, "coord: {human}")
        };
    }

    /// The failure on standard error.
    pub fn failure(self, f: &Failure) {
        self.notice(
            &f.message,
            json!({"event": "error", "kind": f.kind, "exit": f.code, "message": f.message}),
        );
    }
}

/// A progress line that rewrites itself on a terminal, and otherwise prints only when
/// it changes (and at most every `quiet` seconds when it does not).
pub struct Progress {
    out: Out,
    terminal: bool,
    last: Option<String>,
    printed_at: Option<std::time::Instant>,
    dirty: bool,
}

impl Progress {
    pub fn new(out: Out) -> Progress {
        Progress {
            out,
            terminal: !out.json() && std::io::stderr().is_terminal(),
            last: None,
            printed_at: None,
            dirty: false,
        }
    }

    /// Shows `line`; `key` identifies what it reports (a new key is always printed).
    pub fn show(&mut self, key: &str, line: &str, json: Value) {
        let changed = self.last.as_deref() != Some(key);
        if self.terminal {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2Kcoord: {line}");
            let _ = stderr.flush();
            self.dirty = true;
        } else if changed || self.printed_at.is_some_and(|t| t.elapsed().as_secs() >= 30) {
            self.out.notice(line, json);
            self.printed_at = Some(std::time::Instant::now());
        }
        self.last = Some(key.to_owned());
    }

    /// Ends a rewritten line, so that what follows starts on its own.
    pub fn finish(&mut self) {
        if self.dirty {
            let _ = writeln!(std::io::stderr());
            self.dirty = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A value as text: UTF-8 as it is, other bytes escaped.
pub fn text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.escape_ascii().to_string(),
    }
}

/// Adds a value to a JSON object: `"value": "…"` for UTF-8, `"value_hex": "…"` otherwise.
pub fn put_value(object: &mut Map<String, Value>, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            object.insert("value".into(), Value::String(s.to_owned()));
        }
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            object.insert("value_hex".into(), Value::String(hex));
        }
    }
}

/// A JSON object from pairs, with the value added by [`put_value`].
pub fn with_value(pairs: Value, bytes: &[u8]) -> Value {
    let mut object = match pairs {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    put_value(&mut object, bytes);
    Value::Object(object)
}

/// `t` in RFC 3339 (with milliseconds if `millis`), or — past the year 9999, which
/// RFC 3339 cannot write (a forged lock-delay mark, say) — in milliseconds since the
/// Unix epoch.
pub fn time(t: std::time::SystemTime, millis: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let written = if millis {
        write!(out, "{}", humantime::format_rfc3339_millis(t))
    } else {
        write!(out, "{}", humantime::format_rfc3339_seconds(t))
    };
    if written.is_err() {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        return format!("{ms} ms after the Unix epoch");
    }
    out
}

/// A duration for people: `850ms`, `12s`, `3m 4s`.
pub fn ago(d: std::time::Duration) -> String {
    if d.as_secs() == 0 {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(std::time::Duration::from_secs(d.as_secs())).to_string()
}

/// The `--timeout` the user gave, before the connect's time was taken off it.
static ASKED_TIMEOUT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();

/// Remembers the `--timeout` the user gave, for [`timeout_shown`].
pub fn remember_timeout(asked: std::time::Duration) {
    let _ = ASKED_TIMEOUT.set(asked);
}

/// How a message names a timeout that ran out: as the user gave it (`5s`), not what was
/// left of it after the connect (`4s 812ms 331us 12ns`).
pub fn timeout_shown(left: std::time::Duration) -> String {
    let d = ASKED_TIMEOUT.get().copied().unwrap_or(left);
    humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_past_the_year_9999_still_print() {
        let far = std::time::UNIX_EPOCH + std::time::Duration::from_secs(400_000_000_000);
        assert_eq!(time(far, true), "400000000000000 ms after the Unix epoch");
        let near = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_500);
        assert_eq!(time(near, true), "1970-01-01T00:00:01.500Z");
        assert_eq!(time(near, false), "1970-01-01T00:00:01Z");
    }

    #[test]
    fn values_print_as_text_or_hex() {
        assert_eq!(text(b"on"), "on");
        assert_eq!(text(&[0xff, b'a']), "\\xffa");
        assert_eq!(
            with_value(json!({"key": "k"}), b"on"),
            json!({"key": "k", "value": "on"})
        );
        assert_eq!(with_value(json!({}), &[0xff, 0x01]), json!({"value_hex": "ff01"}));
    }

    #[test]
    fn a_timeout_is_shown_in_whole_milliseconds() {
        assert_eq!(
            timeout_shown(std::time::Duration::new(4, 812_331_012)),
            "4s 812ms"
        );
    }
}
