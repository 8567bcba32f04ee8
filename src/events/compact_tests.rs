//! Events: the compact form round-trips, renders exactly the envelope the engine used to
//! store, refuses damaged input, and the log's chunk records of both versions are read.

use super::*;
use serde_json::{json, Map, Value};

/// The envelope as the engine stored it before compact events (serde, borrowed fields):
/// the reference every rendering must equal byte for byte.
fn legacy(e: &Event, id: &str, time: DateTime<Utc>, subject: &str, data: &Value) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        specversion: &'static str,
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'a str,
        source: &'a str,
        time: &'a str,
        subject: &'a str,
        datacontenttype: &'static str,
        data: &'a Value,
        cursor: u64,
    }
    serde_json::to_vec(&Envelope {
        specversion: SPEC_VERSION,
        id,
        kind: &e.kind,
        source: &e.source,
        time: &crate::job::format_ts(time),
        subject,
        datacontenttype: "application/json",
        data,
        cursor: e.cursor,
    })
    .unwrap()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn job_data(id: &str, extra: Value) -> Map<String, Value> {
    let mut m = obj(json!({"job_id": id, "job_type": "email.send", "queue": "mail"}));
    m.extend(obj(extra));
    m
}

const JOB: &str = "019aa7c4-5f3a-7e21-8d4b-0a1b2c3d4e5f";

/// Build, log, read back: the event read equals the one built, and both render the legacy
/// envelope of the same fields.
fn round_trip(kind: &str, subject: &str, data: Map<String, Value>) -> (Event, usize, usize) {
    let time = DateTime::parse_from_rfc3339("2026-11-24T15:50:01.123456Z")
        .unwrap()
        .with_timezone(&Utc);
    let e = build(
        4242,
        kind,
        "ojs://ojsd/workers/w-1".into(),
        time,
        subject,
        data.clone(),
    );
    let json = e.json();
    let v: Value = serde_json::from_slice(&json).unwrap();
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("evt_"), "{id}");
    assert_eq!(
        json.as_ref(),
        legacy(&e, &id, time, subject, &Value::Object(data.clone())).as_slice(),
        "{kind}: rendered differently from the legacy envelope"
    );
    let (record, taken) = encode_chunk(std::slice::from_ref(&e));
    assert_eq!(taken, 1);
    let entries = decode_chunk(4242, &record).unwrap();
    let (back, t) = decode(entries[0].0, entries[0].1).unwrap();
    assert_eq!(back, e, "{kind}");
    assert_eq!(back.json(), json, "{kind}");
    assert_eq!(t, time);
    (e, entries[0].1.len(), json.len())
}

#[test]
fn every_event_type_round_trips_and_renders_the_legacy_envelope() {
    for (_, kind) in kinds() {
        round_trip(kind, JOB, job_data(JOB, json!({"attempt": 2})));
    }
    // A type outside the table is stored by name.
    let (e, _, _) = round_trip("custom.thing", JOB, job_data(JOB, json!({})));
    assert_eq!(e.kind, "custom.thing");
}

#[test]
fn every_data_shape_round_trips() {
    // Job events: with a trace id, nested and escaped values, no extra fields.
    let mut traced =
        obj(json!({"job_id": JOB, "job_type": "a.b", "queue": "q", "trace_id": "4bf9"}));
    traced.extend(obj(
        json!({"error": {"code": "Boom\"\n", "details": [1, 2.5, null]}, "ü": "é"}),
    ));
    let (e, _, _) = round_trip("job.failed", JOB, traced);
    assert_eq!(
        (e.queue.as_deref(), e.job_type.as_deref()),
        (Some("q"), Some("a.b"))
    );
    round_trip("job.enqueued", JOB, job_data(JOB, json!({})));
    // A job id that is not a canonical UUID is kept as a string.
    round_trip(
        "job.enqueued",
        "Custom-ID_1",
        job_data("Custom-ID_1", json!({"priority": 3})),
    );
    let upper = JOB.to_uppercase();
    round_trip("job.enqueued", &upper, job_data(&upper, json!({})));
    // Not a job event's leading fields: kept whole, with the filter fields from the data.
    let (e, _, _) = round_trip(
        "cron.triggered",
        "nightly",
        obj(json!({"cron_name": "nightly", "job_id": JOB, "job_type": "r.b", "queue": "cronq"})),
    );
    assert_eq!(
        (e.queue.as_deref(), e.job_type.as_deref()),
        (Some("cronq"), Some("r.b"))
    );
    let (e, _, _) = round_trip("worker.started", "w-1", obj(json!({"worker_id": "w-1"})));
    assert_eq!((e.queue, e.job_type), (None, None));
    round_trip(
        "queue.paused",
        "mail",
        obj(json!({"queue": "mail", "paused_by": "api"})),
    );
    round_trip("worker.quiet", "w-1", Map::new());
    // Job fields in another order, or a job id that is not the subject: kept whole.
    round_trip(
        "job.enqueued",
        JOB,
        obj(json!({"queue": "q", "job_id": JOB, "job_type": "t"})),
    );
    round_trip("job.enqueued", JOB, job_data("other", json!({})));
    // A field that overwrote a leading one keeps its place.
    let mut over = job_data(JOB, json!({}));
    over.insert("queue".into(), json!(7));
    round_trip("job.enqueued", JOB, over);
}

#[test]
fn compact_events_take_far_fewer_bytes_than_their_envelopes() {
    let cases = [
        ("job.enqueued", json!({"priority": 0})),
        ("job.started", json!({"worker_id": "w-1", "attempt": 1})),
        (
            "job.completed",
            json!({"duration_ms": 12, "attempt": 1, "result": null}),
        ),
    ];
    for (kind, extra) in cases {
        let (_, stored, envelope) = round_trip(kind, JOB, job_data(JOB, extra));
        eprintln!("{kind}: {stored} bytes stored, {envelope} bytes rendered");
        assert!(stored * 2 < envelope, "{kind}: {stored} of {envelope}");
    }
}

#[test]
fn damaged_compact_entries_are_refused_not_misread() {
    let e = build(
        9,
        "job.completed",
        "ojs://ojsd/api".into(),
        Utc::now(),
        JOB,
        job_data(JOB, json!({"x": 1})),
    );
    let (record, _) = encode_chunk(&[e]);
    let entry = &record[9..];
    assert!(decode(9, Entry::Compact(entry)).is_some());
    for n in 0..entry.len() {
        assert!(
            decode(9, Entry::Compact(&entry[..n])).is_none(),
            "prefix {n}"
        );
    }
    let mut padded = entry.to_vec();
    padded.push(0);
    assert!(decode(9, Entry::Compact(&padded)).is_none());
    let mut bad_code = entry.to_vec();
    bad_code[0] = 250;
    assert!(
        decode(9, Entry::Compact(&bad_code)).is_none(),
        "an unknown type code"
    );
    // A length that claims more than the entry holds.
    let mut long = entry.to_vec();
    long[1 + 16 + 8..1 + 16 + 8 + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(decode(9, Entry::Compact(&long)).is_none());
}

proptest::proptest! {
    #[test]
    fn any_bytes_decode_or_are_refused_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        if let Some((e, _)) = decode(1, Entry::Compact(&bytes)) {
            let _ = e.json();
        }
        if let Some(entries) = decode_chunk(1, &bytes) {
            for (c, entry) in entries {
                let _ = decode(c, entry);
            }
        }
    }
}

#[test]
fn version_1_records_are_still_read() {
    // What the engine logged before compact events: version 1, count, length + JSON.
    let old = br#"{"specversion":"1.0","id":"evt_1","type":"job.enqueued","source":"ojs://ojsd/api","time":"2026-11-22T07:18:28.334728Z","subject":"j1","datacontenttype":"application/json","data":{"job_id":"j1","job_type":"a.b","queue":"q"},"cursor":10}"#;
    let mut record = vec![1u8];
    record.extend_from_slice(&2u32.to_be_bytes());
    for _ in 0..2 {
        record.extend_from_slice(&(old.len() as u32).to_be_bytes());
        record.extend_from_slice(old);
    }
    let entries = decode_chunk(10, &record).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].0, 11);
    let (e, time) = decode(entries[0].0, entries[0].1).unwrap();
    assert_eq!(
        e.json().as_ref(),
        &old[..],
        "an old event is served as it was stored"
    );
    assert_eq!(
        (e.kind.as_str(), e.queue.as_deref(), e.job_type.as_deref()),
        ("job.enqueued", Some("q"), Some("a.b"))
    );
    assert_eq!(crate::job::format_ts(time), "2026-11-22T07:18:28.334728Z");
    // A record from before chunking: one bare envelope.
    let bare = decode_chunk(5, old).unwrap();
    assert_eq!(bare, vec![(5, Entry::Json(&old[..]))]);
    // Truncated or padded records are refused, not misread.
    assert!(decode_chunk(10, &record[..record.len() - 1]).is_none());
    let mut padded = record.clone();
    padded.push(0);
    assert!(decode_chunk(10, &padded).is_none());
    // A corrupt count cannot make the reader reserve memory the record cannot fill
    // (found by fuzz/fuzz_targets/event_log.rs: this input aborted on allocation).
    assert!(decode_chunk(10, &[1, 0xfd, 0xfd, 0xfd, 0xfd, 0xfd]).is_none());
    assert!(
        decode_chunk(10, &[3, 0, 0, 0, 0]).is_none(),
        "an unknown version"
    );
}

#[test]
fn chunks_split_at_their_limits() {
    let one = |c: u64, extra: Value| {
        build(
            c,
            "job.enqueued",
            "s".into(),
            Utc::now(),
            JOB,
            job_data(JOB, extra),
        )
    };
    let many: Vec<Event> = (0..CHUNK_MAX_EVENTS as u64 + 5)
        .map(|c| one(c, json!({})))
        .collect();
    let (record, taken) = encode_chunk(&many);
    assert_eq!(taken, CHUNK_MAX_EVENTS);
    assert_eq!(decode_chunk(0, &record).unwrap().len(), CHUNK_MAX_EVENTS);
    let big = "x".repeat(CHUNK_MAX_BYTES / 2);
    let large: Vec<Event> = (0..3).map(|c| one(c, json!({ "big": big }))).collect();
    assert_eq!(encode_chunk(&large).1, 1);
    // One event bigger than the limit still goes somewhere.
    let huge = vec![one(0, json!({ "big": "y".repeat(CHUNK_MAX_BYTES + 1) }))];
    let (record, taken) = encode_chunk(&huge);
    assert_eq!(taken, 1);
    let entries = decode_chunk(0, &record).unwrap();
    assert_eq!(decode(0, entries[0].1).unwrap().0, huge[0]);
    assert_eq!(key_cursor(&cursor_key(99)), Some(99));
}

#[test]
fn a_record_grown_by_appends_is_the_record_of_all_its_events_and_keeps_its_bounds() {
    let one = |c: u64| {
        build(
            c,
            "job.enqueued",
            "s".into(),
            Utc::now(),
            JOB,
            job_data(JOB, json!({ "n": c })),
        )
    };
    let all: Vec<Event> = (10..20).map(one).collect();
    let (whole, taken) = encode_chunk(&all);
    assert_eq!(taken, 10);
    let (mut grown, taken) = encode_chunk(&all[..3]);
    assert_eq!(taken, 3);
    assert_eq!(append_chunk(&mut grown, &all[3..5], 100, 1 << 20), 2);
    assert_eq!(append_chunk(&mut grown, &all[5..], 100, 1 << 20), 5);
    assert_eq!(grown, whole, "the same bytes as encoding them together");
    let read: Vec<u64> = decode_chunk(10, &grown)
        .unwrap()
        .iter()
        .map(|(c, _)| *c)
        .collect();
    assert_eq!(read, (10..20).collect::<Vec<_>>());
    // The bounds: events, then bytes.
    let (mut capped, _) = encode_chunk(&all[..3]);
    assert_eq!(append_chunk(&mut capped, &all[3..], 4, 1 << 20), 1);
    assert_eq!(decode_chunk(10, &capped).unwrap().len(), 4);
    let (mut small, _) = encode_chunk(&all[..1]);
    let len = small.len();
    assert_eq!(append_chunk(&mut small, &all[1..], 100, len + 10), 0);
    assert_eq!(small.len(), len, "nothing added past the byte bound");
    assert_eq!(decode_chunk(10, &small).unwrap().len(), 1);
    // Not a version 2 record: nothing is appended.
    let mut old = b"\x01\0\0\0\0".to_vec();
    assert_eq!(append_chunk(&mut old, &all, 100, 1 << 20), 0);
    assert_eq!(old, b"\x01\0\0\0\0");
}

#[test]
fn a_job_event_built_from_its_fields_is_the_one_built_from_its_data_map() {
    let time = Utc::now();
    let id = uuid::Uuid::now_v7().to_string();
    let cases = [
        (
            Some("4bf92f3577b34da6a3ce929d0e0e4736"),
            json!({"worker_id": "w1", "attempt": 2}),
        ),
        (
            None,
            json!({"duration_ms": 12, "attempt": 1, "result": {"ok": [1, 2.5]}}),
        ),
        (None, json!({})),
        (Some("t"), json!({"priority": -3})),
    ];
    for (trace_id, rest) in cases {
        let mut data = obj(json!({"job_id": id, "job_type": "email.send", "queue": "mail"}));
        if let Some(t) = trace_id {
            data.insert("trace_id".into(), json!(t));
        }
        data.extend(obj(rest.clone()));
        let from_map = build(
            9,
            "job.started",
            "ojs://s/workers/w1".into(),
            time,
            &id,
            data,
        );
        let fields = JobFields {
            id: &id,
            job_type: "email.send",
            queue: "mail",
            trace_id,
        };
        let mut typed = build_job(
            9,
            "job.started",
            "ojs://s/workers/w1".into(),
            time,
            &fields,
            &rest,
        );
        // Event ids are minted per event; all else must match.
        if let (Body::Compact(t), Body::Compact(m)) = (&mut typed.body, &from_map.body) {
            t.id = m.id;
        }
        assert_eq!(typed, from_map, "{rest}");
        assert_eq!(typed.json(), from_map.json());
    }
}
