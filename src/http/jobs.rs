//! The OJS HTTP binding's job and worker routes (ojs-http-binding §9, §10), each one engine
//! command, so a job looks the same over HTTP and TCP:
//!
//! | route | command | answer |
//! |---|---|---|
//! | `POST /ojs/v1/jobs` | PUSH | `201 {"job"}` + `Location` |
//! | `POST /ojs/v1/jobs/batch` | PUSHB (atomic) | `201 {"jobs", "count"}` |
//! | `GET /ojs/v1/jobs/{id}` | JOB | `200 {"job"}` |
//! | `DELETE /ojs/v1/jobs/{id}` | CANCEL | `200 {"job"}`; `409` once terminal (the binding) |
//! | `POST /ojs/v1/jobs/{id}/activate` | ACTIVATE | `200 {"job"}` |
//! | `POST /ojs/v1/admin/jobs/{id}/retry` | MUTATE requeue of that id (retryable, scheduled), DEAD RETRY (discarded) | `200 {"job"}`; `409` in any other state |
//! | `POST /ojs/v1/workers/fetch` | FETCH (waits up to `wait_ms`, at most `--fetch-wait-ms`) | `200 {"jobs": [...]}`, and `"job"` (that job) when one was asked for and came |
//! | `POST /ojs/v1/workers/ack` | ACK | `200 {"acknowledged", "job_id", "id", "state", "completed_at", "job"}` |
//! | `POST /ojs/v1/workers/nack` | FAIL | `200 {"job_id", "id", "state", "attempt", "max_attempts", "next_attempt_at"/"discarded_at", "retry_delay_ms", "job"}` |
//! | `POST /ojs/v1/workers/heartbeat` | BEAT | `200 {"state", "jobs_extended", "server_time"}` |
//!
//! A request may send the binding's shape (`options.queue`, `timeout_ms`, `retry.*_ms`,
//! `delay_until`, `tags`, `metadata`...) or an OJS envelope's top-level attributes; both
//! become the envelope the TCP PUSH takes, validated by the same code.

use super::error::ApiError;
use super::{json_response, AppState};
use crate::engine::api::JobView;
use crate::engine::Answer;
use crate::error::{ErrorCode, OjsError};
use crate::job::State;
use crate::protocol::admin::{DeadCmd, JobSet, MutateCmd, MutateOp, SetFilter};
use crate::protocol::command::BeatReport;
use crate::protocol::command::WorkerDirective;
use crate::protocol::faktory::job_ref;
use crate::protocol::reply::envelopes;
use crate::protocol::Command;
use axum::body::Bytes;
use axum::extract::{Path, State as AxState};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use std::sync::Arc;

fn object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    match crate::json::parse(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not accepted: {e}"
        ))),
    }
}

/// Milliseconds as the ISO 8601 duration the envelope's retry policy takes.
/// A binding request (§9.1) as the OJS envelope PUSH takes: its `options` folded into the
/// envelope (`job::options`), and `args` required.
fn envelope(req: Map<String, Value>) -> Result<Value, ApiError> {
    let req = crate::job::options::fold(req, ApiError::bad_request)?;
    match req.get("args") {
        Some(Value::Array(_)) => {}
        None => {
            return Err(ApiError::bad_request(
                "args is required and must be a JSON array",
            ))
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "The 'args' field must be a JSON array.",
            ))
        }
    }
    Ok(Value::Object(req))
}

fn push_cmd(job: Value) -> (Value, usize) {
    let len = serde_json::to_vec(&job)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    (job, len)
}

/// A job as the binding shows it: the OJS envelope with `max_attempts` beside `retry`
/// (every example of ojs-http-binding carries it; the SDKs read it there). The envelope's
/// bytes are kept as they are; only the attribute is added in front.
pub(super) fn binding_view(view: JobView) -> JobView {
    #[derive(serde::Deserialize)]
    struct Max {
        max_attempts: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    struct Envelope {
        retry: Option<Max>,
        max_attempts: Option<serde::de::IgnoredAny>,
    }
    let json = view.json();
    let Ok(env) = serde_json::from_slice::<Envelope>(json) else {
        return view;
    };
    let (Some(n), None) = (env.retry.and_then(|r| r.max_attempts), env.max_attempts) else {
        return view;
    };
    let Some(rest) = json.strip_prefix(b"{") else {
        return view;
    };
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(format!("{{\"max_attempts\":{n}").as_bytes());
    if rest.first() != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    JobView::encoded(Bytes::from(out))
}

/// [`binding_view`] for each job.
pub(super) fn binding_views(views: Vec<JobView>) -> Vec<JobView> {
    views.into_iter().map(binding_view).collect()
}

fn job_body(status: StatusCode, job: &JobView) -> Response {
    let job = binding_view(job.clone());
    let mut body = Vec::with_capacity(job.json().len() + 8);
    body.extend_from_slice(b"{\"job\":");
    body.extend_from_slice(job.json());
    body.push(b'}');
    json_response(status, body)
}

async fn one_job(st: &AppState, wid: Option<Arc<str>>, cmd: Command) -> Result<JobView, ApiError> {
    match st.engine.call(wid, cmd).await? {
        Answer::Job(j) => Ok(j),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// The job's current envelope (JOB).
async fn read(st: &AppState, id: &str) -> Result<JobView, ApiError> {
    one_job(st, None, Command::Job { id: id.to_string() }).await
}

/// The engine marks the existing job it answers for an ignored duplicate with a top-level
/// `"deduplicated": true`.
fn deduplicated(job: &JobView) -> bool {
    let bytes = job.json();
    let needle = b"\"deduplicated\":true";
    bytes.windows(needle.len()).any(|w| w == needle)
        && serde_json::from_slice::<Map<String, Value>>(bytes)
            .is_ok_and(|m| m.get("deduplicated") == Some(&Value::Bool(true)))
}

pub(super) async fn push(
    AxState(st): AxState<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (job, len) = push_cmd(envelope(object(&body)?)?);
    let job = st.engine.intake().job(job, len)?;
    let job = one_job(
        &st,
        None,
        Command::Push {
            job: Box::new(job),
            len,
            resend: false,
        },
    )
    .await?;
    // An ignored unique duplicate stored nothing: 200 with the existing job, not 201
    // (ojs-unique-jobs).
    let status = if deduplicated(&job) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut resp = job_body(status, &job);
    let id = job.job()?.id;
    if let Ok(v) = HeaderValue::from_str(&format!("/ojs/v1/jobs/{id}")) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

pub(super) async fn push_batch(
    AxState(st): AxState<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut req = object(&body)?;
    let Some(Value::Array(jobs)) = req.remove("jobs") else {
        return Err(ApiError::bad_request("jobs must be a JSON array of jobs"));
    };
    if jobs.is_empty() {
        return Err(ApiError::bad_request("jobs must hold at least one job"));
    }
    let mut batch = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.into_iter().enumerate() {
        let Value::Object(j) = j else {
            return Err(ApiError::bad_request(format!(
                "jobs[{i}] must be a JSON object"
            )));
        };
        let job = envelope(j).map_err(|mut e| {
            e.message = format!("jobs[{i}]: {}", e.message);
            e
        })?;
        batch.push(push_cmd(job));
    }
    let batch = st.engine.intake().batch(batch)?;
    let views = match st.engine.call(None, Command::PushBatch(batch)).await? {
        Answer::Jobs(v) => v,
        Answer::Job(j) => vec![j],
        other => return Err(ApiError::unexpected(&other)),
    };
    let mut body = b"{\"jobs\":".to_vec();
    let count = views.len();
    body.extend_from_slice(&envelopes(&binding_views(views)));
    body.extend_from_slice(format!(",\"count\":{count}}}").as_bytes());
    Ok(json_response(StatusCode::CREATED, body))
}

pub(super) async fn get_job(
    AxState(st): AxState<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_ref(id);
    Ok(job_body(StatusCode::OK, &read(&st, &id).await?))
}

/// The binding answers `409` for a job already finished, where TCP CANCEL is idempotent
/// (ojs-core §7.6; PROTOCOL.md §10 and §14). One engine step cancels and answers the job as
/// it left it.
pub(super) async fn cancel(
    AxState(st): AxState<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_ref(id);
    let cmd = Command::Cancel { id: id.clone() };
    let job = changed(&st, None, &id, cmd, "a job that is not yet finished").await?;
    Ok(job_body(StatusCode::OK, &job))
}

pub(super) async fn activate(
    AxState(st): AxState<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_ref(id);
    let cmd = Command::Activate { id: id.clone() };
    let job = changed(&st, None, &id, cmd, "a pending job").await?;
    Ok(job_body(StatusCode::OK, &job))
}

/// `POST /ojs/v1/admin/jobs/{id}/retry` (ojs-admin-api §7.4): run a waiting job now. A
/// `retryable` or `scheduled` job becomes `available` at once (MUTATE requeue of that one
/// id in its set: attempt and error history kept, the backoff or the schedule skipped); a
/// `discarded` one goes back as `DEAD RETRY` does. Any other state, or a job that left its
/// set before the change (a retry came due, a worker took it), is a `409` naming the state.
pub(super) async fn retry_now(
    AxState(st): AxState<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_ref(id);
    let job = read(&st, &id).await?.job()?;
    const EXPECTED: &str = "a retryable, scheduled or discarded job";
    let set = match job.state {
        State::Retryable => JobSet::Retries,
        State::Scheduled => JobSet::Scheduled,
        State::Discarded => {
            st.engine
                .call(None, Command::Dead(DeadCmd::Retry(job.id.clone())))
                .await?;
            return Ok(job_body(StatusCode::OK, &read(&st, &job.id).await?));
        }
        other => return Err(conflict(&id, other, EXPECTED)),
    };
    let cmd = Command::Mutate(MutateCmd {
        op: MutateOp::Requeue,
        set,
        filter: SetFilter {
            ids: Some(vec![job.id.clone()]),
            ..SetFilter::default()
        },
    });
    let changed = match st.engine.call(None, cmd).await? {
        Answer::Mutated(m) => m.changed,
        other => return Err(ApiError::unexpected(&other)),
    };
    let now = read(&st, &job.id).await?;
    if changed == 0 {
        return Err(conflict(&id, now.job()?.state, EXPECTED));
    }
    Ok(job_body(StatusCode::OK, &now))
}

/// Run a state change and answer the job as that change left it, from the same engine
/// step (`EngineHandle::call_viewed`): nothing that happens later in the batch (a waiting
/// FETCH claiming a requeued job) shows. A refused transition is a 409 naming the job's
/// state; a job the change deleted is read as not found.
async fn changed(
    st: &AppState,
    wid: Option<Arc<str>>,
    id: &str,
    cmd: Command,
    expected: &str,
) -> Result<JobView, ApiError> {
    match st.engine.call_viewed(wid, cmd).await {
        Ok(Answer::Job(j)) => Ok(j),
        Ok(Answer::Nothing) => Err(ApiError::from(OjsError::new(
            ErrorCode::NotFound,
            format!("job {id} was deleted by this change"),
        ))),
        Ok(other) => Err(ApiError::unexpected(&other)),
        Err(e) if e.code == ErrorCode::InvalidStateTransition => {
            // Read only on this error path, for the state the binding's details name.
            match read(st, id).await {
                Ok(j) => Err(conflict(id, j.job()?.state, expected)),
                Err(_) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

fn conflict(id: &str, state: State, expected: &str) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::CONFLICT,
        "INVALID_STATE_TRANSITION",
        format!("job {id} is {}; this needs {expected}", state.as_str()),
    );
    e.details = Some(json!({"job_id": id, "current_state": state.as_str()}));
    e
}

fn worker_id(obj: &Map<String, Value>) -> Result<Option<Arc<str>>, ApiError> {
    match obj.get("worker_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => {
            Ok(Some(Arc::from(s.as_str())))
        }
        Some(_) => Err(ApiError::bad_request(
            "worker_id must be a string of 1 to 256 bytes",
        )),
    }
}

fn job_id(obj: &Map<String, Value>) -> Result<String, ApiError> {
    match obj.get("job_id").or_else(|| obj.get("id")) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ApiError::bad_request("job_id is required")),
    }
}

pub(super) async fn fetch(
    AxState(st): AxState<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req = object(&body)?;
    let queues = match req.get("queues") {
        Some(Value::Array(q)) if !q.is_empty() => q
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request("queues must be an array of strings"))?,
        _ => return Err(ApiError::bad_request("queues must be a non-empty array")),
    };
    let count = match req.get("count") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=crate::protocol::command::MAX_FETCH_COUNT as u64).contains(n))
            .ok_or_else(|| ApiError::bad_request("count must be an integer from 1 to 1000"))?
            as usize,
    };
    // The long-poll wait of this request (an extension: `wait_ms`, at most and by default
    // `--fetch-wait-ms`; 0 answers at once).
    let wait = match req.get("wait_ms") {
        None | Some(Value::Null) => None,
        Some(v) => Some(std::time::Duration::from_millis(v.as_u64().ok_or_else(
            || ApiError::bad_request("wait_ms must be a non-negative integer"),
        )?)),
    };
    let cmd = Command::Fetch {
        queues,
        count: Some(count),
        wait,
    };
    let jobs = match st.engine.call(worker_id(&req)?, cmd).await? {
        Answer::Nothing => Vec::new(),
        Answer::Job(j) => vec![j],
        Answer::Jobs(v) => v,
        other => return Err(ApiError::unexpected(&other)),
    };
    let views = binding_views(jobs);
    let mut body = b"{\"jobs\":".to_vec();
    body.extend_from_slice(&envelopes(&views));
    // A fetch of one job also names it `job` (the conformance suite reads `$.job.id`;
    // PROTOCOL.md §14 reading 17): the same envelope as `jobs[0]`.
    if let (1, [one]) = (count, views.as_slice()) {
        body.extend_from_slice(b",\"job\":");
        body.extend_from_slice(one.json());
    }
    body.push(b'}');
    Ok(json_response(StatusCode::OK, body))
}

/// A job's envelope as a JSON value (for a reply that carries it beside other fields).
fn envelope_of(view: &JobView) -> Result<Value, ApiError> {
    serde_json::from_slice(binding_view(view.clone()).json()).map_err(|e| {
        ApiError::from(OjsError::new(
            ErrorCode::BackendError,
            format!("job envelope: {e}"),
        ))
    })
}

/// The worker an ACK or NACK speaks for: the request's `worker_id`, or none. The engine
/// checks it against the job's holder as for every front end: a request without
/// `worker_id` settles only a job no worker holds by name (PROTOCOL.md §5.2), so it cannot
/// complete another worker's job by leaving its name out.
fn settle_as(req: &Map<String, Value>) -> Result<Option<Arc<str>>, ApiError> {
    worker_id(req)
}

pub(super) async fn ack(AxState(st): AxState<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let req = object(&body)?;
    let id = job_id(&req)?;
    let wid = settle_as(&req)?;
    let result = req.get("result").filter(|v| !v.is_null()).cloned();
    let cmd = Command::Ack {
        id: id.clone(),
        result,
        handed_out: false,
    };
    let view = changed(&st, wid, &id, cmd, "an active job to acknowledge").await?;
    let job = view.job()?;
    // `id` beside `job_id`: the conformance suite reads `$.id`; and `job`, the envelope as
    // the ACK left it: it reads `$.job.state` (PROTOCOL.md §14 reading 14).
    let body = json!({"acknowledged": true, "job_id": id, "id": id, "state": job.state.as_str(),
        "completed_at": job.completed_at.map(crate::job::format_ts), "job": envelope_of(&view)?});
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}

pub(super) async fn nack(
    AxState(st): AxState<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req = object(&body)?;
    let id = job_id(&req)?;
    let Some(Value::Object(err)) = req.get("error") else {
        return Err(ApiError::bad_request(
            "error must be an object with code and message",
        ));
    };
    // The binding's error {code, message, retryable, details} as FAIL's {type, message}.
    let mut fail = Map::new();
    let code = err.get("code").or_else(|| err.get("type")).cloned();
    fail.insert("type".into(), code.unwrap_or(Value::Null));
    fail.insert(
        "message".into(),
        err.get("message").cloned().unwrap_or(json!("")),
    );
    for k in ["backtrace", "retryable", "details"] {
        if let Some(v) = err.get(k) {
            fail.insert(k.into(), v.clone());
        }
    }
    let requeue = match req.get("requeue") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("requeue must be a boolean")),
    };
    let mut obj = Map::new();
    obj.insert("error".into(), Value::Object(fail));
    let error = crate::protocol::command::fail_error(&obj)?;
    let wid = settle_as(&req)?;
    let cmd = Command::Fail {
        id: id.clone(),
        error,
        handed_out: false,
        requeue,
    };
    let view = changed(&st, wid, &id, cmd, "an active job to fail").await?;
    let job = view.job()?;
    let mut out = json!({"job_id": id, "id": id, "state": job.state.as_str(),
        "attempt": job.attempt, "max_attempts": job.retry.max_attempts,
        "job": envelope_of(&view)?});
    // The delay is measured from the failure's own time (the engine's clock), not from
    // when this reply is written; a requeued job is due at once.
    let failed_at = job
        .errors
        .last()
        .and_then(|e| e.get("timestamp"))
        .and_then(Value::as_str)
        .and_then(crate::job::parse_ts);
    if let Some(next) = job.next_retry_at {
        out["next_attempt_at"] = json!(crate::job::format_ts(next));
        let from = failed_at.unwrap_or_else(chrono::Utc::now);
        out["retry_delay_ms"] = json!((next - from).num_milliseconds().max(0));
    } else if job.state == State::Available {
        if let Some(at) = failed_at {
            out["next_attempt_at"] = json!(crate::job::format_ts(at));
        }
        out["retry_delay_ms"] = json!(0);
    }
    if let Some(at) = job.discarded_at {
        out["discarded_at"] = json!(crate::job::format_ts(at));
        // A discarded job is finished: the binding's NACK reply names when.
        let done = job.completed_at.unwrap_or(at);
        out["completed_at"] = json!(crate::job::format_ts(done));
    }
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&out).unwrap_or_default(),
    ))
}

/// The jobs a heartbeat reports. Two shapes are read (PROTOCOL.md §14): the binding's
/// (§10.4) `active_jobs` as an array of ids, and the worker protocol's `active_jobs` as a
/// count beside `active_job_ids`, the ids (what the JS SDK sends).
fn active_job_ids(req: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let ids = |v: &Value, name: &str| match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad_request(format!("{name} must be an array of job ids"))),
        _ => Err(ApiError::bad_request(format!(
            "{name} must be an array of job ids"
        ))),
    };
    match (req.get("active_jobs"), req.get("active_job_ids")) {
        (_, Some(v)) if !v.is_null() => ids(v, "active_job_ids"),
        (Some(Value::Number(n)), _) if n.is_u64() => Ok(Vec::new()),
        (Some(v), _) if !v.is_number() => ids(v, "active_jobs"),
        (Some(_), _) => Err(ApiError::bad_request(
            "active_jobs must be a count (with active_job_ids) or an array of job ids",
        )),
        (None, _) => Ok(Vec::new()),
    }
}

/// The worker protocol's `state` (`running`, `quiet`, `terminate`): a worker that says it
/// is quiet or terminating is treated so, as a Faktory BEAT's `current_state` is.
fn beat_report(req: &Map<String, Value>) -> Result<BeatReport, ApiError> {
    let state = match req.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.as_str() {
            "running" | "active" | "" => None,
            "quiet" => Some(WorkerDirective::Quiet),
            "terminate" | "terminating" => Some(WorkerDirective::Terminate),
            other => {
                return Err(ApiError::bad_request(format!(
                    "state must be running, quiet or terminate, not {other:?}"
                )))
            }
        },
        Some(_) => return Err(ApiError::bad_request("state must be a string")),
    };
    Ok(BeatReport {
        state,
        ..Default::default()
    })
}

pub(super) async fn heartbeat(
    AxState(st): AxState<AppState>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req = object(&body)?;
    let Some(wid) = worker_id(&req)? else {
        return Err(ApiError::bad_request("worker_id is required"));
    };
    let active = active_job_ids(&req)?;
    let report = beat_report(&req)?;
    let cmd = Command::Beat {
        wid: wid.to_string(),
        active_job_ids: Some(active.clone()),
        report,
    };
    let state = match st.engine.call(Some(wid), cmd).await? {
        Answer::Ok => "running",
        Answer::Directive(WorkerDirective::Quiet) => "quiet",
        Answer::Directive(WorkerDirective::Terminate) => "terminate",
        other => return Err(ApiError::unexpected(&other)),
    };
    let body = json!({"state": state, "jobs_extended": active,
        "server_time": crate::job::format_ts(chrono::Utc::now())});
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    ))
}
