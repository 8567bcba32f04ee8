//! Faktory job JSON ⇄ the OJS envelope (the mapping table is PROTOCOL.md §15.2).

use super::err;
use super::names::{faktory_queue, faktory_type, ojs_queue, ojs_type};
use crate::error::OjsResult;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

const MIN_JID_CHARS: usize = 8;
/// Longest jid. Clients make ids of 12 to 36 characters; a jid is a key that is shown in
/// errors, events and the dead-letter set, so it is bounded like one (a megabyte was
/// accepted before).
pub const MAX_JID_BYTES: usize = 255;
/// Most retries a Faktory job may ask for.
pub const MAX_RETRY: i64 = 10_000;
/// Faktory's defaults and bounds for `reserve_for`, seconds.
const DEFAULT_RESERVE_FOR: u64 = 1800;
const MIN_RESERVE_FOR: u64 = 60;
const MAX_RESERVE_FOR: u64 = 86_400;
/// Faktory's retry schedule has no cap; ojsd's is a year.
const MAX_RETRY_INTERVAL: &str = "P365D";
/// The top-level fields of a Faktory job; any other is dropped, as Faktory does.
const FAKTORY_FIELDS: [&str; 12] = [
    "jid",
    "jobtype",
    "args",
    "queue",
    "at",
    "retry",
    "reserve_for",
    "custom",
    "backtrace",
    "created_at",
    "enqueued_at",
    "failure",
];

/// The OJS id of a Faktory jid: as is when it is a lowercase UUIDv7, otherwise a
/// UUIDv7-shaped id from a SHA-256 of the jid, so a jid finds its job after a restart
/// without any other index.
pub fn ojs_id(jid: &str) -> String {
    if let Ok(u) = uuid::Uuid::try_parse(jid) {
        if u.get_version_num() == 7 && u.hyphenated().to_string() == jid {
            return jid.to_owned();
        }
    }
    let mut b: [u8; 16] = Sha256::digest(jid.as_bytes())[..16]
        .try_into()
        .unwrap_or([0; 16]);
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).hyphenated().to_string()
}

/// A job as a user names it, on any port: a UUID is an OJS id and stays as it is; anything
/// else is taken for a Faktory jid and becomes that job's OJS id ([`ojs_id`]), so `JOB
/// <jid>`, the CLI, the dashboard's find box and `GET /ojs/v1/jobs/<jid>` find a job pushed
/// through the Faktory port.
pub fn job_ref(typed: String) -> String {
    if uuid::Uuid::try_parse(&typed).is_ok() {
        typed
    } else {
        ojs_id(&typed)
    }
}

/// The jid of a job (also used to report PUSHB's rejections).
pub fn jid_of(f: &Map<String, Value>) -> OjsResult<String> {
    match f.get("jid") {
        // Faktory's own words (manager.go), which clients compare.
        Some(Value::String(s)) if s.chars().count() < MIN_JID_CHARS => {
            Err(err("jobs must have a reasonable jid parameter"))
        }
        Some(Value::String(s)) => check_jid(s).map(str::to_owned),
        Some(_) | None => Err(err("jobs must have a reasonable jid parameter")),
    }
}

/// A jid as the key it is: at most [`MAX_JID_BYTES`], printable, without spaces.
pub fn check_jid(jid: &str) -> OjsResult<&str> {
    if crate::protocol::hello::is_token(jid, MAX_JID_BYTES) {
        return Ok(jid);
    }
    Err(err(format!(
        "jid must be a non-empty string of at most {MAX_JID_BYTES} bytes without spaces or \
         control characters"
    )))
}

/// A Faktory job object as the OJS envelope the engine validates and stores.
pub fn to_ojs_job(mut f: Map<String, Value>) -> OjsResult<Value> {
    let jid = jid_of(&f)?;
    let jobtype = match f.get("jobtype") {
        Some(Value::String(s)) => ojs_type(s)?,
        _ => return Err(err("jobs must have a jobtype parameter")),
    };
    let args = match f.remove("args") {
        Some(a @ Value::Array(_)) => a,
        _ => return Err(err("jobs must have an args parameter of type Array")),
    };
    let queue = match f.get("queue") {
        None | Some(Value::Null) => "default".to_owned(),
        Some(Value::String(s)) if s.is_empty() => "default".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(err("queue must be a string")),
    };
    f.insert("queue".into(), Value::String(queue.clone()));
    f.retain(|k, _| FAKTORY_FIELDS.contains(&k.as_str()));
    let mut job = Map::new();
    job.insert("id".into(), Value::String(ojs_id(&jid)));
    job.insert("type".into(), Value::String(jobtype));
    job.insert("queue".into(), Value::String(ojs_queue(&queue)?));
    job.insert("args".into(), args);
    match f.get("at") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            job.insert("scheduled_at".into(), Value::String(s.clone()));
        }
        Some(_) => return Err(err("at must be an RFC 3339 timestamp")),
    }
    let reserve_for = match f.get("reserve_for") {
        None | Some(Value::Null) => DEFAULT_RESERVE_FOR,
        Some(v) => match v.as_u64() {
            Some(0) => DEFAULT_RESERVE_FOR,
            Some(n) if n <= MAX_RESERVE_FOR => n.max(MIN_RESERVE_FOR),
            Some(_) => return Err(err("jobs cannot be reserved for more than one day")),
            None => return Err(err("reserve_for must be a non-negative integer")),
        },
    };
    job.insert("timeout".into(), json!(reserve_for));
    // Faktory's retry count as an OJS policy on Faktory's schedule: N retries then the dead
    // set (25 when absent); 0: deleted on the first failure; -1: straight to the dead set.
    let retry = match f.get("retry") {
        None | Some(Value::Null) => 25,
        Some(v) => match v.as_i64() {
            Some(n) if (-1..=MAX_RETRY).contains(&n) => n,
            _ => {
                return Err(err(format!(
                    "retry must be an integer from -1 to {MAX_RETRY}"
                )))
            }
        },
    };
    let exhaustion = if retry == 0 { "delete" } else { "dead_letter" };
    job.insert(
        "retry".into(),
        json!({"max_attempts": retry.max(0).saturating_add(1), "on_exhaustion": exhaustion,
            "backoff_strategy": "faktory", "max_interval": MAX_RETRY_INTERVAL}),
    );
    // What Faktory keeps (jid, jobtype, queue, retry, reserve_for, custom, backtrace,
    // created_at) rides along for FETCH to give back byte for byte.
    job.insert("faktory".into(), Value::Object(f));
    Ok(Value::Object(job))
}

/// An OJS job envelope as Faktory job JSON. Works for jobs pushed in either dialect.
pub fn to_faktory_job(ojs: &Value) -> Value {
    let mut out = match ojs.get("faktory") {
        Some(Value::Object(f)) => f.clone(),
        _ => Map::new(),
    };
    out.remove("failure");
    let text = |k: &str| ojs.get(k).and_then(Value::as_str);
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            out.entry(k.to_owned()).or_insert(v);
        }
    };
    put("jid", ojs.get("id").cloned());
    put("jobtype", text("type").map(|t| json!(faktory_type(t))));
    put("queue", text("queue").map(|q| json!(faktory_queue(q))));
    put("created_at", ojs.get("created_at").cloned());
    put("at", ojs.get("scheduled_at").cloned());
    put("reserve_for", ojs.get("timeout").cloned());
    let max = ojs
        .pointer("/retry/max_attempts")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    put("retry", Some(json!(max.saturating_sub(1))));
    // Set by the server on each enqueue: the current value, not the pushed one.
    if let Some(v) = ojs.get("enqueued_at").filter(|v| !v.is_null()) {
        out.insert("enqueued_at".into(), v.clone());
    }
    if let Some(Value::Object(e)) = ojs.get("error") {
        out.insert("failure".into(), failure(ojs, e, max));
    }
    out.insert(
        "args".into(),
        ojs.get("args").cloned().unwrap_or_else(|| json!([])),
    );
    Value::Object(out)
}

/// Faktory's `failure` record from the OJS error, attempt count and retry time.
fn failure(ojs: &Value, e: &Map<String, Value>, max_attempts: u64) -> Value {
    let attempt = ojs.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    // `attempt` counts deliveries: a job being handed out again has one more than it
    // has failures.
    let active = ojs.get("state").and_then(Value::as_str) == Some("active");
    let failures = if active {
        attempt.saturating_sub(1)
    } else {
        attempt
    }
    .max(1);
    let mut failure = Map::new();
    failure.insert("retry_count".into(), json!(failures - 1));
    failure.insert(
        "remaining".into(),
        json!(max_attempts.saturating_sub(failures)),
    );
    let last = ojs
        .pointer("/errors")
        .and_then(Value::as_array)
        .and_then(|a| a.last());
    let failed_at = last
        .and_then(|l| l.get("timestamp"))
        .or_else(|| ojs.get("discarded_at"));
    let next_at = ojs
        .get("next_retry_at")
        .filter(|v| !v.is_null())
        .or_else(|| last.and_then(|l| l.get("next_retry_at")));
    for (k, v) in [("failed_at", failed_at), ("next_at", next_at)] {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            failure.insert(k.into(), v.clone());
        }
    }
    failure.insert(
        "message".into(),
        e.get("message").cloned().unwrap_or(json!("")),
    );
    failure.insert(
        "errtype".into(),
        e.get("type").cloned().unwrap_or(json!("unknown")),
    );
    if let Some(bt) = e.get("backtrace").filter(|v| !v.is_null()) {
        failure.insert("backtrace".into(), bt.clone());
    }
    Value::Object(failure)
}
