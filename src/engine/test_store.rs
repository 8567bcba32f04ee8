//! A real store wrapped for the engine's tests: its syncs and commits wait while a gate the
//! test holds is shut (so a test sees what leaves before a batch is durable without timing
//! anything), its reads of job records are counted (so a test sees what the cache
//! served, and so are its reads of the event log), and it says its last batch is still held uncommitted while `holding` is set
//! (as PostgreSQL's store does between commit rounds).

use crate::store::{Batch, Bounds, Space, Store, StoreResult, Syncer};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Shut: syncs (and commits) wait until it opens.
#[derive(Clone, Default)]
pub(super) struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub(super) fn set(&self, shut: bool) {
        *self.0 .0.lock().unwrap() = shut;
        self.0 .1.notify_all();
    }

    fn pass(&self) {
        let mut shut = self.0 .0.lock().unwrap();
        while *shut {
            shut = self.0 .1.wait(shut).unwrap();
        }
    }
}

pub(super) struct Wrapped {
    inner: Box<dyn Store>,
    pub(super) gate: Gate,
    pub(super) job_reads: Arc<AtomicUsize>,
    /// Reads of the event log from a key on (`scan_from`).
    pub(super) event_scans: Arc<AtomicUsize>,
    pub(super) holding: Arc<AtomicBool>,
}

impl Wrapped {
    pub(super) fn new(inner: Box<dyn Store>) -> Wrapped {
        Wrapped {
            inner,
            gate: Gate::default(),
            job_reads: Arc::default(),
            event_scans: Arc::default(),
            holding: Arc::default(),
        }
    }
}

struct GatedSyncer {
    inner: Box<dyn Syncer>,
    gate: Gate,
}

impl Syncer for GatedSyncer {
    fn sync(&mut self) -> StoreResult<()> {
        self.gate.pass();
        self.inner.sync()
    }
}

impl Store for Wrapped {
    fn commit(&mut self, batch: Batch) -> StoreResult<()> {
        self.gate.pass();
        self.inner.commit(batch)
    }
    fn write(&mut self, batch: Batch) -> StoreResult<()> {
        self.inner.write(batch)
    }
    fn still_pending(&self, _mark: u64) -> bool {
        self.holding.load(Ordering::SeqCst)
    }
    fn syncer(&self) -> StoreResult<Box<dyn Syncer>> {
        Ok(Box::new(GatedSyncer {
            inner: self.inner.syncer()?,
            gate: self.gate.clone(),
        }))
    }
    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        if space == Space::Job {
            self.job_reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.get(space, key)
    }
    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()> {
        self.inner.scan(space, f)
    }
    fn scan_from(
        &self,
        space: Space,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        if space == Space::Event {
            self.event_scans.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.scan_from(space, from, f)
    }
    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.inner.floor_key(space, key)
    }
    fn bounds(&self, space: Space) -> StoreResult<Bounds> {
        self.inner.bounds(space)
    }
    fn size_on_disk(&self) -> StoreResult<u64> {
        self.inner.size_on_disk()
    }
    fn name(&self) -> &'static str {
        "wrapped"
    }
}
