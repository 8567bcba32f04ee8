//! The stored job records (`j/<uuid>`: versions 1 and 2, still read, and version 3) and
//! state records (`j/<uuid>` + 1), both directions.
//!
//! Reading: any bytes decode to `None` or to a record whose parts lie inside the input
//! (a version 1/2 body at its end, as the format says); never a panic. A state record
//! that decodes composes an envelope system part without panicking.
//!
//! Writing: a job built from the input (a client envelope run through the PUSH validator,
//! then given a lifecycle state, system timestamps, an error history, a result and a
//! worker) encodes to a job record and a state record that decode back to the same fields,
//! and the envelope composed from the two is the job's JSON byte for byte; likewise the
//! version 2 record the engine no longer writes but still reads.
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use ojsd::engine::fuzzing::{
    decode_job_record, decode_record, decode_state, encode_job_record, encode_record,
    encode_state, IndexHeader,
};
use ojsd::job::parts::{compose_stored, Parts};
use ojsd::job::validate::{parse_new_job, Limits};
use ojsd::job::{Job, State, SPEC_VERSION};
use serde_json::{json, Map, Value};

fuzz_target!(|data: &[u8]| {
    read_any(data);
    let _ = round_trip(&mut Unstructured::new(data));
});

/// Whether `part` is a sub-slice of `whole` (same memory, not equal bytes elsewhere).
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr_range(), part.as_ptr_range());
    w.start <= p.start && p.end <= w.end
}

fn read_any(data: &[u8]) {
    if let Some(r) = decode_job_record(data) {
        for part in [r.queue.as_bytes(), r.core, r.extra] {
            assert!(inside(part, data), "the record's parts lie inside it");
        }
        assert!(r.parts().is_some(), "a decoded record's parts are an envelope's");
        assert!(r.timeout != Some(0), "a zero timeout reads as none");
    }
    if let Some(st) = decode_state(data) {
        for v in [st.worker_id.map(str::as_bytes), st.error, st.errors, st.result]
            .into_iter()
            .flatten()
        {
            assert!(inside(v, data), "the state record's values lie inside it");
        }
        let created = DateTime::from_timestamp_micros(0).unwrap();
        let mut out = Vec::new();
        compose_stored(b"{\"a\":1", b"", &st.system(created), &mut out);
        assert!(out.ends_with(b"}"));
    }
    let Some(r) = decode_record(data) else {
        return;
    };
    assert!(inside(r.body, data), "the body lies inside the record");
    assert_eq!(
        r.body.as_ptr_range().end,
        data.as_ptr_range().end,
        "the body runs to the end of the record"
    );
    if let Some(h) = &r.header {
        assert!(inside(h.queue.as_bytes(), data), "the queue lies inside");
        assert!(h.timeout != Some(0), "a zero timeout reads as none");
        assert!(r.body.starts_with(b"{") && r.body.ends_with(b"}"));
    }
}

/// A string from the input over `alphabet`, mostly, so that the validator accepts it often
/// enough to reach the encoder; sometimes any string, to keep the refusals covered.
fn name(u: &mut Unstructured, alphabet: &[u8], max: usize) -> Result<String> {
    if u.ratio(1, 8)? {
        return Ok(u.arbitrary::<&str>()?.to_string());
    }
    let n = u.int_in_range(1..=max)?;
    (0..n)
        .map(|_| Ok(char::from(*u.choose(alphabet)?)))
        .collect()
}

/// A lowercase UUIDv7 from 16 input bytes (the validator refuses any other id).
fn uuid_v7(u: &mut Unstructured) -> Result<String> {
    let mut b: [u8; 16] = u.arbitrary()?;
    b[6] = 0x70 | (b[6] & 0x0f);
    b[8] = 0x80 | (b[8] & 0x3f);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// A time the broker can write: microsecond precision (what `format_ts` keeps), years
/// 1970 to 9999 (what RFC 3339 can hold).
fn system_time(u: &mut Unstructured) -> Result<DateTime<Utc>> {
    let max = Utc
        .with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
        .unwrap()
        .timestamp_micros();
    let us = u.int_in_range(0..=max)?;
    Ok(Utc.timestamp_micros(us).unwrap())
}

/// A client timestamp: RFC 3339 with some offset and precision, or any string (refused).
fn client_time(u: &mut Unstructured) -> Result<Value> {
    if u.ratio(1, 8)? {
        return Ok(json!(u.arbitrary::<&str>()?));
    }
    let secs = u.int_in_range(-62_135_596_800i64..=253_402_300_799)?; // years 1..=9999
    let nanos = u.int_in_range(0..=999_999_999u32)?;
    let offset_min = u.int_in_range(-(23 * 60 + 59)..=(23 * 60 + 59))?;
    let Some(offset) = chrono::FixedOffset::east_opt(offset_min * 60) else {
        return Ok(Value::Null);
    };
    let Some(t) = DateTime::from_timestamp(secs, nanos) else {
        return Ok(Value::Null);
    };
    let digits = *u.choose(&[
        chrono::SecondsFormat::Secs,
        chrono::SecondsFormat::Millis,
        chrono::SecondsFormat::Micros,
        chrono::SecondsFormat::Nanos,
    ])?;
    Ok(json!(t
        .with_timezone(&offset)
        .to_rfc3339_opts(digits, true)))
}

/// Any JSON the input spells, or the input's text as a string.
fn some_json(u: &mut Unstructured) -> Result<Value> {
    let s: &str = u.arbitrary()?;
    Ok(serde_json::from_str(s).unwrap_or_else(|_| json!(s)))
}

fn round_trip(u: &mut Unstructured) -> Result<()> {
    const LOWER: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut m = Map::new();
    m.insert("specversion".into(), json!(SPEC_VERSION));
    m.insert("id".into(), json!(uuid_v7(u)?));
    let mut job_type = name(u, LOWER, 24)?;
    if u.arbitrary()? {
        job_type = format!("t{job_type}._{}", name(u, b"abc_", 4)?);
    }
    m.insert("type".into(), json!(job_type));
    m.insert("args".into(), json!([some_json(u)?]));
    if u.arbitrary()? {
        m.insert("queue".into(), json!(name(u, b"abcxyz0189-.", 140)?));
    }
    if u.arbitrary()? {
        m.insert("priority".into(), json!(u.arbitrary::<i64>()?));
    }
    if u.arbitrary()? {
        let t = if u.arbitrary()? {
            u.int_in_range(0..=100_000u64)?
        } else {
            u.arbitrary()?
        };
        m.insert("timeout".into(), json!(t));
    }
    for key in ["scheduled_at", "expires_at"] {
        if u.arbitrary()? {
            m.insert(key.into(), client_time(u)?);
        }
    }
    if u.arbitrary()? {
        let unique = if u.arbitrary()? {
            json!({"keys": ["type", "queue", "args"]})
        } else {
            some_json(u)?
        };
        m.insert("unique".into(), unique);
    }
    if u.arbitrary()? {
        m.insert("meta".into(), json!({"k": some_json(u)?}));
    }
    if u.arbitrary()? {
        // An attribute OJS does not define: kept in `extra`, written after the system part.
        m.insert(u.arbitrary::<&str>()?.to_string(), some_json(u)?);
    }

    let value = Value::Object(m);
    let len = serde_json::to_vec(&value).unwrap().len();
    let created = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let Ok(new) = parse_new_job(value, len, created, &Limits::default()) else {
        return Ok(());
    };
    let mut job = new.job;
    job.state = *u.choose(&State::ALL)?;
    job.attempt = u.arbitrary()?;
    for t in [
        &mut job.enqueued_at,
        &mut job.started_at,
        &mut job.completed_at,
        &mut job.cancelled_at,
        &mut job.discarded_at,
        &mut job.next_retry_at,
    ] {
        if u.arbitrary()? {
            *t = Some(system_time(u)?);
        }
    }
    if u.arbitrary()? {
        job.error = Some(some_json(u)?);
    }
    for _ in 0..u.int_in_range(0..=3)? {
        job.push_error(some_json(u)?);
    }
    if u.arbitrary()? {
        // `null` is a result the envelope shows (`"result":null`).
        job.result = Some(some_json(u)?);
    }
    if u.arbitrary()? {
        job.worker_id = Some(u.arbitrary::<&str>()?.to_string());
    }
    check(&job, u.arbitrary()?);
    check_lean(&job, u.arbitrary()?);
    Ok(())
}

fn check_lean(job: &Job, seq: u64) {
    let parts = Parts::of(job);
    let rec = encode_job_record(job, &parts);
    let r = decode_job_record(&rec).expect("a job record just written decodes");
    let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
    assert_eq!(r.unique, job.unique.is_some());
    assert_eq!(r.priority, job.priority);
    assert_eq!(r.timeout, job.timeout.filter(|t| *t > 0));
    assert_eq!(r.queue, job.queue);
    assert_eq!(r.scheduled_at, ms(job.scheduled_time()));
    assert_eq!(r.expires_at, ms(job.expires_time()));
    assert_eq!(r.created(), Some(job.created_at));
    assert_eq!(r.parts().as_ref(), Some(&parts));

    let state = encode_state(seq, job);
    let st = decode_state(&state).expect("a state record just written decodes");
    assert_eq!((st.seq, st.state, st.attempt), (seq, job.state, job.attempt));
    assert_eq!(st.worker_id, job.worker_id.as_deref());
    let us = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_micros());
    assert_eq!(st.started_at, us(job.started_at));
    assert_eq!(st.next_retry_at, us(job.next_retry_at));

    let mut composed = Vec::new();
    compose_stored(r.core, r.extra, &st.system(job.created_at), &mut composed);
    let mut json = Vec::new();
    parts.compose(job, &mut json);
    assert_eq!(composed, json, "the envelope composed from both records is the job's");
}

fn check(job: &Job, seq: u64) {
    let parts = Parts::of(job);
    let (rec, body_at) = encode_record(seq, job, &parts);
    let mut json = Vec::new();
    parts.compose(job, &mut json);
    assert_eq!(
        &rec[body_at..],
        &json[..],
        "the body offset points at the JSON"
    );

    let r = decode_record(&rec).expect("a record just written decodes");
    assert_eq!(r.seq, seq);
    assert_eq!(r.body, &json[..]);
    let h = r.header.expect("a written record has an index header");
    assert_eq!(h, IndexHeader::of(job));
    // The header against the job itself, not only against `IndexHeader::of`.
    let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
    assert_eq!(h.state, job.state);
    assert_eq!(h.unique, job.unique.is_some());
    assert_eq!(h.priority, job.priority);
    assert_eq!(h.timeout, job.timeout.filter(|t| *t > 0));
    assert_eq!(h.queue, job.queue);
    assert_eq!(h.scheduled_at, ms(job.scheduled_time()));
    assert_eq!(h.expires_at, ms(job.expires_time()));
    assert_eq!(h.next_retry_at, ms(job.next_retry_at));
    assert_eq!(h.completed_at, ms(job.completed_at));
    assert_eq!(h.cancelled_at, ms(job.cancelled_at));
    assert_eq!(h.discarded_at, ms(job.discarded_at));

    let back: Job = serde_json::from_slice(r.body).expect("a stored body parses back");
    assert_eq!(&back, job, "the stored body is the job");
}
