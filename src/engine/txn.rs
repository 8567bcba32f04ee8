//! What one engine batch changes, before it is committed: decoded job bodies that were
//! touched (so several changes to one job cost one write), metadata writes, and the replies
//! that may only be sent once the commit is durable.

use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::parts::Parts;
use crate::job::{Job, State};
use crate::protocol::Reply;
use crate::store::{Batch, Space, Store};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use tokio::sync::oneshot;
use uuid::Uuid;

/// A reply whose body may be a job written by this same batch.
pub enum Out {
    Reply(Reply),
    Job(Uuid),
    /// Jobs claimed by a FETCH (one object, or an array when `array`). If this reply
    /// cannot be delivered, the claim is undone.
    Claimed {
        ids: Vec<Uuid>,
        array: bool,
    },
}

/// A job this batch touched, with its client-supplied part already encoded once known.
struct Touched {
    job: Job,
    parts: Option<Parts>,
    /// The job's JSON as a reply of this batch already composed it, while the job has not
    /// changed since (PUSH replies): the store write reuses it.
    body: Option<Bytes>,
}

#[derive(Default)]
pub struct Txn {
    /// `None` marks a deletion.
    jobs: HashMap<Uuid, Option<Touched>>,
    /// The engine's decoded-job cache, lent to the batch: jobs are taken from it on first
    /// touch and put back when the batch is sealed.
    pub cache: JobCache,
    pub batch: Batch,
    pub out: Vec<(oneshot::Sender<Reply>, Out)>,
    /// Events of this batch, in cursor order; written to the log when the batch is sealed.
    pub events: Vec<crate::events::Event>,
}

/// Recently written, not yet finished jobs, decoded, with their encoded client part: a
/// FETCH shortly after PUSH, or an ACK shortly after FETCH, neither reads nor decodes the
/// stored record nor re-encodes the envelope. Bounded; the oldest insertions go first.
pub struct JobCache {
    map: HashMap<Uuid, (u64, Job, Parts)>,
    /// Insertion order as (id, tick); an entry whose tick no longer matches is stale.
    order: VecDeque<(Uuid, u64)>,
    tick: u64,
    cap: usize,
}

/// Jobs kept decoded: about 2 KiB each with ~300 bytes of args, so ~32 MiB at most.
const CACHE_JOBS: usize = 16_384;

impl Default for JobCache {
    fn default() -> Self {
        JobCache::with_capacity(CACHE_JOBS)
    }
}

impl JobCache {
    pub fn with_capacity(cap: usize) -> JobCache {
        JobCache {
            map: HashMap::new(),
            order: VecDeque::new(),
            tick: 0,
            cap,
        }
    }

    fn put(&mut self, id: Uuid, job: Job, parts: Parts) {
        if self.cap == 0 {
            return;
        }
        self.tick += 1;
        self.map.insert(id, (self.tick, job, parts));
        self.order.push_back((id, self.tick));
        while self.map.len() > self.cap {
            let Some((old, tick)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|e| e.0 == tick) {
                self.map.remove(&old);
            }
        }
        // Jobs taken and put back leave stale order entries; drop them now and then.
        if self.order.len() > 4 * self.cap.max(1024) {
            let map = &self.map;
            self.order
                .retain(|(id, tick)| map.get(id).is_some_and(|e| e.0 == *tick));
        }
    }

    fn take(&mut self, id: Uuid) -> Option<(Job, Parts)> {
        self.map.remove(&id).map(|(_, job, parts)| (job, parts))
    }

    fn get(&self, id: Uuid) -> Option<(&Job, &Parts)> {
        self.map.get(&id).map(|(_, job, parts)| (job, parts))
    }

    fn remove(&mut self, id: Uuid) {
        self.map.remove(&id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Stored job records (`j/<uuid>`). Integers are big-endian.
///
/// Version 1 (still read): `1`, seq u64, the envelope JSON clients see.
///
/// Version 2 (written): `2`, seq u64, then the index header, so `rebuild` needs no JSON:
///
/// | bytes  | field                                                              |
/// |--------|--------------------------------------------------------------------|
/// | 1      | state (`state_byte`)                                               |
/// | 1      | flags: bit 0 = the job has `unique`; other bits must be 0          |
/// | 8      | priority, i64                                                      |
/// | 8      | timeout, u64 seconds; 0 = none (server default)                    |
/// | 6 × 8  | scheduled_at, next_retry_at, completed_at, cancelled_at,           |
/// |        | discarded_at, expires_at: i64 unix ms; `NO_TIME` = none            |
/// | 4      | queue name length, u32                                             |
/// | 4      | JSON body length, u32                                              |
/// | n      | queue name, UTF-8                                                  |
///
/// then the envelope JSON, exactly "body length" bytes.
const RECORD_V1: u8 = 1;
const RECORD_V2: u8 = 2;
const FLAG_UNIQUE: u8 = 1;
const NO_TIME: i64 = i64::MIN;

/// What `rebuild` needs of a job, read from a version 2 record without touching its JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexHeader<'a> {
    pub state: State,
    /// Whether the job carries a `unique` policy (such jobs are parsed in full at start).
    pub unique: bool,
    pub priority: i64,
    /// Seconds; `None` when absent or 0 (both mean the server default).
    pub timeout: Option<u64>,
    /// Unix ms, like the fields below.
    pub scheduled_at: Option<i64>,
    pub next_retry_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub discarded_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub queue: &'a str,
}

impl IndexHeader<'_> {
    /// The header of a job as it is about to be written. `scheduled_at` and `expires_at`
    /// are the client's strings; an unparseable one counts as absent, as it always has.
    pub fn of(job: &Job) -> IndexHeader<'_> {
        let ms = |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.timestamp_millis());
        IndexHeader {
            state: job.state,
            unique: job.unique.is_some(),
            priority: job.priority,
            timeout: job.timeout.filter(|t| *t > 0),
            scheduled_at: ms(job.scheduled_time()),
            next_retry_at: ms(job.next_retry_at),
            completed_at: ms(job.completed_at),
            cancelled_at: ms(job.cancelled_at),
            discarded_at: ms(job.discarded_at),
            expires_at: ms(job.expires_time()),
            queue: &job.queue,
        }
    }
}

/// A decoded job record, borrowing from the stored bytes.
#[derive(Debug)]
pub struct Record<'a> {
    pub seq: u64,
    /// `None` for a version 1 record: the index fields are only in the JSON.
    pub header: Option<IndexHeader<'a>>,
    /// The envelope JSON clients see.
    pub body: &'a [u8],
}

/// The state's byte in a record. Stored on disk: never renumber.
fn state_byte(s: State) -> u8 {
    match s {
        State::Scheduled => 0,
        State::Available => 1,
        State::Pending => 2,
        State::Active => 3,
        State::Completed => 4,
        State::Retryable => 5,
        State::Cancelled => 6,
        State::Discarded => 7,
    }
}

fn state_of_byte(b: u8) -> Option<State> {
    Some(match b {
        0 => State::Scheduled,
        1 => State::Available,
        2 => State::Pending,
        3 => State::Active,
        4 => State::Completed,
        5 => State::Retryable,
        6 => State::Cancelled,
        7 => State::Discarded,
        _ => return None,
    })
}

/// A job record (version 2) and the offset of its JSON body within it.
pub fn encode_record(seq: u64, job: &Job, parts: &Parts) -> (Vec<u8>, usize) {
    encode_record_with(seq, job, |v| parts.compose(job, v))
}

/// `encode_record` with the JSON written by `body`.
fn encode_record_with(seq: u64, job: &Job, body: impl FnOnce(&mut Vec<u8>)) -> (Vec<u8>, usize) {
    let h = IndexHeader::of(job);
    let mut v = Vec::with_capacity(1024);
    v.push(RECORD_V2);
    v.extend_from_slice(&seq.to_be_bytes());
    v.push(state_byte(h.state));
    v.push(if h.unique { FLAG_UNIQUE } else { 0 });
    v.extend_from_slice(&h.priority.to_be_bytes());
    v.extend_from_slice(&h.timeout.unwrap_or(0).to_be_bytes());
    for t in [
        h.scheduled_at,
        h.next_retry_at,
        h.completed_at,
        h.cancelled_at,
        h.discarded_at,
        h.expires_at,
    ] {
        v.extend_from_slice(&t.unwrap_or(NO_TIME).to_be_bytes());
    }
    // Lengths cannot reach 4 GiB (lines are limited to a few MiB); if one did, the record
    // would be refused on reading rather than misread.
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes();
    v.extend_from_slice(&len32(h.queue.len()));
    let body_len_at = v.len();
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(h.queue.as_bytes());
    let body_at = v.len();
    body(&mut v);
    let body_len = len32(v.len() - body_at);
    v[body_len_at..body_len_at + 4].copy_from_slice(&body_len);
    (v, body_at)
}

/// Reads a record front to back; every read fails on too few bytes instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    fn u32(&mut self) -> Option<usize> {
        self.take().map(u32::from_be_bytes).map(|n| n as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }

    fn time(&mut self) -> Option<Option<i64>> {
        self.i64().map(|t| (t != NO_TIME).then_some(t))
    }
}

/// Read a record of either version; `None` if it is not one (unknown version, truncated,
/// or a header that does not add up).
pub fn decode_record(bytes: &[u8]) -> Option<Record<'_>> {
    let mut r = Reader(bytes);
    let version = r.u8()?;
    let seq = r.u64()?;
    match version {
        RECORD_V1 => Some(Record {
            seq,
            header: None,
            body: r.0,
        }),
        RECORD_V2 => {
            let state = state_of_byte(r.u8()?)?;
            let flags = r.u8()?;
            if flags & !FLAG_UNIQUE != 0 {
                return None;
            }
            let priority = r.i64()?;
            let timeout = Some(r.u64()?).filter(|t| *t > 0);
            let scheduled_at = r.time()?;
            let next_retry_at = r.time()?;
            let completed_at = r.time()?;
            let cancelled_at = r.time()?;
            let discarded_at = r.time()?;
            let expires_at = r.time()?;
            let queue_len = r.u32()?;
            let body_len = r.u32()?;
            let queue = std::str::from_utf8(r.bytes(queue_len)?).ok()?;
            let body = r.0;
            let object = body.first() == Some(&b'{') && body.last() == Some(&b'}');
            if body.len() != body_len || !object {
                return None;
            }
            Some(Record {
                seq,
                header: Some(IndexHeader {
                    state,
                    unique: flags & FLAG_UNIQUE != 0,
                    priority,
                    timeout,
                    scheduled_at,
                    next_retry_at,
                    completed_at,
                    cancelled_at,
                    discarded_at,
                    expires_at,
                    queue,
                }),
                body,
            })
        }
        _ => None,
    }
}

pub fn backend(msg: impl std::fmt::Display) -> OjsError {
    OjsError::new(ErrorCode::BackendError, msg.to_string())
}

pub fn read_job(store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
    let Some(raw) = store.get(Space::Job, id.as_bytes()).map_err(backend)? else {
        return Ok(None);
    };
    let record = decode_record(&raw).ok_or_else(|| backend(format!("job {id}: bad record")))?;
    serde_json::from_slice(record.body)
        .map(Some)
        .map_err(|e| backend(format!("job {id}: {e}")))
}

impl Txn {
    /// A batch that may use (and will refill) the engine's cache.
    pub fn with_cache(cache: JobCache) -> Txn {
        Txn {
            cache,
            ..Txn::default()
        }
    }

    /// The job body for modification, loaded into this batch on first touch.
    pub fn job_mut(&mut self, store: &dyn Store, id: Uuid) -> OjsResult<&mut Job> {
        let slot = match self.jobs.entry(id) {
            std::collections::hash_map::Entry::Occupied(o) => {
                let slot = o.into_mut();
                if let Some(t) = slot {
                    t.body = None; // the caller may change the job
                }
                slot
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                let touched = match self.cache.take(id) {
                    Some((job, parts)) => Touched {
                        job,
                        parts: Some(parts),
                        body: None,
                    },
                    None => Touched {
                        job: read_job(store, id)?.ok_or_else(|| {
                            backend(format!("job {id} is indexed but not stored"))
                        })?,
                        parts: None,
                        body: None,
                    },
                };
                v.insert(Some(touched))
            }
        };
        slot.as_mut()
            .map(|t| &mut t.job)
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} was deleted")))
    }

    /// A read-only view: this batch's copy if it has one, else the cache's or the store's.
    pub fn job(&self, store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
        match self.jobs.get(&id) {
            Some(t) => Ok(t.as_ref().map(|t| t.job.clone())),
            None => match self.cache.get(id) {
                Some((job, _)) => Ok(Some(job.clone())),
                None => read_job(store, id),
            },
        }
    }

    /// The job as this batch left it, if the batch touched it and did not delete it.
    pub fn touched(&self, id: Uuid) -> Option<&Job> {
        self.jobs.get(&id).and_then(|t| t.as_ref()).map(|t| &t.job)
    }

    /// A job created by this batch, with its client part already encoded if the caller has it.
    pub fn insert_job(&mut self, id: Uuid, job: Job, parts: Option<Parts>) {
        let touched = Touched {
            job,
            parts,
            body: None,
        };
        self.jobs.insert(id, Some(touched));
    }

    pub fn delete_job(&mut self, id: Uuid) {
        self.jobs.insert(id, None);
        self.cache.remove(id);
    }

    pub fn reply(&mut self, to: oneshot::Sender<Reply>, out: Out) {
        self.out.push((to, out));
    }

    /// The current JSON of jobs in this batch: one object, or an array when `array`.
    pub fn snapshot(&mut self, ids: &[Uuid], array: bool) -> Bytes {
        let mut buf = Vec::with_capacity(ids.len() * 512 + 2);
        if array {
            buf.push(b'[');
        }
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            if let Some(Some(t)) = self.jobs.get_mut(id) {
                let job = &t.job;
                let mut one = Vec::with_capacity(1024);
                t.parts
                    .get_or_insert_with(|| Parts::of(job))
                    .compose(job, &mut one);
                buf.extend_from_slice(&one);
                t.body = Some(Bytes::from(one));
            }
        }
        if array {
            buf.push(b']');
        }
        Bytes::from(buf)
    }

    /// Turn touched jobs into store writes; returns the JSON of each written job so replies
    /// can reuse it instead of serializing again. Unfinished jobs go (back) to the cache.
    pub fn seal(&mut self, seq_of: impl Fn(Uuid) -> u64) -> HashMap<Uuid, Bytes> {
        let mut written = HashMap::with_capacity(self.jobs.len());
        for (id, touched) in self.jobs.drain() {
            match touched {
                Some(Touched { job, parts, body }) => {
                    let parts = parts.unwrap_or_else(|| Parts::of(&job));
                    let seq = seq_of(id);
                    let (rec, at) = match &body {
                        Some(b) => encode_record_with(seq, &job, |v| v.extend_from_slice(b)),
                        None => encode_record(seq, &job, &parts),
                    };
                    debug_assert!(
                        body.is_none() || rec == encode_record(seq, &job, &parts).0,
                        "a reused body must be the job's current JSON"
                    );
                    written.insert(
                        id,
                        body.unwrap_or_else(|| Bytes::copy_from_slice(&rec[at..])),
                    );
                    self.batch.put(Space::Job, id.as_bytes(), rec);
                    if job.state.is_terminal() {
                        self.cache.remove(id);
                    } else {
                        self.cache.put(id, job, parts);
                    }
                }
                None => {
                    self.batch.delete(Space::Job, id.as_bytes());
                    self.cache.remove(id);
                }
            }
        }
        written
    }
}

/// Resolve the replies of a committed batch.
pub fn resolve(
    out: Out,
    written: &HashMap<Uuid, Bytes>,
    cache: &JobCache,
    store: &dyn Store,
) -> Reply {
    let body = |id: &Uuid| -> OjsResult<Bytes> {
        if let Some(b) = written.get(id) {
            return Ok(b.clone());
        }
        if let Some((job, parts)) = cache.get(*id) {
            let mut buf = Vec::new();
            parts.compose(job, &mut buf);
            return Ok(Bytes::from(buf));
        }
        let raw = store
            .get(Space::Job, id.as_bytes())
            .map_err(backend)?
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} not found")))?;
        let record = decode_record(&raw).ok_or_else(|| backend("bad record"))?;
        Ok(Bytes::copy_from_slice(record.body))
    };
    match out {
        Out::Reply(r) => r,
        Out::Job(id) => match body(&id) {
            Ok(b) => Reply::Bulk(b),
            Err(e) => Reply::Error(e),
        },
        Out::Claimed { ids, array: false } if ids.len() == 1 => match body(&ids[0]) {
            Ok(b) => Reply::Bulk(b),
            Err(e) => Reply::Error(e),
        },
        Out::Claimed { ids, .. } => {
            let mut buf = Vec::with_capacity(ids.len() * 512 + 2);
            buf.push(b'[');
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                match body(id) {
                    Ok(b) => buf.extend_from_slice(&b),
                    Err(e) => return Reply::Error(e),
                }
            }
            buf.push(b']');
            Reply::Bulk(Bytes::from(buf))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> (Uuid, Job, Parts) {
        let id = Uuid::now_v7();
        let job: Job = serde_json::from_value(serde_json::json!({
            "specversion": "1.0.0-rc.1", "id": id.to_string(), "type": "t", "queue": "q",
            "args": [n], "retry": crate::job::RetryPolicy::default(), "state": "available",
            "attempt": 0, "created_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap();
        let parts = Parts::of(&job);
        (id, job, parts)
    }

    /// A job with every field the index header carries set, in `state`.
    fn full_job(state: State, queue: &str) -> Job {
        let (_, mut j, _) = job(7);
        j.state = state;
        j.queue = queue.to_string();
        j.priority = -42;
        j.timeout = Some(90);
        j.scheduled_at = Some("2026-01-02T03:04:05.678+02:00".into());
        j.expires_at = Some("2026-02-01T00:00:00Z".into());
        j.unique = Some(serde_json::json!({"keys": ["type"]}));
        let t = |s: &str| crate::job::parse_ts(s);
        j.next_retry_at = t("2026-01-03T00:00:00.001Z");
        j.completed_at = t("2026-01-04T00:00:00.002Z");
        j.cancelled_at = t("2026-01-05T00:00:00.003Z");
        j.discarded_at = t("2026-01-06T00:00:00.004Z");
        j
    }

    /// A job's version 2 record, checked to hold its JSON where `encode_record` says.
    fn encoded(j: &Job, seq: u64) -> Vec<u8> {
        let parts = Parts::of(j);
        let (rec, body) = encode_record(seq, j, &parts);
        let mut json = Vec::new();
        parts.compose(j, &mut json);
        assert_eq!(&rec[body..], json, "the body offset points at the JSON");
        let r = decode_record(&rec).expect("a record just written decodes");
        assert_eq!((r.seq, r.body), (seq, &json[..]));
        rec
    }

    fn header(rec: &[u8]) -> IndexHeader<'_> {
        decode_record(rec)
            .and_then(|r| r.header)
            .expect("version 2 has a header")
    }

    #[test]
    fn v2_header_round_trips_every_field() {
        let long_queue = "q.".repeat(300) + "end";
        for state in State::ALL {
            let j = full_job(state, &long_queue);
            let rec = encoded(&j, u64::MAX - 1);
            let h = header(&rec);
            assert_eq!(h, IndexHeader::of(&j));
            let ms = |s: &str| crate::job::parse_ts(s).map(|t| t.timestamp_millis());
            assert_eq!(
                h,
                IndexHeader {
                    state,
                    unique: true,
                    priority: -42,
                    timeout: Some(90),
                    scheduled_at: ms("2026-01-02T01:04:05.678Z"),
                    next_retry_at: ms("2026-01-03T00:00:00.001Z"),
                    completed_at: ms("2026-01-04T00:00:00.002Z"),
                    cancelled_at: ms("2026-01-05T00:00:00.003Z"),
                    discarded_at: ms("2026-01-06T00:00:00.004Z"),
                    expires_at: ms("2026-02-01T00:00:00Z"),
                    queue: &long_queue,
                }
            );
        }
    }

    #[test]
    fn v2_header_round_trips_absent_fields() {
        let (_, mut j, _) = job(1);
        j.priority = i64::MAX;
        let rec = encoded(&j, 0);
        assert_eq!(
            header(&rec),
            IndexHeader {
                state: State::Available,
                unique: false,
                priority: i64::MAX,
                timeout: None,
                scheduled_at: None,
                next_retry_at: None,
                completed_at: None,
                cancelled_at: None,
                discarded_at: None,
                expires_at: None,
                queue: "q",
            }
        );
        // A zero timeout means the default, like an absent one; an unparseable client time
        // counts as absent, as the JSON rebuild has always treated it.
        j.timeout = Some(0);
        j.scheduled_at = Some("not a time".into());
        j.queue = String::new();
        let rec = encoded(&j, 5);
        let h = header(&rec);
        assert_eq!((h.timeout, h.scheduled_at, h.queue), (None, None, ""));
        // Times before 1970 are times, not "none".
        j.completed_at = crate::job::parse_ts("1969-12-31T23:59:59.999Z");
        assert_eq!(header(&encoded(&j, 5)).completed_at, Some(-1));
    }

    #[test]
    fn v1_records_are_still_read() {
        let (_, j, _) = job(3);
        let json = serde_json::to_vec(&j).unwrap();
        let mut rec = vec![1u8];
        rec.extend_from_slice(&77u64.to_be_bytes());
        rec.extend_from_slice(&json);
        let r = decode_record(&rec).unwrap();
        assert_eq!((r.seq, r.header, r.body), (77, None, &json[..]));
    }

    #[test]
    fn truncated_or_garbled_v2_records_are_refused() {
        let j = full_job(State::Retryable, "some-queue");
        let rec = encoded(&j, 9);
        for len in 0..rec.len() {
            assert!(
                decode_record(&rec[..len]).is_none(),
                "truncated to {len} of {} bytes",
                rec.len()
            );
        }
        // Whether the record, with one byte replaced, still decodes (with a header).
        let garbled = |at: usize, byte: u8| {
            let mut r = rec.clone();
            r[at] = byte;
            decode_record(&r).map(|r| r.header.is_some())
        };
        let queue_len_at = 9 + 1 + 1 + 8 + 8 + 6 * 8;
        assert!(garbled(0, 3).is_none(), "unknown version");
        assert!(garbled(9, 8).is_none(), "unknown state");
        assert!(garbled(10, 2).is_none(), "unknown flag");
        assert!(
            garbled(queue_len_at + 3, 11).is_none(),
            "queue length too long"
        );
        assert!(
            garbled(queue_len_at + 3, 9).is_none(),
            "queue length too short"
        );
        let body_len_low = rec[queue_len_at + 7];
        assert!(
            garbled(queue_len_at + 7, body_len_low ^ 1).is_none(),
            "body length wrong"
        );
        assert!(garbled(queue_len_at + 8, 0xff).is_none(), "queue not UTF-8");
        let mut longer = rec.clone();
        longer.push(b' ');
        assert!(decode_record(&longer).is_none(), "trailing bytes");
        // The same record intact still decodes.
        assert_eq!(garbled(0, 2), Some(true));
    }

    #[test]
    fn a_push_reply_body_is_reused_only_while_its_job_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path(), 1 << 20).unwrap();
        let (a, ja, pa) = job(1);
        let (b, jb, pb) = job(2);
        let mut txn = Txn::default();
        txn.insert_job(a, ja, Some(pa));
        txn.insert_job(b, jb, Some(pb));
        let replied: Vec<serde_json::Value> =
            serde_json::from_slice(&txn.snapshot(&[a, b], true)).unwrap();
        // A waiting FETCH claims b later in the same batch.
        let claimed = txn.job_mut(&store, b).unwrap();
        claimed.state = State::Active;
        claimed.attempt = 1;
        let written = txn.seal(|_| 1);
        let json =
            |id: Uuid| -> serde_json::Value { serde_json::from_slice(&written[&id]).unwrap() };
        assert_eq!(json(a), replied[0]);
        assert_eq!(replied[1]["state"], "available");
        assert_eq!(
            (json(b)["state"].clone(), json(b)["attempt"].clone()),
            ("active".into(), 1.into())
        );
        // The records stored are what `written` says.
        for op in &txn.batch.ops {
            let crate::store::Op::Put(_, rec) = op else {
                panic!("only puts expected")
            };
            let body = decode_record(rec).unwrap().body;
            let id = if body == &written[&a][..] { a } else { b };
            assert_eq!(body, &written[&id][..]);
        }
        assert_eq!(txn.batch.ops.len(), 2);
    }

    #[test]
    fn cache_keeps_the_newest_insertions_within_its_bound() {
        let mut c = JobCache::with_capacity(3);
        let jobs: Vec<_> = (0..5).map(job).collect();
        for (id, j, p) in &jobs[..3] {
            c.put(*id, j.clone(), p.clone());
        }
        // Taking and putting back the oldest makes it the newest.
        let (j, p) = c.take(jobs[0].0).unwrap();
        c.put(jobs[0].0, j, p);
        c.put(jobs[3].0, jobs[3].1.clone(), jobs[3].2.clone());
        assert_eq!(c.len(), 3);
        assert!(
            c.get(jobs[1].0).is_none(),
            "the oldest insertion went first"
        );
        assert!(c.get(jobs[0].0).is_some());
        c.put(jobs[4].0, jobs[4].1.clone(), jobs[4].2.clone());
        assert!(c.get(jobs[2].0).is_none());
        assert_eq!(
            c.get(jobs[4].0).map(|(j, _)| j.args.clone()),
            Some(vec![4.into()])
        );
        c.remove(jobs[4].0);
        assert!(c.take(jobs[4].0).is_none());
    }

    #[test]
    fn cache_order_does_not_grow_with_churn() {
        let mut c = JobCache::with_capacity(2);
        let (id, j, p) = job(0);
        c.put(id, j, p);
        for _ in 0..100_000 {
            let (j, p) = c.take(id).unwrap();
            c.put(id, j, p);
        }
        assert!(
            c.order.len() <= 4 * 1024 + 1,
            "order holds {}",
            c.order.len()
        );
        assert_eq!(c.len(), 1);
    }
}
