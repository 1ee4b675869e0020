//! What every test binary reads from the environment, and the names it makes, written
//! once: the conformance suite, the CLI's and the examples' process tests, the fault
//! campaign and the benchmarks share them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether `COORD_TEST_REQUIRE` (comma-separated) names `name` — a backend (`zk`,
/// `etcd`, `zk-tls`…) or a fault class (`server-faults`, `member-faults`…): its tests then
/// fail when it is not configured, instead of being reported ignored.
pub fn required(name: &str) -> bool {
    std::env::var("COORD_TEST_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .any(|r| r.trim() == name)
}

/// The value of environment variable `var` (e.g. `COORD_TEST_ZK`), unless unset or
/// empty.
pub fn endpoint(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// A name no other run uses, for a namespace or a key: `<prefix>-<pid>-<nanos hex>`.
pub fn unique_namespace(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// The connection-string option that asks backend `scheme` (`zk`, `zk+tls`, `etcd`,
/// `etcd+https`, `mem`) for a session of `timeout`: ZooKeeper's `session_timeout`,
/// etcd's `lease_ttl` (whole seconds, rounded up), mem's `session_ttl`.
pub fn session_option(scheme: &str, timeout: Duration) -> String {
    if scheme.starts_with("etcd") {
        let secs = timeout.as_millis().div_ceil(1000).max(1);
        format!("lease_ttl={secs}s")
    } else if scheme.starts_with("zk") {
        format!("session_timeout={}ms", timeout.as_millis())
    } else {
        format!("session_ttl={}ms", timeout.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_options_per_backend() {
        let two = Duration::from_secs(2);
        assert_eq!(session_option("zk", two), "session_timeout=2000ms");
        assert_eq!(session_option("zk+tls", two), "session_timeout=2000ms");
        assert_eq!(
            session_option("etcd", Duration::from_millis(1500)),
            "lease_ttl=2s"
        );
        assert_eq!(session_option("etcd+https", two), "lease_ttl=2s");
        assert_eq!(session_option("mem", two), "session_ttl=2000ms");
    }

    #[test]
    fn unique_namespaces_differ() {
        assert_ne!(unique_namespace("a"), unique_namespace("a"));
        assert!(unique_namespace("cli").starts_with("cli-"));
    }
}
