//! A job the hot path touches without decoding it: a FETCH's claim and its ACK change only
//! the state record, and need of the job record only what the header and a skim of the
//! client part give (id, type, queue, trace id). Decoding the client part's JSON into a
//! `Job` (its args and meta as `Value` trees) and dropping it again was the largest cost
//! of the engine thread per job once a backlog outgrew the decoded-job cache
//! (bench/RESULTS.md rounds 5 and 10).
//!
//! A job is loaded lean only from a version 3 record whose client part has no attribute
//! OJS does not define (`Parts::extra` empty: such attributes, `rate_limit` among them,
//! are read from the decoded job). Anything else a batch does to a lean job decodes it
//! first (`Txn::job_mut` and friends), from the same records, so both paths see one job.

use super::record::state::{decode_state, encode_state, OwnedState, StateRecord};
use super::record::JobRecord;
use crate::error::OjsResult;
use crate::events::JobFields;
use crate::job::parts::{compose_stored, Parts};
use crate::job::rate_limit::RateLimitPolicy;
use crate::job::{Job, State};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

/// A job as its records hold it, with the few client fields the hot path reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Lean {
    pub st: OwnedState,
    pub created: DateTime<Utc>,
    pub id: String,
    pub job_type: String,
    pub queue: String,
    pub trace_id: Option<String>,
}

#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    job_type: Cow<'a, str>,
    #[serde(default)]
    meta: Option<PeekMeta>,
}

#[derive(Deserialize)]
struct PeekMeta {
    #[serde(default)]
    trace_id: Option<Value>,
    #[serde(default)]
    traceparent: Option<Value>,
}

impl Lean {
    /// From a job record and its state record; `None` when the job must be decoded
    /// instead (attributes OJS does not define, or a client part that does not skim).
    pub fn of(rec: &JobRecord<'_>, st: &StateRecord<'_>) -> Option<Lean> {
        if !rec.extra.is_empty() {
            return None;
        }
        // The core runs from `{` to the last client attribute: closed, it is an object.
        let mut core = Vec::with_capacity(rec.core.len() + 1);
        core.extend_from_slice(rec.core);
        core.push(b'}');
        let peek: Peek<'_> = serde_json::from_slice(&core).ok()?;
        // As `Job::trace_id`.
        let meta = peek.meta.as_ref();
        let trace_id = match meta
            .and_then(|m| m.trace_id.as_ref())
            .and_then(Value::as_str)
        {
            Some(t) => Some(t.to_owned()),
            None => meta
                .and_then(|m| m.traceparent.as_ref())
                .and_then(Value::as_str)
                .and_then(|tp| tp.split('-').nth(1))
                .map(str::to_owned),
        };
        Some(Lean {
            st: OwnedState::of(st),
            created: rec.created()?,
            id: peek.id.into_owned(),
            job_type: peek.job_type.into_owned(),
            queue: rec.queue.to_owned(),
            trace_id,
        })
    }

    /// A decoded job as its records would load lean (`of`), for the job cache to
    /// keep at a fraction of the memory; `None` when it would not load lean (attributes OJS
    /// does not define: `parts.extra` not empty).
    pub fn of_job(job: &Job, parts: &Parts) -> Option<Lean> {
        if !parts.extra().is_empty() {
            return None;
        }
        let state = encode_state(0, job);
        let st = decode_state(&state)?;
        Some(Lean {
            st: OwnedState::of(&st),
            // As the job record keeps it (`JobRecord::created`): whole microseconds.
            created: DateTime::from_timestamp_micros(job.created_at.timestamp_micros())?,
            id: job.id.clone(),
            job_type: job.job_type.clone(),
            queue: job.queue.clone(),
            trace_id: job.trace_id().map(str::to_owned),
        })
    }

    /// The envelope clients see, as `Parts::compose` writes it for the decoded job.
    pub fn compose(&self, parts: &Parts, out: &mut Vec<u8>) {
        compose_stored(
            parts.core(),
            parts.extra(),
            &self.st.view().system(self.created),
            out,
        );
    }

    /// The decoded job (for every transition but the hot path's).
    pub fn decode(&self, parts: &Parts) -> OjsResult<Job> {
        let mut body = Vec::with_capacity(parts.len() + 256);
        self.compose(parts, &mut body);
        serde_json::from_slice(&body)
            .map_err(|e| super::stored::backend(format!("job {}: {e}", self.id)))
    }
}

fn us(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn time(t: Option<i64>) -> Option<DateTime<Utc>> {
    t.and_then(DateTime::from_timestamp_micros)
}

/// A job of the batch, decoded or lean.
pub enum JobMut<'a> {
    Full(&'a mut Job),
    Lean(&'a mut Lean),
}

impl JobMut<'_> {
    /// Its `rate_limit` policy, if it has one (a lean job has none: see the module doc).
    pub fn rate_limit(&self) -> Option<RateLimitPolicy> {
        match self {
            JobMut::Full(j) => RateLimitPolicy::of(j),
            JobMut::Lean(_) => None,
        }
    }

    /// The common fields of its events (`events::job_data`).
    pub fn fields(&self) -> JobFields<'_> {
        match self {
            JobMut::Full(j) => super::events::fields_of(j),
            JobMut::Lean(l) => JobFields {
                id: &l.id,
                job_type: &l.job_type,
                queue: &l.queue,
                trace_id: l.trace_id.as_deref(),
            },
        }
    }

    pub fn attempt(&self) -> u32 {
        match self {
            JobMut::Full(j) => j.attempt,
            JobMut::Lean(l) => l.st.attempt,
        }
    }

    pub fn worker_id(&self) -> Option<&str> {
        match self {
            JobMut::Full(j) => j.worker_id.as_deref(),
            JobMut::Lean(l) => l.st.worker_id.as_deref(),
        }
    }

    /// Claimed by a FETCH at `now` for worker `wid`: how long it waited since enqueued, ms.
    pub fn claim(&mut self, now: DateTime<Utc>, wid: Option<&str>) -> f64 {
        let enqueued = match self {
            JobMut::Full(j) => {
                j.state = State::Active;
                j.attempt = j.attempt.saturating_add(1);
                j.started_at = Some(now);
                j.worker_id = wid.map(str::to_owned);
                j.enqueued_at
            }
            JobMut::Lean(l) => {
                l.st.state = State::Active;
                l.st.attempt = l.st.attempt.saturating_add(1);
                l.st.started_at = Some(us(now));
                l.st.worker_id = wid.map(str::to_owned);
                time(l.st.enqueued_at)
            }
        };
        enqueued
            .map(|t| (now - t).num_milliseconds() as f64)
            .unwrap_or(0.0)
    }

    /// Completed at `now` with `result`: how long it ran, ms.
    pub fn complete(&mut self, now: DateTime<Utc>, result: Option<Value>) -> i64 {
        let started = match self {
            JobMut::Full(j) => {
                let started = j.started_at;
                j.state = State::Completed;
                j.completed_at = Some(now);
                j.result = result;
                j.error = None;
                j.worker_id = None;
                started
            }
            JobMut::Lean(l) => {
                let started = time(l.st.started_at);
                l.st.state = State::Completed;
                l.st.completed_at = Some(us(now));
                // As `encode_state` writes a decoded job's result.
                l.st.result = result
                    .as_ref()
                    .map(|v| serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()));
                l.st.error = None;
                l.st.worker_id = None;
                started
            }
        };
        started.map(|t| (now - t).num_milliseconds()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::txn::{Out, Txn};
    use super::*;
    use crate::store::{FjallStore, Op, Store};
    use serde_json::{json, Map};
    use uuid::Uuid;

    /// What one transition left: the batch's writes, the reply's body, the event data and
    /// the figures the engine reports.
    #[derive(Debug, PartialEq)]
    struct Step {
        ops: Vec<Op>,
        body: bytes::Bytes,
        data: Map<String, Value>,
        attempt: u32,
        worker_id: Option<String>,
        took_ms: i64,
    }

    fn store_with(job: &Job, id: Uuid) -> (tempfile::TempDir, FjallStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FjallStore::open(dir.path(), 1 << 20).unwrap();
        let mut txn = Txn::default();
        txn.insert_job(id, job.clone(), None, false);
        txn.seal(|_| 3);
        store.commit(std::mem::take(&mut txn.batch)).unwrap();
        (dir, store)
    }

    /// Claim then complete the stored job, lean or decoded, each step in a batch of its
    /// own with nothing cached (as a FETCH behind a deep backlog, then its ACK after the
    /// cache has turned over).
    fn run(store: &mut FjallStore, id: Uuid, lean: bool) -> Vec<Step> {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:05.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let later = now + chrono::Duration::milliseconds(1500);
        let mut steps = Vec::new();
        for complete in [false, true] {
            let mut txn = Txn::default();
            let mut job = if lean {
                txn.job_lean(store, id, true).unwrap()
            } else {
                JobMut::Full(txn.job_mut(store, id).unwrap())
            };
            assert_eq!(matches!(job, JobMut::Lean(_)), lean, "loaded lean: {lean}");
            let took_ms = if complete {
                job.complete(later, Some(json!({"sent": true, "n": 1.5})))
            } else {
                job.claim(now, Some("worker-7f3a")) as i64
            };
            let f = job.fields();
            let mut data = Map::new();
            data.insert("job_id".into(), json!(f.id));
            data.insert("job_type".into(), json!(f.job_type));
            data.insert("queue".into(), json!(f.queue));
            data.insert("trace_id".into(), json!(f.trace_id));
            let attempt = job.attempt();
            let worker_id = job.worker_id().map(str::to_owned);
            txn.reply(tokio::sync::oneshot::channel().0, Out::Job(id));
            let written = txn.seal(|_| 3);
            let ops = txn.batch.ops.clone();
            store.commit(std::mem::take(&mut txn.batch)).unwrap();
            steps.push(Step {
                ops,
                body: written[&id].clone(),
                data,
                attempt,
                worker_id,
                took_ms,
            });
        }
        steps
    }

    /// Jobs the hot path sees: trace ids both ways, a priority, a retried one.
    fn typical_jobs() -> Vec<(Uuid, Job)> {
        let base = json!({
            "specversion": "1.0.0-rc.1", "type": "email.send", "queue": "mail",
            "args": ["user@example.com", {"template": "welcome", "locale": "en"}],
            "retry": crate::job::RetryPolicy::default(), "state": "available", "attempt": 0,
            "created_at": "2026-01-01T00:00:00Z", "enqueued_at": "2026-01-01T00:00:01.5Z",
        });
        let variants = [
            json!({"meta": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}}),
            json!({"meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}),
            json!({"meta": {"trace_id": 7, "traceparent": "00-abc-def-01"}, "priority": -3}),
            json!({"meta": {}, "attempt": 2, "error": {"message": "boom"},
                   "errors": [{"message": "boom", "attempt": 1}], "timeout": 30}),
        ];
        let mut jobs = Vec::new();
        for v in variants {
            let id = Uuid::now_v7();
            let mut envelope = base.clone();
            envelope["id"] = json!(id.to_string());
            for (k, x) in v.as_object().unwrap() {
                envelope[k] = x.clone();
            }
            jobs.push((id, serde_json::from_value(envelope).unwrap()));
        }
        jobs
    }

    #[test]
    fn lean_and_decoded_transitions_write_and_show_the_same_job() {
        for (id, job) in typical_jobs() {
            let v = &job.meta;
            let (_a, mut decoded) = store_with(&job, id);
            let (_b, mut lean) = store_with(&job, id);
            let want = run(&mut decoded, id, false);
            assert_eq!(run(&mut lean, id, true), want, "job {v:?}");
            // And what a reader decodes afterwards is the same job.
            let read = |s: &FjallStore| super::super::stored::read_job(s, id).unwrap().unwrap();
            assert_eq!(read(&lean), read(&decoded));
            assert_eq!(read(&lean).state, State::Completed);
        }
    }

    /// The cache keeps a pushed job lean (`Lean::of_job`): it must be the job its records
    /// load lean as, and decode to the job itself.
    #[test]
    fn a_decoded_job_made_lean_is_the_job_its_records_load_as() {
        for (id, job) in typical_jobs() {
            let parts = Parts::of(&job);
            let mine = Lean::of_job(&job, &parts).expect("a job OJS defines whole is lean");
            let (_d, store) = store_with(&job, id);
            let Some(super::super::stored::Loaded::Lean(stored, stored_parts)) =
                super::super::stored::load_lean(&store, id).unwrap()
            else {
                panic!("job {}: its records do not load lean", job.id);
            };
            // The sequence number is the batch's, set when the state record is written.
            let mut stored = *stored;
            stored.st.seq = mine.st.seq;
            assert_eq!(mine, stored, "job {}", job.id);
            assert_eq!(parts, stored_parts);
            assert_eq!(mine.decode(&parts).unwrap(), job);
        }
    }

    #[test]
    fn a_job_with_attributes_ojs_does_not_define_is_decoded_and_a_lean_one_decodes_on_demand() {
        let id = Uuid::now_v7();
        let job: Job = serde_json::from_value(json!({
            "specversion": "1.0.0-rc.1", "id": id.to_string(), "type": "t", "queue": "q",
            "args": [], "retry": crate::job::RetryPolicy::default(), "state": "available",
            "attempt": 0, "created_at": "2026-01-01T00:00:00Z",
            "rate_limit": {"key": "k", "concurrency": 1}, "x_custom": true,
        }))
        .unwrap();
        let (_d, store) = store_with(&job, id);
        let mut txn = Txn::default();
        let j = txn.job_lean(&store, id, false).unwrap();
        assert!(
            matches!(j, JobMut::Full(_)),
            "extra attributes are read decoded"
        );
        assert!(j.rate_limit().is_some());

        // A lean job that another transition needs decoded is decoded with its changes.
        let mut plain = job.clone();
        plain.extra.clear();
        let id = Uuid::now_v7();
        plain.id = id.to_string();
        let (_e, store) = store_with(&plain, id);
        let mut txn = Txn::default();
        let mut j = txn.job_lean(&store, id, true).unwrap();
        assert!(matches!(j, JobMut::Lean(_)));
        j.claim(Utc::now(), Some("w"));
        let full = txn.job_mut(&store, id).unwrap();
        assert_eq!((full.state, full.attempt), (State::Active, 1));
        assert_eq!(full.worker_id.as_deref(), Some("w"));
    }
}
