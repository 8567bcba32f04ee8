//! A job as the store holds it: a job record written once (`record/mod.rs`) and a state
//! record rewritten by each transition (`record/state.rs`), both under `Space::Job`, read
//! together; or, for a job stored by an older ojsd, one record with the whole envelope.

use super::record::state::{decode_state, encode_state, state_key, StateRecord};
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

/// A job read from the store.
pub struct Loaded {
    pub job: Job,
    /// Its client part as stored (re-encoded for an old record).
    pub parts: Parts,
    /// Stored in an older format: its next write must write the job record too.
    pub rewrite: bool,
}

enum Raw {
    Lean { record: Vec<u8>, state: Vec<u8> },
    Legacy(Vec<u8>),
}

fn get(store: &dyn Store, id: Uuid) -> OjsResult<Option<Raw>> {
    let Some(record) = store.get(Space::Job, id.as_bytes()).map_err(backend)? else {
        return Ok(None);
    };
    if record.first() != Some(&RECORD_V3) {
        return Ok(Some(Raw::Legacy(record)));
    }
    let state = store
        .get(Space::Job, &state_key(&id))
        .map_err(backend)?
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
pub fn load_job(store: &dyn Store, id: Uuid) -> OjsResult<Option<Loaded>> {
    let parse = |body: &[u8]| -> OjsResult<Job> {
        serde_json::from_slice(body).map_err(|e| backend(format!("job {id}: {e}")))
    };
    match get(store, id)? {
        None => Ok(None),
        Some(Raw::Legacy(raw)) => {
            let r = decode_record(&raw).ok_or_else(|| backend(format!("job {id}: bad record")))?;
            let job = parse(r.body)?;
            let parts = Parts::of(&job);
            Ok(Some(Loaded {
                job,
                parts,
                rewrite: true,
            }))
        }
        Some(Raw::Lean { record, state }) => {
            let (body, rec) = compose(id, &record, &state)?;
            let parts = rec
                .parts()
                .ok_or_else(|| backend(format!("job {id}: bad job record")))?;
            Ok(Some(Loaded {
                job: parse(&body)?,
                parts,
                rewrite: false,
            }))
        }
    }
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
