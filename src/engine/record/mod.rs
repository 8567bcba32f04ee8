//! The stored form of a job: a job record (`j/<uuid>`) written when the job is created,
//! holding what never changes (the index fields `rebuild` needs in binary, and the client's
//! part of the envelope already encoded), and a small state record (`j/<uuid>` followed by
//! the byte 1, so it sorts right after its job record) rewritten by every transition
//! (`state.rs`). Reads compose the envelope clients see from both.

pub mod state;

use crate::job::parts::Parts;
use crate::job::{Job, State};

/// Stored job records (`j/<uuid>`). Integers are big-endian.
///
/// Version 3 (written): `3`, then
///
/// | bytes  | field                                                              |
/// |--------|--------------------------------------------------------------------|
/// | 1      | flags: bit 0 = the job has `unique`; other bits must be 0          |
/// | 8      | priority, i64                                                      |
/// | 8      | timeout, u64 seconds; 0 = none (server default)                    |
/// | 8      | scheduled_at, i64 unix ms (the client's string, parsed); `NO_TIME` |
/// | 8      | expires_at, likewise                                               |
/// | 8      | created_at, i64 unix µs                                            |
/// | 4      | queue name length, u32                                             |
/// | 4      | core length, u32                                                   |
/// | 4      | extra length, u32                                                  |
/// | n      | queue name, UTF-8                                                  |
/// | n      | core: the envelope's JSON from `{` to the last client attribute    |
/// |        | before `state` (`Parts::core`)                                     |
/// | n      | extra: `,"name":value...` of the attributes OJS does not define,   |
/// |        | or nothing (`Parts::extra`)                                        |
///
/// and nothing after. The job's sequence number, state and system times are in its state
/// record. A version 3 record without its state record is unreadable.
///
/// Versions 1 and 2 (still read; a job stored so is rewritten as version 3 the first time
/// it changes): the whole envelope JSON, which is then the truth (no state record).
///
/// Version 1: `1`, seq u64, the envelope JSON clients see.
///
/// Version 2: `2`, seq u64, then the index header, so `rebuild` needs no JSON:
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
pub const RECORD_V3: u8 = 3;
const FLAG_UNIQUE: u8 = 1;
pub(super) const NO_TIME: i64 = i64::MIN;

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
pub(super) fn state_byte(s: State) -> u8 {
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

pub(super) fn state_of_byte(b: u8) -> Option<State> {
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

/// A job record (version 2) and the offset of its JSON body within it. No longer written
/// by the engine; kept to test that such records are still read.
#[allow(dead_code)] // used by tests and the fuzz target
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
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    pub(super) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    pub(super) fn u32(&mut self) -> Option<usize> {
        self.take().map(u32::from_be_bytes).map(|n| n as usize)
    }

    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }

    pub(super) fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }

    pub(super) fn time(&mut self) -> Option<Option<i64>> {
        self.i64().map(|t| (t != NO_TIME).then_some(t))
    }
}

/// Read a version 1 or 2 record; `None` if it is not one (another version, truncated, or a
/// header that does not add up).
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

/// A decoded version 3 job record, borrowing from the stored bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord<'a> {
    pub unique: bool,
    pub priority: i64,
    /// Seconds; `None` when absent or 0 (both mean the server default).
    pub timeout: Option<u64>,
    /// Unix ms.
    pub scheduled_at: Option<i64>,
    pub expires_at: Option<i64>,
    /// Unix µs.
    pub created_at: i64,
    pub queue: &'a str,
    pub core: &'a [u8],
    pub extra: &'a [u8],
}

impl JobRecord<'_> {
    /// The client part, as `Parts` (copied out of the record).
    pub fn parts(&self) -> Option<Parts> {
        Parts::from_stored(self.core, self.extra)
    }

    pub fn created(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        chrono::DateTime::from_timestamp_micros(self.created_at)
    }
}

/// A job's version 3 record: what does not change after PUSH.
pub fn encode_job_record(job: &Job, parts: &Parts) -> Vec<u8> {
    let ms = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or(NO_TIME, |t| t.timestamp_millis());
    let (core, extra) = (parts.core(), parts.extra());
    let mut v = Vec::with_capacity(54 + job.queue.len() + core.len() + extra.len());
    v.push(RECORD_V3);
    v.push(if job.unique.is_some() { FLAG_UNIQUE } else { 0 });
    v.extend_from_slice(&job.priority.to_be_bytes());
    v.extend_from_slice(&job.timeout.unwrap_or(0).to_be_bytes());
    v.extend_from_slice(&ms(job.scheduled_time()).to_be_bytes());
    v.extend_from_slice(&ms(job.expires_time()).to_be_bytes());
    v.extend_from_slice(&job.created_at.timestamp_micros().to_be_bytes());
    for n in [job.queue.len(), core.len(), extra.len()] {
        // Lengths cannot reach 4 GiB (lines are limited to a few MiB); if one did, the
        // record would be refused on reading rather than misread.
        v.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
    }
    v.extend_from_slice(job.queue.as_bytes());
    v.extend_from_slice(core);
    v.extend_from_slice(extra);
    v
}

/// Read a version 3 record; `None` if it is not one (another version, truncated, trailing
/// bytes, unknown flags, a queue that is not UTF-8, parts that cannot be an envelope's).
pub fn decode_job_record(bytes: &[u8]) -> Option<JobRecord<'_>> {
    let mut r = Reader(bytes);
    if r.u8()? != RECORD_V3 {
        return None;
    }
    let flags = r.u8()?;
    if flags & !FLAG_UNIQUE != 0 {
        return None;
    }
    let priority = r.i64()?;
    let timeout = Some(r.u64()?).filter(|t| *t > 0);
    let scheduled_at = r.time()?;
    let expires_at = r.time()?;
    let created_at = r.i64()?;
    chrono::DateTime::from_timestamp_micros(created_at)?;
    let (queue_len, core_len, extra_len) = (r.u32()?, r.u32()?, r.u32()?);
    let queue = std::str::from_utf8(r.bytes(queue_len)?).ok()?;
    let core = r.bytes(core_len)?;
    let extra = r.bytes(extra_len)?;
    let core_ok = core.first() == Some(&b'{') && core.len() > 1 && core.last() != Some(&b',');
    let extra_ok = extra.is_empty() || (extra.first() == Some(&b',') && extra.len() > 1);
    if !r.0.is_empty() || !core_ok || !extra_ok {
        return None;
    }
    Some(JobRecord {
        unique: flags & FLAG_UNIQUE != 0,
        priority,
        timeout,
        scheduled_at,
        expires_at,
        created_at,
        queue,
        core,
        extra,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use uuid::Uuid;

    /// A small available job and its encoded client part (txn.rs tests use it too).
    pub(in crate::engine) fn job(n: u32) -> (Uuid, Job, Parts) {
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
    fn v3_round_trips_every_field() {
        let long_queue = "q.".repeat(300) + "end";
        let mut j = full_job(State::Active, &long_queue);
        j.extra
            .insert("x-other".into(), serde_json::json!({"k": [1]}));
        j.created_at = crate::job::parse_ts("2026-01-01T00:00:00.123456Z").unwrap();
        let parts = Parts::of(&j);
        let rec = encode_job_record(&j, &parts);
        let r = decode_job_record(&rec).expect("a record just written decodes");
        let ms = |s: &str| crate::job::parse_ts(s).map(|t| t.timestamp_millis());
        assert_eq!(
            r,
            JobRecord {
                unique: true,
                priority: -42,
                timeout: Some(90),
                scheduled_at: ms("2026-01-02T01:04:05.678Z"),
                expires_at: ms("2026-02-01T00:00:00Z"),
                created_at: j.created_at.timestamp_micros(),
                queue: &long_queue,
                core: parts.core(),
                extra: parts.extra(),
            }
        );
        assert!(!parts.extra().is_empty());
        assert_eq!(r.parts(), Some(parts));
        assert_eq!(r.created(), Some(j.created_at));
        assert_eq!(
            decode_record(&rec).map(|r| r.seq),
            None,
            "not a v1/v2 record"
        );
    }

    #[test]
    fn v3_round_trips_absent_fields() {
        let (_, mut j, _) = job(1);
        j.timeout = Some(0);
        j.scheduled_at = Some("not a time".into());
        let parts = Parts::of(&j);
        let rec = encode_job_record(&j, &parts);
        let r = decode_job_record(&rec).unwrap();
        assert_eq!(
            (
                r.unique,
                r.priority,
                r.timeout,
                r.scheduled_at,
                r.expires_at
            ),
            (false, 0, None, None, None)
        );
        assert_eq!((r.queue, r.extra), ("q", &b""[..]));
        assert_eq!(
            rec.len(),
            54 + 1 + parts.len(),
            "the fixed part is 54 bytes"
        );
    }

    #[test]
    fn truncated_or_garbled_v3_records_are_refused() {
        let mut j = full_job(State::Retryable, "some-queue");
        j.extra.insert("x".into(), serde_json::json!(1));
        let rec = encode_job_record(&j, &Parts::of(&j));
        for len in 0..rec.len() {
            assert!(
                decode_job_record(&rec[..len]).is_none(),
                "truncated to {len}"
            );
        }
        let garbled = |at: usize, byte: u8| {
            let mut r = rec.clone();
            r[at] = byte;
            decode_job_record(&r).is_some()
        };
        let lens_at = 1 + 1 + 8 + 8 + 8 + 8 + 8;
        assert!(garbled(0, 3), "the intact record decodes");
        assert!(!garbled(0, 4), "unknown version");
        assert!(!garbled(1, 2), "unknown flag");
        assert!(!garbled(34, 0x7f), "created_at out of range");
        assert!(!garbled(lens_at + 3, 11), "queue length too long");
        assert!(!garbled(lens_at + 3, 9), "queue length too short");
        assert!(!garbled(lens_at + 12, 0xff), "queue not UTF-8");
        assert!(!garbled(lens_at + 12 + 10, b'['), "core not an object");
        let extra_at = rec.len() - Parts::of(&j).extra().len();
        assert!(!garbled(extra_at, b'{'), "extra not after a comma");
        let mut longer = rec.clone();
        longer.push(b'}');
        assert!(decode_job_record(&longer).is_none(), "trailing bytes");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_without_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            first in 0u8..5,
        ) {
            let mut bytes = bytes;
            if let Some(b) = bytes.first_mut() {
                *b = first; // reach every version's decoder
            }
            if let Some(r) = decode_job_record(&bytes) {
                proptest::prop_assert!(r.parts().is_some());
            }
            let _ = decode_record(&bytes);
        }

        #[test]
        fn a_v3_record_with_one_byte_changed_is_refused_or_still_consistent(
            at in 0usize..400, byte in proptest::prelude::any::<u8>(),
        ) {
            let j = full_job(State::Available, "qq");
            let mut rec = encode_job_record(&j, &Parts::of(&j));
            let at = at % rec.len();
            rec[at] = byte;
            if let Some(r) = decode_job_record(&rec) {
                let fixed = 54 + r.queue.len() + r.core.len() + r.extra.len();
                proptest::prop_assert_eq!(fixed, rec.len());
            }
        }
    }
}
