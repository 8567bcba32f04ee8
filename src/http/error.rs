//! Error responses in the shape of ojs-http-binding §16.1:
//! `{"error":{"code","message","retryable","details","request_id"}}`. `code` is the
//! binding's vocabulary (§16.3: `invalid_request`, `invalid_payload`, `not_found`,
//! `duplicate`, `backend_error`, `rate_limited`, ...; codes it has no word for are `x_`
//! plus the catalog code in lower case, e.g. `x_not_owner`; a wrong state is ojs-workflows'
//! `conflict`), and
//! `details.ojs_code` carries the ojs-errors catalog code the TCP protocol returns
//! (`INVALID_QUEUE`, `INVALID_STATE_TRANSITION`, ...). Handlers and the engine speak
//! catalog codes; they are translated here, once.
//!
//! A handler returns an [`ApiError`]; it travels in the response's extensions until the
//! [`headers`](super::headers) middleware, which knows the request id, renders the body.

use crate::error::{ErrorCode, OjsError};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `details` of the error body (§16.1), e.g. `{"validation_errors": [...]}`.
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The engine answered something this route does not expect (a bug, not the client's).
    pub fn unexpected(a: &crate::engine::Answer) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "BACKEND_ERROR",
            format!("unexpected engine answer {a:?}"),
        )
    }

    /// A query parameter, header or message the server cannot use (400).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// Backend trouble and limits are worth retrying (ojs-errors §4.6, binding §16.3), and
    /// so is a request whose body came too slowly (408: nothing of it was done).
    pub fn retryable(&self) -> bool {
        self.status.is_server_error()
            || self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::REQUEST_TIMEOUT
    }

    /// The `error` object itself, with the request id when one is known.
    pub fn body(&self, request_id: Option<&str>) -> serde_json::Value {
        let mut e = json!({
            "code": binding_code(self.code),
            "message": self.message,
            "retryable": self.retryable(),
        });
        let mut details = match &self.details {
            Some(serde_json::Value::Object(d)) => d.clone(),
            _ => serde_json::Map::new(),
        };
        details.insert("ojs_code".into(), json!(self.code));
        e["details"] = serde_json::Value::Object(details);
        if let Some(id) = request_id {
            e["request_id"] = json!(id);
        }
        json!({ "error": e })
    }
}

/// The binding's word (§16.3) for a catalog code.
pub fn binding_code(code: &str) -> String {
    match code {
        "INVALID_REQUEST" | "MALFORMED_COMMAND" | "UNKNOWN_COMMAND" | "LINE_TOO_LONG"
        | "HELLO_REQUIRED" => "invalid_request".into(),
        "INVALID_PAYLOAD"
        | "INVALID_JOB_TYPE"
        | "INVALID_QUEUE"
        | "INVALID_ARGS"
        | "INVALID_METADATA"
        | "INVALID_RETRY_POLICY"
        | "INVALID_CRON_EXPRESSION" => "invalid_payload".into(),
        // ojs-workflows §11.1 names its own code.
        "INVALID_WORKFLOW" => "invalid_workflow".into(),
        "NOT_FOUND" => "not_found".into(),
        // The binding has no word for a wrong state; ojs-workflows §11 says `conflict`.
        "INVALID_STATE_TRANSITION" => "conflict".into(),
        "DUPLICATE_JOB" => "duplicate".into(),
        "BACKEND_ERROR" | "BACKEND_UNAVAILABLE" => "backend_error".into(),
        "RATE_LIMITED" => "rate_limited".into(),
        "QUEUE_PAUSED" => "queue_paused".into(),
        other => format!("x_{}", other.to_ascii_lowercase()),
    }
}

/// HTTP status and public code for an engine error. A filter the engine refused is the
/// client's mistake in the query, so `MALFORMED_COMMAND` (a TCP notion) reads as
/// `INVALID_REQUEST` here.
pub fn status_of(code: ErrorCode) -> (StatusCode, &'static str) {
    use ErrorCode::*;
    match code {
        MalformedCommand | UnknownCommand | LineTooLong | HelloRequired => {
            (StatusCode::BAD_REQUEST, "INVALID_REQUEST")
        }
        InvalidPayload
        | InvalidJobType
        | InvalidQueue
        | InvalidArgs
        | InvalidMetadata
        | InvalidCronExpression => (StatusCode::BAD_REQUEST, code.as_str()),
        // Valid JSON the server cannot use as a policy: 422 (binding §16.2).
        InvalidRetryPolicy => (StatusCode::UNPROCESSABLE_ENTITY, code.as_str()),
        InvalidStateTransition | DuplicateJob | NotOwner => (StatusCode::CONFLICT, code.as_str()),
        // The events the cursor pointed at are gone for good: resuming there cannot work.
        CursorExpired => (StatusCode::GONE, code.as_str()),
        Unauthenticated => (StatusCode::UNAUTHORIZED, code.as_str()),
        Forbidden => (StatusCode::FORBIDDEN, code.as_str()),
        NotFound => (StatusCode::NOT_FOUND, code.as_str()),
        PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, code.as_str()),
        QueueFull => (StatusCode::TOO_MANY_REQUESTS, code.as_str()),
        BackendError => (StatusCode::INTERNAL_SERVER_ERROR, code.as_str()),
        BackendUnavailable | TooManyConnections => (StatusCode::SERVICE_UNAVAILABLE, code.as_str()),
        RateLimited => (StatusCode::TOO_MANY_REQUESTS, code.as_str()),
    }
}

impl From<OjsError> for ApiError {
    fn from(e: OjsError) -> ApiError {
        let (status, code) = status_of(e.code);
        let mut api = ApiError::new(status, code, e.message);
        if !e.problems.is_empty() {
            api.details = Some(json!({ "validation_errors": e.problems }));
        }
        api
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Rendered without a request id in case no middleware runs (it always does in the
        // router); the middleware replaces the body with one that carries it.
        let body = axum::Json(self.body(None));
        let mut resp = (self.status, body).into_response();
        resp.extensions_mut().insert(self);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_statuses_and_codes() {
        let e = ApiError::from(OjsError::new(ErrorCode::CursorExpired, "gone"));
        assert_eq!(e.status, StatusCode::GONE);
        assert_eq!(e.code, "CURSOR_EXPIRED");
        assert!(!e.retryable());
        let e = ApiError::from(OjsError::new(ErrorCode::MalformedCommand, "bad"));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "INVALID_REQUEST")
        );
        let e = ApiError::from(OjsError::new(ErrorCode::BackendUnavailable, "down"));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.retryable());
        let b = e.body(Some("req_1"));
        assert_eq!(b["error"]["request_id"], "req_1");
        assert_eq!(b["error"]["code"], "backend_error");
        assert_eq!(b["error"]["details"]["ojs_code"], "BACKEND_UNAVAILABLE");
        assert_eq!(b["error"]["retryable"], true);
        // The binding's vocabulary, and x_ for what it has no word for.
        let code = |c: ErrorCode| {
            ApiError::from(OjsError::new(c, "m")).body(None)["error"]["code"].clone()
        };
        assert_eq!(code(ErrorCode::InvalidQueue), "invalid_payload");
        assert_eq!(code(ErrorCode::NotFound), "not_found");
        assert_eq!(code(ErrorCode::DuplicateJob), "duplicate");
        assert_eq!(code(ErrorCode::MalformedCommand), "invalid_request");
        assert_eq!(code(ErrorCode::InvalidStateTransition), "conflict");
        let e = ApiError::from(OjsError::new(ErrorCode::InvalidRetryPolicy, "m"));
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        let e = ApiError::from(OjsError::new(ErrorCode::QueueFull, "m"));
        assert!(e.retryable());
        // A body that came too slowly (http::body): nothing was done, try again.
        let e = ApiError::new(StatusCode::REQUEST_TIMEOUT, "REQUEST_TIMEOUT", "m");
        assert!(e.retryable());
        assert_eq!(e.body(None)["error"]["code"], "x_request_timeout");
    }

    #[test]
    fn structured_problems_become_details() {
        let mut e = OjsError::new(ErrorCode::InvalidPayload, "two problems");
        e.problems = vec![crate::error::Problem {
            path: "$.steps".into(),
            message: "steps is required".into(),
        }];
        let b = ApiError::from(e).body(None);
        assert_eq!(
            b["error"]["details"]["validation_errors"][0]["path"],
            "$.steps"
        );
    }
}
