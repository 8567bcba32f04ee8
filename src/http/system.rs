//! `GET /ojs/v1/health` (ojs-http-binding §8.1) and `GET /metrics` (ojs-events §7, in
//! Prometheus text format).

use super::error::ApiError;
use super::{json_response, AppState};
use crate::engine::Answer;
use crate::protocol::Command;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::{Duration, Instant};

/// How long the engine gets to answer a health check before the server reports itself
/// unhealthy.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// The Prometheus text exposition format (UTF-8 by definition).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

/// Healthy when the engine answers an INFO: that needs its thread alive and its loop turning
/// (on a forwarding node, the holder's engine, reached through the peer connection; with
/// several partitions, this node's engines, see `Router::probe`).
pub async fn health(State(st): State<AppState>) -> Response {
    let t0 = Instant::now();
    let answer = tokio::time::timeout(HEALTH_TIMEOUT, st.engine.probe()).await;
    let latency_ms = t0.elapsed().as_millis() as u64;
    let uptime = st.started.elapsed().as_secs();
    let (status, backend) = match answer {
        Ok(Ok(Answer::Info(info))) => {
            let backend = json!({"type": info.server.store, "status": "connected",
                "latency_ms": latency_ms, "store_bytes": info.server.store_bytes});
            (StatusCode::OK, backend)
        }
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"type": st.engine.store_kind(), "status": "disconnected", "error": e.message}),
        ),
        Ok(other) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"type": st.engine.store_kind(), "status": "disconnected",
                   "error": format!("unexpected engine reply {other:?}")}),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"type": st.engine.store_kind(), "status": "disconnected",
                   "error": format!("the engine did not answer within {}s", HEALTH_TIMEOUT.as_secs())}),
        ),
    };
    // In cluster mode, what this node does: `active` (runs the engine), `forwarding` (to
    // the holder named, whose INFO answered above), `waiting` (no holder known).
    let role = st.engine.role();
    let node = match &role {
        crate::cluster::Role::Forwarding { owner, connected } => {
            json!({"role": role.name(), "holder": owner, "connected": connected})
        }
        _ => json!({"role": role.name()}),
    };
    let body = json!({
        "status": if status == StatusCode::OK { "ok" } else { "degraded" },
        "node": node,
        "version": super::OJS_VERSION,
        "server_version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": uptime,
        "backend": backend,
    });
    json_response(status, serde_json::to_vec(&body).unwrap_or_default())
}

/// The memory held for event subscribers (`events/held.rs`), in Prometheus text.
fn subscriber_metrics(out: &mut String, s: crate::events::held::PoolStats) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "# HELP ojsd_subscriber_buffer_bytes Bytes of events waiting in subscribers' buffers.\n\
         # TYPE ojsd_subscriber_buffer_bytes gauge\n\
         ojsd_subscriber_buffer_bytes {}\n\
         # HELP ojsd_subscriber_buffer_limit_bytes The bound of all subscribers' buffers (--max-subscriber-bytes-total).\n\
         # TYPE ojsd_subscriber_buffer_limit_bytes gauge\n\
         ojsd_subscriber_buffer_limit_bytes {}\n\
         # HELP ojsd_subscribers Event subscribers (TCP SUBSCRIBE, SSE streams, WebSocket subscriptions).\n\
         # TYPE ojsd_subscribers gauge\n\
         ojsd_subscribers {}\n\
         # HELP ojsd_subscriber_buffers_emptied_total Buffers of stalled subscribers emptied to keep the bound; each resumed from the log.\n\
         # TYPE ojsd_subscriber_buffers_emptied_total counter\n\
         ojsd_subscriber_buffers_emptied_total {}\n",
        s.held_bytes, s.limit_bytes, s.buffers, s.reclaimed
    );
}

pub async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let view = st.engine.metrics().await.ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "BACKEND_UNAVAILABLE",
            "the engine is not running",
        )
    })?;
    let mut text = super::metrics::prometheus(&view);
    subscriber_metrics(&mut text, st.engine.subscribers().stats());
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(PROMETHEUS_TEXT),
    );
    Ok(resp)
}

/// `GET /stats`: the document Faktory's web UI serves there (its INFO document: totals,
/// queues by the names Faktory clients wrote, sets), for monitoring written for Faktory.
pub async fn faktory_stats(State(st): State<AppState>) -> Result<Response, ApiError> {
    match st.engine.call(None, Command::Info).await? {
        Answer::Info(info) => {
            let doc = crate::protocol::faktory::info_document(&info);
            Ok(json_response(
                StatusCode::OK,
                serde_json::to_vec(&doc).unwrap_or_default(),
            ))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}
