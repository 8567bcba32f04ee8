//! `GET /ojs/v1/ws`: event subscriptions over a WebSocket (ojs-events §6.2).
//!
//! Client → server, one JSON object per text message:
//!
//! - `{"action":"subscribe","channel":"events","filter":{"event_types":[..],"queues":[..],
//!   "job_types":[..],"sources":[..]}}`, optionally with `"after": <cursor>` or
//!   `"since": "<RFC 3339>"` to replay from the log first. `types` is accepted for
//!   `event_types` and `filters` for `filter` (RFC-0005's spelling).
//!   Answer: `{"action":"subscribed","channel":"events","subscription_id":"sub_<uuidv7>"}`,
//!   then every matching event as its own text message holding the bare envelope (which
//!   carries its `cursor`). An event matching several subscriptions is sent once for each.
//! - `{"action":"unsubscribe","subscription_id":".."}` → `{"action":"unsubscribed",
//!   "subscription_id":".."}`; no event of that subscription follows the answer.
//!
//! Anything else gets `{"action":"error","code":..,"message":..}` and the socket stays
//! open. A subscription that fails later (the engine stopped) sends an error naming its
//! `subscription_id` and ends; the others go on.

use super::error::{status_of, ApiError};
use super::AppState;
use crate::cluster::Router;
use crate::error::OjsError;
use crate::events::{EventFilter, Start};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Most subscriptions one socket may hold at once.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Largest client message; subscribe and unsubscribe are small.
const MAX_MESSAGE: usize = 64 * 1024;
/// Messages queued for the socket before the subscriptions wait for it (a subscription
/// that waits long enough falls back to reading the log: nothing is lost).
const OUT_BUFFER: usize = 32;

pub async fn upgrade(
    State(st): State<AppState>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match ws {
        Ok(ws) => {
            let engine = st.engine.clone();
            ws.max_message_size(MAX_MESSAGE)
                .on_upgrade(move |socket| session(socket, engine))
        }
        Err(e) => ApiError::new(e.status(), "INVALID_REQUEST", e.body_text()).into_response(),
    }
}

fn text(v: Value) -> Message {
    Message::Text(Utf8Bytes::from(v.to_string()))
}

fn error_msg(code: &str, message: &str, sub: Option<&str>) -> Message {
    let mut v = json!({"action": "error", "code": code, "message": message});
    if let Some(id) = sub {
        v["subscription_id"] = json!(id);
    }
    text(v)
}

fn engine_error(e: &OjsError, sub: Option<&str>) -> Message {
    error_msg(status_of(e.code).1, &e.message, sub)
}

struct Session {
    engine: Router,
    out: mpsc::Sender<Message>,
    subs: HashMap<String, JoinHandle<()>>,
}

async fn session(socket: WebSocket, engine: Router) {
    let (mut sink, mut incoming) = socket.split();
    let (out, mut rx) = mpsc::channel::<Message>(OUT_BUFFER);
    // One writer, so replies and events from every subscription share the socket in order.
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if sink.send(m).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let mut s = Session {
        engine,
        out,
        subs: HashMap::new(),
    };
    while let Some(Ok(msg)) = incoming.next().await {
        let reply = match msg {
            Message::Text(t) => s.handle(t.as_str()).await,
            Message::Binary(_) => Some(error_msg(
                "INVALID_REQUEST",
                "binary messages are not understood; send JSON as text",
                None,
            )),
            // Pings are answered by the WebSocket layer itself.
            Message::Ping(_) | Message::Pong(_) => None,
            Message::Close(_) => break,
        };
        if let Some(r) = reply {
            if s.out.send(r).await.is_err() {
                break; // the writer stopped: the peer is gone
            }
        }
    }
    for (_, task) in s.subs.drain() {
        task.abort();
    }
    drop(s);
    let _ = writer.await;
}

impl Session {
    /// Act on one client message; the reply, if it was not sent already.
    async fn handle(&mut self, raw: &str) -> Option<Message> {
        let obj = match crate::json::parse::<Value>(raw.as_bytes()) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Some(bad("a message must be a JSON object")),
            Err(e) => return Some(bad(&format!("invalid JSON: {e}"))),
        };
        match obj.get("action").and_then(Value::as_str) {
            Some("subscribe") => self.subscribe(&obj).await,
            Some("unsubscribe") => Some(self.unsubscribe(&obj).await),
            Some(other) => Some(bad(&format!(
                "unknown action {other:?}; use subscribe or unsubscribe"
            ))),
            None => Some(bad("action must be a string: subscribe or unsubscribe")),
        }
    }

    async fn subscribe(&mut self, obj: &Map<String, Value>) -> Option<Message> {
        let (filter, start) = match parse_subscribe(obj) {
            Ok(v) => v,
            Err(m) => return Some(bad(&m)),
        };
        if self.subs.len() >= MAX_SUBSCRIPTIONS {
            return Some(bad(&format!(
                "a socket may hold at most {MAX_SUBSCRIPTIONS} subscriptions"
            )));
        }
        let mut sub = self.engine.subscription(filter, start);
        // A pruned `after` is refused here instead of being acknowledged and then dropped.
        if let Err(e) = sub.open().await {
            return Some(engine_error(&e, None));
        }
        let id = format!("sub_{}", uuid::Uuid::now_v7());
        let ack = json!({"action": "subscribed", "channel": "events", "subscription_id": &id});
        // The acknowledgement is queued before the task starts, so it precedes every event.
        if self.out.send(text(ack)).await.is_err() {
            return None;
        }
        let out = self.out.clone();
        let task_id = id.clone();
        let task = tokio::spawn(async move {
            loop {
                let msg = match sub.next().await {
                    Ok(e) => match Utf8Bytes::try_from(e.json()) {
                        Ok(t) => Message::Text(t),
                        Err(_) => continue, // the engine only writes UTF-8 JSON
                    },
                    Err(e) => {
                        let _ = out.send(engine_error(&e, Some(&task_id))).await;
                        return;
                    }
                };
                if out.send(msg).await.is_err() {
                    return;
                }
            }
        });
        self.subs.insert(id, task);
        None
    }

    async fn unsubscribe(&mut self, obj: &Map<String, Value>) -> Message {
        let Some(id) = obj.get("subscription_id").and_then(Value::as_str) else {
            return bad("unsubscribe needs a subscription_id string");
        };
        match self.subs.remove(id) {
            Some(task) => {
                task.abort();
                // Wait for it to stop, so no event of it can follow the answer.
                let _ = task.await;
                text(json!({"action": "unsubscribed", "subscription_id": id}))
            }
            None => error_msg(
                "NOT_FOUND",
                &format!("no subscription {id:?} on this socket"),
                Some(id),
            ),
        }
    }
}

fn bad(message: &str) -> Message {
    error_msg("INVALID_REQUEST", message, None)
}

/// The filter and start of a subscribe message.
fn parse_subscribe(obj: &Map<String, Value>) -> Result<(EventFilter, Start), String> {
    match obj.get("channel") {
        None => {}
        Some(Value::String(c)) if c == "events" => {}
        Some(other) => {
            return Err(format!(
                "unknown channel {other}; the only one is \"events\""
            ))
        }
    }
    let mut filter = match obj.get("filter").or_else(|| obj.get("filters")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err("filter must be an object".into()),
    };
    if !filter.contains_key("event_types") {
        if let Some(t) = filter.remove("types") {
            filter.insert("event_types".into(), t);
        }
    }
    let filter = EventFilter::from_json(&filter).map_err(|e| format!("filter.{}", e.message))?;
    let start = match (obj.get("after"), obj.get("since")) {
        (None | Some(Value::Null), None | Some(Value::Null)) => Start::Live,
        (Some(a), None | Some(Value::Null)) => {
            match a.as_str().and_then(crate::events::parse_position) {
                Some(each) => Start::Each(each),
                None => Start::After(
                    a.as_u64()
                        .or_else(|| a.as_str().and_then(|s| s.parse().ok()))
                        .ok_or(
                            "after must be an event cursor (a non-negative integer) or a \
                             stream position",
                        )?,
                ),
            }
        }
        (None | Some(Value::Null), Some(s)) => Start::Since(
            s.as_str()
                .and_then(crate::job::parse_ts)
                .ok_or("since must be an RFC 3339 timestamp with a zone")?,
        ),
        _ => return Err("give after or since, not both".into()),
    };
    Ok((filter, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn subscribe_messages_parse() {
        let (f, s) = parse_subscribe(&obj(json!({"action": "subscribe", "channel": "events",
            "filter": {"event_types": ["job.*"], "queues": ["a"]}})))
        .unwrap();
        assert_eq!(f.event_types, ["job.*"]);
        assert_eq!(f.queues, ["a"]);
        assert_eq!(s, Start::Live);
        let (f, s) = parse_subscribe(&obj(
            json!({"filters": {"types": ["job.completed"]}, "after": "9"}),
        ))
        .unwrap();
        assert_eq!(f.event_types, ["job.completed"]);
        assert_eq!(s, Start::After(9));
        for bad in [
            json!({"channel": "jobs"}),
            json!({"filter": []}),
            json!({"filter": {"queues": "a"}}),
            json!({"after": -1}),
            json!({"after": 1, "since": "2025-01-01T00:00:00Z"}),
            json!({"since": "later"}),
        ] {
            assert!(parse_subscribe(&obj(bad.clone())).is_err(), "{bad}");
        }
    }
}
