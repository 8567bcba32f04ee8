//! Property test, driven through the TCP parser as a client would (so it lives beside the
//! engine, not in it): extreme durations and timestamps through every engine path that adds
//! them (retry backoff at FAIL, visibility timeouts at FETCH and BEAT, scheduled and
//! expiring jobs, unique periods, workflow and cron job options, a clock moved to either
//! end of its range). Whatever the input, the engine thread must stay up, every PUSH is
//! either stored or refused with an error, and every stored job reads back.

use crate::engine::{start, Config, EngineHandle};
use crate::protocol::{parse_command, Reply};
use crate::store::StoreKind;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

fn call(rt: &tokio::runtime::Runtime, h: &EngineHandle, wid: Option<&str>, line: &str) -> Reply {
    match parse_command(line.as_bytes(), h.intake()) {
        Ok(cmd) => Reply::from(rt.block_on(h.call(wid.map(Arc::from), cmd))),
        Err(e) => Reply::Error(e),
    }
}

/// ISO 8601 durations from tiny to far beyond what any sum can hold.
fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..1000).prop_map(|n| format!("PT{n}S")),
        (0u64..u64::MAX).prop_map(|n| format!("PT{n}S")),
        (0u64..u64::MAX).prop_map(|n| format!("P{n}D")),
        Just("P999999999D".to_string()),
        Just("P36500D".to_string()),
        Just("P36500DT0.001S".to_string()),
        (0u64..1_000_000_000).prop_map(|n| format!("P{n}Y")),
        (1u64..1_000_000_000).prop_map(|n| format!("PT0.{n:09}S")),
    ]
}

/// RFC 3339 timestamps across the whole four-digit range, with zones either side.
fn timestamp() -> impl Strategy<Value = String> {
    (1u32..=9999, 1u32..=12, 1u32..=28, -14i32..=14).prop_map(|(y, mo, d, off)| {
        let zone = if off == 0 {
            "Z".to_string()
        } else {
            format!("{}{:02}:00", if off < 0 { '-' } else { '+' }, off.abs())
        };
        format!("{y:04}-{mo:02}-{d:02}T23:59:59{zone}")
    })
}

fn timeout() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(u64::MAX)),
        Just(json!(1u64 << 63)),
        Just(json!(crate::time::MAX_TIMEOUT_SECS)),
        (0u64..u64::MAX).prop_map(Value::from),
        (0u64..100).prop_map(Value::from),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    initial: String,
    max: String,
    coefficient: f64,
    jitter: bool,
    timeout: Value,
    scheduled_at: Option<String>,
    expires_at: Option<String>,
    period: Option<String>,
    advances: Vec<f64>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        duration(),
        duration(),
        prop_oneof![Just(1.0), Just(2.0), Just(1e300), 1.0f64..1e6],
        any::<bool>(),
        timeout(),
        proptest::option::of(timestamp()),
        proptest::option::of(timestamp()),
        proptest::option::of(duration()),
        // CLOCK ADVANCE takes up to 1e10 s a step: 30 long steps reach past year 9999.
        proptest::collection::vec(
            prop_oneof![Just(9.99e9), Just(f64::MAX), 0.0f64..1e10, 0.0f64..100.0],
            1..30,
        ),
    )
        .prop_map(
            |(
                initial,
                max,
                coefficient,
                jitter,
                timeout,
                scheduled_at,
                expires_at,
                period,
                advances,
            )| {
                Case {
                    initial,
                    max,
                    coefficient,
                    jitter,
                    timeout,
                    scheduled_at,
                    expires_at,
                    period,
                    advances,
                }
            },
        )
}

fn envelope(c: &Case, queue: &str) -> Value {
    let mut job = json!({
        "type": "t.extreme", "queue": queue, "args": [1],
        "retry": {"initial_interval": c.initial, "max_interval": c.max,
                  "backoff_coefficient": c.coefficient, "jitter": c.jitter,
                  "max_attempts": 5},
        "timeout": c.timeout,
    });
    if let Some(s) = &c.scheduled_at {
        job["scheduled_at"] = json!(s);
    }
    if let Some(e) = &c.expires_at {
        job["expires_at"] = json!(e);
    }
    if let Some(p) = &c.period {
        job["unique"] = json!({"period": p});
    }
    job
}

fn run_case(c: &Case) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::open(StoreKind::DEFAULT, dir.path(), 1 << 20).unwrap();
    let cfg = Config {
        test_clock: true,
        fetch_wait: std::time::Duration::from_millis(1),
        ..Config::default()
    };
    let (h, thread) = start(store, cfg).unwrap();
    let wid = Some("w-extreme");
    let mut stored = Vec::new();

    // A plain job and one with the case's options, by PUSH ...
    for queue in ["plain", "extreme"] {
        let job = if queue == "plain" {
            json!({"type": "t.plain", "queue": queue, "args": []})
        } else {
            envelope(c, queue)
        };
        if let Reply::Bulk(b) = call(&rt, &h, None, &format!("PUSH {job}")) {
            let v: Value = serde_json::from_slice(&b).unwrap();
            stored.push(v["id"].as_str().unwrap().to_string());
        }
    }
    // ... inside a workflow ...
    let mut step = envelope(c, "wf");
    step.as_object_mut().unwrap().remove("unique");
    let wf = json!({"type": "chain", "name": "x", "steps": [step]});
    let _ = call(&rt, &h, None, &format!("WORKFLOW CREATE {wf}"));
    // ... and as a cron template.
    let mut options = envelope(c, "cron");
    let options = options.as_object_mut().unwrap();
    for k in ["unique", "type", "args", "scheduled_at", "expires_at"] {
        options.remove(k);
    }
    let cron = json!({"name": "extreme", "cron": "* * * * *", "type": "t.cron",
        "args": [], "options": options});
    let _ = call(&rt, &h, None, &format!("CRON ADD {cron}"));

    // Every path that adds a duration to now: claim (visibility), BEAT (extension), FAIL
    // (retry delay), lost reservations and promotions via the clock.
    for q in ["extreme", "wf", "plain"] {
        for _ in 0..2 {
            if let Reply::Bulk(b) = call(&rt, &h, wid, &format!("FETCH {q}")) {
                let v: Value = serde_json::from_slice(&b).unwrap();
                let id = v["id"].as_str().unwrap();
                let _ = call(&rt, &h, wid, r#"BEAT {"wid":"w-extreme"}"#);
                let fail = json!({"id": id, "error": {"type": "boom", "message": "m"}});
                let _ = call(&rt, &h, wid, &format!("FAIL {fail}"));
            }
        }
    }
    for secs in &c.advances {
        let _ = call(&rt, &h, None, &format!("CLOCK ADVANCE {secs}"));
        let _ = call(&rt, &h, wid, "FETCH extreme wf cron plain");
    }

    // The engine is alive and every accepted job reads back (or was pruned, its retention
    // over, once the clock moved far enough).
    match call(&rt, &h, None, "INFO") {
        Reply::Bulk(_) => {}
        other => panic!("the engine stopped answering: {other:?} for {c:?}"),
    }
    for id in &stored {
        match call(&rt, &h, None, &format!("JOB {id}")) {
            Reply::Bulk(b) => {
                serde_json::from_slice::<Value>(&b).unwrap();
            }
            Reply::Error(e) if e.code == crate::error::ErrorCode::NotFound => {}
            other => panic!("JOB {id}: {other:?} for {c:?}"),
        }
    }
    h.shutdown();
    thread.join().expect("engine thread panicked").unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn extreme_durations_and_timestamps_never_stop_the_engine(c in case()) {
        run_case(&c);
    }
}

#[test]
fn the_reported_crash_is_refused_at_push() {
    // D1 as reported: a retry interval of ~2.7 million years reached FAIL and panicked.
    let c = Case {
        initial: "P999999999D".into(),
        max: "P999999999D".into(),
        coefficient: 2.0,
        jitter: true,
        timeout: json!(0),
        scheduled_at: None,
        expires_at: None,
        period: None,
        advances: vec![9.99e9],
    };
    run_case(&c);
    // The longest accepted interval still computes a representable retry time.
    let c = Case {
        initial: crate::time::MAX_DURATION_ISO.into(),
        max: crate::time::MAX_DURATION_ISO.into(),
        advances: vec![9.99e9; 30],
        ..c
    };
    run_case(&c);
}
