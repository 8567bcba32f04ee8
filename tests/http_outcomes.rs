//! The HTTP binding's ACK, NACK, CANCEL and ACTIVATE answer from one engine step (issue
//! 19): the reply shows the job as that change left it, even when a waiting FETCH claims
//! a requeued job in the same batch, and a refused change is a 409 naming the state.

mod common;

use common::http::send;
use common::{push_id, test_job, wait_for_blocked_fetches, Server};
use serde_json::{json, Value};

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let r = send(addr, "POST", path, &body.to_string());
    (r.status, r.json())
}

#[test]
fn a_requeuing_nack_reports_available_though_a_waiting_fetch_takes_the_job_at_once() {
    let srv = Server::start_with(&["--fetch-wait-ms", "30000"]);
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let id = push_id(
        &mut c,
        &test_job("race", json!({"retry": {"max_attempts": 5}})),
    );
    let (_, got) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["race"], "worker_id": "w1", "wait_ms": 0}),
    );
    assert_eq!(got["jobs"][0]["id"], id.as_str());
    // A second worker waits for a job of that queue.
    let addr = srv.addr.clone();
    let waiter = std::thread::spawn(move || {
        let mut w2 = ojs_client::Client::connect_with(
            &addr,
            &ojs_client::ConnectOptions {
                wid: Some("w2".into()),
                ..Default::default()
            },
        )
        .unwrap();
        w2.call("FETCH race").unwrap()
    });
    wait_for_blocked_fetches(&mut c, 1);
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w1", "requeue": true,
            "error": {"code": "handler_error", "message": "again"}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "available", "what the NACK did: {body}");
    assert_eq!(body["attempt"], 1, "{body}");
    // The waiting worker got it in the same batch.
    match waiter.join().unwrap() {
        ojs_client::Reply::Bulk(b) => {
            let j: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(j["id"], id.as_str());
            assert_eq!(j["state"], "active");
        }
        other => panic!("the waiting FETCH: {other:?}"),
    }
}

#[test]
fn ack_cancel_and_activate_answer_the_changed_job_and_a_refused_change_is_a_409() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let id = push_id(&mut c, &test_job("oc", json!({})));
    post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["oc"], "worker_id": "w", "wait_ms": 0}),
    );
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/ack",
        json!({"job_id": id, "worker_id": "w", "result": {"ok": 1}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "completed");
    assert!(body["completed_at"].is_string(), "{body}");
    // A second ACK: 409 with the state it is in.
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/ack",
        json!({"job_id": id, "worker_id": "w"}),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"]["details"]["current_state"], "completed",
        "{body}"
    );
    // CANCEL of a finished job: 409; of a waiting one: the cancelled job.
    let r = send(&a, "DELETE", &format!("/ojs/v1/jobs/{id}"), "");
    assert_eq!(r.status, 409, "{}", r.text());
    let pending = push_id(&mut c, &test_job("oc", json!({"pending": true})));
    let r = send(&a, "POST", &format!("/ojs/v1/jobs/{pending}/activate"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["job"]["state"], "available", "{}", r.text());
    let r = send(&a, "DELETE", &format!("/ojs/v1/jobs/{pending}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["job"]["state"], "cancelled", "{}", r.text());
}
