//! The state record of a job (`j/<uuid>` followed by the byte [`STATE_SUFFIX`]): what a
//! transition changes, written by every transition instead of the whole envelope.
//!
//! Version 1, integers big-endian:
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 1      | version, `1`                                                       |
//! | 8      | seq, u64: the job's place in its queue (FIFO within a priority)    |
//! | 1      | state (`state_byte`)                                               |
//! | 4      | attempt, u32                                                       |
//! | 1      | times present: bit 0 enqueued_at, 1 started_at, 2 completed_at,    |
//! |        | 3 cancelled_at, 4 discarded_at, 5 next_retry_at; bits 6-7 must be 0 |
//! | 1      | values present: bit 0 worker_id, 1 error, 2 errors, 3 result;      |
//! |        | bits 4-7 must be 0                                                 |
//! | 8 each | the present times, in bit order: i64 unix µs                       |
//! | 4 + n  | each present value, in bit order: u32 length, then the bytes       |
//! |        | (worker_id UTF-8; error, errors, result as JSON)                   |
//!
//! and nothing after. A later field (another front end's attribute) takes a reserved bit
//! or a new version; today's readers refuse both rather than misread them.

use super::{state_byte, state_of_byte, Reader};
use crate::job::parts::{JsonRef, System};
use crate::job::{Job, State};
use chrono::{DateTime, Utc};
use uuid::Uuid;

pub const STATE_V1: u8 = 1;
/// The byte after the job's id in its state record's key.
pub const STATE_SUFFIX: u8 = 1;

const TIMES: u8 = 6;
const VALUES: u8 = 4;

/// The key of a job's state record within `Space::Job`.
pub fn state_key(id: &Uuid) -> [u8; 17] {
    let mut k = [STATE_SUFFIX; 17];
    k[..16].copy_from_slice(id.as_bytes());
    k
}

/// A decoded state record, borrowing from the stored bytes. Times are unix µs, each
/// within what `DateTime<Utc>` holds.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRecord<'a> {
    pub seq: u64,
    pub state: State,
    pub attempt: u32,
    pub enqueued_at: Option<i64>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub discarded_at: Option<i64>,
    pub next_retry_at: Option<i64>,
    pub worker_id: Option<&'a str>,
    /// JSON, as stored (checked only by whoever composes an envelope from it).
    pub error: Option<&'a [u8]>,
    pub errors: Option<&'a [u8]>,
    pub result: Option<&'a [u8]>,
}

fn us(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(|t| t.timestamp_micros())
}

fn time(t: Option<i64>) -> Option<DateTime<Utc>> {
    t.and_then(DateTime::from_timestamp_micros)
}

/// µs to ms, rounding down as `timestamp_millis` does.
pub fn ms(t: Option<i64>) -> Option<i64> {
    t.map(|t| t.div_euclid(1000))
}

impl<'a> StateRecord<'a> {
    /// The system part of the envelope, with `created_at` from the job record.
    pub fn system(&self, created_at: DateTime<Utc>) -> System<'a> {
        System {
            state: self.state,
            attempt: self.attempt,
            created_at,
            enqueued_at: time(self.enqueued_at),
            started_at: time(self.started_at),
            completed_at: time(self.completed_at),
            cancelled_at: time(self.cancelled_at),
            discarded_at: time(self.discarded_at),
            next_retry_at: time(self.next_retry_at),
            error: self.error.map(JsonRef::Raw),
            errors: self.errors.map(JsonRef::Raw),
            result: self.result.map(JsonRef::Raw),
            worker_id: self.worker_id,
        }
    }
}

/// A job's state record as it is now.
pub fn encode_state(seq: u64, job: &Job) -> Vec<u8> {
    let json = |v: &serde_json::Value| serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
    let errors = (!job.errors.is_empty())
        .then(|| serde_json::to_vec(&job.errors).unwrap_or_else(|_| b"[]".to_vec()));
    let (error, result) = (job.error.as_ref().map(json), job.result.as_ref().map(json));
    encode_record(&StateRecord {
        seq,
        state: job.state,
        attempt: job.attempt,
        enqueued_at: us(job.enqueued_at),
        started_at: us(job.started_at),
        completed_at: us(job.completed_at),
        cancelled_at: us(job.cancelled_at),
        discarded_at: us(job.discarded_at),
        next_retry_at: us(job.next_retry_at),
        worker_id: job.worker_id.as_deref(),
        error: error.as_deref(),
        errors: errors.as_deref(),
        result: result.as_deref(),
    })
}

/// A state record's bytes (the layout above).
pub fn encode_record(r: &StateRecord<'_>) -> Vec<u8> {
    let values: [Option<&[u8]>; VALUES as usize] =
        [r.worker_id.map(str::as_bytes), r.error, r.errors, r.result];
    let times = [
        r.enqueued_at,
        r.started_at,
        r.completed_at,
        r.cancelled_at,
        r.discarded_at,
        r.next_retry_at,
    ];
    let mask = |present: &mut dyn Iterator<Item = bool>| {
        present
            .enumerate()
            .fold(0u8, |m, (i, p)| if p { m | 1 << i } else { m })
    };
    let mut v = Vec::with_capacity(64);
    v.push(STATE_V1);
    v.extend_from_slice(&r.seq.to_be_bytes());
    v.push(state_byte(r.state));
    v.extend_from_slice(&r.attempt.to_be_bytes());
    v.push(mask(&mut times.iter().map(Option::is_some)));
    v.push(mask(&mut values.iter().map(Option::is_some)));
    for t in times.into_iter().flatten() {
        v.extend_from_slice(&t.to_be_bytes());
    }
    for b in values.into_iter().flatten() {
        // As in the job record: a length past u32 is refused on reading, never misread.
        v.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_be_bytes());
        v.extend_from_slice(b);
    }
    v
}

/// A state record that owns its values: what a transition changes on a job that is not
/// decoded (`engine/lean.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedState {
    pub seq: u64,
    pub state: State,
    pub attempt: u32,
    pub enqueued_at: Option<i64>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub discarded_at: Option<i64>,
    pub next_retry_at: Option<i64>,
    pub worker_id: Option<String>,
    pub error: Option<Vec<u8>>,
    pub errors: Option<Vec<u8>>,
    pub result: Option<Vec<u8>>,
}

impl OwnedState {
    pub fn of(r: &StateRecord<'_>) -> OwnedState {
        OwnedState {
            seq: r.seq,
            state: r.state,
            attempt: r.attempt,
            enqueued_at: r.enqueued_at,
            started_at: r.started_at,
            completed_at: r.completed_at,
            cancelled_at: r.cancelled_at,
            discarded_at: r.discarded_at,
            next_retry_at: r.next_retry_at,
            worker_id: r.worker_id.map(str::to_owned),
            error: r.error.map(<[u8]>::to_vec),
            errors: r.errors.map(<[u8]>::to_vec),
            result: r.result.map(<[u8]>::to_vec),
        }
    }

    pub fn view(&self) -> StateRecord<'_> {
        StateRecord {
            seq: self.seq,
            state: self.state,
            attempt: self.attempt,
            enqueued_at: self.enqueued_at,
            started_at: self.started_at,
            completed_at: self.completed_at,
            cancelled_at: self.cancelled_at,
            discarded_at: self.discarded_at,
            next_retry_at: self.next_retry_at,
            worker_id: self.worker_id.as_deref(),
            error: self.error.as_deref(),
            errors: self.errors.as_deref(),
            result: self.result.as_deref(),
        }
    }
}

/// Read a state record; `None` if it is not one (unknown version, state or bits, a time
/// out of range, truncated, trailing bytes, a worker id that is not UTF-8, an empty JSON
/// value).
pub fn decode_state(bytes: &[u8]) -> Option<StateRecord<'_>> {
    let mut r = Reader(bytes);
    if r.u8()? != STATE_V1 {
        return None;
    }
    let seq = r.u64()?;
    let state = state_of_byte(r.u8()?)?;
    let attempt = u32::try_from(r.u32()?).ok()?;
    let (times, values) = (r.u8()?, r.u8()?);
    if times >> TIMES != 0 || values >> VALUES != 0 {
        return None;
    }
    let mut t = [None; TIMES as usize];
    for (i, slot) in t.iter_mut().enumerate() {
        if times & (1 << i) != 0 {
            let at = r.i64()?;
            DateTime::from_timestamp_micros(at)?;
            *slot = Some(at);
        }
    }
    let mut v: [Option<&[u8]>; VALUES as usize] = [None; VALUES as usize];
    for (i, slot) in v.iter_mut().enumerate() {
        if values & (1 << i) != 0 {
            let len = r.u32()?;
            let b = r.bytes(len)?;
            // A JSON value is never empty; a worker id may be.
            if b.is_empty() && i != 0 {
                return None;
            }
            *slot = Some(b);
        }
    }
    if !r.0.is_empty() {
        return None;
    }
    let worker_id = match v[0] {
        Some(b) => Some(std::str::from_utf8(b).ok()?),
        None => None,
    };
    if v[2].is_some_and(|e| e.first() != Some(&b'[')) {
        return None;
    }
    let [enqueued_at, started_at, completed_at, cancelled_at, discarded_at, next_retry_at] = t;
    Some(StateRecord {
        seq,
        state,
        attempt,
        enqueued_at,
        started_at,
        completed_at,
        cancelled_at,
        discarded_at,
        next_retry_at,
        worker_id,
        error: v[1],
        errors: v[2],
        result: v[3],
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn t(s: &str) -> Option<DateTime<Utc>> {
        crate::job::parse_ts(s)
    }

    /// A job with every field a state record carries set.
    fn full(state: State) -> Job {
        let (_, mut j, _) = job(1);
        j.state = state;
        j.attempt = u32::MAX;
        j.enqueued_at = t("2026-01-01T00:00:01.000001Z");
        j.started_at = t("2026-01-01T00:00:02.000002Z");
        j.completed_at = t("2026-01-01T00:00:03.000003Z");
        j.cancelled_at = t("1969-12-31T23:59:59.999999Z");
        j.discarded_at = t("9999-12-31T23:59:59.999999Z");
        j.next_retry_at = t("2026-01-01T00:00:06.000006Z");
        j.worker_id = Some("wörker \"1\"".into());
        j.error = Some(json!({"type": "e", "message": "m"}));
        j.errors = vec![json!({"type": "e"}), json!(2)];
        j.result = Some(json!(null));
        j
    }

    fn us(s: &str) -> Option<i64> {
        t(s).map(|t| t.timestamp_micros())
    }

    #[test]
    fn every_field_round_trips() {
        for state in State::ALL {
            let j = full(state);
            let rec = encode_state(u64::MAX, &j);
            let st = decode_state(&rec).expect("a record just written decodes");
            assert_eq!(
                st,
                StateRecord {
                    seq: u64::MAX,
                    state,
                    attempt: u32::MAX,
                    enqueued_at: us("2026-01-01T00:00:01.000001Z"),
                    started_at: us("2026-01-01T00:00:02.000002Z"),
                    completed_at: us("2026-01-01T00:00:03.000003Z"),
                    cancelled_at: Some(-1),
                    discarded_at: us("9999-12-31T23:59:59.999999Z"),
                    next_retry_at: us("2026-01-01T00:00:06.000006Z"),
                    worker_id: Some("wörker \"1\""),
                    error: Some(br#"{"type":"e","message":"m"}"#),
                    errors: Some(br#"[{"type":"e"},2]"#),
                    result: Some(b"null"),
                }
            );
            // The envelope composed from it is the job's, byte for byte.
            let parts = crate::job::parts::Parts::of(&j);
            let mut out = Vec::new();
            crate::job::parts::compose_stored(
                parts.core(),
                parts.extra(),
                &st.system(j.created_at),
                &mut out,
            );
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&j).unwrap()
            );
        }
    }

    #[test]
    fn absent_fields_stay_absent() {
        let (_, j, _) = job(2);
        let rec = encode_state(0, &j);
        assert_eq!(
            rec.len(),
            1 + 8 + 1 + 4 + 1 + 1,
            "nothing but the fixed part"
        );
        let st = decode_state(&rec).unwrap();
        assert_eq!(
            st,
            StateRecord {
                seq: 0,
                state: State::Available,
                attempt: 0,
                enqueued_at: None,
                started_at: None,
                completed_at: None,
                cancelled_at: None,
                discarded_at: None,
                next_retry_at: None,
                worker_id: None,
                error: None,
                errors: None,
                result: None,
            }
        );
        // Times are kept to the microsecond, as the envelope shows them; ms for the index
        // rounds down like `timestamp_millis`, before 1970 too.
        assert_eq!(ms(Some(-1)), Some(-1));
        assert_eq!(ms(Some(1999)), Some(1));
    }

    #[test]
    fn truncated_or_garbled_records_are_refused() {
        let rec = encode_state(9, &full(State::Retryable));
        for len in 0..rec.len() {
            assert_eq!(decode_state(&rec[..len]), None, "truncated to {len}");
        }
        let garbled = |at: usize, byte: u8| {
            let mut r = rec.clone();
            r[at] = byte;
            decode_state(&r).is_some()
        };
        assert!(garbled(0, 1), "the intact record decodes");
        assert!(!garbled(0, 2), "unknown version");
        assert!(!garbled(9, 8), "unknown state");
        assert!(!garbled(14, 0x7f), "unknown time bit");
        assert!(!garbled(15, 0x1f), "unknown value bit");
        // A time out of what a DateTime holds.
        assert!(!garbled(16, 0x7f), "time out of range");
        let mut longer = rec.clone();
        longer.push(0);
        assert_eq!(decode_state(&longer), None, "trailing bytes");
        // A worker id that is not UTF-8, and an empty value.
        let mut j = full(State::Active);
        j.error = None;
        j.errors.clear();
        j.result = None;
        j.worker_id = Some("w".into());
        let mut rec = encode_state(1, &j);
        let last = rec.len() - 1;
        rec[last] = 0xff;
        assert_eq!(decode_state(&rec), None, "worker id not UTF-8");
        j.worker_id = Some(String::new());
        let rec = encode_state(1, &j);
        assert_eq!(
            decode_state(&rec).unwrap().worker_id,
            Some(""),
            "an empty id is one"
        );
        j.worker_id = None;
        j.result = Some(json!(0));
        let mut rec = encode_state(1, &j);
        rec.pop();
        let len_at = rec.len() - 4;
        rec[len_at..].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(decode_state(&rec), None, "an empty JSON value");
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            if let Some(st) = decode_state(&bytes) {
                // Whatever decodes gives a system part that can be written.
                let mut out = Vec::new();
                let created = DateTime::from_timestamp_micros(0).unwrap();
                crate::job::parts::compose_stored(b"{\"a\":1", b"", &st.system(created), &mut out);
                prop_assert_eq!(out.last(), Some(&b'}'));
            }
        }

        #[test]
        fn prefixes_of_a_valid_record_are_refused(
            seq in any::<u64>(), attempt in any::<u32>(), cut in 0usize..100,
        ) {
            let mut j = full(State::Completed);
            j.attempt = attempt;
            let rec = encode_state(seq, &j);
            let st = decode_state(&rec).unwrap();
            prop_assert_eq!((st.seq, st.attempt), (seq, attempt));
            let cut = cut.min(rec.len() - 1);
            prop_assert!(decode_state(&rec[..cut]).is_none());
        }
    }
}
