//! Everything the server does on its own as time passes: retry backoff, scheduled jobs,
//! expiry, visibility timeouts, dead workers, worker directives and retention. Time is
//! moved with `CLOCK ADVANCE`; nothing here sleeps to let a timer fire.

mod common;

use common::*;
use ojs_client::{Directive, JobOutcome, Reply, Worker};
use serde_json::{json, Value};
use std::time::Duration;

/// How far apart two reported times may be because the real clock kept moving.
const SLACK: f64 = 1.0;

fn job_in(queue: &str, retry: Value) -> Value {
    test_job(queue, json!({ "retry": retry }))
}

#[test]
fn exponential_backoff_is_capped_and_ends_in_the_dead_set() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-backoff");
    let retry = json!({"max_attempts": 5, "initial_interval": "PT10S", "backoff_coefficient": 2,
                       "max_interval": "PT25S", "jitter": false});
    let id = push_id(&mut c, &job_in("backoff", retry));
    let expected = [10.0, 20.0, 25.0, 25.0];
    for attempt in 1..=5u64 {
        let before = server_now(&mut c);
        fetch_and_fail(&mut w, "backoff", &id, attempt, "io.broken");
        let job = c.job(&id).unwrap();
        let errors = job["errors"].as_array().unwrap();
        assert_eq!(
            errors.len() as u64,
            attempt,
            "one history entry per failure"
        );
        let failed_at = ts(&errors[attempt as usize - 1]["timestamp"]);
        let lag = secs_between(before, failed_at);
        assert!(
            (0.0..SLACK).contains(&lag),
            "failure stamped {lag}s after INFO"
        );
        assert_eq!(job["error"]["type"], "io.broken");
        assert_eq!(job["error"]["message"], format!("failure {attempt}"));
        if attempt == 5 {
            assert_eq!(job["state"], "discarded");
            assert!(job.get("next_retry_at").is_none(), "{job}");
            break;
        }
        assert_eq!(job["state"], "retryable");
        let delay = retry_delay(&job);
        let want = expected[attempt as usize - 1];
        assert!(
            (delay - want).abs() < 0.001,
            "retry {attempt}: delay {delay}s, want {want}s"
        );
        if attempt == 1 {
            fetch_none(&mut w, "backoff"); // a retryable job is not fetchable
        }
        // Up to one second before next_retry_at: still waiting.
        let remaining = secs_between(server_now(&mut c), ts(&job["next_retry_at"]));
        advance(&mut c, remaining - SLACK);
        assert_eq!(state_of(&mut c, &id), "retryable");
        // Just past it: available again, with the retry time cleared.
        advance(&mut c, SLACK + 0.5);
        let job = c.job(&id).unwrap();
        assert_eq!(job["state"], "available");
        assert!(job.get("next_retry_at").is_none(), "{job}");
        assert_eq!(job["attempt"], attempt, "attempt only moves on fetch");
    }
    let job = c.job(&id).unwrap();
    let history: Vec<_> = job["errors"].as_array().unwrap().iter().collect();
    let attempts: Vec<_> = history.iter().map(|e| e["attempt"].as_u64()).collect();
    assert_eq!(attempts, [1, 2, 3, 4, 5].map(Some));
    let stamps: Vec<_> = history.iter().map(|e| ts(&e["timestamp"])).collect();
    assert!(stamps.windows(2).all(|p| p[0] < p[1]), "history in order");
    assert!(job["discarded_at"].is_string());
    assert_eq!(dead_ids(&mut c), vec![id.clone()]);
    fetch_none(&mut w, "backoff");
}

#[test]
fn jitter_stays_within_half_to_one_and_a_half_and_under_the_cap() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-jitter");
    let retry = json!({"max_attempts": 3, "initial_interval": "PT10S", "backoff_coefficient": 2,
                       "max_interval": "PT15S", "jitter": true});
    let ids: Vec<String> = (0..8)
        .map(|_| push_id(&mut c, &job_in("jitter", retry.clone())))
        .collect();
    let mut delays = Vec::new();
    // First retry: base 10 s, so [5, 15), and never above the 15 s cap.
    for id in &ids {
        fetch_and_fail(&mut w, "jitter", id, 1, "flaky");
        let d = retry_delay(&c.job(id).unwrap());
        assert!((5.0..15.0).contains(&d), "first retry delay {d}s");
        delays.push(d);
    }
    advance(&mut c, 16.0);
    // Second retry: base min(20, 15) = 15 s, so [7.5, 22.5) capped again at 15 s.
    // Promotion order follows the jittered delays, so take the jobs as they come.
    for _ in &ids {
        let job = fetch_one(&mut w, "jitter");
        assert_eq!(job["attempt"], 2);
        let id = id_of(&job);
        w.fail(&id, "flaky", "again", &[]).unwrap();
        let d = retry_delay(&c.job(&id).unwrap());
        assert!((7.5..=15.0).contains(&d), "second retry delay {d}s");
        delays.push(d);
    }
    let first = delays[0];
    assert!(
        delays.iter().any(|d| (d - first).abs() > 0.001),
        "16 jittered delays were all {first}s: no jitter applied"
    );
}

#[test]
fn non_retryable_errors_and_single_attempts_discard_at_once() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-nonretry");
    let retry = json!({"max_attempts": 5, "initial_interval": "PT1S", "jitter": false,
                       "non_retryable_errors": ["validation.bad_input", "auth.*"]});
    let cases = [
        ("validation.bad_input", "discarded"), // exact entry
        ("auth.expired", "discarded"),         // prefix.* entry
        ("auth.token.revoked", "discarded"),   // deeper under the prefix
        ("validation.other", "retryable"),     // exact entries do not match siblings
        ("author", "retryable"),               // "auth.*" needs the dot
        ("auth", "retryable"),
    ];
    for (etype, want) in cases {
        let id = push_id(&mut c, &job_in("nonretry", retry.clone()));
        fetch_and_fail(&mut w, "nonretry", &id, 1, etype);
        let job = c.job(&id).unwrap();
        assert_eq!(job["state"], want, "error type {etype}");
        assert_eq!(job["error"]["type"], etype);
    }
    // max_attempts 1: the first failure is the last.
    let id = push_id(&mut c, &job_in("nonretry", json!({"max_attempts": 1})));
    fetch_and_fail(&mut w, "nonretry", &id, 1, "anything");
    assert_eq!(state_of(&mut c, &id), "discarded");
    assert!(dead_ids(&mut c).contains(&id));
}

#[test]
fn default_policy_allows_three_attempts() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-default");
    let pushed = c.push(&test_job("defpol", json!({}))).unwrap();
    assert_eq!(pushed["retry"]["max_attempts"], 3);
    assert_eq!(pushed["retry"]["initial_interval"], "PT1S");
    assert_eq!(pushed["retry"]["jitter"], true);
    let id = id_of(&pushed);
    for attempt in 1..=3u64 {
        fetch_and_fail(&mut w, "defpol", &id, attempt, "boom");
        let job = c.job(&id).unwrap();
        if attempt < 3 {
            assert_eq!(job["state"], "retryable", "after attempt {attempt}");
            // Default delays are 1 s then 2 s before jitter, so at most 1.5 s and 3 s.
            let d = retry_delay(&job);
            let cap = 1.5 * f64::from(1u32 << (attempt - 1));
            assert!(
                d > 0.0 && d < cap,
                "default delay {d}s after attempt {attempt}"
            );
            advance(&mut c, 4.0);
        } else {
            assert_eq!(job["state"], "discarded");
            assert_eq!(job["errors"].as_array().unwrap().len(), 3);
        }
    }
}

#[test]
fn scheduled_job_waits_for_its_time() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-sched");
    let at = server_now(&mut c) + chrono::Duration::hours(1);
    let pushed = c
        .push(&test_job("sched", json!({"scheduled_at": rfc3339(at)})))
        .unwrap();
    let id = id_of(&pushed);
    assert_eq!(pushed["state"], "scheduled");
    assert!(pushed.get("enqueued_at").is_none(), "{pushed}");
    fetch_none(&mut w, "sched");
    advance(&mut c, 3590.0);
    assert_eq!(state_of(&mut c, &id), "scheduled");
    advance(&mut c, 11.0);
    let job = c.job(&id).unwrap();
    assert_eq!(job["state"], "available");
    let enqueued = ts(&job["enqueued_at"]);
    let late = secs_between(at, enqueued);
    assert!(
        (0.0..11.0 + SLACK).contains(&late),
        "enqueued {late}s after scheduled_at"
    );
    let got = fetch_one(&mut w, "sched");
    assert_eq!(id_of(&got), id);
    assert_eq!(got["state"], "active");
}

#[test]
fn expired_jobs_are_discarded_and_never_delivered() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-expire");
    let now = server_now(&mut c);
    let expiring = |q: &str, secs: i64| {
        test_job(
            q,
            json!({"expires_at": rfc3339(now + chrono::Duration::seconds(secs))}),
        )
    };
    // 1. Nobody fetches: the expiry timer discards it when the clock passes expires_at.
    let a = push_id(&mut c, &expiring("exp-timer", 60));
    let keep = push_id(&mut c, &expiring("exp-timer", 600));
    // A scheduled job whose expiry comes before its start time never becomes available.
    let mut sched = expiring("exp-timer", 120);
    sched["scheduled_at"] = json!(rfc3339(now + chrono::Duration::seconds(300)));
    let s = push_id(&mut c, &sched);
    advance(&mut c, 61.0);
    let job = c.job(&a).unwrap();
    assert_eq!(job["state"], "discarded");
    assert_eq!(job["error"]["type"], "expired");
    assert_eq!(job["attempt"], 0, "an expired job never ran");
    assert_eq!(state_of(&mut c, &keep), "available");
    advance(&mut c, 300.0);
    let job = c.job(&s).unwrap();
    assert_eq!(job["state"], "discarded");
    assert_eq!(job["error"]["type"], "expired");
    let got = fetch_one(&mut w, "exp-timer");
    assert_eq!(id_of(&got), keep, "only the unexpired job is delivered");

    // 2. The clock passes expires_at and a FETCH arrives right behind it: pipelined on one
    // connection, so the FETCH is often applied in the same engine batch as the clock move,
    // before any timer has run. Either way the job must not be delivered.
    for round in 0..5 {
        let now = server_now(&mut c);
        let q = format!("exp-fetch-{round}");
        let expires = rfc3339(now + chrono::Duration::seconds(10));
        let id = push_id(&mut w, &test_job(&q, json!({ "expires_at": expires })));
        w.send_line("CLOCK ADVANCE 11").unwrap();
        w.send_line(&format!("FETCH {q}")).unwrap();
        w.flush().unwrap();
        assert_eq!(w.read_reply().unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            w.read_reply().unwrap(),
            Reply::Null,
            "expired job delivered"
        );
        let job = c.job(&id).unwrap();
        assert_eq!(job["state"], "discarded");
        assert_eq!(job["error"]["type"], "expired");
        assert_eq!(job["attempt"], 0);
        assert!(dead_ids(&mut c).contains(&id));
    }
}

#[test]
fn visibility_timeout_requeues_then_discards_when_attempts_run_out() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w1 = srv.worker("w-vis-1");
    let mut w2 = srv.worker("w-vis-2");
    let vis = |n: u32| test_job("vis", json!({"timeout": 30, "retry": {"max_attempts": n}}));
    let id = push_id(&mut c, &vis(3));
    let job = fetch_one(&mut w1, "vis");
    assert_eq!(job["attempt"], 1);
    advance(&mut c, 29.0);
    assert_eq!(state_of(&mut c, &id), "active");
    advance(&mut c, 2.0);
    let job = c.job(&id).unwrap();
    assert_eq!(
        job["state"], "available",
        "no retry delay after a lost attempt"
    );
    assert_eq!(job["error"]["type"], "timeout");
    assert_eq!(job["errors"][0]["type"], "timeout");
    assert_eq!(job["errors"][0]["attempt"], 1);
    assert_eq!(
        job["attempt"], 1,
        "attempt moves on the next fetch, not on timeout"
    );
    assert!(job.get("worker_id").is_none(), "{job}");
    // Another worker gets it as attempt 2; the first worker's late ACK is refused.
    let again = fetch_one(&mut w2, "vis");
    assert_eq!(id_of(&again), id);
    assert_eq!(again["attempt"], 2);
    let code = err_code(&mut w1, &format!("ACK {}", json!({"id": id})));
    assert!(
        code == "NOT_OWNER" || code == "INVALID_STATE_TRANSITION",
        "{code}"
    );
    w2.ack(&id, None).unwrap();
    assert_eq!(state_of(&mut c, &id), "completed");

    // With a single attempt allowed, a timeout is final.
    let id = push_id(&mut c, &vis(1));
    fetch_one(&mut w1, "vis");
    advance(&mut c, 31.0);
    let job = c.job(&id).unwrap();
    assert_eq!(job["state"], "discarded");
    assert_eq!(job["error"]["type"], "timeout");
    assert!(dead_ids(&mut c).contains(&id));
    fetch_none(&mut w2, "vis");
}

#[test]
fn beat_extends_the_reservation() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-beat");
    let id = push_id(&mut c, &test_job("beat", json!({"timeout": 30})));
    fetch_one(&mut w, "beat");
    advance(&mut c, 20.0);
    assert_eq!(
        w.beat("w-beat", std::slice::from_ref(&id)).unwrap(),
        Directive::Running
    );
    advance(&mut c, 20.0); // 40 s after the fetch, 20 s after the beat
    assert_eq!(
        state_of(&mut c, &id),
        "active",
        "BEAT did not extend the reservation"
    );
    advance(&mut c, 11.0); // 31 s after the beat
    let job = c.job(&id).unwrap();
    assert_eq!(job["state"], "available");
    assert_eq!(job["error"]["type"], "timeout");
}

#[test]
fn silent_worker_is_declared_dead_and_its_jobs_requeued() {
    let srv = Server::start_with(&["--heartbeat-timeout", "45"]);
    let mut c = srv.client();
    let mut dead = srv.worker("w-dies");
    let mut alive = srv.worker("w-lives");
    let a = push_id(&mut c, &test_job("dw", json!({})));
    let b = push_id(&mut c, &test_job("dw", json!({})));
    assert_eq!(id_of(&fetch_one(&mut dead, "dw")), a);
    assert_eq!(id_of(&fetch_one(&mut alive, "dw")), b);
    advance(&mut c, 30.0);
    assert_eq!(
        alive.beat("w-lives", std::slice::from_ref(&b)).unwrap(),
        Directive::Running
    );
    advance(&mut c, 16.0); // 46 s of silence from w-dies, 16 s from w-lives
    let job = c.job(&a).unwrap();
    assert_eq!(job["state"], "available");
    assert_eq!(job["error"]["type"], "worker_death");
    assert_eq!(job["errors"][0]["attempt"], 1);
    assert_eq!(
        state_of(&mut c, &b),
        "active",
        "a beating worker keeps its job"
    );
    let info = c.info().unwrap();
    let wids: Vec<&str> = info["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["wid"].as_str())
        .collect();
    assert!(
        !wids.contains(&"w-dies"),
        "dead worker still registered: {wids:?}"
    );
    assert!(wids.contains(&"w-lives"), "live worker dropped: {wids:?}");
    // The requeued job goes to the next fetch as attempt 2; the survivor finishes its own.
    let again = fetch_one(&mut alive, "dw");
    assert_eq!(
        (id_of(&again), again["attempt"].as_u64()),
        (a.clone(), Some(2))
    );
    alive.ack(&a, None).unwrap();
    alive.ack(&b, None).unwrap();
    assert_eq!(state_of(&mut c, &a), "completed");
    assert_eq!(state_of(&mut c, &b), "completed");
}

#[test]
fn worker_directives_arrive_on_the_next_beat() {
    let srv = Server::start();
    let mut admin = srv.client();
    let mut w = srv.worker("w-dir");
    assert_eq!(w.beat("w-dir", &[]).unwrap(), Directive::Running);
    admin.quiet_worker("w-dir").unwrap();
    let raw = w
        .call(&format!("BEAT {}", json!({"wid": "w-dir"})))
        .unwrap();
    let Reply::Bulk(body) = raw else {
        panic!("quiet BEAT reply: {raw:?}")
    };
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["state"], "quiet");
    assert_eq!(
        w.beat("w-dir", &[]).unwrap(),
        Directive::Quiet,
        "directive persists"
    );
    admin.terminate_worker("w-dir").unwrap();
    assert_eq!(w.beat("w-dir", &[]).unwrap(), Directive::Terminate);
    admin.quiet_worker("w-dir").unwrap();
    assert_eq!(
        w.beat("w-dir", &[]).unwrap(),
        Directive::Terminate,
        "quiet must not undo terminate"
    );
    for d in ["QUIET", "TERMINATE"] {
        let code = err_code(&mut admin, &format!("WORKER {d} no-such-worker"));
        assert_eq!(code, "NOT_FOUND");
    }
}

#[test]
fn client_worker_stops_when_terminated_by_the_server() {
    let srv = Server::start();
    let mut c = srv.client();
    let worker = Worker::new(&srv.addr)
        .wid("w-runner")
        .queues(&["runner"])
        .concurrency(2)
        .heartbeat_interval(Duration::from_millis(100))
        .register("test.double", |job| {
            let n = job["args"][0].as_i64().unwrap_or(0);
            JobOutcome::Ack(Some(json!(n * 2)))
        });
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(worker.run());
    });
    let double = |n| json!({"type": "test.double", "args": [n], "queue": "runner"});
    let ids: Vec<String> = (0..5).map(|n| push_id(&mut c, &double(n))).collect();
    for (n, id) in ids.iter().enumerate() {
        let job = wait_for(
            Duration::from_secs(10),
            "the worker to finish a job",
            || {
                let j = c.job(id).unwrap();
                (j["state"] == "completed").then_some(j)
            },
        );
        assert_eq!(job["result"], json!(n as i64 * 2));
    }
    c.terminate_worker("w-runner").unwrap();
    // The next heartbeat (≤100 ms) carries the directive; FETCH blocks ≤300 ms.
    let stats = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("worker did not stop after WORKER TERMINATE")
        .expect("worker returned an error");
    thread.join().unwrap();
    assert_eq!((stats.processed, stats.failed), (5, 0));
}

#[test]
fn completed_and_cancelled_jobs_are_pruned_after_retention() {
    let srv = Server::start_with(&["--retention", "60"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-ret");
    let done = push_id(&mut c, &test_job("ret", json!({})));
    fetch_one(&mut w, "ret");
    w.ack(&done, None).unwrap();
    let cancelled = push_id(&mut c, &test_job("ret", json!({})));
    c.cancel(&cancelled).unwrap();
    advance(&mut c, 55.0);
    assert_eq!(state_of(&mut c, &done), "completed");
    assert_eq!(state_of(&mut c, &cancelled), "cancelled");
    advance(&mut c, 6.0);
    assert_eq!(err_code(&mut c, &format!("JOB {done}")), "NOT_FOUND");
    assert_eq!(err_code(&mut c, &format!("JOB {cancelled}")), "NOT_FOUND");
    assert_eq!(c.info().unwrap()["totals"]["jobs"], 0);
}

#[test]
fn dead_set_is_bounded_by_count_and_age() {
    let srv = Server::start_with(&["--dead-max", "2", "--dead-retention", "100"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-deadmax");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = push_id(&mut c, &job_in("deadmax", json!({"max_attempts": 1})));
        fetch_and_fail(&mut w, "deadmax", &id, 1, "fatal");
        ids.push(id);
        advance(&mut c, 1.0); // distinct discard times
    }
    assert_eq!(dead_ids(&mut c), vec![ids[2].clone(), ids[1].clone()]);
    assert_eq!(err_code(&mut c, &format!("JOB {}", ids[0])), "NOT_FOUND");
    assert_eq!(c.info().unwrap()["totals"]["dead"], 2);
    // ids[1] was discarded 2 s before now, ids[2] 1 s before.
    advance(&mut c, 98.5);
    assert_eq!(dead_ids(&mut c), vec![ids[2].clone()]);
    advance(&mut c, 1.0);
    assert!(dead_ids(&mut c).is_empty());
    assert_eq!(err_code(&mut c, &format!("JOB {}", ids[2])), "NOT_FOUND");
}
