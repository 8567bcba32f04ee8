//! The lifecycle scenarios of ojs-events §10 over TCP `SUBSCRIBE`: for each, the exact
//! sequence of event types for the job and the data fields of §4. Tests wait for the events
//! they know are coming and move time with `CLOCK ADVANCE`.

mod common;
#[path = "events_support/mod.rs"]
mod support;

use common::*;
use ojs_client::Reply;
use serde_json::{json, Value};
use support::*;

// ---------------------------------------------------------------------------------------
// ojs-events §10: lifecycle scenarios
// ---------------------------------------------------------------------------------------

#[test]
fn successful_job_is_enqueued_started_completed() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-ok"));
    let new = json!({"type": "email.send", "args": ["a@b.c"], "queue": "email", "priority": 3});
    let id = push_id(&mut c, &new);
    assert_eq!(id_of(&fetch_one(&mut w, "email")), id);
    advance(&mut c, 1.5);
    w.ack(&id, Some(&json!({"message_id": "m1"}))).expect("ACK");

    let evs = sub.until(|e| ty(e) == "job.completed");
    let mine = of(&evs, &id);
    assert_eq!(
        types(&mine),
        ["job.enqueued", "job.started", "job.completed"]
    );
    let [enq, started, done] = mine[..] else {
        unreachable!()
    };
    assert_eq!(enq["source"], "ojs://ojsd/api");
    has(
        enq,
        json!({"job_type": "email.send", "queue": "email", "priority": 3}),
    );
    for e in [started, done] {
        assert_eq!(e["source"], "ojs://ojsd/workers/w-ok");
    }
    has(started, json!({"worker_id": "w-ok", "attempt": 1}));
    has(done, json!({"attempt": 1, "result": {"message_id": "m1"}}));
    let ms = done["data"]["duration_ms"]
        .as_i64()
        .expect("integer duration_ms");
    assert!(
        (1500..6500).contains(&ms),
        "duration_ms {ms} follows the engine clock"
    );
}

#[test]
fn failing_job_retries_twice_then_is_discarded() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0, "event_types": ["job.*"]}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-fail"));
    let retry = json!({"max_attempts": 3, "initial_interval": "PT1S", "jitter": false});
    let new = json!({"type": "pay.charge", "args": [], "queue": "pay", "retry": retry});
    let id = push_id(&mut c, &new);
    let mut evs = Vec::new();
    for attempt in 1..=3u64 {
        assert_eq!(fetch_one(&mut w, "pay")["attempt"], attempt);
        let trace = ["at charge".to_string(), "at main".to_string()];
        let msg = format!("gateway timeout {attempt}");
        w.fail(&id, "handler_error", &msg, &trace).expect("FAIL");
        let last = if attempt < 3 {
            "job.retrying"
        } else {
            "job.discarded"
        };
        evs.extend(sub.until(|e| ty(e) == last));
        if attempt < 3 {
            let r = evs.last().unwrap();
            let delay = secs_between(ts(&r["time"]), ts(&r["data"]["next_retry_at"]));
            assert!(
                (delay - attempt as f64).abs() < 0.002,
                "retry {attempt}: {delay}s"
            );
            advance(&mut c, delay + 0.5); // past next_retry_at
        }
    }
    let mine = of(&evs, &id);
    assert_eq!(mine.len(), evs.len(), "only this job's events");
    #[rustfmt::skip]
    assert_eq!(types(&mine), ["job.enqueued", "job.started", "job.failed", "job.retrying",
        "job.started", "job.failed", "job.retrying", "job.started", "job.failed", "job.discarded"]);
    let mut attempt = 0u64;
    for e in &mine[1..] {
        assert_eq!(e["source"], "ojs://ojsd/workers/w-fail", "{e}");
        attempt += (ty(e) == "job.started") as u64;
        let short =
            json!({"code": "handler_error", "message": format!("gateway timeout {attempt}")});
        match ty(e) {
            "job.started" => has(e, json!({"attempt": attempt, "worker_id": "w-fail"})),
            "job.failed" => {
                let mut full = short.clone();
                full["retryable"] = json!(attempt < 3);
                full["stack_trace"] = json!("at charge\nat main");
                has(e, json!({"attempt": attempt, "error": full}));
                assert!(e["data"]["duration_ms"].is_i64(), "{e}");
            }
            "job.retrying" => {
                has(
                    e,
                    json!({"attempt": attempt, "max_attempts": 3, "error": short}),
                );
                ts(&e["data"]["next_retry_at"]);
            }
            _ => has(e, json!({"total_attempts": 3, "last_error": short})),
        }
    }
    assert_eq!(state_of(&mut c, &id), "discarded");
}

#[test]
fn scheduled_job_cancelled_before_it_runs() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let at = rfc3339(server_now(&mut c) + chrono::Duration::hours(1));
    let new = json!({"type": "campaign.launch", "args": [], "queue": "mkt", "scheduled_at": at});
    let id = push_id(&mut c, &new);
    c.cancel(&id).expect("CANCEL");
    advance(&mut c, 7200.0); // the cancelled job's promotion timer must not fire
    let evs = drain(&mut sub, &mut c);
    let mine = of(&evs, &id);
    assert_eq!(types(&mine), ["job.scheduled", "job.cancelled"]);
    assert_eq!(ts(&mine[0]["data"]["scheduled_at"]), ts(&json!(at)));
    has(
        mine[1],
        json!({"queue": "mkt", "job_type": "campaign.launch", "cancelled_by": "api"}),
    );
    assert!(mine.iter().all(|e| e["source"] == "ojs://ojsd/api"));
}

#[test]
fn job_expires_before_anyone_fetches_it() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let exp = rfc3339(server_now(&mut c) + chrono::Duration::seconds(30));
    let new = json!({"type": "notify.push", "args": [], "queue": "notify", "expires_at": exp});
    let id = push_id(&mut c, &new);
    advance(&mut c, 31.0);
    let evs = sub.until(|e| ty(e) == "job.expired");
    let mine = of(&evs, &id);
    assert_eq!(types(&mine), ["job.enqueued", "job.expired"]);
    let (e, d) = (mine[1], &mine[1]["data"]);
    assert_eq!(e["source"], "ojs://ojsd/scheduler");
    let (created, expired, exp) = (ts(&d["created_at"]), ts(&d["expired_at"]), ts(&json!(exp)));
    assert_eq!(d["ttl_ms"], (exp - created).num_milliseconds(), "{e}");
    assert!(
        expired >= exp && secs_between(created, expired) < 40.0,
        "{e}"
    );
}

#[test]
fn worker_started_heartbeat_quiet_stopped() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let queues = json!(["email", "default"]);
    let hello = json!({"v": 2, "wid": "w-life", "hostname": "box1", "queues": queues,
        "concurrency": 4});
    let mut w1 = Raw::connect(&srv.addr, hello.clone(), None);
    let id = push_id(&mut c, &job("email.send", "email"));
    assert!(matches!(w1.call("FETCH email"), Reply::Bulk(_)));
    assert_eq!(w1.call(&format!("ACK {}", json!({"id": id}))), ok());
    assert_eq!(w1.call(r#"BEAT {"wid":"w-life"}"#), ok());
    c.quiet_worker("w-life").expect("WORKER QUIET");
    let quiet = w1.call(r#"BEAT {"wid":"w-life"}"#);
    assert!(matches!(&quiet, Reply::Bulk(b) if b.starts_with(br#"{"state":"quiet""#)));
    // A second connection of the same worker is not a new start, closing it not a stop.
    let mut w2 = Raw::connect(&srv.addr, hello, None);
    advance(&mut c, 5.0);
    w2.send("END");
    w1.send("END");
    let mut evs = sub.until(|e| ty(e) == "worker.stopped");
    evs.extend(drain(&mut sub, &mut c));
    let mine = of(&evs, "w-life");
    #[rustfmt::skip]
    assert_eq!(types(&mine), ["worker.started", "worker.heartbeat", "worker.quiet",
        "worker.heartbeat", "worker.stopped"]);
    for e in &mine {
        has(e, json!({"worker_id": "w-life"}));
        let from_worker = e["source"] == "ojs://ojsd/workers/w-life";
        assert!(from_worker || ty(e) == "worker.quiet", "{e}");
    }
    has(
        mine[0],
        json!({"queues": queues, "concurrency": 4, "hostname": "box1"}),
    );
    has(
        mine[1],
        json!({"active_jobs": 0, "queues": queues, "state": "running"}),
    );
    has(mine[2], json!({"active_jobs": 0}));
    has(mine[3], json!({"state": "quiet"}));
    has(mine[4], json!({"reason": "shutdown", "jobs_completed": 1}));
    let uptime = mine[4]["data"]["uptime_ms"].as_i64();
    assert!(uptime.is_some_and(|u| u >= 5000), "{}", mine[4]);
}

#[test]
fn queue_paused_and_resumed() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-q"));
    c.pause_queues(&["email"]).expect("PAUSE");
    c.pause_queues(&["email"]).expect("PAUSE again: no event");
    c.resume_queues(&["email"]).expect("RESUME");
    c.resume_queues(&["email"]).expect("RESUME again: no event");
    w.pause_queues(&["reports"]).expect("PAUSE by a worker");
    let evs = drain(&mut sub, &mut c);
    let email = of(&evs, "email");
    assert_eq!(types(&email), ["queue.paused", "queue.resumed"]);
    assert_eq!(
        email[0]["data"],
        json!({"queue": "email", "paused_by": "api"})
    );
    assert_eq!(
        email[1]["data"],
        json!({"queue": "email", "resumed_by": "api"})
    );
    assert!(email.iter().all(|e| e["source"] == "ojs://ojsd/api"));
    let reports = of(&evs, "reports");
    assert_eq!(types(&reports), ["queue.paused"]);
    has(
        reports[0],
        json!({"queue": "reports", "paused_by": "worker:w-q"}),
    );
}

#[test]
fn trace_id_is_on_every_job_event_and_progress_is_reported() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-tr"));
    let (t1, t2) = (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "0af7651916cd43dd8448eb211c80319c",
    );
    let traced = |meta: Value| json!({"type": "order.go", "args": [], "queue": "o", "meta": meta});
    let a = push_id(&mut c, &traced(json!({"trace_id": t1})));
    let tp = format!("00-{t2}-b7ad6b7169203331-01");
    let b = push_id(&mut c, &traced(json!({"traceparent": tp})));
    let plain = push_id(&mut c, &job("order.go", "o"));

    assert_eq!(id_of(&fetch_one(&mut w, "o")), a);
    for p in [
        json!({"id": a, "percent": 25, "message": "1 of 4"}),
        json!({"id": a, "percent": 75.5}),
    ] {
        assert_eq!(w.call(&format!("PROGRESS {p}")).expect("PROGRESS"), ok());
    }
    w.beat("w-tr", std::slice::from_ref(&a)).expect("BEAT");
    w.ack(&a, None).expect("ACK");
    assert_eq!(id_of(&fetch_one(&mut w, "o")), b);
    w.fail(&b, "handler_error", "no stock", &[]).expect("FAIL");
    c.cancel(&b).expect("CANCEL");
    assert_eq!(id_of(&fetch_one(&mut w, "o")), plain);
    w.ack(&plain, None).expect("ACK");
    let evs = drain(&mut sub, &mut c);

    let ea = of(&evs, &a);
    #[rustfmt::skip]
    assert_eq!(types(&ea), ["job.enqueued", "job.started", "job.progress", "job.progress",
        "job.heartbeat", "job.completed"]);
    ea.iter().for_each(|e| has(e, json!({"trace_id": t1})));
    #[rustfmt::skip]
    has(ea[2], json!({"worker_id": "w-tr", "attempt": 1, "progress_percent": 25.0,
        "progress_message": "1 of 4"}));
    has(
        ea[3],
        json!({"progress_percent": 75.5, "progress_message": null}),
    );
    assert_eq!(ea[2]["source"], "ojs://ojsd/workers/w-tr");
    has(ea[4], json!({"worker_id": "w-tr", "attempt": 1}));
    ts(&ea[4]["data"]["visible_until"]);

    let eb = of(&evs, &b);
    #[rustfmt::skip]
    assert_eq!(types(&eb), ["job.enqueued", "job.started", "job.failed", "job.retrying",
        "job.cancelled"]);
    eb.iter().for_each(|e| has(e, json!({"trace_id": t2})));
    let ep = of(&evs, &plain);
    assert_eq!(ep.len(), 3);
    assert!(
        ep.iter().all(|e| e["data"].get("trace_id").is_none()),
        "{ep:?}"
    );
}
