//! A request's body is read here, whole and bounded in size and time, before any handler
//! sees it. Every route that takes a body wants all of it (a job, a batch, a definition),
//! and reading it in one place lets both bounds be answered in the binding's JSON error
//! shape: axum's own limit answered a fixed 2 MiB with a plain-text 413 of its own.
//!
//! hyper's header deadline (`--hello-timeout-ms`) ends where the body starts, so a client
//! that sent its headers and then a byte of its body held its connection, and one of
//! `--max-connections` slots, forever. The whole body must now arrive within
//! `--body-timeout-ms` of the end of the headers (nginx's `client_body_timeout`, but over
//! the whole read rather than between two reads: a client dribbling a byte a second is
//! never idle, and must still let go of its slot). Past it the answer is `408` and the
//! connection closes.
//!
//! The limit is `--max-body-bytes`, by default [`JOBS_PER_BODY`] times `--max-job-bytes`:
//! a batch may carry several jobs, and a body is never allowed below one job (checked at
//! startup). A declared `Content-Length` over it is refused before a byte of the body is
//! read; a chunked body as soon as it grows past it. Either way the connection is closed,
//! since the rest of the body is still on its way.

use super::error::ApiError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures_util::StreamExt;
use std::time::Duration;

/// The default `--body-timeout-ms`.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 10_000;

/// The default `--max-body-bytes`, in jobs of `--max-job-bytes`.
pub const JOBS_PER_BODY: usize = 4;

/// The default `--max-body-bytes` for a `--max-job-bytes`.
pub fn default_max_body_bytes(max_job_bytes: usize) -> usize {
    max_job_bytes.saturating_mul(JOBS_PER_BODY)
}

/// What a request body may be.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// `--max-body-bytes`.
    pub max_bytes: usize,
    /// `--body-timeout-ms`: from the end of the headers to the end of the body.
    pub timeout: Duration,
}

/// Middleware: read the body whole within the limits and hand it on, or answer the error
/// and close the connection. Requests without a body (GET, WebSocket upgrades, SSE) pass
/// through untouched.
pub async fn read_whole(limits: BodyLimits, req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    // The declared length, or 0 for a chunked body.
    if req.body().size_hint().lower() > limits.max_bytes as u64 {
        return closing(too_large(limits.max_bytes));
    }
    let (parts, body) = req.into_parts();
    // Far past any real deadline, a flag's absurd value must not overflow the clock.
    let timeout = limits
        .timeout
        .clamp(Duration::from_millis(1), Duration::from_secs(86_400 * 365));
    match tokio::time::timeout(timeout, collect(body, limits.max_bytes)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) => closing(e),
        Err(_) => closing(timed_out(timeout)),
    }
}

/// The body's bytes, or an error as soon as they pass `max`.
async fn collect(body: Body, max: usize) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        if chunk.len() > max - buf.len() {
            return Err(too_large(max));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        format!("the request body is larger than --max-body-bytes ({max} bytes)"),
    )
}

fn timed_out(timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "REQUEST_TIMEOUT",
        format!(
            "the request body did not arrive within --body-timeout-ms ({} ms)",
            timeout.as_millis()
        ),
    )
}

/// The error, with `Connection: close`: what is left of the request on the socket cannot
/// be told from the next request, so the connection ends after this answer.
fn closing(e: ApiError) -> Response {
    let mut resp = e.into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}
