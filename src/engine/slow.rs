//! Reports of slow engine iterations (a stall every client waits for), rate-limited.

use std::time::{Duration, Instant};

/// An engine iteration this long is logged with what it did (a stall everyone waits for).
pub(super) const SLOW_ITERATION: Duration = Duration::from_millis(10);

/// CPU time the calling thread has used: set beside an iteration's wall time, it tells a
/// slow iteration that worked (CPU ≈ wall) from one that waited (for the disk, or for a
/// core another thread held: CPU ≪ wall).
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Reports of slow iterations, at most one a second (the others are counted).
#[derive(Default)]
pub(super) struct SlowLog {
    last: Option<Instant>,
    pub(super) unlogged: u64,
    /// The last commit's parts: the store's write, then the inline sync (wall and this
    /// thread's CPU: the kernel's work in `fdatasync` is charged to the caller).
    pub(super) write: Duration,
    pub(super) sync: Duration,
    pub(super) sync_cpu: Duration,
}

/// Wall and thread-CPU time of `f`.
pub(super) fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (began, cpu) = (Instant::now(), thread_cpu());
    let out = f();
    (out, began.elapsed(), thread_cpu().saturating_sub(cpu))
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
