//! Unique jobs (ojs-unique-jobs) over real sockets: each `on_conflict` policy, each key
//! dimension, the period, release when the holder leaves the counted states, concurrent
//! pushes, PUSHB all-or-nothing, and the key index surviving restarts.

mod common;

use common::*;
use ojs_client::{Client, Error};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};

/// A job of `jtype` with `args` and a unique policy.
fn ujob(jtype: &str, args: Value, unique: Value) -> Value {
    json!({"type": jtype, "args": args, "unique": unique})
}

/// PUSH that must be refused as a duplicate; returns the message.
fn dup_message(c: &mut Client, job: &Value) -> String {
    match c.push(job) {
        Err(Error::Server { code, message }) if code == "DUPLICATE_JOB" => message,
        other => panic!("expected DUPLICATE_JOB for {job}, got {other:?}"),
    }
}

/// The existing job id a DUPLICATE_JOB message names (`job <id> is <state> ...`).
fn existing_id(message: &str) -> String {
    message.split_whitespace().nth(1).unwrap_or("").to_string()
}

fn available(c: &mut Client, queue: &str) -> u64 {
    c.info().expect("INFO")["queues"][queue]["available"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn reject_names_the_existing_job() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let u = json!({"keys": ["type", "args"]});
    let first = push_id(&mut c, &ujob("u.reject", json!([1]), u.clone()));
    let msg = dup_message(&mut c, &ujob("u.reject", json!([1]), u.clone()));
    assert_eq!(existing_id(&msg), first, "{msg}");
    assert!(msg.contains("available"), "{msg}");
    assert!(
        msg.contains("unique key (") && msg.len() < 300,
        "the key is shown: {msg}"
    );
    // reject is the default
    let plain = json!({"keys": ["args"]});
    assert_eq!(
        existing_id(&dup_message(&mut c, &ujob("u.reject", json!([1]), plain))),
        first
    );
    push_id(&mut c, &ujob("u.reject", json!([2]), u));
    assert_eq!(available(&mut c, "default"), 2);
}

#[test]
fn ignore_answers_with_the_existing_job() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let u = json!({"on_conflict": "ignore"});
    let first = c
        .push(&ujob("u.ignore", json!([1]), u.clone()))
        .expect("PUSH");
    assert!(first.get("deduplicated").is_none());
    let again = c.push(&ujob("u.ignore", json!([2]), u)).expect("PUSH");
    assert_eq!(id_of(&again), id_of(&first));
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["args"], json!([1]), "the existing job, unchanged");
    assert_eq!(available(&mut c, "default"), 1);
    let stored = c.job(&id_of(&first)).expect("JOB");
    assert!(
        stored.get("deduplicated").is_none(),
        "the flag is not stored"
    );
}

#[test]
fn replace_cancels_the_old_job() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let u = json!({"keys": ["args"], "args_keys": ["user"], "on_conflict": "replace"});
    let old = push_id(
        &mut c,
        &ujob("u.replace", json!([{"user": 7, "v": 1}]), u.clone()),
    );
    let new = c
        .push(&ujob("u.replace", json!([{"user": 7, "v": 2}]), u.clone()))
        .expect("PUSH");
    assert_ne!(id_of(&new), old);
    assert_eq!(new["state"], "available");
    assert_eq!(state_of(&mut c, &old), "cancelled");
    assert_eq!(available(&mut c, "default"), 1);

    // An active holder is never replaced.
    let mut w = srv.worker("w-r");
    let got = fetch_one(&mut w, "default");
    assert_eq!(id_of(&got), id_of(&new));
    let msg = dup_message(&mut c, &ujob("u.replace", json!([{"user": 7, "v": 3}]), u));
    assert_eq!(existing_id(&msg), id_of(&new));
    assert!(msg.contains("active"), "{msg}");
    assert_eq!(state_of(&mut c, &id_of(&new)), "active");
}

#[test]
fn replace_except_schedule_keeps_the_time() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let now = server_now(&mut c);
    let at1 = rfc3339(now + chrono::Duration::hours(1));
    let at2 = rfc3339(now + chrono::Duration::hours(2));
    let u = json!({"on_conflict": "replace_except_schedule"});
    let mut j1 = ujob("u.digest", json!(["a"]), u.clone());
    j1["scheduled_at"] = json!(at1);
    let old = push_id(&mut c, &j1);
    let mut j2 = ujob("u.digest", json!(["a", "b"]), u);
    j2["scheduled_at"] = json!(at2);
    let new = c.push(&j2).expect("PUSH");
    assert_eq!(state_of(&mut c, &old), "cancelled");
    assert_eq!(new["args"], json!(["a", "b"]), "the new arguments");
    assert_eq!(new["scheduled_at"], json!(at1), "the old schedule");
    assert_eq!(new["state"], "scheduled");
}

#[test]
fn each_key_dimension() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    // type only (the default): other args and queues still collide; other types do not
    let t = json!({});
    let a = push_id(&mut c, &ujob("u.t", json!([1]), t.clone()));
    let mut other_q = ujob("u.t", json!([2]), t.clone());
    other_q["queue"] = json!("elsewhere");
    assert_eq!(existing_id(&dup_message(&mut c, &other_q)), a);
    push_id(&mut c, &ujob("u.t2", json!([1]), t));

    // queue
    let q = json!({"keys": ["type", "queue"]});
    let mut qa = ujob("u.q", json!([]), q.clone());
    qa["queue"] = json!("qa");
    let mut qb = qa.clone();
    qb["queue"] = json!("qb");
    push_id(&mut c, &qa);
    push_id(&mut c, &qb);
    dup_message(&mut c, &qa);

    // all of args, canonical: key order and 1 vs 1.0 do not matter
    let all = json!({"keys": ["args"]});
    push_id(
        &mut c,
        &ujob("u.a", json!([{"x": 1, "y": [1, 2]}]), all.clone()),
    );
    dup_message(
        &mut c,
        &ujob("u.a", json!([{"y": [1, 2], "x": 1.0}]), all.clone()),
    );
    push_id(&mut c, &ujob("u.a", json!([{"x": 2, "y": [1, 2]}]), all));

    // selected keys of the first argument, and positions for plain arguments
    let sel = json!({"keys": ["args"], "args_keys": ["user_id"]});
    push_id(
        &mut c,
        &ujob("u.s", json!([{"user_id": 42, "tpl": "a"}]), sel.clone()),
    );
    dup_message(
        &mut c,
        &ujob("u.s", json!([{"user_id": 42, "tpl": "b"}]), sel.clone()),
    );
    push_id(
        &mut c,
        &ujob("u.s", json!([{"user_id": 43, "tpl": "a"}]), sel),
    );
    let pos = json!({"keys": ["args"], "args_keys": ["0"]});
    push_id(&mut c, &ujob("u.p", json!(["ana@x", "hi"]), pos.clone()));
    dup_message(&mut c, &ujob("u.p", json!(["ana@x", "bye"]), pos.clone()));
    push_id(&mut c, &ujob("u.p", json!(["bob@x", "hi"]), pos));

    // meta keys
    let m = json!({"keys": ["meta"], "meta_keys": ["tenant"]});
    let mut m1 = ujob("u.m", json!([]), m.clone());
    m1["meta"] = json!({"tenant": "acme", "trace_id": "t1"});
    push_id(&mut c, &m1);
    let mut m2 = m1.clone();
    m2["meta"] = json!({"tenant": "acme", "trace_id": "t2"});
    dup_message(&mut c, &m2);
    m2["meta"] = json!({"tenant": "globex", "trace_id": "t2"});
    push_id(&mut c, &m2);
}

#[test]
fn period_expiry_frees_the_key() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let u = json!({"period": "PT10S"});
    let first = push_id(&mut c, &ujob("u.period", json!([]), u.clone()));
    advance(&mut c, 9.0);
    assert_eq!(
        existing_id(&dup_message(
            &mut c,
            &ujob("u.period", json!([]), u.clone())
        )),
        first
    );
    advance(&mut c, 1.5);
    let second = push_id(&mut c, &ujob("u.period", json!([]), u.clone()));
    assert_eq!(
        state_of(&mut c, &first),
        "available",
        "the holder is untouched"
    );
    // the period runs from the newest holder's created_at
    assert_eq!(
        existing_id(&dup_message(&mut c, &ujob("u.period", json!([]), u))),
        second
    );
}

#[test]
fn release_when_the_holder_leaves_the_counted_states() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-rel");
    let u = json!({"keys": ["args"]});
    // The key ignores the queue; each step uses its own queue so FETCH order is obvious.
    let job = |n: i64, q: &str| {
        let mut j = ujob("u.rel", json!([n]), u.clone());
        j["queue"] = json!(q);
        j
    };

    // completion releases it; active still counts
    let a = push_id(&mut c, &job(1, "rel-a"));
    fetch_one(&mut w, "rel-a");
    assert_eq!(existing_id(&dup_message(&mut c, &job(1, "rel-a"))), a);
    w.ack(&a, None).expect("ACK");
    push_id(&mut c, &job(1, "rel-a"));

    // retryable still holds it; discarded releases it
    let mut retry_job = job(2, "rel-r");
    retry_job["retry"] = json!({"max_attempts": 2, "initial_interval": "PT1S", "jitter": false});
    let r = push_id(&mut c, &retry_job);
    fetch_and_fail(&mut w, "rel-r", &r, 1, "boom");
    assert_eq!(state_of(&mut c, &r), "retryable");
    assert_eq!(existing_id(&dup_message(&mut c, &job(2, "rel-r"))), r);
    advance(&mut c, 2.0);
    fetch_and_fail(&mut w, "rel-r", &r, 2, "boom");
    assert_eq!(state_of(&mut c, &r), "discarded");
    let r2 = push_id(&mut c, &job(2, "rel-r"));

    // a cancelled holder releases it
    c.cancel(&r2).expect("CANCEL");
    let r3 = push_id(&mut c, &job(2, "rel-r"));

    // a dead letter whose key was taken meanwhile cannot be retried
    let msg = match c.call(&format!("DEAD RETRY {r}")).expect("call") {
        ojs_client::Reply::Error { code, message } if code == "DUPLICATE_JOB" => message,
        other => panic!("{other:?}"),
    };
    assert_eq!(existing_id(&msg), r3);
    assert_eq!(state_of(&mut c, &r), "discarded");

    // ... and a policy that counts `completed` keeps the key after completion
    let done = json!({"keys": ["args"], "states": ["available", "active", "completed"]});
    let mut dj = ujob("u.done", json!([]), done);
    dj["queue"] = json!("rel-d");
    let d = push_id(&mut c, &dj);
    assert_eq!(id_of(&fetch_one(&mut w, "rel-d")), d);
    w.ack(&d, None).expect("ACK");
    assert_eq!(existing_id(&dup_message(&mut c, &dj)), d);
}

#[test]
fn concurrent_pushes_accept_exactly_one() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    const N: usize = 24;
    let barrier = Arc::new(Barrier::new(N));
    let job = ujob("u.race", json!([{"order": 1}]), json!({"keys": ["args"]}));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let addr = srv.addr.clone();
            let barrier = barrier.clone();
            let job = job.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr).expect("connect");
                barrier.wait();
                c.push(&job)
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let accepted: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(id_of))
        .collect();
    assert_eq!(accepted.len(), 1, "{results:?}");
    for r in &results {
        match r {
            Ok(_) => {}
            Err(Error::Server { code, message }) => {
                assert_eq!(code, "DUPLICATE_JOB");
                assert_eq!(existing_id(message), accepted[0]);
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut c = srv.client();
    assert_eq!(available(&mut c, "default"), 1);
}

#[test]
fn pushb_is_all_or_nothing_with_unique_jobs() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let rej = json!({"keys": ["args"]});
    let held = push_id(&mut c, &ujob("u.b", json!([1]), rej.clone()));
    let batch = [
        ujob("u.b", json!([2]), rej.clone()),
        ujob("u.b", json!([1]), rej.clone()),
    ];
    match c.push_bulk(&batch) {
        Err(Error::Server { code, message }) => {
            assert_eq!(code, "DUPLICATE_JOB");
            assert!(
                message.starts_with("job 1: job ") && message.contains(&held),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        available(&mut c, "default"),
        1,
        "nothing of the batch stored"
    );
    // duplicates inside one batch
    let dup_in_batch = [
        ujob("u.b", json!([3]), rej.clone()),
        ujob("u.b", json!([3]), rej),
    ];
    assert_eq!(
        c.push_bulk(&dup_in_batch).unwrap_err().code(),
        Some("DUPLICATE_JOB")
    );
    let ign = json!({"keys": ["args"], "on_conflict": "ignore"});
    let stored = c
        .push_bulk(&[
            ujob("u.i", json!([1]), ign.clone()),
            ujob("u.i", json!([1]), ign.clone()),
            ujob("u.i", json!([2]), ign),
        ])
        .expect("PUSHB");
    assert_eq!(id_of(&stored[1]), id_of(&stored[0]));
    assert_eq!(stored[1]["deduplicated"], true);
    assert!(stored[0].get("deduplicated").is_none());
    let rep = json!({"keys": ["args"], "on_conflict": "replace"});
    let stored = c
        .push_bulk(&[
            ujob("u.rp", json!([1]), rep.clone()),
            ujob("u.rp", json!([1]), rep),
        ])
        .expect("PUSHB");
    assert_ne!(id_of(&stored[1]), id_of(&stored[0]));
    assert_eq!(state_of(&mut c, &id_of(&stored[0])), "cancelled");
    assert_eq!(state_of(&mut c, &id_of(&stored[1])), "available");
    // 1 held + 2 of the ignore batch + 1 replacement
    assert_eq!(available(&mut c, "default"), 4);
}

#[test]
fn invalid_policies_name_the_field() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    #[rustfmt::skip]
    let cases = [
        (json!({"keys": ["meta"]}), json!([]), "unique.meta_keys"),
        (json!({"keys": ["argz"]}), json!([]), "unique.keys"),
        (json!({"keys": ["args"], "args_keys": ["missing"]}), json!([{"a": 1}]), "unique.args_keys"),
        (json!({"period": "soon"}), json!([]), "unique.period"),
        (json!({"states": ["finished"]}), json!([]), "unique.states"),
        (json!({"on_conflict": "merge"}), json!([]), "unique.on_conflict"),
        (json!({"ttl": 5}), json!([]), "unique.ttl"),
        (json!("type"), json!([]), "unique"),
    ];
    for (u, args, field) in cases {
        match c.push(&ujob("u.bad", args, u.clone())) {
            Err(Error::Server { code, message }) => {
                assert_eq!(code, "INVALID_PAYLOAD", "{u}");
                assert!(message.starts_with(field), "{u}: {message}");
            }
            other => panic!("{u}: {other:?}"),
        }
    }
    let e = c
        .push_bulk(&[
            ujob("u.bad", json!([]), json!({})),
            ujob("u.bad", json!([]), json!({"keys": ["meta"]})),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("job 1: unique.meta_keys"), "{e}");
    assert_eq!(c.info().expect("INFO")["totals"]["jobs"], 0);
}

#[test]
fn the_key_index_survives_restarts() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let u = json!({"keys": ["args"], "period": "PT1H"});
    let (held, done) = {
        let mut c = srv.client();
        let held = push_id(&mut c, &ujob("u.d", json!(["held"]), u.clone()));
        let done = push_id(&mut c, &ujob("u.d", json!(["done"]), u.clone()));
        let mut w = srv.worker("w-d");
        // "held" first (FIFO): complete it? no: fetch both, complete "done" only
        let a = fetch_one(&mut w, "default");
        let b = fetch_one(&mut w, "default");
        assert_eq!(ids_of(&[a, b]), vec![held.clone(), done.clone()]);
        w.ack(&done, None).expect("ACK");
        (held, done)
    };
    srv.restart();
    let mut c = srv.client();
    // the interrupted active job is available again and still holds its key
    assert_eq!(state_of(&mut c, &held), "available");
    assert_eq!(
        existing_id(&dup_message(
            &mut c,
            &ujob("u.d", json!(["held"]), u.clone())
        )),
        held
    );
    // the completed one released its key before the restart
    let again = push_id(&mut c, &ujob("u.d", json!(["done"]), u.clone()));
    assert_ne!(again, done);
    drop(c);
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    assert_eq!(
        existing_id(&dup_message(
            &mut c,
            &ujob("u.d", json!(["done"]), u.clone())
        )),
        again,
        "a key taken just before kill -9 is still held"
    );
    assert_eq!(c.info().expect("INFO")["totals"]["unique_keys"], 3);
    // the period still runs from the original created_at
    advance(&mut c, 3601.0);
    push_id(&mut c, &ujob("u.d", json!(["held"]), u));
}
