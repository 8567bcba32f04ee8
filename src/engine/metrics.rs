//! The metrics of ojs-events §7, kept by the engine as it applies transitions and rendered
//! in Prometheus text format. OJS names map to Prometheus ones by replacing dots with
//! underscores and adding `_total` to counters (`ojs.jobs.enqueued` → `ojs_jobs_enqueued_total`).

use super::index::Index;
use crate::job::State;
use std::collections::BTreeMap;
use std::fmt::Write;

const DURATION_BUCKETS: [f64; 14] = [
    5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0,
    300000.0,
];
const WAIT_BUCKETS: [f64; 11] = [
    10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0, 30000.0, 60000.0, 300000.0, 600000.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Count per bucket (not cumulative); the last slot is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len() + 1];
        }
        let slot = bounds.iter().position(|b| v <= *b).unwrap_or(bounds.len());
        self.counts[slot] += 1;
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Debug, Clone, Default)]
struct Series {
    enqueued: u64,
    completed: u64,
    failed: u64,
    duration: Histogram,
    wait: Histogram,
}

/// Series by job type, then queue (two levels so a lookup never allocates).
type CounterDef = (&'static str, &'static str, fn(&Series) -> u64);
type HistogramDef = (
    &'static str,
    &'static str,
    &'static [f64],
    fn(&Series) -> &Histogram,
);

/// Default `--max-metric-series`: (job type, queue) pairs with series of their own.
pub const DEFAULT_MAX_SERIES: usize = 1000;
/// The label values of the series that sums the pairs past the bound, and the queues past
/// it in the queue gauges.
pub const OTHER: &str = "_other";

/// The job metrics, by job type and queue. At most `max_series` pairs have series of their
/// own; observations of further pairs are summed under `job_type="_other",queue="_other"`,
/// and a retired queue's series are dropped (a queue idle long enough is forgotten), so the
/// page does not grow with every name a client ever used.
pub struct Metrics {
    series: BTreeMap<String, BTreeMap<String, Series>>,
    pairs: usize,
    max_series: usize,
    other: Option<Series>,
}

pub enum Observe {
    Enqueued,
    Started {
        wait_ms: f64,
    },
    Completed {
        duration_ms: f64,
    },
    /// An attempt failed; `discarded` when it was the last one.
    Failed {
        duration_ms: Option<f64>,
        discarded: bool,
    },
}

impl Metrics {
    pub fn new(max_series: usize) -> Metrics {
        Metrics {
            series: BTreeMap::new(),
            pairs: 0,
            max_series,
            other: None,
        }
    }

    fn series(&mut self, job_type: &str, queue: &str) -> &mut Series {
        let known = self
            .series
            .get(job_type)
            .is_some_and(|by_queue| by_queue.contains_key(queue));
        if !known && self.pairs >= self.max_series {
            return self.other.get_or_insert_with(Series::default);
        }
        if !known {
            self.pairs += 1;
        }
        self.series
            .entry(job_type.to_string())
            .or_default()
            .entry(queue.to_string())
            .or_default()
    }

    /// Drop the series of queues that were forgotten.
    pub fn forget_queues(&mut self, queues: &[String]) {
        for by_queue in self.series.values_mut() {
            for q in queues {
                if by_queue.remove(q).is_some() {
                    self.pairs -= 1;
                }
            }
        }
        self.series.retain(|_, by_queue| !by_queue.is_empty());
    }

    /// Every series, the sum of the pairs past the bound last.
    fn all(&self) -> impl Iterator<Item = (&str, &str, &Series)> {
        self.series
            .iter()
            .flat_map(|(jt, by_q)| by_q.iter().map(move |(q, s)| (jt.as_str(), q.as_str(), s)))
            .chain(self.other.iter().map(|s| (OTHER, OTHER, s)))
    }

    pub fn observe(&mut self, job_type: &str, queue: &str, what: Observe) {
        let s = self.series(job_type, queue);
        match what {
            Observe::Enqueued => s.enqueued += 1,
            Observe::Started { wait_ms } => s.wait.observe(&WAIT_BUCKETS, wait_ms.max(0.0)),
            Observe::Completed { duration_ms } => {
                s.completed += 1;
                s.duration.observe(&DURATION_BUCKETS, duration_ms.max(0.0));
            }
            Observe::Failed {
                duration_ms,
                discarded,
            } => {
                if discarded {
                    s.failed += 1;
                }
                if let Some(d) = duration_ms {
                    s.duration.observe(&DURATION_BUCKETS, d.max(0.0));
                }
            }
        }
    }

    pub fn render(&self, index: &Index) -> String {
        let mut out = String::new();
        let counters: [CounterDef; 3] = [
            (
                "ojs_jobs_enqueued_total",
                "Total number of jobs enqueued.",
                |s| s.enqueued,
            ),
            (
                "ojs_jobs_completed_total",
                "Total number of jobs that completed successfully.",
                |s| s.completed,
            ),
            (
                "ojs_jobs_failed_total",
                "Total number of jobs that reached terminal failure (discarded).",
                |s| s.failed,
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (jt, q, s) in self.all() {
                let _ = writeln!(
                    out,
                    "{name}{{job_type=\"{}\",queue=\"{}\"}} {}",
                    esc(jt),
                    esc(q),
                    get(s)
                );
            }
        }
        let hists: [HistogramDef; 2] = [
            (
                "ojs_jobs_duration_ms",
                "Execution wall-clock time per job, ms.",
                &DURATION_BUCKETS,
                |s| &s.duration,
            ),
            (
                "ojs_jobs_wait_ms",
                "Time from enqueued_at to started_at, ms.",
                &WAIT_BUCKETS,
                |s| &s.wait,
            ),
        ];
        for (name, help, bounds, get) in hists {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (jt, q, s) in self.all() {
                let h = get(s);
                let labels = format!("job_type=\"{}\",queue=\"{}\"", esc(jt), esc(q));
                let mut cumulative = 0;
                for (i, b) in bounds.iter().enumerate() {
                    cumulative += h.counts.get(i).copied().unwrap_or(0);
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cumulative}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
                let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
            }
        }
        let gauges: [(&str, &str, State); 3] = [
            (
                "ojs_queue_depth",
                "Jobs in the available state per queue.",
                State::Available,
            ),
            (
                "ojs_queue_active",
                "Jobs in the active state per queue.",
                State::Active,
            ),
            (
                "ojs_dead_letter_depth",
                "Jobs in the dead-letter set per source queue.",
                State::Discarded,
            ),
        ];
        // The queues holding the most jobs in these states get gauges of their own, at
        // most `max_series` of them; the rest are summed under `queue="_other"`.
        let weight = |q: &super::index::Queue| -> usize {
            gauges.iter().map(|(_, _, st)| q.count(*st)).sum()
        };
        let mut queues: Vec<&super::index::Queue> =
            index.queues.iter().filter(|q| !q.retired).collect();
        let rest = if queues.len() > self.max_series {
            queues.select_nth_unstable_by(self.max_series, |a, b| weight(b).cmp(&weight(a)));
            queues.split_off(self.max_series)
        } else {
            Vec::new()
        };
        queues.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for (name, help, state) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for q in &queues {
                let _ = writeln!(
                    out,
                    "{name}{{queue=\"{}\"}} {}",
                    esc(&q.name),
                    q.count(state)
                );
            }
            if !rest.is_empty() {
                let sum: usize = rest.iter().map(|q| q.count(state)).sum();
                let _ = writeln!(out, "{name}{{queue=\"{OTHER}\"}} {sum}");
            }
        }
        out
    }
}

/// Label values are escaped per the Prometheus text format.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_count() {
        let mut m = Metrics::new(DEFAULT_MAX_SERIES);
        m.observe("a.b", "q", Observe::Enqueued);
        m.observe("a.b", "q", Observe::Completed { duration_ms: 7.0 });
        m.observe("a.b", "q", Observe::Completed { duration_ms: 400.0 });
        m.observe(
            "a.b",
            "q",
            Observe::Failed {
                duration_ms: Some(1.0),
                discarded: true,
            },
        );
        let mut ix = Index::default();
        ix.queue_id("q");
        let text = m.render(&ix);
        assert!(text.contains("ojs_jobs_enqueued_total{job_type=\"a.b\",queue=\"q\"} 1"));
        assert!(text.contains("ojs_jobs_completed_total{job_type=\"a.b\",queue=\"q\"} 2"));
        assert!(text.contains("ojs_jobs_failed_total{job_type=\"a.b\",queue=\"q\"} 1"));
        assert!(
            text.contains("ojs_jobs_duration_ms_bucket{job_type=\"a.b\",queue=\"q\",le=\"5\"} 1")
        );
        assert!(
            text.contains("ojs_jobs_duration_ms_bucket{job_type=\"a.b\",queue=\"q\",le=\"10\"} 2")
        );
        assert!(text
            .contains("ojs_jobs_duration_ms_bucket{job_type=\"a.b\",queue=\"q\",le=\"+Inf\"} 3"));
        assert!(text.contains("ojs_jobs_duration_ms_count{job_type=\"a.b\",queue=\"q\"} 3"));
        assert!(text.contains("ojs_queue_depth{queue=\"q\"} 0"));
    }
}
