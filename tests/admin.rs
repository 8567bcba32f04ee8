//! Queue, worker and dead-letter administration over real sockets (TCP and the HTTP admin
//! API): pause/resume, QUEUE LIST/STATS/PURGE figures, the worker list, DEAD GET/STATS,
//! retry and delete of one or all matching dead letters, and retention pruning.

mod common;

use common::*;
use ojs_client::Client;
use serde_json::{json, Value};

/// One HTTP request with a JSON body; returns the status and the parsed body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let r = common::http::send(addr, method, path, body);
    (r.status, r.json())
}

/// Push a job that dies on its first failure, fetch it and FAIL it with `etype`.
fn make_dead(c: &mut Client, w: &mut Client, queue: &str, jtype: &str, etype: &str) -> String {
    let job = json!({"type": jtype, "args": [], "queue": queue, "retry": {"max_attempts": 1}});
    let id = push_id(c, &job);
    let got = fetch_one(w, queue);
    assert_eq!(id_of(&got), id);
    w.fail(&id, etype, "it broke", &[]).expect("FAIL");
    assert_eq!(state_of(c, &id), "discarded");
    id
}

fn dead_list(c: &mut Client, opts: Value) -> (u64, Vec<String>) {
    let v = call_json(c, &format!("DEAD LIST {opts}"));
    let jobs = v["jobs"].as_array().expect("jobs");
    (v["total"].as_u64().expect("total"), ids_of(jobs))
}

#[test]
fn pause_blocks_fetch_and_resume_releases_it() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-p");
    let id = push_id(&mut c, &test_job("pq", json!({})));
    call_ok(&mut c, "QUEUE PAUSE pq");
    fetch_none(&mut w, "pq");
    let stats = call_json(&mut c, "QUEUE STATS pq");
    assert_eq!(
        pick(&stats, &["state", "paused", "depth"]),
        json!(["paused", true, 1])
    );
    call_ok(&mut c, "QUEUE RESUME pq");
    assert_eq!(id_of(&fetch_one(&mut w, "pq")), id);

    // the same over HTTP
    let id2 = push_id(&mut c, &test_job("pq", json!({})));
    let (st, v) = http(&srv.http_addr, "POST", "/ojs/v1/admin/queues/pq/pause", "");
    assert_eq!((st, v), (200, json!({"name": "pq", "paused": true})));
    fetch_none(&mut w, "pq");
    let (st, v) = http(&srv.http_addr, "POST", "/ojs/v1/admin/queues/pq/resume", "");
    assert_eq!((st, v["paused"].clone()), (200, json!(false)));
    assert_eq!(id_of(&fetch_one(&mut w, "pq")), id2);
    // A name neither dialect allows (`Bad` is a Faktory queue name, and taken as one).
    let bad = format!("/ojs/v1/admin/queues/{}/pause", "q".repeat(300));
    let (st, v) = http(&srv.http_addr, "POST", &bad, "");
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_payload"))
    );
}

#[test]
fn dead_retry_returns_the_job_with_attempt_reset() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-d");
    let id = make_dead(&mut c, &mut w, "dq", "dead.one", "Boom");
    let dead = call_json(&mut c, &format!("DEAD GET {id}"));
    assert_eq!(pick(&dead, &["state", "attempt"]), json!(["discarded", 1]));
    assert_eq!(dead["errors"][0]["type"], "Boom");
    call_ok(&mut c, &format!("DEAD RETRY {id}"));
    let job = c.job(&id).expect("JOB");
    assert_eq!(pick(&job, &["state", "attempt"]), json!(["available", 0]));
    assert!(job.get("discarded_at").is_none() && job.get("error").is_none());
    assert_eq!(dead_list(&mut c, json!({})).0, 0);
    let again = fetch_one(&mut w, "dq");
    assert_eq!(
        (id_of(&again), again["attempt"].clone()),
        (id.clone(), json!(1))
    );

    // unknown ids and jobs that are not dead letters
    let other = push_id(&mut c, &test_job("dq", json!({})));
    assert_eq!(err_code(&mut c, &format!("DEAD GET {other}")), "NOT_FOUND");
    assert_eq!(
        err_code(&mut c, &format!("DEAD RETRY {other}")),
        "INVALID_STATE_TRANSITION"
    );
    assert_eq!(
        err_code(&mut c, &format!("DEAD GET {}", new_id())),
        "NOT_FOUND"
    );
    assert_eq!(err_code(&mut c, "DEAD DELETE nope"), "NOT_FOUND");

    // over HTTP: retry one, 404 for an unknown id
    w.fail(&id, "Boom", "again", &[]).expect("FAIL");
    let h = &srv.http_addr;
    let (st, v) = http(h, "GET", &format!("/ojs/v1/admin/dead-letter/{id}"), "");
    assert_eq!((st, v["state"].clone()), (200, json!("discarded")));
    let (st, v) = http(h, "POST", &format!("/ojs/v1/dead-letter/{id}/retry"), "");
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        pick(&v["job"], &["state", "attempt"]),
        json!(["available", 0])
    );
    let (st, v) = http(h, "GET", &format!("/ojs/v1/dead-letter/{}", new_id()), "");
    assert_eq!((st, v["error"]["code"].clone()), (404, json!("not_found")));
}

#[test]
fn bulk_retry_and_delete_follow_the_filter() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-b");
    let a1 = make_dead(&mut c, &mut w, "qa", "t.one", "Net");
    let a2 = make_dead(&mut c, &mut w, "qa", "t.two", "Db");
    advance(&mut c, 10.0);
    let mid = server_now(&mut c);
    let b1 = make_dead(&mut c, &mut w, "qb", "t.one", "Net");
    let b2 = make_dead(&mut c, &mut w, "qb", "t.two", "Net");
    let b3 = make_dead(&mut c, &mut w, "qb", "t.two", "Db");

    // filters on LIST
    let by = |c: &mut Client, f: Value| dead_list(c, f).1;
    assert_eq!(
        by(&mut c, json!({"error_type": "Db"})),
        vec![b3.clone(), a2.clone()]
    );
    assert_eq!(
        by(&mut c, json!({"since": rfc3339(mid)})),
        vec![b3.clone(), b2.clone(), b1.clone()]
    );
    assert_eq!(
        by(&mut c, json!({"until": rfc3339(mid)})),
        vec![a2.clone(), a1.clone()]
    );
    assert_eq!(
        by(
            &mut c,
            json!({"queue": "qb", "type": "t.two", "error_type": "Net"})
        ),
        vec![b2.clone()]
    );

    // confirmation and typo-safety
    #[rustfmt::skip]
    let refused = [
        r#"DEAD RETRY {"queue":"qb"}"#, r#"DEAD DELETE {"queue":"qb","confirm":false}"#,
        r#"DEAD DELETE {"queu":"qb","confirm":true}"#, r#"DEAD DELETE {"since":"now","confirm":true}"#,
    ];
    for line in refused {
        assert_eq!(err_code(&mut c, line), "MALFORMED_COMMAND", "{line}");
    }
    assert_eq!(dead_list(&mut c, json!({})).0, 5);

    let r = call_json(
        &mut c,
        r#"DEAD RETRY {"queue":"qb","type":"t.two","confirm":true}"#,
    );
    assert_eq!(
        pick(&r, &["matched", "retried", "failed"]),
        json!([2, 2, 0])
    );
    for id in [&b2, &b3] {
        assert_eq!(state_of(&mut c, id), "available");
        assert_eq!(c.job(id).expect("JOB")["attempt"], 0);
    }
    let r = call_json(&mut c, r#"DEAD DELETE {"error_type":"Net","confirm":true}"#);
    assert_eq!(pick(&r, &["matched", "deleted"]), json!([2, 2]));
    assert_eq!(err_code(&mut c, &format!("JOB {a1}")), "NOT_FOUND");
    assert_eq!(err_code(&mut c, &format!("JOB {b1}")), "NOT_FOUND");
    assert_eq!(dead_list(&mut c, json!({})).1, vec![a2.clone()]);

    // over HTTP, with the spec's {"filter": ..., "confirm": true}
    let h = &srv.http_addr;
    let (st, v) = http(
        h,
        "POST",
        "/ojs/v1/admin/dead-letter/retry",
        r#"{"filter":{"queue":"qa"}}"#,
    );
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
    let body = r#"{"filter":{"queue":"qa"},"confirm":true}"#;
    let (st, v) = http(h, "POST", "/ojs/v1/admin/dead-letter/retry", body);
    assert_eq!((st, v["retried"].clone()), (200, json!(1)));
    assert_eq!(state_of(&mut c, &a2), "available");
    let x = make_dead(&mut c, &mut w, "qc", "t.x", "E");
    let (st, v) = http(
        h,
        "DELETE",
        "/ojs/v1/admin/dead-letter",
        r#"{"confirm":true}"#,
    );
    assert_eq!((st, v["deleted"].clone()), (200, json!(1)));
    assert_eq!(err_code(&mut c, &format!("JOB {x}")), "NOT_FOUND");
}

#[test]
fn dead_stats_and_http_listing() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-s");
    let mut ids = Vec::new();
    for (q, e) in [("s1", "Net"), ("s1", "Net"), ("s2", "Db")] {
        ids.push(make_dead(&mut c, &mut w, q, "t.s", e));
        advance(&mut c, 1.0);
    }
    let s = call_json(&mut c, "DEAD STATS");
    assert_eq!(s["total"], 3);
    assert_eq!(s["by_queue"], json!({"s1": 2, "s2": 1}));
    assert_eq!(s["by_error_type"], json!({"Db": 1, "Net": 2}));
    assert_eq!(s["retention"]["max_age"], "P180D");
    assert_eq!(s["retention"]["max_count"], 10_000);
    let oldest = ts(&s["oldest_at"]);
    assert!(ts(&s["newest_at"]) > oldest);
    assert_eq!(
        ts(&s["retention"]["next_prune_at"]) - oldest,
        chrono::Duration::days(180)
    );

    let h = &srv.http_addr;
    let (st, v) = http(h, "GET", "/ojs/v1/admin/dead-letter/stats", "");
    assert_eq!((st, v["total"].clone()), (200, json!(3)));
    let (st, v) = http(h, "GET", "/ojs/v1/admin/dead-letter?per_page=2&page=2", "");
    assert_eq!(st, 200);
    assert_eq!(
        v["pagination"],
        json!({"total": 3, "page": 2, "per_page": 2})
    );
    assert_eq!(
        ids_of(v["items"].as_array().expect("items")),
        vec![ids[0].clone()]
    );
    let (_, v) = http(h, "GET", "/ojs/v1/dead-letter?queue=s1&error_type=Net", "");
    assert_eq!(v["pagination"]["total"], 2);
    // The binding's shape (§12.1) and cursor paging (§17).
    assert_eq!(v["jobs"].as_array().map(Vec::len), Some(2), "{v}");
    let (_, v) = http(h, "GET", "/ojs/v1/dead-letter?limit=2", "");
    assert_eq!(
        (
            v["pagination"]["has_more"].clone(),
            v["jobs"].as_array().map(Vec::len)
        ),
        (json!(true), Some(2)),
        "{v}"
    );
    let cursor = v["pagination"]["next_cursor"]
        .as_str()
        .expect("next_cursor");
    let (_, v) = http(
        h,
        "GET",
        &format!("/ojs/v1/dead-letter?limit=2&cursor={cursor}"),
        "",
    );
    assert_eq!(
        ids_of(v["jobs"].as_array().expect("jobs")),
        vec![ids[0].clone()]
    );
    assert_eq!(v["pagination"]["has_more"], false);
    assert!(v["pagination"].get("next_cursor").is_none(), "{v}");
    let (st, _) = http(h, "GET", "/ojs/v1/dead-letter?since=yesterday", "");
    assert_eq!(st, 400);
    let (st, v) = http(
        h,
        "DELETE",
        &format!("/ojs/v1/admin/dead-letter/{}", ids[2]),
        "",
    );
    assert_eq!((st, v["deleted"].clone()), (200, json!(true)));
    assert_eq!(call_json(&mut c, "DEAD STATS")["total"], 2);
}

#[test]
fn queue_list_stats_and_purge_figures() {
    // The worker must outlive the clock jumps below.
    let srv = Server::start_with(&["--heartbeat-timeout", "600"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-q");
    let now = server_now(&mut c);
    let later = rfc3339(now + chrono::Duration::hours(1));
    let a = push_id(&mut c, &test_job("fig", json!({})));
    advance(&mut c, 5.0);
    for _ in 0..4 {
        push_id(&mut c, &test_job("fig", json!({})));
    }
    push_id(&mut c, &test_job("fig", json!({"scheduled_at": later})));
    push_id(&mut c, &test_job("fig", json!({"pending": true})));
    push_id(&mut c, &test_job("other", json!({})));
    // 3 completed, 1 failed into retryable, 1 left active
    for _ in 0..3 {
        let j = fetch_one(&mut w, "fig");
        w.ack(&id_of(&j), None).expect("ACK");
    }
    let f = fetch_one(&mut w, "fig");
    w.fail(&id_of(&f), "E", "m", &[]).expect("FAIL");
    let active = id_of(&fetch_one(&mut w, "fig"));
    assert_ne!(active, a);

    let list = call_json(&mut c, "QUEUE LIST");
    assert_eq!(list["total"], 2);
    let names: Vec<&str> = list["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["fig", "other"]);
    let fig = &list["queues"][0];
    assert_eq!(
        fig["counts"],
        json!({"scheduled": 1, "available": 0, "pending": 1, "active": 1, "completed": 3,
               "retryable": 1, "cancelled": 0, "discarded": 0})
    );
    assert_eq!(fig["throughput"]["processed_per_minute"], 3);
    assert_eq!(fig["throughput"]["failed_per_minute"], 1);

    let fig = call_json(&mut c, "QUEUE STATS fig");
    assert_eq!(
        pick(&fig, &["depth", "latency_ms", "workers"]),
        json!([0, 0, 0])
    );
    assert!(fig["oldest_available_at"].is_null());
    advance(&mut c, 2.0);
    let other = call_json(&mut c, "QUEUE STATS other");
    assert_eq!(pick(&other, &["depth", "state"]), json!([1, "active"]));
    assert!(other["latency_ms"].as_i64().expect("latency") >= 2000);
    assert!(other["oldest_available_at"].is_string());
    advance(&mut c, 61.0);
    let fig = call_json(&mut c, "QUEUE STATS fig");
    assert_eq!(fig["throughput"]["processed_per_minute"], 0, "aged out");
    assert_eq!(fig["throughput"]["processed_last_5m"], 3);
    assert_eq!(err_code(&mut c, "QUEUE STATS nowhere"), "NOT_FOUND");
    // `No_Way` is a name only Faktory allows: taken as the Faktory queue, which is unknown.
    assert_eq!(err_code(&mut c, "QUEUE STATS No_Way"), "NOT_FOUND");
    let long = format!("QUEUE STATS {}", "q".repeat(300));
    assert_eq!(err_code(&mut c, &long), "INVALID_QUEUE");

    // purge: exactly the named states, never the active job
    let p = call_json(
        &mut c,
        r#"QUEUE PURGE fig {"states":["completed","scheduled","pending"],"confirm":true}"#,
    );
    assert_eq!(p["purged_count"], 5);
    let counts = call_json(&mut c, "QUEUE STATS fig")["counts"].clone();
    // the failed job's retry came due meanwhile: it is available, and stays
    assert_eq!(
        pick(
            &counts,
            &["completed", "scheduled", "pending", "active", "available"]
        ),
        json!([0, 0, 0, 1, 1])
    );
    assert_eq!(state_of(&mut c, &active), "active");
    assert_eq!(
        err_code(
            &mut c,
            r#"QUEUE PURGE fig {"states":["active"],"confirm":true}"#
        ),
        "MALFORMED_COMMAND"
    );
    assert_eq!(
        err_code(&mut c, r#"QUEUE PURGE fig {"states":["retryable"]}"#),
        "MALFORMED_COMMAND"
    );
    assert_eq!(
        err_code(
            &mut c,
            r#"QUEUE PURGE nowhere {"states":["retryable"],"confirm":true}"#
        ),
        "NOT_FOUND"
    );

    // older_than, over HTTP
    let h = &srv.http_addr;
    let cut = rfc3339(server_now(&mut c));
    advance(&mut c, 1.0);
    push_id(&mut c, &test_job("other", json!({})));
    let body = json!({"states": ["available"], "older_than": cut, "confirm": true}).to_string();
    let (st, v) = http(h, "DELETE", "/ojs/v1/admin/queues/other/jobs", &body);
    assert_eq!((st, v["purged_count"].clone()), (200, json!(1)));
    let (st, v) = http(h, "GET", "/ojs/v1/admin/queues/other", "");
    assert_eq!((st, v["counts"]["available"].clone()), (200, json!(1)));
    let (st, v) = http(h, "GET", "/ojs/v1/admin/queues", "");
    assert_eq!((st, v["pagination"]["total"].clone()), (200, json!(2)));
    // page and per_page are honoured on the queue list (they were ignored).
    let (_, first) = http(h, "GET", "/ojs/v1/admin/queues?per_page=1", "");
    let (_, second) = http(h, "GET", "/ojs/v1/admin/queues?per_page=1&page=2", "");
    assert_eq!(
        first["pagination"],
        json!({"total": 2, "page": 1, "per_page": 1})
    );
    let (a, b) = (&first["items"], &second["items"]);
    assert_eq!(
        (a.as_array().unwrap().len(), b.as_array().unwrap().len()),
        (1, 1)
    );
    assert_ne!(a[0]["name"], b[0]["name"]);
    let (_, past) = http(h, "GET", "/ojs/v1/admin/queues?per_page=1&page=3", "");
    assert_eq!(past["items"], json!([]));
    let (st, v) = http(
        h,
        "DELETE",
        "/ojs/v1/admin/queues/other/jobs",
        r#"{"states":["available"]}"#,
    );
    assert_eq!(
        (st, v["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
    let (st, _) = http(h, "GET", "/ojs/v1/admin/queues/nowhere", "");
    assert_eq!(st, 404);
}

#[test]
fn purge_releases_unique_keys() {
    let srv = Server::start();
    let mut c = srv.client();
    let job = test_job("uq", json!({"unique": {"keys": ["args"]}}));
    push_id(&mut c, &job);
    assert_eq!(c.push(&job).unwrap_err().code(), Some("DUPLICATE_JOB"));
    call_json(
        &mut c,
        r#"QUEUE PURGE uq {"states":["available"],"confirm":true}"#,
    );
    push_id(&mut c, &job);
}

#[test]
fn worker_list_shows_heartbeats_and_jobs() {
    let srv = Server::start();
    let mut c = srv.client();
    let hello = |wid: &str| {
        let opts = ojs_client::ConnectOptions {
            wid: Some(wid.to_string()),
            ..Default::default()
        };
        Client::connect_with(&srv.addr, &opts).expect("connect worker")
    };
    let mut w1 = hello("w-one");
    let _w2 = hello("w-two");
    let id = push_id(&mut c, &test_job("wl", json!({})));
    fetch_one(&mut w1, "wl");
    w1.beat("w-one", &[]).expect("BEAT");
    call_ok(&mut c, "WORKER QUIET w-two");
    let v = call_json(&mut c, "WORKERS");
    assert_eq!(v, call_json(&mut c, "WORKER LIST"));
    assert_eq!(v["total"], 2);
    let ws = v["workers"].as_array().expect("workers");
    assert_eq!(
        pick(
            &ws[0],
            &["id", "state", "active_jobs", "connected", "stale"]
        ),
        json!(["w-one", "running", 1, true, false])
    );
    assert_eq!(ws[0]["active_job_ids"], json!([id]));
    assert!(ts(&ws[0]["last_heartbeat_at"]) <= server_now(&mut c));
    assert_eq!(
        pick(&ws[1], &["id", "state", "active_jobs"]),
        json!(["w-two", "quiet", 0])
    );
    assert_eq!(
        v["summary"],
        json!({"total": 2, "running": 1, "quiet": 1, "terminate": 0, "stale": 0})
    );
    advance(&mut c, 20.0);
    let v = call_json(&mut c, "WORKERS");
    assert_eq!(v["summary"]["stale"], 2, "silent for more than 15 s");
    assert_eq!(err_code(&mut c, "WORKERS now"), "MALFORMED_COMMAND");
    assert_eq!(err_code(&mut c, "WORKER QUIET nobody"), "NOT_FOUND");

    let h = &srv.http_addr;
    let (st, v) = http(h, "GET", "/ojs/v1/admin/workers", "");
    assert_eq!((st, v["summary"]["total"].clone()), (200, json!(2)));
    let (st, v) = http(h, "GET", "/ojs/v1/admin/workers/w-one", "");
    assert_eq!((st, v["active_jobs"].clone()), (200, json!(1)));
    let (st, v) = http(h, "POST", "/ojs/v1/admin/workers/w-one/terminate", "");
    assert_eq!((st, v["directive"].clone()), (200, json!("terminate")));
    assert_eq!(
        w1.beat("w-one", &[]).expect("BEAT"),
        ojs_client::Directive::Terminate
    );
    let (st, _) = http(h, "GET", "/ojs/v1/admin/workers/nobody", "");
    assert_eq!(st, 404);
    let (st, _) = http(h, "POST", "/ojs/v1/admin/workers/nobody/quiet", "");
    assert_eq!(st, 404);
}

#[test]
fn dead_letters_are_pruned_by_age_and_count() {
    let srv = Server::start_with(&["--dead-retention", "60", "--dead-max", "3"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-prune");
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(make_dead(&mut c, &mut w, "pr", &format!("t.p{i}"), "E"));
        advance(&mut c, 1.0);
    }
    // the count limit keeps the three newest
    assert_eq!(
        dead_list(&mut c, json!({})).1,
        vec![ids[4].clone(), ids[3].clone(), ids[2].clone()]
    );
    assert_eq!(err_code(&mut c, &format!("JOB {}", ids[0])), "NOT_FOUND");
    // the age limit: 60 s after its discard a dead letter goes
    // ids[2], [3], [4] were discarded 3, 2 and 1 s ago: 57.5 s on, only ids[2] is over 60 s
    advance(&mut c, 57.5);
    let (n, left) = dead_list(&mut c, json!({}));
    assert_eq!(n, 2, "{left:?}");
    advance(&mut c, 5.0);
    assert_eq!(dead_list(&mut c, json!({})).0, 0);
    assert_eq!(
        call_json(&mut c, "DEAD STATS")["retention"]["max_age"],
        "PT1M"
    );
}

#[test]
fn jobs_list_by_queue_and_state_newest_first_and_the_overview() {
    let srv = Server::start();
    let mut c = srv.client();
    let ids: Vec<String> = (0..5)
        .map(|_| push_id(&mut c, &test_job("browse", json!({}))))
        .collect();
    push_id(&mut c, &test_job("elsewhere", json!({})));
    let mut w = srv.worker("w-browse");
    let taken = fetch_one(&mut w, "browse");
    w.ack(&id_of(&taken), None).unwrap();

    // Four still available, newest first, paged.
    let page = call_json(
        &mut c,
        r#"JOBS {"queue": "browse", "state": "available", "limit": 3}"#,
    );
    assert_eq!(page["total"], 4);
    let got: Vec<String> = page["jobs"].as_array().unwrap().iter().map(id_of).collect();
    let mut want: Vec<String> = ids
        .iter()
        .filter(|i| **i != id_of(&taken))
        .cloned()
        .collect();
    want.reverse();
    assert_eq!(got, want[..3]);
    let rest = call_json(
        &mut c,
        r#"JOBS {"queue": "browse", "state": "available", "offset": 3}"#,
    );
    assert_eq!(rest["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(id_of(&rest["jobs"][0]), want[3]);
    assert_eq!(
        call_json(&mut c, r#"JOBS {"state": "completed"}"#)["total"],
        1
    );
    assert_eq!(call_json(&mut c, "JOBS")["total"], 6);
    assert_eq!(call_json(&mut c, r#"JOBS {"queue": "nope"}"#)["total"], 0);
    assert_eq!(
        err_code(&mut c, r#"JOBS {"state": "lost"}"#),
        "MALFORMED_COMMAND"
    );

    let (status, v) = http(
        &srv.http_addr,
        "GET",
        "/ojs/v1/admin/jobs?queue=browse&state=available&per_page=2&page=2",
        "",
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["pagination"]["total"], 4);
    let got: Vec<String> = v["items"].as_array().unwrap().iter().map(id_of).collect();
    assert_eq!(got, want[2..4]);
    let (status, _) = http(&srv.http_addr, "GET", "/ojs/v1/admin/jobs?state=lost", "");
    assert_eq!(status, 400);

    // The overview counted 6 enqueued, 1 completed and one pickup, in its last bucket.
    let o = call_json(&mut c, "OVERVIEW");
    let points = o["points"].as_array().unwrap();
    assert_eq!(points.len(), 60);
    let sum = |k: &str| points.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (sum("enqueued"), sum("completed"), sum("failed")),
        (6, 1, 0)
    );
    assert_eq!(points.last().unwrap()["available"], 5);
    assert_eq!(o["pickup"]["samples"], 1);
    assert!(o["pickup"]["p99_ms"].is_u64());
    let (status, v) = http(&srv.http_addr, "GET", "/ojs/v1/admin/overview", "");
    assert_eq!(status, 200);
    assert_eq!(v["bucket_ms"], 5000);
}
