//! OJS events (ojs-events §2-§4): the envelope, subscription filters (§6.1), and the
//! encoding of the durable event log. The engine creates events in the same commit as the
//! transition they describe; front ends only read them.

mod compact;
mod filter;
pub mod held;
mod kind;

pub use compact::{build, build_job, kinds, JobFields};
pub use filter::{split_csv, EventFilter};
pub use kind::EventKind;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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

/// One event. The fields a filter looks at are kept beside the rest, so live delivery and
/// filtering never parse or render JSON; the OJS envelope is rendered by [`Event::json`]
/// on the reader's thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub cursor: u64,
    pub kind: String,
    pub source: String,
    pub queue: Option<String>,
    pub job_type: Option<String>,
    body: Body,
    /// In a stream merging several partitions' logs (cluster mode): where the stream
    /// stands once this event is handed out, as a [`position_token`]; rendered into the
    /// envelope as `position` and used as the SSE id, so a reader resumes from it.
    pub position: Option<std::sync::Arc<str>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Body {
    /// Made by this engine, or read from a compact log record.
    Compact(compact::Compact),
    /// A JSON envelope read from a log record of version 1 (before compact events).
    Json(Bytes),
}

impl Event {
    /// The OJS JSON envelope (ojs-events §2), with the `cursor` extension attribute (and
    /// `position` in a stream merging several partitions).
    pub fn json(&self) -> Bytes {
        let json = match &self.body {
            Body::Compact(c) => Bytes::from(compact::render(self, c)),
            Body::Json(j) => j.clone(),
        };
        match &self.position {
            Some(p) if json.last() == Some(&b'}') => {
                let mut out = Vec::with_capacity(json.len() + p.len() + 16);
                out.extend_from_slice(&json[..json.len() - 1]);
                out.extend_from_slice(br#","position":""#);
                // A token is digits, `p`, `:` and `,`: nothing to escape.
                out.extend_from_slice(p.as_bytes());
                out.extend_from_slice(b"\"}");
                Bytes::from(out)
            }
            _ => json,
        }
    }

    /// What a reader resumes from after this event: its position in a merged stream, or
    /// its cursor.
    pub fn resume_id(&self) -> String {
        match &self.position {
            Some(p) => p.to_string(),
            None => self.cursor.to_string(),
        }
    }

    /// When the event happened.
    pub fn time(&self) -> Option<DateTime<Utc>> {
        match &self.body {
            Body::Compact(c) => Some(compact::time(c)),
            Body::Json(j) => serde_json::from_slice::<StoredView>(j)
                .ok()
                .and_then(|v| crate::job::parse_ts(&v.time)),
        }
    }

    /// About how much memory the event takes while it waits in a subscriber's buffer:
    /// the struct, its strings and its data, each heap block with an allocator's overhead.
    pub fn held_bytes(&self) -> usize {
        const BLOCK: usize = 16;
        let s = |s: &String| s.capacity() + BLOCK;
        let o = |o: &Option<String>| o.as_ref().map_or(0, s);
        let body = match &self.body {
            Body::Compact(c) => c.heap_bytes() + 2 * BLOCK,
            Body::Json(j) => j.len() + BLOCK,
        };
        std::mem::size_of::<Event>()
            + s(&self.kind)
            + s(&self.source)
            + o(&self.queue)
            + o(&self.job_type)
            + self.position.as_ref().map_or(0, |p| p.len() + BLOCK)
            + body
    }

    #[cfg(test)]
    pub(crate) fn test_event(cursor: u64, kind: &str, queue: &str) -> Event {
        Event {
            cursor,
            kind: kind.into(),
            source: "ojs://ojsd/api".into(),
            queue: Some(queue.into()),
            job_type: Some("t".into()),
            body: Body::Json(Bytes::from_static(b"{}")),
            position: None,
        }
    }
}

/// An event as it travels to another node (`cluster::peer`): the fields a filter looks at
/// and the rendered envelope, embedded as JSON. It arrives as an event whose body is that
/// envelope, as a log record of version 1 is read.
#[derive(Serialize)]
struct WireOut<'a> {
    cursor: u64,
    kind: &'a str,
    source: &'a str,
    queue: Option<&'a str>,
    job_type: Option<&'a str>,
    envelope: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct WireIn {
    cursor: u64,
    kind: String,
    source: String,
    queue: Option<String>,
    job_type: Option<String>,
    envelope: Box<serde_json::value::RawValue>,
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let json = self.json();
        let text = std::str::from_utf8(&json).map_err(serde::ser::Error::custom)?;
        let envelope: &serde_json::value::RawValue =
            serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
        WireOut {
            cursor: self.cursor,
            kind: &self.kind,
            source: &self.source,
            queue: self.queue.as_deref(),
            job_type: self.job_type.as_deref(),
            envelope,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        let w = WireIn::deserialize(d)?;
        Ok(Event {
            cursor: w.cursor,
            kind: w.kind,
            source: w.source,
            queue: w.queue,
            job_type: w.job_type,
            body: Body::Json(Bytes::copy_from_slice(w.envelope.get().as_bytes())),
            position: None,
        })
    }
}

/// The parts of a stored JSON event (log version 1) needed to filter it and to find it by
/// time.
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

/// A log entry in the format of its record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Entry<'a> {
    /// Version 1: the event's JSON envelope.
    Json(&'a [u8]),
    /// Version 2: a compact event (`compact.rs`).
    Compact(&'a [u8]),
}

impl Entry<'_> {
    pub fn len(&self) -> usize {
        match self {
            Entry::Json(b) | Entry::Compact(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Decode a log entry back into an `Event` (plus its time, for `since`); `None` when it
/// cannot be read.
pub fn decode(cursor: u64, entry: Entry<'_>) -> Option<(Event, DateTime<Utc>)> {
    match entry {
        Entry::Compact(v) => {
            let e = compact::decode(cursor, v)?;
            let time = e.time()?;
            Some((e, time))
        }
        Entry::Json(json) => {
            let v: StoredView = serde_json::from_slice(json).ok()?;
            let time = crate::job::parse_ts(&v.time)?;
            Some((
                Event {
                    cursor,
                    kind: v.kind,
                    source: v.source,
                    queue: v.data.queue,
                    job_type: v.data.job_type,
                    body: Body::Json(Bytes::copy_from_slice(json)),
                    position: None,
                },
                time,
            ))
        }
    }
}

/// Log records hold the events of one commit, not one event each: sled pays several
/// microseconds per key written (bench/RESULTS.md), which made three events per job cost
/// more than the job's own writes. A record is keyed by the cursor of its first event and
/// holds consecutive cursors: version byte, count (u32), then per event a length (u32) and
/// the event: its JSON envelope in version 1 (still read), a compact event in version 2.
const CHUNK_V1: u8 = 1;
const CHUNK_V2: u8 = 2;
/// Most events and bytes in one record, so a huge commit does not become one huge value.
pub const CHUNK_MAX_EVENTS: usize = 1024;
pub const CHUNK_MAX_BYTES: usize = 1 << 20;

/// Encode consecutive events as one log record; returns how many of `events` it took.
pub fn encode_chunk(events: &[Event]) -> (Vec<u8>, usize) {
    let mut v = Vec::with_capacity(5 + events.len().min(CHUNK_MAX_EVENTS) * 160);
    v.push(CHUNK_V2);
    v.extend_from_slice(&[0; 4]);
    let taken = append_chunk(&mut v, events, CHUNK_MAX_EVENTS, CHUNK_MAX_BYTES);
    (v, taken)
}

/// Append the events that follow a record's last (consecutive cursors) to `record`, as
/// long as it stays within `max_events` and `max_bytes` (but an empty record takes at
/// least one); returns how many it took. `record` is one `encode_chunk` made (version 2).
pub fn append_chunk(
    record: &mut Vec<u8>,
    events: &[Event],
    max_events: usize,
    max_bytes: usize,
) -> usize {
    let Some(held) = record
        .get(1..5)
        .filter(|_| record[0] == CHUNK_V2)
        .and_then(|b| b.try_into().ok())
        .map(|b: [u8; 4]| u32::from_be_bytes(b) as usize)
    else {
        return 0;
    };
    let mut taken = 0usize;
    let mut one = Vec::with_capacity(256);
    for e in events.iter().take(max_events.saturating_sub(held)) {
        one.clear();
        match &e.body {
            Body::Compact(c) => compact::encode(e, c, &mut one),
            // Only events read from an old record are JSON; they are never logged again,
            // but if one were, it keeps its envelope: a compact event of type 0 cannot
            // carry it, so it ends the record before it (a record holds one format).
            Body::Json(_) => break,
        }
        if held + taken > 0 && record.len() + one.len() + 4 > max_bytes {
            break;
        }
        record.extend_from_slice(&(one.len() as u32).to_be_bytes());
        record.extend_from_slice(&one);
        taken += 1;
    }
    record[1..5].copy_from_slice(&((held + taken) as u32).to_be_bytes());
    taken
}

/// The events of one log record as (cursor, entry), `first` being the record's key. A
/// record written before chunking (a bare JSON object) is one event. `None` when corrupt.
pub fn decode_chunk(first: u64, v: &[u8]) -> Option<Vec<(u64, Entry<'_>)>> {
    if v.first() == Some(&b'{') {
        return Some(vec![(first, Entry::Json(v))]);
    }
    if v.len() < 5 || (v[0] != CHUNK_V1 && v[0] != CHUNK_V2) {
        return None;
    }
    let count = u32::from_be_bytes(v[1..5].try_into().ok()?) as usize;
    // The count comes from disk: reserve only what the record's bytes can hold.
    let mut out = Vec::with_capacity(count.min((v.len() - 5) / 4));
    let mut at = 5;
    for i in 0..count {
        let len = u32::from_be_bytes(v.get(at..at + 4)?.try_into().ok()?) as usize;
        at += 4;
        let bytes = v.get(at..at.checked_add(len)?)?;
        let entry = if v[0] == CHUNK_V1 {
            Entry::Json(bytes)
        } else {
            Entry::Compact(bytes)
        };
        out.push((first.checked_add(i as u64)?, entry));
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Start {
    /// Only events committed from now on.
    Live,
    /// Events with a cursor greater than this, then live ones.
    After(u64),
    /// Events at or after this time, then live ones.
    Since(DateTime<Utc>),
    /// A stream merging every partition's log (cluster mode): after each partition's
    /// cursor, in partition order (a [`position_token`] read back).
    Each(Vec<u64>),
}

/// Most partitions a position token names (the most a cluster has).
pub const MAX_POSITION_PARTS: usize = 1024;

/// A merged stream's position: `p<N>:<c0>,<c1>,...`, each partition's last cursor handed
/// out (or covered), in partition order.
pub fn position_token(cursors: &[u64]) -> String {
    let mut s = format!("p{}:", cursors.len());
    for (i, c) in cursors.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&c.to_string());
    }
    s
}

/// A [`position_token`] read back; `None` when `s` is not one.
pub fn parse_position(s: &str) -> Option<Vec<u64>> {
    let (n, list) = s.strip_prefix('p')?.split_once(':')?;
    let n: usize = n.parse().ok()?;
    if n == 0 || n > MAX_POSITION_PARTS {
        return None;
    }
    let v: Vec<u64> = list
        .split(',')
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() == n).then_some(v)
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
