//! A job's JSON in three pieces, so a state change does not re-encode the whole envelope.
//!
//! After PUSH only the system-managed attributes of ojs-core §5.3 change (state, attempt,
//! timestamps, error, result, worker). `Parts` keeps the client's part already encoded: the
//! attributes before them and the unknown ones (`extra`) after them; `compose` writes the
//! system part between the two. The result is byte for byte what serializing `Job` gives
//! (checked by the tests here and, in debug builds, on every write).

use super::{ts, Job, RetryPolicy, State};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

/// The encoded client-supplied attributes of one job.
#[derive(Debug, Clone)]
pub struct Parts {
    /// `{"specversion":...` up to and without the comma before `state`.
    core: Bytes,
    /// `,"name":value...` for each attribute in `extra`, or empty.
    extra: Bytes,
}

#[derive(Serialize)]
struct CoreView<'a> {
    specversion: &'a str,
    id: &'a str,
    #[serde(rename = "type")]
    job_type: &'a str,
    queue: &'a str,
    args: &'a [Value],
    meta: &'a Map<String, Value>,
    priority: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled_at: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<&'a str>,
    retry: &'a RetryPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    unique: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a str>,
}

#[derive(Serialize)]
struct SystemView<'a> {
    state: State,
    attempt: u32,
    #[serde(with = "ts")]
    created_at: DateTime<Utc>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    enqueued_at: Option<DateTime<Utc>>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    started_at: Option<DateTime<Utc>>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    completed_at: Option<DateTime<Utc>>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    cancelled_at: Option<DateTime<Utc>>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    discarded_at: Option<DateTime<Utc>>,
    #[serde(with = "ts::opt", skip_serializing_if = "Option::is_none")]
    next_retry_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(skip_serializing_if = "no_values")]
    errors: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_id: Option<&'a str>,
}

fn no_values(v: &&[Value]) -> bool {
    v.is_empty()
}

/// The JSON of an object without its closing brace (and, with `open`, its opening one).
fn object_body<T: Serialize>(value: &T, open: bool) -> Vec<u8> {
    // Serializing these views cannot fail: every map key is a string.
    let mut v = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    v.pop(); // '}'
    if !open && !v.is_empty() {
        v.remove(0); // '{'
    }
    v
}

impl Parts {
    /// Bytes of the encoded client part.
    pub fn len(&self) -> usize {
        self.core.len() + self.extra.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn of(job: &Job) -> Parts {
        let core = CoreView {
            specversion: &job.specversion,
            id: &job.id,
            job_type: &job.job_type,
            queue: &job.queue,
            args: &job.args,
            meta: &job.meta,
            priority: job.priority,
            timeout: job.timeout,
            scheduled_at: job.scheduled_at.as_deref(),
            expires_at: job.expires_at.as_deref(),
            retry: &job.retry,
            unique: job.unique.as_ref(),
            schema: job.schema.as_deref(),
        };
        let mut extra = Vec::new();
        if !job.extra.is_empty() {
            extra.push(b',');
            extra.extend(object_body(&job.extra, false));
        }
        Parts {
            core: Bytes::from(object_body(&core, true)),
            extra: Bytes::from(extra),
        }
    }

    /// Append the job's JSON, with its current system attributes, to `out`.
    pub fn compose(&self, job: &Job, out: &mut Vec<u8>) {
        let system = SystemView {
            state: job.state,
            attempt: job.attempt,
            created_at: job.created_at,
            enqueued_at: job.enqueued_at,
            started_at: job.started_at,
            completed_at: job.completed_at,
            cancelled_at: job.cancelled_at,
            discarded_at: job.discarded_at,
            next_retry_at: job.next_retry_at,
            error: job.error.as_ref(),
            errors: &job.errors,
            result: job.result.as_ref(),
            worker_id: job.worker_id.as_deref(),
        };
        out.reserve(self.core.len() + self.extra.len() + 256);
        out.extend_from_slice(&self.core);
        out.push(b',');
        let start = out.len();
        // Drop the system object's own braces: its members join the envelope's.
        if serde_json::to_writer(&mut *out, &system).is_ok() && out.len() > start + 1 {
            out.remove(start);
            out.pop();
        }
        out.extend_from_slice(&self.extra);
        out.push(b'}');
        debug_assert!(
            serde_json::to_vec(job).is_ok_and(|full| out.ends_with(&full)),
            "job {}: a client-supplied attribute changed after its parts were encoded",
            job.id
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(extra: Value) -> Job {
        let mut v = json!({
            "specversion": "1.0.0-rc.1", "id": "019a0000-0000-7000-8000-000000000001",
            "type": "email.send", "queue": "mail", "args": ["a\"b", {"n": 1}],
            "meta": {"trace_id": "t"}, "priority": 3,
            "retry": crate::job::RetryPolicy::default(),
            "state": "available", "attempt": 0, "created_at": "2026-01-01T00:00:00.000001Z",
        });
        if let (Some(m), Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn compose_matches_serializing_the_whole_job() {
        let cases = [
            json!({}),
            json!({"x-custom": [1, 2], "other": "é\n"}),
            json!({"timeout": 30, "scheduled_at": "2026-01-02T00:00:00Z",
                   "expires_at": "2026-01-03T00:00:00+02:00", "unique": {"keys": ["type"]},
                   "schema": "s", "enqueued_at": "2026-01-01T00:00:01Z",
                   "error": {"type": "e"}, "errors": [{"type": "e"}], "result": null,
                   "worker_id": "w1"}),
        ];
        for extra in cases {
            let mut j = job(extra);
            let parts = Parts::of(&j);
            for step in 0..3 {
                let mut out = b"prefix".to_vec();
                parts.compose(&j, &mut out);
                assert_eq!(
                    String::from_utf8_lossy(&out[6..]),
                    serde_json::to_string(&j).unwrap(),
                    "step {step}"
                );
                // Later state changes reuse the same parts.
                j.state = State::Active;
                j.attempt += 1;
                j.started_at = Some(Utc::now());
                j.result = Some(json!({"ok": true}));
            }
        }
    }
}
