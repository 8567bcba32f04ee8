//! Cron jobs across restarts (ojs-cron §7.3): registrations are durable, each fire
//! enqueues exactly one job even when the process is killed around it, missed occurrences
//! collapse into one catch-up job, and a DST spring-forward skips (and reports) the
//! occurrence that does not exist.
//!
//! The test clock's offset resets when the process restarts, so schedules are read from
//! the server (`next_run_at`) and the clock is advanced again after each restart.

mod common;
mod cron_support;

use chrono::{Duration, LocalResult, TimeZone, Utc};
use common::*;
use cron_support::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// After a restart: every recorded fire has exactly one job, and every job one fire.
fn check_exactly_once(srv: &Server, queue: &str) -> usize {
    let mut c = srv.client();
    let run_count = get(&mut c, "tick")["run_count"]
        .as_u64()
        .expect("run_count") as usize;
    let fired: BTreeSet<String> = of_type(&cron_events(srv), "cron.triggered")
        .iter()
        .map(|e| e["data"]["job_id"].as_str().expect("job_id").to_string())
        .collect();
    let ids: Vec<String> = fired.iter().cloned().collect();
    assert!(
        states_of(&mut c, &ids).iter().all(Option::is_some),
        "every fired job exists"
    );
    // Jobs in the queue, whatever their state.
    let counts = c.info().expect("INFO")["queues"][queue].clone();
    let jobs: u64 = counts
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    assert_eq!(fired.len(), run_count, "one cron.triggered per run");
    assert_eq!(
        jobs as usize, run_count,
        "one job per run, and no other: {counts}"
    );
    run_count
}

#[test]
fn each_fire_enqueues_exactly_one_job_across_kill9() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    {
        let mut c = srv.client();
        add(
            &mut c,
            json!({"name": "tick", "cron": "@every 1h", "type": "a.tick",
                   "options": {"queue": "ticks"}, "overlap_policy": "allow"}),
        );
        advance(&mut c, 3600.5);
    }
    srv.kill9();
    srv.restart();
    // The acknowledged fire is on disk and is not repeated.
    assert_eq!(check_exactly_once(&srv, "ticks"), 1);
    let mut fired = 1;
    for round in 0..4 {
        let mut c = srv.client();
        let next = ts(&get(&mut c, "tick")["next_run_at"]);
        let secs = secs_between(server_now(&mut c), next) + 0.5;
        // Kill the process while the fire may be anywhere: not started, being committed,
        // or done. Whatever happened, fires and jobs match one to one.
        c.send_line(&format!("CLOCK ADVANCE {secs}")).expect("send");
        c.flush().expect("flush");
        if round % 2 == 1 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        srv.kill9();
        srv.restart();
        let n = check_exactly_once(&srv, "ticks");
        assert!(
            n == fired || n == fired + 1,
            "round {round}: {fired} -> {n}"
        );
        fired = n;
    }
    // A fire that completed before the kill is never undone; a fire that did not happen
    // is still due: advancing once more fires exactly one more.
    let mut c = srv.client();
    let next = ts(&get(&mut c, "tick")["next_run_at"]);
    advance_to(&mut c, next);
    assert_eq!(check_exactly_once(&srv, "ticks"), fired + 1);
}

#[test]
fn missed_occurrences_collapse_into_one_catch_up_job() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start();
    let mut c = srv.client();
    add(
        &mut c,
        json!({"name": "tick", "cron": "@every 1h", "type": "a.tick",
               "options": {"queue": "catchup"}, "overlap_policy": "allow"}),
    );
    let first = ts(&get(&mut c, "tick")["next_run_at"]);
    drop(c);
    srv.restart();
    let mut c = srv.client();
    let j = get(&mut c, "tick");
    assert_eq!(ts(&j["next_run_at"]), first, "the registration survived");
    // Five occurrences come due at once: one job, for the latest of them.
    let latest = first + Duration::hours(4);
    advance_to(&mut c, latest);
    let mut w = srv.worker("w1");
    let jobs = w.fetch_many(&["catchup"], 100).expect("FETCH");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(ts(&jobs[0]["meta"]["cron_triggered_at"]), latest);
    let j = get(&mut c, "tick");
    assert_eq!(j["run_count"], 1);
    assert_eq!(ts(&j["last_run_at"]), latest);
    assert_eq!(ts(&j["next_run_at"]), latest + Duration::hours(1));

    let events = cron_events(&srv);
    assert_eq!(kinds(&events), ["cron.skipped", "cron.triggered"]);
    let missed = &events[0]["data"];
    assert_eq!(
        pick(missed, &["reason", "missed_count", "truncated"]),
        json!(["missed", 4, false])
    );
    assert_eq!(ts(&missed["scheduled_at"]), first);
    assert_eq!(ts(&missed["last_missed_at"]), latest - Duration::hours(1));
    assert_eq!(ts(&events[1]["data"]["scheduled_at"]), latest);
    assert_eq!(events[1]["data"]["job_id"], jobs[0]["id"]);

    // The next occurrence is an ordinary one.
    w.ack(&id_of(&jobs[0]), None).expect("ACK");
    advance_to(&mut c, latest + Duration::hours(1));
    assert_eq!(w.fetch_many(&["catchup"], 100).expect("FETCH").len(), 1);
    assert_eq!(get(&mut c, "tick")["run_count"], 2);
}

#[test]
fn spring_forward_skips_the_missing_time_and_reports_it() {
    if common::store_missing() {
        return;
    }
    let srv = Server::start();
    let mut c = srv.client();
    let ny = chrono_tz::America::New_York;
    let local = |d: chrono::NaiveDate, h: u32, m: u32| match ny
        .from_local_datetime(&d.and_hms_opt(h, m, 0).unwrap())
    {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        other => panic!("{d} {h}:{m} is not a single instant: {other:?}"),
    };
    // The next day on which 02:30 does not exist in New York.
    let mut day = server_now(&mut c).with_timezone(&ny).date_naive() + Duration::days(1);
    while !matches!(
        ny.from_local_datetime(&day.and_hms_opt(2, 30, 0).unwrap()),
        LocalResult::None
    ) {
        day = day.succ_opt().unwrap();
    }
    add(
        &mut c,
        json!({"name": "nightly", "cron": "30 2 * * *", "timezone": "America/New_York",
               "type": "a.nightly", "options": {"queue": "nightly"}, "overlap_policy": "allow"}),
    );
    // Jump to noon the day before (months may pass: one catch-up job for all of them).
    let eve = day.pred_opt().unwrap();
    advance_to(&mut c, local(eve, 12, 0));
    let j = get(&mut c, "nightly");
    assert_eq!(ts(&j["last_run_at"]), local(eve, 2, 30));
    // next_run_at passes over the day that has no 02:30.
    let after = day.succ_opt().unwrap();
    assert_eq!(ts(&j["next_run_at"]), local(after, 2, 30));
    let runs = j["run_count"].clone();

    advance_to(&mut c, local(day, 12, 0));
    assert_eq!(get(&mut c, "nightly")["run_count"], runs, "nothing fired");
    let events = cron_events(&srv);
    let skipped = of_type(&events, "cron.skipped");
    let dst = skipped.last().expect("a cron.skipped");
    assert_eq!(dst["data"]["reason"], "dst_skip");
    assert_eq!(dst["data"]["local_time"], format!("{day}T02:30:00"));
    // Reported when the clocks jumped: 03:00 EDT.
    assert_eq!(ts(&dst["data"]["scheduled_at"]), local(day, 3, 0));

    advance_to(&mut c, local(after, 12, 0));
    let j = get(&mut c, "nightly");
    assert_eq!(j["run_count"], runs.as_u64().unwrap() + 1);
    assert_eq!(ts(&j["last_run_at"]), local(after, 2, 30));
    let last = of_type(&cron_events(&srv), "cron.triggered").pop().unwrap();
    assert_eq!(ts(&last["data"]["scheduled_at"]), local(after, 2, 30));
}
