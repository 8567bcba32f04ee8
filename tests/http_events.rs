//! The HTTP front end: SSE (RFC-0005 §1) with the ojs-events §10 scenarios, replay by
//! `Last-Event-ID`/`after`/`since`, polling (§6.4), WebSocket subscriptions (§6.2),
//! `/metrics` (§7), health, errors and shutdown. Streams are opened before the actions
//! they watch (the server's opening comment means the subscription is in place), tests
//! wait for the events they know are coming, and time moves with `CLOCK ADVANCE`; socket
//! read timeouts are only a safety net.

mod common;

use common::http::{self, Sse, SseItem};
use common::*;
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::Duration;

fn ty(e: &Value) -> &str {
    e["type"].as_str().unwrap_or("")
}

fn types(evs: &[Value]) -> Vec<&str> {
    evs.iter().map(ty).collect()
}

fn cursor(e: &Value) -> u64 {
    e["cursor"].as_u64().expect("cursor")
}

/// The data fields ojs-events §4 marks required, by event type.
const REQUIRED: &[(&str, &[&str])] = &[
    ("job.enqueued", &["job_type", "queue"]),
    (
        "job.started",
        &["job_type", "queue", "worker_id", "attempt"],
    ),
    (
        "job.completed",
        &["job_type", "queue", "duration_ms", "attempt"],
    ),
    ("job.failed", &["job_type", "queue", "attempt", "error"]),
    (
        "job.discarded",
        &["job_type", "queue", "total_attempts", "last_error"],
    ),
    (
        "job.retrying",
        &[
            "job_type",
            "queue",
            "attempt",
            "max_attempts",
            "next_retry_at",
            "error",
        ],
    ),
    ("job.cancelled", &["job_type", "queue"]),
    ("job.scheduled", &["job_type", "queue", "scheduled_at"]),
    (
        "job.expired",
        &["job_type", "queue", "created_at", "expired_at", "ttl_ms"],
    ),
    ("queue.paused", &["queue"]),
    ("queue.resumed", &["queue"]),
    ("worker.started", &["worker_id", "queues", "concurrency"]),
    ("worker.stopped", &["worker_id", "reason"]),
    ("worker.quiet", &["worker_id", "active_jobs"]),
    ("worker.heartbeat", &["worker_id", "active_jobs", "queues"]),
];

/// The envelope attributes, and the required data fields of the event's type.
fn check(e: &Value) {
    for attr in [
        "specversion",
        "id",
        "type",
        "source",
        "time",
        "subject",
        "data",
    ] {
        assert!(!e[attr].is_null(), "{attr} missing: {e}");
    }
    let (_, fields) = REQUIRED
        .iter()
        .find(|(t, _)| *t == ty(e))
        .unwrap_or_else(|| panic!("unexpected event type: {e}"));
    for f in *fields {
        assert!(!e["data"][f].is_null(), "data.{f} missing: {e}");
    }
    if ty(e) == "job.failed" {
        for f in ["code", "message", "retryable"] {
            assert!(!e["data"]["error"][f].is_null(), "error.{f}: {e}");
        }
    }
    if ty(e).starts_with("job.") {
        assert_eq!(e["data"]["job_id"], e["subject"], "{e}");
    }
}

fn stream(srv: &Server, query: &str) -> Sse {
    let s = Sse::connect(&srv.http_addr, &format!("/v1/events/stream?{query}"), &[]);
    assert_eq!(s.status, 200);
    s
}

/// Events up to and including the first one `stop` accepts, each checked.
fn until(s: &mut Sse, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let (_, e) = s.next_event();
        check(&e);
        let done = stop(&e);
        out.push(e);
        if done {
            return out;
        }
    }
}

fn job(job_type: &str, queue: &str) -> Value {
    json!({"type": job_type, "args": [], "queue": queue})
}

// ---------------------------------------------------------------------------------------
// ojs-events §10 over SSE
// ---------------------------------------------------------------------------------------

#[test]
fn sse_successful_job_sequence_10_1() {
    let srv = Server::start();
    let mut s = Sse::connect(&srv.http_addr, "/ojs/v1/events/stream?queues=email", &[]);
    assert_eq!(s.status, 200);
    assert_eq!(
        s.headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.as_str()),
        Some("text/event-stream")
    );
    let (mut c, mut w) = (srv.client(), srv.worker("w-1"));
    push_id(&mut c, &job("other.job", "elsewhere")); // filtered out
    let id = push_id(
        &mut c,
        &json!({"type": "email.send", "args": [1], "queue": "email", "priority": 2}),
    );
    assert_eq!(id_of(&fetch_one(&mut w, "email")), id);
    w.ack(&id, Some(&json!({"sent": true}))).expect("ACK");
    let evs = until(&mut s, |e| ty(e) == "job.completed");
    assert_eq!(
        types(&evs),
        ["job.enqueued", "job.started", "job.completed"]
    );
    assert!(evs.iter().all(|e| e["subject"] == id.as_str()));
    assert_eq!(evs[0]["data"]["priority"], 2);
    assert_eq!(evs[1]["data"]["worker_id"], "w-1");
    assert_eq!(evs[2]["data"]["result"], json!({"sent": true}));
    let cursors: Vec<u64> = evs.iter().map(cursor).collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "{cursors:?}");
}

#[test]
fn sse_retry_then_discard_10_2() {
    let srv = Server::start();
    let mut s = stream(&srv, "queues=payments");
    let (mut c, mut w) = (srv.client(), srv.worker("w-pay"));
    let retry = json!({"max_attempts": 3, "initial_interval": "PT1S", "jitter": false});
    let id = push_id(
        &mut c,
        &json!({"type": "payment.charge", "args": [], "queue": "payments", "retry": retry}),
    );
    let mut evs = Vec::new();
    for attempt in 1..=3u64 {
        assert_eq!(fetch_one(&mut w, "payments")["attempt"], attempt);
        w.fail(&id, "handler_error", "gateway timeout", &[])
            .expect("FAIL");
        if attempt < 3 {
            evs.extend(until(&mut s, |e| ty(e) == "job.retrying"));
            let r = evs.last().expect("retrying");
            let delay = secs_between(ts(&r["time"]), ts(&r["data"]["next_retry_at"]));
            advance(&mut c, delay + 0.5);
        } else {
            evs.extend(until(&mut s, |e| ty(e) == "job.discarded"));
        }
    }
    #[rustfmt::skip]
    assert_eq!(types(&evs), ["job.enqueued", "job.started", "job.failed", "job.retrying",
        "job.started", "job.failed", "job.retrying", "job.started", "job.failed", "job.discarded"]);
    assert!(evs.iter().all(|e| e["subject"] == id.as_str()));
    let failed: Vec<&Value> = evs.iter().filter(|e| ty(e) == "job.failed").collect();
    for (i, f) in failed.iter().enumerate() {
        assert_eq!(f["data"]["attempt"], i as u64 + 1);
        assert_eq!(f["data"]["error"]["retryable"], i < 2);
    }
    let last = evs.last().unwrap();
    assert_eq!(last["data"]["total_attempts"], 3);
    assert_eq!(last["data"]["last_error"]["code"], "handler_error");
}

#[test]
fn sse_scheduled_then_cancelled_10_3_and_expired_10_9() {
    let srv = Server::start();
    let mut s = stream(&srv, "queues=marketing,notifications");
    let mut c = srv.client();
    let now = server_now(&mut c);
    let at = rfc3339(now + chrono::Duration::hours(1));
    let id = push_id(
        &mut c,
        &json!({"type": "campaign.launch", "args": [], "queue": "marketing", "scheduled_at": at}),
    );
    c.cancel(&id).expect("CANCEL");
    let evs = until(&mut s, |e| ty(e) == "job.cancelled");
    assert_eq!(types(&evs), ["job.scheduled", "job.cancelled"]);
    assert_eq!(ts(&evs[0]["data"]["scheduled_at"]), ts(&json!(at)));

    let expires = rfc3339(now + chrono::Duration::seconds(30));
    let id = push_id(
        &mut c,
        &json!({"type": "notification.push", "args": [], "queue": "notifications",
            "expires_at": expires}),
    );
    advance(&mut c, 31.0);
    let evs = until(&mut s, |e| ty(e) == "job.expired");
    assert_eq!(types(&evs), ["job.enqueued", "job.expired"]);
    assert!(evs.iter().all(|e| e["subject"] == id.as_str()));
    assert_eq!(evs[1]["source"], "ojs://ojsd/scheduler");
    assert!(evs[1]["data"]["ttl_ms"].as_i64().is_some_and(|t| t > 0));
}

#[test]
fn sse_worker_lifecycle_10_6() {
    let srv = Server::start();
    let mut s = stream(&srv, "types=worker.*");
    let mut c = srv.client();
    let mut w = srv.worker("w-life");
    w.beat("w-life", &[]).expect("BEAT");
    c.quiet_worker("w-life").expect("WORKER QUIET");
    w.end().expect("END");
    let evs = until(&mut s, |e| ty(e) == "worker.stopped");
    assert_eq!(
        types(&evs),
        [
            "worker.started",
            "worker.heartbeat",
            "worker.quiet",
            "worker.stopped"
        ]
    );
    assert!(evs.iter().all(|e| e["data"]["worker_id"] == "w-life"));
    assert_eq!(evs[3]["data"]["reason"], "shutdown");
}

#[test]
fn sse_queue_pause_resume_10_7() {
    let srv = Server::start();
    let mut s = stream(&srv, "queues=ops&types=queue.*");
    let mut c = srv.client();
    c.pause_queues(&["other"]).expect("PAUSE other"); // filtered out
    c.pause_queues(&["ops"]).expect("PAUSE");
    c.resume_queues(&["ops"]).expect("RESUME");
    let evs = until(&mut s, |e| ty(e) == "queue.resumed");
    assert_eq!(types(&evs), ["queue.paused", "queue.resumed"]);
    assert_eq!(evs[0]["data"], json!({"queue": "ops", "paused_by": "api"}));
    assert_eq!(evs[1]["data"], json!({"queue": "ops", "resumed_by": "api"}));
}

#[test]
fn sse_trace_id_in_every_event_10_8() {
    let srv = Server::start();
    let mut s = stream(&srv, "queues=orders&types=job.*");
    let (mut c, mut w) = (srv.client(), srv.worker("w-t"));
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let a = push_id(
        &mut c,
        &json!({"type": "order.process", "args": [], "queue": "orders",
            "meta": {"trace_id": trace}}),
    );
    let b = push_id(
        &mut c,
        &json!({"type": "order.process", "args": [], "queue": "orders",
            "meta": {"traceparent": parent}}),
    );
    for id in [&a, &b] {
        assert_eq!(&id_of(&fetch_one(&mut w, "orders")), id);
        w.ack(id, None).expect("ACK");
    }
    let evs = until(&mut s, |e| {
        ty(e) == "job.completed" && e["subject"] == b.as_str()
    });
    assert_eq!(evs.len(), 6, "{evs:?}");
    for e in &evs {
        let want = if e["subject"] == a.as_str() {
            trace
        } else {
            "0af7651916cd43dd8448eb211c80319c"
        };
        assert_eq!(e["data"]["trace_id"], want, "{e}");
    }
}

// ---------------------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------------------

#[test]
fn sse_last_event_id_replays_exactly_the_missed_events_then_live() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut s = stream(&srv, "queues=rp");
    let first: Vec<String> = (0..3).map(|_| push_id(&mut c, &job("r.x", "rp"))).collect();
    let seen = until(&mut s, |e| e["subject"] == first[2].as_str());
    assert_eq!(seen.len(), 3);
    let last_id = cursor(&seen[2]).to_string();
    drop(s);
    // Missed while disconnected, interleaved with events the filter leaves out.
    let mut missed = Vec::new();
    for _ in 0..2 {
        push_id(&mut c, &job("r.x", "elsewhere"));
        missed.push(push_id(&mut c, &job("r.x", "rp")));
    }
    let mut s = Sse::connect(
        &srv.http_addr,
        "/v1/events/stream?queues=rp",
        &[("Last-Event-ID", &last_id)],
    );
    assert_eq!(s.status, 200);
    for id in &missed {
        let (_, e) = s.next_event();
        assert_eq!(
            (ty(&e), e["subject"].as_str()),
            ("job.enqueued", Some(id.as_str()))
        );
    }
    let live = push_id(&mut c, &job("r.x", "rp"));
    let (_, e) = s.next_event();
    assert_eq!(e["subject"], live.as_str(), "no repeat, no gap, then live");

    // The query parameters resume the same way.
    for param in ["after", "last_event_id"] {
        let mut s = stream(&srv, &format!("queues=rp&{param}={last_id}"));
        let (_, e) = s.next_event();
        assert_eq!(e["subject"], missed[0].as_str(), "{param}");
    }
}

#[test]
fn sse_since_replays_from_a_time_and_last_event_id_wins_over_it() {
    let srv = Server::start();
    let mut c = srv.client();
    push_id(&mut c, &job("s.x", "sq"));
    advance(&mut c, 1.0);
    let t = rfc3339(server_now(&mut c));
    let b = push_id(&mut c, &job("s.x", "sq"));
    let mut s = stream(&srv, &format!("queues=sq&since={t}"));
    let (_, e) = s.next_event();
    assert_eq!(e["subject"], b.as_str());
    let b_cursor = cursor(&e).to_string();
    // An EventSource reconnecting keeps its URL (with since) and adds Last-Event-ID.
    let mut s = Sse::connect(
        &srv.http_addr,
        &format!("/v1/events/stream?queues=sq&since={t}"),
        &[("Last-Event-ID", &b_cursor)],
    );
    let c3 = push_id(&mut c, &job("s.x", "sq"));
    let (_, e) = s.next_event();
    assert_eq!(e["subject"], c3.as_str());
}

#[test]
fn pruned_cursor_is_410_for_sse_and_polling_and_an_error_on_websocket() {
    let srv = Server::start();
    let mut c = srv.client();
    push_id(&mut c, &job("p.x", "pq"));
    // Past the 7-day retention; the engine prunes within about a second.
    advance(&mut c, 8.0 * 86_400.0);
    let body = wait_for(Duration::from_secs(10), "the log to be pruned", || {
        let r = http::get(&srv.http_addr, "/ojs/v1/events?after=0");
        match r.status {
            410 => Some(r.json()),
            200 => None,
            other => panic!("unexpected {other}: {}", r.text()),
        }
    });
    assert_eq!(body["error"]["code"], "x_cursor_expired");
    assert_eq!(body["error"]["retryable"], false);
    let s = Sse::connect(
        &srv.http_addr,
        "/v1/events/stream",
        &[("Last-Event-ID", "0")],
    );
    assert_eq!(s.status, 410);
    let body = s.error_body();
    assert_eq!(body["error"]["code"], "x_cursor_expired");
    assert!(body["error"]["request_id"].is_string());
    let mut ws = Ws::connect(&srv);
    ws.send(json!({"action": "subscribe", "channel": "events", "after": 0}));
    let m = ws.recv();
    assert_eq!(
        (m["action"].as_str(), m["code"].as_str()),
        (Some("error"), Some("CURSOR_EXPIRED"))
    );
}

// ---------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------

fn poll(srv: &Server, query: &str) -> Value {
    let r = http::get(&srv.http_addr, &format!("/ojs/v1/events?{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn events_of(page: &Value) -> Vec<Value> {
    page["events"].as_array().expect("events").clone()
}

#[test]
fn polling_pages_filters_and_limits() {
    let srv = Server::start();
    let mut c = srv.client();
    let pa: Vec<String> = (0..5).map(|_| push_id(&mut c, &job("p.a", "pa"))).collect();
    for _ in 0..2 {
        push_id(&mut c, &job("p.b", "pb"));
    }
    c.pause_queues(&["pc"]).expect("PAUSE");

    // Page through queue pa two at a time: every event once, in order.
    let mut got = Vec::new();
    let mut after = String::new();
    for _ in 0..10 {
        let page = poll(&srv, &format!("queues=pa&limit=2&after={after}"));
        let evs = events_of(&page);
        assert!(evs.len() <= 2);
        got.extend(evs);
        after = page["cursor"]
            .as_u64()
            .expect("cursor is a number, as on events")
            .to_string();
        if page["has_more"] == false {
            break;
        }
    }
    let ids: Vec<&str> = got.iter().map(|e| e["subject"].as_str().unwrap()).collect();
    assert_eq!(ids, pa.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(got.iter().all(|e| ty(e) == "job.enqueued"));

    // Everything, from the start, with the default limit.
    let all = poll(&srv, "");
    let evs = events_of(&all);
    assert_eq!(evs.len(), 8);
    assert_eq!(all["has_more"], false);
    assert_eq!(all["cursor"], cursor(&evs[7]));
    let cursors: Vec<u64> = evs.iter().map(cursor).collect();
    assert!(cursors.windows(2).all(|w| w[0] < w[1]));
    // Nothing after the last cursor.
    let tail = poll(&srv, &format!("after={}", all["cursor"]));
    assert_eq!(
        (events_of(&tail).len(), &tail["has_more"], &tail["cursor"]),
        (0, &json!(false), &all["cursor"])
    );

    assert_eq!(
        types(&events_of(&poll(&srv, "types=queue.*"))),
        ["queue.paused"]
    );
    assert_eq!(events_of(&poll(&srv, "job_types=p.b")).len(), 2);
    assert_eq!(events_of(&poll(&srv, "types=job.*&queues=pb,pc")).len(), 2);
    assert_eq!(
        events_of(&poll(&srv, "types=job.enqueued,queue.paused")).len(),
        8
    );
    assert_eq!(events_of(&poll(&srv, "limit=5000")).len(), 8);

    // The default page is 100 events.
    let batch: Vec<Value> = (0..120).map(|_| job("p.d", "pd")).collect();
    c.push_bulk(&batch).expect("PUSHB");
    let page = poll(&srv, "queues=pd");
    assert_eq!(
        (events_of(&page).len(), &page["has_more"]),
        (100, &json!(true))
    );
    let rest = poll(&srv, &format!("queues=pd&after={}", page["cursor"]));
    assert_eq!(
        (events_of(&rest).len(), &rest["has_more"]),
        (20, &json!(false))
    );
}

#[test]
fn bad_requests_are_400_unknown_routes_404_with_json_bodies() {
    let srv = Server::start();
    let a = &srv.http_addr;
    for path in [
        "/ojs/v1/events?since=yesterday",
        "/v1/events/stream?since=yesterday",
        "/ojs/v1/events?limit=0",
        "/ojs/v1/events?limit=ten",
        "/ojs/v1/events?after=evt_1",
        "/ojs/v1/events?types=job.*.x",
        "/ojs/v1/events?after=1&since=2025-01-01T00:00:00Z",
    ] {
        let r = http::get(a, path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["code"], "invalid_request", "{path}");
        assert!(e["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert_eq!(e["error"]["request_id"].as_str(), r.header("x-request-id"));
    }
    let r = http::request(a, "GET", "/v1/events/stream", &[("Last-Event-ID", "abc")]);
    assert_eq!(r.status, 400);
    let r = http::get(a, "/ojs/v1/nothing-here");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "not_found");
    let r = http::request(a, "POST", "/ojs/v1/events", &[("Content-Length", "0")]);
    assert_eq!(r.status, 405);
    assert_eq!(r.json()["error"]["code"], "x_method_not_allowed");
    // The WebSocket route without an upgrade.
    let r = http::get(a, "/ojs/v1/ws");
    assert!((400..500).contains(&r.status), "{}", r.status);
    assert!(r.json()["error"]["code"].is_string());
}

// ---------------------------------------------------------------------------------------
// Health, metrics, keep-alive, shutdown
// ---------------------------------------------------------------------------------------

#[test]
fn health_is_ok_with_the_binding_headers() {
    let srv = Server::start();
    let r = http::get(&srv.http_addr, "/ojs/v1/health");
    assert_eq!(r.status, 200);
    let h = r.json();
    assert_eq!(h["status"], "ok");
    assert_eq!(h["backend"]["status"], "connected");
    let store = common::test_store().unwrap_or_else(|| "fjall".into());
    assert_eq!(h["backend"]["type"], store.as_str());
    assert!(h["uptime_seconds"].is_u64());
    assert_eq!(r.header("ojs-version"), Some("1.0"));
    assert_eq!(
        r.header("content-type"),
        Some("application/openjobspec+json")
    );
    assert!(r
        .header("x-request-id")
        .is_some_and(|id| id.starts_with("req_")));
    let r = http::request(
        &srv.http_addr,
        "GET",
        "/ojs/v1/health",
        &[("X-Request-Id", "abc-1")],
    );
    assert_eq!(r.header("x-request-id"), Some("abc-1"));
}

#[test]
fn metrics_count_jobs_per_type_and_queue() {
    let srv = Server::start();
    let (mut c, mut w) = (srv.client(), srv.worker("w-m"));
    for _ in 0..3 {
        push_id(&mut c, &job("m.send", "mq"));
    }
    push_id(&mut c, &job("m.other", "mq"));
    for _ in 0..2 {
        let j = fetch_one(&mut w, "mq");
        w.ack(&id_of(&j), None).expect("ACK");
    }
    let r = http::get(&srv.http_addr, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = r.text();
    let l = r#"{job_type="m.send",queue="mq"}"#;
    for want in [
        format!("ojs_jobs_enqueued_total{l} 3"),
        r#"ojs_jobs_enqueued_total{job_type="m.other",queue="mq"} 1"#.to_string(),
        format!("ojs_jobs_completed_total{l} 2"),
        format!("ojs_jobs_failed_total{l} 0"),
        r#"ojs_jobs_duration_ms_bucket{job_type="m.send",queue="mq",le="300000"} 2"#.into(),
        r#"ojs_jobs_duration_ms_bucket{job_type="m.send",queue="mq",le="+Inf"} 2"#.into(),
        format!("ojs_jobs_duration_ms_count{l} 2"),
        format!("ojs_jobs_wait_ms_count{l} 2"),
        "ojs_queue_depth{queue=\"mq\"} 2".into(),
        "ojs_queue_active{queue=\"mq\"} 0".into(),
        "# TYPE ojs_jobs_duration_ms histogram".into(),
    ] {
        assert!(
            text.lines().any(|line| line == want),
            "missing {want:?} in:\n{text}"
        );
    }
}

#[test]
fn quiet_streams_get_keepalive_comments() {
    let srv = Server::start_with(&["--sse-keepalive-ms", "100"]);
    let mut s = stream(&srv, "");
    match s.next_item() {
        Some(SseItem::Comment(c)) => assert_eq!(c, "keepalive"),
        other => panic!("expected a keep-alive comment, got {other:?}"),
    }
}

#[test]
fn sigterm_ends_open_streams_and_exits_cleanly() {
    let mut srv = Server::start();
    let mut s = stream(&srv, "");
    let mut ws = Ws::connect(&srv);
    ws.send(json!({"action": "subscribe", "channel": "events"}));
    assert_eq!(ws.recv()["action"], "subscribed");
    assert_eq!(srv.stop(), Some(0));
    // The stream ends (after an error event naming the stopped engine, if it got there).
    while let Some(item) = s.next_item() {
        if let SseItem::Message(m) = item {
            assert_eq!(m.event.as_deref(), Some("error"), "{m:?}");
        }
    }
}

#[test]
fn http_can_be_turned_off() {
    let srv = Server::start_with(&["--http-listen", "off"]);
    assert!(srv.http_addr.is_empty());
    let mut c = srv.client();
    push_id(&mut c, &job("o.x", "default"));
}

// ---------------------------------------------------------------------------------------
// WebSocket
// ---------------------------------------------------------------------------------------

struct Ws(tungstenite::WebSocket<TcpStream>);

impl Ws {
    fn connect(srv: &Server) -> Ws {
        let tcp = TcpStream::connect(&srv.http_addr).expect("connect ws");
        tcp.set_read_timeout(Some(http::HTTP_TIMEOUT)).unwrap();
        let url = format!("ws://{}/ojs/v1/ws", srv.http_addr);
        let (ws, resp) = tungstenite::client(url.as_str(), tcp).expect("ws handshake");
        assert_eq!(resp.status().as_u16(), 101);
        Ws(ws)
    }

    fn send_text(&mut self, t: &str) {
        self.0
            .send(tungstenite::Message::Text(t.into()))
            .expect("ws send");
    }

    fn send(&mut self, v: Value) {
        self.send_text(&v.to_string());
    }

    fn recv(&mut self) -> Value {
        loop {
            match self.0.read().expect("ws read (timed out?)") {
                tungstenite::Message::Text(t) => {
                    return serde_json::from_str(t.as_str()).expect("ws JSON")
                }
                tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_) => continue,
                other => panic!("unexpected ws message {other:?}"),
            }
        }
    }

    fn subscribe(&mut self, filter: Value) -> String {
        self.send(json!({"action": "subscribe", "channel": "events", "filter": filter}));
        let m = self.recv();
        assert_eq!(
            (m["action"].as_str(), m["channel"].as_str()),
            (Some("subscribed"), Some("events")),
            "{m}"
        );
        let id = m["subscription_id"].as_str().expect("subscription_id");
        let uuid = uuid::Uuid::parse_str(id.strip_prefix("sub_").expect("sub_ prefix")).unwrap();
        assert_eq!(uuid.get_version_num(), 7);
        id.to_string()
    }
}

#[test]
fn websocket_subscribe_unsubscribe_and_several_subscriptions() {
    let srv = Server::start();
    let (mut c, mut w) = (srv.client(), srv.worker("w-ws"));
    let mut ws = Ws::connect(&srv);
    let s1 = ws.subscribe(json!({"queues": ["wsq"]}));
    let s2 = ws.subscribe(json!({"event_types": ["job.completed"]}));
    assert_ne!(s1, s2);
    let j1 = push_id(&mut c, &job("w.x", "wsq"));
    let j = id_of(&fetch_one(&mut w, "wsq"));
    w.ack(&j, None).expect("ACK");
    // s1: enqueued, started, completed; s2: completed. Interleaving between the two is free.
    let got: Vec<Value> = (0..4).map(|_| ws.recv()).collect();
    for e in &got {
        check(e);
        assert_eq!(e["subject"], j1.as_str());
    }
    let mut t = types(&got);
    let pos = |t: &[&str], x: &str| t.iter().position(|y| *y == x).unwrap();
    assert!(pos(&t, "job.enqueued") < pos(&t, "job.started"));
    t.sort();
    assert_eq!(
        t,
        [
            "job.completed",
            "job.completed",
            "job.enqueued",
            "job.started"
        ]
    );

    ws.send(json!({"action": "unsubscribe", "subscription_id": s1}));
    assert_eq!(
        ws.recv(),
        json!({"action": "unsubscribed", "subscription_id": s1})
    );
    let j2 = push_id(&mut c, &job("w.x", "wsq"));
    let j = id_of(&fetch_one(&mut w, "wsq"));
    w.ack(&j, None).expect("ACK");
    let e = ws.recv();
    assert_eq!(
        (ty(&e), e["subject"].as_str()),
        ("job.completed", Some(j2.as_str()))
    );

    // Bad messages get an error and the socket keeps working.
    for bad in [
        "not json".to_string(),
        "[1,2]".into(),
        json!({"action": "dance"}).to_string(),
        json!({"action": "subscribe", "channel": "jobs"}).to_string(),
        json!({"action": "subscribe", "filter": {"queues": "wsq"}}).to_string(),
        json!({"action": "subscribe", "after": -3}).to_string(),
        json!({"action": "unsubscribe", "subscription_id": s1}).to_string(),
        json!({"action": "unsubscribe"}).to_string(),
    ] {
        ws.send_text(&bad);
        let m = ws.recv();
        assert_eq!(m["action"], "error", "{bad} -> {m}");
        assert!(m["message"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
    }
    // A subscription can replay from a cursor, then go live.
    ws.send(
        json!({"action": "subscribe", "channel": "events", "after": 0,
        "filter": {"queues": ["wsq"], "types": ["job.enqueued"]}}),
    );
    assert_eq!(ws.recv()["action"], "subscribed");
    assert_eq!(ws.recv()["subject"], j1.as_str());
    assert_eq!(ws.recv()["subject"], j2.as_str());
    let j3 = push_id(&mut c, &job("w.x", "wsq"));
    // j3's completed is not coming (nobody fetches it); its enqueued comes to the new one.
    assert_eq!(ws.recv()["subject"], j3.as_str());
}

#[test]
fn a_password_protects_events_and_metrics_but_not_health() {
    let srv = Server::start_with(&["--password", "s3cret"]);
    let h = &srv.http_addr;
    for path in ["/ojs/v1/events", "/metrics", "/v1/events/stream"] {
        let r = http::get(h, path);
        assert_eq!(r.status, 401, "{path} without the password");
        assert_eq!(r.json()["error"]["code"], "x_unauthenticated");
        let wrong = http::request(h, "GET", path, &[("Authorization", "Bearer nope")]);
        assert_eq!(wrong.status, 401, "{path} with a wrong password");
    }
    let ok = http::request(
        h,
        "GET",
        "/ojs/v1/events",
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!(ok.status, 200);
    let m = http::request(h, "GET", "/metrics", &[("Authorization", "Bearer s3cret")]);
    assert_eq!(m.status, 200);
    assert_eq!(http::get(h, "/ojs/v1/health").status, 200);
}
