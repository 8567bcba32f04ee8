//! Call shapes of the official OJS SDKs and the conformance suite, written from the
//! binding and worker-protocol documents (issue 22): `-` in job types, specversion "1.0",
//! 200 for an ignored unique duplicate, `id` in ACK/NACK replies and `completed_at` when a
//! NACK discards, heartbeats in the worker-protocol shape, and the binding's
//! dead-letter delete reply.

mod common;

use common::http::send;
use common::Server;
use serde_json::{json, Value};

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let r = send(addr, "POST", path, &body.to_string());
    (r.status, r.json())
}

fn fetch(addr: &str, queue: &str, wid: &str) -> Value {
    let (status, got) = post(
        addr,
        "/ojs/v1/workers/fetch",
        json!({"queues": [queue], "worker_id": wid, "wait_ms": 0}),
    );
    assert_eq!(status, 200, "{got}");
    got["jobs"][0].clone()
}

#[test]
fn dashed_types_specversion_and_unique_ignore() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "send-email", "args": ["a@b.c"], "specversion": "1.0"}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job"]["type"], "send-email");
    assert_eq!(body["job"]["specversion"], "1.0");
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "retry.test.max-interval-cap", "args": []}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job"]["specversion"], "1.0", "the version ojsd writes");
    // An ignored duplicate stores nothing: 200 and the existing job.
    let unique = json!({"type": "report.build", "args": [7],
        "options": {"unique": {"keys": ["type", "args"], "on_conflict": "ignore"}}});
    let (status, first) = post(&a, "/ojs/v1/jobs", unique.clone());
    assert_eq!(status, 201, "{first}");
    let (status, again) = post(&a, "/ojs/v1/jobs", unique);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["job"]["id"], first["job"]["id"]);
}

#[test]
fn ack_and_nack_replies_carry_id_and_a_discarding_nack_its_completed_at() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (_, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"queue": "r"}}),
    );
    let id = body["job"]["id"].as_str().unwrap().to_string();
    assert_eq!(fetch(&a, "r", "w")["id"], id.as_str());
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/ack",
        json!({"job_id": id, "worker_id": "w"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], id.as_str(), "{body}");

    let (_, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"queue": "r", "retry": {"max_attempts": 1}}}),
    );
    let id = body["job"]["id"].as_str().unwrap().to_string();
    fetch(&a, "r", "w");
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"code": "boom", "message": "no"}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], id.as_str(), "{body}");
    assert_eq!(body["state"], "discarded", "{body}");
    assert!(body["completed_at"].is_string(), "{body}");

    // The binding's dead-letter delete reply.
    let r = send(&a, "DELETE", &format!("/ojs/v1/dead-letter/{id}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        (v["deleted"].clone(), v["job_id"].clone()),
        (json!(true), json!(id))
    );
}

#[test]
fn heartbeats_in_the_worker_protocol_shape_and_the_binding_shape() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (_, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"queue": "hb"}}),
    );
    let id = body["job"]["id"].as_str().unwrap().to_string();
    fetch(&a, "hb", "js-worker");
    // The worker protocol: active_jobs a count, active_job_ids the ids (the JS SDK).
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "js-worker", "state": "running", "active_jobs": 1,
            "active_job_ids": [id], "hostname": "h", "pid": 1, "queues": ["hb"], "concurrency": 1}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "running", "{body}");
    assert_eq!(body["jobs_extended"], json!([id]), "{body}");
    // The binding: active_jobs the ids.
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "js-worker", "active_jobs": [id]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs_extended"], json!([id]), "{body}");
    // A worker that says it is quiet is treated as quiet: its FETCH gets nothing.
    post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"queue": "hb"}}),
    );
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "js-worker", "state": "quiet", "active_jobs": 0, "active_job_ids": []}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "quiet", "{body}");
    assert_eq!(fetch(&a, "hb", "js-worker"), Value::Null);
    // A bad shape is still refused.
    let (status, _) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "js-worker", "active_jobs": "five"}),
    );
    assert_eq!(status, 400);
}

#[test]
fn tcp_push_honours_the_binding_options_as_http_does() {
    let srv = Server::start();
    let mut c = srv.client();
    let job = json!({"type": "mail.send", "args": [1],
        "options": {"queue": "mail", "priority": 5, "timeout_ms": 1500,
            "retry": {"max_attempts": 7, "initial_interval_ms": 2000}, "metadata": {"k": "v"}}});
    let v = common::call_json(&mut c, &format!("PUSH {job}"));
    assert_eq!(v["queue"], "mail", "{v}");
    assert_eq!(v["priority"], 5, "{v}");
    assert_eq!(v["timeout"], 2, "{v}");
    assert_eq!(v["retry"]["max_attempts"], 7, "{v}");
    assert_eq!(v["retry"]["initial_interval"], "PT2S", "{v}");
    assert_eq!(v["meta"]["k"], "v", "{v}");
    assert!(v.get("options").is_none(), "{v}");
    // PUSHB too, and a bad option is refused.
    let batch = json!([{"type": "a.b", "args": [], "options": {"queue": "q2"}}]);
    let v = common::call_json(&mut c, &format!("PUSHB {batch}"));
    assert_eq!(v[0]["queue"], "q2", "{v}");
    let bad = json!({"type": "a.b", "args": [], "options": {"timeout_ms": "soon"}});
    assert_eq!(
        common::err_code(&mut c, &format!("PUSH {bad}")),
        "INVALID_PAYLOAD"
    );
}

/// Error history entries carry ojs-errors §6.1's `code` and `occurred_at` beside ojsd's
/// own `timestamp` and `type`: the worker's code when it sent one, else HANDLER_ERROR for a
/// FAIL, NON_RETRYABLE_ERROR when it said so, HANDLER_TIMEOUT for a lost reservation.
#[test]
fn error_history_entries_carry_code_and_occurred_at() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-errs");
    let job = common::test_job("errs", json!({"retry": {"max_attempts": 5}, "timeout": 30}));
    let id = common::push_id(&mut c, &job);
    common::fetch_and_fail(&mut w, "errs", &id, 1, "SmtpError");
    common::advance(&mut c, 3600.0);
    assert_eq!(common::id_of(&common::fetch_one(&mut w, "errs")), id);
    let fail = json!({"id": id, "error": {"type": "E", "message": "m", "code": "CUSTOM_CODE"}});
    common::call_ok(&mut w, &format!("FAIL {fail}"));
    common::advance(&mut c, 3600.0);
    assert_eq!(common::id_of(&common::fetch_one(&mut w, "errs")), id);
    // No ACK within the 30 s visibility timeout.
    common::advance(&mut c, 60.0);
    common::wait_for(std::time::Duration::from_secs(10), "the timeout", || {
        (c.job(&id).ok()?["errors"].as_array()?.len() == 3).then_some(())
    });
    let errors = c.job(&id).expect("JOB")["errors"].clone();
    let codes: Vec<&str> = (0..3)
        .map(|i| errors[i]["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["HANDLER_ERROR", "CUSTOM_CODE", "HANDLER_TIMEOUT"],
        "{errors}"
    );
    for (i, e) in errors.as_array().unwrap().iter().enumerate() {
        assert_eq!(e["attempt"], i + 1, "{e}");
        assert!(
            e["occurred_at"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{e}"
        );
        assert_eq!(e["occurred_at"], e["timestamp"]);
    }
}

/// PROTOCOL.md §14 reading 11: `scheduled_at`/`expires_at` as `+` and an ISO 8601 duration
/// (the conformance suite's `"+PT5S"`) mean that long from now, stored as an absolute
/// RFC 3339 time; a `+` with no valid duration is refused.
#[test]
fn relative_times_resolve_against_now() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let before = chrono::Utc::now();
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "delay.test", "args": [],
            "options": {"queue": "rel", "scheduled_at": "+PT5S", "expires_at": "+PT1H"}}),
    );
    let after = chrono::Utc::now();
    assert_eq!(status, 201, "{body}");
    let job = &body["job"];
    assert_eq!(job["state"], "scheduled", "{job}");
    let at = |k: &str| {
        chrono::DateTime::parse_from_rfc3339(job[k].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{k} is not RFC 3339: {job} ({e})"))
    };
    let five = chrono::Duration::seconds(5);
    assert!(at("scheduled_at") >= before + five && at("scheduled_at") <= after + five);
    let hour = chrono::Duration::hours(1);
    assert!(at("expires_at") >= before + hour && at("expires_at") <= after + hour);
    assert!(fetch(&a, "rel", "w1").is_null(), "not before its time");
    // The top-level envelope form too, and TCP's PUSH shares the validator.
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "delay.test", "args": [], "queue": "rel", "scheduled_at": "+PT0.5S"}),
    );
    assert_eq!(status, 201, "{body}");
    assert!(body["job"]["scheduled_at"]
        .as_str()
        .is_some_and(|s| !s.starts_with('+')));
    for bad in ["+", "+5S", "+PT", "PT5S", "+-PT5S"] {
        let (status, body) = post(
            &a,
            "/ojs/v1/jobs",
            json!({"type": "delay.test", "args": [], "options": {"scheduled_at": bad}}),
        );
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

/// Reading 12: the cron registration and read replies carry the conformance suite's
/// `cron` beside the binding's `cron_job` (the same object), and the list its `crons`
/// beside `cron_jobs`.
#[test]
fn cron_replies_carry_cron_beside_cron_job() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/cron",
        json!({"name": "conf-register", "expression": "*/5 * * * *",
            "job_template": {"type": "cron.test.register", "args": [{"a": 1}],
                "options": {"queue": "cron-test"}}}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["cron"], body["cron_job"], "{body}");
    let cron = &body["cron"];
    assert_eq!(cron["name"], "conf-register");
    assert_eq!(cron["expression"], "*/5 * * * *");
    assert_eq!(cron["enabled"], true);
    for k in ["next_run_at", "created_at"] {
        assert!(
            cron[k].as_str().is_some_and(|s| s.contains('T')),
            "{k}: {cron}"
        );
    }
    let r = common::http::send(&a, "GET", "/ojs/v1/cron/conf-register", "");
    let got = r.json();
    assert_eq!(
        (r.status, &got["cron"]["name"]),
        (200, &json!("conf-register"))
    );
    assert_eq!(got["cron"], got["cron_job"]);
    let r = common::http::send(&a, "GET", "/ojs/v1/cron", "");
    let list = r.json();
    assert_eq!(list["crons"], list["cron_jobs"], "{list}");
    assert_eq!(list["crons"][0]["name"], "conf-register");
}

/// Reading 13: over HTTP a workflow is `running` from its creation (its first jobs are
/// enqueued: ojs-workflows §8's "running" and its examples, the binding's §14 example),
/// and carries the suite's `steps_total`/`steps_completed` (chains) and
/// `jobs_total`/`jobs_completed` (groups, batches) beside `metadata`.
#[test]
fn workflows_run_from_creation_and_count_their_steps() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let step = |t: &str| json!({"type": t, "args": [], "options": {"queue": "wf-chain"}});
    let (status, body) = post(
        &a,
        "/ojs/v1/workflows",
        json!({"type": "chain", "name": "c", "steps": [step("c.zero"), step("c.one")]}),
    );
    assert_eq!(status, 201, "{body}");
    let wf = &body["workflow"];
    assert_eq!(
        (&wf["state"], &wf["steps_total"], &wf["steps_completed"]),
        (&json!("running"), &json!(2), &json!(0)),
        "{wf}"
    );
    let id = wf["id"].as_str().unwrap().to_string();
    for _ in 0..2 {
        let job = fetch(&a, "wf-chain", "w1");
        let (status, ack) = post(
            &a,
            "/ojs/v1/workers/ack",
            json!({"job_id": job["id"], "worker_id": "w1"}),
        );
        assert_eq!(status, 200, "{ack}");
    }
    let r = common::http::send(&a, "GET", &format!("/ojs/v1/workflows/{id}"), "");
    let wf = &r.json()["workflow"];
    assert_eq!(
        (&wf["state"], &wf["steps_total"], &wf["steps_completed"]),
        (&json!("completed"), &json!(2), &json!(2)),
        "{wf}"
    );

    let job = |t: &str| json!({"type": t, "args": [], "options": {"queue": "wf-group"}});
    let (status, body) = post(
        &a,
        "/ojs/v1/workflows",
        json!({"type": "group", "name": "g", "jobs": [job("g.a"), job("g.b"), job("g.c")]}),
    );
    assert_eq!(status, 201, "{body}");
    let wf = &body["workflow"];
    assert_eq!(
        (&wf["state"], &wf["jobs_total"], &wf["jobs_completed"]),
        (&json!("running"), &json!(3), &json!(0)),
        "{wf}"
    );
    // TCP keeps ojs-workflows' finer view: pending until a job is fetched (§12.4).
    let mut c = srv.client();
    let id = wf["id"].as_str().unwrap();
    let tcp = common::call_json(&mut c, &format!("WORKFLOW GET {id}"));
    assert_eq!(tcp["state"], "pending", "{tcp}");
}

/// Reading 14: ACK and NACK replies carry the job as the change left it in `job` (what
/// the conformance suite reads, `$.job.state`) beside the binding's flat fields.
#[test]
fn ack_and_nack_replies_carry_the_job() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    for _ in 0..2 {
        post(
            &a,
            "/ojs/v1/jobs",
            json!({"type": "x.y", "args": [1], "options": {"queue": "aj"}}),
        );
    }
    let job = fetch(&a, "aj", "w1");
    let (status, ack) = post(
        &a,
        "/ojs/v1/workers/ack",
        json!({"job_id": job["id"], "worker_id": "w1", "result": {"ok": true}}),
    );
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["state"], "completed");
    assert_eq!(
        (
            &ack["job"]["id"],
            &ack["job"]["state"],
            &ack["job"]["result"]
        ),
        (&job["id"], &json!("completed"), &json!({"ok": true})),
        "{ack}"
    );
    let job = fetch(&a, "aj", "w1");
    let (status, nack) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": job["id"], "worker_id": "w1",
            "error": {"code": "handler_error", "message": "boom"}}),
    );
    assert_eq!(status, 200, "{nack}");
    assert_eq!(
        (
            &nack["job"]["id"],
            &nack["job"]["state"],
            &nack["job"]["attempt"]
        ),
        (&job["id"], &nack["state"], &json!(1)),
        "{nack}"
    );
}

/// The binding shows `max_attempts` beside `retry` in every job it returns (the SDKs read
/// it there: the Python SDK reported 3 for a job whose policy said 5), and a request may
/// give it there too; the TCP dialect's envelope stays ojs-core's.
#[test]
fn max_attempts_is_shown_and_taken_beside_retry() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "m.a", "args": [], "options": {"queue": "ma", "retry": {"max_attempts": 5}}}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job"]["max_attempts"], 5, "{body}");
    assert_eq!(body["job"]["retry"]["max_attempts"], 5, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let got = send(&a, "GET", &format!("/ojs/v1/jobs/{id}"), "").json();
    assert_eq!(got["job"]["max_attempts"], 5, "{got}");
    // The default policy is shown too, and fetched jobs carry it.
    let (_, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "m.b", "args": [], "options": {"queue": "mb"}}),
    );
    assert_eq!(
        body["job"]["max_attempts"], body["job"]["retry"]["max_attempts"],
        "{body}"
    );
    let job = fetch(&a, "ma", "w1");
    assert_eq!(job["max_attempts"], 5, "{job}");
    // Given at the top level, it is the policy's.
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "m.c", "args": [], "max_attempts": 7}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job"]["retry"]["max_attempts"], 7, "{body}");
    assert_eq!(body["job"]["max_attempts"], 7, "{body}");
    let listed = send(&a, "GET", "/ojs/v1/admin/jobs?queue=default", "").json();
    assert_eq!(listed["items"][0]["max_attempts"], 7, "{listed}");
    // Both, disagreeing: refused.
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "m.d", "args": [], "max_attempts": 2, "options": {"retry": {"max_attempts": 4}}}),
    );
    assert_eq!(status, 400, "{body}");
    // Over TCP it is taken the same way, and the envelope keeps ojs-core's shape.
    let mut c = srv.client();
    let v = common::call_json(&mut c, r#"PUSH {"type":"m.e","args":[],"max_attempts":4}"#);
    assert_eq!(v["retry"]["max_attempts"], 4, "{v}");
    assert!(v.get("max_attempts").is_none(), "{v}");
}

#[test]
fn a_fetch_of_one_job_also_names_it_job() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (_, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [1], "options": {"queue": "one"}}),
    );
    let id = body["job"]["id"].as_str().unwrap().to_string();
    let (status, got) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["one"], "worker_id": "w", "wait_ms": 0}),
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["jobs"][0]["id"], id.as_str(), "{got}");
    assert_eq!(got["job"], got["jobs"][0], "{got}");
    // None came: no `job`; more than one asked for: `jobs` only.
    let (_, none) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["one"], "worker_id": "w", "wait_ms": 0}),
    );
    assert_eq!(none, json!({"jobs": []}));
    for i in 0..2 {
        post(
            &a,
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [i], "options": {"queue": "two"}}),
        );
    }
    let (_, two) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["two"], "worker_id": "w", "wait_ms": 0, "count": 2}),
    );
    assert_eq!(two["jobs"].as_array().map(Vec::len), Some(2), "{two}");
    assert!(two.get("job").is_none(), "{two}");
}

#[test]
fn retry_policy_and_visibility_timeout_options_are_honoured() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    // The suite's `retry_policy` is the policy: one attempt, so one NACK discards.
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"queue": "rp",
            "retry_policy": {"max_attempts": 1, "initial_interval_ms": 1500},
            "visibility_timeout": "PT2.5S"}}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["job"]["retry"]["max_attempts"], 1, "{body}");
    assert_eq!(body["job"]["retry"]["initial_interval"], "PT1.5S", "{body}");
    assert_eq!(
        body["job"]["timeout"], 3,
        "rounded up to whole seconds: {body}"
    );
    assert!(body["job"].get("retry_policy").is_none(), "{body}");
    assert!(body["job"].get("visibility_timeout").is_none(), "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_string();
    assert_eq!(fetch(&a, "rp", "w")["id"], id.as_str());
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"type": "E", "message": "m"}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "discarded", "{body}");
    // Both names at once, or a bad duration: refused.
    for options in [
        json!({"retry": {"max_attempts": 2}, "retry_policy": {"max_attempts": 1}}),
        json!({"visibility_timeout": "3 seconds"}),
        json!({"visibility_timeout": 3}),
    ] {
        let (status, body) = post(
            &a,
            "/ojs/v1/jobs",
            json!({"type": "a.b", "args": [], "options": options}),
        );
        assert_eq!(status, 400, "{options}: {body}");
    }
    // In a workflow's jobs too.
    let (status, body) = post(
        &a,
        "/ojs/v1/workflows",
        json!({"type": "group", "name": "g", "jobs": [
            {"type": "a.b", "args": [], "options": {"queue": "wq",
                "retry_policy": {"max_attempts": 1}, "visibility_timeout": "PT4S"}}]}),
    );
    assert_eq!(status, 201, "{body}");
    let job = fetch(&a, "wq", "w");
    assert_eq!(job["retry"]["max_attempts"], 1, "{job}");
    assert_eq!(job["timeout"], 4, "{job}");
    let (status, body) = post(
        &a,
        "/ojs/v1/workflows",
        json!({"type": "group", "name": "g", "jobs": [
            {"type": "a.b", "args": [], "options": {"visibility_timeout": "soon"}}]}),
    );
    assert_eq!(status, 400, "{body}");
}

#[test]
fn cron_delete_answers_the_removed_entry_as_cron() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    for name in ["conf-delete", "conf-tcp"] {
        let (status, body) = post(
            &a,
            "/ojs/v1/cron",
            json!({"name": name, "expression": "0 0 * * *",
                "job_template": {"type": "cron.test.delete", "args": [], "options": {"queue": "c"}}}),
        );
        assert_eq!(status, 201, "{body}");
    }
    let r = common::http::send(&a, "DELETE", "/ojs/v1/cron/conf-delete", "");
    let body = r.json();
    assert_eq!(r.status, 200, "{body}");
    assert_eq!(
        (&body["deleted"], &body["name"]),
        (&json!(true), &json!("conf-delete"))
    );
    assert_eq!(body["cron"]["name"], "conf-delete", "{body}");
    assert_eq!(body["cron"]["expression"], "0 0 * * *", "{body}");
    let list = common::http::send(&a, "GET", "/ojs/v1/cron", "").json();
    assert_eq!(list["crons"].as_array().map(Vec::len), Some(1), "{list}");
    let r = common::http::send(&a, "DELETE", "/ojs/v1/cron/conf-delete", "");
    assert_eq!(r.status, 404);
    // TCP's CRON DEL still answers +OK.
    let mut c = srv.client();
    common::call_ok(&mut c, "CRON DEL conf-tcp");
}
