//! The admin API of ojs-admin-api (queues, workers, dead letter) over the engine's admin
//! commands. Request bodies and filters go through the same parsers as the TCP commands
//! (`protocol::admin`), so both front ends accept and refuse the same things.
//!
//! | route | command |
//! |---|---|
//! | `GET /ojs/v1/admin/queues` | `QUEUE LIST` |
//! | `GET /ojs/v1/admin/queues/{name}` | `QUEUE STATS name` |
//! | `POST /ojs/v1/admin/queues/{name}/pause`, `/resume` | `QUEUE PAUSE|RESUME name` |
//! | `DELETE /ojs/v1/admin/queues/{name}/jobs` | `QUEUE PURGE name {body}` |
//! | `GET /ojs/v1/admin/workers`, `/workers/{id}` | `WORKERS` |
//! | `POST /ojs/v1/admin/workers/{id}/quiet`, `/terminate` | `WORKER QUIET|TERMINATE id` |
//! | `GET /ojs/v1/admin/dead-letter` | `DEAD LIST` (query: queue, type, error_type, since, until, page, per_page) |
//! | `GET /ojs/v1/admin/dead-letter/stats` | `DEAD STATS` |
//! | `GET /ojs/v1/admin/dead-letter/{id}` | `DEAD GET id` |
//! | `POST /ojs/v1/admin/dead-letter/{id}/retry` | `DEAD RETRY id` |
//! | `POST /ojs/v1/admin/dead-letter/retry` | `DEAD RETRY {filter}` |
//! | `DELETE /ojs/v1/admin/dead-letter/{id}` | `DEAD DELETE id` |
//! | `DELETE /ojs/v1/admin/dead-letter` | `DEAD DELETE {filter}` |
//!
//! | `GET /ojs/v1/admin/jobs?queue=&state=&page=&per_page=` | `JOBS` (newest first) |
//! | `GET /ojs/v1/admin/overview` | `OVERVIEW` |
//!
//! The dead-letter routes are also served under `/ojs/v1/dead-letter` (ojs-dead-letter §10).

use super::error::ApiError;
use super::{json_response, AppState};
use crate::engine::api::WorkerList;
use crate::engine::Answer;
use crate::protocol::admin::{self as parse, DeadCmd, QueueCmd};
use crate::protocol::command::WorkerDirective;
use crate::protocol::faktory::{job_ref, queue_ref, shown_queues, shown_stats};
use crate::protocol::Command;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};

type Res = Result<Response, ApiError>;

fn ok_json(v: &impl serde::Serialize) -> Response {
    json_response(StatusCode::OK, serde_json::to_vec(v).unwrap_or_default())
}

/// Run a command; an engine error becomes the binding's error response.
async fn call(st: &AppState, cmd: Command) -> Result<Answer, ApiError> {
    Ok(st.engine.call(None, cmd).await?)
}

/// A JSON object body; an empty body is an empty object.
fn body_object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match crate::json::parse(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request("the body must be a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not accepted: {e}"
        ))),
    }
}

/// `{"filter": {...}, "confirm": true}` (ojs-dead-letter §6.2) as one flat object.
fn flatten_filter(mut obj: Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    match obj.remove("filter") {
        None | Some(Value::Null) => {}
        Some(Value::Object(f)) => {
            for (k, v) in f {
                if obj.contains_key(&k) {
                    return Err(ApiError::bad_request(format!(
                        "{k} is given both inside and outside filter"
                    )));
                }
                obj.insert(k, v);
            }
        }
        Some(_) => return Err(ApiError::bad_request("filter must be a JSON object")),
    }
    Ok(obj)
}

fn query_pairs(
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Vec<(String, String)>, ApiError> {
    q.map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

/// A query parameter that must be a non-negative integer.
fn query_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ApiError> {
    value
        .trim()
        .parse::<T>()
        .map_err(|_| ApiError::bad_request(format!("{key} must be a non-negative integer")))
}

/// `?page=&per_page=` of a list route (ojs-admin-api pagination): page from 1, per_page
/// 1..=1000, default 50.
fn page_of(
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<(usize, usize), ApiError> {
    let (mut page, mut per_page) = (1usize, 50usize);
    for (k, v) in query_pairs(q)? {
        let num = || query_num::<usize>(&k, &v);
        match k.as_str() {
            "page" => page = num()?.max(1),
            "per_page" => per_page = num()?.clamp(1, 1000),
            _ => {}
        }
    }
    Ok((page, per_page))
}

/// One page of `all`, with the pagination object.
fn paged<T: Clone>(all: &[T], (page, per_page): (usize, usize)) -> (Vec<T>, Value) {
    let from = (page - 1).saturating_mul(per_page).min(all.len());
    let to = from.saturating_add(per_page).min(all.len());
    let pagination = json!({"total": all.len(), "page": page, "per_page": per_page});
    (all[from..to].to_vec(), pagination)
}

pub(super) async fn queues(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let at = page_of(q)?;
    let list = match call(&st, Command::Queue(QueueCmd::List)).await? {
        Answer::Queues(list) => list,
        other => return Err(ApiError::unexpected(&other)),
    };
    let list = shown_queues(list);
    let (items, pagination) = paged(&list.queues, at);
    Ok(ok_json(&json!({"items": items, "pagination": pagination})))
}

pub(super) async fn queue(State(st): State<AppState>, Path(name): Path<String>) -> Res {
    match call(&st, Command::Queue(QueueCmd::Stats(queue_ref(name)))).await? {
        Answer::QueueStats(v) => Ok(ok_json(&shown_stats(*v))),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub(super) async fn pause(State(st): State<AppState>, Path(name): Path<String>) -> Res {
    call(
        &st,
        Command::Queue(QueueCmd::Pause(vec![queue_ref(name.clone())])),
    )
    .await?;
    Ok(ok_json(&json!({"name": name, "paused": true})))
}

pub(super) async fn resume(State(st): State<AppState>, Path(name): Path<String>) -> Res {
    call(
        &st,
        Command::Queue(QueueCmd::Resume(vec![queue_ref(name.clone())])),
    )
    .await?;
    Ok(ok_json(&json!({"name": name, "paused": false})))
}

/// `PUT /ojs/v1/admin/queues/{name}/rate-limit` `{"concurrency"?, "rate"?: {"limit",
/// "period"}}` (ojs-rate-limiting §7.2): `{"queue", "rate_limit"}`.
pub(super) async fn rate_limit_put(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Res {
    let limit = parse::QueueLimit::parse(&Value::Object(body_object(&body)?))?;
    set_rate_limit(&st, name, Some(limit)).await
}

pub(super) async fn rate_limit_delete(State(st): State<AppState>, Path(name): Path<String>) -> Res {
    set_rate_limit(&st, name, None).await
}

async fn set_rate_limit(st: &AppState, queue: String, limit: Option<parse::QueueLimit>) -> Res {
    let shown = limit.map(|l| l.to_json());
    call(
        st,
        Command::Queue(QueueCmd::Limit {
            queue: queue_ref(queue.clone()),
            limit,
        }),
    )
    .await?;
    Ok(ok_json(&json!({"queue": queue, "rate_limit": shown})))
}

pub(super) async fn rate_limit_get(State(st): State<AppState>, Path(name): Path<String>) -> Res {
    match call(
        &st,
        Command::Queue(QueueCmd::Stats(queue_ref(name.clone()))),
    )
    .await?
    {
        Answer::QueueStats(v) => Ok(ok_json(&json!({"queue": name, "rate_limit": v.rate_limit}))),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub(super) async fn purge(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Res {
    let cmd = parse::queue_purge(&queue_ref(name), &body_object(&body)?)?;
    match call(&st, Command::Queue(cmd)).await? {
        Answer::Purged(v) => Ok(ok_json(&v)),
        other => Err(ApiError::unexpected(&other)),
    }
}

async fn worker_list(st: &AppState) -> Result<WorkerList, ApiError> {
    match call(st, Command::Workers).await? {
        Answer::Workers(list) => Ok(list),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub(super) async fn workers(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let at = page_of(q)?;
    let list = worker_list(&st).await?;
    let (items, pagination) = paged(&list.workers, at);
    Ok(ok_json(&json!({
        "items": items,
        "summary": list.summary,
        "pagination": pagination,
    })))
}

pub(super) async fn worker(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    let list = worker_list(&st).await?;
    match list.workers.iter().find(|w| w.id == id) {
        Some(w) => Ok(ok_json(w)),
        None => Err(ApiError::not_found(format!("no worker with id {id}"))),
    }
}
async fn direct(st: &AppState, id: String, directive: WorkerDirective) -> Res {
    let cmd = Command::Worker {
        wid: id.clone(),
        directive,
    };
    call(st, cmd).await?;
    let name = match directive {
        WorkerDirective::Quiet => "quiet",
        WorkerDirective::Terminate => "terminate",
    };
    Ok(ok_json(&json!({"id": id, "directive": name})))
}

pub(super) async fn quiet(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    direct(&st, id, WorkerDirective::Quiet).await
}

pub(super) async fn terminate(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    direct(&st, id, WorkerDirective::Terminate).await
}

/// `GET .../dead-letter?queue=&type=&error_type=&since=&until=&page=&per_page=` (or
/// `limit`/`offset`): `{"items": [...], "pagination": {"total","page","per_page"}}`.
pub(super) async fn dead_list(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let mut obj = Map::new();
    let (mut page, mut per_page) = (None, None);
    for (k, v) in query_pairs(q)? {
        let num = || query_num::<u64>(&k, &v);
        match k.as_str() {
            "page" => page = Some(num()?.max(1)),
            "per_page" => per_page = Some(num()?.clamp(1, parse::DEAD_LIST_MAX as u64)),
            "limit" | "offset" => {
                obj.insert(k.clone(), json!(num()?));
            }
            _ => dead_filter_param(&mut obj, &k, &v),
        }
    }
    if page.is_some() || per_page.is_some() {
        let per = per_page.unwrap_or(20);
        obj.insert("limit".into(), json!(per));
        obj.insert(
            "offset".into(),
            json!((page.unwrap_or(1) - 1).saturating_mul(per)),
        );
    }
    let limit = obj.get("limit").and_then(Value::as_u64);
    let cmd = parse::dead_list(&obj)?;
    let v = match call(&st, Command::Dead(cmd)).await? {
        Answer::DeadPage(v) => v,
        other => return Err(ApiError::unexpected(&other)),
    };
    let per = limit.unwrap_or(parse::DEAD_LIST_DEFAULT as u64);
    Ok(ok_json(&json!({
        "items": listed(v.jobs),
        "pagination": {"total": v.total, "page": page.unwrap_or(1), "per_page": per},
    })))
}

/// `GET /ojs/v1/dead-letter?queue=&type=&error_type=&since=&until=&limit=&offset=&cursor=`
/// in the binding's shape (§12.1, §17): `{"jobs": [...], "pagination": {"total", "limit",
/// "offset", "has_more", "next_cursor"?}}`, at most 100 a page.
pub(super) async fn dead_list_binding(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let pairs = query_pairs(q)?;
    let req = super::page::page_req(&pairs, 100)?;
    let mut obj = Map::new();
    for (k, v) in &pairs {
        dead_filter_param(&mut obj, k, v);
    }
    obj.insert("limit".into(), json!(req.limit));
    obj.insert("offset".into(), json!(req.offset));
    let v = match call(&st, Command::Dead(parse::dead_list(&obj)?)).await? {
        Answer::DeadPage(v) => v,
        other => return Err(ApiError::unexpected(&other)),
    };
    let pagination = super::page::pagination(v.total, req, v.jobs.len());
    let jobs = super::jobs::binding_views(v.jobs);
    Ok(ok_json(&json!({"jobs": jobs, "pagination": pagination})))
}

/// A dead-letter filter field of a list query into the DEAD LIST object; unknown
/// parameters are ignored, as on the event routes.
fn dead_filter_param(obj: &mut Map<String, Value>, k: &str, v: &str) {
    match k {
        "queue" | "type" | "error_type" => {
            obj.insert(k.to_string(), json!(v));
        }
        // An unencoded `+01:00` arrives as ` 01:00` (a `+` in a query is a space).
        "since" | "until" | "older_than" => {
            obj.insert(k.to_string(), json!(v.trim().replace(' ', "+")));
        }
        _ => {}
    }
}

/// Jobs as the admin listings show them: the binding's envelope, with `type` and `queue` as
/// their clients wrote them (a Faktory client's `SendEmail`, not its escaped OJS name).
fn listed(views: Vec<crate::engine::api::JobView>) -> Vec<Value> {
    views
        .into_iter()
        .map(|v| {
            let v = super::jobs::binding_view(v);
            match serde_json::from_slice::<Value>(v.json()) {
                Ok(Value::Object(mut m)) => {
                    crate::protocol::faktory::written_names(&mut m);
                    Value::Object(m)
                }
                Ok(other) => other,
                Err(_) => Value::Null,
            }
        })
        .collect()
}

/// A command whose answer is shown as it is (its typed document, or a job).
async fn shown(st: &AppState, cmd: Command) -> Res {
    match call(st, cmd).await? {
        Answer::DeadStats(v) => Ok(ok_json(&v)),
        Answer::DeadRetried(v) => Ok(ok_json(&v)),
        Answer::DeadDeleted(v) => Ok(ok_json(&v)),
        Answer::Job(j) => Ok(json_response(
            StatusCode::OK,
            super::jobs::binding_view(j).json().to_vec(),
        )),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub(super) async fn dead_stats(State(st): State<AppState>) -> Res {
    shown(&st, Command::Dead(DeadCmd::Stats)).await
}

pub(super) async fn dead_get(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    shown(&st, Command::Dead(DeadCmd::Get(job_ref(id)))).await
}

pub(super) async fn dead_retry(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    let id = job_ref(id);
    call(&st, Command::Dead(DeadCmd::Retry(id.clone()))).await?;
    match call(&st, Command::Job { id }).await? {
        Answer::Job(j) => Ok(ok_json(&json!({ "job": j }))),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub(super) async fn dead_delete(State(st): State<AppState>, Path(id): Path<String>) -> Res {
    let id = job_ref(id);
    call(&st, Command::Dead(DeadCmd::Delete(id.clone()))).await?;
    // The binding's `{deleted, job_id}`, and `id` as before.
    Ok(ok_json(&json!({"deleted": true, "job_id": id, "id": id})))
}

pub(super) async fn dead_retry_all(State(st): State<AppState>, body: Bytes) -> Res {
    let obj = flatten_filter(body_object(&body)?)?;
    let filter = parse::dead_bulk("retry", &obj)?;
    shown(&st, Command::Dead(DeadCmd::RetryAll(filter))).await
}

pub(super) async fn dead_delete_all(State(st): State<AppState>, body: Bytes) -> Res {
    let obj = flatten_filter(body_object(&body)?)?;
    let filter = parse::dead_bulk("delete", &obj)?;
    shown(&st, Command::Dead(DeadCmd::DeleteAll(filter))).await
}

/// `GET /ojs/v1/admin/jobs?queue=&state=&page=&per_page=`: `{"items", "pagination"}`.
pub(super) async fn jobs(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let pairs = query_pairs(q)?;
    let (mut page, mut per_page) = (1usize, 50usize);
    let mut obj = Map::new();
    for (k, v) in pairs {
        let num = || query_num::<usize>(&k, &v);
        match k.as_str() {
            "page" => page = num()?.max(1),
            "per_page" => per_page = num()?.clamp(1, parse::DEAD_LIST_MAX),
            "queue" | "state" if !v.is_empty() => {
                obj.insert(k.clone(), json!(v));
            }
            _ => {}
        }
    }
    obj.insert("limit".into(), json!(per_page));
    obj.insert("offset".into(), json!((page - 1).saturating_mul(per_page)));
    let query = parse::jobs_query(&obj)?;
    match call(&st, Command::Jobs(query)).await? {
        Answer::JobPage(p) => Ok(ok_json(&json!({
            "items": listed(p.jobs),
            "pagination": {"total": p.total, "page": page, "per_page": per_page},
        }))),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /ojs/v1/admin/overview`: the last five minutes and recent pickup latency.
pub(super) async fn overview(State(st): State<AppState>) -> Res {
    match call(&st, Command::Overview).await? {
        Answer::Overview(v) => Ok(ok_json(&v)),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /ojs/v1/admin/cluster`: the nodes and the partitions each holds (CLUSTER).
pub(super) async fn cluster(State(st): State<AppState>) -> Res {
    match call(&st, Command::Cluster).await? {
        Answer::Cluster(v) => Ok(ok_json(&v)),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /ojs/v1/admin/stats` (ojs-admin-api §10.1): queues, workers, jobs by state, the
/// last minute's throughput and the uptime, from INFO and OVERVIEW.
pub(super) async fn stats(State(st): State<AppState>) -> Res {
    let Answer::Info(info) = call(&st, Command::Info).await? else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            "INFO gave no document",
        ));
    };
    let overview = match call(&st, Command::Overview).await? {
        Answer::Overview(v) => v,
        other => return Err(ApiError::unexpected(&other)),
    };
    let mut jobs = Map::new();
    for state in crate::job::State::ALL {
        let n: usize = info.queues.0.iter().map(|q| q.counts.get(state)).sum();
        jobs.insert(state.as_str().into(), json!(n));
    }
    // The last 60 s of completed buckets (the newest is still filling).
    let minute_ms = 60_000 / overview.bucket_ms.max(1);
    let recent = overview
        .points
        .iter()
        .rev()
        .skip(1)
        .take(usize::try_from(minute_ms).unwrap_or(12));
    let (done, failed) = recent.fold((0u64, 0u64), |(d, f), p| {
        (d + u64::from(p.completed), f + u64::from(p.failed))
    });
    Ok(ok_json(&json!({
        "queues": info.queues.0.len(),
        "workers": info.workers.len(),
        "jobs": jobs,
        "throughput": {"processed_per_minute": done, "failed_per_minute": failed},
        "uptime_seconds": info.server.uptime_s,
    })))
}

/// `GET /ojs/v1/admin/stats/history?period=&since=&until=` (ojs-admin-api §10.2).
pub(super) async fn stats_history(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Res {
    let obj: Map<String, Value> = query_pairs(q)?
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let cmd = parse::stats_history(&obj)?;
    let period = obj.get("period").and_then(Value::as_str).unwrap_or("5m");
    match call(&st, cmd).await? {
        Answer::History(h) => {
            let data: Vec<Value> = h
                .points
                .iter()
                .map(|p| {
                    let at =
                        chrono::DateTime::from_timestamp_millis(p.at_ms).map(crate::job::format_ts);
                    json!({"timestamp": at, "processed": p.processed, "failed": p.failed,
                        "enqueued": p.enqueued})
                })
                .collect();
            Ok(ok_json(&json!({"period": period, "data": data})))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}
