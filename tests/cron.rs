//! Cron jobs over TCP (ojs-cron §2-§9): registration and its errors, `next_run_at`, a fire
//! enqueuing exactly one job built from the template, the overlap policies, and the cron
//! events. Time moves with `CLOCK ADVANCE`; fires happen in the same engine turn, so the
//! `+OK` of an advance means its fires are committed. Restarts, catch-up and DST are in
//! `cron_restart.rs`, the HTTP routes in `cron_http.rs`.

mod common;
mod cron_support;

use chrono::{Duration, Timelike};
use common::*;
use cron_support::*;
use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::{json, Value};

/// Every ten seconds: short enough that a worker holding the previous run stays within
/// its heartbeat and visibility timeouts while the clock moves.
fn every10(name: &str, policy: &str) -> Value {
    json!({"name": name, "cron": "@every 10s", "type": "report.generate",
           "options": {"queue": name}, "overlap_policy": policy})
}

#[test]
fn add_get_list_enable_disable_delete() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let now = server_now(&mut c);
    let r = add(
        &mut c,
        json!({"name": "report.daily", "cron": "0 9 * * *", "timezone": "America/New_York",
               "type": "report.generate", "args": [{"report": "daily"}], "options": {"queue": "reports"},
               "description": "9 AM Eastern", "run_count": 99, "last_run_at": "2020-01-01T00:00:00Z"}),
    );
    assert_eq!(r["created"], true);
    let j = &r["cron_job"];
    let fields = [
        "name",
        "cron",
        "timezone",
        "type",
        "args",
        "overlap_policy",
        "enabled",
        "run_count",
        "last_run_at",
        "description",
    ];
    assert_eq!(
        pick(j, &fields),
        json!(["report.daily", "0 9 * * *", "America/New_York", "report.generate",
               [{"report": "daily"}], "skip", true, 0, null, "9 AM Eastern"])
    );
    // next_run_at: the first 09:00 New York time after now.
    let next = ts(&j["next_run_at"]);
    let local = next.with_timezone(&chrono_tz::America::New_York);
    assert_eq!((local.hour(), local.minute(), local.second()), (9, 0, 0));
    assert!(next > now && next <= now + Duration::hours(24), "{next}");
    let created_at = j["created_at"].clone();

    // The same name again updates it (upsert, ojs-cron §8.1): created_at stays.
    let r = add(
        &mut c,
        json!({"name": "report.daily", "cron": "30 17 * * *", "type": "report.generate"}),
    );
    assert_eq!(r["created"], false);
    assert_eq!(r["cron_job"]["created_at"], created_at);
    assert_eq!(r["cron_job"]["timezone"], "UTC");
    let next = ts(&r["cron_job"]["next_run_at"]);
    assert_eq!((next.hour(), next.minute(), next.second()), (17, 30, 0));

    add(
        &mut c,
        json!({"name": "cache-cleanup", "cron": "@hourly", "type": "maintenance.cache_cleanup"}),
    );
    let list = call_json(&mut c, "CRON LIST");
    assert_eq!(names(&list), ["cache-cleanup", "report.daily"]);
    assert_eq!(list["count"], 2);
    for j in list["cron_jobs"].as_array().unwrap() {
        assert!(ts(&j["next_run_at"]) > now, "{j}");
    }

    // Disabled: kept, but next_run_at is null (ojs-cron §8.5).
    let d = call_json(&mut c, "CRON DISABLE cache-cleanup")["cron_job"].clone();
    assert_eq!(pick(&d, &["enabled", "next_run_at"]), json!([false, null]));
    let disabled = call_json(&mut c, r#"CRON LIST {"enabled": false}"#);
    assert_eq!(names(&disabled), ["cache-cleanup"]);
    let e = call_json(&mut c, "CRON ENABLE cache-cleanup")["cron_job"].clone();
    let next = ts(&e["next_run_at"]);
    assert_eq!(
        (e["enabled"].clone(), next.minute(), next.second()),
        (json!(true), 0, 0)
    );
    assert!(next > now && next <= now + Duration::hours(1) + Duration::seconds(5));

    call_ok(&mut c, "CRON DEL cache-cleanup");
    for line in [
        "CRON GET cache-cleanup",
        "CRON DEL cache-cleanup",
        "CRON ENABLE nope",
        "CRON DISABLE nope",
    ] {
        assert_eq!(err_code(&mut c, line), "NOT_FOUND", "{line}");
    }
    assert_eq!(names(&call_json(&mut c, "CRON LIST")), ["report.daily"]);
}

#[test]
fn invalid_registrations_are_refused() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let with = |k: &str, v: Value| {
        let mut d = json!({"name": "x", "cron": "* * * * *", "type": "a.b"});
        d[k] = v;
        d
    };
    let cases = [
        (with("cron", json!("60 * * * *")), "INVALID_CRON_EXPRESSION"),
        (with("cron", json!("* * * *")), "INVALID_CRON_EXPRESSION"),
        (
            with("cron", json!("*/0 * * * *")),
            "INVALID_CRON_EXPRESSION",
        ),
        (
            with("cron", json!("5-1 * * * *")),
            "INVALID_CRON_EXPRESSION",
        ),
        (with("cron", json!("")), "INVALID_CRON_EXPRESSION"),
        (with("cron", json!("@reboot")), "INVALID_CRON_EXPRESSION"),
        (
            with("cron", json!("@every 100ms")),
            "INVALID_CRON_EXPRESSION",
        ),
        (with("cron", json!("0 0 30 2 *")), "INVALID_CRON_EXPRESSION"),
        (with("timezone", json!("EST")), "INVALID_PAYLOAD"),
        (with("timezone", json!("+05:00")), "INVALID_PAYLOAD"),
        (with("name", json!("Bad Name")), "INVALID_PAYLOAD"),
        (
            with("overlap_policy", json!("sometimes")),
            "INVALID_PAYLOAD",
        ),
        (with("type", json!("Not.Valid")), "INVALID_JOB_TYPE"),
        (with("args", json!({})), "INVALID_ARGS"),
        (with("options", json!({"queue": "Bad Q"})), "INVALID_QUEUE"),
        (
            with("options", json!({"scheduled_at": "2030-01-01T00:00:00Z"})),
            "INVALID_PAYLOAD",
        ),
    ];
    for (def, code) in cases {
        assert_eq!(err_code(&mut c, &format!("CRON ADD {def}")), code, "{def}");
    }
    match c
        .call(r#"CRON ADD {"name":"x","cron":"60 * * * *","type":"a"}"#)
        .expect("call")
    {
        Reply::Error { code, message } => {
            assert_eq!(code, "INVALID_CRON_EXPRESSION");
            assert_eq!(
                message,
                r#"cron "60 * * * *": minute: 60 is out of range 0-59"#
            );
        }
        other => panic!("{other:?}"),
    }
    for line in [
        "CRON",
        "CRON ADD",
        "CRON ADD [1]",
        "CRON ADD {x",
        "CRON DEL",
        "CRON NOW x",
    ] {
        assert_eq!(err_code(&mut c, line), "MALFORMED_COMMAND", "{line}");
    }
    assert_eq!(call_json(&mut c, "CRON LIST")["count"], 0);
}

#[test]
fn a_fire_enqueues_exactly_one_job_from_the_template() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    // A minute at least 29 minutes away, so the real clock cannot reach it by itself.
    let minute = (server_now(&mut c).minute() + 30) % 60;
    let expr = format!("{minute} * * * *");
    add(
        &mut c,
        json!({"name": "sync", "cron": expr, "type": "integration.sync", "args": [{"source": "api"}],
               "options": {"queue": "cron-fire", "priority": 5, "meta": {"team": "data"}},
               "meta": {"owner": "ops"}}),
    );
    let due = ts(&get(&mut c, "sync")["next_run_at"]);
    assert_eq!((due.minute(), due.second()), (minute, 0));

    let early = secs_between(server_now(&mut c), due) - 2.0;
    advance(&mut c, early);
    fetch_none(&mut w, "cron-fire");
    assert_eq!(get(&mut c, "sync")["run_count"], 0);
    advance_to(&mut c, due);
    let job = fetch_one(&mut w, "cron-fire");
    fetch_none(&mut w, "cron-fire");
    assert_eq!(
        pick(&job, &["type", "args", "priority", "queue"]),
        json!(["integration.sync", [{"source": "api"}], 5, "cron-fire"])
    );
    let meta = &job["meta"];
    assert_eq!(
        pick(meta, &["team", "owner", "cron_name"]),
        json!(["data", "ops", "sync"])
    );
    assert_eq!(ts(&meta["cron_triggered_at"]), due);

    let j = get(&mut c, "sync");
    assert_eq!(j["run_count"], 1);
    assert_eq!(ts(&j["last_run_at"]), due);
    assert_eq!(ts(&j["next_run_at"]), due + Duration::hours(1));
    assert_eq!(j["active_job_ids"], json!([id_of(&job)]));

    let events = cron_events(&srv);
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        pick(e, &["type", "source", "subject"]),
        json!(["cron.triggered", "ojs://ojsd/cron", "sync"])
    );
    let d = &e["data"];
    let keys = [
        "cron_name",
        "cron_expr",
        "cron_expression",
        "timezone",
        "job_id",
        "job_type",
        "queue",
        "run_count",
    ];
    assert_eq!(
        pick(d, &keys),
        json!([
            "sync",
            expr,
            expr,
            "UTC",
            id_of(&job),
            "integration.sync",
            "cron-fire",
            1
        ])
    );
    assert_eq!(ts(&d["scheduled_at"]), due);
    assert_eq!(ts(&d["scheduled_time"]), due);
    assert!(ts(&d["actual_time"]) >= due);
}

#[test]
fn skip_policy_skips_while_the_previous_run_is_unfinished() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    add(&mut c, every10("ov-skip", "skip"));
    advance(&mut c, 10.5);
    let first = fetch_one(&mut w, "ov-skip"); // active
    advance(&mut c, 10.0);
    fetch_none(&mut w, "ov-skip");
    w.ack(&id_of(&first), None).expect("ACK");
    advance(&mut c, 10.0);
    let second = get(&mut c, "ov-skip")["active_job_ids"][0].clone();
    // Still waiting in the queue counts as unfinished too.
    advance(&mut c, 10.0);
    assert_eq!(get(&mut c, "ov-skip")["run_count"], 2);
    assert_eq!(
        id_of(&fetch_one(&mut w, "ov-skip")),
        second.as_str().unwrap()
    );
    fetch_none(&mut w, "ov-skip");

    let events = cron_events(&srv);
    assert_eq!(
        kinds(&events),
        [
            "cron.triggered",
            "cron.skipped",
            "cron.triggered",
            "cron.skipped"
        ]
    );
    let skip = &events[1]["data"];
    assert_eq!(
        pick(
            skip,
            &[
                "cron_name",
                "cron_expr",
                "job_type",
                "reason",
                "existing_job_id",
                "active_job_id"
            ]
        ),
        json!([
            "ov-skip",
            "@every 10s",
            "report.generate",
            "overlap_skip",
            id_of(&first),
            id_of(&first)
        ])
    );
    assert_eq!(events[3]["data"]["existing_job_id"], second);
    assert!(skip["scheduled_at"].is_string());
}

#[test]
fn allow_enqueue_and_cancel_previous() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w1");
    for (name, policy) in [
        ("ov-allow", "allow"),
        ("ov-enqueue", "enqueue"),
        ("ov-cancel", "cancel_previous"),
    ] {
        add(&mut c, every10(name, policy));
    }
    advance(&mut c, 10.5);
    let first: Vec<String> = ["ov-allow", "ov-enqueue", "ov-cancel"]
        .iter()
        .map(|q| id_of(&fetch_one(&mut w, q)))
        .collect();
    advance(&mut c, 10.0);

    // allow: a second run starts next to the first.
    let second = fetch_one(&mut w, "ov-allow");
    assert_ne!(id_of(&second), first[0]);
    assert_eq!(state_of(&mut c, &first[0]), "active");

    // enqueue: the new run waits (pending) until the first finishes, then is available.
    let waiting = get(&mut c, "ov-enqueue")["active_job_ids"].clone();
    assert_eq!(waiting[0], first[1].as_str());
    let next = waiting[1].as_str().expect("a second job").to_string();
    assert_eq!(state_of(&mut c, &next), "pending");
    fetch_none(&mut w, "ov-enqueue");
    w.ack(&first[1], None).expect("ACK");
    assert_eq!(state_of(&mut c, &next), "available");
    assert_eq!(id_of(&fetch_one(&mut w, "ov-enqueue")), next);

    // cancel_previous: the first run is cancelled and the new one is available.
    assert_eq!(state_of(&mut c, &first[2]), "cancelled");
    let replacement = fetch_one(&mut w, "ov-cancel");
    assert_ne!(id_of(&replacement), first[2]);
    assert_eq!(
        get(&mut c, "ov-cancel")["active_job_ids"],
        json!([id_of(&replacement)])
    );

    let events = cron_events(&srv);
    assert_eq!(of_type(&events, "cron.triggered").len(), 6);
    assert!(of_type(&events, "cron.skipped").is_empty(), "{events:?}");
}

#[test]
fn live_subscription_sees_cron_events() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let opts = ConnectOptions {
        timeout: Some(std::time::Duration::from_secs(10)),
        ..Default::default()
    };
    let mut sub = Client::connect_with(&srv.addr, &opts).expect("connect");
    let ok = sub
        .call(r#"SUBSCRIBE {"event_types": ["cron.*"]}"#)
        .expect("SUBSCRIBE");
    assert_eq!(ok, Reply::Simple("OK".into()));
    add(&mut c, every10("ev", "skip"));
    advance(&mut c, 10.5);
    advance(&mut c, 10.0);
    let mut next = || match sub.read_reply().expect("event") {
        Reply::Bulk(b) => serde_json::from_slice::<Value>(&b).expect("JSON"),
        other => panic!("{other:?}"),
    };
    let (t, s) = (next(), next());
    assert_eq!(
        (t["type"].clone(), s["type"].clone()),
        (json!("cron.triggered"), json!("cron.skipped"))
    );
    assert_eq!(s["data"]["existing_job_id"], t["data"]["job_id"]);
    assert_eq!(s["data"]["reason"], "overlap_skip");
    assert_eq!(s["subject"], "ev");
}
