//! Workflows in the HTTP binding's shape (ojs-http-binding §14, what the OJS SDKs send):
//! `steps` with ids and `depends_on`, run as a general DAG. Fan-out and fan-in with real
//! workers, a chain-shaped DAG, a failure that stops only its dependents, validation paths,
//! a SIGKILL mid-DAG, and cancelling (PROTOCOL §12.8).

mod common;
#[path = "workflow_support/mod.rs"]
mod support;

use common::*;
use ojs_client::JobOutcome;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use support::*;

fn step(id: &str, deps: &[&str]) -> Value {
    json!({"id": id, "type": format!("dag.{id}"), "args": [id], "depends_on": deps})
}

/// a → (b, c) → d, in queue `q` through the workflow's default options.
fn diamond(q: &str) -> Value {
    json!({"name": "diamond", "options": {"queue": q}, "steps": [
        step("a", &[]), step("b", &["a"]), step("c", &["a"]), step("d", &["b", "c"])]})
}

fn post(srv: &Server, def: &Value) -> (u16, Value) {
    let (status, _, body) = http(
        &srv.http_addr,
        "POST",
        "/ojs/v1/workflows",
        Some(&def.to_string()),
    );
    (status, body)
}

fn step_of<'a>(wf: &'a Value, id: &str) -> &'a Value {
    wf["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == id))
        .unwrap_or_else(|| panic!("no step {id} in {wf}"))
}

fn count(events: &[(String, Value)], kind: &str) -> usize {
    events.iter().filter(|e| e.0 == kind).count()
}

#[test]
fn the_binding_example_is_accepted_and_answered_in_its_shape() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let def = json!({"name": "onboarding-pipeline", "steps": [
        {"id": "send-welcome", "type": "email.send",
         "args": ["user@example.com", "welcome", {"locale": "en"}], "depends_on": []},
        {"id": "create-profile", "type": "user.create_profile",
         "args": ["user@example.com", {"plan": "free"}], "depends_on": []},
        {"id": "send-confirmation", "type": "email.send",
         "args": ["user@example.com", "profile_ready", {"locale": "en"}],
         "depends_on": ["send-welcome", "create-profile"]}],
        "options": {"queue": "email"}});
    let (status, headers, body) = http(
        &srv.http_addr,
        "POST",
        "/ojs/v1/workflows",
        Some(&def.to_string()),
    );
    assert_eq!(status, 201, "{body}");
    let wf = &body["workflow"];
    let id = wf_id(wf);
    assert!(headers.contains(&("location".into(), format!("/ojs/v1/workflows/{id}"))));
    assert_eq!(
        pick(wf, &["name", "state"]),
        json!(["onboarding-pipeline", "running"]),
        "the binding's example: running from creation over HTTP (PROTOCOL.md §14 reading 13)"
    );
    assert!(wf["created_at"].is_string());
    for s in ["send-welcome", "create-profile"] {
        let st = step_of(wf, s);
        assert_eq!(pick(st, &["state", "depends_on"]), json!(["available", []]));
        assert!(st["job_id"].is_string());
    }
    let last = step_of(wf, "send-confirmation");
    assert_eq!(
        pick(last, &["type", "state", "job_id", "depends_on"]),
        json!([
            "email.send",
            "pending",
            null,
            ["send-welcome", "create-profile"]
        ])
    );

    let mut w = srv.worker("w1");
    let first = fetch_one(&mut w, "email");
    let second = fetch_one(&mut w, "email");
    fetch_none(&mut w, "email");
    let (status, _, body) = http(
        &srv.http_addr,
        "GET",
        &format!("/ojs/v1/workflows/{id}"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(body["workflow"]["state"], "running");
    assert_eq!(
        step_of(&body["workflow"], "send-welcome")["state"],
        "active"
    );
    w.ack(&id_of(&first), Some(&json!({"message_id": "m1"})))
        .expect("ACK");
    let (_, _, body) = http(
        &srv.http_addr,
        "GET",
        &format!("/ojs/v1/workflows/{id}"),
        None,
    );
    let done = step_of(&body["workflow"], first["workflow_step"].as_str().unwrap());
    assert_eq!(done["state"], "completed");
    assert_eq!(done["result"], json!({"message_id": "m1"}));
    assert!(done["started_at"].is_string() && done["completed_at"].is_string());
    // Not before both are done.
    fetch_none(&mut w, "email");
    w.ack(&id_of(&second), Some(&json!({"profile": 7})))
        .expect("ACK");
    let last = fetch_one(&mut w, "email");
    assert_eq!(last["workflow_step"], "send-confirmation");
    let first_step = first["workflow_step"].as_str().unwrap().to_string();
    let second_step = second["workflow_step"].as_str().unwrap().to_string();
    let mut expected = serde_json::Map::new();
    expected.insert(first_step, json!({"message_id": "m1"}));
    expected.insert(second_step, json!({"profile": 7}));
    assert_eq!(last["parent_results"], Value::Object(expected));
    w.ack(&id_of(&last), None).expect("ACK");
    let mut c = srv.client();
    let tcp = wait_state(&mut c, &id, "completed");
    assert_eq!(tcp["type"], "dag");
    assert_eq!(tcp["metadata"]["completed_count"], 3);
}

#[test]
fn a_diamond_fans_out_and_in_with_real_workers() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = seen.clone();
    let handler: Handler = Arc::new(move |job: &Value| {
        log.lock().unwrap().push(job.clone());
        JobOutcome::Ack(Some(json!({"by": job["workflow_step"]})))
    });
    let types = ["dag.a", "dag.b", "dag.c", "dag.d"];
    let worker = Running::start(&srv, "dag", &["fan"], 3, &types, handler);
    let (status, body) = post(&srv, &diamond("fan"));
    assert_eq!(status, 201, "{body}");
    let id = wf_id(&body["workflow"]);
    let wf = wait_state(&mut c, &id, "completed");
    worker.stop();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "each step ran once");
    let of = |s: &str| {
        seen.iter()
            .find(|j| j["workflow_step"] == s)
            .unwrap()
            .clone()
    };
    let pos = |s: &str| seen.iter().position(|j| j["workflow_step"] == s).unwrap();
    assert!(pos("a") < pos("b") && pos("a") < pos("c"));
    assert!(pos("b") < pos("d") && pos("c") < pos("d"));
    assert_eq!(of("a")["parent_results"], json!({}));
    assert_eq!(of("b")["parent_results"], json!({"a": {"by": "a"}}));
    assert_eq!(of("c")["parent_results"], json!({"a": {"by": "a"}}));
    assert_eq!(
        of("d")["parent_results"],
        json!({"b": {"by": "b"}, "c": {"by": "c"}})
    );
    assert_eq!(of("d")["workflow_id"], id.as_str());
    assert_eq!(of("d")["args"], json!(["d"]));
    assert!(seen.iter().all(|j| j["queue"] == "fan"));
    // TCP view: ids, states, job ids and dependencies.
    for s in ["a", "b", "c", "d"] {
        let st = step_of(&wf, s);
        assert_eq!(st["state"], "completed", "{s}");
        assert_eq!(st["job_id"], of(s)["id"]);
        assert_eq!(st["result"], json!({"by": s}));
    }
    assert_eq!(step_of(&wf, "d")["depends_on"], json!(["b", "c"]));
    assert_eq!(
        pick(
            &wf["metadata"],
            &["job_count", "completed_count", "failed_count"]
        ),
        json!([4, 4, 0])
    );
    let events = events_of(&srv, &id);
    assert_eq!(count(&events, "workflow.step_completed"), 4);
    assert_eq!(count(&events, "workflow.completed"), 1);
    assert_eq!(events[0].1["workflow_type"], "dag");
}

#[test]
fn a_chain_shaped_dag_runs_one_step_at_a_time() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    // Listed out of order: the order of `steps` does not matter, the edges do.
    let def = json!({"id": "dag-line", "steps": [
        step("three", &["two"]), step("one", &[]), step("two", &["one"])]});
    let created = create(&mut c, &def);
    assert_eq!(
        pick(&created, &["id", "type", "state"]),
        json!(["dag-line", "dag", "pending"])
    );
    assert_eq!(step_of(&created, "one")["state"], "pending");
    assert_eq!(step_of(&created, "two")["state"], "waiting");
    let mut parents = json!({});
    for (i, s) in ["one", "two", "three"].iter().enumerate() {
        let job = fetch_one(&mut w, "default");
        assert_eq!(job["workflow_step"], *s);
        assert_eq!(job["parent_results"], parents);
        fetch_none(&mut w, "default");
        w.ack(&id_of(&job), Some(&json!(i))).expect("ACK");
        // Only the direct dependency's result, keyed by its step id.
        parents = json!({ *s: i });
    }
    let wf = get(&mut c, "dag-line");
    assert_eq!(wf["state"], "completed");
    let events = events_of(&srv, "dag-line");
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e.0 == "workflow.step_completed")
        .map(|e| &e.1["step_id"])
        .collect();
    assert_eq!(steps, [&json!("one"), &json!("two"), &json!("three")]);
}

#[test]
fn a_failed_step_stops_its_dependents_and_fails_the_workflow() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    // a → c → d fails with a; b → e is independent and runs to its end.
    let def = json!({"id": "dag-fail", "options": {"retry": {"max_attempts": 1}}, "steps": [
        step("a", &[]), step("b", &[]), step("c", &["a"]), step("d", &["c"]), step("e", &["b"])]});
    create(&mut c, &def);
    let a = fetch_one(&mut w, "default");
    let b = fetch_one(&mut w, "default");
    assert_eq!(
        (a["workflow_step"].as_str(), b["workflow_step"].as_str()),
        (Some("a"), Some("b"))
    );
    w.fail(&id_of(&a), "Boom", "a broke", &[]).expect("FAIL");
    let wf = get(&mut c, "dag-fail");
    assert_eq!(wf["state"], "running", "b is still running");
    assert_eq!(step_of(&wf, "a")["state"], "failed");
    for s in ["c", "d"] {
        assert_eq!(
            pick(step_of(&wf, s), &["state", "job_id"]),
            json!(["cancelled", null])
        );
    }
    w.ack(&id_of(&b), Some(&json!("b"))).expect("ACK");
    let e = fetch_one(&mut w, "default");
    assert_eq!(e["workflow_step"], "e");
    assert_eq!(e["parent_results"], json!({"b": "b"}));
    w.ack(&id_of(&e), None).expect("ACK");
    fetch_none(&mut w, "default");
    let wf = get(&mut c, "dag-fail");
    assert_eq!(wf["state"], "failed");
    assert_eq!(
        pick(&wf["metadata"], &["completed_count", "failed_count"]),
        json!([2, 1])
    );
    assert_eq!(wf["metadata"]["error"]["errors"][0]["step_id"], "a");
    let events = events_of(&srv, "dag-fail");
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e.0 == "workflow.failed")
        .map(|e| &e.1)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["failed_step_id"], "a");
    assert_eq!(failed[0]["error"]["code"], "Boom");
    assert_eq!(count(&events, "workflow.step_failed"), 1);
    // Only a, b and e were ever created.
    assert_eq!(c.info().expect("INFO")["totals"]["jobs"], 3);
}

#[test]
fn invalid_dags_are_refused_with_their_paths() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
        (
            json!({"steps": [step("a", &["b"]), step("b", &["c"]), step("c", &["a"])]}),
            vec![(
                "$.steps[0].depends_on[0]",
                r#"dependency cycle: "a" -> "b" -> "c" -> "a" (each step depends on the next)"#,
            )],
        ),
        (
            json!({"steps": [step("x", &[]), step("a", &["x", "a"])]}),
            vec![(
                "$.steps[1].depends_on[1]",
                r#"dependency cycle: "a" -> "a""#,
            )],
        ),
        (
            json!({"steps": [step("a", &[]), step("b", &["a", "zzz"])]}),
            vec![("$.steps[1].depends_on[1]", r#"unknown step id "zzz""#)],
        ),
        (
            json!({"steps": [step("a", &[]), step("a", &[])]}),
            vec![(
                "$.steps[1].id",
                r#"duplicate step id "a": $.steps[0] has it too"#,
            )],
        ),
        (
            json!({"steps": []}),
            vec![("$.steps", "steps array must contain at least one element")],
        ),
        (
            json!({"steps": [{"id": "a", "type": "Bad", "args": []},
                             {"type": "ok.type", "args": []},
                             {"id": "c", "type": "ok.type", "args": {}, "depends_on": "a"}]}),
            vec![
                ("$.steps[0].type", "type \"Bad\""),
                ("$.steps[1].id", "id is required"),
                ("$.steps[2].depends_on", "depends_on must be an array"),
                ("$.steps[2].args", "args"),
            ],
        ),
        (
            json!({"steps": [{"id": "a", "type": "chain", "steps": []}], "options": {"colour": 1}}),
            vec![
                ("$.options.colour", "unknown job option"),
                ("$.steps[0].type", "a step with depends_on is a single job"),
            ],
        ),
    ];
    for (def, wanted) in cases {
        let (code, message) = error_of(&mut c, &format!("WORKFLOW CREATE {def}"));
        assert_eq!(code, "INVALID_PAYLOAD", "{def}");
        for (path, msg) in &wanted {
            assert!(
                message.contains(&format!("{path}: {msg}")),
                "{path}: {msg} missing from {message}"
            );
        }
        let (status, body) = post(&srv, &def);
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "invalid_workflow");
        assert_eq!(body["error"]["details"]["ojs_code"], "INVALID_WORKFLOW");
        let errors = body["error"]["details"]["validation_errors"]
            .as_array()
            .unwrap();
        for (path, msg) in &wanted {
            assert!(
                errors
                    .iter()
                    .any(|e| e["path"] == *path && e["message"].as_str().unwrap().contains(msg)),
                "{path} missing from {errors:?}"
            );
        }
    }
    assert_eq!(c.info().expect("INFO")["totals"]["jobs"], 0);
}

#[test]
fn a_crash_mid_dag_completes_each_step_exactly_once() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let def = json!({"id": "dag-crash", "steps": [
        step("a", &[]), step("b", &["a"]), step("c", &["a"]), step("d", &["b", "c"])]});
    create(&mut c, &def);
    let mut w = srv.worker("w1");
    let a = fetch_one(&mut w, "default");
    w.ack(&id_of(&a), Some(&json!("ra"))).expect("ACK");
    srv.kill9();
    srv.restart();

    let mut c = srv.client();
    let wf = get(&mut c, "dag-crash");
    assert_eq!(step_of(&wf, "a")["state"], "completed");
    assert_eq!(step_of(&wf, "b")["state"], "pending");
    assert_eq!(step_of(&wf, "c")["state"], "pending");
    assert_eq!(step_of(&wf, "d")["state"], "waiting");
    let mut w = srv.worker("w1");
    let first = fetch_one(&mut w, "default");
    let second = fetch_one(&mut w, "default");
    w.ack(&id_of(&first), Some(&first["workflow_step"]))
        .expect("ACK");
    // Crash while the second branch is being worked on: it comes back after the restart.
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let mut w = srv.worker("w2");
    let again = fetch_one(&mut w, "default");
    assert_eq!(id_of(&again), id_of(&second));
    assert_eq!(again["attempt"], 2);
    assert_eq!(again["parent_results"], json!({"a": "ra"}));
    fetch_none(&mut w, "default");
    w.ack(&id_of(&again), Some(&again["workflow_step"]))
        .expect("ACK");
    let d = fetch_one(&mut w, "default");
    assert_eq!(d["workflow_step"], "d");
    assert_eq!(d["parent_results"], json!({"b": "b", "c": "c"}));
    w.ack(&id_of(&d), None).expect("ACK");
    fetch_none(&mut w, "default");
    let wf = get(&mut c, "dag-crash");
    assert_eq!(wf["state"], "completed");
    assert_eq!(wf["metadata"]["completed_count"], 4);
    let events = events_of(&srv, "dag-crash");
    for s in ["a", "b", "c", "d"] {
        let n = events
            .iter()
            .filter(|e| e.0 == "workflow.step_completed" && e.1["step_id"] == s)
            .count();
        assert_eq!(n, 1, "step {s}");
    }
    assert_eq!(count(&events, "workflow.completed"), 1);
    assert_eq!(c.info().expect("INFO")["totals"]["jobs"], 4);
}

#[test]
fn cancelling_a_dag_over_http_and_tcp() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let (_, body) = post(&srv, &diamond("default"));
    let id = wf_id(&body["workflow"]);
    let a = fetch_one(&mut w, "default");
    let (status, _, body) = http(
        &srv.http_addr,
        "DELETE",
        &format!("/ojs/v1/workflows/{id}"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let wf = &body["workflow"];
    assert_eq!(wf["state"], "cancelled");
    assert!(wf["cancelled_at"].is_string());
    assert_eq!(
        pick(wf, &["steps_cancelled", "steps_already_completed"]),
        json!([3, 0])
    );
    assert_eq!(step_of(wf, "a")["state"], "active");
    // The active step may finish; nothing after it starts.
    w.ack(&id_of(&a), None).expect("ACK");
    fetch_none(&mut w, "default");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "cancelled");
    assert_eq!(step_of(&wf, "a")["state"], "completed");
    assert_eq!(step_of(&wf, "d")["state"], "cancelled");
    let (status, _, body) = http(
        &srv.http_addr,
        "DELETE",
        &format!("/ojs/v1/workflows/{id}"),
        None,
    );
    assert_eq!((status, &body["error"]["code"]), (409, &json!("conflict")));

    // POST .../cancel, and a pending (not active) first step that is cancelled with it.
    let (_, body) = post(&srv, &diamond("other"));
    let id = wf_id(&body["workflow"]);
    let path = format!("/ojs/v1/workflows/{id}/cancel");
    let (status, _, body) = http(&srv.http_addr, "POST", &path, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["workflow"]["steps_cancelled"], 4);
    fetch_none(&mut w, "other");

    // TCP.
    let created = create(&mut c, &diamond("third"));
    let wf = call_json(&mut c, &format!("WORKFLOW CANCEL {}", wf_id(&created)));
    assert_eq!(wf["state"], "cancelled");
    assert!(wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["state"] == "cancelled"));
    let events = events_of(&srv, &wf_id(&created));
    assert_eq!(count(&events, "workflow.cancelled"), 1);
}
