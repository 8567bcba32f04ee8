//! OJS events (ojs-events §2-§4): the envelope, subscription filters (§6.1), and the
//! encoding of the durable event log. The engine creates events in the same commit as the
//! transition they describe; front ends only read them.

mod filter;
mod subscription;

pub use filter::{split_csv, EventFilter};
pub use subscription::Subscription;

use crate::job::format_ts;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

pub const SPEC_VERSION: &str = "1.0";

/// Where an event comes from: `ojs://{service}/{component}[/{instance}]` (ojs-events §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component<'a> {
    /// Client requests: PUSH, CANCEL, admin commands.
    Api,
    /// A worker's own actions (FETCH, ACK, FAIL, BEAT), with its id when it has one.
    Worker(Option<&'a str>),
    /// Timers: scheduled promotion, retries, expiry, visibility timeouts.
    Scheduler,
    Cron,
}

pub fn source(service: &str, c: Component<'_>) -> String {
    match c {
        Component::Api => format!("ojs://{service}/api"),
        Component::Worker(Some(w)) => format!("ojs://{service}/workers/{w}"),
        Component::Worker(None) => format!("ojs://{service}/workers"),
        Component::Scheduler => format!("ojs://{service}/scheduler"),
        Component::Cron => format!("ojs://{service}/cron"),
    }
}

/// One event, already encoded. The fields a filter looks at are kept beside the bytes so
/// live delivery never re-parses JSON.
#[derive(Debug, Clone)]
pub struct Event {
    pub cursor: u64,
    pub kind: String,
    pub source: String,
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub json: Bytes,
}

/// Build and encode an event. `cursor` is the log position: a strictly increasing number
/// that subscribers use to resume (`after`), carried as the `cursor` extension attribute.
pub fn build(
    cursor: u64,
    kind: &str,
    source: String,
    time: DateTime<Utc>,
    subject: &str,
    data: Map<String, Value>,
) -> Event {
    let queue = data
        .get("queue")
        .and_then(Value::as_str)
        .map(str::to_string);
    let job_type = data
        .get("job_type")
        .and_then(Value::as_str)
        .map(str::to_string);
    // Serialized straight from borrowed fields: this runs for every transition on the
    // engine thread, and building a `Value` tree first doubled its allocations.
    let id = format!("evt_{}", uuid::Uuid::now_v7());
    let time = format_ts(time);
    let envelope = Envelope {
        specversion: SPEC_VERSION,
        id: &id,
        kind,
        source: &source,
        time: &time,
        subject,
        datacontenttype: "application/json",
        data: &data,
        cursor,
    };
    let mut json = Vec::with_capacity(512);
    let _ = serde_json::to_writer(&mut json, &envelope);
    Event {
        cursor,
        kind: kind.to_string(),
        source,
        queue,
        job_type,
        json: Bytes::from(json),
    }
}

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
    data: &'a Map<String, Value>,
    cursor: u64,
}

/// The parts of a stored event needed to filter it and to find it by time.
#[derive(Deserialize)]
struct StoredView {
    #[serde(rename = "type")]
    kind: String,
    source: String,
    time: String,
    #[serde(default)]
    data: DataView,
}

#[derive(Deserialize, Default)]
struct DataView {
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    job_type: Option<String>,
}

/// Decode a log record back into an `Event` (plus its time, for `since`).
pub fn decode(cursor: u64, json: &[u8]) -> Option<(Event, DateTime<Utc>)> {
    let v: StoredView = serde_json::from_slice(json).ok()?;
    let time = crate::job::parse_ts(&v.time)?;
    Some((
        Event {
            cursor,
            kind: v.kind,
            source: v.source,
            queue: v.data.queue,
            job_type: v.data.job_type,
            json: Bytes::copy_from_slice(json),
        },
        time,
    ))
}

/// Log records hold the events of one commit, not one event each: sled pays several
/// microseconds per key written (bench/RESULTS.md), which made three events per job cost
/// more than the job's own writes. A record is keyed by the cursor of its first event and
/// holds consecutive cursors: version byte, count (u32), then per event a length (u32) and
/// the event's JSON.
const CHUNK_VERSION: u8 = 1;
/// Most events and bytes in one record, so a huge commit does not become one huge value.
pub const CHUNK_MAX_EVENTS: usize = 1024;
pub const CHUNK_MAX_BYTES: usize = 1 << 20;

/// Encode consecutive events as one log record; returns how many of `events` it took.
pub fn encode_chunk(events: &[Event]) -> (Vec<u8>, usize) {
    let mut taken = 0;
    let mut bytes = 0;
    for e in events.iter().take(CHUNK_MAX_EVENTS) {
        if taken > 0 && bytes + e.json.len() > CHUNK_MAX_BYTES {
            break;
        }
        bytes += e.json.len() + 4;
        taken += 1;
    }
    let mut v = Vec::with_capacity(5 + bytes);
    v.push(CHUNK_VERSION);
    v.extend_from_slice(&(taken as u32).to_be_bytes());
    for e in &events[..taken] {
        v.extend_from_slice(&(e.json.len() as u32).to_be_bytes());
        v.extend_from_slice(&e.json);
    }
    (v, taken)
}

/// The events of one log record as (cursor, JSON), `first` being the record's key. A
/// record written before chunking (a bare JSON object) is one event. `None` when corrupt.
pub fn decode_chunk(first: u64, v: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    if v.first() == Some(&b'{') {
        return Some(vec![(first, v)]);
    }
    if v.len() < 5 || v[0] != CHUNK_VERSION {
        return None;
    }
    let count = u32::from_be_bytes(v[1..5].try_into().ok()?) as usize;
    // The count comes from disk: reserve only what the record's bytes can hold.
    let mut out = Vec::with_capacity(count.min((v.len() - 5) / 4));
    let mut at = 5;
    for i in 0..count {
        let len = u32::from_be_bytes(v.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4;
        out.push((first + i as u64, v.get(at..at + len)?));
        at += len;
    }
    (at == v.len()).then_some(out)
}

pub fn cursor_key(cursor: u64) -> [u8; 8] {
    cursor.to_be_bytes()
}

pub fn key_cursor(key: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// Where a subscription starts reading the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Only events committed from now on.
    Live,
    /// Events with a cursor greater than this, then live ones.
    After(u64),
    /// Events at or after this time, then live ones.
    Since(DateTime<Utc>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelope_has_the_required_attributes_and_round_trips() {
        let mut data = Map::new();
        data.insert("job_type".into(), json!("email.send"));
        data.insert("queue".into(), json!("mail"));
        let t = Utc::now();
        let e = build(
            7,
            "job.enqueued",
            source("ojsd", Component::Api),
            t,
            "j1",
            data,
        );
        let v: Value = serde_json::from_slice(&e.json).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert!(v["id"].as_str().unwrap().starts_with("evt_"));
        assert_eq!(v["type"], "job.enqueued");
        assert_eq!(v["source"], "ojs://ojsd/api");
        assert_eq!(v["subject"], "j1");
        assert_eq!(v["cursor"], 7);
        let (back, time) = decode(7, &e.json).unwrap();
        assert_eq!(back.queue.as_deref(), Some("mail"));
        assert_eq!(back.job_type.as_deref(), Some("email.send"));
        assert_eq!(back.kind, "job.enqueued");
        assert_eq!(format_ts(time), format_ts(t));
        assert_eq!(key_cursor(&cursor_key(99)), Some(99));
    }

    fn event(cursor: u64, json: &str) -> Event {
        Event {
            cursor,
            kind: "k".into(),
            source: "s".into(),
            queue: None,
            job_type: None,
            json: Bytes::from(json.to_string()),
        }
    }

    #[test]
    fn chunks_round_trip_and_split_at_their_limits() {
        let events: Vec<Event> = (10..13)
            .map(|c| event(c, &format!("{{\"n\":{c}}}")))
            .collect();
        let (rec, taken) = encode_chunk(&events);
        assert_eq!(taken, 3);
        let back = decode_chunk(10, &rec).unwrap();
        assert_eq!(
            back,
            vec![
                (10, &b"{\"n\":10}"[..]),
                (11, b"{\"n\":11}"),
                (12, b"{\"n\":12}")
            ]
        );
        // Truncated or padded records are refused, not misread.
        assert!(decode_chunk(10, &rec[..rec.len() - 1]).is_none());
        let mut padded = rec.clone();
        padded.push(0);
        assert!(decode_chunk(10, &padded).is_none());
        // A corrupt count cannot make the reader reserve memory the record cannot fill
        // (found by fuzz/fuzz_targets/event_log.rs: this input aborted on allocation).
        assert!(decode_chunk(10, &[1, 0xfd, 0xfd, 0xfd, 0xfd, 0xfd]).is_none());
        // A pre-chunk record is one event.
        assert_eq!(decode_chunk(5, b"{}").unwrap(), vec![(5, &b"{}"[..])]);

        let many: Vec<Event> = (0..CHUNK_MAX_EVENTS as u64 + 5)
            .map(|c| event(c, "{}"))
            .collect();
        assert_eq!(encode_chunk(&many).1, CHUNK_MAX_EVENTS);
        let big = "x".repeat(CHUNK_MAX_BYTES / 2);
        let large: Vec<Event> = (0..3).map(|c| event(c, &big)).collect();
        assert_eq!(encode_chunk(&large).1, 1);
        // One event bigger than the limit still goes somewhere.
        let huge = vec![event(0, &"y".repeat(CHUNK_MAX_BYTES + 1))];
        assert_eq!(encode_chunk(&huge).1, 1);
    }
}
