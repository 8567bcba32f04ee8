//! A job as the store holds it: a job record written once (`record/mod.rs`) and a state
//! record rewritten by each transition (`record/state.rs`), both under `Space::Job`, read
//! together; or, for a job stored by an older ojsd, one record with the whole envelope.

use super::lean::Lean;
use super::record::state::{
    decode_state, encode_record as encode_state_record, encode_state, state_key, StateRecord,
};
use super::record::{decode_job_record, decode_record, encode_job_record, JobRecord, RECORD_V3};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::parts::{compose_stored, Parts};
use crate::job::Job;
use crate::store::{Batch, Space, Store};
use bytes::Bytes;
use uuid::Uuid;

pub fn backend(msg: impl std::fmt::Display) -> OjsError {
    OjsError::new(ErrorCode::BackendError, msg.to_string())
}

/// A failed read: `BACKEND_UNAVAILABLE` when the store is away (retry), else
/// `BACKEND_ERROR`.
pub fn read_failed(e: crate::store::StoreError) -> OjsError {
    match e {
        crate::store::StoreError::Unavailable(_) => {
            OjsError::new(ErrorCode::BackendUnavailable, e.to_string())
        }
        e => backend(e),
    }
}

/// A job read from the store.
pub struct Decoded {
    pub job: Job,
    /// Its client part as stored (re-encoded for an old record).
    pub parts: Parts,
    /// Stored in an older format: its next write must write the job record too.
    pub rewrite: bool,
}

/// A job as `load_lean` found it.
pub enum Loaded {
    Lean(Box<Lean>, Parts),
    Full(Box<Decoded>),
}

enum Raw {
    Lean { record: Vec<u8>, state: Vec<u8> },
    Legacy(Vec<u8>),
}

fn get(store: &dyn Store, id: Uuid) -> OjsResult<Option<Raw>> {
    let Some(record) = store.get(Space::Job, id.as_bytes()).map_err(read_failed)? else {
        return Ok(None);
    };
    if record.first() != Some(&RECORD_V3) {
        return Ok(Some(Raw::Legacy(record)));
    }
    let state = store
        .get(Space::Job, &state_key(&id))
        .map_err(read_failed)?
        .ok_or_else(|| backend(format!("job {id}: its state record is missing")))?;
    Ok(Some(Raw::Lean { record, state }))
}

/// The envelope composed from a job record and its state record, after checking that the
/// JSON values the state record holds are JSON (they are copied into the envelope as is).
fn compose<'a>(id: Uuid, record: &'a [u8], state: &'a [u8]) -> OjsResult<(Vec<u8>, JobRecord<'a>)> {
    let bad = |what: &str| backend(format!("job {id}: bad {what} record"));
    let rec = decode_job_record(record).ok_or_else(|| bad("job"))?;
    let st: StateRecord = decode_state(state).ok_or_else(|| bad("state"))?;
    for v in [st.error, st.errors, st.result].into_iter().flatten() {
        serde_json::from_slice::<serde::de::IgnoredAny>(v).map_err(|_| bad("state"))?;
    }
    let created = rec.created().ok_or_else(|| bad("job"))?;
    let mut out = Vec::with_capacity(record.len() + state.len() + 256);
    compose_stored(rec.core, rec.extra, &st.system(created), &mut out);
    Ok((out, rec))
}

/// The job's envelope JSON, as clients see it.
pub fn load_body(store: &dyn Store, id: Uuid) -> OjsResult<Option<Bytes>> {
    match get(store, id)? {
        None => Ok(None),
        Some(Raw::Legacy(raw)) => {
            let r = decode_record(&raw).ok_or_else(|| backend(format!("job {id}: bad record")))?;
            Ok(Some(Bytes::copy_from_slice(r.body)))
        }
        Some(Raw::Lean { record, state }) => {
            compose(id, &record, &state).map(|(body, _)| Some(Bytes::from(body)))
        }
    }
}

/// The job, decoded, with its client part.
pub fn load_job(store: &dyn Store, id: Uuid) -> OjsResult<Option<Decoded>> {
    match get(store, id)? {
        None => Ok(None),
        Some(raw) => decode_raw(id, raw).map(Some),
    }
}

/// A job's records, decoded.
fn decode_raw(id: Uuid, raw: Raw) -> OjsResult<Decoded> {
    let parse = |body: &[u8]| -> OjsResult<Job> {
        serde_json::from_slice(body).map_err(|e| backend(format!("job {id}: {e}")))
    };
    match raw {
        Raw::Legacy(raw) => {
            let r = decode_record(&raw).ok_or_else(|| backend(format!("job {id}: bad record")))?;
            let job = parse(r.body)?;
            let parts = Parts::of(&job);
            Ok(Decoded {
                job,
                parts,
                rewrite: true,
            })
        }
        Raw::Lean { record, state } => {
            let (body, rec) = compose(id, &record, &state)?;
            let parts = rec
                .parts()
                .ok_or_else(|| backend(format!("job {id}: bad job record")))?;
            Ok(Decoded {
                job: parse(&body)?,
                parts,
                rewrite: false,
            })
        }
    }
}

/// The job lean if it can be (`lean.rs`: a version 3 record without attributes OJS does
/// not define), else decoded. A lean load reads both records and skims the client part;
/// it never decodes it.
pub fn load_lean(store: &dyn Store, id: Uuid) -> OjsResult<Option<Loaded>> {
    let Some(raw) = get(store, id)? else {
        return Ok(None);
    };
    if let Raw::Lean { record, state } = &raw {
        let bad = |what: &str| backend(format!("job {id}: bad {what} record"));
        let rec = decode_job_record(record).ok_or_else(|| bad("job"))?;
        let st = decode_state(state).ok_or_else(|| bad("state"))?;
        // As `compose` checks before an envelope is made of them.
        for v in [st.error, st.errors, st.result].into_iter().flatten() {
            serde_json::from_slice::<serde::de::IgnoredAny>(v).map_err(|_| bad("state"))?;
        }
        if let Some(lean) = Lean::of(&rec, &st) {
            let parts = rec.parts().ok_or_else(|| bad("job"))?;
            return Ok(Some(Loaded::Lean(Box::new(lean), parts)));
        }
    }
    decode_raw(id, raw).map(|d| Some(Loaded::Full(Box::new(d))))
}

/// Write a lean job's state record.
pub fn put_state(batch: &mut Batch, id: Uuid, seq: u64, lean: &Lean) {
    let mut st = lean.st.view();
    st.seq = seq;
    batch.put(Space::Job, &state_key(&id), encode_state_record(&st));
}

pub fn read_job(store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
    Ok(load_job(store, id)?.map(|l| l.job))
}

/// Write a job's state record, and with `record` its job record (a new job, or one stored
/// in an older format).
pub fn put(batch: &mut Batch, id: Uuid, seq: u64, job: &Job, parts: &Parts, record: bool) {
    if record {
        batch.put(Space::Job, id.as_bytes(), encode_job_record(job, parts));
    }
    batch.put(Space::Job, &state_key(&id), encode_state(seq, job));
}

/// Delete both records of a job.
pub fn delete(batch: &mut Batch, id: Uuid) {
    batch.delete(Space::Job, id.as_bytes());
    batch.delete(Space::Job, &state_key(&id));
}

#[cfg(test)]
mod tests {
    use super::super::record::encode_record;
    use super::super::txn::{JobCache, Out, Txn};
    use super::*;
    use crate::job::State;
    use crate::store::Op;
    use chrono::Utc;

    /// A typical job: an email to send, a trace id, the default retry policy.
    fn typical() -> (Uuid, Job) {
        let id = Uuid::now_v7();
        let job = serde_json::from_value(serde_json::json!({
            "specversion": "1.0.0-rc.1", "id": id.to_string(), "type": "email.send",
            "queue": "default", "args": ["user@example.com", {"template": "welcome", "locale": "en"}],
            "meta": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"},
            "retry": crate::job::RetryPolicy::default(), "state": "available", "attempt": 0,
            "created_at": "2026-01-01T00:00:00Z", "enqueued_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap();
        (id, job)
    }

    /// Bytes of keys and values a batch puts.
    fn put_bytes(batch: &Batch) -> usize {
        batch
            .ops
            .iter()
            .map(|op| match op {
                Op::Put(k, v) => k.len() + v.len(),
                Op::Delete(k) => k.len(),
            })
            .sum()
    }

    /// PUSH, FETCH, ACK of one job, each its own committed batch, with the decoded-job cache
    /// (`cached`) or without it (every change reads the job back from the store). Returns
    /// the bytes each batch wrote, and what a version 2 record per step would have been.
    fn lifecycle(cached: bool) -> ([usize; 3], [usize; 3]) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::FjallStore::open(dir.path(), 1 << 20).unwrap();
        let mut cache = JobCache::with_capacity(if cached { 1024 } else { 0 });
        let (id, job) = typical();
        let (mut new, mut old) = ([0; 3], [0; 3]);
        // The envelope keeps µs; so does the clock here, to compare whole jobs.
        let now = || chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros());
        for step in 0..3 {
            let mut txn = Txn::with_cache(std::mem::take(&mut cache));
            if step == 0 {
                txn.insert_job(id, job.clone(), None, true);
            } else {
                let j = txn.job_mut(&store, id).unwrap();
                if step == 1 {
                    j.state = State::Active;
                    j.attempt = 1;
                    j.started_at = now();
                    j.worker_id = Some("worker-7f3a".into());
                } else {
                    j.state = State::Completed;
                    j.completed_at = now();
                    j.result = Some(serde_json::json!({"sent": true}));
                    j.worker_id = None;
                }
            }
            let current = txn.touched(id).unwrap().clone();
            txn.reply(tokio::sync::oneshot::channel().0, Out::Job(id));
            let written = txn.seal(|_| 5);
            new[step] = put_bytes(&txn.batch);
            let v2 = encode_record(5, &current, &Parts::of(&current)).0;
            old[step] = Space::Job.key(id.as_bytes()).len() + v2.len();
            assert_eq!(txn.batch.len(), if step == 0 { 2 } else { 1 });
            store.commit(std::mem::take(&mut txn.batch)).unwrap();
            cache = std::mem::take(&mut txn.cache);
            // The store gives back the envelope the reply showed, which is the job's.
            let stored = load_body(&store, id).unwrap().unwrap();
            assert_eq!(stored, written[&id]);
            assert_eq!(&stored[..], &serde_json::to_vec(&current).unwrap()[..]);
            assert_eq!(read_job(&store, id).unwrap().as_ref(), Some(&current));
        }
        (new, old)
    }

    #[test]
    fn a_job_record_is_written_once_and_transitions_write_a_small_state_record() {
        for cached in [true, false] {
            let (new, old) = lifecycle(cached);
            eprintln!(
                "PUSH/FETCH/ACK bytes (keys + values): lean {new:?} = {}, v2 {old:?} = {}",
                new.iter().sum::<usize>(),
                old.iter().sum::<usize>()
            );
            // FETCH and ACK write a state record of tens of bytes, not the envelope again.
            assert!(new[1] < 80 && new[2] < 80, "{new:?}");
            assert!(new.iter().sum::<usize>() * 2 < old.iter().sum::<usize>());
        }
    }

    #[test]
    fn deleting_a_job_deletes_both_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::FjallStore::open(dir.path(), 1 << 20).unwrap();
        let (id, job) = typical();
        let mut batch = Batch::default();
        put(&mut batch, id, 1, &job, &Parts::of(&job), true);
        store.commit(batch).unwrap();
        assert!(load_body(&store, id).unwrap().is_some());
        let mut batch = Batch::default();
        delete(&mut batch, id);
        store.commit(batch).unwrap();
        let mut left = 0;
        store
            .scan(Space::Job, &mut |_, _| {
                left += 1;
                true
            })
            .unwrap();
        assert_eq!(left, 0);
        assert!(load_body(&store, id).unwrap().is_none());
    }

    #[test]
    fn a_damaged_pair_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::FjallStore::open(dir.path(), 1 << 20).unwrap();
        let (id, mut job) = typical();
        job.result = Some(serde_json::json!(1));
        let mut batch = Batch::default();
        put(&mut batch, id, 1, &job, &Parts::of(&job), true);
        store.commit(batch).unwrap();
        let key = super::super::record::state::state_key(&id);
        let mut st = store.get(Space::Job, &key).unwrap().unwrap();
        // The result's one JSON byte becomes something that is not JSON.
        let last = st.len() - 1;
        st[last] = b'x';
        let mut batch = Batch::default();
        batch.put(Space::Job, &key, st);
        store.commit(batch).unwrap();
        assert!(load_body(&store, id).is_err());
        let mut batch = Batch::default();
        batch.delete(Space::Job, &key);
        store.commit(batch).unwrap();
        assert!(load_job(&store, id).is_err(), "a state record is missing");
    }
}
