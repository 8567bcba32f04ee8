//! /metrics and the queue listings do not grow with every name a client ever used (issue
//! 19, D3): at most `--max-metric-series` (job type, queue) pairs and queues get series of
//! their own, the rest are summed under "_other"; `--max-queues` refuses one queue more
//! with QUEUE_FULL; a queue that has held nothing for 10 minutes is forgotten, with its
//! series, and its slot serves a new name.

mod common;

use common::http;
use common::{advance, call_json, err_code, push_id, test_job, wait_for, Server};
use ojs_client::Reply;
use serde_json::json;
use std::time::Duration;

fn metrics(srv: &Server) -> String {
    http::get(&srv.http_addr, "/metrics").text()
}

/// The lines of one metric, without its HELP and TYPE.
fn lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .collect()
}

fn value(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn metric_series_past_the_bound_are_summed_under_other() {
    let srv = Server::start_with(&["--max-metric-series", "5"]);
    let mut c = srv.client();
    for i in 0..20 {
        let job = json!({"type": format!("t.n{}", i % 4), "queue": format!("q{i}"), "args": []});
        push_id(&mut c, &job);
    }
    let text = metrics(&srv);
    let enqueued = lines(&text, "ojs_jobs_enqueued_total");
    assert_eq!(enqueued.len(), 6, "5 pairs and _other: {enqueued:?}");
    assert_eq!(enqueued.iter().map(|l| value(l)).sum::<u64>(), 20);
    let other = enqueued
        .iter()
        .find(|l| l.contains(r#"job_type="_other",queue="_other""#))
        .expect("an _other series");
    assert_eq!(value(other), 15);
    // Queue gauges: the 5 fullest queues, the rest summed.
    let depth = lines(&text, "ojs_queue_depth");
    assert_eq!(depth.len(), 6, "{depth:?}");
    assert_eq!(depth.iter().map(|l| value(l)).sum::<u64>(), 20);
    assert!(depth.iter().any(|l| l.contains(r#"queue="_other""#)));
    // Histograms follow the same pairs.
    let counts = lines(&text, "ojs_jobs_duration_ms_count");
    assert_eq!(counts.len(), 6, "{counts:?}");
}

#[test]
fn max_queues_refuses_one_more_until_an_idle_queue_is_forgotten() {
    let srv = Server::start_with(&["--max-queues", "10"]);
    let mut c = srv.client();
    for i in 0..10 {
        push_id(&mut c, &test_job(&format!("q{i}"), json!({})));
    }
    let more = format!("PUSH {}", test_job("one-more", json!({})));
    assert_eq!(err_code(&mut c, &more), "QUEUE_FULL");
    // A queue already known still takes jobs.
    push_id(&mut c, &test_job("q3", json!({})));

    // Empty nine of them; they are forgotten once they have held nothing for 10 minutes
    // (the engine looks about once a second).
    for i in 0..10 {
        if i != 3 {
            let purge = format!(r#"QUEUE PURGE q{i} {{"states":["available"],"confirm":true}}"#);
            call_json(&mut c, &purge);
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    advance(&mut c, 601.0);
    let id = wait_for(
        Duration::from_secs(10),
        "an idle queue forgotten",
        || match c.call(&more).unwrap() {
            Reply::Bulk(b) => Some(serde_json::from_slice::<serde_json::Value>(&b).unwrap()),
            Reply::Error { code, .. } if code == "QUEUE_FULL" => None,
            other => panic!("{other:?}"),
        },
    );
    assert_eq!(id["queue"], "one-more");
    let list = call_json(&mut c, "QUEUE LIST");
    let names: Vec<&str> = list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["one-more", "q3"], "{list}");
    let text = metrics(&srv);
    let depth = lines(&text, "ojs_queue_depth");
    assert_eq!(depth.len(), 2, "{depth:?}");
    let enqueued = lines(&text, "ojs_jobs_enqueued_total");
    assert!(
        enqueued
            .iter()
            .all(|l| l.contains("q3") || l.contains("one-more")),
        "the forgotten queues' series are gone: {enqueued:?}"
    );
    // A forgotten queue comes back when named again, with nothing in it.
    push_id(&mut c, &test_job("q0", json!({})));
    let stats = call_json(&mut c, "QUEUE STATS q0");
    assert_eq!(stats["counts"]["available"], 1, "{stats}");
}
