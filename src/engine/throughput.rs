//! Per-queue throughput over the last minutes, on the engine clock: a ring of 5-second
//! buckets counting completed jobs and failed attempts, for QUEUE STATS and QUEUE LIST.

const BUCKET_MS: i64 = 5_000;
/// 60 buckets of 5 s: the last five minutes.
const BUCKETS: usize = 60;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// Which bucket (time / BUCKET_MS) the counts belong to; older ones are stale.
    bucket: i64,
    completed: u32,
    failed: u32,
}

#[derive(Debug, Default)]
pub struct Throughput {
    /// Allocated on first use, so idle queues cost nothing.
    slots: Vec<Slot>,
}

/// Counts over a window ending now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub completed: u64,
    pub failed: u64,
}

impl Throughput {
    /// A job completed (`ok`) or an attempt failed, at `now_ms`.
    pub fn record(&mut self, now_ms: i64, ok: bool) {
        if self.slots.is_empty() {
            self.slots = vec![Slot::default(); BUCKETS];
        }
        let bucket = now_ms.div_euclid(BUCKET_MS);
        let slot = &mut self.slots[bucket.rem_euclid(BUCKETS as i64) as usize];
        if slot.bucket != bucket {
            *slot = Slot {
                bucket,
                ..Slot::default()
            };
        }
        if ok {
            slot.completed = slot.completed.saturating_add(1);
        } else {
            slot.failed = slot.failed.saturating_add(1);
        }
    }

    /// Counts in the last `window_ms` (rounded up to whole buckets, at most five minutes).
    pub fn window(&self, now_ms: i64, window_ms: i64) -> Window {
        let now = now_ms.div_euclid(BUCKET_MS);
        let n = (window_ms + BUCKET_MS - 1)
            .div_euclid(BUCKET_MS)
            .clamp(1, BUCKETS as i64);
        let mut w = Window::default();
        for s in &self.slots {
            if s.bucket <= now && s.bucket > now - n {
                w.completed += u64::from(s.completed);
                w.failed += u64::from(s.failed);
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_age_out() {
        let mut t = Throughput::default();
        assert_eq!(t.window(0, 60_000), Window::default());
        t.record(1_000, true);
        t.record(2_000, true);
        t.record(50_000, false);
        let w = t.window(59_000, 60_000);
        assert_eq!((w.completed, w.failed), (2, 1));
        let w = t.window(70_000, 60_000);
        assert_eq!((w.completed, w.failed), (0, 1));
        let w = t.window(70_000, 300_000);
        assert_eq!((w.completed, w.failed), (2, 1));
        // a lap of the ring later the old slot is reused, not added to
        t.record(301_000, true);
        assert_eq!(t.window(301_000, 5_000).completed, 1);
    }
}
