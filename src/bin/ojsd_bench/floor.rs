//! `--store-floor DIR`: the store's share of the cost, without the engine. Writes the
//! pattern the engine writes for a steady stream of jobs straight to a fresh store in DIR
//! (through the `Store` trait, the same code and settings as ojsd): each commit stores
//! the new records of one batch of jobs, rewrites the records of the batch before it
//! (FETCH) and of the one before that (ACK), and appends one event-log record holding the
//! three events of every job it touches; then it syncs, as every engine commit does. The
//! rate it reaches is a ceiling for ojsd at the same commit size on this machine.

use ojsd::store::{Batch, SledStore, Space, Store};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

pub struct Floor {
    pub jobs: u64,
    /// Jobs per commit.
    pub batch: usize,
    pub record_bytes: usize,
    pub event_bytes: usize,
}

pub fn run(dir: &Path, f: &Floor) -> Result<Value, String> {
    if dir.exists() {
        return Err(format!(
            "{} exists; give a path that does not",
            dir.display()
        ));
    }
    let mut store = SledStore::open(dir, 256 << 20).map_err(|e| e.to_string())?;
    let ids: Vec<[u8; 16]> = (0..f.jobs)
        .map(|_| *uuid::Uuid::now_v7().as_bytes())
        .collect();
    let record = vec![b'x'; f.record_bytes];
    let batches: Vec<&[[u8; 16]]> = ids.chunks(f.batch.max(1)).collect();
    let mut cursor = 1u64;
    let mut commits = 0u64;
    let start = Instant::now();
    // Commit k: PUSH of batch k, FETCH of batch k-1, ACK of batch k-2.
    for k in 0..batches.len() + 2 {
        let mut b = Batch::default();
        let mut events = 0;
        for phase in 0..3 {
            let Some(jobs) = k.checked_sub(phase).and_then(|i| batches.get(i)) else {
                continue;
            };
            for id in jobs.iter() {
                b.put(Space::Job, id, record.clone());
            }
            events += jobs.len();
        }
        b.put(
            Space::Event,
            &cursor.to_be_bytes(),
            vec![b'e'; events * f.event_bytes],
        );
        cursor += events as u64;
        store.commit(b).map_err(|e| e.to_string())?;
        commits += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let disk = store.size_on_disk().unwrap_or(0);
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    Ok(json!({
        "mode": "store-floor",
        "jobs": f.jobs,
        "jobs_per_commit": f.batch,
        "record_bytes": f.record_bytes,
        "event_bytes": f.event_bytes,
        "commits": commits,
        "jobs_per_s": super::report::round3(f.jobs as f64 / secs),
        "us_per_job": super::report::round3(secs * 1e6 / f.jobs as f64),
        "us_per_commit": super::report::round3(secs * 1e6 / commits as f64),
        "disk_bytes": disk,
    }))
}
