//! Turning a run into numbers: rates, pickup-latency percentiles, CPU time, and the human
//! table or the one-line JSON object.

use serde_json::{json, Value};

/// Nearest-rank percentile of sorted nanoseconds, in milliseconds.
pub fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1e6
}

pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    pub samples: usize,
}

impl Latency {
    pub fn from_nanos(mut v: Vec<u64>) -> Latency {
        v.sort_unstable();
        let mean = if v.is_empty() {
            0.0
        } else {
            v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64 / 1e6
        };
        Latency {
            p50: percentile_ms(&v, 50.0),
            p90: percentile_ms(&v, 90.0),
            p99: percentile_ms(&v, 99.0),
            max: v.last().map(|x| *x as f64 / 1e6).unwrap_or(0.0),
            mean,
            samples: v.len(),
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "p50": round3(self.p50), "p90": round3(self.p90), "p99": round3(self.p99),
            "max": round3(self.max), "mean": round3(self.mean), "samples": self.samples,
        })
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// CPU seconds (user + system) a process has used so far, from /proc/<pid>/stat.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU seconds the server's engine thread (named `ojsd-engine`) has used so far: the
/// single writer's own work, which bounds the server's rate however many cores it has.
pub fn engine_cpu_seconds(pid: &str) -> Option<f64> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() == "ojsd-engine" {
            return stat_cpu_seconds(&dir.join("stat").to_string_lossy());
        }
    }
    None
}

fn stat_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may contain spaces; fields resume after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ... utime is field 14 of the full line, index 11 here.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let hz = clock_ticks();
    Some((utime + stime) / hz)
}

fn clock_ticks() -> f64 {
    // sysconf(_SC_CLK_TCK) is 100 on every Linux configuration in practice.
    std::env::var("CLK_TCK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100.0)
}

/// A `/proc/<pid>/status` field in KiB (VmRSS, VmHWM).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Print `rows` as a two-column table.
pub fn table(title: &str, rows: &[(String, String)]) {
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!("{title}");
    println!("{}", "-".repeat(title.len().max(w + 20)));
    for (k, v) in rows {
        println!("{k:<w$}  {v}");
    }
}

pub fn fmt_rate(x: f64) -> String {
    if x >= 1000.0 {
        format!("{:.0} jobs/s", x)
    } else {
        format!("{x:.1} jobs/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).map(|x| x * 1_000_000).collect();
        let l = Latency::from_nanos(v);
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Latency::from_nanos(vec![]).p99, 0.0);
        assert!(cpu_seconds("self").is_some());
        assert!(status_kib("self", "VmRSS").unwrap() > 0);
    }
}
