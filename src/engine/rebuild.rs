//! Start-up: rebuild the in-memory index from the store. Jobs that were `active` when the
//! process stopped go back to `available` (their worker's connection is gone with it).
//!
//! The job records are read by a few scanner threads, each over its own range of ids, that
//! decode them into index entries; the engine thread alone builds the index from what they
//! send. Reading the store is most of the work, and sled serves readers in parallel.
//!
//! A job is two records next to each other in key order: its job record (`<uuid>`, the
//! fields that never change) and its state record (`<uuid>` and the byte 1). A scanner
//! holds the first until the second arrives; neither is JSON. A job stored by an older
//! ojsd is one record (version 1 or 2) and is indexed from it alone.

use super::index::{Entry, QueueId, TimerKind};
use super::record::state::{self, decode_state, StateRecord, STATE_SUFFIX};
use super::record::{decode_job_record, decode_record, IndexHeader, JobRecord, RECORD_V3};
use super::txn::Txn;
use super::Engine;
use crate::job::unique::UniqueKey;
use crate::job::{parse_ts, State};
use crate::store::{Space, Store, StoreError};
use serde::Deserialize;
use std::collections::HashMap;
use uuid::Uuid;

/// The fields of a version 1 record's envelope the index needs; the rest is skipped
/// unparsed. Version 2 records carry them in a binary header instead.
#[derive(Deserialize)]
struct View {
    state: State,
    queue: String,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    scheduled_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    next_retry_at: Option<String>,
    #[serde(default)]
    completed_at: Option<String>,
    #[serde(default)]
    cancelled_at: Option<String>,
    #[serde(default)]
    discarded_at: Option<String>,
    /// Only whether it is there: the few jobs that have one are parsed in full.
    #[serde(default)]
    unique: Option<serde::de::IgnoredAny>,
}

fn ms(s: &Option<String>) -> Option<i64> {
    s.as_deref()
        .and_then(parse_ts)
        .map(|t| t.timestamp_millis())
}

impl View {
    fn header(&self) -> IndexHeader<'_> {
        IndexHeader {
            state: self.state,
            unique: self.unique.is_some(),
            priority: self.priority,
            timeout: self.timeout.filter(|t| *t > 0),
            scheduled_at: ms(&self.scheduled_at),
            next_retry_at: ms(&self.next_retry_at),
            completed_at: ms(&self.completed_at),
            cancelled_at: ms(&self.cancelled_at),
            discarded_at: ms(&self.discarded_at),
            expires_at: ms(&self.expires_at),
            queue: &self.queue,
        }
    }
}

/// Records a scanner decodes before handing them to the engine thread.
const CHUNK: usize = 1024;
/// Scanner threads at most (each holds one sled iterator).
const MAX_SCANNERS: usize = 4;

/// One job as the index will hold it.
struct Found {
    id: Uuid,
    /// `queue` is the scanner's own number for the queue until the engine maps it.
    entry: Entry,
    /// When a discarded job was discarded (for the dead-letter set).
    dead_at: Option<i64>,
}

/// What a scanner found in a run of records.
#[derive(Default)]
struct Chunk {
    /// Queues this scanner met for the first time, in the order it numbered them.
    new_queues: Vec<String>,
    jobs: Vec<Found>,
    unique: Vec<(Uuid, UniqueKey, i64)>,
    interrupted: Vec<Uuid>,
    bad: usize,
    old_format: usize,
    max_seq: u64,
}

/// Decodes job records into index entries, on a scanner thread.
struct Scanner {
    now_ms: i64,
    retention_ms: i64,
    default_timeout_secs: u64,
    /// This scanner's numbers for the queues it met.
    numbers: HashMap<String, QueueId>,
    /// A version 3 job record whose state record (the next key) has not come yet.
    waiting: Option<Waiting>,
}

/// What a version 3 job record gives the index, kept until its state record is read.
struct Waiting {
    id: Uuid,
    queue: QueueId,
    unique: Option<(UniqueKey, i64)>,
    priority: i64,
    timeout: Option<u64>,
    scheduled_at: Option<i64>,
    expires_at: Option<i64>,
    bytes: usize,
}

/// The unique key of a version 3 record's job: its client part is parsed, only for the
/// few jobs that have a `unique` policy.
fn unique_key(rec: &JobRecord<'_>) -> Option<UniqueKey> {
    #[derive(Deserialize)]
    struct Client {
        #[serde(rename = "type")]
        job_type: String,
        queue: String,
        args: Vec<serde_json::Value>,
        #[serde(default)]
        meta: serde_json::Map<String, serde_json::Value>,
        unique: serde_json::Value,
    }
    // The core is an object without its closing brace; the attributes in `extra` are
    // not OJS's and play no part in a key.
    let mut json = Vec::with_capacity(rec.core.len() + 1);
    json.extend_from_slice(rec.core);
    json.push(b'}');
    let c: Client = serde_json::from_slice(&json).ok()?;
    let policy = crate::job::unique::UniquePolicy::parse(&c.unique, &c.args).ok()?;
    Some(policy.key(&c.job_type, &c.queue, &c.args, &c.meta))
}

impl Scanner {
    fn queue(&mut self, name: &str, chunk: &mut Chunk) -> QueueId {
        if let Some(n) = self.numbers.get(name) {
            return *n;
        }
        let n = self.numbers.len() as QueueId;
        self.numbers.insert(name.to_string(), n);
        chunk.new_queues.push(name.to_string());
        n
    }

    fn add(&mut self, chunk: &mut Chunk, key: &[u8], value: &[u8]) {
        match key.len() {
            16 => {
                self.give_up_waiting(chunk);
                match Uuid::from_slice(key) {
                    Ok(id) if value.first() == Some(&RECORD_V3) => {
                        self.job_record(chunk, id, value)
                    }
                    Ok(id) => self.old_record(chunk, id, value),
                    Err(_) => chunk.bad += 1,
                }
            }
            17 if key[16] == STATE_SUFFIX => {
                match self.waiting.take() {
                    Some(w) if w.id.as_bytes()[..] == key[..16] => match decode_state(value) {
                        Some(st) => self.joined(chunk, w, &st),
                        None => chunk.bad += 1,
                    },
                    // A state record without its job record.
                    other => {
                        self.waiting = other;
                        chunk.bad += 1;
                    }
                }
            }
            _ => chunk.bad += 1,
        }
    }

    /// A version 3 job record that never got its state record is unreadable.
    fn give_up_waiting(&mut self, chunk: &mut Chunk) {
        if self.waiting.take().is_some() {
            chunk.bad += 1;
        }
    }

    fn job_record(&mut self, chunk: &mut Chunk, id: Uuid, value: &[u8]) {
        let Some(rec) = decode_job_record(value) else {
            chunk.bad += 1;
            return;
        };
        let unique = if rec.unique {
            match unique_key(&rec) {
                Some(key) => Some((key, rec.created_at.div_euclid(1000))),
                None => {
                    tracing::warn!(job = %id, "stored unique policy unreadable; not indexed");
                    None
                }
            }
        } else {
            None
        };
        let queue = self.queue(rec.queue, chunk);
        self.waiting = Some(Waiting {
            id,
            queue,
            unique,
            priority: rec.priority,
            timeout: rec.timeout,
            scheduled_at: rec.scheduled_at,
            expires_at: rec.expires_at,
            bytes: rec.core.len() + rec.extra.len(),
        });
    }

    fn joined(&mut self, chunk: &mut Chunk, w: Waiting, st: &StateRecord<'_>) {
        let h = IndexHeader {
            state: st.state,
            unique: w.unique.is_some(),
            priority: w.priority,
            timeout: w.timeout,
            scheduled_at: w.scheduled_at,
            next_retry_at: state::ms(st.next_retry_at),
            completed_at: state::ms(st.completed_at),
            cancelled_at: state::ms(st.cancelled_at),
            discarded_at: state::ms(st.discarded_at),
            expires_at: w.expires_at,
            queue: "",
        };
        if let Some((key, created)) = w.unique {
            chunk.unique.push((w.id, key, created));
        }
        self.found(chunk, w.id, &h, w.queue, st.seq, w.bytes);
    }

    /// A version 1 or 2 record: the whole envelope, with (v2) or without an index header.
    fn old_record(&mut self, chunk: &mut Chunk, id: Uuid, value: &[u8]) {
        let Some(record) = decode_record(value) else {
            chunk.bad += 1;
            return;
        };
        let view: View;
        let h = match record.header {
            Some(h) => h,
            None => match serde_json::from_slice::<View>(record.body) {
                Ok(v) => {
                    view = v;
                    view.header()
                }
                Err(_) => {
                    chunk.bad += 1;
                    return;
                }
            },
        };
        chunk.old_format += 1;
        if h.unique {
            let job = serde_json::from_slice::<crate::job::Job>(record.body).ok();
            match job.as_ref().and_then(super::jobs::unique::policy_of) {
                Some((_, key)) => {
                    let created = job.map_or(self.now_ms, |j| j.created_at.timestamp_millis());
                    chunk.unique.push((id, key, created));
                }
                None => {
                    tracing::warn!(job = %id, "stored unique policy unreadable; not indexed")
                }
            }
        }
        let queue = self.queue(h.queue, chunk);
        self.found(chunk, id, &h, queue, record.seq, record.body.len());
    }

    /// Index one job; `h.queue` is not read (`queue` is its number).
    fn found(
        &mut self,
        chunk: &mut Chunk,
        id: Uuid,
        h: &IndexHeader<'_>,
        queue: QueueId,
        seq: u64,
        bytes: usize,
    ) {
        let now_ms = self.now_ms;
        chunk.max_seq = chunk.max_seq.max(seq);
        let mut state = h.state;
        if state == State::Active {
            chunk.interrupted.push(id);
            state = State::Available;
        }
        let retention = self.retention_ms;
        let timer = match state {
            State::Scheduled => h.scheduled_at.map(|t| (t, TimerKind::Promote)),
            State::Retryable => h.next_retry_at.map(|t| (t, TimerKind::Promote)),
            State::Completed => h
                .completed_at
                .map(|t| (t.saturating_add(retention), TimerKind::Prune)),
            State::Cancelled => h
                .cancelled_at
                .map(|t| (t.saturating_add(retention), TimerKind::Prune)),
            // Dead letters are pruned by `prune_dead`, not by a timer.
            _ => None,
        };
        // A scheduled or retryable job must always have its timer; promote at once if not.
        let timer = match (state, timer) {
            (State::Scheduled | State::Retryable, None) => Some((now_ms, TimerKind::Promote)),
            (_, t) => t,
        };
        let dead_at = (state == State::Discarded).then(|| h.discarded_at.unwrap_or(now_ms));
        let timeout = h.timeout.unwrap_or(self.default_timeout_secs);
        chunk.jobs.push(Found {
            id,
            dead_at,
            entry: Entry {
                state,
                queue,
                priority: h.priority,
                seq,
                timer,
                expires: h.expires_at,
                worker: None,
                timeout_ms: crate::time::timeout_ms(timeout),
                bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            },
        });
    }

    /// Scan job records with keys in `from..to` (to the end without `to`), sending them to
    /// the engine thread in chunks tagged with `part`.
    fn run(
        mut self,
        store: &dyn Store,
        part: usize,
        (from, to): (Vec<u8>, Option<Vec<u8>>),
        tx: crossbeam_channel::Sender<(usize, Chunk)>,
    ) -> Result<(), StoreError> {
        let mut chunk = Chunk::default();
        let mut open = true;
        store.scan_from(Space::Job, &from, &mut |key, value| {
            if to.as_deref().is_some_and(|to| key >= to) {
                return false;
            }
            self.add(&mut chunk, key, value);
            if chunk.jobs.len() + chunk.bad >= CHUNK {
                // The engine thread only stops listening if it is gone; stop reading too.
                open = tx.send((part, std::mem::take(&mut chunk))).is_ok();
            }
            open
        })?;
        self.give_up_waiting(&mut chunk);
        let _ = tx.send((part, chunk));
        Ok(())
    }
}

/// Key ranges for `n` scanners: the span from the first to the last job id cut into equal
/// parts. Every key falls in exactly one range whatever the ids are; the work is only
/// shared evenly when the ids are spread over their span (UUIDv7s are, over time).
fn key_ranges(
    first: Option<&[u8]>,
    last: Option<&[u8]>,
    n: usize,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    // A state record's key is its job's id and one byte more: cut on the id.
    let as_u128 = |k: Option<&[u8]>| {
        k.filter(|k| k.len() == 16 || k.len() == 17)
            .and_then(|k| <[u8; 16]>::try_from(&k[..16]).ok())
            .map(u128::from_be_bytes)
    };
    let (Some(first), Some(last)) = (as_u128(first), as_u128(last)) else {
        return vec![(Vec::new(), None)];
    };
    let step = (last.saturating_sub(first) / n.max(1) as u128).max(1);
    let mut cuts: Vec<u128> = (1..n as u128)
        .map(|i| first.saturating_add(step.saturating_mul(i)))
        .filter(|c| *c <= last)
        .collect();
    cuts.dedup();
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut from = Vec::new();
    for cut in cuts {
        let to = cut.to_be_bytes().to_vec();
        ranges.push((from, Some(to.clone())));
        from = to;
    }
    ranges.push((from, None));
    ranges
}

/// `m/job_count`: how many jobs the store held, written by versions whose job index was a
/// hash map sized from it at start. The index is now ordered (no sizing, no rehash), so the
/// record is deleted by the first upkeep (`drop_job_count_hint`).
const JOB_COUNT: &[u8] = b"job_count";

impl Engine {
    /// Delete the obsolete job count record (once per start; harmless when absent).
    pub(super) fn drop_job_count_hint(&mut self, txn: &mut Txn) {
        if !self.index.job_count_hint_dropped {
            self.index.job_count_hint_dropped = true;
            txn.batch.delete(Space::Meta, JOB_COUNT);
        }
    }

    pub(super) fn rebuild(&mut self) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let now_ms = self.clock.now().timestamp_millis();
        let scanner = || Scanner {
            now_ms,
            retention_ms: crate::time::ms(self.cfg.retention),
            default_timeout_secs: self.cfg.default_timeout_secs,
            numbers: HashMap::new(),
            waiting: None,
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_SCANNERS);
        let (first, last) = self.store.bounds(Space::Job)?;
        let ranges = key_ranges(first.as_deref(), last.as_deref(), threads);
        let parts = ranges.len();
        let mut interrupted = Vec::new();
        let mut unique = Vec::new();
        let (mut bad, mut old_format, mut max_seq) = (0usize, 0usize, 0u64);
        let store: &dyn Store = self.store.as_ref();
        let index = &mut self.index;
        std::thread::scope(|s| -> Result<(), StoreError> {
            let (tx, rx) = crossbeam_channel::bounded::<(usize, Chunk)>(2 * parts);
            let mut handles = Vec::with_capacity(parts);
            for (part, range) in ranges.into_iter().enumerate() {
                let (scanner, tx) = (scanner(), tx.clone());
                let thread = std::thread::Builder::new()
                    .name("ojsd-rebuild".into())
                    .spawn_scoped(s, move || scanner.run(store, part, range, tx))
                    .map_err(StoreError::from)?;
                handles.push(thread);
            }
            drop(tx);
            // Each scanner's own numbers for queues, mapped to the index's.
            let mut queue_ids: Vec<Vec<QueueId>> = vec![Vec::new(); parts];
            for (part, chunk) in rx {
                let map = &mut queue_ids[part];
                map.extend(chunk.new_queues.iter().map(|name| index.queue_id(name)));
                for Found {
                    id,
                    mut entry,
                    dead_at,
                } in chunk.jobs
                {
                    let Some(queue) = map.get(entry.queue as usize) else {
                        bad += 1;
                        continue;
                    };
                    entry.queue = *queue;
                    if let Some(at) = dead_at {
                        index.add_dead(at, id);
                    }
                    index.insert(id, entry);
                }
                interrupted.extend(chunk.interrupted);
                unique.extend(chunk.unique);
                bad += chunk.bad;
                old_format += chunk.old_format;
                max_seq = max_seq.max(chunk.max_seq);
            }
            for thread in handles {
                thread
                    .join()
                    .map_err(|_| StoreError::Other("a rebuild thread panicked".into()))??;
            }
            Ok(())
        })?;
        tracing::info!(
            records = self.index.jobs.len() + bad,
            old_format,
            threads = parts,
            ms = started.elapsed().as_millis() as u64,
            "job records scanned"
        );
        self.index.next_seq = max_seq + 1;
        // Key order, as a single scan would have found them (holders are kept oldest first).
        unique.sort_unstable_by_key(|(id, _, _)| *id);
        self.index_unique(unique);
        let (mut paused, mut limits) = (Vec::new(), Vec::new());
        self.store.scan(Space::Meta, &mut |key, value| {
            if let Some(name) = key.strip_prefix(super::admin::PAUSED_PREFIX.as_bytes()) {
                paused.push(String::from_utf8_lossy(name).into_owned());
            } else if let Some(name) = key.strip_prefix(super::admin::LIMIT_PREFIX.as_bytes()) {
                limits.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
            }
            true
        })?;
        for name in paused {
            let q = self.index.queue_id(&name);
            self.index.queue_mut(q).paused = true;
        }
        for (name, value) in limits {
            self.load_queue_limit(&name, &value);
        }
        // Rewrite interrupted jobs as available, in one commit, before serving anyone.
        self.now = self.clock.now();
        let mut txn = Txn::default();
        for id in &interrupted {
            let now = self.now;
            match txn.job_mut(self.store.as_ref(), *id) {
                Ok(job) => {
                    job.state = State::Available;
                    job.started_at = None;
                    job.worker_id = None;
                    job.enqueued_at = Some(now);
                }
                Err(e) => {
                    tracing::error!(job = %id, error = %e, "could not requeue interrupted job")
                }
            }
        }
        let index = &self.index;
        let _ = txn.seal(|id| index.jobs.get(&id).map(|e| e.seq).unwrap_or(0));
        self.store.commit(std::mem::take(&mut txn.batch))?;
        if bad > 0 {
            tracing::warn!(records = bad, "unreadable job records were skipped");
        }
        tracing::info!(
            jobs = self.index.jobs.len(),
            requeued = interrupted.len(),
            ms = started.elapsed().as_millis() as u64,
            "index rebuilt from the store"
        );
        Ok(())
    }
}

#[cfg(test)]
#[path = "rebuild_tests.rs"]
mod tests;
