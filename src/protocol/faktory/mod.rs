//! The Faktory dialect (`--faktory-listen`): Faktory command lines and job JSON turned
//! into the engine's typed `Command`s, and typed answers rendered as Faktory replies.
//! No engine logic here.
//!
//! A Faktory job is stored as one OJS job: `jid` becomes the OJS `id` (as is when it is a
//! lowercase UUIDv7, otherwise a UUIDv7-shaped id derived from a SHA-256 of the jid, so a
//! jid finds its job after a restart without an index), `jobtype` and `queue` become OJS
//! names (as is when valid there, otherwise a deterministic lowercase form), and the
//! Faktory originals are kept in the job's `faktory` extension attribute so FETCH gives
//! them back byte for byte.

use crate::engine::{Answer, Answered};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::validate::is_valid_job_type;
use crate::protocol::{Command, Reply};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

#[cfg(test)]
mod tests;

/// How the reply to one command is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Render {
    /// `+OK` or an error.
    Plain,
    /// ACK: `+OK` even for an unknown or finished jid, as Faktory does.
    Ack,
    /// FETCH: the job in Faktory's shape, or a null bulk.
    Fetch,
    /// BEAT: `+OK`, or `{"state": ...}` for a quiet or terminated worker.
    Beat,
    /// INFO: Faktory's document.
    Info,
}

/// The Faktory version this dialect claims in INFO (clients check it is at least 1.8).
pub const FAKTORY_VERSION: &str = "1.9.4";
const MIN_JID_CHARS: usize = 8;
/// Most retries a Faktory job may ask for.
const MAX_RETRY: i64 = 10_000;

fn err(msg: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::MalformedCommand, msg)
}

fn object(verb: &str, payload: &str) -> OjsResult<Map<String, Value>> {
    match crate::json::parse(payload.as_bytes()) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(err(format!("{verb} payload must be a JSON object"))),
        Err(e) => Err(err(format!("Invalid JSON: {e}"))),
    }
}

/// The OJS id of a Faktory jid.
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

/// The OJS job type of a Faktory jobtype.
pub fn ojs_type(jobtype: &str) -> String {
    if is_valid_job_type(jobtype) {
        return jobtype.to_owned();
    }
    let mapped: String = jobtype
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    format!("faktory.t_{mapped}")
}

/// The OJS queue of a Faktory queue name.
pub fn ojs_queue(queue: &str) -> String {
    if crate::job::is_valid_queue(queue) {
        return queue.to_owned();
    }
    let mapped: String = queue
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    if mapped.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        mapped
    } else {
        format!("q{mapped}")
    }
}

/// A Faktory job object as the OJS envelope the engine validates and stores.
pub fn to_ojs_job(mut f: Map<String, Value>) -> OjsResult<Value> {
    let jid = match f.get("jid") {
        Some(Value::String(s)) if s.chars().count() >= MIN_JID_CHARS => s.clone(),
        Some(Value::String(_)) => return Err(err("jid must be at least 8 characters")),
        None => return Err(err("jobs must have a reliable jid")),
        Some(_) => return Err(err("jid must be a string")),
    };
    let jobtype = match f.get("jobtype") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(err("jobs must have a jobtype parameter")),
    };
    let args = match f.remove("args") {
        Some(a @ Value::Array(_)) => a,
        None | Some(Value::Null) => json!([]),
        Some(_) => return Err(err("jobs must have an args parameter of type Array")),
    };
    let queue = match f.get("queue") {
        None | Some(Value::Null) => "default".to_owned(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(err("queue must be a non-empty string")),
    };
    f.insert("queue".into(), Value::String(queue.clone()));
    let mut job = Map::new();
    job.insert("id".into(), Value::String(ojs_id(&jid)));
    job.insert("type".into(), Value::String(ojs_type(&jobtype)));
    job.insert("queue".into(), Value::String(ojs_queue(&queue)));
    job.insert("args".into(), args);
    match f.get("at") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            job.insert("scheduled_at".into(), Value::String(s.clone()));
        }
        Some(_) => return Err(err("at must be an RFC 3339 timestamp")),
    }
    // Faktory's retry count as an OJS policy: N retries then the dead set (25 when absent);
    // 0: gone on the first failure; -1: straight to the dead set.
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
    let attempts = retry.max(0).saturating_add(1);
    let exhaustion = if retry == 0 { "discard" } else { "dead_letter" };
    job.insert(
        "retry".into(),
        json!({"max_attempts": attempts, "on_exhaustion": exhaustion}),
    );
    // Everything else Faktory keeps (jid, jobtype, queue, retry, reserve_for, custom,
    // backtrace, created_at, unknown fields) rides along for FETCH to give back.
    job.insert("faktory".into(), Value::Object(f));
    Ok(Value::Object(job))
}

/// One line in the Faktory dialect, with how its answer is rendered.
pub fn parse(line: &[u8]) -> OjsResult<(Command, Render)> {
    let line = std::str::from_utf8(line).map_err(|_| err("command is not valid UTF-8"))?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (verb, payload) = match line.split_once(' ') {
        Some((v, p)) => (v, p.trim()),
        None => (line, ""),
    };
    let plain = |c| Ok((c, Render::Plain));
    match verb {
        "HELLO" => plain(Command::Hello(Value::Object(object("HELLO", payload)?))),
        "END" => plain(Command::End),
        "PUSH" => {
            let job = to_ojs_job(object("PUSH", payload)?)?;
            let len = serde_json::to_vec(&job).map_or(0, |v| v.len());
            plain(Command::Push { job, len })
        }
        "FETCH" => {
            let queues: Vec<String> = payload.split_whitespace().map(ojs_queue).collect();
            if queues.is_empty() {
                return Err(err("FETCH needs at least one queue"));
            }
            Ok((
                Command::Fetch {
                    queues,
                    count: None,
                },
                Render::Fetch,
            ))
        }
        "ACK" => {
            let jid = jid_of("ACK", &object("ACK", payload)?)?;
            Ok((
                Command::Ack {
                    id: ojs_id(&jid),
                    result: None,
                },
                Render::Ack,
            ))
        }
        "FAIL" => {
            let mut obj = object("FAIL", payload)?;
            let jid = jid_of("FAIL", &obj)?;
            obj.remove("jid");
            obj.insert("id".into(), Value::String(ojs_id(&jid)));
            if !matches!(obj.get("errtype"), Some(Value::String(s)) if !s.is_empty()) {
                obj.insert("errtype".into(), Value::String("unknown".into()));
            }
            // The flat FAIL form is shared with the OJS dialect's parser.
            let line = format!("FAIL {}", Value::Object(obj));
            plain(crate::protocol::parse_command(line.as_bytes())?)
        }
        "BEAT" => {
            let obj = object("BEAT", payload)?;
            let wid = match obj.get("wid") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => return Err(err("BEAT: wid must be a non-empty string")),
            };
            Ok((
                Command::Beat {
                    wid,
                    active_job_ids: None,
                },
                Render::Beat,
            ))
        }
        "INFO" => Ok((Command::Info, Render::Info)),
        "BATCH" | "TRACK" => Err(err(format!(
            "{verb} is only available in Faktory Enterprise"
        ))),
        _ => Err(err(format!("Unknown command {verb}"))),
    }
}

fn jid_of(verb: &str, obj: &Map<String, Value>) -> OjsResult<String> {
    match obj.get("jid") {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(err(format!("{verb}: jid must be a non-empty string"))),
    }
}

/// An OJS job envelope as Faktory job JSON.
pub fn to_faktory_job(ojs: &Value) -> Value {
    let mut out = match ojs.get("faktory") {
        Some(Value::Object(f)) => f.clone(),
        _ => Map::new(),
    };
    let mut put = |k: &str, v: Option<&Value>| {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            out.entry(k.to_owned()).or_insert_with(|| v.clone());
        }
    };
    put("jid", ojs.get("id"));
    put("jobtype", ojs.get("type"));
    put("queue", ojs.get("queue"));
    put("created_at", ojs.get("created_at"));
    put("enqueued_at", ojs.get("enqueued_at"));
    put("at", ojs.get("scheduled_at"));
    // After a failure: Faktory's `failure` record from the OJS error, attempt and retry time.
    if let Some(Value::Object(e)) = ojs.get("error") {
        let attempt = ojs.get("attempt").and_then(Value::as_u64).unwrap_or(0);
        let max = ojs
            .pointer("/retry/max_attempts")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        // `attempt` counts deliveries, this one included: failures so far are one fewer
        // on a refetched job, and Faktory counts the first failure as retry 0.
        let failures = attempt.saturating_sub(1).max(1);
        let mut failure = Map::new();
        failure.insert("retry_count".into(), json!(failures.saturating_sub(1)));
        failure.insert("remaining".into(), json!(max.saturating_sub(failures)));
        for (k, v) in [
            ("failed_at", e.get("occurred_at").or(e.get("at"))),
            ("next_at", ojs.get("next_retry_at")),
        ] {
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
        out.insert("failure".into(), Value::Object(failure));
    }
    out.insert(
        "args".into(),
        ojs.get("args").cloned().unwrap_or_else(|| json!([])),
    );
    Value::Object(out)
}

/// A typed answer as a Faktory reply.
pub fn render(how: Render, a: Answered) -> Reply {
    match (how, a) {
        (Render::Ack, Err(e))
            if matches!(
                e.code,
                ErrorCode::NotFound | ErrorCode::InvalidStateTransition
            ) =>
        {
            Reply::Ok
        }
        (_, Err(e)) => Reply::Error(e),
        (Render::Fetch, Ok(Answer::Job(view))) => {
            match serde_json::from_slice::<Value>(view.json()) {
                Ok(v) => Reply::json(&to_faktory_job(&v)),
                Err(e) => Reply::Error(OjsError::new(
                    ErrorCode::BackendError,
                    format!("job envelope: {e}"),
                )),
            }
        }
        (Render::Info, Ok(Answer::Info(info))) => Reply::json(&info_document(&info)),
        (_, Ok(Answer::Ok)) => Reply::Ok,
        // PUSH answers the stored job in the OJS dialect; Faktory says +OK.
        (Render::Plain, Ok(Answer::Job(_))) => Reply::Ok,
        (_, Ok(Answer::Nothing)) => Reply::Null,
        (_, a) => Reply::from(a),
    }
}

/// INFO in Faktory's shape: `faktory.queues`, `faktory.tasks`, totals, `server`.
fn info_document(info: &crate::engine::api::Info) -> Value {
    use crate::job::State;
    let mut queues = Map::new();
    for q in &info.queues.0 {
        let size = q.counts.get(State::Available);
        queues.insert(q.name.clone(), json!(size));
    }
    let dead = info.totals.dead;
    json!({
        "faktory": {
            "total_failures": info.totals.failed,
            "total_processed": info.totals.completed,
            "total_enqueued": queues.values().filter_map(Value::as_u64).sum::<u64>(),
            "total_queues": queues.len(),
            "queues": queues,
            "tasks": {
                "Dead": {"size": dead},
                "Retries": {"size": info.queues.0.iter().map(|q| q.counts.get(State::Retryable)).sum::<usize>()},
                "Scheduled": {"size": info.queues.0.iter().map(|q| q.counts.get(State::Scheduled)).sum::<usize>()},
                "Workers": {"size": info.workers.len()},
            }
        },
        "server": {
            "description": "ojsd (Faktory dialect)",
            "faktory_version": FAKTORY_VERSION,
            "ojsd_version": info.server.version,
            "uptime": info.server.uptime_s,
            "connections": info.server.connections,
            "command_count": 0,
            "used_memory_mb": 0,
        }
    })
}
