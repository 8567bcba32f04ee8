//! A job's JSON in three pieces, so a state change does not re-encode the whole envelope.
//!
//! After PUSH only the system-managed attributes of ojs-core §5.3 change (state, attempt,
//! timestamps, error, result, worker). `Parts` keeps the client's part already encoded: the
//! attributes before them and the unknown ones (`extra`) after them; `compose` writes the
//! system part between the two. The result is byte for byte what serializing `Job` gives
//! (checked by the tests here and, in debug builds, on every write).

use super::{format_ts, Job, RetryPolicy, State};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

/// The encoded client-supplied attributes of one job.
#[derive(Debug, Clone, PartialEq)]
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

/// A JSON value of the system part: decoded, or as stored (already valid JSON).
#[derive(Debug, Clone, Copy)]
pub enum JsonRef<'a> {
    Value(&'a Value),
    /// An array of values (the error history).
    Values(&'a [Value]),
    Raw(&'a [u8]),
}

/// The system-managed attributes of ojs-core §5.3, in the envelope's order. Written by
/// hand (`write_to`) so that they can come from a `Job` or straight from a stored state
/// record; in debug builds `Parts::compose` checks the result against serde's.
#[derive(Debug, Clone, Copy)]
pub struct System<'a> {
    pub state: State,
    pub attempt: u32,
    pub created_at: DateTime<Utc>,
    pub enqueued_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub discarded_at: Option<DateTime<Utc>>,
    pub next_retry_at: Option<DateTime<Utc>>,
    pub error: Option<JsonRef<'a>>,
    /// `None` for an empty history (which the envelope leaves out).
    pub errors: Option<JsonRef<'a>>,
    pub result: Option<JsonRef<'a>>,
    pub worker_id: Option<&'a str>,
}

impl<'a> System<'a> {
    pub fn of(job: &'a Job) -> System<'a> {
        System {
            state: job.state,
            attempt: job.attempt,
            created_at: job.created_at,
            enqueued_at: job.enqueued_at,
            started_at: job.started_at,
            completed_at: job.completed_at,
            cancelled_at: job.cancelled_at,
            discarded_at: job.discarded_at,
            next_retry_at: job.next_retry_at,
            error: job.error.as_ref().map(JsonRef::Value),
            errors: (!job.errors.is_empty()).then_some(JsonRef::Values(&job.errors)),
            result: job.result.as_ref().map(JsonRef::Value),
            worker_id: job.worker_id.as_deref(),
        }
    }

    /// The members, without braces: `"state":"...","attempt":N,...`.
    fn write_to(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let _ = write!(
            out,
            "\"state\":\"{}\",\"attempt\":{},\"created_at\":\"{}\"",
            self.state.as_str(),
            self.attempt,
            format_ts(self.created_at)
        );
        let times = [
            ("enqueued_at", self.enqueued_at),
            ("started_at", self.started_at),
            ("completed_at", self.completed_at),
            ("cancelled_at", self.cancelled_at),
            ("discarded_at", self.discarded_at),
            ("next_retry_at", self.next_retry_at),
        ];
        for (name, t) in times {
            if let Some(t) = t {
                let _ = write!(out, ",\"{name}\":\"{}\"", format_ts(t));
            }
        }
        let json = |out: &mut Vec<u8>, name: &str, v: JsonRef<'_>| {
            let _ = write!(out, ",\"{name}\":");
            match v {
                // Serializing values into a Vec cannot fail.
                JsonRef::Value(v) => {
                    let _ = serde_json::to_writer(&mut *out, v);
                }
                JsonRef::Values(v) => {
                    let _ = serde_json::to_writer(&mut *out, v);
                }
                JsonRef::Raw(b) => out.extend_from_slice(b),
            }
        };
        if let Some(e) = self.error {
            json(out, "error", e);
        }
        if let Some(e) = self.errors {
            json(out, "errors", e);
        }
        if let Some(r) = self.result {
            json(out, "result", r);
        }
        if let Some(w) = self.worker_id {
            out.extend_from_slice(b",\"worker_id\":");
            let _ = serde_json::to_writer(&mut *out, w);
        }
    }
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

    /// The client part as stored: the JSON from `{` up to the system part, and the
    /// unknown attributes after it (empty, or starting with a comma).
    pub fn core(&self) -> &[u8] {
        &self.core
    }

    pub fn extra(&self) -> &[u8] {
        &self.extra
    }

    /// The parts as `core` and `extra` gave them, or `None` if they cannot be the two
    /// halves of an envelope (a damaged record).
    pub fn from_stored(core: &[u8], extra: &[u8]) -> Option<Parts> {
        let core_ok = core.first() == Some(&b'{') && core.len() > 1 && core.last() != Some(&b',');
        let extra_ok = extra.is_empty() || (extra.first() == Some(&b',') && extra.len() > 1);
        (core_ok && extra_ok).then(|| Parts {
            core: Bytes::copy_from_slice(core),
            extra: Bytes::copy_from_slice(extra),
        })
    }

    /// Append the job's JSON, with its current system attributes, to `out`.
    pub fn compose(&self, job: &Job, out: &mut Vec<u8>) {
        let start = out.len();
        write_envelope(&self.core, &self.extra, &System::of(job), out);
        debug_assert!(
            serde_json::to_vec(job).is_ok_and(|full| out[start..] == full[..]),
            "job {}: a client-supplied attribute changed after its parts were encoded",
            job.id
        );
    }
}

/// Append the envelope of a stored job: its client part as stored (`core`, `extra`, as
/// `Parts` holds them) around the system part `system` (from its state record).
pub fn compose_stored(core: &[u8], extra: &[u8], system: &System<'_>, out: &mut Vec<u8>) {
    write_envelope(core, extra, system, out);
}

fn write_envelope(core: &[u8], extra: &[u8], system: &System<'_>, out: &mut Vec<u8>) {
    out.reserve(core.len() + extra.len() + 256);
    out.extend_from_slice(core);
    out.push(b',');
    system.write_to(out);
    out.extend_from_slice(extra);
    out.push(b'}');
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
