//! Issue 19, over real sockets on both TCP dialects and HTTP: D8 (HELLO fields accepted
//! whatever their type), D9 (Faktory names limited after their escaping, jids not at
//! all), D5 (jobs of a connection without a `wid` held until their visibility timeout
//! after it closed) and D6 (ownership bypassed through another front end).

mod common;

use common::raw::Raw;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn start() -> Server {
    Server::start_with(&["--faktory-listen", "127.0.0.1:0"])
}

#[test]
fn d8_hello_fields_of_the_wrong_type_are_refused_on_both_ports() {
    let s = start();
    for (hello, field) in [
        (
            json!({"v": "x", "wid": 7}),
            "v must be a supported protocol version",
        ),
        (json!({"v": 999}), "v must be a supported protocol version"),
        (
            json!({"v": 2, "wid": ["a"]}),
            "wid must be a non-empty string",
        ),
        (json!({"v": 2, "wid": ""}), "wid must be a non-empty string"),
        (
            json!({"v": 2, "wid": "w".repeat(300)}),
            "wid must be a non-empty string",
        ),
        (
            json!({"labels": "notalist", "pid": 1}),
            "labels must be an array of",
        ),
        (json!({"labels": [], "pid": "x"}), "pid must be an integer"),
        (json!({"v": 2, "hostname": 1}), "hostname must be a string"),
    ] {
        let mut ojs = Raw::open(&s.addr);
        let e = ojs.call(&format!("HELLO {hello}"));
        assert!(
            e.starts_with("-ERR MALFORMED_COMMAND HELLO: ") && e.contains(field),
            "OJS port, {hello}: {e}"
        );
        // Refused, not half-accepted: the connection is still before HELLO.
        assert!(ojs.call("INFO").starts_with("-ERR HELLO_REQUIRED"));
        let mut fak = Raw::open(&s.faktory_addr);
        let e = fak.call(&format!("HELLO {hello}"));
        assert!(
            e.starts_with("-ERR HELLO: ") && e.contains(field),
            "Faktory port, {hello}: {e}"
        );
    }
    // What the real clients send is accepted (faktory-rs, faktory_worker_node and the
    // Python libraries: hostname, wid, pid, labels, v; ojs_client the same).
    let real = json!({"hostname": "host-1", "wid": "6c9f1b2a7d3e", "pid": 4242,
        "labels": ["rust", "golang-compat"], "v": 2});
    Raw::hello(&s.addr, &real);
    let mut fak = Raw::hello(&s.faktory_addr, &real);
    // And a worker is a worker: its BEAT is answered as one.
    assert_eq!(fak.call(r#"BEAT {"wid":"6c9f1b2a7d3e"}"#), "+OK");
    let mut c = s.client();
    let workers = call_json(&mut c, "WORKERS");
    assert!(workers.to_string().contains("6c9f1b2a7d3e"), "{workers}");
}

#[test]
fn d9_faktory_names_are_limited_as_written_and_jids_are_bounded() {
    let mut s = start();
    let mut f = Raw::hello(&s.faktory_addr, &json!({"v": 2, "wid": "w-d9"}));
    // The longest names, all capitals (three bytes each once escaped): accepted, stored,
    // fetched back byte for byte, also after a restart.
    let queue = "Q".repeat(128);
    let jobtype = "T".repeat(255);
    let job = json!({"jid": "long-names-1", "jobtype": jobtype, "queue": queue, "args": []});
    assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
    let info: Value = serde_json::from_str(&f.call("INFO")).unwrap();
    assert_eq!(info["faktory"]["queues"][&queue], 1, "{info}");
    drop(f);
    s.restart();
    let mut f = Raw::hello(&s.faktory_addr, &json!({"v": 2, "wid": "w-d9"}));
    let got: Value = serde_json::from_str(&f.call(&format!("FETCH {queue}"))).unwrap();
    assert_eq!(
        (&got["jid"], &got["jobtype"], &got["queue"]),
        (&json!("long-names-1"), &json!(jobtype), &json!(queue))
    );
    assert_eq!(f.call(r#"ACK {"jid":"long-names-1"}"#), "+OK");
    // One byte more is refused, naming the limit.
    for (job, says) in [
        (
            json!({"jid": "long-names-2", "jobtype": "T", "queue": "Q".repeat(129), "args": []}),
            "is 129 bytes; the limit is 128",
        ),
        (
            json!({"jid": "long-names-3", "jobtype": "T".repeat(256), "args": []}),
            "is 256 bytes; the limit is 255",
        ),
    ] {
        let e = f.call(&format!("PUSH {job}"));
        assert!(e.starts_with("-ERR ") && e.contains(says), "{e}");
    }
    let e = f.call(&format!("FETCH {}", "Q".repeat(129)));
    assert!(e.contains("the limit is 128"), "{e}");
    // jids: 255 bytes go in; a megabyte, 256 bytes or a space do not.
    let ok = "j".repeat(255);
    let push = |jid: &str| json!({"jid": jid, "jobtype": "J", "args": []}).to_string();
    assert_eq!(f.call(&format!("PUSH {}", push(&ok))), "+OK");
    for bad in [
        "j".repeat(1 << 20),
        "j".repeat(256),
        "has a space".to_string(),
    ] {
        let e = f.call(&format!("PUSH {}", push(&bad)));
        assert!(
            e.starts_with("-ERR jid must be a non-empty string of at most 255 bytes"),
            "{e:.200}"
        );
        let e = f.call(&format!("ACK {}", json!({ "jid": bad })));
        assert!(e.starts_with("-ERR ACK: jid must be"), "{e:.200}");
    }
    let mut c = s.client();
    assert_eq!(
        state_of(&mut c, &ojsd::protocol::faktory::ojs_id(&ok)),
        "available"
    );
}

fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let r = common::http::send(addr, "POST", path, &body.to_string());
    (r.status, r.json())
}

/// PUSH an OJS job to `queue` and let worker `w` fetch it; its id.
fn held_by(c: &mut ojs_client::Client, w: &mut ojs_client::Client, queue: &str) -> String {
    let id = push_id(c, &json!({"type": "t.d6", "queue": queue, "args": []}));
    assert_eq!(id_of(&fetch_one(w, queue)), id);
    id
}

#[test]
fn d6_one_ownership_rule_for_every_front_end() {
    let s = start();
    let mut c = s.client();
    let mut owner = s.worker("ojs-owner");

    // 1. The Faktory port may not complete a job an OJS worker holds: not from another
    // worker, not from a connection without a wid. The owner's own ACK still works.
    let id = held_by(&mut c, &mut owner, "d6a");
    let ack = format!("ACK {}", json!({ "jid": id }));
    for hello in [json!({"v": 2, "wid": "fk-other"}), json!({"v": 2})] {
        let mut f = Raw::hello(&s.faktory_addr, &hello);
        let e = f.call(&ack);
        assert!(
            e.starts_with("-ERR ") && e.contains("is reserved by worker ojs-owner"),
            "{hello}: {e}"
        );
        let fail = format!(
            "FAIL {}",
            json!({"jid": id, "errtype": "E", "message": "m"})
        );
        assert!(f.call(&fail).contains("is reserved by worker ojs-owner"));
    }
    assert_eq!(state_of(&mut c, &id), "active");
    owner.ack(&id, None).expect("the owner's ACK");
    assert_eq!(state_of(&mut c, &id), "completed");
    // Faktory's ACK by jid from another connection of the same worker id is its holder's.
    let mut f1 = Raw::hello(&s.faktory_addr, &json!({"v": 2, "wid": "fk-w"}));
    let mut f2 = Raw::hello(&s.faktory_addr, &json!({"v": 2, "wid": "fk-w"}));
    let push = json!({"jid": "d6-same-wid-1", "jobtype": "J", "args": [], "queue": "d6f"});
    assert_eq!(f1.call(&format!("PUSH {push}")), "+OK");
    let got: Value = serde_json::from_str(&f1.call("FETCH d6f")).unwrap();
    assert_eq!(got["jid"], "d6-same-wid-1");
    assert_eq!(f2.call(r#"ACK {"jid":"d6-same-wid-1"}"#), "+OK");

    // 2. An HTTP NACK (or ACK) that names no worker is not its holder's: 409 NOT_OWNER.
    let id = held_by(&mut c, &mut owner, "d6b");
    let nack = json!({"job_id": id, "error": {"code": "e", "message": "m"}});
    for (path, body) in [
        ("/ojs/v1/workers/nack", nack.clone()),
        ("/ojs/v1/workers/ack", json!({ "job_id": id })),
    ] {
        let (status, body) = post(&s.http_addr, path, body);
        assert_eq!(
            (status, &body["error"]["details"]["ojs_code"]),
            (409, &json!("NOT_OWNER")),
            "{path}: {body}"
        );
    }
    assert_eq!(state_of(&mut c, &id), "active");
    let mut named = nack;
    named["worker_id"] = json!("ojs-owner");
    let (status, body) = post(&s.http_addr, "/ojs/v1/workers/nack", named);
    assert_eq!(
        (status, &body["state"]),
        (200, &json!("retryable")),
        "{body}"
    );
    // The OJS port refuses it the same way.
    let id = held_by(&mut c, &mut owner, "d6c");
    let mut other = s.worker("ojs-other");
    let e = other.ack(&id, None).unwrap_err().to_string();
    assert!(e.contains("NOT_OWNER"), "{e}");

    // 3. A Faktory ACK of a job never fetched is an error, not +OK, and changes nothing.
    let mut f = Raw::hello(&s.faktory_addr, &json!({"v": 2, "wid": "fk-w"}));
    let push = json!({"jid": "d6-never-fetched", "jobtype": "J", "args": [], "queue": "d6n"});
    assert_eq!(f.call(&format!("PUSH {push}")), "+OK");
    let e = f.call(r#"ACK {"jid":"d6-never-fetched"}"#);
    assert!(
        e.starts_with("-ERR ") && e.contains("ACK needs a job that is active"),
        "{e}"
    );
    let never = ojsd::protocol::faktory::ojs_id("d6-never-fetched");
    assert_eq!(state_of(&mut c, &never), "available");
    assert_eq!(
        f.call(r#"ACK {"jid":"d6-never-pushed"}"#),
        "-ERR Job not found"
    );
}

/// `FETCH <queue> COUNT 1000` on a raw command line: the jobs' ids.
fn fetch_many(c: &mut ojs_client::Client, queue: &str) -> Vec<String> {
    match c.call(&format!("FETCH {queue} COUNT 1000")).expect("FETCH") {
        ojs_client::Reply::Bulk(b) => {
            let jobs: Vec<Value> = serde_json::from_slice(&b).expect("jobs");
            ids_of(&jobs)
        }
        ojs_client::Reply::Null => Vec::new(),
        other => panic!("FETCH COUNT: {other:?}"),
    }
}

#[test]
fn d5_jobs_of_a_connection_without_a_wid_go_back_when_it_closes() {
    let s = start();
    let mut c = s.client();
    let job = json!({"type": "t.d5", "queue": "grab", "args": []});
    for _ in 0..2 {
        let batch: Vec<Value> = (0..1000).map(|_| job.clone()).collect();
        c.call(&format!("PUSHB {}", Value::Array(batch)))
            .expect("PUSHB");
    }
    let mut grabber = s.client();
    let mut held = fetch_many(&mut grabber, "grab");
    held.extend(fetch_many(&mut grabber, "grab"));
    assert_eq!(held.len(), 2000);
    assert_eq!(c.info().unwrap()["queues"]["grab"]["active"], 2000);
    drop(grabber);
    // Another client gets the same jobs within a second or two, not after 1800 s.
    let mut other = s.client();
    let mut again: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while again.len() < 2000 && std::time::Instant::now() < deadline {
        again.extend(fetch_many(&mut other, "grab"));
    }
    again.sort();
    held.sort();
    assert_eq!(again, held, "every job came back, and only those");
    // The attempt counted (PROTOCOL.md §5.4), with the reason in the job's errors.
    let j = c.job(&held[0]).unwrap();
    assert_eq!((&j["state"], &j["attempt"]), (&json!("active"), &json!(2)));
    assert_eq!(j["errors"][0]["type"], "connection_closed", "{j}");

    // A worker (with a wid) keeps today's semantics: its jobs wait for its heartbeats.
    let id = push_id(
        &mut c,
        &json!({"type": "t.d5", "queue": "kept", "args": []}),
    );
    let mut w = s.worker("w-d5");
    assert_eq!(id_of(&fetch_one(&mut w, "kept")), id);
    drop(w);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(state_of(&mut c, &id), "active");
    let mut w = s.worker("w-d5");
    w.ack(&id, None)
        .expect("its worker's ACK after a reconnect");
}
