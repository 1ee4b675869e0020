//! Samples, result rows, and how they are printed: `RESULT key=value` lines for
//! machines and a markdown table for people.

use std::time::Duration;

/// Latency samples.
#[derive(Debug, Default, Clone)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0..=1) in milliseconds; 0 without samples.
    pub fn ms(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let mut v = self.0.clone();
        v.sort();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i.min(v.len() - 1)].as_secs_f64() * 1e3
    }
}

/// One measured subject of one scenario on one backend.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub backend: String,
    /// What ran: `coord`, `raw-floor`, `zookeeper-client-lock`, `etcd-client-lock`.
    pub subject: String,
    pub metrics: Vec<(String, f64)>,
}

impl Row {
    pub fn new(scenario: &str, backend: &str, subject: &str) -> Row {
        Row {
            scenario: scenario.to_owned(),
            backend: backend.to_owned(),
            subject: subject.to_owned(),
            metrics: Vec::new(),
        }
    }

    pub fn with(mut self, key: &str, value: f64) -> Row {
        self.set(key, value);
        self
    }

    pub fn set(&mut self, key: &str, value: f64) {
        match self.metrics.iter_mut().find(|(k, _)| k == key) {
            Some(m) => m.1 = value,
            None => self.metrics.push((key.to_owned(), value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The machine-readable line.
    pub fn result_line(&self) -> String {
        let mut line = format!(
            "RESULT scenario={} backend={} subject={}",
            self.scenario, self.backend, self.subject
        );
        for (k, v) in &self.metrics {
            line.push_str(&format!(" {k}={}", fmt(*v)));
        }
        line
    }
}

/// A number as printed: integers plainly, small values with three significant digits.
pub fn fmt(v: f64) -> String {
    if v.is_nan() {
        "n/a".to_owned()
    } else if (v == v.trunc() && v.abs() < 1e12) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// One markdown table per scenario, columns the union of the rows' metrics.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for scenario in scenarios {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.scenario == scenario).collect();
        let mut keys: Vec<&str> = Vec::new();
        for r in &rows {
            for (k, _) in &r.metrics {
                if !keys.contains(&k.as_str()) {
                    keys.push(k);
                }
            }
        }
        out.push_str(&format!("\n#### `{scenario}`\n\n| backend | subject |"));
        for k in &keys {
            out.push_str(&format!(" {k} |"));
        }
        out.push_str("\n|---|---|");
        for _ in &keys {
            out.push_str("---:|");
        }
        out.push('\n');
        for r in rows {
            out.push_str(&format!("| {} | {} |", r.backend, r.subject));
            for k in &keys {
                let cell = r.get(k).map(fmt).unwrap_or_default();
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
    }
    out
}

/// Prints rows as `RESULT` lines, then as tables.
pub fn print(rows: &[Row]) {
    for r in rows {
        println!("{}", r.result_line());
    }
    println!("{}", markdown(rows));
}

/// The process's resident set size in bytes (Linux `/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

/// CPU time this process has used so far, user and system, on every thread (the
/// servers run in processes of their own, so this is the client side alone).
pub fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let us = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64) + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    us(u.user_time()) + us(u.system_time())
}

/// Voluntary context switches this process's threads have made so far: each time a
/// thread went to sleep waiting (parked, on a futex or a socket). Involuntary ones are
/// left out: they count preemption by other processes (the servers), not waits.
pub fn voluntary_switches() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| u.voluntary_context_switches().max(0) as u64)
        .unwrap_or(0)
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        let mut l = Latencies::default();
        for i in 1..=100 {
            l.push(Duration::from_millis(i));
        }
        assert_eq!(l.ms(0.5).round(), 51.0);
        assert_eq!(l.ms(0.99), 99.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn rows_print_as_lines_and_tables() {
        let r = Row::new("lock", "zk", "coord")
            .with("cycles_per_s", 1234.5)
            .with("p50_ms", 0.7123);
        assert_eq!(
            r.result_line(),
            "RESULT scenario=lock backend=zk subject=coord cycles_per_s=1234 p50_ms=0.712"
        );
        let t = markdown(&[r]);
        assert!(t.contains("| zk | coord | 1234 | 0.712 |"), "{t}");
    }
}
