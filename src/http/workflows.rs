//! Workflow routes (ojs-workflows §11):
//!
//! | route | what |
//! |---|---|
//! | `POST /ojs/v1/workflows` | create and start: `201` `{"workflow"}` with `Location`; an invalid definition is `400` with `details.validation_errors` |
//! | `GET /ojs/v1/workflows/{id}` | `200` `{"workflow"}`, `404` if unknown |
//! | `DELETE /ojs/v1/workflows/{id}` | cancel: `200` `{"workflow"}`, `409` if already terminal, `404` if unknown |
//!
//! Each is one engine command (`WORKFLOW ...`), so the TCP and HTTP views never differ.

use super::error::ApiError;
use super::{json_response, AppState};
use crate::error::ErrorCode;
use crate::job::validate::Limits;
use crate::protocol::workflow::WorkflowCmd;
use crate::protocol::{Command, Reply};
use crate::workflow::{self, Problem};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// `{"workflow": <engine reply>}`, spliced rather than parsed again.
fn wrapped(status: StatusCode, body: &[u8]) -> Response {
    let mut out = Vec::with_capacity(body.len() + 16);
    out.extend_from_slice(b"{\"workflow\":");
    out.extend_from_slice(body);
    out.push(b'}');
    json_response(status, out)
}

/// The §11.1 validation error body.
fn invalid(problems: &[Problem]) -> Response {
    let errors: Vec<Value> = problems.iter().map(Problem::to_json).collect();
    let body = json!({"error": {"code": "INVALID_WORKFLOW", "message": "Workflow validation failed",
        "retryable": false, "details": {"validation_errors": errors}}});
    json_response(
        StatusCode::BAD_REQUEST,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Problems back out of the engine's one-line message (`workflow::summary`).
fn problems_of(message: &str) -> Vec<Problem> {
    let list = message
        .strip_prefix("workflow validation failed: ")
        .unwrap_or(message);
    list.split("; $")
        .enumerate()
        .map(|(i, part)| {
            let part = if i == 0 {
                part.to_string()
            } else {
                format!("${part}")
            };
            match part.split_once(": ") {
                Some((path, msg)) if path.starts_with('$') => Problem {
                    path: path.into(),
                    message: msg.into(),
                },
                _ => Problem {
                    path: "$".into(),
                    message: part,
                },
            }
        })
        .collect()
}

async fn call(st: &AppState, cmd: WorkflowCmd) -> Result<Bytes, ApiError> {
    match st.engine.call(None, Command::Workflow(cmd)).await {
        Reply::Bulk(b) => Ok(b),
        Reply::Error(e) => Err(e.into()),
        other => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            format!("unexpected engine reply {other:?}"),
        )),
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
    // Checked here for the structured problem list; the engine checks again with the
    // configured envelope limit, which is why the size is not checked here.
    let unlimited = Limits {
        max_job_bytes: usize::MAX,
    };
    if let Err(problems) = workflow::parse_definition(&definition, &unlimited, chrono::Utc::now()) {
        return invalid(&problems);
    }
    let reply = st
        .engine
        .call(None, Command::Workflow(WorkflowCmd::Create { definition }))
        .await;
    match reply {
        Reply::Bulk(b) => {
            let id = serde_json::from_slice::<Value>(&b)
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_string))
                .unwrap_or_default();
            let mut resp = wrapped(StatusCode::CREATED, &b);
            if let Ok(v) = HeaderValue::from_str(&format!("/ojs/v1/workflows/{id}")) {
                resp.headers_mut().insert(header::LOCATION, v);
            }
            resp
        }
        Reply::Error(e) if e.code == ErrorCode::InvalidPayload => invalid(&problems_of(&e.message)),
        Reply::Error(e) => ApiError::from(e).into_response(),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            format!("unexpected engine reply {other:?}"),
        )
        .into_response(),
    }
}

pub async fn get_one(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let b = call(&st, WorkflowCmd::Get(id)).await?;
    Ok(wrapped(StatusCode::OK, &b))
}

pub async fn cancel(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let b = call(&st, WorkflowCmd::Cancel(id)).await?;
    Ok(wrapped(StatusCode::OK, &b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_messages_split_back_into_problems() {
        let p = problems_of("workflow validation failed: $.steps: steps is required; $.jobs[0].type: type \"a; b\" is bad");
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].path, "$.steps");
        assert_eq!(p[1].path, "$.jobs[0].type");
        assert_eq!(p[1].message, "type \"a; b\" is bad");
        let p = problems_of("something else");
        assert_eq!(
            (p[0].path.as_str(), p[0].message.as_str()),
            ("$", "something else")
        );
    }
}
