//! Error responses in the shape of ojs-http-binding §16.1:
//! `{"error":{"code","message","retryable","request_id"}}`. Codes use the catalog's
//! SCREAMING_SNAKE_CASE (ojs-errors §4), the same codes the TCP protocol returns, plus
//! `INVALID_REQUEST` (the binding's `invalid_request`) and `METHOD_NOT_ALLOWED` for
//! HTTP-only failures.
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

    /// Only backend trouble is worth retrying (ojs-errors §4.6).
    pub fn retryable(&self) -> bool {
        self.status.is_server_error()
    }

    /// The `error` object itself, with the request id when one is known.
    pub fn body(&self, request_id: Option<&str>) -> serde_json::Value {
        let mut e = json!({
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable(),
        });
        if let Some(d) = &self.details {
            e["details"] = d.clone();
        }
        if let Some(id) = request_id {
            e["request_id"] = json!(id);
        }
        json!({ "error": e })
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
        | InvalidRetryPolicy
        | InvalidCronExpression => (StatusCode::BAD_REQUEST, code.as_str()),
        InvalidStateTransition | DuplicateJob | NotOwner => (StatusCode::CONFLICT, code.as_str()),
        // The events the cursor pointed at are gone for good: resuming there cannot work.
        CursorExpired => (StatusCode::GONE, code.as_str()),
        Unauthenticated => (StatusCode::UNAUTHORIZED, code.as_str()),
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
        assert_eq!(b["error"]["code"], "BACKEND_UNAVAILABLE");
        assert_eq!(b["error"]["retryable"], true);
        assert!(b["error"].get("details").is_none());
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
