//! `--store-floor DIR`: the store's share of the cost, without the engine. Writes the
//! pattern the engine writes for a steady stream of jobs straight to a fresh store in DIR
//! (through the `Store` trait, the same code and settings as ojsd), one commit at a time,
//! each made durable before the next, as every engine commit is. The rate it reaches is a
//! ceiling for ojsd at the same commit size on this machine.
//!
//! Commit k carries the PUSH of batch k, the FETCH of batch k-1 and the ACK of batch k-2,
//! and one event-log record holding the three events of every job it touches. Patterns:
//!
//! - `full` (ojsd today): PUSH, FETCH and ACK each rewrite the job's whole record
//!   (`--record-bytes`, default 860), events of 350 bytes.
//! - `lean` (what the engine writes since its lean per-job path, `src/engine/record/`): at
//!   PUSH the job record (`--record-bytes`, default 300) and a state record under the
//!   job's id plus the byte 1; FETCH and ACK each write the state record only; events of
//!   120 bytes. State records are modelled at 48 bytes; the engine's are 24 at PUSH (an
//!   available job), 36 + the worker id at FETCH, 44 + the result's JSON at ACK. Its
//!   job record is the client's part of the envelope plus a 54-byte header and the queue
//!   name: about 140 bytes less than the `full` record of the same job (the system
//!   attributes and the old header), not the 300 of the default, which is a compact target.
//!
//! Reported: jobs/s, commit latency percentiles, bytes allocated on disk (`du`), and the
//! time to close, reopen the store and scan every job record (a restart's store work).
//!
//! `--churn N`: jobs written, then deleted, N times over: write every job with the pattern,
//! then delete every record written (job records, state records, event records) in
//! commits of the same size. The disk is measured after each phase, after a 2 s pause
//! (background compaction) and after a reopen.
//!
//! With `raw_log`, the same bytes go to one append-only file instead (each write framed by
//! its length and key, one `fdatasync` per commit): the ceiling of the disk and kernel for
//! this pattern, with no store in between.

use super::report::{round3, Latency};
use ojsd::store::{allocated_bytes, Batch, Op, Space, Store, StoreKind, DEFAULT_CACHE_MB};
use serde_json::{json, Value};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FloorStore {
    Fjall,
    Sled,
    /// redb 4 (only with `--features redb`; not a store ojsd can run on).
    Redb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    Full,
    Lean,
}

pub struct Floor {
    pub store: FloorStore,
    pub pattern: Pattern,
    pub jobs: u64,
    /// Jobs per commit.
    pub batch: usize,
    pub record_bytes: Option<usize>,
    pub event_bytes: Option<usize>,
    pub raw_log: bool,
    /// Write-then-delete cycles (0: a plain run).
    pub churn: u32,
}

const STATE_BYTES: usize = 48;

/// Where the floor's commits go.
enum Sink {
    Store(Box<dyn Store>),
    /// One file; a commit is appended in one write and made durable with `fdatasync`.
    Raw(File, Vec<u8>),
}

impl Sink {
    fn commit(&mut self, b: Batch) -> Result<(), String> {
        match self {
            Sink::Store(s) => s.commit(b).map_err(|e| e.to_string()),
            Sink::Raw(f, buf) => {
                buf.clear();
                for op in b.ops {
                    let (k, v) = match op {
                        Op::Put(k, v) => (k, v),
                        Op::Delete(k) => (k, Vec::new()),
                    };
                    buf.extend_from_slice(&(k.len() as u32).to_be_bytes());
                    buf.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    buf.extend_from_slice(&k);
                    buf.extend_from_slice(&v);
                }
                f.write_all(buf).map_err(|e| e.to_string())?;
                f.sync_data().map_err(|e| e.to_string())
            }
        }
    }
}

fn open_store(kind: FloorStore, dir: &Path) -> Result<Box<dyn Store>, String> {
    let cache = DEFAULT_CACHE_MB << 20;
    match kind {
        FloorStore::Fjall => ojsd::store::open(StoreKind::Fjall, dir, cache),
        FloorStore::Sled => ojsd::store::open(StoreKind::Sled, dir, cache),
        #[cfg(feature = "redb")]
        FloorStore::Redb => {
            super::redb_floor::RedbStore::open(dir, cache).map(|s| Box::new(s) as Box<dyn Store>)
        }
        #[cfg(not(feature = "redb"))]
        FloorStore::Redb => {
            return Err(
                "this ojsd-bench was built without redb: cargo build --release \
                        --features redb --bin ojsd-bench"
                    .into(),
            )
        }
    }
    .map_err(|e| e.to_string())
}

fn du(dir: &Path) -> u64 {
    allocated_bytes(dir).unwrap_or(0)
}

/// The records one pass writes, so that a churn run can delete them all again.
#[derive(Default)]
struct Written {
    jobs: Vec<[u8; 16]>,
    events: Vec<u64>,
}

struct Shape {
    record: Vec<u8>,
    state: Vec<u8>,
    event_bytes: usize,
    lean: bool,
}

/// Write `ids` with the pattern, `batch` per commit; commit latencies go to `lat`.
fn write_pass(
    sink: &mut Sink,
    ids: &[[u8; 16]],
    batch: usize,
    shape: &Shape,
    cursor: &mut u64,
    lat: &mut Vec<u64>,
    written: &mut Written,
) -> Result<u64, String> {
    let batches: Vec<&[[u8; 16]]> = ids.chunks(batch.max(1)).collect();
    let mut commits = 0;
    for k in 0..batches.len() + 2 {
        let mut b = Batch::default();
        let mut events = 0;
        for phase in 0..3 {
            let Some(jobs) = k.checked_sub(phase).and_then(|i| batches.get(i)) else {
                continue;
            };
            for id in jobs.iter() {
                // `full` rewrites the record at every transition, `lean` writes it at PUSH
                // and a state record at every transition, PUSH included.
                if !shape.lean || phase == 0 {
                    b.put(Space::Job, id, shape.record.clone());
                }
                if shape.lean {
                    b.put(Space::Job, &state_key(id), shape.state.clone());
                }
            }
            events += jobs.len();
        }
        b.put(
            Space::Event,
            &cursor.to_be_bytes(),
            vec![b'e'; events * shape.event_bytes],
        );
        written.events.push(*cursor);
        *cursor += events as u64;
        let t = Instant::now();
        sink.commit(b)?;
        lat.push(t.elapsed().as_nanos() as u64);
        commits += 1;
    }
    written.jobs.extend_from_slice(ids);
    Ok(commits)
}

fn state_key(id: &[u8; 16]) -> [u8; 17] {
    let mut k = [1u8; 17];
    k[..16].copy_from_slice(id);
    k
}

/// Delete everything `written` holds, `batch` jobs (and as many event records) per commit.
fn delete_pass(
    sink: &mut Sink,
    written: &mut Written,
    batch: usize,
    lean: bool,
    lat: &mut Vec<u64>,
) -> Result<(), String> {
    let jobs = std::mem::take(&mut written.jobs);
    let mut events = std::mem::take(&mut written.events).into_iter();
    for chunk in jobs.chunks(batch.max(1)) {
        let mut b = Batch::default();
        for id in chunk {
            b.delete(Space::Job, id);
            if lean {
                b.delete(Space::Job, &state_key(id));
            }
        }
        if let Some(c) = events.next() {
            b.delete(Space::Event, &c.to_be_bytes());
        }
        let t = Instant::now();
        sink.commit(b)?;
        lat.push(t.elapsed().as_nanos() as u64);
    }
    let rest: Vec<u64> = events.collect();
    for chunk in rest.chunks(batch.max(1)) {
        let mut b = Batch::default();
        for c in chunk {
            b.delete(Space::Event, &c.to_be_bytes());
        }
        sink.commit(b)?;
    }
    Ok(())
}

/// Close, reopen and scan every job record: (open ms, scan ms, records seen).
fn reopen(sink: &mut Sink, kind: FloorStore, dir: &Path) -> Result<(f64, f64, u64), String> {
    let Sink::Store(_) = sink else {
        return Ok((0.0, 0.0, 0));
    };
    // Drop the old store (and its lock) before opening again.
    *sink = Sink::Raw(File::open("/dev/null").map_err(|e| e.to_string())?, vec![]);
    let t = Instant::now();
    let store = open_store(kind, dir)?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let mut n = 0u64;
    store
        .scan(Space::Job, &mut |_, _| {
            n += 1;
            true
        })
        .map_err(|e| e.to_string())?;
    let scan_ms = t.elapsed().as_secs_f64() * 1e3;
    *sink = Sink::Store(store);
    Ok((round3(open_ms), round3(scan_ms), n))
}

pub fn run(dir: &Path, f: &Floor) -> Result<Value, String> {
    if dir.exists() {
        return Err(format!(
            "{} exists; give a path that does not",
            dir.display()
        ));
    }
    let lean = f.pattern == Pattern::Lean;
    let shape = Shape {
        record: vec![b'x'; f.record_bytes.unwrap_or(if lean { 300 } else { 860 })],
        state: vec![b's'; STATE_BYTES],
        event_bytes: f.event_bytes.unwrap_or(if lean { 120 } else { 350 }),
        lean,
    };
    let mut sink = if f.raw_log {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let file = File::create(dir.join("log")).map_err(|e| e.to_string())?;
        Sink::Raw(file, Vec::new())
    } else {
        Sink::Store(open_store(f.store, dir)?)
    };
    let store_name = if f.raw_log {
        "raw log".to_string()
    } else {
        format!("{:?}", f.store).to_lowercase()
    };
    let disk_empty = du(dir);
    let new_ids = || -> Vec<[u8; 16]> {
        (0..f.jobs)
            .map(|_| *uuid::Uuid::now_v7().as_bytes())
            .collect()
    };
    let mut cursor = 1u64;
    let mut lat = Vec::new();
    let mut written = Written::default();
    let mut out = json!({
        "mode": "store-floor",
        "store": store_name,
        "pattern": format!("{:?}", f.pattern).to_lowercase(),
        "jobs": f.jobs,
        "jobs_per_commit": f.batch,
        "record_bytes": shape.record.len(),
        "event_bytes": shape.event_bytes,
    });

    let ids = new_ids();
    let start = Instant::now();
    let commits = write_pass(
        &mut sink,
        &ids,
        f.batch,
        &shape,
        &mut cursor,
        &mut lat,
        &mut written,
    )?;
    let secs = start.elapsed().as_secs_f64();
    let latency = Latency::from_nanos(std::mem::take(&mut lat));
    out["commits"] = json!(commits);
    out["jobs_per_s"] = json!(round3(f.jobs as f64 / secs));
    out["us_per_job"] = json!(round3(secs * 1e6 / f.jobs as f64));
    out["commit_ms"] = latency.json();
    out["disk_empty_bytes"] = json!(disk_empty);
    out["disk_bytes"] = json!(du(dir));

    if f.churn == 0 {
        let (open_ms, scan_ms, n) = reopen(&mut sink, f.store, dir)?;
        if !f.raw_log {
            out["reopen_ms"] = json!(open_ms);
            out["scan_ms"] = json!(scan_ms);
            out["scanned"] = json!(n);
        }
    } else {
        // Cycle 1's deletes, then cycles 2..=N (new jobs written, then deleted).
        let mut del_lat = Vec::new();
        let mut disk = vec![("written_1".to_string(), du(dir))];
        let mut peak = du(dir);
        for cycle in 1..=f.churn {
            if cycle > 1 {
                let ids = new_ids();
                write_pass(
                    &mut sink,
                    &ids,
                    f.batch,
                    &shape,
                    &mut cursor,
                    &mut lat,
                    &mut written,
                )?;
                let d = du(dir);
                peak = peak.max(d);
                disk.push((format!("written_{cycle}"), d));
            }
            delete_pass(&mut sink, &mut written, f.batch, lean, &mut del_lat)?;
            disk.push((format!("deleted_{cycle}"), du(dir)));
        }
        std::thread::sleep(Duration::from_secs(2));
        disk.push(("deleted_after_2s".to_string(), du(dir)));
        let (open_ms, scan_ms, n) = reopen(&mut sink, f.store, dir)?;
        disk.push(("reopened".to_string(), du(dir)));
        out["disk_churn_bytes"] =
            Value::Object(disk.into_iter().map(|(k, v)| (k, json!(v))).collect());
        out["disk_churn_peak_bytes"] = json!(peak);
        out["churn_commit_ms"] = Latency::from_nanos(std::mem::take(&mut lat)).json();
        out["delete_commit_ms"] = Latency::from_nanos(del_lat).json();
        out["reopen_ms"] = json!(open_ms);
        out["scan_ms"] = json!(scan_ms);
        out["scanned_after_delete"] = json!(n);
    }
    drop(sink);
    let _ = std::fs::remove_dir_all(dir);
    Ok(out)
}
