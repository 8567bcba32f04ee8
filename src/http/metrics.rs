//! `GET /metrics`: the engine's [`MetricsView`] in Prometheus text format (ojs-events §7).
//! OJS names map to Prometheus ones by replacing dots with underscores and adding `_total`
//! to counters (`ojs.jobs.enqueued` → `ojs_jobs_enqueued_total`).

use crate::engine::metrics::{
    HistogramView, MetricsView, QueueGauge, SeriesView, DURATION_BUCKETS, WAIT_BUCKETS,
};
use std::fmt::Write;

type Counter = (&'static str, &'static str, fn(&SeriesView) -> u64);
type Histogram = (
    &'static str,
    &'static str,
    &'static [f64],
    fn(&SeriesView) -> &HistogramView,
);
type Gauge = (&'static str, &'static str, fn(&QueueGauge) -> usize);

/// The whole page of the job metrics.
pub fn prometheus(v: &MetricsView) -> String {
    let mut out = String::new();
    let counters: [Counter; 3] = [
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
        for s in &v.series {
            let _ = writeln!(
                out,
                "{name}{{job_type=\"{}\",queue=\"{}\"}} {}",
                esc(&s.job_type),
                esc(&s.queue),
                get(s)
            );
        }
    }
    let hists: [Histogram; 2] = [
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
        for s in &v.series {
            let h = get(s);
            let labels = format!(
                "job_type=\"{}\",queue=\"{}\"",
                esc(&s.job_type),
                esc(&s.queue)
            );
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
    let gauges: [Gauge; 3] = [
        (
            "ojs_queue_depth",
            "Jobs in the available state per queue.",
            |g| g.depth,
        ),
        (
            "ojs_queue_active",
            "Jobs in the active state per queue.",
            |g| g.active,
        ),
        (
            "ojs_dead_letter_depth",
            "Jobs in the dead-letter set per source queue.",
            |g| g.dead,
        ),
    ];
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for g in &v.queues {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {}", esc(&g.queue), get(g));
        }
    }
    let _ = writeln!(
        out,
        "# HELP ojsd_store_compactions_total Compactions of the store after large deletions \
         (--compact-after-deletes).\n# TYPE ojsd_store_compactions_total counter\n\
         ojsd_store_compactions_total {}",
        v.compactions
    );
    out
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
    fn histograms_are_cumulative_counters_count_and_labels_are_escaped() {
        let mut duration = HistogramView {
            counts: vec![0; DURATION_BUCKETS.len() + 1],
            sum: 408.0,
            count: 3,
        };
        duration.counts[0] = 1;
        duration.counts[1] = 1;
        duration.counts[6] = 1;
        let v = MetricsView {
            series: vec![SeriesView {
                job_type: "a.b".into(),
                queue: "q\"x".into(),
                enqueued: 1,
                completed: 2,
                failed: 1,
                duration,
                wait: HistogramView::default(),
            }],
            queues: vec![QueueGauge {
                queue: "q".into(),
                ..Default::default()
            }],
            compactions: 3,
        };
        let text = prometheus(&v);
        assert!(text.contains("\nojsd_store_compactions_total 3\n"));
        let l = r#"job_type="a.b",queue="q\"x""#;
        assert!(text.contains(&format!("ojs_jobs_enqueued_total{{{l}}} 1")));
        assert!(text.contains(&format!("ojs_jobs_completed_total{{{l}}} 2")));
        assert!(text.contains(&format!("ojs_jobs_failed_total{{{l}}} 1")));
        assert!(text.contains(&format!("ojs_jobs_duration_ms_bucket{{{l},le=\"5\"}} 1")));
        assert!(text.contains(&format!("ojs_jobs_duration_ms_bucket{{{l},le=\"10\"}} 2")));
        assert!(text.contains(&format!("ojs_jobs_duration_ms_bucket{{{l},le=\"+Inf\"}} 3")));
        assert!(text.contains(&format!("ojs_jobs_duration_ms_count{{{l}}} 3")));
        assert!(text.contains("ojs_queue_depth{queue=\"q\"} 0"));
    }
}
