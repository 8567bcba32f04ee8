//! What an operator looks at first (the dashboard's overview, `OVERVIEW`): jobs enqueued,
//! completed and failed over the last five minutes in 5-second buckets, the queues' depth
//! (available and active jobs) at the end of each bucket, and the pickup latency (from
//! `enqueued_at` to FETCH) of recent jobs. Kept on the engine clock, in fixed memory.
//!
//! Also `JOBS`: one page of jobs by queue and state, newest first.

use crate::engine::api::{self, Answer, JobView};
use crate::engine::metrics::Observe;
use crate::engine::request::JobsQuery;
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::OjsResult;
use crate::job::State;

const BUCKET_MS: i64 = 5_000;
/// 60 buckets of 5 s: five minutes.
const BUCKETS: usize = 60;
/// Pickup waits remembered for the latency percentiles.
const WAITS: usize = 4096;
/// Only pickups this recent count toward the percentiles.
const WAIT_WINDOW_MS: i64 = 60_000;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    bucket: i64,
    enqueued: u32,
    completed: u32,
    failed: u32,
    available: u64,
    active: u64,
}

/// Counters in fixed-width time buckets, a ring of `len` of them (allocated on first use).
#[derive(Debug)]
struct Ring {
    bucket_ms: i64,
    len: usize,
    slots: Vec<Slot>,
}

impl Ring {
    const fn new(bucket_ms: i64, len: usize) -> Ring {
        Ring {
            bucket_ms,
            len,
            slots: Vec::new(),
        }
    }

    fn slot(&mut self, now_ms: i64) -> &mut Slot {
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); self.len];
        }
        let bucket = now_ms.div_euclid(self.bucket_ms);
        let slot = &mut self.slots[bucket.rem_euclid(self.len as i64) as usize];
        if slot.bucket != bucket {
            *slot = Slot {
                bucket,
                ..Slot::default()
            };
        }
        slot
    }

    /// The bucket `b` if the ring still holds it.
    fn get(&self, b: i64) -> Option<Slot> {
        self.slots
            .get(b.rem_euclid(self.len as i64) as usize)
            .filter(|s| s.bucket == b)
            .copied()
    }
}

/// The history rings of `GET /ojs/v1/admin/stats/history` (ojs-admin-api §10.2): a day of
/// minutes and 30 days of hours, as that document asks implementations to keep.
const MINUTES: usize = 24 * 60;
const HOURS: usize = 30 * 24;

#[derive(Debug)]
pub(in crate::engine) struct Overview {
    five: Ring,
    minutes: Ring,
    hours: Ring,
    /// (engine ms, wait ms) of the most recent pickups, a ring.
    waits: Vec<(i64, u32)>,
    next_wait: usize,
}

impl Default for Overview {
    fn default() -> Self {
        Overview {
            five: Ring::new(BUCKET_MS, BUCKETS),
            minutes: Ring::new(60_000, MINUTES),
            hours: Ring::new(3_600_000, HOURS),
            waits: Vec::new(),
            next_wait: 0,
        }
    }
}

impl Overview {
    /// Count into the bucket of `now_ms` of every ring.
    fn count(&mut self, now_ms: i64, f: impl Fn(&mut Slot)) {
        f(self.five.slot(now_ms));
        f(self.minutes.slot(now_ms));
        f(self.hours.slot(now_ms));
    }

    /// A job was accepted (PUSH, a workflow step, a cron fire), whatever its first state.
    pub fn pushed(&mut self, now_ms: i64) {
        self.count(now_ms, |s| s.enqueued = s.enqueued.saturating_add(1));
    }

    /// Completed, failed and enqueued per `period_ms` from `since_ms` to `until_ms`, from
    /// the minute ring (periods under an hour) or the hour ring; buckets the ring no longer
    /// holds are left out.
    pub fn history(&self, period_ms: i64, since_ms: i64, until_ms: i64) -> Vec<api::HistoryPoint> {
        let ring = if period_ms < 3_600_000 {
            &self.minutes
        } else {
            &self.hours
        };
        let period_ms = period_ms.max(ring.bucket_ms);
        let mut out: Vec<api::HistoryPoint> = Vec::new();
        let (first, last) = (
            since_ms.div_euclid(ring.bucket_ms),
            until_ms.div_euclid(ring.bucket_ms),
        );
        // At most the ring's length of buckets is looked at, whatever the range asked.
        let first = first.max(last.saturating_sub(ring.len as i64 - 1));
        for b in first..=last {
            let Some(s) = ring.get(b) else {
                continue;
            };
            let at = b.saturating_mul(ring.bucket_ms);
            let start = at.div_euclid(period_ms).saturating_mul(period_ms);
            match out.last_mut() {
                Some(p) if p.at_ms == start => {
                    p.processed += u64::from(s.completed);
                    p.failed += u64::from(s.failed);
                    p.enqueued += u64::from(s.enqueued);
                }
                _ => out.push(api::HistoryPoint {
                    at_ms: start,
                    processed: u64::from(s.completed),
                    failed: u64::from(s.failed),
                    enqueued: u64::from(s.enqueued),
                }),
            }
        }
        out
    }

    /// A transition the metrics see. `Enqueued` is not counted here: a job counts once,
    /// when accepted ([`pushed`](Self::pushed)), not again when a schedule comes due.
    pub fn record(&mut self, now_ms: i64, what: &Observe) {
        match what {
            Observe::Enqueued => {}
            Observe::Started { wait_ms } => {
                let w = wait_ms.clamp(0.0, f64::from(u32::MAX)) as u32;
                if self.waits.len() < WAITS {
                    self.waits.push((now_ms, w));
                } else {
                    self.waits[self.next_wait] = (now_ms, w);
                }
                self.next_wait = (self.next_wait + 1) % WAITS;
            }
            Observe::Completed { .. } => {
                self.count(now_ms, |s| s.completed = s.completed.saturating_add(1));
            }
            Observe::Failed { .. } => {
                self.count(now_ms, |s| s.failed = s.failed.saturating_add(1));
            }
        }
    }

    /// The depth now (the latest sample of a bucket is what it shows).
    pub fn sample(&mut self, now_ms: i64, available: u64, active: u64) {
        let s = self.five.slot(now_ms);
        s.available = available;
        s.active = active;
    }

    pub fn view(&self, now_ms: i64) -> api::Overview {
        let now = now_ms.div_euclid(BUCKET_MS);
        let mut points = Vec::with_capacity(BUCKETS);
        for i in (0..BUCKETS as i64).rev() {
            let b = now - i;
            let s = self.five.get(b).unwrap_or_default();
            points.push(api::OverviewPoint {
                at_ms: b.saturating_mul(BUCKET_MS),
                enqueued: s.enqueued,
                completed: s.completed,
                failed: s.failed,
                available: s.available,
                active: s.active,
            });
        }
        let mut recent: Vec<u32> = self
            .waits
            .iter()
            .filter(|(at, _)| *at > now_ms.saturating_sub(WAIT_WINDOW_MS))
            .map(|(_, w)| *w)
            .collect();
        recent.sort_unstable();
        let pct = |p: usize| -> Option<u32> {
            if recent.is_empty() {
                return None;
            }
            let i = (recent.len() * p).div_ceil(100).clamp(1, recent.len()) - 1;
            Some(recent[i])
        };
        api::Overview {
            now_ms,
            bucket_ms: BUCKET_MS,
            points,
            pickup: api::Pickup {
                samples: recent.len(),
                p50_ms: pct(50),
                p99_ms: pct(99),
            },
        }
    }
}

impl Engine {
    /// Record the queues' depth for the overview (once per loop turn: a sum over queues).
    pub(in crate::engine) fn sample_overview(&mut self) {
        let (mut available, mut active) = (0u64, 0u64);
        for q in &self.index.queues {
            available = available.saturating_add(q.count(State::Available) as u64);
            active = active.saturating_add(q.count(State::Active) as u64);
        }
        let now = self.now_ms();
        self.overview.sample(now, available, active);
    }

    pub(in crate::engine) fn overview(&self) -> Answer {
        Answer::Overview(Box::new(self.overview.view(self.now_ms())))
    }

    /// STATS HISTORY (ojs-admin-api §10.2): the last hour by default.
    pub(in crate::engine) fn stats_history(
        &self,
        period_ms: i64,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
    ) -> Answer {
        let until = until_ms.unwrap_or_else(|| self.now_ms());
        let since = since_ms.unwrap_or_else(|| until.saturating_sub(3_600_000));
        Answer::History(api::History {
            period_ms,
            points: self.overview.history(period_ms.max(1), since, until),
        })
    }

    /// JOBS: matching jobs from the index, newest first (ids are UUIDv7, so by creation),
    /// then only the page's envelopes are read.
    pub(in crate::engine) fn jobs_page(&self, txn: &Txn, q: &JobsQuery) -> OjsResult<Answer> {
        let qid = match &q.queue {
            Some(name) => match self.index.find_queue(name) {
                Some(id) => Some(id),
                None => {
                    return Ok(Answer::JobPage(api::JobPage {
                        total: 0,
                        jobs: Vec::new(),
                    }))
                }
            },
            None => None,
        };
        let mut ids: Vec<uuid::Uuid> = self
            .index
            .jobs
            .iter()
            .filter(|(_, e)| {
                qid.is_none_or(|q| e.queue == q) && q.state.is_none_or(|s| e.state == s)
            })
            .map(|(id, _)| *id)
            .collect();
        let total = ids.len();
        let end = q.offset.saturating_add(q.limit).min(total);
        if q.offset >= total || q.limit == 0 {
            return Ok(Answer::JobPage(api::JobPage {
                total,
                jobs: Vec::new(),
            }));
        }
        // Only the first `end` in order are needed: partition, then sort that part.
        if end < total {
            ids.select_nth_unstable_by(end - 1, |a, b| b.cmp(a));
            ids.truncate(end);
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let mut jobs = Vec::with_capacity(end - q.offset);
        for id in &ids[q.offset..end] {
            if let Some(job) = txn.job(self.store.as_ref(), *id)? {
                let json = serde_json::to_vec(&job).unwrap_or_default();
                jobs.push(JobView::encoded(json.into()));
            }
        }
        Ok(Answer::JobPage(api::JobPage { total, jobs }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_and_roll_over_and_percentiles_use_recent_pickups() {
        let mut o = Overview::default();
        let t0 = 1_000_000_000i64;
        o.pushed(t0);
        o.pushed(t0 + 1);
        o.record(t0 + 1, &Observe::Enqueued);
        o.record(t0 + 2, &Observe::Completed { duration_ms: 1.0 });
        o.sample(t0 + 3, 7, 2);
        for w in 1..=100 {
            o.record(
                t0 + 4,
                &Observe::Started {
                    wait_ms: f64::from(w),
                },
            );
        }
        let v = o.view(t0 + 10);
        let last = v.points.last().unwrap();
        assert_eq!((last.enqueued, last.completed, last.available), (2, 1, 7));
        assert_eq!(v.points.len(), BUCKETS);
        assert_eq!((v.pickup.p50_ms, v.pickup.p99_ms), (Some(50), Some(99)));
        // Six minutes later the bucket has rolled out and the waits are too old.
        let v = o.view(t0 + 360_000);
        assert!(v.points.iter().all(|p| p.enqueued == 0));
        assert_eq!(v.pickup.samples, 0);
        assert_eq!(v.pickup.p50_ms, None);
        // A huge or negative wait is clamped, never wraps.
        o.record(t0, &Observe::Started { wait_ms: 1e30 });
        o.record(t0, &Observe::Started { wait_ms: -5.0 });
    }
}
