//! Expression parsing (valid and invalid), next-fire computation (fields, `L`/`W`/`#`,
//! `@every`) and DST transitions in America/New_York and Europe/Berlin (ojs-cron §5.2).

use super::expr::{parse, parse_duration_ms, Expr};
use super::schedule::{parse_timezone, Kind, Occurrence, Schedule};
use super::{CronDef, Overlap};
use crate::error::ErrorCode;
use crate::job::validate::Limits;
use chrono::{DateTime, Utc};
use serde_json::json;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .with_timezone(&Utc)
}

fn sched(expr: &str, tz: &str) -> Schedule {
    Schedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr} in {tz}: {e:?}"))
}

/// The next `n` occurrences after `from`, as `(RFC 3339 UTC, kind)`; a DST skip is
/// followed by a search that includes its own instant.
fn occurrences(s: &Schedule, from: &str, n: usize) -> Vec<(String, Kind)> {
    let anchor = at(from);
    let mut out = Vec::new();
    let mut occ: Option<Occurrence> = s.next_after(at(from), false, anchor);
    while let Some(o) = occ {
        out.push((
            o.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            o.kind,
        ));
        if out.len() == n {
            break;
        }
        occ = s.next_after(o.at, o.kind == Kind::DstSkip, anchor);
    }
    out
}

fn fires(s: &Schedule, from: &str, n: usize) -> Vec<String> {
    occurrences(s, from, n * 2)
        .into_iter()
        .filter(|(_, k)| *k == Kind::Fire)
        .map(|(t, _)| t)
        .take(n)
        .collect()
}

#[test]
fn parsing_table() {
    #[rustfmt::skip]
    let valid = [
        "* * * * *", "0 9 * * *", "*/15 * * * *", "1,15 * * * *", "1-5 * * * *",
        "0 0 1 1 *", "0 12 * * MON-FRI", "0 0 * JAN,jul *", "0 0 * * sun", "0 0 * * 7",
        "0 0 * * 0-7", "0 0 * * FRI-SUN", "10-50/10 * * * *", "5/20 * * * *", "0 0 L * *",
        "0 0 LW * *", "0 0 15W * *", "0 0 1,L * *", "0 0 * * 5L", "0 0 * * FRI#3",
        "0 0 * * 1#1,5L", "0 0 ? * MON", "*/10 * * * * *", "0 0 9 * * MON", "  0   9 * *  *  ",
        "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
        "@DAILY", "@every 30m", "@every 1h30m", "@every 45s", "@every 1.5h", "@every 2h45m30s",
        "@every 1s500ms", "0 0 31 * *", "0 0 29 2 *",
    ];
    for e in valid {
        assert!(parse(e).is_ok(), "{e:?} should parse: {:?}", parse(e));
    }
    #[rustfmt::skip]
    let invalid = [
        "", "   ", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
        "* * 32 * *", "* * * 13 * ", "* * * 0 *", "* * * * 8", "*/0 * * * *", "*/61 * * * *",
        "5-1 * * * *", "1- * * * *", "-1 * * * *", "1,,2 * * * *", ",1 * * * *", "a * * * *",
        "* * * FOO *", "* * * * FUNDAY", "* * * MON * ", "* * * * JAN", "*/x * * * *",
        "1/ * * * *", "+1 * * * *", "1.5 * * * *", "0 0 L * L", "0 0 32W * *", "0 0 * * 5#6",
        "0 0 * * 5#0", "0 0 * * 8L", "0 0 W * *", "60 * * * * *", "@reboot", "@every",
        "@every 500ms", "@every 0s", "@every 5", "@every 5d", "@every -5m", "@every 1h 30m",
        "@daily extra", "@", "0 0 ** * *", "* * * * * ? 2026",
    ];
    for e in invalid {
        assert!(
            parse(e).is_err(),
            "{e:?} should be rejected, got {:?}",
            parse(e)
        );
    }
    // Messages name the field and the problem.
    let msg = |e: &str| parse(e).unwrap_err();
    assert_eq!(msg("60 * * * *"), "minute: 60 is out of range 0-59");
    assert_eq!(
        msg("* * * * *  * *"),
        "expected 5 fields (or 6 with seconds first), got 7"
    );
    assert!(msg("*/0 * * * *").contains("step"));
    assert_eq!(msg(""), "the expression is empty");
}

#[test]
fn aliases_and_field_semantics() {
    let p = |e: &str| parse(e).unwrap();
    assert_eq!(p("@yearly"), p("0 0 1 1 *"));
    assert_eq!(p("@annually"), p("0 0 1 1 *"));
    assert_eq!(p("@monthly"), p("0 0 1 * *"));
    assert_eq!(p("@weekly"), p("0 0 * * 0"));
    assert_eq!(p("@daily"), p("0 0 * * *"));
    assert_eq!(p("@midnight"), p("0 0 * * *"));
    assert_eq!(p("@hourly"), p("0 * * * *"));
    // 0 and 7 are both Sunday; names are case-insensitive.
    assert_eq!(p("0 0 * * 7"), p("0 0 * * 0"));
    assert_eq!(p("0 0 * * Sun"), p("0 0 * * 0"));
    assert_eq!(p("0 0 * jan-MAR mon"), p("0 0 * 1-3 1"));
    // Five fields mean second 0.
    assert_eq!(p("0 0 * * *"), p("0 0 0 * * *"));
    assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
    assert_eq!(parse_duration_ms("2h45m30s"), Ok(9_930_000));
    assert_eq!(parse_duration_ms("1.5s"), Ok(1_500));
    assert_eq!(p("@every 90s"), Expr::Every(90_000));
}

#[test]
fn next_fire_basics_in_utc() {
    let s = sched("*/15 * * * *", "UTC");
    assert_eq!(
        fires(&s, "2026-02-12T10:07:30Z", 3),
        [
            "2026-02-12T10:15:00Z",
            "2026-02-12T10:30:00Z",
            "2026-02-12T10:45:00Z"
        ]
    );
    // Strictly after: a search from a fire time finds the next one.
    assert_eq!(
        fires(&s, "2026-02-12T10:15:00Z", 1),
        ["2026-02-12T10:30:00Z"]
    );
    let secs = sched("*/20 * * * * *", "UTC");
    assert_eq!(
        fires(&secs, "2026-02-12T10:00:05Z", 3),
        [
            "2026-02-12T10:00:20Z",
            "2026-02-12T10:00:40Z",
            "2026-02-12T10:01:00Z"
        ]
    );
    let yearly = sched("@yearly", "UTC");
    assert_eq!(
        fires(&yearly, "2026-02-12T10:00:00Z", 1),
        ["2027-01-01T00:00:00Z"]
    );
    let weekdays = sched("0 9 * * MON-FRI", "UTC");
    // 2026-02-13 is a Friday: next is Monday the 16th.
    assert_eq!(
        fires(&weekdays, "2026-02-13T10:00:00Z", 2),
        ["2026-02-16T09:00:00Z", "2026-02-17T09:00:00Z"]
    );
}

#[test]
fn special_characters() {
    let f = |e: &str, from: &str| fires(&sched(e, "UTC"), from, 1).remove(0);
    assert_eq!(
        f("0 0 L * *", "2028-02-02T00:00:00Z"),
        "2028-02-29T00:00:00Z"
    );
    assert_eq!(
        f("0 0 L * *", "2026-02-02T00:00:00Z"),
        "2026-02-28T00:00:00Z"
    );
    // 2026-08-15 is a Saturday: the nearest weekday is Friday the 14th.
    assert_eq!(
        f("0 0 15W * *", "2026-08-01T12:00:00Z"),
        "2026-08-14T00:00:00Z"
    );
    // 2026-08-01 is a Saturday: 1W does not leave the month, so Monday the 3rd.
    assert_eq!(
        f("0 0 1W * *", "2026-07-31T12:00:00Z"),
        "2026-08-03T00:00:00Z"
    );
    // 2026-01-31 is a Saturday: the last weekday is Friday the 30th.
    assert_eq!(
        f("0 0 LW * *", "2026-01-02T00:00:00Z"),
        "2026-01-30T00:00:00Z"
    );
    // Third Friday and last Friday of February 2026 (Fridays: 6, 13, 20, 27).
    assert_eq!(
        f("0 0 * * 5#3", "2026-02-01T00:00:00Z"),
        "2026-02-20T00:00:00Z"
    );
    assert_eq!(
        f("0 0 * * FRIL", "2026-02-01T00:00:00Z"),
        "2026-02-27T00:00:00Z"
    );
    // Both day fields restricted: either matches (the 13th, or any Friday).
    let either = sched("0 0 13 * FRI", "UTC");
    assert_eq!(
        fires(&either, "2026-02-10T00:00:00Z", 3),
        [
            "2026-02-13T00:00:00Z",
            "2026-02-20T00:00:00Z",
            "2026-02-27T00:00:00Z"
        ]
    );
    assert_eq!(
        f("0 0 13 * FRI", "2026-03-07T00:00:00Z"),
        "2026-03-13T00:00:00Z"
    );
    // A day field starting with `*` makes both required: odd days that are Fridays.
    assert_eq!(
        f("0 0 */2 * FRI", "2026-02-01T00:00:00Z"),
        "2026-02-13T00:00:00Z"
    );
    // Day 31 only fires in months that have it.
    assert_eq!(
        f("0 0 31 * *", "2026-04-01T00:00:00Z"),
        "2026-05-31T00:00:00Z"
    );
    // A date that never exists never fires.
    assert_eq!(
        sched("0 0 30 2 *", "UTC").next_after(
            at("2026-01-01T00:00:00Z"),
            false,
            at("2026-01-01T00:00:00Z")
        ),
        None
    );
}

#[test]
fn every_counts_from_its_anchor() {
    let s = sched("@every 30m", "America/New_York");
    let anchor = at("2026-02-12T10:00:07Z");
    let next = |t: &str| s.next_after(at(t), false, anchor).map(|o| o.at);
    assert_eq!(
        next("2026-02-12T10:00:07Z"),
        Some(at("2026-02-12T10:30:07Z"))
    );
    assert_eq!(
        next("2026-02-12T09:00:00Z"),
        Some(at("2026-02-12T10:30:07Z"))
    );
    assert_eq!(
        next("2026-02-12T10:45:00Z"),
        Some(at("2026-02-12T11:00:07Z"))
    );
    assert_eq!(
        next("2026-02-12T11:00:07Z"),
        Some(at("2026-02-12T11:30:07Z"))
    );
    // Not tied to wall-clock time: DST changes nothing.
    let t = at("2026-03-08T06:50:07Z");
    let a = at("2026-03-08T06:30:07Z");
    assert_eq!(
        s.next_after(t, false, a).map(|o| o.at),
        Some(at("2026-03-08T07:00:07Z"))
    );
}

#[test]
fn new_york_spring_forward() {
    // 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z); 02:30 does not exist.
    let s = sched("30 2 * * *", "America/New_York");
    assert_eq!(
        occurrences(&s, "2026-03-07T00:00:00Z", 3),
        [
            ("2026-03-07T07:30:00Z".to_string(), Kind::Fire),
            ("2026-03-08T07:00:00Z".to_string(), Kind::DstSkip),
            ("2026-03-09T06:30:00Z".to_string(), Kind::Fire),
        ]
    );
    let skip = s.next_after(
        at("2026-03-07T08:00:00Z"),
        false,
        at("2026-03-07T08:00:00Z"),
    );
    let local = skip.and_then(|o| o.local).map(|l| l.to_string());
    assert_eq!(local.as_deref(), Some("2026-03-08 02:30:00"));
    // next_fire passes over the gap.
    assert_eq!(
        skip.and_then(|o| s.next_fire(o, o.at)),
        Some(at("2026-03-09T06:30:00Z"))
    );
    // Hourly: 01:00 EST fires, 02:00 is skipped, 03:00 EDT fires at the same instant.
    let hourly = sched("@hourly", "America/New_York");
    assert_eq!(
        occurrences(&hourly, "2026-03-08T05:30:00Z", 4),
        [
            ("2026-03-08T06:00:00Z".to_string(), Kind::Fire),
            ("2026-03-08T07:00:00Z".to_string(), Kind::DstSkip),
            ("2026-03-08T07:00:00Z".to_string(), Kind::Fire),
            ("2026-03-08T08:00:00Z".to_string(), Kind::Fire),
        ]
    );
    // Every matching second of the gap is reported as one skip.
    let minutely = sched("* * * * *", "America/New_York");
    assert_eq!(
        occurrences(&minutely, "2026-03-08T06:58:30Z", 3),
        [
            ("2026-03-08T06:59:00Z".to_string(), Kind::Fire),
            ("2026-03-08T07:00:00Z".to_string(), Kind::DstSkip),
            ("2026-03-08T07:00:00Z".to_string(), Kind::Fire),
        ]
    );
    // 9 AM Eastern is 14:00Z in winter and 13:00Z in summer (ojs-cron §10.1).
    let nine = sched("0 9 * * *", "America/New_York");
    assert_eq!(
        fires(&nine, "2026-03-07T00:00:00Z", 3),
        [
            "2026-03-07T14:00:00Z",
            "2026-03-08T13:00:00Z",
            "2026-03-09T13:00:00Z"
        ]
    );
}

#[test]
fn new_york_fall_back() {
    // 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z); 01:00-01:59 happens twice.
    let s = sched("30 1 * * *", "America/New_York");
    assert_eq!(
        fires(&s, "2026-10-31T12:00:00Z", 3),
        [
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z",
            "2026-11-03T06:30:00Z"
        ]
    );
    // Every 30 minutes: the repeated 01:00 and 01:30 (EST) do not fire again.
    let half = sched("*/30 * * * *", "America/New_York");
    assert_eq!(
        fires(&half, "2026-11-01T04:50:00Z", 4),
        [
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T07:30:00Z"
        ]
    );
    // A search that starts during the second pass waits for 02:00 EST.
    assert_eq!(
        fires(&half, "2026-11-01T06:10:00Z", 1),
        ["2026-11-01T07:00:00Z"]
    );
    assert!(occurrences(&half, "2026-11-01T04:50:00Z", 6)
        .iter()
        .all(|(_, k)| *k == Kind::Fire));
}

#[test]
fn berlin_spring_forward_and_fall_back() {
    // 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00Z).
    let s = sched("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        occurrences(&s, "2026-03-28T00:00:00Z", 3),
        [
            ("2026-03-28T01:30:00Z".to_string(), Kind::Fire),
            ("2026-03-29T01:00:00Z".to_string(), Kind::DstSkip),
            ("2026-03-30T00:30:00Z".to_string(), Kind::Fire),
        ]
    );
    // 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00Z); 02:30 happens twice and fires
    // once, at the first (CEST, 00:30Z).
    assert_eq!(
        fires(&s, "2026-10-24T12:00:00Z", 3),
        [
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
            "2026-10-27T01:30:00Z"
        ]
    );
    // Hourly through the fall-back: 02:00 CEST (00:00Z) fires, 02:00 CET (01:00Z) does not.
    let hourly = sched("0 * * * *", "Europe/Berlin");
    assert_eq!(
        fires(&hourly, "2026-10-24T23:30:00Z", 3),
        [
            "2026-10-25T00:00:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-25T03:00:00Z"
        ]
    );
    // With seconds, through the spring-forward gap.
    let secs = sched("0 59 1 * * *", "Europe/Berlin");
    assert_eq!(
        fires(&secs, "2026-03-28T12:00:00Z", 1),
        ["2026-03-29T00:59:00Z"]
    );
}

#[test]
fn time_zones() {
    for ok in [
        "UTC",
        "America/New_York",
        "Europe/Berlin",
        "Asia/Kolkata",
        "Pacific/Auckland",
        "Etc/UTC",
    ] {
        assert!(parse_timezone(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "+05:00",
        "-08:00",
        "UTC+5",
        "EST",
        "PST",
        "CST",
        "EST5EDT",
        "GMT",
        "Etc/GMT+5",
        "Etc/GMT-14",
        "Mars/Olympus",
        "america/new_york",
        "America/New_York ",
    ] {
        assert!(parse_timezone(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn definitions() {
    let now = at("2026-02-12T10:00:00Z");
    let parse = |v: serde_json::Value| CronDef::parse(&v, now, &Limits::default());
    let (def, _) = parse(
        json!({"name": "daily-report", "cron": "0 9 * * *", "type": "report.generate",
        "options": {"queue": "reports", "timeout": 300, "meta": {"team": "a"}, "tags": ["x"]},
        "last_run_at": "forged", "run_count": 7}),
    )
    .unwrap();
    assert_eq!(
        (def.timezone.as_str(), def.overlap, def.enabled),
        ("UTC", Overlap::Skip, true)
    );
    assert!(def.args.is_empty());
    let job = def.job(at("2026-02-12T09:00:00Z"), false);
    assert_eq!(job["queue"], "reports");
    assert_eq!(job["timeout"], 300);
    assert_eq!(job["tags"], json!(["x"]));
    assert_eq!(
        job["meta"],
        json!({"team": "a", "cron_name": "daily-report", "cron_triggered_at": "2026-02-12T09:00:00.000000Z"})
    );
    assert!(job.get("pending").is_none());
    assert_eq!(def.job(now, true)["pending"], true);
    // The conformance suite's spellings: `expression` and a `job_template` object.
    let (alt, _) = parse(json!({"name": "daily-report", "expression": "0 9 * * *",
        "job_template": {"type": "report.generate", "args": [1],
            "options": {"queue": "reports", "timeout": 300, "meta": {"team": "a"}, "tags": ["x"]}}}))
    .unwrap();
    assert_eq!(
        (alt.cron.as_str(), alt.job_type.as_str()),
        ("0 9 * * *", "report.generate")
    );
    assert_eq!(alt.args, vec![json!(1)]);
    assert_eq!(
        alt.job(at("2026-02-12T09:00:00Z"), false)["queue"],
        "reports"
    );
    let bad = parse(json!({"name": "a", "expression": "0 9 * * *", "job_template": 3}));
    assert_eq!(bad.unwrap_err().code, ErrorCode::InvalidPayload);
    let base = json!({"name": "a", "cron": "* * * * *", "type": "a.b"});
    let with = |k: &str, v: serde_json::Value| {
        let mut b = base.clone();
        b[k] = v;
        parse(b).err().map(|e| e.code)
    };
    use ErrorCode::*;
    assert_eq!(with("x", json!(1)), None);
    assert_eq!(with("name", json!("Bad")), Some(InvalidPayload));
    assert_eq!(with("name", json!("-a")), Some(InvalidPayload));
    assert_eq!(with("name", json!("a".repeat(256))), Some(InvalidPayload));
    assert_eq!(with("name", json!("a".repeat(255))), None);
    assert_eq!(
        with("cron", json!("61 * * * *")),
        Some(InvalidCronExpression)
    );
    assert_eq!(with("cron", json!("")), Some(InvalidCronExpression));
    assert_eq!(with("cron", json!(5)), Some(InvalidPayload));
    assert_eq!(with("timezone", json!("EST")), Some(InvalidPayload));
    assert_eq!(with("type", json!("Bad.Type")), Some(InvalidJobType));
    assert_eq!(with("args", json!({})), Some(InvalidArgs));
    assert_eq!(
        with("options", json!({"queue": "Bad Q"})),
        Some(InvalidQueue)
    );
    assert_eq!(
        with("options", json!({"retry": {"max_attempts": -1}})),
        Some(InvalidRetryPolicy)
    );
    assert_eq!(with("options", json!({"id": "x"})), Some(InvalidPayload));
    assert_eq!(with("options", json!({"meta": 5})), Some(InvalidMetadata));
    assert_eq!(with("overlap_policy", json!("queue")), Some(InvalidPayload));
    for p in ["skip", "allow", "cancel_previous", "enqueue"] {
        assert_eq!(with("overlap_policy", json!(p)), None);
    }
    assert_eq!(with("enabled", json!("yes")), Some(InvalidPayload));
    assert_eq!(
        parse(json!({"cron": "* * * * *", "type": "a"}))
            .unwrap_err()
            .code,
        InvalidPayload
    );
    assert_eq!(parse(json!([])).unwrap_err().code, InvalidPayload);
}
