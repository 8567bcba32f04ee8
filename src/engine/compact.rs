//! Giving disk back after large deletions. fjall's leveled compaction rewrites a level
//! only once it outgrows its target, so after a million jobs are completed and pruned their
//! records and tombstones can sit in the tables for a long time (bench/RESULTS.md measured
//! 5.8× the live data a minute after such a churn). The engine counts what its commits
//! delete, per space (job records; events pruned); once a space has deleted
//! `--compact-after-deletes` and at least as much as it still holds, a thread (`ojsd-compact`) compacts that space
//! while the engine goes on. One compaction runs at a time, at most one a minute.

use crate::store::{Compactor, Space};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The spaces whose records are deleted in bulk: finished jobs, pruned events.
const SPACES: [Space; 2] = [Space::Job, Space::Event];

/// Least time between the starts of two compactions.
const MIN_INTERVAL: Duration = Duration::from_secs(60);

pub const DEFAULT_AFTER_DELETES: u64 = 200_000;

pub(super) struct Compaction {
    compactor: Option<Arc<Mutex<Box<dyn Compactor>>>>,
    /// Records deleted per space (in the order of [`SPACES`]) since its last compaction.
    deleted: [u64; 2],
    after: u64,
    last: Option<Instant>,
    running: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
}

impl Compaction {
    /// `after`: deletions that make a space worth compacting (0: never).
    pub(super) fn new(compactor: Option<Box<dyn Compactor>>, after: u64) -> Compaction {
        Compaction {
            compactor: compactor
                .filter(|_| after > 0)
                .map(|c| Arc::new(Mutex::new(c))),
            deleted: [0; 2],
            after,
            last: None,
            running: Arc::new(AtomicBool::new(false)),
            done: Arc::new(AtomicU64::new(0)),
        }
    }

    /// `n` more records of `space` deleted (for events: events pruned, as their live count
    /// is in events too).
    pub(super) fn note(&mut self, space: Space, n: u64) {
        if let Some(i) = SPACES.iter().position(|s| *s == space) {
            self.deleted[i] = self.deleted[i].saturating_add(n);
        }
    }

    /// Compactions finished so far (for /metrics).
    pub(super) fn finished(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Start a compaction of the space that most needs one, if any does now. `live` gives
    /// the records a space still holds, roughly.
    pub(super) fn maybe_start(&mut self, live: impl Fn(Space) -> u64) {
        let Some(compactor) = &self.compactor else {
            return;
        };
        if self.running.load(Ordering::Acquire)
            || self.last.is_some_and(|t| t.elapsed() < MIN_INTERVAL)
        {
            return;
        }
        let due = (0..SPACES.len())
            .filter(|&n| self.deleted[n] >= self.after.max(live(SPACES[n])))
            .max_by_key(|&n| self.deleted[n]);
        let Some(n) = due else {
            return;
        };
        let space = SPACES[n];
        let deleted = std::mem::take(&mut self.deleted[n]);
        self.last = Some(Instant::now());
        self.running.store(true, Ordering::Release);
        let (compactor, running, done) =
            (compactor.clone(), self.running.clone(), self.done.clone());
        let spawned = std::thread::Builder::new()
            .name("ojsd-compact".into())
            .spawn(move || {
                let began = Instant::now();
                let result = match compactor.lock() {
                    Ok(mut c) => c.compact(space),
                    Err(_) => Ok(()),
                };
                match result {
                    Ok(()) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            ?space,
                            deleted,
                            secs = began.elapsed().as_secs_f64(),
                            "compacted after large deletions"
                        );
                    }
                    // Not fatal: the data is intact, only disk is not given back yet.
                    Err(e) => tracing::warn!(?space, error = %e, "compaction failed"),
                }
                running.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start a compaction thread");
            self.running.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreResult;

    struct Counting(Arc<Mutex<Vec<Space>>>);

    impl Compactor for Counting {
        fn compact(&mut self, space: Space) -> StoreResult<()> {
            self.0.lock().unwrap().push(space);
            Ok(())
        }
    }

    fn settle(c: &Compaction) {
        while c.running.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_space_is_compacted_once_it_deleted_enough_and_as_much_as_it_holds() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut c = Compaction::new(Some(Box::new(Counting(seen.clone()))), 100);
        c.note(Space::Job, 99);
        c.maybe_start(|_| 0);
        settle(&c);
        assert!(seen.lock().unwrap().is_empty(), "below the threshold");
        c.note(Space::Job, 1);
        // Deleted 100, but 1,000 records are still live: not yet worth it.
        c.maybe_start(|_| 1000);
        settle(&c);
        assert!(seen.lock().unwrap().is_empty());
        c.maybe_start(|_| 10);
        settle(&c);
        assert_eq!(*seen.lock().unwrap(), vec![Space::Job]);
        assert_eq!(c.finished(), 1);
        // The count starts again, and a minute must pass before the next one.
        c.note(Space::Event, 500);
        c.maybe_start(|_| 0);
        settle(&c);
        assert_eq!(seen.lock().unwrap().len(), 1);
        c.last = Some(Instant::now() - MIN_INTERVAL);
        c.maybe_start(|_| 0);
        settle(&c);
        assert_eq!(*seen.lock().unwrap(), vec![Space::Job, Space::Event]);
    }

    #[test]
    fn zero_means_never() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut c = Compaction::new(Some(Box::new(Counting(seen.clone()))), 0);
        c.note(Space::Job, 10_000);
        c.maybe_start(|_| 0);
        settle(&c);
        assert!(seen.lock().unwrap().is_empty());
    }
}
