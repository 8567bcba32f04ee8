//! The OJS HTTP binding's queue routes (§11) and the manifest (§21). The admin API's
//! richer queue views stay at `/ojs/v1/admin/queues...`; these render the binding's shapes
//! from the same engine answers.
//!
//! | route | command | answer |
//! |---|---|---|
//! | `GET /ojs/v1/queues?limit=&offset=` | QUEUE LIST | `{"queues": [{"name", "status"}], "pagination": {"total", "limit", "offset", "has_more"}}` |
//! | `GET /ojs/v1/queues/{name}/stats` | QUEUE STATS | `{"queue", "status", "stats": {...}, "computed_at"}` |
//! | `POST /ojs/v1/queues/{name}/pause` / `resume` | QUEUE PAUSE / RESUME | `{"queue", "status", "paused_at"/"resumed_at"}` |
//! | `GET /ojs/manifest` | — | what this server implements (§21) |

use super::error::ApiError;
use super::{json_response, AppState};
use crate::engine::Answer;
use crate::job::State;
use crate::protocol::admin::QueueCmd;
use crate::protocol::Command;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

fn ok(v: &Value) -> Response {
    json_response(StatusCode::OK, serde_json::to_vec(v).unwrap_or_default())
}

/// Most queues one page lists (ojs-http-binding §17's maximum).
const MAX_PAGE: usize = 200;

pub(super) async fn list(
    AxState(st): AxState<AppState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let pairs = q
        .map(|Query(p)| p)
        .map_err(|e| ApiError::bad_request(e.body_text()))?;
    let req = super::page::page_req(&pairs, MAX_PAGE)?;
    let Answer::Queues(all) = st.engine.call(None, Command::Queue(QueueCmd::List)).await? else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            "unexpected answer",
        ));
    };
    let page: Vec<Value> = all
        .queues
        .iter()
        .skip(req.offset)
        .take(req.limit)
        .map(|q| json!({"name": q.name, "status": q.state}))
        .collect();
    let pagination = super::page::pagination(all.queues.len(), req, page.len());
    Ok(ok(&json!({"queues": page, "pagination": pagination})))
}

pub(super) async fn stats(
    AxState(st): AxState<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let Answer::QueueStats(s) = st
        .engine
        .call(None, Command::Queue(QueueCmd::Stats(name)))
        .await?
    else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            "unexpected answer",
        ));
    };
    let q = &s.summary;
    let c = |state: State| q.counts.get(state);
    Ok(ok(&json!({
        "queue": q.name,
        "status": q.state,
        "stats": {
            "available": c(State::Available), "active": c(State::Active),
            "scheduled": c(State::Scheduled), "retryable": c(State::Retryable),
            "pending": c(State::Pending), "completed": c(State::Completed),
            "cancelled": c(State::Cancelled), "discarded": c(State::Discarded),
            "completed_last_5m": q.throughput.processed_last_5m,
            "failed_last_5m": q.throughput.failed_last_5m,
            "throughput_per_second": q.throughput.processed_per_minute as f64 / 60.0,
            "avg_wait_ms": s.latency_ms,
            "workers": s.workers,
        },
        "rate_limit": s.rate_limit,
        "computed_at": crate::job::format_ts(chrono::Utc::now()),
    })))
}

async fn set_paused(st: &AppState, name: String, paused: bool) -> Result<Response, ApiError> {
    let cmd = if paused {
        QueueCmd::Pause(vec![name.clone()])
    } else {
        QueueCmd::Resume(vec![name.clone()])
    };
    st.engine.call(None, Command::Queue(cmd)).await?;
    let now = crate::job::format_ts(chrono::Utc::now());
    Ok(ok(&if paused {
        json!({"queue": name, "status": "paused", "paused_at": now})
    } else {
        json!({"queue": name, "status": "active", "resumed_at": now})
    }))
}

pub(super) async fn pause(
    AxState(st): AxState<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&st, name, true).await
}

pub(super) async fn resume(
    AxState(st): AxState<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&st, name, false).await
}

/// §21: what this server implements. The level claimed is what the tests of
/// `tests/http_binding.rs` exercise over HTTP: level 0 (push, fetch, ack, nack, info,
/// cancel) and level 1 (heartbeats with directives); the rest of the binding's levels are
/// only partly served over HTTP (see PROTOCOL.md §14).
/// `GET /ojs/manifest` (ojs-http-binding §21). Level 4 is what ojsd's own tests cover,
/// requirement by requirement (PROTOCOL.md §14 reading 9); schema validation is the one
/// capability it lacks.
pub(super) async fn manifest() -> Response {
    ok(&json!({
        "ojs_version": crate::job::SPEC_VERSION,
        "specversion": crate::job::SPEC_VERSION,
        "implementation": {"name": "ojsd", "version": env!("CARGO_PKG_VERSION"), "language": "rust"},
        "conformance_level": 4,
        "protocols": ["http", "tcp"],
        "backend": "embedded",
        "capabilities": {
            "batch_enqueue": true, "cron_jobs": true, "dead_letter": true, "delayed_jobs": true,
            "job_ttl": true, "priority_queues": true, "rate_limiting": true,
            "schema_validation": false, "unique_jobs": true, "workflows": true,
            "pause_resume": true, "events": true, "heartbeat": true,
        },
        "extensions": ["faktory-dialect", "retry-backoff-strategy", "queue-rate-limits"],
        "endpoints": {"base_url": "/ojs/v1", "manifest": "/ojs/manifest",
            "health": "/ojs/v1/health", "events": "/ojs/v1/events/stream"},
    }))
}
