//! The Faktory dialect (`--faktory-listen`): Faktory command lines and job JSON turned
//! into the engine's typed `Command`s, and typed answers rendered as Faktory replies.
//! No engine logic here.
//!
//! A Faktory job is stored as one OJS job (job.rs): `jid` becomes the OJS `id` (a
//! UUIDv7-shaped SHA-256 of the jid, so a jid finds its job after a restart), `jobtype` and
//! `queue` become OJS names reversibly (names.rs), `retry` and `reserve_for` become the
//! OJS retry policy (on Faktory's schedule) and `timeout`, and the Faktory fields are kept
//! in the job's `faktory` extension attribute so FETCH gives them back byte for byte.

mod job;
mod names;

pub use job::{check_jid, job_ref, ojs_id, to_faktory_job, to_ojs_job, MAX_JID_BYTES};
pub use names::{
    faktory_queue, faktory_type, ojs_queue, ojs_type, queue_ref, type_ref, written_names,
};

use crate::engine::api::{QueueList, QueueStats};

/// A queue listing with each queue named as its users wrote it: a queue a Faktory client
/// named `Critical_Q` shows as `Critical_Q`, not as the OJS name it is filed under (an
/// OJS name shows as it is). Every admin command takes either name ([`queue_ref`]).
pub fn shown_queues(mut list: QueueList) -> QueueList {
    for q in &mut list.queues {
        q.name = faktory_queue(&q.name);
    }
    list
}

/// [`shown_queues`] for one queue's stats.
pub fn shown_stats(mut stats: QueueStats) -> QueueStats {
    stats.summary.name = faktory_queue(&stats.summary.name);
    stats
}

use crate::engine::api::Info;
use crate::engine::intake::Intake;
use crate::engine::{Answer, Answered};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::protocol::command::{BeatReport, JobSet, MutateCmd, MutateOp, QueueCmd, SetFilter};
use crate::protocol::{Command, Reply};
use serde_json::{json, Map, Value};

#[cfg(test)]
mod tests;

/// How the reply to one command is rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Render {
    /// `+OK` or an error.
    Plain,
    /// ACK: `+OK`, or the error (unknown jid, a job that is not active, another worker's).
    Ack,
    /// FETCH: the job in Faktory's shape, or a null bulk.
    Fetch,
    /// BEAT: `+OK`, or `{"state": ...}` for a quiet or terminated worker.
    Beat,
    /// INFO: Faktory's document.
    Info,
    /// PUSHB: `{jid: error}` for the refused jobs; `rejected` holds those this layer
    /// refused already, `sent` the jids of the jobs sent to the engine, in order.
    PushB {
        sent: Vec<String>,
        rejected: Map<String, Value>,
    },
    /// QUEUE LATENCY: `{queue: seconds}` under the Faktory names.
    Latency,
}

/// The Faktory version this dialect claims in INFO (clients check it is at least 1.8).
pub const FAKTORY_VERSION: &str = "1.9.4";
/// FAIL's limits, as Faktory cuts them.
const MAX_ERRTYPE_CHARS: usize = 100;
const MAX_MESSAGE_CHARS: usize = 1000;
/// Most jobs in one PUSHB.
const MAX_PUSHB_JOBS: usize = 10_000;

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

fn encoded_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |v| v.len())
}

/// One line in the Faktory dialect, with how its answer is rendered.
pub fn parse(line: &[u8], intake: &Intake) -> OjsResult<(Command, Render)> {
    let line = std::str::from_utf8(line).map_err(|_| err("command is not valid UTF-8"))?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (verb, payload) = match line.split_once(' ') {
        Some((v, p)) => (v, p.trim()),
        None => (line, ""),
    };
    let plain = |c| Ok((c, Render::Plain));
    match verb {
        "HELLO" => plain(Command::Hello(crate::protocol::hello::check(object(
            "HELLO", payload,
        )?)?)),
        "END" => plain(Command::End),
        "PUSH" => {
            let job = to_ojs_job(object("PUSH", payload)?)?;
            let len = encoded_len(&job);
            plain(Command::Push {
                job: Box::new(intake.job(job, len)?),
                len,
                resend: true,
            })
        }
        "PUSHB" => push_batch(payload, intake),
        "FETCH" => {
            let queues = payload
                .split_whitespace()
                .map(ojs_queue)
                .collect::<OjsResult<Vec<_>>>()?;
            if queues.is_empty() {
                return Err(err("FETCH needs at least one queue"));
            }
            let fetch = Command::Fetch {
                queues,
                count: None,
                wait: None,
            };
            Ok((fetch, Render::Fetch))
        }
        "ACK" => {
            let obj = object("ACK", payload)?;
            let ack = Command::Ack {
                id: ojs_id(&jid_field("ACK", &obj)?),
                result: None,
                handed_out: true,
            };
            Ok((ack, Render::Ack))
        }
        "FAIL" => plain(fail(object("FAIL", payload)?)?),
        "BEAT" => {
            let obj = object("BEAT", payload)?;
            let wid = match obj.get("wid") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => return Err(err("BEAT: wid must be a non-empty string")),
            };
            let beat = Command::Beat {
                wid,
                active_job_ids: None,
                report: BeatReport::of(&obj)?,
            };
            Ok((beat, Render::Beat))
        }
        "INFO" => Ok((Command::Info, Render::Info)),
        "FLUSH" => plain(Command::Flush),
        "MUTATE" => plain(Command::Mutate(mutate(object("MUTATE", payload)?)?)),
        "QUEUE" => queue(payload),
        "BATCH" | "TRACK" => Err(err(format!(
            "{verb} is only available in Faktory Enterprise"
        ))),
        _ => Err(err(format!("unknown command {verb}"))),
    }
}

fn jid_field(verb: &str, obj: &Map<String, Value>) -> OjsResult<String> {
    match obj.get("jid") {
        Some(Value::String(s)) => check_jid(s)
            .map(str::to_owned)
            .map_err(|e| err(format!("{verb}: {}", e.message))),
        _ => Err(err(format!("{verb}: jid must be a non-empty string"))),
    }
}

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// FAIL: `errtype` and `message` default to `unknown` and are cut to Faktory's lengths;
/// the backtrace to 50 lines (by the shared error parser).
fn fail(obj: Map<String, Value>) -> OjsResult<Command> {
    let jid = jid_field("FAIL", &obj)?;
    let text = |k: &str, max: usize| match obj.get(k) {
        Some(Value::String(s)) if !s.is_empty() => Value::String(cut(s, max)),
        _ => Value::String("unknown".into()),
    };
    let mut flat = Map::new();
    flat.insert("errtype".into(), text("errtype", MAX_ERRTYPE_CHARS));
    flat.insert("message".into(), text("message", MAX_MESSAGE_CHARS));
    if let Some(bt) = obj.get("backtrace") {
        flat.insert("backtrace".into(), bt.clone());
    }
    Ok(Command::Fail {
        id: ojs_id(&jid),
        error: crate::protocol::command::fail_error(&flat)?,
        handed_out: true,
        requeue: false,
    })
}

/// PUSHB: each job on its own; the refused ones are reported by jid.
fn push_batch(payload: &str, intake: &Intake) -> OjsResult<(Command, Render)> {
    let jobs = match crate::json::parse(payload.as_bytes()) {
        Ok(Value::Array(a)) => a,
        Ok(_) => return Err(err("PUSHB payload must be a JSON array of jobs")),
        Err(e) => return Err(err(format!("Invalid JSON: {e}"))),
    };
    if jobs.len() > MAX_PUSHB_JOBS {
        return Err(err(format!("PUSHB takes at most {MAX_PUSHB_JOBS} jobs")));
    }
    let (mut sent, mut rejected, mut valid) = (Vec::new(), Map::new(), Vec::new());
    for (i, j) in jobs.into_iter().enumerate() {
        let Value::Object(f) = j else {
            rejected.insert(format!("{i}"), json!("job must be a JSON object"));
            continue;
        };
        // A jid that is no key is reported by its position, not echoed back.
        let jid = match &f.get("jid") {
            Some(Value::String(s)) if check_jid(s).is_ok() => s.clone(),
            _ => format!("{i}"),
        };
        let checked = to_ojs_job(f).and_then(|job| {
            let len = encoded_len(&job);
            intake.job(job, len).map(|j| (j, len))
        });
        match checked {
            Ok(job) => {
                sent.push(jid);
                valid.push(job);
            }
            Err(e) => {
                rejected.insert(jid, Value::String(e.message));
            }
        }
    }
    Ok((Command::PushEach(valid), Render::PushB { sent, rejected }))
}

/// `MUTATE {"cmd", "target", "filter": {"jids", "jobtype", "regexp"}}`.
fn mutate(obj: Map<String, Value>) -> OjsResult<MutateCmd> {
    use crate::protocol::admin::{MAX_FILTER_IDS, MAX_PATTERN_BYTES};
    let op = match obj.get("cmd").and_then(Value::as_str) {
        Some("kill") => MutateOp::Kill,
        Some("requeue") => MutateOp::Requeue,
        Some("discard") => MutateOp::Discard,
        Some("clear") => MutateOp::Clear,
        _ => return Err(err("Invalid mutate command")),
    };
    let set = match obj.get("target").and_then(Value::as_str) {
        Some("retries") => JobSet::Retries,
        Some("scheduled") => JobSet::Scheduled,
        Some("dead") => JobSet::Dead,
        _ => return Err(err("Invalid target for mutation")),
    };
    let mut filter = SetFilter::default();
    match obj.get("filter") {
        None | Some(Value::Null) => {}
        Some(Value::Object(f)) => {
            match f.get("jids") {
                None | Some(Value::Null) => {}
                Some(Value::Array(a)) if a.len() <= MAX_FILTER_IDS => {
                    let jids = a.iter().map(|v| match v.as_str() {
                        Some(jid) => check_jid(jid).map(ojs_id),
                        None => Err(err("filter jids must be strings")),
                    });
                    filter.ids = Some(jids.collect::<OjsResult<Vec<_>>>()?);
                }
                Some(_) => {
                    return Err(err(format!(
                        "filter jids must be an array of at most {MAX_FILTER_IDS} strings"
                    )))
                }
            }
            match f.get("jobtype") {
                None | Some(Value::Null) => {}
                Some(Value::String(t)) if t.is_empty() => {}
                Some(Value::String(t)) => filter.job_type = Some(ojs_type(t)?),
                Some(_) => return Err(err("filter jobtype must be a string")),
            }
            match f.get("regexp") {
                None | Some(Value::Null) => {}
                Some(Value::String(p)) if p.is_empty() || p == "*" => {}
                Some(Value::String(p)) if p.len() <= MAX_PATTERN_BYTES => {
                    filter.pattern = Some(p.clone())
                }
                Some(_) => {
                    return Err(err(format!(
                        "filter regexp must be a string of at most {MAX_PATTERN_BYTES} bytes"
                    )))
                }
            }
        }
        Some(_) => return Err(err("filter must be an object")),
    }
    Ok(MutateCmd { op, set, filter })
}

/// `QUEUE PAUSE|RESUME|REMOVE|LATENCY name...` (`*`: every queue).
fn queue(payload: &str) -> OjsResult<(Command, Render)> {
    let mut words = payload.split_whitespace();
    let sub = words.next().unwrap_or("");
    let names = words
        .map(|n| {
            if n == "*" {
                Ok(n.to_owned())
            } else {
                ojs_queue(n)
            }
        })
        .collect::<OjsResult<Vec<_>>>()?;
    if names.is_empty() {
        return Err(err(format!(
            "QUEUE {sub} needs at least one queue name or *"
        )));
    }
    let cmd = match sub {
        "PAUSE" => QueueCmd::Pause(names),
        "RESUME" => QueueCmd::Resume(names),
        "REMOVE" => QueueCmd::Remove(names),
        "LATENCY" => return Ok((Command::Queue(QueueCmd::Latency(names)), Render::Latency)),
        _ => return Err(err(format!("unknown QUEUE subcommand {sub:?}"))),
    };
    Ok((Command::Queue(cmd), Render::Plain))
}

/// A typed answer as a Faktory reply.
pub fn render(how: Render, a: Answered) -> Reply {
    match (how, a) {
        (Render::Plain | Render::Ack, Err(e)) if e.code == ErrorCode::NotFound => {
            Reply::Error(OjsError::new(e.code, "Job not found"))
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
        (Render::PushB { sent, mut rejected }, Ok(Answer::PushedEach(p))) => {
            for (i, e) in p.rejected {
                let jid = sent.get(i).cloned().unwrap_or_else(|| i.to_string());
                rejected.insert(jid, Value::String(e.message));
            }
            Reply::json(&Value::Object(rejected))
        }
        (Render::Latency, Ok(Answer::Latencies(l))) => {
            let map: Map<String, Value> = l
                .into_iter()
                .map(|q| (faktory_queue(&q.queue), json!(q.seconds)))
                .collect();
            Reply::json(&Value::Object(map))
        }
        (_, Ok(Answer::Ok)) => Reply::Ok,
        // The OJS dialect answers these with documents; Faktory says +OK.
        (
            Render::Plain,
            Ok(Answer::Job(_) | Answer::Mutated(_) | Answer::Flushed(_) | Answer::PushedEach(_)),
        ) => Reply::Ok,
        (_, Ok(Answer::Nothing)) => Reply::Null,
        (_, a) => Reply::from(a),
    }
}

/// INFO in Faktory's shape: `faktory.queues`, `faktory.tasks`, `faktory.sets`, totals,
/// `server`; queue names as Faktory wrote them.
pub fn info_document(info: &Info) -> Value {
    use crate::job::State;
    let mut queues = Map::new();
    for q in &info.queues.0 {
        queues.insert(
            faktory_queue(&q.name),
            json!(q.counts.get(State::Available)),
        );
    }
    let sum = |s: State| info.queues.0.iter().map(|q| q.counts.get(s)).sum::<usize>();
    let (scheduled, retries, busy) = (
        sum(State::Scheduled),
        sum(State::Retryable),
        sum(State::Active),
    );
    let dead = info.totals.dead;
    json!({
        "now": info.server.now,
        // Faktory writes "%H:%M:%S UTC" (faktory-rs parses exactly that).
        "server_utc_time": format!("{} UTC", info.server.now.get(11..19).unwrap_or("00:00:00")),
        "faktory": {
            "total_failures": info.totals.failed,
            "total_processed": info.totals.completed.saturating_add(info.totals.failed),
            "total_enqueued": queues.values().filter_map(Value::as_u64).sum::<u64>(),
            "total_queues": queues.len(),
            "queues": queues,
            "sets": {"scheduled": scheduled, "retries": retries, "dead": dead, "working": busy},
            "tasks": {
                "Busy": {"size": busy},
                "Dead": {"size": dead},
                "Retries": {"size": retries},
                "Scheduled": {"size": scheduled},
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
