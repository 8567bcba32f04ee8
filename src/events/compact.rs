//! The compact form of an event, as the engine makes it and the log stores it: a type code,
//! the event id's 16 bytes, the time in microseconds, the source, the subject (16 bytes when
//! it is a job id in canonical UUID form), and the data, where a job event's common fields
//! (`job_type`, `queue`, `trace_id`) are binary strings and only its other fields are JSON.
//! The OJS JSON envelope (ojs-events §2) is rendered when a reader asks for it
//! ([`Event::json`]), on the reader's thread, byte for byte what the engine used to store.
//!
//! Entry layout (integers big-endian; `str` = u32 length + UTF-8):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | type code ([`EventKind::code`]); 0 = other, followed by the type as `str` |
//! | 16 | event id (rendered `evt_<uuid>`) |
//! | 8 | time, i64 µs since the epoch |
//! | str | source |
//! | 1 + … | subject: 1 + 16 bytes of a UUID, or 0 + `str` |
//! | 1 | data form: 1 = job event, 0 = other |
//! | job | `str` job_type, `str` queue, 1 + `str` trace_id or 0, `str` the other fields |
//! | other | 1 + `str` queue or 0, 1 + `str` job_type or 0, `str` every field |
//!
//! "Fields" are the members of the data object as JSON without its braces (`"a":1,"b":2`).
//! Nothing may follow the last field.

use super::kind::EventKind;
use super::Event;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

/// Event types and their stored codes: `(code, name)` for every [`EventKind`].
pub fn kinds() -> impl Iterator<Item = (u8, &'static str)> {
    EventKind::ALL.iter().map(|k| (k.code(), k.name()))
}

fn code_of(kind: &str) -> u8 {
    EventKind::from_name(kind).map_or(0, EventKind::code)
}

fn kind_of(code: u8) -> Option<&'static str> {
    EventKind::from_code(code).map(EventKind::name)
}

/// What an event holds besides the fields filters look at (which are on [`Event`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Compact {
    pub id: [u8; 16],
    pub time_us: i64,
    pub subject: String,
    pub data: Data,
}

impl Compact {
    /// Bytes on the heap: the subject and the data.
    pub(super) fn heap_bytes(&self) -> usize {
        self.subject.capacity()
            + match &self.data {
                Data::Job { trace_id, rest } => {
                    trace_id.as_ref().map_or(0, String::capacity) + rest.len()
                }
                Data::Other(b) => b.len(),
            }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Data {
    /// `{"job_id": subject, "job_type", "queue", ["trace_id",] <rest>}`; `job_type` and
    /// `queue` are the event's own fields.
    Job {
        trace_id: Option<String>,
        rest: Bytes,
    },
    /// Any other data object, whole.
    Other(Bytes),
}

/// The members of a JSON object without its braces.
fn members(map: &Map<String, Value>) -> Bytes {
    if map.is_empty() {
        return Bytes::new();
    }
    let mut v = serde_json::to_vec(map).unwrap_or_else(|_| b"{}".to_vec());
    v.pop();
    v.remove(0);
    Bytes::from(v)
}

/// How an event's data is kept: a job event's leading fields split off, or whole.
enum Split {
    Job {
        job_type: String,
        queue: String,
        data: Data,
    },
    Other(Map<String, Value>),
}

/// A job event's data starts with `job_id` (the subject), `job_type`, `queue` and maybe
/// `trace_id`, all strings: split those off. Anything else is kept whole.
fn split_job(subject: &str, mut data: Map<String, Value>) -> Split {
    let mut keys = data.iter();
    let lead = |e: Option<(&String, &Value)>, key: &str| match e {
        Some((k, Value::String(s))) if k == key => Some(s.clone()),
        _ => None,
    };
    let job_id = lead(keys.next(), "job_id");
    let job_type = lead(keys.next(), "job_type");
    let queue = lead(keys.next(), "queue");
    let trace_id = lead(keys.next(), "trace_id");
    match (job_id, job_type, queue) {
        (Some(id), Some(job_type), Some(queue)) if id == subject => {
            data.shift_remove("job_id");
            data.shift_remove("job_type");
            data.shift_remove("queue");
            if trace_id.is_some() {
                data.shift_remove("trace_id");
            }
            let rest = members(&data);
            Split::Job {
                job_type,
                queue,
                data: Data::Job { trace_id, rest },
            }
        }
        _ => Split::Other(data),
    }
}

/// Make an event (on the engine thread: no envelope is rendered here).
pub fn build(
    cursor: u64,
    kind: &str,
    source: String,
    time: DateTime<Utc>,
    subject: &str,
    data: Map<String, Value>,
) -> Event {
    let (queue, job_type, data) = match split_job(subject, data) {
        Split::Job {
            job_type,
            queue,
            data,
        } => (Some(queue), Some(job_type), data),
        Split::Other(map) => {
            // Filters look at these; they stay inside the data too.
            let s = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
            (s("queue"), s("job_type"), Data::Other(members(&map)))
        }
    };
    Event {
        cursor,
        kind: kind.to_string(),
        source,
        queue,
        job_type,
        body: super::Body::Compact(Compact {
            id: *Uuid::now_v7().as_bytes(),
            time_us: time.timestamp_micros(),
            subject: subject.to_string(),
            data,
        }),
        position: None,
    }
}

/// A job event's fields, as the engine has them without a data map.
pub struct JobFields<'a> {
    pub id: &'a str,
    pub job_type: &'a str,
    pub queue: &'a str,
    pub trace_id: Option<&'a str>,
}

/// Make a job event from its fields and the rest of its data (a JSON object, or nothing):
/// the event `build` makes of the data `{"job_id", "job_type", "queue", ["trace_id",]
/// ...rest}` with the job id as subject, without building that map.
pub fn build_job(
    cursor: u64,
    kind: &str,
    source: String,
    time: DateTime<Utc>,
    job: &JobFields<'_>,
    rest: &Value,
) -> Event {
    let rest = match rest {
        Value::Object(m) if !m.is_empty() => {
            let mut v = serde_json::to_vec(rest).unwrap_or_else(|_| b"{}".to_vec());
            v.pop();
            v.remove(0);
            Bytes::from(v)
        }
        _ => Bytes::new(),
    };
    Event {
        cursor,
        kind: kind.to_string(),
        source,
        queue: Some(job.queue.to_string()),
        job_type: Some(job.job_type.to_string()),
        body: super::Body::Compact(Compact {
            id: *Uuid::now_v7().as_bytes(),
            time_us: time.timestamp_micros(),
            subject: job.id.to_string(),
            data: Data::Job {
                trace_id: job.trace_id.map(str::to_string),
                rest,
            },
        }),
        position: None,
    }
}

fn put_str(v: &mut Vec<u8>, s: &[u8]) {
    v.extend_from_slice(&(s.len() as u32).to_be_bytes());
    v.extend_from_slice(s);
}

fn put_opt(v: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            v.push(1);
            put_str(v, s.as_bytes());
        }
        None => v.push(0),
    }
}

/// The subject's 16 bytes when it is a UUID in the form it renders back to.
fn uuid_subject(s: &str) -> Option<Uuid> {
    let u = Uuid::parse_str(s).ok()?;
    (u.hyphenated().to_string() == s).then_some(u)
}

/// Append the stored form of a compact event.
pub(super) fn encode(e: &Event, c: &Compact, out: &mut Vec<u8>) {
    let code = code_of(&e.kind);
    out.push(code);
    if code == 0 {
        put_str(out, e.kind.as_bytes());
    }
    out.extend_from_slice(&c.id);
    out.extend_from_slice(&c.time_us.to_be_bytes());
    put_str(out, e.source.as_bytes());
    match uuid_subject(&c.subject) {
        Some(u) => {
            out.push(1);
            out.extend_from_slice(u.as_bytes());
        }
        None => {
            out.push(0);
            put_str(out, c.subject.as_bytes());
        }
    }
    match &c.data {
        Data::Job { trace_id, rest } => {
            out.push(1);
            put_str(out, e.job_type.as_deref().unwrap_or("").as_bytes());
            put_str(out, e.queue.as_deref().unwrap_or("").as_bytes());
            put_opt(out, trace_id.as_deref());
            put_str(out, rest);
        }
        Data::Other(all) => {
            out.push(0);
            put_opt(out, e.queue.as_deref());
            put_opt(out, e.job_type.as_deref());
            put_str(out, all);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn str(&mut self) -> Option<String> {
        let n = u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn bytes(&mut self) -> Option<Bytes> {
        let n = u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize;
        Some(Bytes::copy_from_slice(self.take(n)?))
    }
    fn opt(&mut self) -> Option<Option<String>> {
        match self.u8()? {
            0 => Some(None),
            1 => self.str().map(Some),
            _ => None,
        }
    }
}

/// Read a stored compact event; `None` when truncated, padded or garbled.
pub(super) fn decode(cursor: u64, v: &[u8]) -> Option<Event> {
    let mut r = Reader(v);
    let kind = match r.u8()? {
        0 => r.str()?,
        code => kind_of(code)?.to_string(),
    };
    let id: [u8; 16] = r.take(16)?.try_into().ok()?;
    let time_us = i64::from_be_bytes(r.take(8)?.try_into().ok()?);
    // A time the renderer could not format is refused here, not at render time.
    DateTime::<Utc>::from_timestamp_micros(time_us)?;
    let source = r.str()?;
    let subject = match r.u8()? {
        1 => Uuid::from_slice(r.take(16)?).ok()?.hyphenated().to_string(),
        0 => r.str()?,
        _ => return None,
    };
    let (queue, job_type, data) = match r.u8()? {
        1 => {
            let job_type = r.str()?;
            let queue = r.str()?;
            let trace_id = r.opt()?;
            let rest = r.bytes()?;
            (Some(queue), Some(job_type), Data::Job { trace_id, rest })
        }
        0 => {
            let queue = r.opt()?;
            let job_type = r.opt()?;
            (queue, job_type, Data::Other(r.bytes()?))
        }
        _ => return None,
    };
    if !r.0.is_empty() {
        return None;
    }
    Some(Event {
        cursor,
        kind,
        source,
        queue,
        job_type,
        body: super::Body::Compact(Compact {
            id,
            time_us,
            subject,
            data,
        }),
        position: None,
    })
}

/// A JSON string, escaped as serde_json escapes it.
fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *out, s);
}

/// The OJS envelope of a compact event: the bytes the engine's JSON encoder would give.
pub(super) fn render(e: &Event, c: &Compact) -> Vec<u8> {
    let rest = match &c.data {
        Data::Job { rest, .. } => rest.len(),
        Data::Other(all) => all.len(),
    };
    let mut out = Vec::with_capacity(300 + rest + c.subject.len() + e.source.len());
    out.extend_from_slice(br#"{"specversion":"1.0","id":"evt_"#);
    out.extend_from_slice(
        Uuid::from_bytes(c.id)
            .hyphenated()
            .encode_lower(&mut Uuid::encode_buffer())
            .as_bytes(),
    );
    out.extend_from_slice(br#"","type":"#);
    json_str(&mut out, &e.kind);
    out.extend_from_slice(br#","source":"#);
    json_str(&mut out, &e.source);
    out.extend_from_slice(br#","time":""#);
    let time = DateTime::<Utc>::from_timestamp_micros(c.time_us).unwrap_or_default();
    out.extend_from_slice(crate::job::format_ts(time).as_bytes());
    out.extend_from_slice(br#"","subject":"#);
    json_str(&mut out, &c.subject);
    out.extend_from_slice(br#","datacontenttype":"application/json","data":{"#);
    match &c.data {
        Data::Job { trace_id, rest } => {
            out.extend_from_slice(br#""job_id":"#);
            json_str(&mut out, &c.subject);
            out.extend_from_slice(br#","job_type":"#);
            json_str(&mut out, e.job_type.as_deref().unwrap_or(""));
            out.extend_from_slice(br#","queue":"#);
            json_str(&mut out, e.queue.as_deref().unwrap_or(""));
            if let Some(t) = trace_id {
                out.extend_from_slice(br#","trace_id":"#);
                json_str(&mut out, t);
            }
            if !rest.is_empty() {
                out.push(b',');
                out.extend_from_slice(rest);
            }
        }
        Data::Other(all) => out.extend_from_slice(all),
    }
    out.extend_from_slice(br#"},"cursor":"#);
    out.extend_from_slice(e.cursor.to_string().as_bytes());
    out.push(b'}');
    out
}

/// The time of a compact event.
pub(super) fn time(c: &Compact) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_micros(c.time_us).unwrap_or_default()
}
