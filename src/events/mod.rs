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
}
