//! Jobs are stored as a job record written at PUSH and a state record per transition; the
//! envelope clients see is composed from both. These tests pin that the bytes a client
//! reads are the same whether the job comes from the batch that changed it, from the
//! engine's cache, or from the store after a `kill -9`, on a real server over sockets.

mod common;

use common::*;
use ojs_client::{Client, Reply};
use serde_json::json;

/// The raw bytes of `line`'s bulk reply.
fn raw(c: &mut Client, line: &str) -> Vec<u8> {
    match c.call(line).expect(line) {
        Reply::Bulk(b) => b,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn envelopes_are_the_same_bytes_from_every_path_and_across_kill9() {
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-lean");
    let job = |q: &str| {
        json!({"type": "lean.check", "queue": q, "priority": -3, "timeout": 60,
               "args": ["é\"\\", 1.5, {"n": [1, 2e300]}], "meta": {"trace_id": "t"},
               "x_custom": {"kept": ["as", "is"]}, "expires_at": "2099-01-01T00:00:00+02:00"})
    };
    // A job that failed once, came back and completed with a result.
    let mut done = job("lean-done");
    done["retry"] = json!({"initial_interval": "PT1S", "jitter": false});
    let done = push_id(&mut c, &done);
    fetch_one(&mut w, "lean-done");
    let frames = ["frame 1".to_string(), "frame 2".to_string()];
    w.fail(&done, "flaky", "try again", &frames).unwrap();
    let retryable = raw(&mut c, &format!("JOB {done}"));
    advance(&mut c, 5.0);
    let fetched = raw(&mut w, "FETCH lean-done");
    assert_eq!(
        raw(&mut c, &format!("JOB {done}")),
        fetched,
        "the FETCH reply is the job as stored"
    );
    w.ack(&done, Some(&json!({"sent": true, "at": [1, 0.25]})))
        .unwrap();
    // One still waiting in its queue, one that failed for good.
    let waiting = push_id(&mut c, &job("lean-wait"));
    let mut dead = job("lean-dead");
    dead["retry"] = json!({"max_attempts": 1});
    let dead = push_id(&mut c, &dead);
    fetch_one(&mut w, "lean-dead");
    w.fail(&dead, "fatal", "no", &[]).unwrap();

    let ids = [&done, &waiting, &dead];
    let before: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| raw(&mut c, &format!("JOB {id}")))
        .collect();
    let v: serde_json::Value = serde_json::from_slice(&before[0]).unwrap();
    assert_eq!(
        (&v["state"], v["errors"].as_array().map(Vec::len)),
        (&json!("completed"), Some(1))
    );
    assert_eq!(v["result"], json!({"sent": true, "at": [1, 0.25]}));
    assert_eq!(v["x_custom"], json!({"kept": ["as", "is"]}));
    assert_ne!(retryable, before[0]);

    drop((c, w));
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    for (id, old) in ids.iter().zip(&before) {
        let new = raw(&mut c, &format!("JOB {id}"));
        assert_eq!(
            String::from_utf8_lossy(&new),
            String::from_utf8_lossy(old),
            "job {id} across kill -9"
        );
    }
    assert_eq!(dead_ids(&mut c), vec![dead.clone()]);
    // And they still change and read back: the waiting job runs, the dead one retries.
    let mut w = srv.worker("w-lean-2");
    assert_eq!(id_of(&fetch_one(&mut w, "lean-wait")), waiting);
    w.ack(&waiting, None).unwrap();
    call_ok(&mut c, &format!("DEAD RETRY {dead}"));
    let again = fetch_one(&mut w, "lean-dead");
    assert_eq!(
        (again["attempt"].clone(), again.get("errors")),
        (json!(1), None)
    );
    assert_eq!(again["args"], json!(["é\"\\", 1.5, {"n": [1, 2e300]}]));
}

/// `--job-cache-mb 0`: no job is kept in memory, so every FETCH and ACK reads the job from
/// the store; what clients see is the same.
#[test]
fn without_the_job_cache_jobs_are_read_from_the_store_and_the_same() {
    let srv = Server::start_with(&["--job-cache-mb", "0"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-nocache");
    let ids: Vec<String> = (0..3)
        .map(|i| {
            push_id(
                &mut c,
                &json!({"type": "nc", "queue": "nc", "args": [i, "é"]}),
            )
        })
        .collect();
    let one = raw(&mut w, "FETCH nc");
    let v: serde_json::Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(v["id"], json!(ids[0]));
    assert_eq!(raw(&mut c, &format!("JOB {}", ids[0])), one);
    let two: serde_json::Value = serde_json::from_slice(&raw(&mut w, "FETCH nc COUNT 5")).unwrap();
    let got: Vec<&str> = two
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[1].as_str(), ids[2].as_str()]);
    for (i, id) in ids.iter().enumerate() {
        w.ack(id, Some(&json!({"n": i}))).unwrap();
        let done: serde_json::Value =
            serde_json::from_slice(&raw(&mut c, &format!("JOB {id}"))).unwrap();
        assert_eq!(
            (&done["state"], &done["result"], &done["args"][1]),
            (&json!("completed"), &json!({"n": i}), &json!("é"))
        );
    }
}
