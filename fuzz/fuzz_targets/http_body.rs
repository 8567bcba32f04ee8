//! The parsers that take a client's JSON request body (HTTP, and the same payloads on the
//! line protocol), over arbitrary bytes. None may panic, and:
//!
//! - `ojsd::json::parse` accepts only documents at most `MAX_DEPTH` deep, and its bracket
//!   scan measures an accepted document at least as deep as the parsed value;
//! - a workflow definition accepted by `parse_definition` stays within the job and nesting
//!   limits, and every job in it passes PUSH's validator on its own;
//! - a cron registration accepted by `CronDef::parse` reads back from its stored form
//!   (`to_json`) to the same definition, its jobs pass PUSH's validator, and its next
//!   occurrence, when there is one, is after now.
//!
//! The input is also tried as `expression\ntimezone` for the schedule parser directly,
//! which reaches it far more often than through a JSON document.
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use ojsd::cron::{CronDef, Schedule};
use ojsd::job::validate::{parse_new_job, Limits};
use ojsd::json::{self, MAX_DEPTH};
use ojsd::workflow::{self, Def, Flow};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let now = Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).unwrap();
    if let Ok(text) = std::str::from_utf8(data) {
        let (expr, tz) = text.split_once('\n').unwrap_or((text, "UTC"));
        if let Ok(s) = Schedule::parse(expr, tz) {
            next(&s, now);
        }
    }
    let v: Value = match json::parse(data) {
        Ok(v) => v,
        Err(json::JsonError::TooDeep) => {
            assert!(json::text_depth(data, MAX_DEPTH) > MAX_DEPTH);
            return;
        }
        Err(json::JsonError::Invalid(_)) => return,
    };
    let d = json::depth(&v);
    assert!(d <= MAX_DEPTH, "accepted a document {d} deep");
    // Not equal: with a repeated key the value keeps the last one, the scan sees both.
    let scanned = json::text_depth(data, usize::MAX);
    assert!(
        scanned >= d,
        "the scan ({scanned}) measures less than the value ({d})"
    );

    let limits = Limits::default();
    match workflow::parse_definition(&v, &limits, now) {
        Ok(def) => {
            let mut jobs = (0, 0);
            flow(&def.root, 1, now, &mut jobs);
            assert_eq!(jobs, (def.job_count, def.callback_count));
            assert!(def.job_count + def.callback_count <= workflow::MAX_JOBS);
        }
        Err(problems) => assert!(!problems.is_empty(), "a refusal says why"),
    }

    if let Ok((def, schedule)) = CronDef::parse(&v, now, &limits) {
        let stored = Value::Object(def.to_json());
        let (again, _) = CronDef::parse(&stored, now, &limits).expect("a stored cron reads back");
        assert_eq!(again, def);
        for pending in [false, true] {
            let job = def.job(now, pending);
            let len = serde_json::to_vec(&job).unwrap().len();
            if let Err(e) = parse_new_job(job, len, now, &limits) {
                panic!("an accepted cron's job is refused: {e:?}");
            }
        }
        next(&schedule, now);
    }
});

/// Walk a definition, checking nesting and each job, counting jobs and callbacks.
fn flow(f: &Flow, depth: usize, now: DateTime<Utc>, count: &mut (usize, usize)) {
    assert!(depth <= workflow::MAX_DEPTH);
    for child in &f.children {
        match child {
            Def::Job(j) => {
                job(j, now);
                count.0 += 1;
            }
            Def::Flow(f) => flow(f, depth + 1, now, count),
        }
    }
    for (_, j) in &f.callbacks {
        job(j, now);
        count.1 += 1;
    }
}

fn job(j: &workflow::JobDef, now: DateTime<Utc>) {
    // The stored form of a step (its flat envelope) is a job PUSH takes, and reads back as
    // the same template.
    let env = j.template.envelope();
    let len = serde_json::to_vec(&env).unwrap().len();
    let unbounded = Limits {
        max_job_bytes: usize::MAX,
    };
    match parse_new_job(env.clone(), len, now, &unbounded) {
        Ok(new) => assert_eq!(new.job.job_type, j.job_type),
        Err(e) => panic!("a workflow job is refused on its own: {e:?}"),
    }
    let back = ojsd::job::template::Template::stored(env).expect("a stored step reads back");
    assert_eq!(back.job_type(), j.template.job_type());
}

/// The next occurrence, if any, is after `now`; and the next firing after it too.
fn next(s: &Schedule, now: DateTime<Utc>) {
    if let Some(occ) = s.next_after(now, false, now) {
        assert!(occ.at > now, "next occurrence {} not after {now}", occ.at);
        if let Some(fire) = s.next_fire(occ, now) {
            assert!(fire >= occ.at);
        }
    }
}
