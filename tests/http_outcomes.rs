//! The HTTP binding's ACK, NACK, CANCEL and ACTIVATE answer from one engine step (issue
//! 19): the reply shows the job as that change left it, even when a waiting FETCH claims
//! a requeued job in the same batch, and a refused change is a 409 naming the state.

mod common;

use common::http::send;
use common::{call_ok, fetch_one, id_of, push_id, test_job, wait_for_blocked_fetches, Server};
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

/// Retry now / run now: a retrying job (an hour of backoff left) and a scheduled one (due
/// in an hour) become available at once, keeping their attempt and error history, and a
/// worker gets them; a dead one goes back too. Any other state is a 409 naming it, an
/// unknown id a 404.
#[test]
fn retry_now_makes_a_waiting_job_available_at_once() {
    let srv = Server::start_with(&["--fetch-wait-ms", "200"]);
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let retry = json!({"retry": {"max_attempts": 5, "initial_interval": "PT1H",
        "max_interval": "PT2H", "jitter": false}});
    let retrying = push_id(&mut c, &test_job("rn", retry));
    assert_eq!(id_of(&fetch_one(&mut c, "rn")), retrying);
    call_ok(
        &mut c,
        &format!(r#"FAIL {{"id":"{retrying}","error":{{"type":"Timeout","message":"slow"}}}}"#),
    );
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let scheduled = push_id(&mut c, &test_job("rn", json!({"scheduled_at": later})));
    let dead = push_id(
        &mut c,
        &test_job("rn-dead", json!({"retry": {"max_attempts": 1}})),
    );
    assert_eq!(id_of(&fetch_one(&mut c, "rn-dead")), dead);
    call_ok(
        &mut c,
        &format!(r#"FAIL {{"id":"{dead}","error":{{"type":"Bad","message":"no"}}}}"#),
    );
    assert!(c.fetch(&["rn"]).unwrap().is_none(), "nothing is due yet");

    let r = send(
        &a,
        "POST",
        &format!("/ojs/v1/admin/jobs/{retrying}/retry"),
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let job = &r.json()["job"];
    assert_eq!(
        (job["state"].clone(), job["attempt"].clone()),
        (json!("available"), json!(1)),
        "{job}"
    );
    assert_eq!(
        job["errors"][0]["message"], "slow",
        "the history is kept: {job}"
    );
    let got = fetch_one(&mut c, "rn");
    assert_eq!(
        (id_of(&got), got["attempt"].clone()),
        (retrying.clone(), json!(2))
    );

    let r = send(
        &a,
        "POST",
        &format!("/ojs/v1/admin/jobs/{scheduled}/retry"),
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["job"]["state"], "available", "{}", r.text());
    assert_eq!(id_of(&fetch_one(&mut c, "rn")), scheduled);

    let r = send(&a, "POST", &format!("/ojs/v1/admin/jobs/{dead}/retry"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["job"]["state"], "available", "{}", r.text());

    // The scheduled job is active now: refused, naming the state; so is an available one.
    let r = send(
        &a,
        "POST",
        &format!("/ojs/v1/admin/jobs/{scheduled}/retry"),
        "",
    );
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["details"]["current_state"], "active");
    let r = send(&a, "POST", &format!("/ojs/v1/admin/jobs/{dead}/retry"), "");
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"]["details"]["current_state"], "available");
    let r = send(
        &a,
        "POST",
        "/ojs/v1/admin/jobs/00000000-0000-7000-8000-000000000000/retry",
        "",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    let r = send(&a, "POST", "/ojs/v1/admin/jobs/%00%ff/retry", "");
    assert!(r.status == 404 || r.status == 400, "{}", r.text());
}
