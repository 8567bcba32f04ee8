//! The event system over TCP `SUBSCRIBE` (ojs-events §2-§4, §6.1, §9, §10): lifecycle
//! sequences and their data, filters, replay by cursor and by time, the log across
//! restarts, the replay/live seam, a stalled subscriber, and concurrency. Tests wait for
//! events they know are coming (the last event of a known sequence, or a "mark": pausing
//! a fresh queue) and move time with `CLOCK ADVANCE`; the read timeout is a safety net.

mod common;
#[path = "events_support/mod.rs"]
mod support;

use common::*;
use ojs_client::{wire, Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

// ---------------------------------------------------------------------------------------
// §6.1 filters
// ---------------------------------------------------------------------------------------

#[test]
fn filters_deliver_exactly_the_matching_events() {
    if common::store_missing() {
        return;
    }
    type Pred = fn(&Value) -> bool;
    #[rustfmt::skip]
    let filters: [(Value, Pred); 8] = [
        (json!({"event_types": ["job.*"]}), |e| ty(e).starts_with("job.")),
        (json!({"event_types": ["job.completed", "queue.paused"]}),
            |e| ["job.completed", "queue.paused"].contains(&ty(e))),
        (json!({"event_types": ["job.c*"], "queues": ["q-a", "q-b"]}),
            |e| ty(e).starts_with("job.c") && in_queue(e, &["q-a", "q-b"])),
        (json!({"queues": ["q-a"]}), |e| in_queue(e, &["q-a"])),
        (json!({"job_types": ["t.x"]}), |e| e["data"]["job_type"] == "t.x"),
        (json!({"event_types": ["job.started", "job.completed"], "queues": ["q-a"],
                "job_types": ["t.x"]}),
            |e| ["job.started", "job.completed"].contains(&ty(e)) && in_queue(e, &["q-a"])
                && e["data"]["job_type"] == "t.x"),
        (json!({"sources": ["ojs://ojsd/workers/*"]}),
            |e| e["source"].as_str().is_some_and(|s| s.starts_with("ojs://ojsd/workers/"))),
        (json!({"sources": ["ojs://ojsd/*"], "queues": ["q-c", "q-a"]}),
            |e| in_queue(e, &["q-c", "q-a"])),
    ];
    let srv = Server::start();
    let mut all = Sub::open(&srv, json!({"after": 0}));
    let mut subs: Vec<Sub> = filters
        .iter()
        .map(|(f, _)| Sub::open(&srv, json!({"after": 0}).merge(f)))
        .collect();
    let (mut c, mut w) = (srv.client(), srv.worker("w-f"));
    let no_retry = json!({"type": "t.y", "args": [], "queue": "q-a", "retry": {"max_attempts": 1}});
    let j1 = push_id(&mut c, &job("t.x", "q-a"));
    let j2 = push_id(&mut c, &no_retry);
    let j3 = push_id(&mut c, &job("t.x", "q-b"));
    let j4 = push_id(&mut c, &job("t.y", "q-b"));
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), j1);
    w.ack(&j1, None).expect("ACK");
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), j2);
    w.fail(&j2, "boom", "no", &[]).expect("FAIL");
    c.cancel(&j3).expect("CANCEL");
    assert_eq!(id_of(&fetch_one(&mut w, "q-b")), j4);
    w.ack(&j4, None).expect("ACK");
    c.pause_queues(&["q-c"]).expect("PAUSE");
    c.resume_queues(&["q-c"]).expect("RESUME");
    // The sentinel: its job.completed matches every filter above and is the last event.
    let s = push_id(&mut c, &job("t.x", "q-a"));
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), s);
    w.ack(&s, None).expect("ACK");
    let sentinel = |e: &Value| ty(e) == "job.completed" && subject(e) == s;

    let oracle = all.until(sentinel);
    assert_eq!(oracle.len(), 18, "{oracle:#?}");
    for ((f, pred), sub) in filters.iter().zip(&mut subs) {
        let got = sub.until(sentinel);
        let want: Vec<&Value> = oracle.iter().filter(|e| pred(e)).collect();
        assert!(
            want.len() >= 4 && want.len() < oracle.len(),
            "filter {f} is a real test"
        );
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "filter {f}");
    }
    // The AND filter, spelled out.
    let and: Vec<_> = oracle
        .iter()
        .filter(|e| filters[5].1(e))
        .map(|e| (ty(e), subject(e)))
        .collect();
    let (j1, s) = (j1.as_str(), s.as_str());
    #[rustfmt::skip]
    assert_eq!(and, [("job.started", j1), ("job.completed", j1), ("job.started", s),
        ("job.completed", s)]);
}

fn in_queue(e: &Value, names: &[&str]) -> bool {
    names.iter().any(|n| e["data"]["queue"] == *n)
}

trait Merge {
    fn merge(self, other: &Value) -> Value;
}

impl Merge for Value {
    fn merge(mut self, other: &Value) -> Value {
        for (k, v) in other.as_object().expect("object") {
            self[k] = v.clone();
        }
        self
    }
}

// ---------------------------------------------------------------------------------------
// Replay (§9.1) and the durable log
// ---------------------------------------------------------------------------------------

#[test]
fn resubscribe_after_last_cursor_gets_exactly_the_missed_events_then_live() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut s1 = Sub::open(&srv, json!({"after": 0}));
    let first = push_n(&mut c, 3);
    let seen = s1.take(3);
    assert_eq!(subjects(&seen), first);
    let last = cursor(&seen[2]);
    drop(s1);
    let mut missed = push_n(&mut c, 3);
    c.pause_queues(&["q"]).expect("PAUSE");
    missed.push("q".into());

    let mut s2 = Sub::open(&srv, json!({"after": last}));
    let replay = s2.take(4);
    assert_consecutive(&replay, last + 1);
    assert_eq!(subjects(&replay), missed);
    let live = push_id(&mut c, &job("t", "q"));
    let e = s2.next();
    assert_eq!((subject(&e), cursor(&e)), (live.as_str(), last + 5));
}

#[test]
fn replay_can_start_inside_one_commits_events() {
    if common::store_missing() {
        return;
    }
    // PUSHB commits its jobs at once, and the log keeps a commit's events together:
    // a cursor in the middle of them must still replay exactly what follows it.
    let mut srv = Server::start();
    let mut c = srv.client();
    let jobs: Vec<Value> = (0..5).map(|_| job("t", "q")).collect();
    let ids: Vec<String> = c
        .push_bulk(&jobs)
        .expect("PUSHB")
        .iter()
        .map(id_of)
        .collect();
    let all = Sub::open(&srv, json!({"after": 0})).take(5);
    assert_eq!(subjects(&all), ids);
    let second = cursor(&all[1]);
    assert_consecutive(
        &Sub::open(&srv, json!({"after": second})).take(3),
        second + 1,
    );
    srv.restart();
    let mut s = Sub::open(&srv, json!({"after": second + 1}));
    let replay = s.take(2);
    assert_eq!(subjects(&replay), &ids[3..]);
    // Cursors continue after the last event of the record.
    let mut c = srv.client();
    let id = push_id(&mut c, &job("t", "q"));
    let e = s.next();
    assert_eq!((subject(&e), cursor(&e)), (id.as_str(), second + 4));
}

#[test]
fn resubscribe_since_a_time_replays_from_that_time_then_live() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut s1 = Sub::open(&srv, json!({"after": 0}));
    push_n(&mut c, 2);
    let seen = s1.take(2);
    drop(s1);
    advance(&mut c, 10.0);
    let missed = push_n(&mut c, 3);

    let since = rfc3339(ts(&seen[1]["time"]) + chrono::Duration::seconds(5));
    let mut s2 = Sub::open(&srv, json!({"since": since}));
    let replay = s2.take(3);
    assert_consecutive(&replay, cursor(&seen[1]) + 1);
    assert_eq!(subjects(&replay), missed);
    let live = push_id(&mut c, &job("t", "q"));
    assert_eq!(subject(&s2.next()), live);
    // A time before everything replays the whole log.
    let mut s3 = Sub::open(&srv, json!({"since": "2000-01-01T00:00:00Z"}));
    assert_consecutive(&s3.take(6), 1);
}

#[test]
fn events_survive_restart_and_kill_and_cursors_keep_increasing() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let (mut c, mut w) = (srv.client(), srv.client());
    let mut s = Sub::open(&srv, json!({"after": 0}));
    let id = push_id(&mut c, &job("t", "q"));
    fetch_one(&mut w, "q");
    w.ack(&id, Some(&json!([1, 2]))).expect("ACK");
    let q = mark(&mut c);
    let before = s.until(is_mark(&q));
    assert_eq!(before.len(), 4);
    drop((s, c, w));

    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": 0}));
    assert_eq!(
        s.take(before.len()),
        before,
        "the log is replayed as it was written"
    );
    let top = cursor(before.last().unwrap());
    let id2 = push_id(&mut c, &job("t", "q"));
    let e = s.next();
    assert_eq!((subject(&e), cursor(&e)), (id2.as_str(), top + 1));

    // An answered PUSH is in the log even when the process is killed right after.
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": top}));
    assert_eq!(s.next(), e);
    let id3 = push_id(&mut c, &job("t", "q"));
    let e3 = s.next();
    assert_eq!((subject(&e3), cursor(&e3)), (id3.as_str(), top + 2));
}

/// `SUBSCRIBE` from `after` on a fresh connection: `Some(code)` for an error reply.
fn subscribe_error(srv: &Server, after: u64) -> Option<String> {
    let mut raw = Raw::connect(&srv.addr, json!({"v": 2}), None);
    match raw.call(&format!(r#"SUBSCRIBE {{"after": {after}}}"#)) {
        Reply::Error { code, .. } => {
            // The stream is closed after the error.
            assert!(matches!(wire::read_reply(&mut raw.r), Err(e) if e.is_connection_error()));
            Some(code)
        }
        _ => None,
    }
}

#[test]
fn pruned_cursor_is_refused_and_cursors_continue_after_restart() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": 0}));
    push_id(&mut c, &job("t", "q"));
    let top = cursor(&s.next());
    drop(s);
    // Past the 7-day retention: the engine prunes the log within about a second.
    advance(&mut c, 8.0 * 86_400.0);
    let expired = || subscribe_error(&srv, 0).filter(|code| code == "CURSOR_EXPIRED");
    wait_for(Duration::from_secs(5), "the log to be pruned", expired);
    let mut s = Sub::open(&srv, json!({"after": top}));
    push_id(&mut c, &job("t", "q"));
    assert_eq!(cursor(&s.next()), top + 1);
    drop(s);
    advance(&mut c, 8.0 * 86_400.0);
    let expired = || subscribe_error(&srv, top).filter(|code| code == "CURSOR_EXPIRED");
    wait_for(
        Duration::from_secs(5),
        "the log to be pruned again",
        expired,
    );
    // Restarting on an empty log: cursors still continue where they were.
    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": top + 1}));
    let id = push_id(&mut c, &job("t", "q"));
    let e = s.next();
    assert_eq!((subject(&e), cursor(&e)), (id.as_str(), top + 2));
}

// ---------------------------------------------------------------------------------------
// Live subscriptions, the replay/live seam, slow subscribers, concurrency
// ---------------------------------------------------------------------------------------

#[test]
fn live_only_subscription_covers_everything_after_its_ok() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    push_n(&mut c, 3); // history a live subscription does not replay
    for round in 0..40 {
        let mut s = Sub::open(&srv, json!({}));
        let ids = push_n(&mut c, 2);
        assert_eq!(subject(&s.next()), ids[0], "round {round}");
    }
}

#[test]
fn replay_joins_live_without_gap_or_duplicate_while_jobs_arrive() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut all = Sub::open(&srv, json!({"after": 0}));
    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(AtomicU64::new(0));
    let producer = {
        let (mut c, stop, pushed) = (srv.client(), stop.clone(), pushed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                push_id(&mut c, &job("t", "seam"));
                pushed.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let head = all.take(20);
    let early = cursor(&head[4]);
    let mut s = Sub::open(&srv, json!({"after": early}));
    // One event per push: read until well past the head at the time we subscribed.
    let target = pushed.load(Ordering::Relaxed) + 300;
    let mut got = s.until(|e| cursor(e) >= target);
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    let mut c = srv.client();
    let q = mark(&mut c);
    got.extend(s.until(is_mark(&q)));
    let mut full = head;
    full.extend(all.until(is_mark(&q)));
    assert_consecutive(&full, 1);
    assert_consecutive(&got, early + 1);
    assert_eq!(got[..], full[early as usize..]);
}

#[test]
fn stalled_subscriber_does_not_block_the_engine_and_catches_up_in_order() {
    if common::store_missing() {
        return;
    }
    // 6,600 job events of at least 1.86 KB: more than the 4,096-event live buffer plus
    // what the sockets can hold (Linux's tcp_wmem max is 4 MiB: ~2,250 events; the receive
    // buffer is tiny), so the stalled subscriber is necessarily cut from the live feed and
    // catches up from the log. (Far fewer jobs than 20,000 keep a debug build under 10 s.)
    const JOBS: usize = 2200;
    const BATCH: usize = 550;
    let srv = Server::start();
    let mut stalled = Sub::open_with(&srv.addr, json!({"after": 0}), Some(4096));
    let trace = "a".repeat(1500); // copied into every job event
    let new = json!({"type": "t", "args": [], "queue": "bulk", "meta": {"trace_id": trace}});
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (mut c, mut w) = (srv.client(), srv.worker("w-bulk"));
    let work = std::thread::spawn(move || {
        for _ in 0..JOBS / BATCH {
            // Client-side ids, and FIFO: the FETCH returns exactly the batch just pushed.
            let ids: Vec<String> = (0..BATCH).map(|_| new_id()).collect();
            let jobs: Vec<Value> = ids
                .iter()
                .map(|id| new.clone().merge(&json!({"id": id})))
                .collect();
            let pushed = c.call(&format!("PUSHB {}", Value::from(jobs)));
            assert!(matches!(pushed, Ok(Reply::Bulk(_))), "{pushed:?}");
            let fetched = w.call(&format!("FETCH bulk COUNT {BATCH}"));
            assert!(matches!(fetched, Ok(Reply::Bulk(_))), "{fetched:?}");
            for id in &ids {
                w.send_line(&format!("ACK {}", json!({"id": id})))
                    .expect("send");
            }
            w.flush().expect("flush");
            for _ in &ids {
                assert_eq!(w.read_reply().expect("ACK"), ok());
            }
        }
        let _ = done_tx.send(());
        (c, w)
    });
    let finished = done_rx.recv_timeout(Duration::from_secs(60));
    finished.expect("the workload finishes while a subscriber is stalled");
    let (mut c, _w) = work.join().expect("workload");
    let q = mark(&mut c);
    let all = Sub::open(&srv, json!({"after": 0})).until(is_mark(&q));
    assert_eq!(
        all.len(),
        3 * JOBS + 2,
        "worker.started, 3 events per job, the mark"
    );
    assert_consecutive(&all, 1);
    let got = stalled.until(is_mark(&q));
    assert_eq!(got, all);
}

#[test]
fn concurrent_workers_unique_ids_and_per_job_order() {
    if common::store_missing() {
        return;
    }
    const JOBS: usize = 1000;
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let mut ids = HashSet::new();
    for _ in 0..JOBS / 250 {
        let stored = c.push_bulk(&vec![job("t", "conc"); 250]).expect("PUSHB");
        ids.extend(stored.iter().map(id_of));
    }
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let mut w = srv.worker(&format!("w-c{i}"));
            std::thread::spawn(move || {
                let mut n = 0;
                while let Some(j) = w.fetch(&["conc"]).expect("FETCH") {
                    w.ack(&id_of(&j), None).expect("ACK");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let done: usize = workers.into_iter().map(|t| t.join().expect("worker")).sum();
    assert_eq!(done, JOBS);
    let evs = drain(&mut sub, &mut c);
    let unique: HashSet<&str> = evs.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(unique.len(), evs.len(), "event ids are unique");
    let mut per_job: HashMap<&str, Vec<&Value>> = HashMap::new();
    for e in evs.iter().filter(|e| ty(e).starts_with("job.")) {
        per_job.entry(subject(e)).or_default().push(e);
    }
    assert_eq!(per_job.len(), JOBS);
    for (id, list) in &per_job {
        assert!(ids.contains(*id));
        // `Sub::next` checked that cursors increase, so list order is cursor order.
        assert_eq!(
            types(list),
            ["job.enqueued", "job.started", "job.completed"],
            "{id}"
        );
        let wid = list[1]["data"]["worker_id"].as_str().unwrap();
        assert_eq!(list[2]["source"], format!("ojs://ojsd/workers/{wid}"));
    }
}

#[test]
fn bad_subscribe_payloads_are_refused_and_the_connection_keeps_working() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let opts = ConnectOptions {
        timeout: Some(READ_TIMEOUT),
        ..Default::default()
    };
    let mut c = Client::connect_with(&srv.addr, &opts).expect("connect");
    for bad in [
        r#"{"queues":"x"}"#,
        r#"{"event_types":[1]}"#,
        r#"{"after":-1}"#,
        r#"{"after":1.5}"#,
        r#"{"after":1,"since":"2024-01-01T00:00:00Z"}"#,
        r#"{"since":"yesterday"}"#,
        r#"{"since":"2024-01-01T00:00:00"}"#,
        r#"["job.*"]"#,
        "not json",
    ] {
        let code = err_code(&mut c, &format!("SUBSCRIBE {bad}"));
        assert_eq!(code, "MALFORMED_COMMAND", "{bad}");
        c.info().expect("the connection still takes commands");
    }
    // ... and can still become an event stream.
    let id = push_id(&mut c, &job("t", "q"));
    assert_eq!(c.call(r#"SUBSCRIBE {"after":0}"#).expect("SUBSCRIBE"), ok());
    match c.read_reply().expect("event") {
        Reply::Bulk(b) => assert_eq!(serde_json::from_slice::<Value>(&b).unwrap()["subject"], id),
        other => panic!("expected an event, got {other:?}"),
    }
}
