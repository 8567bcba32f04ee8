//! The job state machine (ojs-core §6) and the queue semantics of FETCH (§7.2), observed
//! through the wire protocol.

mod common;

use common::*;
use ojs_client::{Client, Reply};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

#[rustfmt::skip]
const STATES: [&str; 8] = [
    "scheduled", "available", "pending", "active", "completed", "retryable", "cancelled", "discarded",
];
/// A well-formed UUIDv7 that no test pushes.
const UNKNOWN_ID: &str = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";

/// The server clock plus `secs`, as a client would write `scheduled_at`.
fn server_time_plus(c: &mut Client, secs: i64) -> String {
    rfc3339(server_now(c) + chrono::Duration::seconds(secs))
}

fn ack_line(id: &str) -> String {
    format!(r#"ACK {{"id":"{id}"}}"#)
}

fn fail_line(id: &str) -> String {
    format!(r#"FAIL {{"id":"{id}","error":{{"type":"x","message":"m"}}}}"#)
}

fn fetch_id(w: &mut Client, q: &str) -> String {
    id_of(&fetch_one(w, q))
}

/// A job in `state`, alone in queue `q`; `w` holds it if it is active.
fn job_in(c: &mut Client, w: &mut Client, state: &str, q: &str) -> String {
    let max_attempts = if state == "discarded" { 1 } else { 3 };
    let mut job = json!({
        "type": "test.state", "args": [state], "queue": q,
        "retry": {"max_attempts": max_attempts, "initial_interval": "PT60S", "jitter": false},
    });
    match state {
        "scheduled" => job["scheduled_at"] = json!(server_time_plus(c, 3600)),
        "pending" => job["pending"] = json!(true),
        _ => {}
    }
    let id = push_id(c, &job);
    if matches!(state, "active" | "completed" | "retryable" | "discarded") {
        assert_eq!(fetch_id(w, q), id);
    }
    match state {
        "completed" => call_ok(w, &ack_line(&id)),
        "retryable" | "discarded" => call_ok(w, &fail_line(&id)),
        "cancelled" => call_ok(c, &format!("CANCEL {id}")),
        _ => {}
    }
    assert_eq!(state_of(c, &id), state, "setting up a {state} job");
    id
}

/// The reply a FETCH parked in another thread eventually gets.
fn parked_fetch(mut w: Client, line: &'static str) -> mpsc::Receiver<Reply> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(w.call(line).expect("FETCH")));
    rx
}

fn woken_with(rx: &mpsc::Receiver<Reply>) -> String {
    match rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a FETCH reply")
    {
        Reply::Bulk(b) => id_of(&serde_json::from_slice(&b).expect("JSON")),
        other => panic!("the parked FETCH was not handed the job: {other:?}"),
    }
}

#[test]
fn scheduled_becomes_available_when_its_time_arrives() {
    let srv = Server::start();
    let mut c = srv.client();
    let at = server_time_plus(&mut c, 60);
    let job = json!({"type": "later.job", "args": [], "queue": "sched", "scheduled_at": at});
    let j = c.push(&job).expect("PUSH");
    let id = id_of(&j);
    assert_eq!(
        pick(&j, &["state", "scheduled_at"]),
        json!(["scheduled", at])
    );
    advance(&mut c, 50.0);
    assert_eq!(state_of(&mut c, &id), "scheduled", "not due yet");
    advance(&mut c, 11.0);
    let j = c.job(&id).expect("JOB");
    assert_eq!(j["state"], "available");
    assert!(j["enqueued_at"].is_string(), "enqueued_at set: {j}");
    assert_eq!(fetch_id(&mut srv.worker("w"), "sched"), id);
    // A scheduled_at in the past means available at once.
    let past = server_time_plus(&mut c, -60);
    let job = json!({"type": "late.job", "args": [], "scheduled_at": past});
    assert_eq!(c.push(&job).expect("PUSH")["state"], "available");
}

#[test]
fn pending_becomes_available_on_activate() {
    let srv = Server::start();
    let mut c = srv.client();
    let job = json!({"type": "staged.job", "args": [], "queue": "stage", "pending": true});
    let j = c.push(&job).expect("PUSH");
    let id = id_of(&j);
    assert_eq!(j["state"], "pending");
    assert!(j.get("pending").is_none(), "the flag is not stored: {j}");
    let mut w = srv.worker("w");
    fetch_none(&mut w, "stage");
    call_ok(&mut c, &format!(r#"ACTIVATE {{"id":"{id}"}}"#));
    assert_eq!(state_of(&mut c, &id), "available");
    assert_eq!(fetch_id(&mut w, "stage"), id);
}

#[test]
fn fetch_claims_and_ack_completes() {
    let srv = Server::start();
    let mut c = srv.client();
    let id = push_id(&mut c, &json!({"type": "a.b", "args": [1]}));
    let mut w = srv.worker("w-ack");
    assert_eq!(fetch_id(&mut w, "default"), id);
    let j = c.job(&id).expect("JOB");
    let fields = ["state", "attempt", "worker_id"];
    assert_eq!(pick(&j, &fields), json!(["active", 1, "w-ack"]));
    assert!(j["started_at"].is_string() && j.get("completed_at").is_none());
    w.ack(&id, Some(&json!({"rows": 3}))).expect("ACK");
    let j = c.job(&id).expect("JOB");
    assert_eq!(
        pick(&j, &["state", "result"]),
        json!(["completed", {"rows": 3}])
    );
    assert!(j["completed_at"].is_string(), "{j}");
    assert!(j.get("worker_id").is_none(), "{j}");
}

#[test]
fn fail_makes_retryable_and_the_backoff_timer_makes_available() {
    let srv = Server::start();
    let mut c = srv.client();
    let retry = json!({"max_attempts": 3, "initial_interval": "PT10S", "jitter": false});
    let job = json!({"type": "f.job", "args": [], "queue": "r", "retry": retry});
    let id = push_id(&mut c, &job);
    let mut w = srv.worker("w");
    fetch_one(&mut w, "r");
    let trace = vec!["a.rs:1".to_string()];
    w.fail(&id, "io_error", "disk on fire", &trace)
        .expect("FAIL");
    let j = c.job(&id).expect("JOB");
    assert_eq!(j["state"], "retryable");
    let err = json!({"type": "io_error", "message": "disk on fire", "backtrace": trace});
    assert_eq!(j["error"], err);
    assert_eq!(j["errors"].as_array().map(Vec::len), Some(1));
    assert_eq!(j["errors"][0]["attempt"], 1);
    let wait = secs_between(server_now(&mut c), ts(&j["next_retry_at"]));
    assert!((9.0..=10.0).contains(&wait), "next retry in {wait} s");
    advance(&mut c, 5.0);
    assert_eq!(state_of(&mut c, &id), "retryable", "backoff not over yet");
    advance(&mut c, 6.0);
    assert_eq!(state_of(&mut c, &id), "available");
    let again = fetch_one(&mut w, "r");
    assert_eq!(pick(&again, &["id", "attempt"]), json!([id, 2]));
}

#[test]
fn exhausted_job_is_discarded_and_dead_retry_resets_it() {
    let srv = Server::start();
    let mut c = srv.client();
    let retry = json!({"max_attempts": 2, "initial_interval": "PT1S", "jitter": false});
    let job = json!({"type": "d.job", "args": [], "queue": "d", "retry": retry});
    let id = push_id(&mut c, &job);
    let mut w = srv.worker("w");
    for attempt in 1..=2 {
        assert_eq!(fetch_one(&mut w, "d")["attempt"], attempt);
        call_ok(&mut w, &fail_line(&id));
        advance(&mut c, 2.0);
    }
    let j = c.job(&id).expect("JOB");
    assert_eq!(j["state"], "discarded");
    assert!(j["discarded_at"].is_string(), "{j}");
    assert_eq!(j["errors"].as_array().map(Vec::len), Some(2));
    assert_eq!(dead_ids(&mut c), vec![id.clone()]);

    call_ok(&mut c, &format!("DEAD RETRY {id}"));
    let j = c.job(&id).expect("JOB");
    assert_eq!(pick(&j, &["state", "attempt"]), json!(["available", 0]));
    for gone in ["error", "errors", "discarded_at"] {
        assert!(j.get(gone).is_none(), "{gone} should be cleared: {j}");
    }
    assert!(dead_ids(&mut c).is_empty());
    assert_eq!(fetch_one(&mut w, "d")["attempt"], 1);

    // A non-retryable error discards on the first attempt, whatever max_attempts says.
    let retry = json!({"max_attempts": 5, "non_retryable_errors": ["x"]});
    let job = json!({"type": "d.job", "args": [], "queue": "d2", "retry": retry});
    let id2 = push_id(&mut c, &job);
    fetch_one(&mut w, "d2");
    call_ok(&mut w, &fail_line(&id2));
    assert_eq!(state_of(&mut c, &id2), "discarded");
}

#[test]
fn cancelling_an_active_job_wins_over_its_worker() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-c");
    let id = job_in(&mut c, &mut w, "active", "ca");
    c.cancel(&id).expect("CANCEL");
    let j = c.job(&id).expect("JOB");
    assert_eq!(j["state"], "cancelled");
    assert!(
        j["cancelled_at"].is_string() && j.get("worker_id").is_none(),
        "{j}"
    );
    let info = c.info().expect("INFO");
    let me = info["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|x| x["wid"] == "w-c");
    assert_eq!(
        me.map(|x| &x["active_jobs"]),
        Some(&json!(0)),
        "reservation released"
    );
    assert_eq!(err_code(&mut w, &ack_line(&id)), "INVALID_STATE_TRANSITION");
    assert_eq!(
        err_code(&mut w, &fail_line(&id)),
        "INVALID_STATE_TRANSITION"
    );
    assert_eq!(state_of(&mut c, &id), "cancelled");
}

#[test]
fn invalid_operations_are_rejected_and_change_nothing() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-inv");
    for state in STATES {
        let id = job_in(&mut c, &mut w, state, &format!("inv-{state}"));
        let before = c.job(&id).expect("JOB");
        let ops = [
            ("ACK", ack_line(&id)),
            ("FAIL", fail_line(&id)),
            ("ACTIVATE", format!(r#"ACTIVATE {{"id":"{id}"}}"#)),
            ("DEAD RETRY", format!("DEAD RETRY {id}")),
        ];
        for (op, line) in ops {
            let valid = matches!(
                (state, op),
                ("active", "ACK" | "FAIL") | ("pending", "ACTIVATE") | ("discarded", "DEAD RETRY")
            );
            if !valid {
                let code = err_code(&mut w, &line);
                assert_eq!(code, "INVALID_STATE_TRANSITION", "{op} on a {state} job");
                let after = c.job(&id).expect("JOB");
                assert_eq!(after, before, "{op} changed a {state} job");
            }
        }
    }
}

#[test]
fn unknown_ids_are_not_found() {
    let srv = Server::start();
    let mut c = srv.client();
    for id in [UNKNOWN_ID, "no-such-job"] {
        for line in [
            format!("JOB {id}"),
            ack_line(id),
            fail_line(id),
            format!("CANCEL {id}"),
            format!(r#"CANCEL {{"id":"{id}"}}"#),
            format!(r#"ACTIVATE {{"id":"{id}"}}"#),
            format!("DEAD RETRY {id}"),
            format!("DEAD DELETE {id}"),
        ] {
            assert_eq!(err_code(&mut c, &line), "NOT_FOUND", "{line}");
        }
    }
}

#[test]
fn cancel_works_in_every_state() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-cancel");
    let mut cancelled = Vec::new();
    for state in STATES {
        let id = job_in(&mut c, &mut w, state, &format!("cx-{state}"));
        let before = c.job(&id).expect("JOB");
        call_ok(&mut c, &format!("CANCEL {id}"));
        let after = c.job(&id).expect("JOB");
        if matches!(state, "completed" | "discarded" | "cancelled") {
            assert_eq!(after, before, "CANCEL on a {state} job is a no-op");
            call_ok(&mut c, &format!(r#"CANCEL {{"id":"{id}"}}"#));
        } else {
            assert_eq!(after["state"], "cancelled", "CANCEL on a {state} job");
            assert!(after["cancelled_at"].is_string(), "{after}");
            cancelled.push(id);
        }
    }
    // The timers of the cancelled scheduled and retryable jobs must not revive them.
    advance(&mut c, 3700.0);
    for id in &cancelled {
        assert_eq!(state_of(&mut c, id), "cancelled");
    }
    let queues: Vec<String> = STATES.iter().map(|s| format!("cx-{s}")).collect();
    let line = format!("FETCH {} COUNT 10", queues.join(" "));
    assert_eq!(w.call(&line).expect("FETCH"), Reply::Null, "nothing to run");
}

#[test]
fn ack_or_fail_by_another_worker_is_not_owner() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut owner = srv.worker("owner");
    let mut other = srv.worker("intruder");
    let id = job_in(&mut c, &mut owner, "active", "own");
    assert_eq!(err_code(&mut other, &ack_line(&id)), "NOT_OWNER");
    assert_eq!(err_code(&mut other, &fail_line(&id)), "NOT_OWNER");
    let j = c.job(&id).expect("JOB");
    assert_eq!(
        pick(&j, &["state", "worker_id"]),
        json!(["active", "owner"])
    );
    call_ok(&mut owner, &ack_line(&id));
    assert_eq!(state_of(&mut c, &id), "completed");
}

#[test]
fn higher_priority_first_then_fifo() {
    let srv = Server::start();
    let mut c = srv.client();
    let prios = [10, 0, -10, 5, 0, 10, -3];
    let mut pushed = Vec::new();
    for i in 0..30 {
        let p = prios[(i * 3) % prios.len()];
        let job = json!({"type": "p.job", "args": [i], "queue": "prio", "priority": p});
        pushed.push((p, push_id(&mut c, &job)));
    }
    pushed.sort_by_key(|(p, _)| -p); // stable, so FIFO within a priority
    let want: Vec<String> = pushed.into_iter().map(|(_, id)| id).collect();
    let mut w = srv.worker("w");
    let got: Vec<String> = (0..30).map(|_| fetch_id(&mut w, "prio")).collect();
    assert_eq!(got, want);
}

#[test]
fn queues_are_served_in_the_order_given() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut push = |q: &str, p: i64| {
        let job = json!({"type": "q.job", "args": [], "queue": q, "priority": p});
        push_id(&mut c, &job)
    };
    let (b1, a1, b2, a2) = (
        push("qb", 0),
        push("qa", 0),
        push("qb", 100),
        push("qa", -5),
    );
    let mut w = srv.worker("w");
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(id_of(
            &w.fetch(&["qa", "qb"]).expect("FETCH").expect("a job"),
        ));
    }
    assert_eq!(got, vec![a1, a2, b2, b1], "qa drained before qb");
}

#[test]
fn fetch_count_returns_up_to_n_in_order() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut push = |q: &str, n: usize| {
        let jobs: Vec<Value> = (0..n)
            .map(|i| json!({"type": "n", "args": [i], "queue": q}))
            .collect();
        ids_of(&c.push_bulk(&jobs).expect("PUSHB"))
    };
    let (cnt, x, y) = (push("cnt", 5), push("cx", 2), push("cy", 3));
    let mut w = srv.worker("w");
    let first = w.fetch_many(&["cnt"], 3).expect("FETCH COUNT");
    assert_eq!(ids_of(&first), cnt[..3]);
    assert!(first
        .iter()
        .all(|j| j["state"] == "active" && j["attempt"] == 1));
    assert_eq!(ids_of(&w.fetch_many(&["cnt"], 3).expect("FETCH")), cnt[3..]);
    assert_eq!(w.call("FETCH cnt COUNT 3").expect("FETCH"), Reply::Null);
    let spanning = w.fetch_many(&["cx", "cy"], 4).expect("FETCH");
    assert_eq!(ids_of(&spanning), [&x[..], &y[..2]].concat());
    // With COUNT the reply is always an array, even for one job.
    let last = call_json(&mut w, "FETCH cy COUNT 1");
    assert_eq!(ids_of(last.as_array().expect("an array")), y[2..]);
}

#[test]
fn blocked_fetches_wake_up_when_jobs_arrive() {
    // A long fetch wait, so a missed wake-up shows as $-1 rather than a lucky timing.
    let srv = Server::start_with(&["--fetch-wait-ms", "5000"]);
    let mut c = srv.client();
    let parked: Vec<_> = (0..3)
        .map(|i| parked_fetch(srv.worker(&format!("parked-{i}")), "FETCH wake"))
        .collect();
    wait_for_blocked_fetches(&mut c, 3);
    let jobs: Vec<Value> = (0..3)
        .map(|i| json!({"type": "w", "args": [i], "queue": "wake"}))
        .collect();
    let pushed: HashSet<String> = ids_of(&c.push_bulk(&jobs).expect("PUSHB"))
        .into_iter()
        .collect();
    let got: HashSet<String> = parked.iter().map(woken_with).collect();
    assert_eq!(got, pushed, "each parked FETCH got a different job");
}

#[test]
fn a_fetch_abandoned_by_its_client_does_not_swallow_a_job() {
    let srv = Server::start_with(&["--fetch-wait-ms", "5000"]);
    let mut c = srv.client();
    let connections = |c: &mut Client| c.info().expect("INFO")["server"]["connections"].clone();
    let before = connections(&mut c);
    let mut sock = std::net::TcpStream::connect(&srv.addr).expect("connect");
    sock.write_all(b"HELLO {\"v\":2}\r\nFETCH gone\r\n")
        .expect("write");
    let mut buf = [0u8; 64];
    let _ = sock.read(&mut buf).expect("greeting");
    wait_for_blocked_fetches(&mut c, 1);
    drop(sock);
    // Give the server a moment to see the EOF (it cannot be observed more directly).
    let deadline = Instant::now() + Duration::from_secs(2);
    while connections(&mut c) != before && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let id = push_id(&mut c, &json!({"type": "g", "args": [], "queue": "gone"}));
    assert_eq!(
        state_of(&mut c, &id),
        "available",
        "handed to a closed connection"
    );
}

#[test]
fn empty_fetch_returns_null_after_the_wait() {
    let srv = Server::start();
    let mut w = srv.worker("w");
    let start = Instant::now();
    assert_eq!(w.call("FETCH empty other").expect("FETCH"), Reply::Null);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(290),
        "returned after {took:?}"
    );
    assert!(took < Duration::from_secs(3), "returned after {took:?}");
    assert_eq!(w.info().expect("INFO")["totals"]["waiting_fetches"], 0);
}

#[test]
fn every_job_is_claimed_exactly_once() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut pushed = HashSet::new();
    for batch in 0..4 {
        let jobs: Vec<Value> = (0..500)
            .map(|i| json!({"type": "claim.job", "args": [batch * 500 + i], "queue": "claim"}))
            .collect();
        pushed.extend(ids_of(&c.push_bulk(&jobs).expect("PUSHB")));
    }
    assert_eq!(pushed.len(), 2000);
    let claimer = |t: usize| {
        let mut w = srv.worker(&format!("claimer-{t}"));
        let mut mine = Vec::new();
        let mut next = w.call("FETCH claim").expect("FETCH");
        // Each ACK travels with the next FETCH: half the round trips.
        while let Reply::Bulk(b) = next {
            let id = id_of(&serde_json::from_slice(&b).expect("JSON"));
            w.send_line(&ack_line(&id)).expect("send");
            w.send_line("FETCH claim").expect("send");
            w.flush().expect("flush");
            assert_eq!(w.read_reply().expect("ACK"), Reply::Simple("OK".into()));
            next = w.read_reply().expect("FETCH");
            mine.push(id);
        }
        assert_eq!(next, Reply::Null, "a FETCH failed");
        mine
    };
    let delivered: Vec<String> = thread::scope(|s| {
        let threads: Vec<_> = (0..16).map(|t| s.spawn(move || claimer(t))).collect();
        threads
            .into_iter()
            .flat_map(|h| h.join().expect("claimer"))
            .collect()
    });
    assert_eq!(delivered.len(), 2000, "deliveries");
    let unique: HashSet<String> = delivered.into_iter().collect();
    assert_eq!(unique, pushed, "every job exactly once");
    let q = &c.info().expect("INFO")["queues"]["claim"];
    assert_eq!(
        pick(q, &["completed", "active", "available"]),
        json!([2000, 0, 0])
    );
}

#[test]
fn pushb_is_all_or_nothing() {
    let srv = Server::start();
    let mut c = srv.client();
    let (existing, dup) = (new_id(), new_id());
    let job = json!({"type": "a", "args": [], "queue": "other", "id": existing});
    push_id(&mut c, &job);
    let totals = |c: &mut Client| c.info().expect("INFO")["totals"].clone();
    let before = totals(&mut c);
    let good = |i: i64| json!({"type": "a", "args": [i], "queue": "atomic"});
    let with_id = |id: &str| json!({"type": "a", "args": [], "queue": "atomic", "id": id});
    let bad_args = json!({"type": "a", "args": "nope", "queue": "atomic"});
    let bad_batches = [
        (vec![good(0), good(1), bad_args, good(3)], "INVALID_ARGS"),
        (vec![good(0), with_id(&dup), with_id(&dup)], "DUPLICATE_JOB"),
        (vec![good(0), with_id(&existing)], "DUPLICATE_JOB"),
    ];
    for (batch, want) in bad_batches {
        match c
            .call(&format!("PUSHB {}", Value::Array(batch)))
            .expect("PUSHB")
        {
            Reply::Error { code, message } => {
                assert_eq!(code, want);
                assert!(message.contains("no job was enqueued"), "{message}");
            }
            other => panic!("expected {want}, got {other:?}"),
        }
        assert_eq!(totals(&mut c), before, "nothing stored");
        let q = c.info().expect("INFO")["queues"]["atomic"].clone();
        assert!(q.is_null() || q["available"] == 0, "queue atomic: {q}");
    }
    assert_eq!(
        c.push_bulk(&[good(0), good(1), good(2)])
            .expect("PUSHB")
            .len(),
        3
    );
    assert_eq!(c.info().expect("INFO")["queues"]["atomic"]["available"], 3);
}

#[test]
fn paused_queue_is_skipped_and_resumed_queue_served() {
    let srv = Server::start_with(&["--fetch-wait-ms", "5000"]);
    let mut c = srv.client();
    call_ok(&mut c, "QUEUE PAUSE p1");
    let p1 = push_id(&mut c, &json!({"type": "p", "args": [], "queue": "p1"}));
    let p2 = push_id(&mut c, &json!({"type": "p", "args": [], "queue": "p2"}));
    assert_eq!(
        state_of(&mut c, &p1),
        "available",
        "PUSH into a paused queue works"
    );
    assert_eq!(c.info().expect("INFO")["queues"]["p1"]["paused"], true);
    let mut w = srv.worker("w");
    let got = w.fetch(&["p1", "p2"]).expect("FETCH").expect("a job");
    assert_eq!(id_of(&got), p2, "the paused queue is skipped");

    let parked = parked_fetch(w, "FETCH p1");
    wait_for_blocked_fetches(&mut c, 1);
    assert_eq!(state_of(&mut c, &p1), "available", "still not handed out");
    call_ok(&mut c, "QUEUE RESUME p1");
    assert_eq!(woken_with(&parked), p1, "resuming serves the waiting FETCH");
    assert_eq!(c.info().expect("INFO")["queues"]["p1"]["paused"], false);
}

#[test]
fn dead_list_pages_and_filters() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w");
    #[rustfmt::skip]
    let specs = [
        ("dq-a", "alpha.job"), ("dq-b", "beta.job"), ("dq-a", "beta.job"), ("dq-a", "alpha.job"),
        ("dq-b", "alpha.job"), ("dq-a", "alpha.job"), ("dq-b", "beta.job"),
    ];
    let mut dead = Vec::new(); // (id, queue, type), oldest first
    for (q, t) in specs {
        let job = json!({"type": t, "args": [], "queue": q, "retry": {"max_attempts": 1}});
        let id = push_id(&mut c, &job);
        fetch_one(&mut w, q);
        call_ok(&mut w, &fail_line(&id));
        dead.push((id, q, t));
        advance(&mut c, 0.002); // distinct discard times
    }
    let newest_first = |q: Option<&str>, t: Option<&str>| -> Vec<String> {
        let keep = |dq: &str, dt: &str| q.is_none_or(|q| q == dq) && t.is_none_or(|t| t == dt);
        dead.iter()
            .rev()
            .filter(|d| keep(d.1, d.2))
            .map(|d| d.0.clone())
            .collect()
    };
    let list = |c: &mut Client, opts: Value| -> (Value, Vec<String>) {
        let v = call_json(c, &format!("DEAD LIST {opts}"));
        let jobs = v["jobs"].as_array().expect("jobs");
        assert!(jobs.iter().all(|j| j["state"] == "discarded"), "{v}");
        (v["total"].clone(), ids_of(jobs))
    };
    let all = call_json(&mut c, "DEAD LIST");
    assert_eq!(all["total"], 7);
    assert_eq!(
        ids_of(all["jobs"].as_array().expect("jobs")),
        newest_first(None, None)
    );

    let mut paged = Vec::new();
    for offset in [0, 3, 6] {
        let (total, page) = list(&mut c, json!({"limit": 3, "offset": offset}));
        assert_eq!(total, 7);
        assert!(page.len() <= 3);
        paged.extend(page);
    }
    assert_eq!(
        paged,
        newest_first(None, None),
        "pages cover the set once, in order"
    );
    assert_eq!(
        list(&mut c, json!({"limit": 3, "offset": 9})),
        (json!(7), vec![])
    );

    #[rustfmt::skip]
    let cases = [
        (Some("dq-a"), None), (None, Some("beta.job")), (Some("dq-b"), Some("alpha.job")),
        (Some("dq-a"), Some("alpha.job")), (Some("nope"), None), (None, Some("nope.job")),
    ];
    for (q, t) in cases {
        let want = newest_first(q, t);
        let (total, got) = list(&mut c, json!({"queue": q, "type": t}));
        assert_eq!((total, &got), (json!(want.len()), &want), "{q:?} {t:?}");
        let (total, got) = list(
            &mut c,
            json!({"queue": q, "type": t, "limit": 1, "offset": 1}),
        );
        assert_eq!(total, json!(want.len()));
        assert_eq!(
            got,
            want.get(1..2).unwrap_or_default(),
            "{q:?} {t:?} page 2"
        );
    }

    let (victim, retried) = (dead[0].0.clone(), dead[1].0.clone());
    call_ok(&mut c, &format!("DEAD DELETE {victim}"));
    assert_eq!(err_code(&mut c, &format!("JOB {victim}")), "NOT_FOUND");
    call_ok(&mut c, &format!("DEAD RETRY {retried}"));
    let (total, rest) = list(&mut c, json!({}));
    assert_eq!(total, 5);
    assert!(!rest.contains(&victim) && !rest.contains(&retried));
}
