//! `GET /ojs/v1/events`: HTTP polling (ojs-events §6.4).
//!
//! `{"events": [...], "cursor": <last cursor covered>, "has_more": bool}`. The cursor is a
//! number, like the `cursor` every event carries (PROTOCOL.md §10). The cursor
//! is where the read stopped, which may be past the last event returned (events the filter
//! left out were still read), so `?after=<cursor>` continues without a gap or a repeat.
//! `has_more` is true when the read stopped before the head of the log, even if what is
//! left turns out not to match; a page can then hold fewer than `limit` events, or none.

use super::error::ApiError;
use super::query::{EventQuery, DEFAULT_LIMIT};
use super::{json_response, AppState};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::Response;

pub async fn poll(
    State(st): State<AppState>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let q = EventQuery::parse(&pairs)?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    let start = q.poll_start();
    let page = st.engine.events(q.filter, start, limit).await?;
    // Each event renders its own envelope: splice them in.
    let rendered: Vec<_> = page.events.iter().map(|e| e.json()).collect();
    let size: usize = rendered.iter().map(|j| j.len() + 1).sum();
    let mut body = Vec::with_capacity(size + 64);
    body.extend_from_slice(b"{\"events\":[");
    for (i, json) in rendered.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(json);
    }
    // A page merged from several partitions resumes from its position (a string).
    let cursor = match &page.position {
        Some(p) => format!("\"{p}\""),
        None => page.last.to_string(),
    };
    body.extend_from_slice(
        format!("],\"cursor\":{cursor},\"has_more\":{}}}", page.has_more).as_bytes(),
    );
    Ok(json_response(axum::http::StatusCode::OK, body))
}
