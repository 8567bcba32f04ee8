//! Workflows end to end (ojs-workflows §4-§12): the four complete examples of §12, failure
//! propagation, nesting, and exactly-once callbacks under many concurrent workers. Jobs
//! are fetched and settled over real sockets, by hand where order matters and by the
//! client library's worker where concurrency does.

mod common;
#[path = "workflow_support/mod.rs"]
mod support;

use common::*;
use ojs_client::JobOutcome;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use support::*;

/// §12.1 as written.
fn order_chain() -> Value {
    json!({"type": "chain", "id": "wf_019539a4-chain-example", "name": "order-processing",
        "steps": [
            {"type": "order.validate", "args": [{"order_id": "ord_123"}],
             "options": {"queue": "orders",
                "retry": {"max_attempts": 3, "backoff": "exponential", "base_delay_ms": 1000}}},
            {"type": "payment.charge", "args": [],
             "options": {"queue": "payments", "timeout_ms": 30000,
                "retry": {"max_attempts": 5, "backoff": "exponential", "base_delay_ms": 2000}}},
            {"type": "inventory.reserve", "args": [],
             "options": {"queue": "inventory", "retry": {"max_attempts": 3}}},
            {"type": "notification.send", "args": [],
             "options": {"queue": "notifications", "retry": {"max_attempts": 2}}}]})
}

const ORDER_QUEUES: [&str; 4] = ["orders", "payments", "inventory", "notifications"];

fn fetch_any(w: &mut ojs_client::Client, queues: &[&str]) -> Value {
    w.fetch(queues)
        .expect("FETCH")
        .unwrap_or_else(|| panic!("expected a job from {queues:?}"))
}

#[test]
fn chain_order_processing_runs_one_step_at_a_time() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let created = create(&mut c, &order_chain());
    assert_eq!(created["id"], "wf_019539a4-chain-example");
    assert_eq!(
        pick(&created, &["type", "name", "state"]),
        json!(["chain", "order-processing", "pending"])
    );
    let steps = created["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    assert_eq!(
        pick(&steps[0], &["index", "type", "state"]),
        json!([0, "order.validate", "pending"])
    );
    assert!(steps[0]["job_id"].is_string());
    for (i, s) in steps.iter().enumerate().skip(1) {
        assert_eq!(
            pick(s, &["index", "state", "job_id"]),
            json!([i, "waiting", null])
        );
    }
    let meta = &created["metadata"];
    assert_eq!(
        pick(meta, &["job_count", "completed_count", "failed_count"]),
        json!([4, 0, 0])
    );
    assert!(meta["created_at"].is_string() && meta.get("started_at").is_none());

    let results = [
        json!({"order_id": "ord_123", "total": 99.99, "currency": "USD", "items": 3}),
        json!({"charge_id": "ch_abc123", "amount": 99.99}),
        json!({"reservation_id": "res_xyz", "items_reserved": 3}),
        json!({"notification_id": "notif_001", "channel": "email"}),
    ];
    let types = [
        "order.validate",
        "payment.charge",
        "inventory.reserve",
        "notification.send",
    ];
    let mut expected_parents = serde_json::Map::new();
    for (i, result) in results.iter().enumerate() {
        // Every queue is offered, yet only the current step is there to take.
        let job = fetch_any(&mut w, &ORDER_QUEUES);
        assert_eq!(job["type"], types[i]);
        assert_eq!(job["queue"], ORDER_QUEUES[i]);
        assert_eq!(job["workflow_id"], "wf_019539a4-chain-example");
        assert_eq!(job["workflow_step"], i.to_string());
        assert_eq!(
            job["parent_results"],
            Value::Object(expected_parents.clone())
        );
        if i == 0 {
            assert_eq!(job["args"], json!([{"order_id": "ord_123"}]));
            assert_eq!(job["retry"]["max_attempts"], 3);
            assert_eq!(job["retry"]["initial_interval"], "PT1S");
            let running = get(&mut c, "wf_019539a4-chain-example");
            assert_eq!(running["state"], "running");
            assert!(running["metadata"]["started_at"].is_string());
            assert_eq!(running["steps"][0]["state"], "active");
            assert_eq!(running["steps"][0]["job_id"], job["id"]);
            assert_eq!(running["steps"][1]["state"], "waiting");
        }
        if i == 1 {
            assert_eq!(job["timeout"], 30);
            assert_eq!(job["retry"]["max_attempts"], 5);
        }
        w.ack(&id_of(&job), Some(result)).expect("ACK");
        expected_parents.insert(i.to_string(), result.clone());
    }
    fetch_none(&mut w, "notifications");
    let done = get(&mut c, "wf_019539a4-chain-example");
    assert_eq!(done["state"], "completed");
    assert_eq!(
        pick(
            &done["metadata"],
            &["job_count", "completed_count", "failed_count"]
        ),
        json!([4, 4, 0])
    );
    assert!(done["metadata"]["completed_at"].is_string());
    assert!(done["metadata"].get("error").is_none());
    for (i, s) in done["steps"].as_array().unwrap().iter().enumerate() {
        assert_eq!(s["state"], "completed");
        assert_eq!(s["result"], results[i]);
        assert!(s["started_at"].is_string() && s["completed_at"].is_string());
    }

    let events = events_of(&srv, "wf_019539a4-chain-example");
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "workflow.created",
            "workflow.started",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.step_completed",
            "workflow.completed"
        ]
    );
    assert_eq!(events[1].1["total_steps"], 4);
    for (i, (_, d)) in events[2..6].iter().enumerate() {
        assert_eq!(d["workflow_id"], "wf_019539a4-chain-example");
        assert_eq!(d["workflow_name"], "order-processing");
        assert_eq!(d["step_id"], i.to_string());
        assert_eq!(d["step_type"], types[i]);
        assert_eq!(d["steps_remaining"], 3 - i);
        assert!(d["duration_ms"].is_i64());
    }
    assert_eq!(events[6].1["total_steps"], 4);
    assert!(events[6].1["duration_ms"].is_i64());
}

fn export_group(pdf_retry: Value) -> Value {
    json!({"type": "group", "id": "wf_019539a4-group-example", "name": "multi-format-export",
        "jobs": [
            {"type": "export.csv", "args": [{"report_id": "rpt_456"}],
             "options": {"queue": "exports", "timeout_ms": 60000}},
            {"type": "export.pdf", "args": [{"report_id": "rpt_456"}],
             "options": {"queue": "exports", "timeout_ms": 120000, "retry": pdf_retry}},
            {"type": "export.xlsx", "args": [{"report_id": "rpt_456"}],
             "options": {"queue": "exports", "timeout_ms": 90000}}]})
}

fn export_result(job: &Value) -> Value {
    let ext = job["type"].as_str().unwrap().trim_start_matches("export.");
    json!({"path": format!("s3://exports/rpt_456.{ext}"), "size_bytes": 1048576})
}

#[test]
fn group_multi_format_export_enqueues_everything_at_once() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    create(&mut c, &export_group(Value::Null));
    let jobs = w.fetch_many(&["exports"], 10).expect("FETCH");
    let mut types: Vec<&str> = jobs.iter().map(|j| j["type"].as_str().unwrap()).collect();
    types.sort();
    assert_eq!(types, ["export.csv", "export.pdf", "export.xlsx"]);
    let timeouts: HashMap<&str, &Value> = jobs
        .iter()
        .map(|j| (j["type"].as_str().unwrap(), &j["timeout"]))
        .collect();
    assert_eq!(timeouts["export.pdf"], 120);
    assert_eq!(timeouts["export.xlsx"], 90);
    for j in &jobs {
        assert_eq!(j["parent_results"], json!({}));
        w.ack(&id_of(j), Some(&export_result(j))).expect("ACK");
    }
    let done = get(&mut c, "wf_019539a4-group-example");
    assert_eq!(done["state"], "completed");
    assert_eq!(
        done["jobs"][1]["result"]["path"],
        "s3://exports/rpt_456.pdf"
    );
    assert_eq!(done["metadata"]["completed_count"], 3);
}

#[test]
fn group_with_one_failure_finishes_the_others_then_fails() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let id = wf_id(&create(&mut c, &export_group(json!({"max_attempts": 2}))));
    let jobs = w.fetch_many(&["exports"], 10).expect("FETCH");
    let by_type: HashMap<String, Value> = jobs
        .iter()
        .map(|j| (j["type"].as_str().unwrap().to_string(), j.clone()))
        .collect();
    let pdf = id_of(&by_type["export.pdf"]);
    // A failure with an attempt left is not a workflow failure (§9.1).
    w.fail(&pdf, "render.error", "font missing", &[])
        .expect("FAIL");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "running");
    assert_eq!(wf["metadata"]["failed_count"], 0);
    assert_eq!(
        pick(&wf["jobs"][1], &["state", "job_state", "attempt"]),
        json!(["pending", "retryable", 1])
    );
    advance(&mut c, 5.0); // past the retry delay, well within the visibility timeouts
    let again = fetch_one(&mut w, "exports");
    assert_eq!(id_of(&again), pdf);
    w.fail(&pdf, "render.error", "font still missing", &[])
        .expect("FAIL");
    // The siblings keep going; the group waits for them.
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "running");
    assert_eq!(wf["jobs"][1]["state"], "failed");
    assert_eq!(wf["metadata"]["failed_count"], 1);
    for t in ["export.csv", "export.xlsx"] {
        let j = &by_type[t];
        w.ack(&id_of(j), Some(&export_result(j))).expect("ACK");
    }
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "failed");
    assert_eq!(
        pick(&wf["metadata"], &["completed_count", "failed_count"]),
        json!([2, 1])
    );
    let report = &wf["metadata"]["error"];
    assert_eq!(report["failed_job_ids"], json!([pdf]));
    assert_eq!(
        pick(
            &report["errors"][0],
            &["job_id", "code", "message", "attempt"]
        ),
        json!([pdf, "render.error", "font still missing", 2])
    );
    assert!(report.get("failed_step_index").is_none(), "chains only");
    let events = events_of(&srv, &id);
    let last = events.last().unwrap();
    assert_eq!(last.0, "workflow.failed");
    assert_eq!(last.1["failed_step_id"], "1");
    assert_eq!(last.1["failed_step_type"], "export.pdf");
    assert_eq!(last.1["error"]["code"], "render.error");
    let job_events = events
        .iter()
        .filter(|e| e.0.starts_with("workflow.job_"))
        .count();
    assert_eq!(job_events, 3);
}

fn email_batch(third: Value) -> Value {
    json!({"type": "batch", "id": "wf_019539a4-batch-example", "name": "bulk-email-send",
        "jobs": [
            {"type": "email.send", "args": ["user1@example.com", "welcome"]},
            {"type": "email.send", "args": ["user2@example.com", "welcome"]},
            third],
        "callbacks": {
            "on_complete": {"type": "batch.report", "args": [], "options": {"queue": "reporting"}},
            "on_success": {"type": "batch.celebrate", "args": [], "options": {"queue": "notifications"}},
            "on_failure": {"type": "batch.alert", "args": [],
                "options": {"queue": "alerts", "retry": {"max_attempts": 5}}}}})
}

fn sent(job: &Value) -> Value {
    json!({"message_id": format!("msg_{}", job["args"][0].as_str().unwrap()), "status": "sent"})
}

#[test]
fn batch_scenario_a_all_succeed() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let third = json!({"type": "email.send", "args": ["user3@example.com", "welcome"]});
    let id = wf_id(&create(&mut c, &email_batch(third)));
    let jobs = w.fetch_many(&["default"], 10).expect("FETCH");
    assert_eq!(jobs.len(), 3);
    let mut all = serde_json::Map::new();
    for j in &jobs {
        let i = j["workflow_step"].as_str().unwrap().to_string();
        all.insert(i, sent(j));
        w.ack(&id_of(j), Some(&sent(j))).expect("ACK");
    }
    let all = Value::Object(all);
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "running", "callbacks still to run");
    assert_eq!(wf["callbacks"]["on_failure"]["state"], "skipped");
    let report = fetch_one(&mut w, "reporting");
    let celebrate = fetch_one(&mut w, "notifications");
    fetch_none(&mut w, "alerts");
    assert_eq!(report["type"], "batch.report");
    assert_eq!(report["parent_results"], all);
    assert_eq!(celebrate["parent_results"], all);
    assert_eq!(report["workflow_step"], "on_complete");
    w.ack(&id_of(&report), Some(&json!({"sent": 3})))
        .expect("ACK");
    assert_eq!(get(&mut c, &id)["state"], "running");
    w.ack(&id_of(&celebrate), None).expect("ACK");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "completed");
    assert_eq!(
        pick(
            &wf["metadata"],
            &[
                "job_count",
                "completed_count",
                "failed_count",
                "callback_count"
            ]
        ),
        json!([3, 3, 0, 3])
    );
    assert_eq!(wf["callbacks"]["on_complete"]["result"], json!({"sent": 3}));
    let fired: Vec<String> = events_of(&srv, &id)
        .into_iter()
        .filter(|e| e.0 == "workflow.callback_fired")
        .map(|e| e.1["callback"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(fired, ["on_complete", "on_success"]);
}

#[test]
fn batch_scenario_b_one_fails() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let third = json!({"type": "email.send", "args": ["user3@example.com", "welcome"],
        "options": {"retry": {"max_attempts": 1}}});
    let id = wf_id(&create(&mut c, &email_batch(third)));
    let jobs = w.fetch_many(&["default"], 10).expect("FETCH");
    let mut failed_id = String::new();
    for j in &jobs {
        if j["args"][0] == "user3@example.com" {
            failed_id = id_of(j);
            w.fail(&failed_id, "smtp.bounce", "mailbox unavailable", &[])
                .expect("FAIL");
        } else {
            w.ack(&id_of(j), Some(&sent(j))).expect("ACK");
        }
    }
    let report = fetch_one(&mut w, "reporting");
    let alert = fetch_one(&mut w, "alerts");
    fetch_none(&mut w, "notifications");
    let bounced =
        json!({"error": {"code": "smtp.bounce", "message": "mailbox unavailable", "attempt": 1}});
    for cb in [&report, &alert] {
        let pr = &cb["parent_results"];
        assert_eq!(pr.as_object().unwrap().len(), 3, "all three jobs: {pr}");
        assert_eq!(pr["0"]["status"], "sent");
        assert_eq!(pr["2"], bounced);
    }
    assert_eq!(alert["retry"]["max_attempts"], 5);
    w.ack(&id_of(&report), None).expect("ACK");
    w.ack(&id_of(&alert), None).expect("ACK");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "completed", "the callbacks succeeded");
    assert_eq!(
        pick(&wf["metadata"], &["completed_count", "failed_count"]),
        json!([2, 1])
    );
    assert_eq!(
        wf["metadata"]["error"]["failed_job_ids"],
        json!([failed_id])
    );
    assert_eq!(wf["callbacks"]["on_success"]["state"], "skipped");
}

#[test]
fn a_failing_callback_fails_the_batch() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let def = json!({"type": "batch", "jobs": [job("a.b", json!([]))],
        "callbacks": {"on_success": once("batch.celebrate", "cb")}});
    let id = wf_id(&create(&mut c, &def));
    let j = fetch_one(&mut w, "default");
    w.ack(&id_of(&j), Some(&json!(1))).expect("ACK");
    let cb = fetch_one(&mut w, "cb");
    w.fail(&id_of(&cb), "oops", "callback broke", &[])
        .expect("FAIL");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "failed");
    let e = &wf["metadata"]["error"]["errors"][0];
    assert_eq!(
        pick(e, &["callback", "code"]),
        json!(["on_success", "oops"])
    );
}

#[test]
fn composed_etl_pipeline_fans_out_and_in() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let def = json!({"type": "chain", "id": "wf_019539a4-composed-example", "name": "etl-with-fanout",
        "steps": [
            {"type": "data.extract", "args": [{"source": "api.example.com/v2/records", "date": "2026-02-12"}]},
            {"type": "group", "id": "wf_019539a4-transform-group", "name": "parallel-transforms",
             "jobs": [
                {"type": "transform.normalize", "args": [{"schema": "v2"}]},
                {"type": "transform.enrich", "args": [{"lookup_table": "geo_ip"}]},
                {"type": "transform.deduplicate", "args": [{"key": "email"}]}]},
            {"type": "data.load", "args": [{"destination": "warehouse", "table": "events_2026_02_12"}]}]});
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = seen.clone();
    let handler: Handler = Arc::new(move |job| {
        log.lock().unwrap().push(job.clone());
        let t = job["type"].as_str().unwrap_or("");
        JobOutcome::Ack(Some(json!({"by": t})))
    });
    let types = [
        "data.extract",
        "transform.normalize",
        "transform.enrich",
        "transform.deduplicate",
        "data.load",
    ];
    let worker = Running::start(&srv, "etl", &["default"], 3, &types, handler);
    let id = wf_id(&create(&mut c, &def));
    let wf = wait_state(&mut c, &id, "completed");
    worker.stop();
    let seen = seen.lock().unwrap();
    let of = |t: &str| seen.iter().find(|j| j["type"] == t).unwrap().clone();
    let extract = json!({"by": "data.extract"});
    for t in &types[1..4] {
        assert_eq!(of(t)["parent_results"], json!({"0": extract}), "{t}");
    }
    assert_eq!(
        of("data.load")["parent_results"],
        json!({"0": extract, "1": {
            "0": {"by": "transform.normalize"},
            "1": {"by": "transform.enrich"},
            "2": {"by": "transform.deduplicate"}}})
    );
    // The load step starts only after every transform finished.
    let pos = |t: &str| seen.iter().position(|j| j["type"] == t).unwrap();
    assert!(types[1..4].iter().all(|t| pos(t) < pos("data.load")));
    assert_eq!(wf["steps"][1]["type"], "group");
    assert_eq!(wf["steps"][1]["id"], "wf_019539a4-transform-group");
    assert_eq!(wf["steps"][1]["state"], "completed");
    assert_eq!(wf["steps"][1]["jobs"][2]["path"], "1.2");
    assert_eq!(wf["metadata"]["completed_count"], 5);
}

#[test]
fn nested_chain_group_chain_three_levels() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let def = json!({"type": "chain", "name": "nested", "steps": [
        job("n.prep", json!([])),
        {"type": "group", "jobs": [
            {"type": "chain", "steps": [job("n.a1", json!([])), job("n.a2", json!([]))]},
            {"type": "chain", "steps": [job("n.b1", json!([])), job("n.b2", json!([]))]}]},
        job("n.finish", json!([]))]});
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = seen.clone();
    let handler: Handler = Arc::new(move |job| {
        log.lock().unwrap().push(job.clone());
        JobOutcome::Ack(Some(job["type"].clone()))
    });
    let types = ["n.prep", "n.a1", "n.a2", "n.b1", "n.b2", "n.finish"];
    let worker = Running::start(&srv, "nest", &["default"], 4, &types, handler);
    let id = wf_id(&create(&mut c, &def));
    let wf = wait_state(&mut c, &id, "completed");
    worker.stop();
    let seen = seen.lock().unwrap();
    let of = |t: &str| seen.iter().find(|j| j["type"] == t).unwrap().clone();
    assert_eq!(of("n.a1")["parent_results"], json!({"0": "n.prep"}));
    assert_eq!(of("n.b1")["parent_results"], json!({"0": "n.prep"}));
    assert_eq!(of("n.a2")["parent_results"], json!({"0": "n.a1"}));
    assert_eq!(of("n.b2")["workflow_step"], "1.1.1");
    assert_eq!(
        of("n.finish")["parent_results"],
        json!({"0": "n.prep", "1": {"0": {"0": "n.a1", "1": "n.a2"}, "1": {"0": "n.b1", "1": "n.b2"}}})
    );
    let pos = |t: &str| seen.iter().position(|j| j["type"] == t).unwrap();
    assert!(pos("n.a1") < pos("n.a2") && pos("n.b1") < pos("n.b2"));
    assert!(pos("n.a2") < pos("n.finish") && pos("n.b2") < pos("n.finish"));
    assert_eq!(wf["steps"][1]["jobs"][1]["type"], "chain");
    assert_eq!(wf["steps"][1]["jobs"][1]["steps"][1]["state"], "completed");
    assert_eq!(wf["metadata"]["completed_count"], 6);
}

#[test]
fn chain_failure_midway_cancels_the_later_steps() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    let def = json!({"type": "chain", "name": "fragile", "steps": [
        once("s.one", "s1"), once("s.two", "s2"), once("s.three", "s3"), once("s.four", "s4")]});
    let id = wf_id(&create(&mut c, &def));
    let one = fetch_one(&mut w, "s1");
    w.ack(&id_of(&one), Some(&json!("ok"))).expect("ACK");
    let two = fetch_one(&mut w, "s2");
    w.fail(&id_of(&two), "payment.declined", "card declined", &[])
        .expect("FAIL");
    let wf = get(&mut c, &id);
    assert_eq!(wf["state"], "failed");
    let states: Vec<&Value> = wf["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["state"])
        .collect();
    assert_eq!(
        states,
        [
            &json!("completed"),
            &json!("failed"),
            &json!("cancelled"),
            &json!("cancelled")
        ]
    );
    assert_eq!(wf["steps"][2]["job_id"], Value::Null);
    let report = &wf["metadata"]["error"];
    assert_eq!(report["failed_step_index"], 1);
    assert_eq!(report["failed_job_ids"], json!([id_of(&two)]));
    assert_eq!(
        pick(&report["errors"][0], &["code", "message", "attempt"]),
        json!(["payment.declined", "card declined", 1])
    );
    assert_eq!(
        pick(&wf["metadata"], &["completed_count", "failed_count"]),
        json!([1, 1])
    );
    for q in ["s3", "s4"] {
        fetch_none(&mut w, q);
    }
    let kinds: Vec<String> = events_of(&srv, &id).into_iter().map(|e| e.0).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            "workflow.step_failed".to_string(),
            "workflow.failed".to_string()
        ]
    );
}

#[test]
fn a_workflow_job_cancelled_by_hand_fails_its_chain() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let def = json!({"type": "chain", "steps": [job("a.b", json!([])), job("a.c", json!([]))]});
    let wf = create(&mut c, &def);
    let first = wf["steps"][0]["job_id"].as_str().unwrap().to_string();
    c.cancel(&first).expect("CANCEL");
    let wf = get(&mut c, &wf_id(&wf));
    assert_eq!(wf["state"], "failed");
    assert_eq!(wf["steps"][0]["state"], "cancelled");
    assert_eq!(wf["steps"][1]["state"], "cancelled");
    assert_eq!(wf["metadata"]["error"]["errors"][0]["code"], "cancelled");
}

/// Many workers finishing the last jobs of two batches at the same moment: each callback
/// job must exist exactly once.
#[test]
fn callbacks_fire_exactly_once_under_concurrent_workers() {
    if common::store_missing() {
        return;
    }
    const JOBS: usize = 192; // two batches of 192: 24 rounds of 16
    const THREADS: usize = 16;
    let srv = Server::start();
    let mut c = srv.client();
    let batch = |name: &str, fail_every: Option<usize>| {
        let jobs: Vec<Value> = (0..JOBS)
            .map(|i| {
                let fail = fail_every.is_some_and(|n| i % n == 0);
                json!({"type": "bulk.item", "args": [name, i, fail],
                    "options": {"queue": "bulk", "retry": {"max_attempts": 1}}})
            })
            .collect();
        let cb = |t: &str| json!({"type": t, "args": [name], "options": {"queue": "cb"}});
        json!({"type": "batch", "name": name, "jobs": jobs, "callbacks": {
            "on_complete": cb("cb.complete"), "on_success": cb("cb.success"),
            "on_failure": cb("cb.failure")}})
    };
    let good = wf_id(&create(&mut c, &batch("good", None)));
    let mixed = wf_id(&create(&mut c, &batch("mixed", Some(10))));

    let gate = Arc::new(Gate::new(THREADS));
    let g = gate.clone();
    let items: Handler = Arc::new(move |job| {
        // Every round of 16 ACK/FAILs reaches the broker together, the last one included.
        g.wait();
        if job["args"][2] == true {
            JobOutcome::fail("bulk.error", "planned failure")
        } else {
            JobOutcome::Ack(Some(json!(job["args"][1])))
        }
    });
    let calls: Arc<Mutex<HashMap<(String, String), usize>>> = Arc::default();
    let log = calls.clone();
    let callbacks: Handler = Arc::new(move |job| {
        let key = (
            job["args"][0].as_str().unwrap().to_string(),
            job["type"].as_str().unwrap().to_string(),
        );
        assert_eq!(
            job["parent_results"].as_object().map(|m| m.len()),
            Some(JOBS)
        );
        *log.lock().unwrap().entry(key).or_default() += 1;
        JobOutcome::ok()
    });
    let bulk = Running::start(&srv, "bulk", &["bulk"], THREADS, &["bulk.item"], items);
    let cbw = Running::start(
        &srv,
        "callbacks",
        &["cb"],
        2,
        &["cb.complete", "cb.success", "cb.failure"],
        callbacks,
    );
    let a = wait_state(&mut c, &good, "completed");
    let b = wait_state(&mut c, &mixed, "completed");
    bulk.stop();
    cbw.stop();

    let calls = calls.lock().unwrap().clone();
    let expect: HashMap<(String, String), usize> = [
        (("good", "cb.complete"), 1),
        (("good", "cb.success"), 1),
        (("mixed", "cb.complete"), 1),
        (("mixed", "cb.failure"), 1),
    ]
    .into_iter()
    .map(|((w, t), n)| ((w.to_string(), t.to_string()), n))
    .collect();
    assert_eq!(calls, expect);
    // The broker holds exactly four callback jobs, all completed.
    let info = c.info().expect("INFO");
    assert_eq!(
        info["queues"]["cb"]["completed"], 4,
        "{}",
        info["queues"]["cb"]
    );
    assert_eq!(
        info["queues"]["bulk"]["completed"],
        2 * JOBS - JOBS.div_ceil(10)
    );
    assert_eq!(
        pick(&a["metadata"], &["completed_count", "failed_count"]),
        json!([JOBS, 0])
    );
    let failures = JOBS.div_ceil(10);
    assert_eq!(
        pick(&b["metadata"], &["completed_count", "failed_count"]),
        json!([JOBS - failures, failures])
    );
    assert_eq!(b["callbacks"]["on_success"]["state"], "skipped");
    for wf in [&a, &b] {
        let fired = events_of(&srv, &wf_id(wf))
            .into_iter()
            .filter(|e| e.0 == "workflow.callback_fired")
            .count();
        assert_eq!(fired, 2);
    }
}
