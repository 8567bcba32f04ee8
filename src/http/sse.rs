//! `GET /v1/events/stream` (and `/ojs/v1/events/stream`): Server-Sent Events per
//! RFC-0005 §1. Each message is
//!
//! ```text
//! id: <cursor>
//! event: <type>
//! data: <the event envelope, one line of JSON>
//! ```
//!
//! so an `EventSource` that reconnects sends `Last-Event-ID: <cursor>` and resumes exactly
//! after the last event it saw. A start the log cannot serve (the cursor was pruned) is a
//! `410 Gone` with a JSON error body, before the stream begins; an error after that (the
//! engine stopping) is sent as an `event: error` message and ends the stream.

use super::error::ApiError;
use super::query::EventQuery;
use super::AppState;
use crate::engine::Subscription;
use crate::error::OjsError;
use crate::events::Event;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};

type Next = Pin<Box<dyn Future<Output = (Result<Event, OjsError>, Subscription)> + Send>>;

/// A subscription whose pending `next()` survives being raced against a timer: `next` on a
/// `Feed` is cancel-safe, because the future that owns the subscription is kept until it
/// completes rather than dropped with the `select!` that lost.
pub struct Feed(Next);

impl Feed {
    pub fn new(sub: Subscription) -> Feed {
        Feed(Feed::arm(sub))
    }

    fn arm(mut sub: Subscription) -> Next {
        Box::pin(async move {
            let r = sub.next().await;
            (r, sub)
        })
    }

    pub async fn next(&mut self) -> Result<Event, OjsError> {
        let (r, sub) = (&mut self.0).await;
        self.0 = Feed::arm(sub);
        r
    }
}

/// One SSE message for an event. The envelope is compact JSON, so it is a single line.
pub fn frame(e: &Event) -> Bytes {
    let json = e.json();
    let mut b = BytesMut::with_capacity(json.len() + e.kind.len() + 40);
    b.put_slice(b"id: ");
    b.put_slice(e.resume_id().as_bytes());
    b.put_slice(b"\nevent: ");
    b.put_slice(e.kind.as_bytes());
    b.put_slice(b"\ndata: ");
    b.put_slice(&json);
    b.put_slice(b"\n\n");
    b.freeze()
}

fn error_frame(e: &OjsError) -> Bytes {
    let err = ApiError::from(e.clone());
    Bytes::from(format!("event: error\ndata: {}\n\n", err.body(None)))
}

/// First bytes of every stream: tells the client the subscription is in place (every event
/// committed from now on will arrive) and flushes the response head.
const OPENED: &[u8] = b": stream open\n\n";
const KEEPALIVE: &[u8] = b": keepalive\n\n";

struct SseState {
    feed: Feed,
    tick: Interval,
    every: Duration,
    opened: bool,
    done: bool,
}

async fn step(mut s: SseState) -> Option<(Result<Bytes, Infallible>, SseState)> {
    if s.done {
        return None;
    }
    if !s.opened {
        s.opened = true;
        return Some((Ok(Bytes::from_static(OPENED)), s));
    }
    tokio::select! {
        r = s.feed.next() => match r {
            Ok(e) => {
                // Keep-alives are for quiet streams only.
                s.tick.reset_at(Instant::now() + s.every);
                Some((Ok(frame(&e)), s))
            }
            Err(e) => {
                s.done = true;
                Some((Ok(error_frame(&e)), s))
            }
        },
        _ = s.tick.tick() => Some((Ok(Bytes::from_static(KEEPALIVE)), s)),
    }
}

pub async fn stream(
    State(st): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let q = EventQuery::parse(&pairs)?;
    let last_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))?,
        ),
    };
    let start = q.stream_start(last_id)?;
    let mut sub = st.engine.subscription(q.filter, start);
    sub.open().await?;
    let every = st.cfg.keepalive;
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = SseState {
        feed: Feed::new(sub),
        tick,
        every,
        opened: false,
        done: false,
    };
    let body = Body::from_stream(futures_util::stream::unfold(state, step));
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Reverse proxies (nginx) would otherwise buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_id_event_data() {
        let e = crate::events::build(
            12,
            "job.enqueued",
            "ojs://ojsd/api".into(),
            chrono::Utc::now(),
            "j1",
            serde_json::Map::new(),
        );
        let f = String::from_utf8(frame(&e).to_vec()).unwrap();
        let lines: Vec<&str> = f.split('\n').collect();
        assert_eq!(lines[0], "id: 12");
        assert_eq!(lines[1], "event: job.enqueued");
        assert!(lines[2].starts_with("data: {\"specversion\":\"1.0\""));
        assert_eq!(&lines[3..], ["", ""]);
    }
}
