//! What survives a restart: a polite one (SIGTERM) and a crash (SIGKILL) in the middle of
//! a steady load of producers and workers. Everything a client was told is done must still
//! be done afterwards, and nothing acknowledged may run twice.

mod common;

use common::*;
use ojs_client::{Client, ConnectOptions, Error, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Fields a restart is allowed to change on a job that was `active` when the server stopped.
const REQUEUE_FIELDS: [&str; 4] = ["state", "started_at", "worker_id", "enqueued_at"];

fn without(mut job: Value, keys: &[&str]) -> Value {
    if let Value::Object(m) = &mut job {
        for k in keys {
            m.shift_remove(*k);
        }
    }
    job
}

#[test]
fn every_state_survives_a_graceful_restart() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-states");
    let job = |q: &str| {
        json!({"type": "keep.me", "args": [q, {"n": 1}], "queue": q,
                                "meta": {"trace_id": "t-1"}, "x_custom": {"kept": [1, 2]}})
    };
    let mut ids: HashMap<&str, String> = HashMap::new();
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let mut scheduled = job("st-scheduled");
    scheduled["scheduled_at"] = json!(rfc3339(later));
    ids.insert("scheduled", push_id(&mut c, &scheduled));
    ids.insert("available", push_id(&mut c, &job("st-available")));
    let mut pending = job("st-pending");
    pending["pending"] = json!(true);
    ids.insert("pending", push_id(&mut c, &pending));
    ids.insert("active", push_id(&mut c, &job("st-active")));
    fetch_one(&mut w, "st-active");
    ids.insert("completed", push_id(&mut c, &job("st-completed")));
    fetch_one(&mut w, "st-completed");
    w.ack(&ids["completed"], Some(&json!({"ok": [true]})))
        .unwrap();
    let mut retryable = job("st-retryable");
    retryable["retry"] =
        json!({"initial_interval": "PT1H", "max_interval": "PT2H", "jitter": false});
    ids.insert("retryable", push_id(&mut c, &retryable));
    fetch_one(&mut w, "st-retryable");
    w.fail(&ids["retryable"], "transient", "try later", &[])
        .unwrap();
    ids.insert("cancelled", push_id(&mut c, &job("st-cancelled")));
    c.cancel(&ids["cancelled"]).unwrap();
    let mut dead = job("st-discarded");
    dead["retry"] = json!({"max_attempts": 1});
    ids.insert("discarded", push_id(&mut c, &dead));
    fetch_one(&mut w, "st-discarded");
    w.fail(&ids["discarded"], "fatal", "no", &[]).unwrap();

    let before: HashMap<&str, Value> = ids
        .iter()
        .map(|(state, id)| (*state, c.job(id).unwrap()))
        .collect();
    for (state, j) in &before {
        assert_eq!(j["state"], *state, "setup of the {state} job");
    }
    drop((c, w));
    assert_eq!(srv.stop(), Some(0), "SIGTERM must exit cleanly");
    srv.restart();
    let mut c = srv.client();
    for (state, old) in &before {
        let new = c.job(&ids[state]).unwrap();
        if *state == "active" {
            assert_eq!(new["state"], "available", "an interrupted job is requeued");
            assert!(new.get("worker_id").is_none() && new.get("started_at").is_none());
            assert!(ts(&new["enqueued_at"]) >= ts(&old["enqueued_at"]));
            assert_eq!(
                without(new, &REQUEUE_FIELDS),
                without(old.clone(), &REQUEUE_FIELDS)
            );
        } else {
            assert_eq!(&new, old, "the {state} job changed across a restart");
        }
    }
    assert_eq!(dead_ids(&mut c), vec![ids["discarded"].clone()]);
    // And they still behave: the pending job activates, the requeued one is fetchable.
    c.activate(&ids["pending"]).unwrap();
    let mut w = srv.worker("w-states-2");
    assert_eq!(id_of(&fetch_one(&mut w, "st-pending")), ids["pending"]);
    let again = fetch_one(&mut w, "st-active");
    assert_eq!(id_of(&again), ids["active"]);
    assert_eq!(again["attempt"], 2);
    fetch_none(&mut w, "st-scheduled");
}

#[test]
fn order_pauses_and_schedules_survive_a_restart() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    let priorities = [0, 10, -10, 0, 10, 5, -10, 0, 5, 10, 0, -3];
    let mut pushed: Vec<(i64, usize, String)> = Vec::new();
    for (n, p) in priorities.iter().enumerate() {
        let id = push_id(
            &mut c,
            &json!({"type": "order.job", "args": [n], "queue": "ordered", "priority": p}),
        );
        pushed.push((*p, n, id));
    }
    // Higher priority first, FIFO within a priority.
    pushed.sort_by_key(|(p, n, _)| (-p, *n));
    let expected: Vec<String> = pushed.into_iter().map(|(_, _, id)| id).collect();

    let held = push_id(
        &mut c,
        &json!({"type": "order.job", "args": [], "queue": "held"}),
    );
    c.pause_queues(&["held", "empty-paused"]).unwrap();
    // Real time, since the test clock offset does not survive the restart.
    let soon = chrono::Utc::now() + chrono::Duration::seconds(5);
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let sched = |at| json!({"type": "order.job", "args": [], "queue": "timed", "scheduled_at": rfc3339(at)});
    let soon_id = push_id(&mut c, &sched(soon));
    let later_id = push_id(&mut c, &sched(later));
    drop(c);
    assert_eq!(srv.stop(), Some(0));
    srv.restart();

    let mut c = srv.client();
    let mut w = srv.worker("w-order");
    let got: Vec<String> = (0..expected.len())
        .map(|_| id_of(&fetch_one(&mut w, "ordered")))
        .collect();
    assert_eq!(
        got, expected,
        "priority/FIFO order changed across the restart"
    );
    fetch_none(&mut w, "ordered");

    let info = c.info().unwrap();
    assert_eq!(info["queues"]["held"]["paused"], true);
    assert_eq!(info["queues"]["empty-paused"]["paused"], true);
    fetch_none(&mut w, "held");
    c.resume_queues(&["held"]).unwrap();
    assert_eq!(id_of(&fetch_one(&mut w, "held")), held);

    assert_eq!(state_of(&mut c, &soon_id), "scheduled");
    advance(&mut c, 6.0);
    assert_eq!(state_of(&mut c, &soon_id), "available");
    assert_eq!(state_of(&mut c, &later_id), "scheduled");
    assert_eq!(id_of(&fetch_one(&mut w, "timed")), soon_id);
    w.ack(&soon_id, None).unwrap();
    advance(&mut c, 3600.0);
    assert_eq!(id_of(&fetch_one(&mut w, "timed")), later_id);
}

/// Move the clock to 5 s before `due`; the caller checks, then advances past it.
fn advance_to_just_before(c: &mut Client, due: chrono::DateTime<chrono::Utc>, what: &str) {
    let wait = secs_between(server_now(c), due);
    assert!(wait > 10.0, "{what} is already due ({wait} s)");
    advance(c, wait - 5.0);
}

/// The index is rebuilt from the stored records at start: each state must come back with
/// its timers (scheduled time, retry time, expiry, visibility timeout, retention of finished
/// jobs and dead letters) firing when they would have without the restart.
#[test]
fn timers_survive_a_restart() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start_with(&[
        "--retention",
        "7200",
        "--dead-retention",
        "10800",
        // Hours pass on the clock; the worker holding a job must not be declared dead.
        "--heartbeat-timeout",
        "86400",
    ]);
    let mut c = srv.client();
    let mut w = srv.worker("w-timers");
    // The test clock's offset does not survive a restart: nothing advances it before.
    let now = server_now(&mut c);
    let at = |mins: i64| json!(rfc3339(now + chrono::Duration::minutes(mins)));
    let scheduled = push_id(
        &mut c,
        &test_job("tm-scheduled", json!({"scheduled_at": at(60)})),
    );
    let expiring = push_id(
        &mut c,
        &test_job("tm-expiring", json!({"expires_at": at(90)})),
    );
    let visible = push_id(&mut c, &test_job("tm-visible", json!({"timeout": 120})));
    let retry = json!({"initial_interval": "PT30M", "max_interval": "PT1H", "jitter": false});
    let retryable = push_id(&mut c, &test_job("tm-retryable", json!({"retry": retry})));
    fetch_and_fail(&mut w, "tm-retryable", &retryable, 1, "transient");
    let completed = push_id(&mut c, &test_job("tm-completed", json!({})));
    fetch_one(&mut w, "tm-completed");
    w.ack(&completed, None).unwrap();
    let discarded = push_id(
        &mut c,
        &test_job("tm-dead", json!({"retry": {"max_attempts": 1}})),
    );
    fetch_and_fail(&mut w, "tm-dead", &discarded, 1, "fatal");
    let ids = [
        &scheduled, &expiring, &visible, &retryable, &completed, &discarded,
    ];
    let before: Vec<Value> = ids.iter().map(|id| c.job(id).unwrap()).collect();
    let states: Vec<&str> = before
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    let expected = [
        "scheduled",
        "available",
        "available",
        "retryable",
        "completed",
        "discarded",
    ];
    assert_eq!(states, expected, "setup");
    drop((c, w));
    assert_eq!(srv.stop(), Some(0));
    srv.restart();

    let mut c = srv.client();
    let mut w = srv.worker("w-timers-2");
    for (id, old) in ids.iter().zip(&before) {
        assert_eq!(
            &c.job(id).unwrap(),
            old,
            "job {id} changed across the restart"
        );
    }
    assert_eq!(dead_ids(&mut c), vec![discarded.clone()]);
    // The job's own visibility timeout (120 s), not the server's default.
    let job = fetch_one(&mut w, "tm-visible");
    assert_eq!(id_of(&job), visible);
    advance(&mut c, 115.0);
    assert_eq!(state_of(&mut c, &visible), "active");
    advance(&mut c, 10.0);
    assert_eq!(c.job(&visible).unwrap()["error"]["type"], "timeout");

    advance_to_just_before(&mut c, ts(&before[3]["next_retry_at"]), "the retry");
    assert_eq!(state_of(&mut c, &retryable), "retryable");
    advance(&mut c, 10.0);
    assert_eq!(state_of(&mut c, &retryable), "available");

    advance_to_just_before(&mut c, ts(&before[0]["scheduled_at"]), "the scheduled time");
    assert_eq!(state_of(&mut c, &scheduled), "scheduled");
    advance(&mut c, 10.0);
    assert_eq!(id_of(&fetch_one(&mut w, "tm-scheduled")), scheduled);

    advance_to_just_before(&mut c, ts(&before[1]["expires_at"]), "the expiry");
    assert_eq!(state_of(&mut c, &expiring), "available");
    advance(&mut c, 10.0);
    let job = c.job(&expiring).unwrap();
    assert_eq!(
        (&job["state"], &job["error"]["type"]),
        (&json!("discarded"), &json!("expired"))
    );

    let retention = chrono::Duration::hours(2);
    advance_to_just_before(
        &mut c,
        ts(&before[4]["completed_at"]) + retention,
        "the retention",
    );
    assert_eq!(state_of(&mut c, &completed), "completed");
    advance(&mut c, 10.0);
    assert_eq!(err_code(&mut c, &format!("JOB {completed}")), "NOT_FOUND");

    let dead_retention = chrono::Duration::hours(3);
    advance_to_just_before(
        &mut c,
        ts(&before[5]["discarded_at"]) + dead_retention,
        "the dead retention",
    );
    assert!(dead_ids(&mut c).contains(&discarded));
    advance(&mut c, 10.0);
    assert_eq!(err_code(&mut c, &format!("JOB {discarded}")), "NOT_FOUND");
    assert_eq!(dead_ids(&mut c), vec![expiring.clone()]);
}

// ---------------------------------------------------------------------------------------
// Load: producers and workers hammering a server that is about to go away.
// ---------------------------------------------------------------------------------------

const QUEUE: &str = "crash";

/// What each client thread saw. "Refused" means an error reply; "unknown" means the
/// connection died before the reply arrived, so the outcome is the server's secret.
#[derive(Default, Debug)]
struct Log {
    pushed: Vec<String>,
    push_refused: Vec<String>,
    push_unknown: Vec<String>,
    delivered: Vec<String>,
    acked: Vec<String>,
    ack_refused: Vec<String>,
    ack_unknown: Vec<String>,
    /// Replies a correct server can never give.
    wrong: Vec<String>,
}

impl Log {
    fn merge(&mut self, o: Log) {
        self.pushed.extend(o.pushed);
        self.push_refused.extend(o.push_refused);
        self.push_unknown.extend(o.push_unknown);
        self.delivered.extend(o.delivered);
        self.acked.extend(o.acked);
        self.ack_refused.extend(o.ack_refused);
        self.ack_unknown.extend(o.ack_unknown);
        self.wrong.extend(o.wrong);
    }
}

/// An error reply is acceptable only if it says the engine is gone (SIGTERM) — and then
/// the command must not have been applied, which the caller checks after the restart.
fn refused_ok(e: &Error) -> bool {
    e.code() == Some("BACKEND_UNAVAILABLE")
}

fn connect(addr: &str) -> Option<Client> {
    let opts = ConnectOptions {
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    Client::connect_with(addr, &opts).ok()
}

fn producer(addr: String, stop: Arc<AtomicBool>, pushed: Arc<AtomicUsize>) -> Log {
    let mut log = Log::default();
    let Some(mut c) = connect(&addr) else {
        return log;
    };
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = new_id();
        n += 1;
        let job = json!({"id": id, "type": "crash.job", "args": [n], "queue": QUEUE});
        match c.push(&job) {
            // The reply is the envelope as committed: a FETCH waiting in the same engine
            // batch may already have claimed the job.
            Ok(env)
                if env["id"] == id.as_str()
                    && (env["state"] == "available" && env["attempt"] == 0
                        || env["state"] == "active" && env["attempt"] == 1) =>
            {
                log.pushed.push(id);
                pushed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(env) => log.wrong.push(format!("PUSH {id} answered with {env}")),
            Err(e) if refused_ok(&e) => log.push_refused.push(id),
            Err(e) if e.is_connection_error() => {
                log.push_unknown.push(id);
                break;
            }
            Err(e) => {
                log.wrong.push(format!("PUSH {id}: {e}"));
                break;
            }
        }
    }
    log
}

fn consumer(addr: String, stop: Arc<AtomicBool>) -> Log {
    let mut log = Log::default();
    let Some(mut c) = connect(&addr) else {
        return log;
    };
    while !stop.load(Ordering::Relaxed) {
        let job = match c.fetch(&[QUEUE]) {
            Ok(Some(job)) => job,
            Ok(None) => continue,
            Err(e) if refused_ok(&e) || e.is_connection_error() => break,
            Err(e) => {
                log.wrong.push(format!("FETCH: {e}"));
                break;
            }
        };
        let Some(id) = job["id"].as_str().map(str::to_string) else {
            log.wrong.push(format!("FETCH answered with {job}"));
            break;
        };
        if job["state"] != "active" || job["queue"] != QUEUE {
            log.wrong.push(format!("FETCH answered with {job}"));
        }
        log.delivered.push(id.clone());
        match c.ack(&id, None) {
            Ok(()) => log.acked.push(id),
            Err(e) if refused_ok(&e) => log.ack_refused.push(id),
            Err(e) if e.is_connection_error() => {
                log.ack_unknown.push(id);
                break;
            }
            Err(e) => {
                log.wrong.push(format!("ACK {id}: {e}"));
                break;
            }
        }
    }
    log
}

struct Load {
    stop: Arc<AtomicBool>,
    pushed: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<Log>>,
}

impl Load {
    fn start(addr: &str, producers: usize, consumers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let pushed = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for _ in 0..producers {
            let (a, s, p) = (addr.to_string(), stop.clone(), pushed.clone());
            threads.push(std::thread::spawn(move || producer(a, s, p)));
        }
        for _ in 0..consumers {
            let (a, s) = (addr.to_string(), stop.clone());
            threads.push(std::thread::spawn(move || consumer(a, s)));
        }
        Load {
            stop,
            pushed,
            threads,
        }
    }

    /// Block until at least `n` pushes were acknowledged (the load keeps running).
    fn wait_pushed(&self, n: usize) {
        wait_for(Duration::from_secs(15), "acknowledged pushes", || {
            (self.pushed.load(Ordering::Relaxed) >= n).then_some(())
        });
    }

    /// The server is gone: every thread ends on its next I/O error; collect their logs.
    fn finish(self) -> Log {
        self.stop.store(true, Ordering::Relaxed);
        let mut log = Log::default();
        for t in self.threads {
            log.merge(t.join().expect("load thread panicked"));
        }
        log
    }
}

/// Fetch and ACK (pipelined) until the queue is empty; the ids in delivery order.
fn drain(srv: &Server) -> Vec<String> {
    let mut w = srv.worker("w-drain");
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "drain did not finish");
        let jobs = w.fetch_many(&[QUEUE], 500).expect("drain FETCH");
        if jobs.is_empty() {
            break;
        }
        let batch: Vec<String> = jobs.iter().map(id_of).collect();
        let acks: Vec<String> = batch
            .iter()
            .map(|id| format!("ACK {}", json!({"id": id})))
            .collect();
        for (id, r) in batch.iter().zip(pipeline(&mut w, &acks)) {
            assert_eq!(r, Reply::Simple("OK".into()), "drain ACK {id}");
        }
        ids.extend(batch);
    }
    let q = &w.info().unwrap()["queues"][QUEUE];
    assert_eq!(
        (q["available"].as_u64(), q["active"].as_u64()),
        (Some(0), Some(0))
    );
    ids
}

fn no_duplicates(ids: &[String], what: &str) -> HashSet<String> {
    let mut seen = HashSet::with_capacity(ids.len());
    for id in ids {
        assert!(seen.insert(id.clone()), "{id} {what} twice");
    }
    seen
}

/// Assert every job in `ids` is in a state `ok` accepts (`None` = not stored).
fn check_states(c: &mut Client, ids: &[String], what: &str, ok: impl Fn(Option<&str>) -> bool) {
    for (id, state) in ids.iter().zip(states_of(c, ids)) {
        assert!(ok(state.as_deref()), "{what}: job {id} is {state:?}");
    }
}

/// After the restart: check what the clients were told against what the server has,
/// drain the queue, and check that every acknowledged push completed exactly once.
/// Returns the ids of all acknowledged pushes.
fn verify_after_restart(srv: &Server, log: &Log) -> Vec<String> {
    assert!(log.wrong.is_empty(), "wrong replies: {:#?}", log.wrong);
    let mut c = srv.client();
    no_duplicates(&log.delivered, "delivered before the restart");
    check_states(&mut c, &log.pushed, "acknowledged push lost", |s| {
        s.is_some()
    });
    check_states(&mut c, &log.acked, "acknowledged ACK lost", |s| {
        s == Some("completed")
    });
    check_states(&mut c, &log.push_refused, "refused push stored", |s| {
        s.is_none()
    });
    check_states(&mut c, &log.ack_refused, "refused ACK applied", |s| {
        s == Some("available")
    });
    let drained = drain(srv);
    let drained_set = no_duplicates(&drained, "delivered by the drain");
    let acked: HashSet<&String> = log.acked.iter().collect();
    let known: HashSet<&String> = log.pushed.iter().chain(&log.push_unknown).collect();
    for id in &drained {
        assert!(
            !acked.contains(id),
            "{id} was ACKed before the restart and delivered again"
        );
        assert!(
            known.contains(id),
            "drain delivered {id}, which nobody pushed"
        );
    }
    for id in &log.ack_refused {
        assert!(
            drained_set.contains(id),
            "job {id} with a refused ACK was not redelivered"
        );
    }
    check_states(&mut c, &log.pushed, "after the drain", |s| {
        s == Some("completed")
    });
    let ack_unknown: HashSet<&String> = log.ack_unknown.iter().collect();
    for id in &log.pushed {
        // An ACK whose reply was lost either committed (then the job was not redelivered)
        // or did not (then the drain completed it): once either way.
        let ack_unknown_done = ack_unknown.contains(id) && !drained_set.contains(id);
        let times = usize::from(acked.contains(id))
            + usize::from(drained_set.contains(id))
            + usize::from(ack_unknown_done);
        assert_eq!(times, 1, "{id} completed {times} times");
    }
    log.pushed.clone()
}

#[test]
fn kill9_under_load_loses_nothing_acknowledged() {
    if common::store_missing() {
        return;
    }
    let started = Instant::now();
    let mut srv = Server::start();
    let mut all_pushed = Vec::new();
    for cycle in 0..3 {
        let load = Load::start(&srv.addr, 4, 2);
        load.wait_pushed(1500);
        srv.kill9();
        let log = load.finish();
        assert!(
            log.pushed.len() >= 1500,
            "cycle {cycle}: {} pushes",
            log.pushed.len()
        );
        assert!(
            !log.acked.is_empty(),
            "cycle {cycle}: the workers never ACKed"
        );
        srv.restart();
        all_pushed.extend(verify_after_restart(&srv, &log));
    }
    // Earlier cycles' jobs are still there and still completed after later crashes.
    let mut c = srv.client();
    check_states(&mut c, &all_pushed, "after three crashes", |s| {
        s == Some("completed")
    });
    eprintln!(
        "kill9 test: {} jobs over 3 crashes in {:?}",
        all_pushed.len(),
        started.elapsed()
    );
}

#[test]
fn sigterm_under_load_answers_truthfully() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    for _ in 0..2 {
        let load = Load::start(&srv.addr, 4, 2);
        load.wait_pushed(500);
        assert_eq!(srv.stop(), Some(0), "SIGTERM under load must exit cleanly");
        let log = load.finish();
        srv.restart();
        verify_after_restart(&srv, &log);
    }
}
