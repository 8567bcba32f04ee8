//! The admin UI's dashboard routes (issue 22, ojs-admin-api §10): aggregate statistics,
//! throughput history from the engine's minute and hour rings, and workflow paging by
//! `page`/`per_page`.

mod common;

use common::http::get;
use common::{advance, call_json, fetch_one, push_id, test_job, Server};
use serde_json::json;

#[test]
fn stats_and_their_history_count_what_happened() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    let mut w = srv.worker("w-stats");
    for _ in 0..5 {
        push_id(&mut c, &test_job("st", json!({})));
    }
    push_id(&mut c, &test_job("other", json!({})));
    for _ in 0..3 {
        let job = fetch_one(&mut w, "st");
        let id = job["id"].as_str().unwrap();
        w.call(&format!(r#"ACK {{"id":"{id}"}}"#)).unwrap();
    }
    let job = fetch_one(&mut w, "st");
    let id = job["id"].as_str().unwrap();
    let fail = format!(r#"FAIL {{"id":"{id}","error":{{"type":"boom","message":"x"}}}}"#);
    w.call(&fail).unwrap();

    let r = get(&a, "/ojs/v1/admin/stats");
    assert_eq!(r.status, 200, "{}", r.text());
    let s = r.json();
    assert_eq!(s["queues"], 2, "{s}");
    assert_eq!(s["workers"], 1, "{s}");
    assert_eq!(s["jobs"]["completed"], 3, "{s}");
    assert_eq!(s["jobs"]["available"], 2, "{s}");
    assert_eq!(s["jobs"]["retryable"], 1, "{s}");
    assert!(s["uptime_seconds"].is_u64(), "{s}");
    assert!(s["throughput"]["processed_per_minute"].is_u64(), "{s}");

    // Move past the current minute so its bucket is complete, then read the history.
    advance(&mut c, 61.0);
    let r = get(&a, "/ojs/v1/admin/stats/history?period=1m");
    assert_eq!(r.status, 200, "{}", r.text());
    let h = r.json();
    assert_eq!(h["period"], "1m");
    let data = h["data"].as_array().unwrap();
    let sum = |k: &str| data.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (sum("enqueued"), sum("processed"), sum("failed")),
        (6, 3, 1),
        "{h}"
    );
    assert!(data[0]["timestamp"].as_str().unwrap().ends_with('Z'), "{h}");
    // The same over an hour period, and over TCP.
    let h = get(&a, "/ojs/v1/admin/stats/history?period=1h").json();
    let data = h["data"].as_array().unwrap();
    assert_eq!(
        data.iter()
            .map(|p| p["processed"].as_u64().unwrap())
            .sum::<u64>(),
        3
    );
    let tcp = call_json(&mut c, r#"STATS HISTORY {"period":"1d"}"#);
    assert!(tcp["points"].is_array(), "{tcp}");
    // Refusals: an unknown period; a queue filter (the history is for all queues).
    assert_eq!(get(&a, "/ojs/v1/admin/stats/history?period=2m").status, 400);
    assert_eq!(get(&a, "/ojs/v1/admin/stats/history?queue=st").status, 400);
}

#[test]
fn workflows_are_paged_by_page_and_per_page() {
    let srv = Server::start();
    let a = srv.http_addr.clone();
    let mut c = srv.client();
    for i in 0..5 {
        let def = json!({"id": format!("wf-{i}"), "type": "chain",
            "steps": [{"type": "a.b", "args": [], "queue": "wfq"}]});
        call_json(&mut c, &format!("WORKFLOW CREATE {def}"));
    }
    let r = get(&a, "/ojs/v1/workflows?page=2&per_page=2");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let items = v
        .get("workflows")
        .or_else(|| v.get("items"))
        .and_then(|x| x.as_array())
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(items.len(), 2, "{v}");
    assert_eq!(get(&a, "/ojs/v1/workflows?page=0").status, 400);
}
