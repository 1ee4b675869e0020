//! The command line's value parsers: a name, a prefix, a lock-delay, an identity, a
//! single segment, `KEY=VALUE` — each a usage error at once, before anything is sent.

use std::time::Duration;

/// A name or key, checked before anything is sent (as the library would, after
/// connecting): a usage error at once.
pub(crate) fn name_arg(s: &str) -> Result<String, String> {
    coord::validate_name("name", s)
        .map(|()| s.to_owned())
        .map_err(|e| e.message().to_owned())
}

/// A prefix: empty (everything) or a name.
pub(crate) fn prefix_arg(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Ok(String::new())
    } else {
        name_arg(s)
    }
}

/// A single segment (an instance id).
pub(crate) fn segment_arg(s: &str) -> Result<String, String> {
    if s.contains('/') {
        return Err(format!("{s:?} contains '/'; it must be a single segment"));
    }
    name_arg(s)
}

/// A holder's identity: not empty (that would hide who holds).
pub(crate) fn identity_arg(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("an empty identity would hide who holds; leave --identity out for HOST:PID".into());
    }
    Ok(s.to_owned())
}

/// A lock-delay: a duration of at most [`coord::MAX_LOCK_DELAY`].
pub(crate) fn lock_delay_arg(s: &str) -> Result<Duration, String> {
    let delay = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if delay > coord::MAX_LOCK_DELAY {
        return Err(format!(
            "{s} is over the longest lock-delay, {}: it bounds how long a vanished holder's late writes may take",
            humantime::format_duration(coord::MAX_LOCK_DELAY)
        ));
    }
    Ok(delay)
}

pub(crate) fn parse_meta(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}
