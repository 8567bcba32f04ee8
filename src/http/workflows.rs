//! Workflow routes (ojs-workflows §11):
//!
//! | route | what |
//! |---|---|
//! | `POST /ojs/v1/workflows` | create and start: `201` `{"workflow"}` with `Location`; an invalid definition is `400` with `details.validation_errors` |
//! | `GET /ojs/v1/workflows/{id}` | `200` `{"workflow"}`, `404` if unknown |
//! | `GET /ojs/v1/workflows?state=&limit=&offset=` | a page of workflows, newest first: `{"workflows":[summary...],"total"}` (not in the binding; the dashboard's list) |
//! | `DELETE /ojs/v1/workflows/{id}` (or `POST .../{id}/cancel`) | cancel: `200` `{"workflow"}`, `409` if already terminal, `404` if unknown |
//!
//! A workflow of steps with `depends_on` (the binding's own shape, §14) is answered in the
//! binding's step vocabulary (`binding_states`); chains, groups and batches keep
//! ojs-workflows' view.
//!
//! Each is one engine command (`WORKFLOW ...`), so the TCP and HTTP views never differ.

use super::error::ApiError;
use super::{json_response, AppState};
use crate::engine::api::WorkflowView;
use crate::engine::Answer;
use crate::error::Problem;
use crate::protocol::workflow::WorkflowCmd;
use crate::protocol::Command;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// `{"workflow": <the engine's workflow view>}`.
fn wrapped(status: StatusCode, wf: &WorkflowView) -> Response {
    let mut doc = wf.doc.clone();
    binding_states(&mut doc);
    running_from_creation(&mut doc);
    counts(&mut doc);
    json_response(
        status,
        serde_json::to_vec(&json!({ "workflow": doc })).unwrap_or_default(),
    )
}

/// For a DAG, the binding's step states (§14.1-§14.2): a step not enqueued yet is
/// `pending` (the engine's `waiting`), an enqueued one shows its job's state (`available`,
/// `scheduled`, `retryable`; `active` as before). Other kinds are left as they are.
fn binding_states(doc: &mut Value) {
    if doc["type"] != "dag" {
        return;
    }
    let Some(steps) = doc.get_mut("steps").and_then(Value::as_array_mut) else {
        return;
    };
    for step in steps {
        let shown = match step["state"].as_str() {
            Some("waiting") => json!("pending"),
            Some("pending") => step.get("job_state").cloned().unwrap_or(json!("available")),
            _ => continue,
        };
        step["state"] = shown;
    }
}

/// Over HTTP a workflow is `running` from its creation (PROTOCOL.md §14 reading 13):
/// ojs-workflows §8 defines `running` as "at least one job is active or pending (enqueued,
/// awaiting a worker)", which its first jobs are as soon as it is created, and its examples
/// and the binding's (§14.1) answer a creation with `running`; the conformance suite reads
/// that too. TCP keeps the finer `pending` until the first FETCH (§12.4); the
/// `workflow.started` event and `metadata.started_at` still mark that FETCH.
fn running_from_creation(doc: &mut Value) {
    if doc["state"] == "pending" {
        doc["state"] = json!("running");
    }
}

/// The conformance suite's counters beside `metadata` (reading 13): `steps_total` and
/// `steps_completed` over a chain's (or DAG's) top-level steps, `jobs_total` and
/// `jobs_completed` over a group's or batch's jobs (callbacks are not counted).
fn counts(doc: &mut Value) {
    for (list, total, done) in [
        ("steps", "steps_total", "steps_completed"),
        ("jobs", "jobs_total", "jobs_completed"),
    ] {
        let Some(items) = doc.get(list).and_then(Value::as_array) else {
            continue;
        };
        let completed = items.iter().filter(|i| i["state"] == "completed").count();
        let n = items.len();
        doc[total] = json!(n);
        doc[done] = json!(completed);
    }
}

/// The binding's cancel answer (§14.3) adds, for a DAG, `cancelled_at`, `steps_cancelled`
/// and `steps_already_completed` beside the full view.
fn cancel_counts(doc: &mut Value) {
    if doc["type"] != "dag" {
        return;
    }
    let count = |state: &str| {
        doc["steps"]
            .as_array()
            .map_or(0, |s| s.iter().filter(|s| s["state"] == state).count())
    };
    let (cancelled, completed) = (count("cancelled"), count("completed"));
    let at = doc["metadata"]["cancelled_at"].clone();
    doc["cancelled_at"] = at;
    doc["steps_cancelled"] = json!(cancelled);
    doc["steps_already_completed"] = json!(completed);
}

/// The §11.1 validation error body (ojs-workflows' own code, in the binding's lower case).
fn invalid(problems: &[Problem]) -> Response {
    let body = json!({"error": {"code": "invalid_workflow", "message": "Workflow validation failed",
        "retryable": false, "details": {"validation_errors": problems, "ojs_code": "INVALID_WORKFLOW"}}});
    json_response(
        StatusCode::BAD_REQUEST,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

async fn call(st: &AppState, cmd: WorkflowCmd) -> Result<WorkflowView, ApiError> {
    match st.engine.call(None, Command::Workflow(cmd)).await {
        Ok(Answer::Workflow(wf)) => Ok(wf),
        Err(e) => Err(e.into()),
        Ok(other) => Err(ApiError::unexpected(&other)),
    }
}

pub async fn create(State(st): State<AppState>, body: Bytes) -> Response {
    let definition: Value = match crate::json::parse(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("the request body is not accepted: {e}");
            return ApiError::bad_request(msg).into_response();
        }
    };
    let definition = match st.engine.intake().workflow(&definition) {
        Ok(d) => Box::new(d),
        Err(e) if !e.problems.is_empty() => return invalid(&e.problems),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let cmd = Command::Workflow(WorkflowCmd::Create { definition });
    match st.engine.call(None, cmd).await {
        Ok(Answer::Workflow(wf)) => {
            let mut resp = wrapped(StatusCode::CREATED, &wf);
            if let Ok(v) = HeaderValue::from_str(&format!("/ojs/v1/workflows/{}", wf.id)) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
        Err(e) if !e.problems.is_empty() => invalid(&e.problems),
        Err(e) => ApiError::from(e).into_response(),
        Ok(other) => ApiError::unexpected(&other).into_response(),
    }
}

pub async fn get_one(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(wrapped(
        StatusCode::OK,
        &call(&st, WorkflowCmd::Get(id)).await?,
    ))
}

/// `GET /ojs/v1/workflows`: the query becomes the `WORKFLOW LIST` filter, so both front
/// ends check it the same way.
pub async fn list(
    State(st): State<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let pairs = q
        .map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut filter = Map::new();
    // The admin API's `page` (from 1) and `per_page` (ojs-admin-api §4) as well as
    // `limit`/`offset`; what the admin UI sends.
    let (mut page, mut per_page) = (None, None);
    for (k, v) in pairs {
        let value = match k.as_str() {
            "page" | "per_page" => {
                let n = v
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("{k} must be a positive integer"))
                    })?;
                if k == "page" {
                    page = Some(n);
                } else {
                    per_page = Some(n);
                }
                continue;
            }
            "limit" | "offset" => match v.trim().parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => {
                    return Err(ApiError::bad_request(format!(
                        "{k} must be a non-negative integer"
                    )))
                }
            },
            _ => Value::String(v),
        };
        filter.insert(k, value);
    }
    if page.is_some() || per_page.is_some() {
        let per_page = per_page.unwrap_or(50);
        filter
            .entry("limit")
            .or_insert_with(|| Value::from(per_page));
        let offset = (page.unwrap_or(1) - 1).saturating_mul(per_page);
        filter
            .entry("offset")
            .or_insert_with(|| Value::from(offset));
    }
    let cmd = crate::protocol::workflow::list_query(&filter)?;
    match st.engine.call(None, Command::Workflow(cmd)).await? {
        Answer::WorkflowPage(page) => Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&page).unwrap_or_default(),
        )),
        other => Err(ApiError::unexpected(&other)),
    }
}

pub async fn cancel(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let mut wf = call(&st, WorkflowCmd::Cancel(id)).await?;
    cancel_counts(&mut wf.doc);
    Ok(wrapped(StatusCode::OK, &wf))
}
