//! The metrics of ojs-events §7, kept by the engine as it applies transitions and handed
//! out as a typed [`MetricsView`]; `http/metrics.rs` renders it in Prometheus text format. OJS names map to Prometheus ones by replacing dots with
//! underscores and adding `_total` to counters (`ojs.jobs.enqueued` → `ojs_jobs_enqueued_total`).

use super::index::Index;
use crate::job::State;
use std::collections::BTreeMap;

pub const DURATION_BUCKETS: [f64; 14] = [
    5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0,
    300000.0,
];
pub const WAIT_BUCKETS: [f64; 11] = [
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

    /// What the metrics hold now, for a front end to render (`http/metrics.rs` writes
    /// the Prometheus text): every series, the sum past the bound last, and the gauges of
    /// the `max_series` queues holding the most jobs in those states, the rest summed.
    pub fn view(&self, index: &Index) -> MetricsView {
        let series = self
            .all()
            .map(|(jt, q, s)| SeriesView {
                job_type: jt.to_string(),
                queue: q.to_string(),
                enqueued: s.enqueued,
                completed: s.completed,
                failed: s.failed,
                duration: HistogramView::of(&s.duration, DURATION_BUCKETS.len()),
                wait: HistogramView::of(&s.wait, WAIT_BUCKETS.len()),
            })
            .collect();
        let gauge = |q: &super::index::Queue| QueueGauge {
            queue: q.name.clone(),
            depth: q.count(State::Available),
            active: q.count(State::Active),
            dead: q.count(State::Discarded),
        };
        let weight = |q: &super::index::Queue| {
            q.count(State::Available) + q.count(State::Active) + q.count(State::Discarded)
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
        let mut gauges: Vec<QueueGauge> = queues.into_iter().map(gauge).collect();
        if !rest.is_empty() {
            let mut other = QueueGauge {
                queue: OTHER.to_string(),
                ..Default::default()
            };
            for q in rest {
                let g = gauge(q);
                other.depth += g.depth;
                other.active += g.active;
                other.dead += g.dead;
            }
            gauges.push(other);
        }
        MetricsView {
            series,
            queues: gauges,
            compactions: 0,
        }
    }
}

/// A histogram as counts per bucket (not cumulative; the last is +Inf), sum and count.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HistogramView {
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl HistogramView {
    fn of(h: &Histogram, buckets: usize) -> HistogramView {
        let mut counts = h.counts.clone();
        counts.resize(buckets + 1, 0);
        HistogramView {
            counts,
            sum: h.sum,
            count: h.count,
        }
    }
}

/// One (job type, queue) pair's counters and histograms.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeriesView {
    pub job_type: String,
    pub queue: String,
    pub enqueued: u64,
    pub completed: u64,
    pub failed: u64,
    pub duration: HistogramView,
    pub wait: HistogramView,
}

/// One queue's gauges (or the sum of the queues past the bound, named `_other`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueGauge {
    pub queue: String,
    pub depth: usize,
    pub active: usize,
    pub dead: usize,
}

/// The metrics of ojs-events §7 at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricsView {
    pub series: Vec<SeriesView>,
    pub queues: Vec<QueueGauge>,
    /// Compactions of the store after large deletions, finished since start.
    pub compactions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_count_and_bucket_and_sum_past_the_bound() {
        let mut m = Metrics::new(1);
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
        m.observe("c.d", "r", Observe::Enqueued);
        let mut ix = Index::default();
        ix.queue_id("q");
        ix.queue_id("r");
        let v = m.view(&ix);
        assert_eq!(v.series.len(), 2);
        let s = &v.series[0];
        assert_eq!((s.job_type.as_str(), s.queue.as_str()), ("a.b", "q"));
        assert_eq!((s.enqueued, s.completed, s.failed), (1, 2, 1));
        assert_eq!(s.duration.count, 3);
        assert_eq!(&s.duration.counts[..3], &[1, 1, 0]);
        assert_eq!(s.duration.counts.len(), DURATION_BUCKETS.len() + 1);
        let other = &v.series[1];
        assert_eq!((other.job_type.as_str(), other.enqueued), (OTHER, 1));
        assert_eq!(v.queues.len(), 2, "one queue and _other");
        assert_eq!(v.queues[1].queue, OTHER);
    }
}
