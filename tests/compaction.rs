//! Disk is given back after a large prune (issue 20): once the engine has deleted
//! `--compact-after-deletes` job records, and at least as many as are left, it compacts the
//! jobs keyspace on a thread of its own. What is left stays readable, across a restart.

mod common;

use common::http;
use common::{advance, ids_of, push_id, state_of, test_job, wait_for, Server};
use serde_json::json;
use std::time::Duration;

fn compactions(srv: &Server) -> u64 {
    let text = http::get(&srv.http_addr, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("ojsd_store_compactions_total "))
        .expect("the compaction counter is on /metrics")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_large_prune_is_compacted_and_what_is_left_survives() {
    let mut srv = Server::start_with(&["--compact-after-deletes", "1000", "--retention", "1"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-compact");
    let kept = push_id(&mut c, &test_job("kept", json!({"k": 1})));
    assert_eq!(compactions(&srv), 0);
    for _ in 0..4 {
        c.push_bulk(&vec![
            test_job("churn", json!({"pad": "x".repeat(200)}));
            500
        ])
        .expect("PUSHB");
        let jobs = w.fetch_many(&["churn"], 500).expect("FETCH");
        for id in ids_of(&jobs) {
            w.ack(&id, None).expect("ACK");
        }
    }
    // Past the retention: the 2,000 completed jobs (4,000 records) are pruned, more than
    // the threshold and than what is left.
    advance(&mut c, 5.0);
    wait_for(Duration::from_secs(30), "a compaction", || {
        (compactions(&srv) >= 1).then_some(())
    });
    assert_eq!(state_of(&mut c, &kept), "available");
    drop((c, w));
    srv.restart();
    let mut c = srv.client();
    let job = c.job(&kept).expect("JOB");
    assert_eq!(
        (job["state"].as_str(), &job["k"]),
        (Some("available"), &json!(1))
    );
}

#[test]
fn zero_turns_it_off() {
    let srv = Server::start_with(&["--compact-after-deletes", "0", "--retention", "1"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-off");
    c.push_bulk(&vec![test_job("churn", json!({})); 800])
        .expect("PUSHB");
    for id in ids_of(&w.fetch_many(&["churn"], 800).expect("FETCH")) {
        w.ack(&id, None).expect("ACK");
    }
    advance(&mut c, 5.0);
    wait_for(Duration::from_secs(10), "the prune", || {
        let n = c.info().ok()?["totals"]["jobs"].as_u64()?;
        (n == 0).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(compactions(&srv), 0);
}
