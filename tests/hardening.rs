//! Regressions for remote crashes and unreadable stored data, driven over real sockets:
//! D1 (a retry delay that overflowed chrono and panicked the engine at FAIL, in a crash
//! loop across restarts), D2 (a result nested so deep that the next workflow step could be
//! stored but never read back) and D5 (a `timeout` ≥ 2^63 that wrapped negative).

mod common;

use common::*;
use ojs_client::Reply;
use serde_json::{json, Value};

fn nested(levels: usize) -> Value {
    let text = format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    serde_json::from_str(&text).unwrap()
}

/// The engine still answers, with the jobs it had.
fn assert_alive(c: &mut ojs_client::Client) {
    let info = c.info().expect("INFO after the hostile input");
    assert!(info["totals"]["jobs"].is_number(), "{info}");
}

#[test]
fn d1_a_retry_delay_past_chronos_range_is_refused_at_push_not_met_at_fail() {
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    for retry in [
        json!({"initial_interval": "P999999999D"}),
        json!({"initial_interval": "P999999999D", "jitter": false}),
        json!({"initial_interval": "PT1S", "max_interval": "P999999999D"}),
        json!({"initial_interval": "PT18446744073709551615S"}),
    ] {
        let job = json!({"type": "t.d1", "queue": "d1", "args": [], "retry": retry});
        assert_eq!(
            err_code(&mut c, &format!("PUSH {job}")),
            "INVALID_RETRY_POLICY",
            "{retry}"
        );
    }
    // The same policies inside a workflow step and a cron template.
    let step = json!({"type": "t.d1", "args": [], "retry": {"initial_interval": "P999999999D"}});
    let wf = json!({"type": "chain", "name": "d1", "steps": [step]});
    match c.call(&format!("WORKFLOW CREATE {wf}")).unwrap() {
        Reply::Error { code, message } => {
            assert_eq!(code, "INVALID_PAYLOAD");
            assert!(
                message.contains("steps[0].retry.initial_interval"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let cron = json!({"name": "d1", "cron": "* * * * *", "type": "t.d1", "args": [],
        "options": {"retry": {"initial_interval": "P999999999D"}}});
    let code = err_code(&mut c, &format!("CRON ADD {cron}"));
    assert_eq!(code, "INVALID_RETRY_POLICY");

    // The longest accepted delay (100 years) goes through FAIL and a restart.
    let longest = json!({"type": "t.d1", "queue": "d1", "args": [],
        "retry": {"initial_interval": "P36500D", "max_interval": "P36500D", "jitter": true}});
    let id = push_id(&mut c, &longest);
    assert_eq!(id_of(&fetch_one(&mut w, "d1")), id);
    w.fail(&id, "boom", "m", &[]).expect("FAIL");
    let job = c.job(&id).unwrap();
    assert_eq!(job["state"], "retryable");
    let next = ts(&job["next_retry_at"]);
    let years = secs_between(server_now(&mut c), next) / (365.0 * 86_400.0);
    assert!((49.0..=100.1).contains(&years), "{years} years");
    assert_alive(&mut c);
    srv.restart();
    let mut c = srv.client();
    assert_eq!(state_of(&mut c, &id), "retryable");
    // A clock moved to the end of its range promotes it without overflow.
    for _ in 0..30 {
        advance(&mut c, 9.99e9);
    }
    assert_alive(&mut c);
}

#[test]
fn d2_a_result_too_deep_to_compose_is_refused_at_ack() {
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w2");
    let chain = json!({"type": "chain", "name": "deep", "steps": [
        {"type": "t.one", "queue": "d2", "args": []},
        {"type": "t.two", "queue": "d2", "args": []},
    ]});
    match c.call(&format!("WORKFLOW CREATE {chain}")).unwrap() {
        Reply::Bulk(_) => {}
        other => panic!("{other:?}"),
    }
    let first = fetch_one(&mut w, "d2");
    let id = id_of(&first);
    // 126 levels, as reported: accepted before, it made the next step unreadable.
    let deep = json!({"id": id, "result": nested(126)});
    let line = format!("ACK {deep}");
    match w.call(&line).unwrap() {
        Reply::Error { code, message } => {
            assert_eq!(code, "MALFORMED_COMMAND");
            assert!(message.contains("deeper than 64"), "{message}");
        }
        other => panic!("a 126-level result was accepted: {other:?}"),
    }
    // Still active, still ours: the refusal changed nothing.
    assert_eq!(state_of(&mut c, &id), "active");
    // The deepest accepted result is composed into the next step and reads back.
    w.ack(&id, Some(&nested(63)))
        .expect("ACK at the depth limit");
    let second = fetch_one(&mut w, "d2");
    assert_eq!(second["parent_results"]["0"], nested(63));
    srv.restart();
    let mut c = srv.client();
    let mut w = srv.worker("w2");
    let again = c
        .job(&id_of(&second))
        .expect("the composed step reads back");
    assert_eq!(again["parent_results"]["0"], nested(63));
    match c.call("QUEUE STATS d2").unwrap() {
        Reply::Bulk(_) => {}
        other => panic!("QUEUE STATS after restart: {other:?}"),
    }
    // The restart requeued the active step; it can be fetched and finished.
    let step = fetch_one(&mut w, "d2");
    w.ack(&id_of(&step), None).unwrap();

    // Every command that takes JSON refuses depth past the limit with a clear error.
    let too_deep = nested(65);
    for line in [
        format!("PUSH {}", json!({"type": "t.x", "args": [too_deep]})),
        format!("PUSHB [{}]", json!({"type": "t.x", "args": [too_deep]})),
        format!(
            "FAIL {}",
            json!({"id": id, "error": {"type": "x", "message": too_deep}})
        ),
        format!(
            "CRON ADD {}",
            json!({"name": "n", "cron": "* * * * *", "type": "t.x", "args": [too_deep]})
        ),
        format!(
            "WORKFLOW CREATE {}",
            json!({"type": "chain", "steps": too_deep})
        ),
    ] {
        assert_eq!(err_code(&mut c, &line), "MALFORMED_COMMAND", "{line:.60}");
    }
    assert_alive(&mut c);
}

#[test]
fn d5_a_timeout_past_the_range_is_refused_and_the_largest_holds_its_reservation() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w1 = srv.worker("w5a");
    let mut w2 = srv.worker("w5b");
    for t in [json!(1u64 << 63), json!(u64::MAX), json!(3_153_600_001u64)] {
        let job = json!({"type": "t.d5", "queue": "d5", "args": [], "timeout": t});
        assert_eq!(
            err_code(&mut c, &format!("PUSH {job}")),
            "INVALID_PAYLOAD",
            "{t}"
        );
    }
    let job = json!({"type": "t.d5", "queue": "d5", "args": [], "timeout": 3_153_600_000u64});
    let id = push_id(&mut c, &job);
    assert_eq!(id_of(&fetch_one(&mut w1, "d5")), id);
    // Before the fix the reservation was already over: a second worker got the job.
    advance(&mut c, 1.0);
    fetch_none(&mut w2, "d5");
    assert_eq!(state_of(&mut c, &id), "active");
    // Timestamps past year 9999 once in UTC are refused too.
    let late = json!({"type": "t.d5", "args": [], "scheduled_at": "9999-12-31T23:59:59-05:00"});
    assert_eq!(err_code(&mut c, &format!("PUSH {late}")), "INVALID_PAYLOAD");
}
