//! `--store-floor DIR`: the store's share of the cost, without the engine. Writes the
//! pattern the engine writes for a steady stream of jobs straight to a fresh store in DIR
//! (through the `Store` trait, the same code and settings as ojsd): each commit stores
//! the new records of one batch of jobs, rewrites the records of the batch before it
//! (FETCH) and of the one before that (ACK), and appends one event-log record holding the
//! three events of every job it touches; then it syncs, as every engine commit does. The
//! rate it reaches is a ceiling for ojsd at the same commit size on this machine.
//!
//! With `raw_log`, the same bytes go to one append-only file instead (each write framed by
//! its length and key, one `fdatasync` per commit): the ceiling of the disk and kernel for
//! this pattern, with no store in between.

use ojsd::store::{Batch, Op, SledStore, Space, Store, DEFAULT_CACHE_MB};
use serde_json::{json, Value};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

pub struct Floor {
    pub jobs: u64,
    /// Jobs per commit.
    pub batch: usize,
    pub record_bytes: usize,
    pub event_bytes: usize,
    pub raw_log: bool,
}

/// Where the floor's commits go.
enum Sink {
    Sled(SledStore),
    /// One file; a commit is appended in one write and made durable with `fdatasync`.
    Raw(File, Vec<u8>),
}

impl Sink {
    fn commit(&mut self, b: Batch) -> Result<(), String> {
        match self {
            Sink::Sled(s) => s.commit(b).map_err(|e| e.to_string()),
            Sink::Raw(f, buf) => {
                buf.clear();
                for op in b.ops {
                    if let Op::Put(k, v) = op {
                        buf.extend_from_slice(&(k.len() as u32).to_be_bytes());
                        buf.extend_from_slice(&(v.len() as u32).to_be_bytes());
                        buf.extend_from_slice(&k);
                        buf.extend_from_slice(&v);
                    }
                }
                f.write_all(buf).map_err(|e| e.to_string())?;
                f.sync_data().map_err(|e| e.to_string())
            }
        }
    }

    fn size_on_disk(&self) -> u64 {
        match self {
            Sink::Sled(s) => s.size_on_disk().unwrap_or(0),
            Sink::Raw(f, _) => f.metadata().map(|m| m.len()).unwrap_or(0),
        }
    }
}

pub fn run(dir: &Path, f: &Floor) -> Result<Value, String> {
    if dir.exists() {
        return Err(format!(
            "{} exists; give a path that does not",
            dir.display()
        ));
    }
    let mut store = if f.raw_log {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let file = File::create(dir.join("log")).map_err(|e| e.to_string())?;
        Sink::Raw(file, Vec::new())
    } else {
        Sink::Sled(SledStore::open(dir, DEFAULT_CACHE_MB << 20).map_err(|e| e.to_string())?)
    };
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
        store.commit(b)?;
        commits += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let disk = store.size_on_disk();
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
    Ok(json!({
        "mode": if f.raw_log { "store-floor (raw log)" } else { "store-floor" },
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
