//! Parsing one request line into a `Command`. Payloads stay as JSON values: what a job
//! envelope must contain is decided by the job model, not here, so another job dialect can
//! reuse this layer.

use super::faktory::job_ref;
use super::words::{json_object, json_payload, malformed, split_verb};
use crate::auth::{Need, Role};
use crate::engine::intake::Intake;
use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub use super::admin::{DeadCmd, DeadFilter, JobSet, MutateCmd, MutateOp, QueueCmd, SetFilter};
pub use crate::engine::request::{BeatReport, Command, WorkerDirective};

impl BeatReport {
    /// `current_state` (`""`, `"quiet"`, `"terminate"`) and `rss_kb` of a BEAT payload.
    pub fn of(obj: &Map<String, Value>) -> OjsResult<BeatReport> {
        let state = match obj.get("current_state") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match s.as_str() {
                "" | "running" => None,
                "quiet" => Some(WorkerDirective::Quiet),
                "terminate" => Some(WorkerDirective::Terminate),
                _ => return Err(malformed(format!("BEAT: unknown current_state {s:?}"))),
            },
            Some(_) => return Err(malformed("BEAT: current_state must be a string")),
        };
        let rss_kb = match obj.get("rss_kb") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| malformed("BEAT: rss_kb must be a non-negative integer"))?,
            ),
        };
        Ok(BeatReport { state, rss_kb })
    }
}

impl Command {
    /// The command as a client names it, for messages ("FETCH needs the worker role").
    pub fn verb(&self) -> &'static str {
        use super::cron::CronCmd;
        use super::workflow::WorkflowCmd;
        match self {
            Command::Hello(_) => "HELLO",
            Command::Push { .. } => "PUSH",
            Command::PushBatch(_) | Command::PushEach(_) => "PUSHB",
            Command::Fetch { .. } => "FETCH",
            Command::Ack { .. } | Command::AckFetch { .. } => "ACK",
            Command::AckBatch(_) => "ACKB",
            Command::Fail { .. } => "FAIL",
            Command::Beat { .. } => "BEAT",
            Command::Cancel { .. } => "CANCEL",
            Command::Activate { .. } => "ACTIVATE",
            Command::Job { .. } => "JOB",
            Command::Info => "INFO",
            Command::Cluster => "CLUSTER",
            Command::Queue(q) => match q {
                QueueCmd::Pause(_) => "QUEUE PAUSE",
                QueueCmd::Resume(_) => "QUEUE RESUME",
                QueueCmd::List => "QUEUE LIST",
                QueueCmd::Stats(_) => "QUEUE STATS",
                QueueCmd::Purge { .. } => "QUEUE PURGE",
                QueueCmd::Remove(_) => "QUEUE REMOVE",
                QueueCmd::Limit { .. } => "QUEUE LIMIT",
                QueueCmd::Latency(_) => "QUEUE LATENCY",
            },
            Command::Dead(d) => match d {
                DeadCmd::List { .. } => "DEAD LIST",
                DeadCmd::Get(_) => "DEAD GET",
                DeadCmd::Stats => "DEAD STATS",
                DeadCmd::Retry(_) | DeadCmd::RetryAll(_) => "DEAD RETRY",
                DeadCmd::Delete(_) | DeadCmd::DeleteAll(_) => "DEAD DELETE",
            },
            Command::Worker { directive, .. } => match directive {
                WorkerDirective::Quiet => "WORKER QUIET",
                WorkerDirective::Terminate => "WORKER TERMINATE",
            },
            Command::Workers => "WORKERS",
            Command::Jobs(_) => "JOBS",
            Command::Overview => "OVERVIEW",
            Command::StatsHistory { .. } => "STATS HISTORY",
            Command::Progress { .. } => "PROGRESS",
            Command::Unclaim { .. } => "UNCLAIM",
            Command::Subscribe { .. } => "SUBSCRIBE",
            Command::ClockAdvance { .. } => "CLOCK ADVANCE",
            Command::Cron(c) => match c {
                CronCmd::Add(_) => "CRON ADD",
                CronCmd::List { .. } => "CRON LIST",
                CronCmd::Get(_) => "CRON GET",
                CronCmd::Del(_) | CronCmd::Remove(_) => "CRON DEL",
                CronCmd::Enable(_) => "CRON ENABLE",
                CronCmd::Disable(_) => "CRON DISABLE",
            },
            Command::Workflow(w) => match w {
                WorkflowCmd::Create { .. } => "WORKFLOW CREATE",
                WorkflowCmd::Get(_) => "WORKFLOW GET",
                WorkflowCmd::Cancel(_) => "WORKFLOW CANCEL",
                WorkflowCmd::List { .. } => "WORKFLOW LIST",
                WorkflowCmd::Outbox { .. } => "WORKFLOW OUTBOX",
                WorkflowCmd::Delivered(_) => "WORKFLOW DELIVERED",
                WorkflowCmd::Deliver { .. } => "WORKFLOW DELIVER",
            },
            Command::Mutate(_) => "MUTATE",
            Command::Flush => "FLUSH",
            Command::End => "END",
        }
    }
}

/// The least role a command needs (`auth::Role::may`): the one table of the TCP front end,
/// both dialects (PROTOCOL.md §13.7). Every variant is named, so a new command does not
/// build until it is classified.
pub fn required_role(cmd: &Command) -> Need {
    use super::cron::CronCmd;
    use super::workflow::WorkflowCmd;
    match cmd {
        // Reading a job or workflow by its id: whoever knows the id (its producer, the
        // worker holding it, an observer). INFO holds counts, no payloads.
        Command::Hello(_) | Command::End | Command::Job { .. } | Command::Info => Need::Any,
        Command::Workflow(WorkflowCmd::Get(_)) => Need::Any,
        Command::Push { .. } | Command::PushBatch(_) | Command::PushEach(_) => Need::Producer,
        Command::Workflow(WorkflowCmd::Create { .. }) => Need::Producer,
        Command::Fetch { .. }
        | Command::Ack { .. }
        | Command::AckFetch { .. }
        | Command::AckBatch(_)
        | Command::Fail { .. }
        | Command::Beat { .. }
        | Command::Unclaim { .. }
        | Command::Progress { .. } => Need::Worker,
        // Reading what is not one's own: lists, every payload, events.
        Command::Workers
        | Command::Jobs(_)
        | Command::Overview
        | Command::StatsHistory { .. }
        | Command::Cluster
        | Command::Subscribe { .. } => Need::Observer,
        Command::Queue(QueueCmd::List | QueueCmd::Stats(_) | QueueCmd::Latency(_)) => {
            Need::Observer
        }
        Command::Dead(DeadCmd::List { .. } | DeadCmd::Get(_) | DeadCmd::Stats) => Need::Observer,
        Command::Cron(CronCmd::List { .. } | CronCmd::Get(_)) => Need::Observer,
        Command::Workflow(WorkflowCmd::List { .. }) => Need::Observer,
        // Changing what is not one's own.
        Command::Queue(
            QueueCmd::Pause(_)
            | QueueCmd::Resume(_)
            | QueueCmd::Purge { .. }
            | QueueCmd::Remove(_)
            | QueueCmd::Limit { .. },
        ) => Need::Admin,
        Command::Dead(
            DeadCmd::Retry(_) | DeadCmd::RetryAll(_) | DeadCmd::Delete(_) | DeadCmd::DeleteAll(_),
        ) => Need::Admin,
        Command::Cron(
            CronCmd::Add(_)
            | CronCmd::Del(_)
            | CronCmd::Remove(_)
            | CronCmd::Enable(_)
            | CronCmd::Disable(_),
        ) => Need::Admin,
        Command::Workflow(WorkflowCmd::Cancel(_)) => Need::Admin,
        // Between a cluster's partitions only; no client dialect parses them.
        Command::Workflow(
            WorkflowCmd::Outbox { .. } | WorkflowCmd::Delivered(_) | WorkflowCmd::Deliver { .. },
        ) => Need::Admin,
        Command::Cancel { .. }
        | Command::Activate { .. }
        | Command::Worker { .. }
        | Command::ClockAdvance { .. }
        | Command::Mutate(_)
        | Command::Flush => Need::Admin,
    }
}

/// `Ok` if `role` may run `cmd`; otherwise the refusal (`FORBIDDEN <verb> needs the <role>
/// role`), after which the connection stays open.
pub fn authorize(role: Role, cmd: &Command) -> OjsResult<()> {
    let need = required_role(cmd);
    if role.may(need) {
        Ok(())
    } else {
        Err(OjsError::new(
            ErrorCode::Forbidden,
            format!("{} needs the {} role", cmd.verb(), need.role()),
        ))
    }
}

pub const MAX_FETCH_COUNT: usize = 1000;
/// ACKs in one ACKB: what one FETCH COUNT can hand out.
pub const MAX_ACK_BATCH: usize = MAX_FETCH_COUNT;
/// Most queues an ACK's `fetch` names.
pub const MAX_FETCH_QUEUES: usize = 256;
const MAX_BACKTRACE_FRAMES: usize = 50;
const MAX_BACKTRACE_CHARS: usize = 10_000;
/// Largest `error.details` a FAIL may attach, encoded.
const MAX_DETAILS_BYTES: usize = 16 * 1024;

/// `id` (OJS) or `jid` (Faktory) from an object payload.
fn job_id(verb: &str, obj: &Map<String, Value>) -> OjsResult<String> {
    match obj.get("id").or_else(|| obj.get("jid")) {
        Some(Value::String(s)) if !s.is_empty() => Ok(job_ref(s.clone())),
        Some(_) => Err(malformed(format!("{verb}: id must be a non-empty string"))),
        None => Err(malformed(format!("{verb}: id is required"))),
    }
}

/// ACK's optional `"fetch": ["queue", ...]` (and `"wait_ms"`): the next job to take.
fn next_fetch(
    obj: &Map<String, Value>,
) -> OjsResult<Option<(Vec<String>, Option<std::time::Duration>)>> {
    let queues = match obj.get("fetch") {
        None | Some(Value::Null) if obj.contains_key("wait_ms") => {
            return Err(malformed("ACK: wait_ms needs fetch"))
        }
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_FETCH_QUEUES => a
            .iter()
            .map(|q| q.as_str().filter(|q| !q.is_empty()).map(str::to_owned))
            .collect::<Option<Vec<_>>>(),
        Some(_) => None,
    }
    .ok_or_else(|| {
        malformed(format!(
            "ACK: fetch must be an array of 1 to {MAX_FETCH_QUEUES} queue names"
        ))
    })?;
    let wait = match obj.get("wait_ms") {
        None | Some(Value::Null) => None,
        Some(v) => Some(std::time::Duration::from_millis(v.as_u64().ok_or_else(
            || malformed("ACK: wait_ms must be a non-negative integer"),
        )?)),
    };
    Ok(Some((queues, wait)))
}

fn id_payload(verb: &str, payload: &str) -> OjsResult<String> {
    // `CANCEL <id>` is accepted as well as `CANCEL {"id": ...}`, for people at a terminal.
    if !payload.starts_with('{') {
        let id = payload.trim();
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(malformed(format!("{verb} needs a job id")));
        }
        return Ok(job_ref(id.to_string()));
    }
    job_id(verb, &json_object(verb, payload)?)
}

fn single_word(verb: &str, payload: &str, what: &str) -> OjsResult<String> {
    let mut words = payload.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Ok(w.to_string()),
        _ => Err(malformed(format!("{verb} needs exactly one {what}"))),
    }
}

/// Normalise a FAIL payload's error to `{type, message, backtrace?}`.
pub(crate) fn fail_error(obj: &Map<String, Value>) -> OjsResult<Value> {
    let (etype, message, backtrace, extra) = match obj.get("error") {
        Some(Value::Object(e)) => (e.get("type"), e.get("message"), e.get("backtrace"), Some(e)),
        Some(_) => return Err(malformed("FAIL: error must be an object")),
        // Faktory's flat form.
        None => (
            obj.get("errtype"),
            obj.get("message"),
            obj.get("backtrace"),
            None,
        ),
    };
    let etype = match etype {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(malformed("FAIL: error.type must be a non-empty string")),
    };
    let message = match message {
        Some(Value::String(s)) => s.clone(),
        None => String::new(),
        _ => return Err(malformed("FAIL: error.message must be a string")),
    };
    let mut out = Map::new();
    out.insert("type".into(), Value::String(etype));
    out.insert("message".into(), Value::String(message));
    match backtrace {
        None | Some(Value::Null) => {}
        Some(Value::Array(frames)) => {
            let mut kept = Vec::new();
            let mut chars = 0;
            for f in frames.iter().take(MAX_BACKTRACE_FRAMES) {
                let Value::String(s) = f else {
                    return Err(malformed("FAIL: backtrace must be an array of strings"));
                };
                chars += s.len();
                if chars > MAX_BACKTRACE_CHARS {
                    break;
                }
                kept.push(Value::String(s.clone()));
            }
            out.insert("backtrace".into(), Value::Array(kept));
        }
        Some(_) => return Err(malformed("FAIL: backtrace must be an array of strings")),
    }
    // `retryable: false` discards the job at once (ojs-core §7.4 "non-retryable");
    // `details` is kept with the error (the HTTP binding's NACK), within a size limit.
    if let Some(e) = extra {
        match e.get("retryable") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => {
                out.insert("retryable".into(), Value::Bool(*b));
            }
            Some(_) => return Err(malformed("FAIL: error.retryable must be a boolean")),
        }
        match e.get("details") {
            None | Some(Value::Null) => {}
            Some(d @ Value::Object(_)) => {
                let size = serde_json::to_vec(d).map_or(usize::MAX, |v| v.len());
                if size > MAX_DETAILS_BYTES {
                    return Err(malformed(format!(
                        "FAIL: error.details is {size} bytes; the limit is {MAX_DETAILS_BYTES}"
                    )));
                }
                out.insert("details".into(), d.clone());
            }
            Some(_) => return Err(malformed("FAIL: error.details must be an object")),
        }
        // ojs-errors §4's code (HANDLER_ERROR, HANDLER_TIMEOUT, ...), kept in the history.
        match e.get("code") {
            None | Some(Value::Null) => {}
            Some(Value::String(c))
                if (1..=64).contains(&c.len())
                    && c.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') =>
            {
                out.insert("code".into(), Value::String(c.clone()));
            }
            Some(_) => {
                return Err(malformed(
                    "FAIL: error.code must be an OJS error code: 1 to 64 of A-Z, 0-9 and _",
                ))
            }
        }
    }
    Ok(Value::Object(out))
}

fn parse_fetch(payload: &str) -> OjsResult<Command> {
    let words: Vec<&str> = payload.split_whitespace().collect();
    let mut queues = Vec::new();
    let mut count = None;
    let mut i = 0;
    while i < words.len() {
        // Queue names are lowercase, so the uppercase keyword cannot clash with one.
        if words[i] == "COUNT" {
            let n = words
                .get(i + 1)
                .and_then(|w| w.parse::<usize>().ok())
                .filter(|n| (1..=MAX_FETCH_COUNT).contains(n))
                .ok_or_else(|| {
                    malformed(format!(
                        "FETCH: COUNT needs a number from 1 to {MAX_FETCH_COUNT}"
                    ))
                })?;
            if i + 2 != words.len() {
                return Err(malformed("FETCH: COUNT n must come last"));
            }
            count = Some(n);
            break;
        }
        queues.push(words[i].to_string());
        i += 1;
    }
    if queues.is_empty() {
        return Err(malformed("FETCH needs at least one queue name"));
    }
    Ok(Command::Fetch {
        queues,
        count,
        wait: None,
    })
}

/// A job that carries the HTTP binding's `options` object (as the SDKs send it) gets it
/// folded into the envelope, as HTTP PUSH does, instead of kept as an unknown attribute.
fn with_options(job: Value) -> OjsResult<Value> {
    match job {
        Value::Object(m) if m.contains_key("options") || m.contains_key("max_attempts") => {
            crate::job::options::fold(m, |msg| OjsError::new(ErrorCode::InvalidPayload, msg))
                .map(Value::Object)
        }
        other => Ok(other),
    }
}

/// Parse one line (without its line ending); `intake` validates the bodies of jobs, cron
/// registrations and workflows into the engine's typed forms.
pub fn parse_command(line: &[u8], intake: &Intake) -> OjsResult<Command> {
    let line =
        std::str::from_utf8(line).map_err(|_| malformed("command line is not valid UTF-8"))?;
    let line = line.trim_end();
    let (verb, payload) = split_verb(line.trim_start());
    let upper = verb.to_ascii_uppercase();
    match upper.as_str() {
        "" => Err(malformed("empty command line")),
        "HELLO" => Ok(Command::Hello(super::hello::check(json_object(
            "HELLO", payload,
        )?)?)),
        "PUSH" => {
            let job = with_options(json_payload("PUSH", payload)?)?;
            Ok(Command::Push {
                job: Box::new(intake.job(job, payload.len())?),
                len: payload.len(),
                resend: false,
            })
        }
        "PUSHB" => {
            let raws: Vec<Box<RawValue>> = crate::json::parse(payload.as_bytes())
                .map_err(|e| malformed(format!("PUSHB payload must be a JSON array: {e}")))?;
            if raws.is_empty() {
                return Err(malformed("PUSHB needs at least one job"));
            }
            let mut jobs = Vec::with_capacity(raws.len());
            for raw in raws {
                let len = raw.get().len();
                let v: Value = serde_json::from_str(raw.get())
                    .map_err(|e| malformed(format!("PUSHB: invalid JSON: {e}")))?;
                jobs.push((with_options(v)?, len));
            }
            Ok(Command::PushBatch(intake.batch(jobs)?))
        }
        "FETCH" => parse_fetch(payload),
        "ACK" => {
            let obj = json_object("ACK", payload)?;
            let id = job_id("ACK", &obj)?;
            let result = obj.get("result").cloned();
            match next_fetch(&obj)? {
                None => Ok(Command::Ack {
                    id,
                    result,
                    handed_out: false,
                }),
                Some((queues, wait)) => Ok(Command::AckFetch {
                    id,
                    result,
                    queues,
                    wait,
                }),
            }
        }
        "ACKB" => {
            let items: Vec<Map<String, Value>> = crate::json::parse(payload.as_bytes())
                .map_err(|e| {
                    malformed(format!(
                        "ACKB payload must be a JSON array of ACK objects ({{\"id\", \"result\"?}}): {e}"
                    ))
                })?;
            if items.is_empty() || items.len() > MAX_ACK_BATCH {
                return Err(malformed(format!(
                    "ACKB takes 1 to {MAX_ACK_BATCH} ACKs; got {}",
                    items.len()
                )));
            }
            let mut acks = Vec::with_capacity(items.len());
            for (i, obj) in items.into_iter().enumerate() {
                if obj.contains_key("fetch") || obj.contains_key("wait_ms") {
                    return Err(malformed(format!(
                        "ACKB: ACK {i} has fetch; ACKB does not fetch (use FETCH ... COUNT n)"
                    )));
                }
                let id = job_id(&format!("ACKB: ACK {i}"), &obj)?;
                let result = obj.get("result").cloned();
                acks.push(crate::engine::request::AckItem { id, result });
            }
            Ok(Command::AckBatch(acks))
        }
        "FAIL" => {
            let obj = json_object("FAIL", payload)?;
            let id = job_id("FAIL", &obj)?;
            Ok(Command::Fail {
                id,
                error: fail_error(&obj)?,
                handed_out: false,
                requeue: matches!(obj.get("requeue"), Some(Value::Bool(true))),
            })
        }
        "BEAT" => {
            let obj = json_object("BEAT", payload)?;
            let wid = match obj.get("wid").or_else(|| obj.get("worker_id")) {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => return Err(malformed("BEAT: wid must be a non-empty string")),
            };
            let active_job_ids = match obj.get("active_job_ids") {
                None | Some(Value::Null) => None,
                Some(Value::Array(a)) => Some(
                    a.iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| malformed("BEAT: active_job_ids must be strings"))?,
                ),
                Some(_) => return Err(malformed("BEAT: active_job_ids must be an array")),
            };
            Ok(Command::Beat {
                wid,
                active_job_ids,
                report: BeatReport::of(&obj)?,
            })
        }
        "CANCEL" => Ok(Command::Cancel {
            id: id_payload("CANCEL", payload)?,
        }),
        "ACTIVATE" => Ok(Command::Activate {
            id: id_payload("ACTIVATE", payload)?,
        }),
        "JOB" => Ok(Command::Job {
            id: job_ref(single_word("JOB", payload, "job id")?),
        }),
        "INFO" => Ok(Command::Info),
        "CLUSTER" if payload.is_empty() => Ok(Command::Cluster),
        "CLUSTER" => Err(malformed("CLUSTER takes no arguments")),
        "QUEUE" => super::admin::parse_queue(payload).map(Command::Queue),
        "DEAD" => super::admin::parse_dead(payload).map(Command::Dead),
        "WORKERS" if payload.is_empty() => Ok(Command::Workers),
        "JOBS" => super::admin::parse_jobs(payload).map(Command::Jobs),
        "OVERVIEW" if payload.is_empty() => Ok(Command::Overview),
        "STATS" => super::admin::parse_stats(payload),
        "OVERVIEW" => Err(malformed("OVERVIEW takes no arguments")),
        "WORKERS" => Err(malformed("WORKERS takes no arguments")),
        "WORKER" if payload.eq_ignore_ascii_case("LIST") => Ok(Command::Workers),
        "WORKER" => {
            let (sub, rest) = split_verb(payload);
            let wid = single_word("WORKER", rest, "worker id")?;
            let directive = match sub.to_ascii_uppercase().as_str() {
                "QUIET" => WorkerDirective::Quiet,
                "TERMINATE" => WorkerDirective::Terminate,
                _ => return Err(malformed("WORKER needs LIST, QUIET or TERMINATE")),
            };
            Ok(Command::Worker { wid, directive })
        }
        "CLOCK" => {
            let (sub, rest) = split_verb(payload);
            if !sub.eq_ignore_ascii_case("ADVANCE") {
                return Err(malformed("CLOCK needs ADVANCE <seconds>"));
            }
            let secs: f64 = rest
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s < 1e10)
                .ok_or_else(|| malformed("CLOCK ADVANCE needs a non-negative number of seconds"))?;
            Ok(Command::ClockAdvance {
                ms: (secs * 1000.0) as i64,
            })
        }
        "PROGRESS" => {
            let obj = json_object("PROGRESS", payload)?;
            let id = job_id("PROGRESS", &obj)?;
            let percent = obj
                .get("percent")
                .or_else(|| obj.get("progress_percent"))
                .and_then(Value::as_f64)
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| malformed("PROGRESS: percent must be a number from 0 to 100"))?;
            let message = match obj.get("message").or_else(|| obj.get("progress_message")) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(malformed("PROGRESS: message must be a string")),
            };
            Ok(Command::Progress {
                id,
                percent,
                message,
            })
        }
        "SUBSCRIBE" => {
            let obj = if payload.is_empty() {
                Map::new()
            } else {
                json_object("SUBSCRIBE", payload)?
            };
            let filter = crate::events::EventFilter::from_json(&obj)?;
            let start = match (obj.get("after"), obj.get("since")) {
                (Some(_), Some(_)) => {
                    return Err(malformed("SUBSCRIBE: give after or since, not both"))
                }
                (Some(a), None) => match (
                    a.as_u64(),
                    a.as_str().and_then(crate::events::parse_position),
                ) {
                    (Some(c), _) => crate::events::Start::After(c),
                    (None, Some(each)) => crate::events::Start::Each(each),
                    _ => {
                        return Err(malformed(
                            "SUBSCRIBE: after must be a non-negative integer cursor or a \
                             stream position (\"p<N>:<cursor>,...\")",
                        ))
                    }
                },
                (None, Some(s)) => crate::events::Start::Since(
                    s.as_str().and_then(crate::job::parse_ts).ok_or_else(|| {
                        malformed("SUBSCRIBE: since must be an RFC 3339 timestamp with a zone")
                    })?,
                ),
                (None, None) => crate::events::Start::Live,
            };
            Ok(Command::Subscribe { filter, start })
        }
        "CRON" => super::cron::parse(payload, intake),
        "WORKFLOW" => super::workflow::parse(payload, intake),
        "END" => Ok(Command::End),
        _ => {
            let shown: String = verb.chars().take(32).collect();
            Err(OjsError::new(
                ErrorCode::UnknownCommand,
                format!("unknown command {shown}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_command(line: &[u8]) -> OjsResult<Command> {
        super::parse_command(line, &Intake::default())
    }

    fn code(line: &str) -> ErrorCode {
        parse_command(line.as_bytes()).unwrap_err().code
    }

    /// A node hands requests to the partition's owner as serde data (issue 21): every kind
    /// of request, bodies included, reads back as what was written.
    #[test]
    fn every_request_survives_a_serde_round_trip() {
        let lines: &[&[u8]] = &[
            br#"HELLO {"wid":"w1","queues":["q"]}"#,
            br#"PUSH {"type":"a.b","args":[1,{"x":[2.5,null]}],"queue":"q","meta":{"k":"v"},"priority":3,"scheduled_at":"+PT5S","retry":{"max_attempts":7},"unique":{"keys":["type"],"period":"PT1M"},"custom":true}"#,
            br#"PUSHB [{"type":"a","args":[]},{"type":"b","args":["x"],"queue":"q2"}]"#,
            b"FETCH critical default COUNT 5",
            br#"ACK {"id":"0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b","result":{"ok":1},"fetch":["q"],"wait_ms":100}"#,
            br#"FAIL {"id":"0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b","error":{"type":"E","message":"m"}}"#,
            br#"ACKB [{"id":"0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b","result":{"ok":1}},{"jid":"x12345678"}]"#,
            br#"BEAT {"wid":"w1"}"#,
            b"QUEUE PAUSE q1 q2",
            br#"SUBSCRIBE {"event_types":["job.*"],"queues":["q"]}"#,
            br#"CRON ADD {"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Paris","type":"report","args":[1],"options":{"queue":"q"}}"#,
            br#"WORKFLOW CREATE {"type":"batch","name":"b","jobs":[{"type":"a","args":[]}],"callbacks":{"on_complete":{"type":"done","args":[]}}}"#,
            br#"WORKFLOW CREATE {"name":"dag","steps":[{"id":"a","type":"x","args":[]},{"id":"b","type":"y","args":[],"depends_on":["a"]}]}"#,
            b"INFO",
        ];
        for line in lines {
            let cmd = parse_command(line)
                .unwrap_or_else(|e| panic!("{}: {e:?}", String::from_utf8_lossy(line)));
            let bytes = serde_json::to_vec(&cmd).unwrap();
            let back: Command = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                serde_json::to_vec(&back).unwrap(),
                bytes,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&cmd));
        }
        let faktory: &[&[u8]] = &[
            br#"PUSH {"jid":"abcdefgh12","jobtype":"SomeJob","args":[1],"queue":"Q_1","retry":3}"#,
            br#"PUSHB [{"jid":"abcdefgh13","jobtype":"A","args":[]}]"#,
            br#"MUTATE {"cmd":"kill","target":"retries","filter":{"jobtype":"a"}}"#,
        ];
        for line in faktory {
            let (cmd, _) = crate::protocol::faktory::parse(line, &Intake::default()).unwrap();
            let bytes = serde_json::to_vec(&cmd).unwrap();
            let back: Command = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(serde_json::to_vec(&back).unwrap(), bytes);
        }
    }

    #[test]
    fn parses_the_core_commands() {
        let Command::Push { job, len, resend } =
            parse_command(br#"PUSH {"type":"a","args":[]}"#).unwrap()
        else {
            panic!("not a PUSH")
        };
        assert_eq!((job.job.job_type.as_str(), len, resend), ("a", 22, false));
        assert_eq!(
            parse_command(b"FETCH critical default COUNT 5").unwrap(),
            Command::Fetch {
                queues: vec!["critical".into(), "default".into()],
                count: Some(5),
                wait: None,
            }
        );
        assert_eq!(
            parse_command(br#"ack {"jid":"x","result":1}"#).unwrap(),
            Command::Ack {
                id: crate::protocol::faktory::ojs_id("x"),
                result: Some(json!(1)),
                handed_out: false,
            }
        );
        assert_eq!(
            parse_command(b"CANCEL abc").unwrap(),
            Command::Cancel {
                id: crate::protocol::faktory::ojs_id("abc")
            }
        );
        assert_eq!(parse_command(b"END").unwrap(), Command::End);
    }

    #[test]
    fn pushb_keeps_each_jobs_size() {
        match parse_command(br#"PUSHB [{"type":"a","args":[]}, {"type":"bb","args":[]}]"#).unwrap()
        {
            Command::PushBatch(jobs) => {
                assert_eq!(jobs.iter().map(|j| j.1).collect::<Vec<_>>(), vec![22, 23]);
            }
            other => panic!("{other:?}"),
        }
        // The batch is validated where it is parsed, all or nothing, naming the position.
        let e = parse_command(br#"PUSHB [{"type":"a","args":[]}, {"a":1}]"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidPayload);
        assert!(e.message.starts_with("job 1: "), "{}", e.message);
    }

    #[test]
    fn fail_accepts_ojs_and_faktory_shapes() {
        let ojs = parse_command(
            br#"FAIL {"id":"x","error":{"type":"E","message":"m","backtrace":["a"]}}"#,
        )
        .unwrap();
        let fak =
            parse_command(br#"FAIL {"jid":"x","errtype":"E","message":"m","backtrace":["a"]}"#)
                .unwrap();
        assert_eq!(ojs, fak);
    }

    #[test]
    fn bad_input_gets_a_code() {
        assert_eq!(code("NOPE"), ErrorCode::UnknownCommand);
        assert_eq!(code("PUSH {oops"), ErrorCode::MalformedCommand);
        assert_eq!(code("PUSH"), ErrorCode::MalformedCommand);
        assert_eq!(code("FETCH"), ErrorCode::MalformedCommand);
        assert_eq!(code("FETCH q COUNT 0"), ErrorCode::MalformedCommand);
        assert_eq!(code("FETCH q COUNT 5 x"), ErrorCode::MalformedCommand);
        assert_eq!(code(r#"ACK {"result":1}"#), ErrorCode::MalformedCommand);
        assert_eq!(code(r#"ACK [1]"#), ErrorCode::MalformedCommand);
        assert_eq!(
            code(r#"FAIL {"id":"x","error":{"message":"m"}}"#),
            ErrorCode::MalformedCommand
        );
        assert_eq!(code("PUSHB []"), ErrorCode::MalformedCommand);
        assert_eq!(code("ACKB []"), ErrorCode::MalformedCommand);
        assert_eq!(code(r#"ACKB {"id":"x"}"#), ErrorCode::MalformedCommand);
        assert_eq!(
            code(r#"ACKB [{"id":"x"},{"result":1}]"#),
            ErrorCode::MalformedCommand
        );
        assert_eq!(code(r#"ACKB [{"id":"x"},7]"#), ErrorCode::MalformedCommand);
        assert_eq!(
            code(r#"ACKB [{"id":"x","fetch":["q"]}]"#),
            ErrorCode::MalformedCommand
        );
        let many = format!(
            "ACKB [{}]",
            vec![r#"{"id":"x"}"#; MAX_ACK_BATCH + 1].join(",")
        );
        assert_eq!(code(&many), ErrorCode::MalformedCommand);
        let most = format!("ACKB [{}]", vec![r#"{"id":"x"}"#; MAX_ACK_BATCH].join(","));
        assert!(
            matches!(parse_command(most.as_bytes()), Ok(Command::AckBatch(a)) if a.len() == MAX_ACK_BATCH)
        );
        assert_eq!(code("QUEUE PAUSE"), ErrorCode::MalformedCommand);
        assert_eq!(code(""), ErrorCode::MalformedCommand);
        assert_eq!(
            parse_command(&[0xff, 0xfe, b' ', b'x']).unwrap_err().code,
            ErrorCode::MalformedCommand
        );
    }
}
