//! Bulk admin commands do not stall the engine for everyone (issue 19, D4): a QUEUE PURGE
//! or MUTATE over many jobs is worked through in slices, other clients' commands are
//! served between them, and the reply comes when the whole operation is done; a MUTATE
//! glob with too many wildcards is refused before anything runs.

mod common;

use common::raw::Raw;
use common::{call_json, fetch_one, id_of, push_id, state_of, test_job, Server};
use ojs_client::Reply;
use serde_json::{json, Value};
use std::time::Instant;

fn push_many(c: &mut ojs_client::Client, queue: &str, n: usize, extra: Value) {
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        let jobs: Vec<Value> = (0..k).map(|_| test_job(queue, extra.clone())).collect();
        match c.call(&format!("PUSHB {}", Value::Array(jobs))).unwrap() {
            Reply::Bulk(_) => {}
            other => panic!("PUSHB: {other:?}"),
        }
        left -= k;
    }
}

#[test]
fn a_big_queue_purge_lets_other_clients_in_between_its_slices() {
    const JOBS: usize = 50_000;
    let srv = Server::start();
    let mut c = srv.client();
    push_many(&mut c, "big", JOBS, json!({}));

    // The purge runs on its own connection; the instant its reply arrives is kept.
    let mut admin = srv.client();
    let purge = std::thread::spawn(move || {
        let r = call_json(
            &mut admin,
            r#"QUEUE PURGE big {"states":["available"],"confirm":true}"#,
        );
        (r, Instant::now())
    });
    // Let the purge start, then a canary pushes, fetches and acknowledges a job.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut canary = srv.worker("canary-w");
    let id = push_id(&mut c, &test_job("canary", json!({})));
    let job = fetch_one(&mut canary, "canary");
    assert_eq!(id_of(&job), id);
    canary
        .call(&format!(r#"ACK {{"id":"{id}"}}"#))
        .expect("ACK");
    let canary_done = Instant::now();

    let (reply, purged_at) = purge.join().unwrap();
    assert_eq!(reply["purged_count"], JOBS, "{reply}");
    assert!(
        canary_done < purged_at,
        "the canary was served while the purge ran, not after it"
    );
    assert_eq!(state_of(&mut c, &id), "completed");
    let stats = call_json(&mut c, "QUEUE STATS big");
    assert_eq!(stats["counts"]["available"], 0, "{stats}");
}

/// A Faktory connection past HELLO.
fn faktory(addr: &str) -> Raw {
    Raw::hello(addr, &json!({"hostname": "h", "pid": 1, "v": 2}))
}

#[test]
fn mutate_in_slices_matches_exactly_and_a_pathological_glob_is_refused() {
    let srv = Server::start_with(&["--faktory-listen", "127.0.0.1:0"]);
    let mut c = srv.client();
    let mut f = faktory(&srv.faktory_addr);
    let at = "2099-01-01T00:00:00Z";
    // 3,000 scheduled jobs, every third holding "needle": many slices of work.
    let mut needles = Vec::new();
    let mut hay = Vec::new();
    for i in 0..3000 {
        let word = if i % 3 == 0 { "needle" } else { "hay" };
        let jid = format!("job-{i:05}");
        let job = json!({"jid": jid, "jobtype": "Mailer", "args": [word], "at": at});
        assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
        let id = ojsd::protocol::faktory::ojs_id(&jid);
        if i % 3 == 0 {
            needles.push(id)
        } else {
            hay.push(id)
        }
    }
    // 300 wildcards: refused, nothing changes.
    let evil = format!("{}zzzz", "*a".repeat(300));
    let cmd = json!({"cmd": "kill", "target": "scheduled", "filter": {"regexp": evil}});
    let e = f.call(&format!("MUTATE {cmd}"));
    assert!(e.starts_with("-ERR") && e.contains("wildcards"), "{e}");
    assert_eq!(state_of(&mut c, &needles[0]), "scheduled");

    let kill = r#"MUTATE {"cmd":"kill","target":"scheduled","filter":{"regexp":"*needle*"}}"#;
    assert_eq!(f.call(kill), "+OK");
    for id in needles.iter().step_by(97) {
        assert_eq!(state_of(&mut c, id), "discarded");
    }
    for id in hay.iter().step_by(97) {
        assert_eq!(state_of(&mut c, id), "scheduled");
    }
    let info = call_json(&mut c, "INFO");
    assert_eq!(info["queues"]["default"]["discarded"], 1000, "{info}");
    assert_eq!(info["queues"]["default"]["scheduled"], 2000, "{info}");
}

#[test]
fn queue_remove_in_slices_deletes_the_waiting_jobs_and_keeps_the_scheduled_one() {
    let srv = Server::start_with(&["--faktory-listen", "127.0.0.1:0"]);
    let mut c = srv.client();
    let mut f = faktory(&srv.faktory_addr);
    push_many(&mut c, "rq", 3000, json!({}));
    let later = push_id(
        &mut c,
        &test_job("rq", json!({"scheduled_at": "2099-01-01T00:00:00Z"})),
    );
    let other = push_id(&mut c, &test_job("keep", json!({})));
    // The Faktory name of the OJS queue "rq" is "rq".
    assert_eq!(f.call("QUEUE REMOVE rq"), "+OK");
    let stats = call_json(&mut c, "QUEUE STATS rq");
    assert_eq!(stats["counts"]["available"], 0, "{stats}");
    assert_eq!(stats["counts"]["scheduled"], 1, "{stats}");
    assert_eq!(state_of(&mut c, &later), "scheduled");
    assert_eq!(state_of(&mut c, &other), "available");
}
