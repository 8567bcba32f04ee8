//! Cron routes (ojs-http-binding §13, ojs-cron §8):
//!
//! | route | what |
//! |---|---|
//! | `GET /ojs/v1/cron?enabled=&limit=&offset=` | `{"cron_jobs", "count", "pagination"}` |
//! | `POST /ojs/v1/cron` | register or update: `201` (new) or `200` (updated) `{"cron_job"}` |
//! | `GET /ojs/v1/cron/{name}` | `{"cron_job"}` |
//! | `PATCH /ojs/v1/cron/{name}` `{"enabled": bool}` | `{"cron_job"}` |
//! | `DELETE /ojs/v1/cron/{name}` | `{"deleted": true, "name", "cron"}` (`cron`: the removed entry) |
//!
//! Beside the binding's keys each answer carries the conformance suite's (PROTOCOL.md §14
//! reading 12): `cron` beside `cron_job`, `crons` beside `cron_jobs`, and in every entry
//! `expression` beside `cron`. Every entry also lists `next_runs`: its next
//! [`NEXT_RUNS`] firing times from `next_run_at` on (empty while disabled).
//!
//! Each is one engine command (`CRON ...`), so the TCP and HTTP views never differ.

use super::error::ApiError;
use super::{json_response, AppState};
use crate::cron::Schedule;
use crate::engine::api::CronJob;
use crate::engine::Answer;
use crate::job::{format_ts, parse_ts};
use crate::protocol::cron::{CronCmd, MAX_LIST};
use crate::protocol::Command;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

async fn call(st: &AppState, cmd: CronCmd) -> Result<Answer, ApiError> {
    Ok(st.engine.call(None, Command::Cron(cmd)).await?)
}

/// A registration's answer (`{"cron_job": ...}`) and whether it was created.
async fn one(st: &AppState, cmd: CronCmd) -> Result<(CronJob, bool), ApiError> {
    match call(st, cmd).await? {
        Answer::CronJob(mut c) => {
            let created = c.created.take().unwrap_or(false);
            Ok((c, created))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

fn ok(status: StatusCode, v: &impl serde::Serialize) -> Response {
    json_response(status, serde_json::to_vec(v).unwrap_or_default())
}

/// How many coming runs an entry's `next_runs` lists, `next_run_at` first.
pub const NEXT_RUNS: usize = 5;

/// An entry's next [`NEXT_RUNS`] firing times from its `next_run_at` on, by the schedule
/// code the engine fires with (DST gaps passed over as the engine does; an `@every`
/// interval counts from `next_run_at`, which lies on its grid). Empty while disabled.
fn next_runs(entry: &Value) -> Vec<String> {
    let Some(first) = entry["next_run_at"].as_str().and_then(parse_ts) else {
        return Vec::new();
    };
    let mut runs = vec![first];
    let expr = entry["cron"].as_str().unwrap_or_default();
    let zone = entry["timezone"].as_str().unwrap_or("UTC");
    if let Ok(schedule) = Schedule::parse(expr, zone) {
        while runs.len() < NEXT_RUNS {
            let last = runs[runs.len() - 1];
            let next = schedule
                .next_after(last, false, first)
                .and_then(|occ| schedule.next_fire(occ, first));
            match next {
                Some(at) if at > last => runs.push(at),
                _ => break,
            }
        }
    }
    runs.into_iter().map(format_ts).collect()
}

/// An entry with the conformance suite's `expression` beside the binding's `cron`, and its
/// `next_runs`.
fn with_expression(entry: &mut Value) {
    let runs = next_runs(entry);
    if let Some(m) = entry.as_object_mut() {
        if let Some(expr) = m.get("cron").cloned() {
            m.entry("expression").or_insert(expr);
        }
        m.insert("next_runs".into(), json!(runs));
    }
}

/// `{"cron_job": <entry>, "cron": <entry>}`: the binding's key and the suite's.
fn entry_body(c: &CronJob) -> Value {
    let mut entry = c.cron_job.clone();
    with_expression(&mut entry);
    json!({"cron_job": entry.clone(), "cron": entry})
}

fn body_object(body: &Bytes) -> Result<Value, ApiError> {
    match crate::json::parse(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ApiError::bad_request(
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad_request(format!(
            "the request body is not accepted: {e}"
        ))),
    }
}

pub async fn list(
    State(st): State<AppState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let mut enabled = None;
    for (k, v) in &pairs {
        if k == "enabled" {
            enabled = Some(v.parse::<bool>().map_err(|_| {
                ApiError::bad_request(format!("enabled must be true or false, got {v:?}"))
            })?)
        }
    }
    let req = super::page::page_req(&pairs, MAX_LIST)?;
    let cmd = CronCmd::List {
        enabled,
        limit: req.limit,
        offset: req.offset,
    };
    match call(&st, cmd).await? {
        Answer::CronPage(page) => {
            let mut v = serde_json::to_value(&page).unwrap_or_default();
            // Up to MAX_LIST entries' schedules searched: off the async workers.
            let entries = v["cron_jobs"].take();
            v["cron_jobs"] = tokio::task::spawn_blocking(move || {
                let mut entries = entries;
                if let Some(list) = entries.as_array_mut() {
                    list.iter_mut().for_each(with_expression);
                }
                entries
            })
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "BACKEND_ERROR",
                    format!("listing cron jobs: {e}"),
                )
            })?;
            v["crons"] = v["cron_jobs"].clone();
            let p = &page.pagination;
            v["pagination"] = super::page::pagination(p.total, req, page.cron_jobs.len());
            Ok(ok(StatusCode::OK, &v))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

pub async fn register(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let def = st.engine.intake().cron(&body_object(&body)?)?;
    let (v, created) = one(&st, CronCmd::Add(Box::new(def))).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(ok(status, &entry_body(&v)))
}

pub async fn get_one(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    Ok(ok(
        StatusCode::OK,
        &entry_body(&one(&st, CronCmd::Get(name)).await?.0),
    ))
}

pub async fn patch(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let enabled = match body_object(&body)?.get("enabled") {
        Some(Value::Bool(b)) => *b,
        _ => {
            return Err(ApiError::bad_request(
                "PATCH needs {\"enabled\": true|false}",
            ))
        }
    };
    let cmd = if enabled {
        CronCmd::Enable(name)
    } else {
        CronCmd::Disable(name)
    };
    Ok(ok(StatusCode::OK, &entry_body(&one(&st, cmd).await?.0)))
}

pub async fn delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    // The binding's `{"deleted", "name"}` and, for the suite, the removed entry as `cron`
    // (PROTOCOL.md §14 reading 31), from the same engine step that removed it.
    let (removed, _) = one(&st, CronCmd::Remove(name.clone())).await?;
    let mut entry = removed.cron_job;
    with_expression(&mut entry);
    Ok(ok(
        StatusCode::OK,
        &json!({"deleted": true, "name": name, "cron": entry}),
    ))
}
