//! Workflow operations: validation errors with paths, WORKFLOW CANCEL, the HTTP endpoints
//! of ojs-workflows §11, and resuming after a crash (SIGKILL) mid-workflow.

mod common;
#[path = "workflow_support/mod.rs"]
mod support;

use common::*;
use serde_json::{json, Value};
use support::*;

fn j(t: &str) -> Value {
    job(t, json!([]))
}

#[test]
fn invalid_definitions_are_rejected_with_every_path() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut deep = j("x.y");
    for _ in 0..6 {
        deep = json!({"type": "chain", "steps": [deep]});
    }
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({"type": "chain", "steps": []}), vec!["$.steps"]),
        (json!({"type": "group", "jobs": []}), vec!["$.jobs"]),
        (
            json!({"type": "batch", "jobs": [j("a")]}),
            vec!["$.callbacks"],
        ),
        (
            json!({"type": "batch", "jobs": [j("a")], "callbacks": {}}),
            vec!["$.callbacks"],
        ),
        (json!({"type": "dag", "steps": [j("a")]}), vec!["$.type"]),
        (
            json!({"type": "chain", "steps": [j("Bad.Type"), {"type": "ok.type", "args": {}}]}),
            vec!["$.steps[0].type", "$.steps[1].args"],
        ),
        (
            json!({"type": "group", "jobs": [{"type": "a", "args": [],
                "options": {"queue": "No Spaces", "retry": {"max_attempts": -1}, "colour": 1}}]}),
            vec!["$.jobs[0].options.colour", "$.jobs[0].options.queue"],
        ),
        (
            json!({"type": "chain", "steps": [j("a"), {"type": "group", "jobs": [j("b"),
                {"type": "batch", "jobs": [j("c")], "callbacks": {"on_failure": j("BAD")}}]}]}),
            vec!["$.steps[1].jobs[1].callbacks.on_failure.type"],
        ),
        (deep, vec!["nesting depth 6 exceeds the maximum of 5"]),
    ];
    for (def, wanted) in cases {
        let (code, message) = error_of(&mut c, &format!("WORKFLOW CREATE {def}"));
        assert_eq!(code, "INVALID_PAYLOAD", "{def}");
        assert!(
            message.starts_with("workflow validation failed: "),
            "{message}"
        );
        for w in wanted {
            assert!(message.contains(w), "{w} missing from {message}");
        }
    }
    let (code, _) = error_of(&mut c, "WORKFLOW CREATE {not json");
    assert_eq!(code, "MALFORMED_COMMAND");
    // Nothing was created by any of them.
    let info = c.info().expect("INFO");
    assert_eq!(info["totals"]["jobs"], 0);
}

#[test]
fn cancel_lets_active_jobs_finish_and_stops_the_rest() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let def = json!({"type": "chain", "steps": [
        {"type": "group", "jobs": [j("g.a"), j("g.b"), j("g.c")]}, j("after.group")]});
    let id = wf_id(&create(&mut c, &def));
    let active = fetch_one(&mut w, "default");
    let cancelled = call_json(&mut c, &format!("WORKFLOW CANCEL {id}"));
    assert_eq!(cancelled["state"], "cancelled");
    assert!(cancelled["metadata"]["cancelled_at"].is_string());
    let group = &cancelled["steps"][0];
    let states: Vec<(String, String)> = group["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["job_id"].as_str().unwrap().to_string(),
                g["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (job_id, state) in &states {
        if *job_id == id_of(&active) {
            assert_eq!(state, "active", "an active job is left to finish");
        } else {
            assert_eq!(state, "cancelled");
            assert_eq!(state_of(&mut c, job_id), "cancelled");
        }
    }
    assert_eq!(cancelled["steps"][1]["state"], "cancelled");
    fetch_none(&mut w, "default");
    w.ack(&id_of(&active), Some(&json!("done anyway")))
        .expect("ACK");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "cancelled");
    assert_eq!(
        pick(&wf["metadata"], &["completed_count", "failed_count"]),
        json!([1, 0])
    );
    fetch_none(&mut w, "default");
    assert!(get(&mut c, &id)["steps"][1]["job_id"].is_null());

    let (code, message) = error_of(&mut c, &format!("WORKFLOW CANCEL {id}"));
    assert_eq!(code, "INVALID_STATE_TRANSITION");
    assert!(
        message.contains("already in terminal state 'cancelled'"),
        "{message}"
    );
    assert_eq!(error_of(&mut c, "WORKFLOW CANCEL nope").0, "NOT_FOUND");
    assert_eq!(error_of(&mut c, "WORKFLOW GET nope").0, "NOT_FOUND");
    let kinds: Vec<String> = events_of(&srv, &id).into_iter().map(|e| e.0).collect();
    assert!(kinds.contains(&"workflow.cancelled".to_string()));
    assert!(!kinds.contains(&"workflow.failed".to_string()));

    // A finished workflow cannot be cancelled either.
    let done = wf_id(&create(
        &mut c,
        &json!({"type": "group", "jobs": [j("q.x")]}),
    ));
    let x = fetch_one(&mut w, "default");
    w.ack(&id_of(&x), None).expect("ACK");
    let (code, message) = error_of(&mut c, &format!("WORKFLOW CANCEL {done}"));
    assert_eq!(code, "INVALID_STATE_TRANSITION");
    assert!(message.contains("'completed'"));
}

#[test]
fn http_endpoints() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let addr = srv.http_addr.clone();
    let def = json!({"type": "chain", "name": "order-processing", "steps": [
        j("order.validate"), j("payment.charge")]});
    let (status, headers, body) = http(&addr, "POST", "/ojs/v1/workflows", Some(&def.to_string()));
    assert_eq!(status, 201, "{body}");
    let wf = &body["workflow"];
    let id = wf_id(wf);
    let location = headers
        .iter()
        .find(|(k, _)| k == "location")
        .map(|(_, v)| v.clone());
    assert_eq!(location, Some(format!("/ojs/v1/workflows/{id}")));
    assert_eq!(
        pick(wf, &["type", "name", "state"]),
        // Over HTTP a workflow is `running` from creation (PROTOCOL.md §14 reading 13).
        json!(["chain", "order-processing", "running"])
    );
    assert_eq!(wf["steps"][0]["state"], "pending");
    assert_eq!(wf["steps"][1]["job_id"], Value::Null);

    let (status, _, body) = http(&addr, "GET", &format!("/ojs/v1/workflows/{id}"), None);
    assert_eq!(status, 200);
    assert_eq!(body["workflow"]["id"], id.as_str());
    assert_eq!(body["workflow"]["metadata"]["job_count"], 2);

    let (status, _, body) = http(&addr, "GET", "/ojs/v1/workflows/wf_nonexistent", None);
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    assert_eq!(
        body["error"]["message"],
        "workflow wf_nonexistent not found"
    );

    let bad = json!({"type": "chain", "steps": [], "name": 3});
    let (status, _, body) = http(&addr, "POST", "/ojs/v1/workflows", Some(&bad.to_string()));
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_workflow");
    assert_eq!(body["error"]["message"], "Workflow validation failed");
    assert_eq!(
        body["error"]["details"]["validation_errors"],
        json!([
            {"path": "$.name", "message": "name must be a string of at most 255 characters"},
            {"path": "$.steps", "message": "steps array must contain at least one element"}
        ])
    );
    let (status, _, body) = http(&addr, "POST", "/ojs/v1/workflows", Some("{oops"));
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_request");

    let (status, _, body) = http(&addr, "DELETE", &format!("/ojs/v1/workflows/{id}"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["workflow"]["state"], "cancelled");
    assert!(body["workflow"]["metadata"]["cancelled_at"].is_string());
    assert_eq!(body["workflow"]["metadata"]["completed_count"], 0);
    let (status, _, body) = http(&addr, "DELETE", &format!("/ojs/v1/workflows/{id}"), None);
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "conflict");
    let (status, _, _) = http(&addr, "DELETE", "/ojs/v1/workflows/wf_nonexistent", None);
    assert_eq!(status, 404);

    // A client-chosen id is used, and taken only once.
    let named = json!({"type": "group", "id": "wf_http-1", "jobs": [j("a.b")]});
    let (status, _, body) = http(&addr, "POST", "/ojs/v1/workflows", Some(&named.to_string()));
    assert_eq!(
        (status, body["workflow"]["id"].clone()),
        (201, json!("wf_http-1"))
    );
    let (status, _, body) = http(&addr, "POST", "/ojs/v1/workflows", Some(&named.to_string()));
    assert_eq!(status, 409, "{body}");
    // TCP and HTTP see the same workflow.
    let mut c = srv.client();
    assert_eq!(get(&mut c, "wf_http-1")["jobs"][0]["type"], "a.b");
}

#[test]
fn a_crash_mid_chain_resumes_where_it_stopped() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let def =
        json!({"type": "chain", "id": "wf-crash", "steps": [j("c.one"), j("c.two"), j("c.three")]});
    create(&mut c, &def);
    let mut w = srv.worker("w1");
    let one = fetch_one(&mut w, "default");
    w.ack(&id_of(&one), Some(&json!({"one": 1}))).expect("ACK");
    srv.kill9();
    srv.restart();

    let mut c = srv.client();
    let wf = get(&mut c, "wf-crash");
    assert_eq!(wf["state"], "running");
    assert_eq!(wf["steps"][0]["state"], "completed");
    assert_eq!(wf["steps"][1]["state"], "pending");
    let mut w = srv.worker("w1");
    let two = fetch_one(&mut w, "default");
    assert_eq!(two["type"], "c.two");
    assert_eq!(two["parent_results"], json!({"0": {"one": 1}}));
    w.ack(&id_of(&two), Some(&json!({"two": 2}))).expect("ACK");
    let three = fetch_one(&mut w, "default");
    // A FETCH reply leaves before its claim is on disk (PROTOCOL.md §4.1); the worker's
    // heartbeat is answered only once everything before it is, the claim included.
    w.call(r#"BEAT {"wid":"w1"}"#).expect("BEAT");
    // Crash while step three is being worked on: it comes back after the restart.
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let mut w = srv.worker("w2");
    let again = fetch_one(&mut w, "default");
    assert_eq!(id_of(&again), id_of(&three));
    assert_eq!(again["attempt"], 2);
    assert_eq!(
        again["parent_results"],
        json!({"0": {"one": 1}, "1": {"two": 2}})
    );
    w.ack(&id_of(&again), None).expect("ACK");
    fetch_none(&mut w, "default");
    let wf = get(&mut c, "wf-crash");
    assert_eq!(wf["state"], "completed");
    assert_eq!(wf["metadata"]["completed_count"], 3);
    let kinds: Vec<String> = events_of(&srv, "wf-crash")
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "workflow.step_completed")
            .count(),
        3
    );
    assert_eq!(kinds.iter().filter(|k| *k == "workflow.started").count(), 1);
}

#[test]
fn a_crash_after_the_last_batch_job_keeps_exactly_one_callback() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let def = json!({"type": "batch", "id": "wf-batch-crash",
        "jobs": [j("b.one"), j("b.two"), j("b.three")],
        "callbacks": {"on_complete": {"type": "b.done", "args": [], "options": {"queue": "cb"}}}});
    create(&mut c, &def);
    let mut w = srv.worker("w1");
    let jobs = w.fetch_many(&["default"], 3).expect("FETCH");
    w.ack(&id_of(&jobs[0]), Some(&json!(0))).expect("ACK");
    w.ack(&id_of(&jobs[1]), Some(&json!(1))).expect("ACK");
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    assert_eq!(get(&mut c, "wf-batch-crash")["state"], "running");
    let mut w = srv.worker("w1");
    // The third job was active at the crash and is available again.
    let last = fetch_one(&mut w, "default");
    assert_eq!(id_of(&last), id_of(&jobs[2]));
    w.ack(&id_of(&last), Some(&json!(2))).expect("ACK");
    // The ACK's reply means the callback is on disk with it; crash right after.
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let info = c.info().expect("INFO");
    assert_eq!(
        info["queues"]["cb"]["available"], 1,
        "{}",
        info["queues"]["cb"]
    );
    let wf = get(&mut c, "wf-batch-crash");
    assert_eq!(wf["callbacks"]["on_complete"]["state"], "pending");
    let mut w = srv.worker("w1");
    let cb = fetch_one(&mut w, "cb");
    assert_eq!(cb["parent_results"], json!({"0": 0, "1": 1, "2": 2}));
    assert_eq!(
        id_of(&cb),
        wf["callbacks"]["on_complete"]["job_id"].as_str().unwrap()
    );
    w.ack(&id_of(&cb), None).expect("ACK");
    fetch_none(&mut w, "cb");
    assert_eq!(get(&mut c, "wf-batch-crash")["state"], "completed");
    let fired = events_of(&srv, "wf-batch-crash")
        .into_iter()
        .filter(|e| e.0 == "workflow.callback_fired")
        .count();
    assert_eq!(fired, 1);
}

#[test]
fn purging_a_waiting_workflow_job_fails_its_workflow_instead_of_stalling_it() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let def = json!({"type": "group", "jobs": [
        {"type": "p.one", "args": [], "options": {"queue": "purged"}},
        {"type": "p.two", "args": [], "options": {"queue": "kept"}}]});
    let id = wf_id(&create(&mut c, &def));
    let purged = call_json(
        &mut c,
        r#"QUEUE PURGE purged {"states": ["available"], "confirm": true}"#,
    );
    assert_eq!(purged["purged_count"], 1);
    let mut w = srv.worker("w1");
    let two = fetch_one(&mut w, "kept");
    w.ack(&id_of(&two), None).expect("ACK");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "failed");
    assert_eq!(wf["jobs"][0]["state"], "failed");
    assert_eq!(wf["metadata"]["error"]["errors"][0]["code"], "deleted");
}

#[test]
fn a_job_of_a_cancelled_workflow_is_not_retried_when_it_fails() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let retried = json!({"type": "step.one", "args": [],
        "options": {"retry": {"max_attempts": 5, "jitter": false}}});
    let def = json!({"type": "chain", "steps": [retried, j("step.two")]});
    let id = wf_id(&create(&mut c, &def));
    let active = fetch_one(&mut w, "default");
    let cancelled = call_json(&mut c, &format!("WORKFLOW CANCEL {id}"));
    assert_eq!(cancelled["state"], "cancelled");
    w.fail(&id_of(&active), "boom", "failed after the cancel", &[])
        .expect("FAIL");
    // With 4 attempts left it would be retryable; the cancelled workflow stops that.
    assert_eq!(state_of(&mut c, &id_of(&active)), "discarded");
    assert_eq!(get(&mut c, &id)["state"], "cancelled");
}

#[test]
fn workflows_are_listed_newest_first_over_tcp_and_http() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut ids = Vec::new();
    for n in 0..3 {
        let def = json!({"type": "chain", "name": format!("wf-{n}"), "steps": [j("a.b")]});
        ids.push(wf_id(&create(&mut c, &def)));
        advance(&mut c, 1.0);
    }
    let cancelled = call_json(&mut c, &format!("WORKFLOW CANCEL {}", ids[1]));
    assert_eq!(cancelled["state"], "cancelled");

    let page = call_json(&mut c, "WORKFLOW LIST");
    assert_eq!(page["total"], 3);
    let listed: Vec<&str> = page["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [&ids[2], &ids[1], &ids[0]]);
    assert_eq!(
        pick(&page["workflows"][0], &["type", "name", "job_count"]),
        json!(["chain", "wf-2", 1])
    );

    let page = call_json(&mut c, r#"WORKFLOW LIST {"state":"cancelled"}"#);
    assert_eq!(page["total"], 1);
    assert_eq!(page["workflows"][0]["id"], ids[1].as_str());
    let page = call_json(&mut c, r#"WORKFLOW LIST {"limit":1,"offset":1}"#);
    assert_eq!(
        (page["total"].clone(), page["workflows"][0]["id"].clone()),
        (json!(3), json!(ids[1]))
    );
    assert_eq!(
        error_of(&mut c, r#"WORKFLOW LIST {"state":"nope"}"#).0,
        "MALFORMED_COMMAND"
    );
    assert_eq!(
        error_of(&mut c, r#"WORKFLOW LIST {"bogus":1}"#).0,
        "MALFORMED_COMMAND"
    );

    let addr = srv.http_addr.clone();
    let (status, _, body) = http(
        &addr,
        "GET",
        "/ojs/v1/workflows?state=pending&limit=5",
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], 2);
    assert_eq!(body["workflows"][0]["id"], ids[2].as_str());
    let (status, _, body) = http(&addr, "GET", "/ojs/v1/workflows?limit=x", None);
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
}
