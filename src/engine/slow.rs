//! Reports of slow engine iterations (a stall every client waits for), rate-limited.

use std::time::{Duration, Instant};

/// An engine iteration this long is logged with what it did (a stall everyone waits for).
pub(super) const SLOW_ITERATION: Duration = Duration::from_millis(10);

/// Reports of slow iterations, at most one a second (the others are counted).
#[derive(Default)]
pub(super) struct SlowLog {
    last: Option<Instant>,
    pub(super) unlogged: u64,
}

impl SlowLog {
    pub(super) fn log_now(&mut self) -> bool {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            self.unlogged += 1;
            return false;
        }
        self.last = Some(Instant::now());
        true
    }
}
