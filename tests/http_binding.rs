//! The OJS HTTP binding's job, worker and queue routes (ojs-http-binding §9-§11, §21) over
//! real sockets, and that TCP and HTTP see the same jobs.

mod common;

use common::http::{get, request, send};
use common::*;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let r = send(addr, "POST", path, &body.to_string());
    (r.status, r.json())
}

fn push(addr: &str, body: Value) -> Value {
    let (status, v) = post(addr, "/ojs/v1/jobs", body);
    assert_eq!(status, 201, "{v}");
    v["job"].clone()
}

#[test]
fn enqueue_fetch_ack_with_the_binding_shapes() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let r = send(
        &a,
        "POST",
        "/ojs/v1/jobs",
        &json!({"type": "email.send", "args": ["u@example.com", {"locale": "en"}],
            "meta": {"trace_id": "t1"},
            "options": {"queue": "email", "priority": 3, "timeout_ms": 30500,
                "retry": {"max_attempts": 5, "initial_interval_ms": 1500, "backoff_coefficient": 2.0},
                "tags": ["onboarding"], "metadata": {"source": "signup"}}})
        .to_string(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let job = r.json()["job"].clone();
    let id = id_of(&job);
    assert_eq!(
        r.header("location"),
        Some(format!("/ojs/v1/jobs/{id}").as_str())
    );
    assert_eq!(
        pick(
            &job,
            &["type", "queue", "priority", "state", "timeout", "tags"]
        ),
        json!(["email.send", "email", 3, "available", 31, ["onboarding"]])
    );
    assert_eq!(job["meta"], json!({"trace_id": "t1", "source": "signup"}));
    assert_eq!(
        pick(&job["retry"], &["max_attempts", "initial_interval"]),
        json!([5, "PT1.5S"])
    );
    assert!(r.header("x-request-id").is_some());

    // TCP sees the same job.
    let mut c = srv.client();
    assert_eq!(
        call_json(&mut c, &format!("JOB {id}"))["meta"]["source"],
        "signup"
    );

    let (status, body) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["none", "email"], "worker_id": "hw-1"}),
    );
    assert_eq!(status, 200, "{body}");
    let fetched = &body["jobs"][0];
    assert_eq!(
        (
            fetched["id"].as_str(),
            fetched["state"].as_str(),
            fetched["worker_id"].as_str()
        ),
        (Some(id.as_str()), Some("active"), Some("hw-1"))
    );
    let (_, empty) = post(&a, "/ojs/v1/workers/fetch", json!({"queues": ["email"]}));
    assert_eq!(
        empty,
        json!({"jobs": []}),
        "an empty queue answers 200 with no jobs"
    );

    // Neither another worker nor a request that names none may settle it; its holder may.
    for other in [
        json!({"job_id": id, "worker_id": "hw-2"}),
        json!({"job_id": id}),
    ] {
        let (status, body) = post(&a, "/ojs/v1/workers/ack", other);
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (409, json!("x_not_owner"))
        );
    }
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/ack",
        json!({"job_id": id, "worker_id": "hw-1", "result": {"sent": true}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        pick(&body, &["acknowledged", "job_id", "state"]),
        json!([true, id, "completed"])
    );
    assert!(body["completed_at"].is_string());
    let (status, body) = post(&a, "/ojs/v1/workers/ack", json!({"job_id": id}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["details"]["current_state"], "completed");

    let r = get(&a, &format!("/ojs/v1/jobs/{id}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["job"]["result"], json!({"sent": true}));
    let r = get(&a, "/ojs/v1/jobs/019aa7c4-5f3a-7e21-8d4b-0a1b2c3d4e5f");
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (404, json!("not_found"))
    );
}

#[test]
fn bad_requests_get_the_error_body() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": {"not": "array"}}),
    );
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_request");
    assert_eq!(body["error"]["retryable"], false);
    assert!(body["error"]["request_id"].is_string());
    let (status, body) = post(&a, "/ojs/v1/jobs", json!({"type": "Bad Type", "args": []}));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_payload"))
    );
    let r = send(&a, "POST", "/ojs/v1/jobs", "{oops");
    assert_eq!(r.status, 400);
    let (status, _) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"timeout_ms": -1}}),
    );
    assert_eq!(status, 400);
    let (status, body) = post(&a, "/ojs/v1/workers/fetch", json!({"queues": []}));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
    let (status, _) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["q"], "count": 0}),
    );
    assert_eq!(status, 400);
    // A retry policy the engine refuses.
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs",
        json!({"type": "a.b", "args": [], "options": {"retry": {"max_attempts": -3}}}),
    );
    // Valid JSON, but not a policy the server can use: 422 (the issue and binding §16.2).
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_payload", "{body}");
    assert_eq!(body["error"]["details"]["ojs_code"], "INVALID_RETRY_POLICY");
}

#[test]
fn batch_is_atomic_and_unique_duplicates_conflict() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/jobs/batch",
        json!({"jobs": [
        {"type": "a.b", "args": [1], "options": {"queue": "bq"}},
        {"type": "a.b", "args": [2], "options": {"queue": "bq"}}]}),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["count"], 2);
    assert_eq!(body["jobs"][1]["args"], json!([2]));
    let (status, _) = post(
        &a,
        "/ojs/v1/jobs/batch",
        json!({"jobs": [
        {"type": "a.b", "args": [3], "options": {"queue": "bq2"}},
        {"type": "NOPE", "args": []}]}),
    );
    assert_eq!(status, 400);
    let mut c = srv.client();
    let info = c.info().unwrap();
    assert_eq!(info["queues"]["bq"]["available"], 2);
    assert!(
        info["queues"].get("bq2").is_none(),
        "nothing of a refused batch is kept: {info}"
    );

    let unique = json!({"type": "u.x", "args": [1], "options": {"unique": {"keys": ["type", "args"], "on_conflict": "reject"}}});
    push(&a, unique.clone());
    let (status, body) = post(&a, "/ojs/v1/jobs", unique);
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("duplicate")),
        "{body}"
    );
}

#[test]
fn nack_retries_then_discards_and_cancel_conflicts_once_terminal() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let job = push(
        &a,
        json!({"type": "f.x", "args": [], "options": {"queue": "fq",
        "retry": {"max_attempts": 2, "initial_interval_ms": 2000, "jitter": false}}}),
    );
    let id = id_of(&job);
    let (_, got) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["fq"], "worker_id": "w"}),
    );
    assert_eq!(got["jobs"][0]["id"], id.as_str());
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w",
        "error": {"code": "handler_error", "message": "SMTP refused", "retryable": true}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        pick(&body, &["state", "attempt", "max_attempts"]),
        json!(["retryable", 1, 2])
    );
    assert!(body["next_attempt_at"].is_string());
    assert!(body["retry_delay_ms"].as_i64().is_some());
    let mut c = srv.client();
    let stored = call_json(&mut c, &format!("JOB {id}"));
    assert_eq!(
        pick(&stored["error"], &["type", "message"]),
        json!(["handler_error", "SMTP refused"])
    );
    advance(&mut c, 3.0);
    let (_, got) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["fq"], "worker_id": "w"}),
    );
    assert_eq!(got["jobs"][0]["attempt"], 2);
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w",
        "error": {"code": "handler_error", "message": "again"}}),
    );
    assert_eq!(status, 200);
    assert_eq!(body["state"], "discarded");
    assert!(body["discarded_at"].is_string());

    // DELETE cancels a waiting job and answers 409 once the job is terminal.
    let other = id_of(&push(&a, json!({"type": "c.x", "args": []})));
    let r = request(&a, "DELETE", &format!("/ojs/v1/jobs/{other}"), &[]);
    assert_eq!(
        (r.status, r.json()["job"]["state"].clone()),
        (200, json!("cancelled"))
    );
    let r = request(&a, "DELETE", &format!("/ojs/v1/jobs/{other}"), &[]);
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (409, json!("conflict"))
    );
    // ACTIVATE a pending job.
    let pending = id_of(&push(
        &a,
        json!({"type": "p.x", "args": [], "options": {"pending": true}}),
    ));
    assert_eq!(state_of(&mut c, &pending), "pending");
    let (status, body) = post(&a, &format!("/ojs/v1/jobs/{pending}/activate"), json!({}));
    assert_eq!(
        (status, body["job"]["state"].clone()),
        (200, json!("available"))
    );
}

#[test]
fn heartbeat_answers_the_directive_and_fetch_waits_for_a_job() {
    let srv = Server::start_with(&["--fetch-wait-ms", "3000"]);
    let a = srv.http_addr.clone();
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "hb-1", "active_jobs": []}),
    );
    assert_eq!(
        (status, body["state"].clone()),
        (200, json!("running")),
        "{body}"
    );
    assert!(body["server_time"].is_string());
    let mut c = srv.client();
    call_ok(&mut c, "WORKER QUIET hb-1");
    let (_, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "hb-1"}),
    );
    assert_eq!(body["state"], "quiet");
    call_ok(&mut c, "WORKER TERMINATE hb-1");
    let (_, body) = post(
        &a,
        "/ojs/v1/workers/heartbeat",
        json!({"worker_id": "hb-1"}),
    );
    assert_eq!(body["state"], "terminate");
    let (status, _) = post(&a, "/ojs/v1/workers/heartbeat", json!({}));
    assert_eq!(status, 400, "worker_id is required");

    // A long-polling fetch returns as soon as a job arrives; two fetchers never share one.
    let got = Arc::new(Mutex::new(Vec::new()));
    let fetchers: Vec<_> = (0..2)
        .map(|i| {
            let (a, got) = (a.clone(), got.clone());
            std::thread::spawn(move || {
                let (_, body) = post(
                    &a,
                    "/ojs/v1/workers/fetch",
                    json!({"queues": ["lp"], "worker_id": format!("lp-{i}")}),
                );
                got.lock().unwrap().push(body["jobs"].clone());
            })
        })
        .collect();
    wait_for_blocked_fetches(&mut c, 2);
    let id = id_of(&push(
        &a,
        json!({"type": "l.p", "args": [], "options": {"queue": "lp"}}),
    ));
    for f in fetchers {
        f.join().unwrap();
    }
    let got = got.lock().unwrap();
    let ids: Vec<&str> = got
        .iter()
        .flat_map(|j| j.as_array().unwrap())
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()], "exactly one fetcher got the job");
}

#[test]
fn queues_pause_resume_stats_and_the_manifest() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    push(
        &a,
        json!({"type": "q.x", "args": [], "options": {"queue": "alpha"}}),
    );
    push(
        &a,
        json!({"type": "q.x", "args": [], "options": {"queue": "beta"}}),
    );
    let r = get(&a, "/ojs/v1/queues?limit=1");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["queues"].as_array().unwrap().len(), 1);
    assert_eq!(
        pick(&v["pagination"], &["total", "limit", "offset", "has_more"]),
        json!([2, 1, 0, true])
    );
    let (status, body) = post(&a, "/ojs/v1/queues/alpha/pause", json!({}));
    assert_eq!((status, body["status"].clone()), (200, json!("paused")));
    let (_, got) = post(&a, "/ojs/v1/workers/fetch", json!({"queues": ["alpha"]}));
    assert_eq!(got["jobs"], json!([]), "a paused queue hands out nothing");
    let r = get(&a, "/ojs/v1/queues/alpha/stats");
    assert_eq!(
        pick(&r.json(), &["queue", "status"]),
        json!(["alpha", "paused"])
    );
    assert_eq!(r.json()["stats"]["available"], 1);
    let (_, body) = post(&a, "/ojs/v1/queues/alpha/resume", json!({}));
    assert_eq!(body["status"], "active");
    let (_, got) = post(&a, "/ojs/v1/workers/fetch", json!({"queues": ["alpha"]}));
    assert_eq!(got["jobs"].as_array().unwrap().len(), 1);

    let m = get(&a, "/ojs/manifest").json();
    assert_eq!(m["implementation"]["name"], "ojsd");
    assert_eq!(m["conformance_level"], 4);
    assert_eq!(m["capabilities"]["rate_limiting"], true);
    assert_eq!(m["capabilities"]["schema_validation"], false);
}

/// Level 4's batch size (L4-BULK-002: at least 1,000 jobs a request) and named priorities.
#[test]
fn a_batch_of_a_thousand_and_named_priorities() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let jobs: Vec<Value> = (0..1000)
        .map(|i| json!({"type": "b.k", "args": [i], "options": {"queue": "bulk"}}))
        .collect();
    let (status, body) = post(&a, "/ojs/v1/jobs/batch", json!({ "jobs": jobs }));
    assert_eq!((status, body["count"].clone()), (201, json!(1000)));
    for (p, n) in [("LOW", "low"), ("NORMAL", "normal"), ("HIGH", "high")] {
        let job = push(
            &a,
            json!({"type": "p.n", "args": [n], "options": {"queue": "named", "priority": p}}),
        );
        assert!(job["priority"].is_i64(), "{job}");
    }
    let (_, got) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["named"], "count": 3}),
    );
    let order: Vec<&str> = got["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["args"][0].as_str().unwrap())
        .collect();
    assert_eq!(order, ["high", "normal", "low"]);
}

#[test]
fn the_password_guards_the_binding_routes() {
    let srv = Server::start_with(&["--password", "pw"]);
    let a = srv.http_addr.clone();
    let r = send(
        &a,
        "POST",
        "/ojs/v1/jobs",
        &json!({"type": "a.b", "args": []}).to_string(),
    );
    assert_eq!(r.status, 401);
    let r = request(
        &a,
        "GET",
        "/ojs/v1/queues",
        &[("authorization", "Bearer pw")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn cors_answers_preflights_for_the_allowed_origins_only() {
    let srv = Server::start_with(&[
        "--password",
        "pw",
        "--cors-origin",
        "https://admin.example,https://ops.example",
    ]);
    let a = srv.http_addr.clone();
    let preflight = |origin: &str| {
        request(
            &a,
            "OPTIONS",
            "/ojs/v1/jobs",
            &[
                ("origin", origin),
                ("access-control-request-method", "POST"),
                (
                    "access-control-request-headers",
                    "authorization, content-type",
                ),
            ],
        )
    };
    // Answered before the password check, with the binding's headers.
    let r = preflight("https://ops.example");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://ops.example")
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert!(r
        .header("access-control-allow-headers")
        .unwrap()
        .contains("Authorization"));
    assert_eq!(r.header("access-control-max-age"), Some("86400"));
    // Another origin gets no CORS headers at all (and the password check).
    let r = preflight("https://evil.example");
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.status, 401);
    // A real request from an allowed origin carries the origin and the exposed headers.
    let r = request(
        &a,
        "GET",
        "/ojs/v1/queues",
        &[
            ("origin", "https://admin.example"),
            ("authorization", "Bearer pw"),
        ],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://admin.example")
    );
    assert!(r
        .header("access-control-expose-headers")
        .unwrap()
        .contains("X-Request-Id"));
    // Without --cors-origin, nothing is allowed.
    let plain = Server::start();
    let r = request(
        &plain.http_addr,
        "GET",
        "/ojs/v1/queues",
        &[("origin", "https://admin.example")],
    );
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn nack_details_retryable_requeue_and_the_fetch_wait() {
    let srv = Server::start_with(&["--fetch-wait-ms", "30000"]);
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let opts = json!({"queue": "nq", "retry": {"max_attempts": 5, "initial_interval_ms": 60000}});
    let fetch = |w: &str| {
        let (_, got) = post(
            &a,
            "/ojs/v1/workers/fetch",
            json!({"queues": ["nq"], "worker_id": w, "wait_ms": 0}),
        );
        got["jobs"].clone()
    };
    // `details` is stored with the error; `requeue` skips the 60 s backoff.
    let id = id_of(&push(
        &a,
        json!({"type": "n.q", "args": [], "options": opts}),
    ));
    assert_eq!(fetch("w")[0]["id"], id.as_str());
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "requeue": true, "error": {"code": "handler_error",
            "message": "try again", "details": {"smtp_port": 587}}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        pick(&body, &["state", "retry_delay_ms"]),
        json!(["available", 0])
    );
    let stored = call_json(&mut c, &format!("JOB {id}"));
    assert_eq!(stored["error"]["details"], json!({"smtp_port": 587}));
    // Fetched again at once; now `retryable: false` discards it with attempts left.
    assert_eq!(fetch("w")[0]["attempt"], 2);
    let (_, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"code": "x_auth", "message": "bad key", "retryable": false}}),
    );
    assert_eq!(pick(&body, &["state", "attempt"]), json!(["discarded", 2]));
    // A plain NACK waits out the backoff; retry_delay_ms is measured from the failure.
    let id = id_of(&push(
        &a,
        json!({"type": "n.q", "args": [], "options": opts}),
    ));
    assert_eq!(fetch("w")[0]["id"], id.as_str());
    let (_, body) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"code": "handler_error", "message": "m"}}),
    );
    assert_eq!(body["state"], "retryable");
    let delay = body["retry_delay_ms"].as_i64().unwrap();
    assert!((30_000..=90_000).contains(&delay), "{body}");
    // wait_ms: 0 answers at once with nothing, though the server would wait 30 s; a
    // large wait_ms is cut to --fetch-wait-ms (not tested for its length here).
    let t = std::time::Instant::now();
    assert_eq!(fetch("w"), json!([]));
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["nq"], "wait_ms": "soon"}),
    );
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
    // details must be a small object.
    let id = id_of(&push(
        &a,
        json!({"type": "n.q", "args": [], "options": opts}),
    ));
    assert_eq!(fetch("w")[0]["id"], id.as_str());
    let (status, _) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"code": "e", "message": "m", "details": "text"}}),
    );
    assert_eq!(status, 400);
    let big = "x".repeat(20_000);
    let (status, _) = post(
        &a,
        "/ojs/v1/workers/nack",
        json!({"job_id": id, "worker_id": "w", "error": {"code": "e", "message": "m", "details": {"big": big}}}),
    );
    assert_eq!(status, 400);
    assert_eq!(state_of(&mut c, &id), "active");
}

#[test]
fn a_short_wait_behind_a_long_one_still_ends_on_time() {
    let srv = Server::start_with(&["--fetch-wait-ms", "30000"]);
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let long = {
        let a = a.clone();
        std::thread::spawn(move || {
            post(
                &a,
                "/ojs/v1/workers/fetch",
                json!({"queues": ["sw"], "worker_id": "long"}),
            )
        })
    };
    wait_for_blocked_fetches(&mut c, 1);
    // Waiters are kept in deadline order: this one is answered after its own 300 ms, not
    // after the 30 s of the one that came first.
    let t = std::time::Instant::now();
    let (status, body) = post(
        &a,
        "/ojs/v1/workers/fetch",
        json!({"queues": ["sw"], "worker_id": "short", "wait_ms": 300}),
    );
    assert_eq!((status, body["jobs"].clone()), (200, json!([])));
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    // The long waiter is still there and gets the next job.
    let id = id_of(&push(
        &a,
        json!({"type": "s.w", "args": [], "options": {"queue": "sw"}}),
    ));
    let (_, body) = long.join().unwrap();
    assert_eq!(body["jobs"][0]["id"], id.as_str());
}

/// An SDK's `schedule`: `options.delay_until` holds the job until then; `expires_at` that
/// passes first discards it unrun.
#[test]
fn delay_until_schedules_and_expires_at_discards() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let now = chrono::Utc::now();
    let at = |secs: i64| (now + chrono::Duration::seconds(secs)).to_rfc3339();
    let later = push(
        &a,
        json!({"type": "d.u", "args": [], "options": {"queue": "du", "delay_until": at(60)}}),
    );
    assert_eq!(later["state"], "scheduled", "{later}");
    let stale = push(
        &a,
        json!({"type": "d.u", "args": [], "options": {"queue": "du",
            "delay_until": at(60), "expires_at": at(30)}}),
    );
    let fetch = || {
        let (_, got) = post(
            &a,
            "/ojs/v1/workers/fetch",
            json!({"queues": ["du"], "count": 5, "wait_ms": 0}),
        );
        got["jobs"].as_array().unwrap().clone()
    };
    assert!(fetch().is_empty());
    advance(&mut c, 61.0);
    let got = fetch();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], later["id"]);
    let job = get(&a, &format!("/ojs/v1/jobs/{}", id_of(&stale))).json();
    assert_eq!(job["job"]["state"], "discarded", "{job}");
}
