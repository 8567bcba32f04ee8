//! Turning a client's job JSON into a `Job` (ojs-core §5). Every rule is checked here so
//! the engine only ever sees well-formed envelopes.
//!
//! An optional attribute set to `null` counts as absent (ojs-json-format §14.2); a
//! required one set to `null` counts as missing.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::retry::RetryPolicy;
use super::{is_valid_queue, Job, State, OLD_SPEC_VERSION, SPEC_VERSION};
use crate::error::{ErrorCode, OjsError};

/// ojs-core §14.4 recommends at most 1 MiB per envelope.
pub const DEFAULT_MAX_JOB_BYTES: usize = 1024 * 1024;
/// Largest `meta` object accepted, serialized.
pub const MAX_META_BYTES: usize = 64 * 1024;
/// ojs-core §5.1: types SHOULD be supported up to 255 characters; we take that as the limit.
pub const MAX_TYPE_BYTES: usize = 255;

/// Attributes the broker owns (ojs-core §5.3 plus our own bookkeeping); client values are
/// dropped.
#[rustfmt::skip]
const SYSTEM_ATTRIBUTES: [&str; 13] = [
    "state", "attempt", "created_at", "enqueued_at", "started_at", "completed_at",
    "cancelled_at", "discarded_at", "next_retry_at", "error", "errors", "result", "worker_id",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_job_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_job_bytes: DEFAULT_MAX_JOB_BYTES,
        }
    }
}

/// A validated job plus the request flags that travel beside it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewJob {
    pub job: Job,
    /// The client asked for the job to start in `pending` (held until activated).
    pub pending: bool,
}

fn err(code: ErrorCode, message: impl Into<String>) -> OjsError {
    OjsError::new(code, message)
}

fn payload(message: impl Into<String>) -> OjsError {
    err(ErrorCode::InvalidPayload, message)
}

/// Quote a client string for a message, shortened so a huge value can't bloat the reply.
fn quoted(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// Remove `key` from `map` (null counts as absent) and convert it, failing with
/// "`key` must be `must_be`". `shift_remove` keeps the order of what is left, which becomes
/// `extra`.
fn take<T>(
    map: &mut Map<String, Value>,
    key: &str,
    code: ErrorCode,
    must_be: &str,
    convert: impl FnOnce(Value) -> Option<T>,
) -> Result<Option<T>, OjsError> {
    match map.shift_remove(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => convert(v)
            .map(Some)
            .ok_or_else(|| err(code, format!("{key} must be {must_be}"))),
    }
}

/// Like `take` for a string attribute with a syntax rule; the message quotes the value.
fn take_name(
    map: &mut Map<String, Value>,
    key: &str,
    code: ErrorCode,
    valid: fn(&str) -> bool,
    rule: &str,
) -> Result<Option<String>, OjsError> {
    match map.shift_remove(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::String(s)) if valid(&s) => Ok(Some(s)),
        Some(Value::String(s)) => Err(err(code, format!("{key} {} {rule}", quoted(&s)))),
        Some(_) => Err(err(code, format!("{key} must be a string"))),
    }
}

fn string(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

fn object(v: Value) -> Option<Map<String, Value>> {
    match v {
        Value::Object(o) => Some(o),
        _ => None,
    }
}

/// ojs-core's named priority levels (HIGH 10, NORMAL 0, LOW -10), in any case; the
/// envelope stores the number.
fn named_priority(name: &str) -> Option<i64> {
    match name.to_ascii_uppercase().as_str() {
        "HIGH" => Some(10),
        "NORMAL" => Some(0),
        "LOW" => Some(-10),
        _ => None,
    }
}

/// Dot-separated segments, each `[a-z][a-z0-9_-]*`, at most `MAX_TYPE_BYTES`, or
/// [`super::name_limit`] for an escaped name. ojs-core §5.1's pattern has no `-`, but the
/// conformance suite and the reference backends accept it and users name jobs
/// `send-email`: ojsd accepts it inside a segment (PROTOCOL.md §10).
pub fn is_valid_job_type(t: &str) -> bool {
    t.len() <= super::name_limit(t, MAX_TYPE_BYTES)
        && t.split('.').all(|seg| {
            let mut bytes = seg.bytes();
            bytes.next().is_some_and(|b| b.is_ascii_lowercase())
                && bytes
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        })
}

/// Parses, is version 7 with the RFC 9562 variant, and is written in lowercase
/// 8-4-4-4-12 form.
fn is_lowercase_uuid_v7(s: &str) -> bool {
    uuid::Uuid::try_parse(s).is_ok_and(|u| {
        u.get_version_num() == 7
            && u.get_variant() == uuid::Variant::RFC4122
            && u.hyphenated().to_string() == s
    })
}

/// An RFC 3339 timestamp with a time zone, kept as the client wrote it; or a time relative
/// to `now`, `+` and an ISO 8601 duration (`"+PT5S"`: five seconds from now, what the
/// conformance suite sends), stored as the absolute RFC 3339 time it names (PROTOCOL.md
/// §14 reading 11).
fn take_timestamp(
    map: &mut Map<String, Value>,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Option<String>, OjsError> {
    let must_be = r#"an RFC 3339 timestamp with a time zone, no later than 9999-12-31T23:59:59Z, e.g. "2026-03-15T09:30:00Z", or "+" and an ISO 8601 duration from now, e.g. "+PT5S""#;
    take(map, key, ErrorCode::InvalidPayload, must_be, |v| {
        let s = string(v)?;
        match s.strip_prefix('+') {
            Some(rel) => relative_ts(rel, now),
            None => Some(s),
        }
        .filter(|s| {
            super::parse_ts(s).is_some_and(|t| crate::time::check_timestamp(key, t).is_ok())
        })
    })
}

/// `now` plus an ISO 8601 duration, written as RFC 3339; `None` for a duration that does
/// not parse or leaves the calendar.
fn relative_ts(duration: &str, now: DateTime<Utc>) -> Option<String> {
    let d = super::duration::parse_duration(duration).ok()?;
    let d = chrono::Duration::from_std(d).ok()?;
    Some(super::format_ts(now.checked_add_signed(d)?))
}

/// Validate one client job (`value`, `encoded_len` bytes on the wire) and build the
/// envelope to store: state `available` (the engine picks scheduled/pending), attempt 0,
/// `created_at = now`.
pub fn parse_new_job(
    value: Value,
    encoded_len: usize,
    now: DateTime<Utc>,
    limits: &Limits,
) -> Result<NewJob, OjsError> {
    use ErrorCode::*;
    let max = limits.max_job_bytes;
    if encoded_len > max {
        let message = format!("job envelope is {encoded_len} bytes; the limit is {max}");
        return Err(err(PayloadTooLarge, message));
    }
    let Value::Object(mut map) = value else {
        return Err(payload("job must be a JSON object"));
    };
    let m = &mut map;

    let version = format!("{SPEC_VERSION:?} (or {OLD_SPEC_VERSION:?})");
    let specversion = take(m, "specversion", InvalidPayload, &version, |v| {
        string(v).filter(|s| s == SPEC_VERSION || s == OLD_SPEC_VERSION)
    })?;
    let id = take(m, "id", InvalidPayload, "a lowercase UUIDv7", |v| {
        string(v).filter(|s| is_lowercase_uuid_v7(s))
    })?;
    let type_rule = format!(
        "must be dot-separated segments matching [a-z][a-z0-9_-]* and be at most {MAX_TYPE_BYTES} bytes"
    );
    let job_type = take_name(m, "type", InvalidJobType, is_valid_job_type, &type_rule)?
        .ok_or_else(|| payload("type is required"))?;
    let queue_rule = "must match [a-z0-9][a-z0-9.-]* and be at most 128 characters";
    let queue = take_name(m, "queue", InvalidQueue, is_valid_queue, queue_rule)?;
    let args = take(m, "args", InvalidArgs, "a JSON array", array)?
        .ok_or_else(|| payload("args is required"))?;

    let meta = take(m, "meta", InvalidMetadata, "a JSON object", object)?.unwrap_or_default();
    // Serializing a Map cannot fail; if it ever did, treat it as oversized.
    let meta_len = serde_json::to_vec(&meta).map_or(usize::MAX, |b| b.len());
    if meta_len > MAX_META_BYTES {
        let message = format!("meta is {meta_len} bytes; the limit is {MAX_META_BYTES}");
        return Err(err(InvalidMetadata, message));
    }

    let i64_range = "an integer between -2^63 and 2^63-1, or HIGH (10), NORMAL (0) or LOW (-10)";
    let priority = take(m, "priority", InvalidPayload, i64_range, |v| {
        v.as_i64().or_else(|| named_priority(v.as_str()?))
    })?;
    let seconds = format!(
        "a non-negative integer number of seconds (0 = default), at most {}",
        crate::time::MAX_TIMEOUT_SECS
    );
    let timeout = take(m, "timeout", InvalidPayload, &seconds, |v| {
        v.as_u64().filter(|t| *t <= crate::time::MAX_TIMEOUT_SECS)
    })?;
    let scheduled_at = take_timestamp(m, "scheduled_at", now)?;
    let expires_at = take_timestamp(m, "expires_at", now)?;
    let retry = RetryPolicy::from_json(m.shift_remove("retry").as_ref())?;
    let unique = take(m, "unique", InvalidPayload, "a JSON object", object)?.map(Value::Object);
    if let Some(u) = &unique {
        super::unique::UniquePolicy::parse(u, &args)?; // ojs-unique-jobs §2.2: fail fast
    }
    let schema = take(m, "schema", InvalidPayload, "a string", string)?;
    let pending = take(m, "pending", InvalidPayload, "a boolean", |v| v.as_bool())?;
    // ojs-rate-limiting §6: checked here, kept among the extension attributes.
    if let Some(rl) = m.get("rate_limit").filter(|v| !v.is_null()) {
        super::rate_limit::RateLimitPolicy::parse(rl)?;
    }

    for key in SYSTEM_ATTRIBUTES {
        m.shift_remove(key);
    }

    let job = Job {
        specversion: specversion.unwrap_or_else(|| SPEC_VERSION.to_owned()),
        id: id.unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string()),
        job_type,
        queue: queue.unwrap_or_else(|| "default".to_owned()),
        args,
        meta,
        priority: priority.unwrap_or(0),
        timeout,
        scheduled_at,
        expires_at,
        retry,
        unique,
        schema,
        state: State::Available,
        attempt: 0,
        created_at: now,
        enqueued_at: None,
        started_at: None,
        completed_at: None,
        cancelled_at: None,
        discarded_at: None,
        next_retry_at: None,
        error: None,
        errors: Vec::new(),
        result: None,
        worker_id: None,
        extra: map,
    };
    Ok(NewJob {
        job,
        pending: pending.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use ErrorCode::*;

    const ID: &str = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";

    fn now() -> DateTime<Utc> {
        "2026-02-12T10:30:00Z".parse().unwrap()
    }

    fn parse(v: Value) -> Result<NewJob, OjsError> {
        let len = serde_json::to_vec(&v).unwrap().len();
        parse_new_job(v, len, now(), &Limits::default())
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = json!({"type": "email.send", "args": ["a@b.c", 1]});
        v[key] = value;
        v
    }

    #[test]
    fn accept_and_reject_per_attribute() {
        let long = |c: &str, n| json!(c.repeat(n));
        let (ok, pay, meta_max) = (None, Some(InvalidPayload), MAX_META_BYTES);
        #[rustfmt::skip]
        let cases: Vec<(&str, Option<ErrorCode>, Vec<Value>)> = vec![
            ("specversion", ok, vec![json!("1.0"), json!("1.0.0-rc.1")]),
            ("specversion", pay, vec![json!("1.0.0"), json!("2.0"), json!(1)]),
            ("id", ok, vec![json!(ID), Value::Null]),
            ("id", pay, vec![
                json!(ID.to_uppercase()), json!(ID.replace('-', "")), json!(format!("{{{ID}}}")),
                json!(ID.replace("-7c3d", "-4c3d")), // version 4
                json!(ID.replace("-8e4f", "-0e4f")), // NCS variant
                json!("nope"), json!(42),
            ]),
            ("type", ok, vec![json!("a"), json!("data.etl.transform"), json!("x1_y.z_2"), long("a", 255),
                json!("send-email"), json!("retry.test.max-interval-cap")]),
            ("type", Some(InvalidJobType), vec![
                long("a", 256), json!(""), json!("Email.send"), json!("a..b"), json!(".a"), json!("a."),
                json!("a.1b"), json!("_a"), json!("-a"), json!("a.-b"), json!("émail"), json!(7),
            ]),
            ("type", pay, vec![Value::Null]),
            ("queue", ok, vec![json!("0"), json!("email-high.v2"), long("q", 128)]),
            ("queue", Some(InvalidQueue), vec![
                long("q", 129), json!(""), json!("-q"), json!(".q"), json!("Q"), json!("q_1"),
                json!("q/1"), json!(["q"]),
            ]),
            ("args", ok, vec![json!([]), json!([null, {"a": [1]}, true, 1.5])]),
            ("args", Some(InvalidArgs), vec![json!({"a": 1}), json!("x")]),
            ("args", pay, vec![Value::Null]),
            ("meta", ok, vec![json!({"k": {"x": 1}}), json!({"k": "x".repeat(meta_max - 8)})]),
            ("meta", Some(InvalidMetadata), vec![json!([]), json!({"k": "x".repeat(meta_max)})]),
            ("priority", ok, vec![json!(-100), json!(i64::MIN), json!(i64::MAX)]),
            ("priority", ok, vec![json!("HIGH"), json!("normal"), json!("Low")]),
            ("rate_limit", ok, vec![json!({"key": "k", "concurrency": 1})]),
            ("rate_limit", pay, vec![json!({"concurrency": 1}), json!("k"), json!({"key": "k", "on_limit": "drop"})]),
            ("priority", pay, vec![json!(1.5), json!(1.0), json!("10"), json!(u64::MAX), json!("URGENT")]),
            ("timeout", ok, vec![json!(0), json!(60)]),
            ("timeout", pay, vec![json!(-1), json!(1.5), json!("PT1M")]),
            ("retry", ok, vec![json!({"max_attempts": 10})]),
            ("retry", Some(InvalidRetryPolicy), vec![json!({"backoff_coefficient": 0.5}), json!(5)]),
            ("unique", ok, vec![json!({"keys": ["type"]}), json!({})]),
            ("schema", ok, vec![json!("urn:ojs:schema:email.send:v1")]),
            ("pending", ok, vec![json!(true)]),
            ("unique", pay, vec![json!(true), json!({"key": ["type"]}), json!({"keys": ["meta"]})]),
            ("schema", pay, vec![json!({})]),
            ("pending", pay, vec![json!("yes")]),
        ];
        for (key, want, values) in cases {
            for value in values {
                let got = parse(with(key, value.clone())).err().map(|e| e.code);
                assert_eq!(got, want, "{key} = {value}");
            }
        }
        for key in ["scheduled_at", "expires_at"] {
            for good in ["2026-03-15T09:30:00Z", "2026-03-15T09:30:00.123456-05:30"] {
                let job = parse(with(key, json!(good))).unwrap().job;
                assert_eq!(
                    serde_json::to_value(&job).unwrap()[key],
                    good,
                    "kept verbatim"
                );
            }
            for bad in [
                json!("2026-03-15T09:30:00"),
                json!("2026-03-15"),
                json!(1_773_567_000),
            ] {
                let e = parse(with(key, bad)).unwrap_err();
                assert!(e.code == InvalidPayload && e.message.starts_with(key));
            }
        }
    }

    #[test]
    fn defaults_and_messages() {
        let NewJob { job, pending } = parse(with("x", Value::Null)).unwrap();
        assert!(!pending);
        assert_eq!(
            (job.specversion.as_str(), job.queue.as_str()),
            (SPEC_VERSION, "default")
        );
        assert_eq!((job.priority, job.timeout, job.attempt), (0, None, 0));
        assert_eq!((job.state, job.created_at), (State::Available, now()));
        assert_eq!((job.retry, job.meta), (RetryPolicy::default(), Map::new()));
        assert!(job.scheduled_at.is_none() && job.unique.is_none() && job.schema.is_none());
        let u = uuid::Uuid::parse_str(&job.id).unwrap();
        assert_eq!(
            (u.get_version_num(), u.hyphenated().to_string()),
            (7, job.id.clone())
        );
        assert_ne!(parse(with("x", json!(1))).unwrap().job.id, job.id);

        let msg = |v| parse(v).unwrap_err().message;
        assert_eq!(
            msg(with("queue", json!("Bad Queue"))),
            r#"queue "Bad Queue" must match [a-z0-9][a-z0-9.-]* and be at most 128 characters"#
        );
        assert!(msg(with("type", json!("Bad"))).starts_with(r#"type "Bad" must be dot-separated"#));
        assert!(msg(with("queue", json!("Q".repeat(10_000)))).len() < 200);
        assert_eq!(msg(with("id", json!("x"))), "id must be a lowercase UUIDv7");
        assert_eq!(msg(json!({"args": []})), "type is required");
        assert_eq!(msg(json!({"type": "a"})), "args is required");
        for v in [json!([]), json!("job"), Value::Null] {
            assert_eq!(parse(v).unwrap_err().code, InvalidPayload);
        }
        let new = parse(with("pending", json!(true))).unwrap();
        assert!(
            new.pending
                && serde_json::to_value(&new.job)
                    .unwrap()
                    .get("pending")
                    .is_none()
        );
    }

    #[test]
    fn unknown_attributes_kept_and_system_attributes_dropped() {
        let mut v = with("zeta", json!({"nested": [1, 2]}));
        v["x-tenant"] = json!("acme");
        v["alpha"] = Value::Null;
        for key in SYSTEM_ATTRIBUTES {
            v[key] = json!("forged");
        }
        v["attempt"] = json!(7);
        let job = parse(v).unwrap().job;
        let keys: Vec<&str> = job.extra.keys().map(String::as_str).collect();
        assert_eq!(keys, ["zeta", "x-tenant", "alpha"]);
        assert_eq!(job.extra["zeta"], json!({"nested": [1, 2]}));
        assert_eq!(
            (job.state, job.attempt, job.created_at),
            (State::Available, 0, now())
        );
        assert!(job.error.is_none() && job.errors.is_empty() && job.result.is_none());
        assert!(job.started_at.is_none() && job.next_retry_at.is_none() && job.worker_id.is_none());
        let stored = serde_json::to_value(&job).unwrap();
        assert_eq!(stored["x-tenant"], "acme");
        assert_eq!(serde_json::from_value::<Job>(stored).unwrap(), job);
    }

    #[test]
    fn named_priorities_are_stored_as_numbers() {
        for (name, n) in [("HIGH", 10), ("normal", 0), ("Low", -10)] {
            let job = parse(with("priority", json!(name))).unwrap().job;
            assert_eq!(job.priority, n, "{name}");
        }
    }

    #[test]
    fn size_limit() {
        let limits = Limits { max_job_bytes: 100 };
        assert!(parse_new_job(with("x", json!(1)), 100, now(), &limits).is_ok());
        let e = parse_new_job(with("x", json!(1)), 101, now(), &limits).unwrap_err();
        assert_eq!(e.code, PayloadTooLarge);
        assert_eq!(e.message, "job envelope is 101 bytes; the limit is 100");
        assert_eq!(Limits::default().max_job_bytes, 1 << 20);
        let big = with("args", json!(["x".repeat(1 << 20)]));
        assert_eq!(parse(big).unwrap_err().code, PayloadTooLarge);
    }

    /// Found by the `record` fuzz target: without serde_json's `float_roundtrip` a number
    /// with many digits was read as a float whose shortest form then read back as another
    /// float, so a job's args changed between PUSH and reading its stored record.
    #[test]
    fn numbers_read_back_from_the_stored_job_unchanged() {
        let digits = "5".repeat(33);
        for n in [
            digits.as_str(),
            "5.5555555555555556e+32",
            "0.1",
            "1e23",
            "-2.5e-308",
        ] {
            let text = format!(r#"{{"type": "a", "args": [{n}], "meta": {{"k": {n}}}}}"#);
            let v: Value = crate::json::parse(text.as_bytes()).unwrap();
            let job = parse(v).unwrap().job;
            let stored = serde_json::to_vec(&job).unwrap();
            let back: Job = serde_json::from_slice(&stored).unwrap();
            assert_eq!(back, job, "{n}");
            assert_eq!(serde_json::to_vec(&back).unwrap(), stored, "{n}");
        }
    }
}
