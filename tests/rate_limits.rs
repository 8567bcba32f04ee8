//! Queue rate limits (ojs-rate-limiting §7.2, conformance L4-RATE) over real sockets: a
//! concurrency cap, a sliding start window, the waiting FETCH served when a slot frees,
//! other queues unaffected, the limit kept across kill -9, and the HTTP admin route.

mod common;

use common::*;
use serde_json::{json, Value};

fn push_to(c: &mut ojs_client::Client, queue: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| push_id(c, &json!({"type": "r.l", "args": [i], "queue": queue})))
        .collect()
}

#[test]
fn concurrency_cap_holds_jobs_until_a_slot_frees() {
    let srv = Server::start();
    let mut c = srv.client();
    call_ok(&mut c, r#"QUEUE LIMIT capped {"concurrency": 2}"#);
    push_to(&mut c, "capped", 4);
    push_to(&mut c, "free", 1);
    let mut w = srv.client();
    let first = w.fetch_many(&["capped"], 10).expect("FETCH");
    assert_eq!(first.len(), 2, "the cap lets two start");
    // At the cap the queue is skipped and the next one named is served.
    let got = w.fetch(&["capped", "free"]).expect("FETCH").expect("a job");
    assert_eq!(got["queue"], "free");
    fetch_none(&mut w, "capped");
    let stats = call_json(&mut c, "QUEUE STATS capped");
    assert_eq!(stats["rate_limit"], json!({"concurrency": 2}), "{stats}");
    assert_eq!(stats["counts"]["available"], 2, "{stats}");
    // A FETCH waiting on the capped queue gets a job as soon as one finishes.
    let addr = srv.addr.clone();
    let waiter = std::thread::spawn(move || {
        let mut w2 = ojs_client::Client::connect(&addr).expect("connect");
        // The connection is handed back open: closing it would put its job back.
        let got = w2.fetch(&["capped"]).expect("FETCH");
        (w2, got)
    });
    wait_for_blocked_fetches(&mut c, 1);
    w.ack(&id_of(&first[0]), None).expect("ACK");
    let (_w2, handed) = waiter.join().unwrap();
    let handed = handed.expect("a job once a slot freed");
    assert_eq!(handed["queue"], "capped");
    // Lifting the limit releases the rest.
    call_ok(&mut c, "QUEUE LIMIT capped OFF");
    assert_eq!(w.fetch_many(&["capped"], 10).expect("FETCH").len(), 1);
}

#[test]
fn the_start_window_slides_with_the_clock_and_survives_kill_9() {
    let mut srv = Server::start();
    let mut c = srv.client();
    call_ok(
        &mut c,
        r#"QUEUE LIMIT windowed {"rate": {"limit": 2, "period": "PT60S"}}"#,
    );
    push_to(&mut c, "windowed", 5);
    let mut w = srv.client();
    assert_eq!(w.fetch_many(&["windowed"], 10).expect("FETCH").len(), 2);
    fetch_none(&mut w, "windowed");
    advance(&mut c, 61.0);
    assert_eq!(w.fetch_many(&["windowed"], 10).expect("FETCH").len(), 2);
    drop((c, w));
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let stats = call_json(&mut c, "QUEUE STATS windowed");
    assert_eq!(
        stats["rate_limit"],
        json!({"rate": {"limit": 2, "period": "PT1M"}}),
        "{stats}"
    );
    // The window restarts empty after a restart; the limit itself holds: of the four
    // jobs now waiting, two start.
    push_to(&mut c, "windowed", 3);
    let mut w = srv.client();
    let after: Vec<Value> = w.fetch_many(&["windowed"], 10).expect("FETCH");
    assert_eq!(after.len(), 2, "{after:?}");
}

#[test]
fn bad_limits_are_refused_and_http_sets_and_lifts_them() {
    let srv = Server::start();
    let mut c = srv.client();
    // A queue name neither dialect allows (`Bad` would be taken as a Faktory queue).
    let long = format!(r#"QUEUE LIMIT {} {{"concurrency": 1}}"#, "q".repeat(300));
    for bad in [
        r#"QUEUE LIMIT q {}"#,
        r#"QUEUE LIMIT q {"concurrency": -1}"#,
        r#"QUEUE LIMIT q {"rate": {"limit": 0, "period": "PT1S"}}"#,
        r#"QUEUE LIMIT q {"rate": {"limit": 5, "period": "P2D"}}"#,
        r#"QUEUE LIMIT q {"throttle": {"limit": 1, "period": "PT1S"}}"#,
        long.as_str(),
    ] {
        match c.call(bad).expect("reply") {
            ojs_client::Reply::Error { code, .. } => {
                assert!(code.starts_with("INVALID_"), "{bad}: {code}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    let a = &srv.http_addr;
    let path = "/ojs/v1/admin/queues/hq/rate-limit";
    let r = common::http::send(
        a,
        "PUT",
        path,
        r#"{"concurrency": 1, "rate": {"limit": 10, "period": "PT1S"}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["rate_limit"]["concurrency"], 1);
    let r = common::http::send(a, "GET", path, "");
    assert_eq!(
        r.json()["rate_limit"]["rate"],
        json!({"limit": 10, "period": "PT1S"})
    );
    let r = common::http::send(a, "GET", "/ojs/v1/queues/hq/stats", "");
    assert_eq!(r.json()["rate_limit"]["concurrency"], 1, "{}", r.text());
    let r = common::http::send(a, "PUT", path, r#"{"concurrency": "many"}"#);
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!("invalid_payload"))
    );
    let r = common::http::send(a, "DELETE", path, "");
    assert_eq!(r.status, 200);
    let r = common::http::send(a, "GET", path, "");
    assert!(r.json()["rate_limit"].is_null(), "{}", r.text());
}

#[test]
fn a_jobs_own_rate_limit_key_is_shared_across_queues() {
    let srv = Server::start();
    let mut c = srv.client();
    let keyed = |q: &str, n: i64| {
        json!({"type": "k.j", "args": [n], "queue": q,
            "rate_limit": {"key": "stripe-api", "concurrency": 1}})
    };
    let first = push_id(&mut c, &keyed("ka", 1));
    push_id(&mut c, &keyed("ka", 2));
    push_id(&mut c, &keyed("kb", 3));
    let free = push_id(&mut c, &json!({"type": "k.j", "args": [4], "queue": "ka"}));
    let mut w = srv.client();
    // One keyed job starts; the second keyed one is passed over for the free job behind it.
    let got: Vec<String> = w
        .fetch_many(&["ka"], 10)
        .expect("FETCH")
        .iter()
        .map(id_of)
        .collect();
    assert_eq!(got, vec![first.clone(), free]);
    // The key is shared with the other queue.
    fetch_none(&mut w, "kb");
    assert_eq!(state_of(&mut c, &first), "active");
    // Its slot frees on FAIL too (a retry later); then the next keyed job goes, in order.
    w.fail(&first, "boom", "x", &[]).expect("FAIL");
    let next = fetch_one(&mut w, "ka");
    assert_eq!(next["args"], json!([2]));
    // Bad policies are refused at PUSH.
    let bad = json!({"type": "k.j", "args": [], "rate_limit": {"concurrency": 1}});
    assert!(c.push(&bad).is_err());
}

#[test]
fn throttle_spaces_starts_and_http_takes_options_rate_limit() {
    let srv = Server::start();
    let a = &srv.http_addr;
    let opts = json!({"queue": "th", "rate_limit": {"key": "slow", "throttle": {"limit": 1, "period": "PT10S"}}});
    for n in 0..2 {
        let r = common::http::send(
            a,
            "POST",
            "/ojs/v1/jobs",
            &json!({"type": "t.h", "args": [n], "options": opts}).to_string(),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.json()["job"]["rate_limit"]["key"], "slow");
    }
    let mut c = srv.client();
    let mut w = srv.client();
    fetch_one(&mut w, "th");
    fetch_none(&mut w, "th");
    advance(&mut c, 11.0);
    let second = fetch_one(&mut w, "th");
    assert_eq!(second["args"], json!([1]));
    let r = common::http::send(
        a,
        "POST",
        "/ojs/v1/jobs",
        &json!({"type": "t.h", "args": [], "options": {"rate_limit": {"key": "x", "on_limit": "drop"}}}).to_string(),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].clone()),
        (400, json!("invalid_payload"))
    );
}
