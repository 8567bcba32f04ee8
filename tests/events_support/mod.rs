//! Shared helpers for the event tests over TCP `SUBSCRIBE`: a raw connection, an event
//! stream that checks every envelope, and small accessors.
#![allow(dead_code)]

use super::common::*;
use ojs_client::{wire, Client, Reply};
use serde_json::{json, Value};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One raw protocol connection, for HELLO payloads and socket options the client hides.
pub struct Raw {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Raw {
    pub fn connect(addr: &str, hello: Value, rcvbuf: Option<usize>) -> Raw {
        let sa: std::net::SocketAddr = addr.parse().expect("server address");
        let domain = socket2::Domain::for_address(sa);
        let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
        if let Some(n) = rcvbuf {
            sock.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        sock.connect(&sa.into()).expect("connect");
        let s: TcpStream = sock.into();
        s.set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        let r = BufReader::new(s.try_clone().expect("clone"));
        let mut raw = Raw { r, w: s };
        let hi = raw.reply();
        assert!(
            matches!(&hi, Reply::Simple(s) if s.starts_with("HI ")),
            "{hi:?}"
        );
        assert_eq!(raw.call(&format!("HELLO {hello}")), ok());
        raw
    }

    pub fn send(&mut self, line: &str) {
        self.w
            .write_all(format!("{line}\r\n").as_bytes())
            .expect("write");
    }

    pub fn reply(&mut self) -> Reply {
        wire::read_reply(&mut self.r).expect("read a reply (timed out?)")
    }

    pub fn call(&mut self, line: &str) -> Reply {
        self.send(line);
        self.reply()
    }
}

pub fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// An event stream. Every event read is checked against the envelope rules (§2) and for a
/// cursor greater than the one before.
pub struct Sub {
    pub raw: Raw,
    pub last: Option<u64>,
}

impl Sub {
    pub fn open(srv: &Server, filter: Value) -> Sub {
        Sub::open_with(&srv.addr, filter, None)
    }

    pub fn open_with(addr: &str, filter: Value, rcvbuf: Option<usize>) -> Sub {
        let mut raw = Raw::connect(addr, json!({"v": 2}), rcvbuf);
        assert_eq!(raw.call(&format!("SUBSCRIBE {filter}")), ok(), "{filter}");
        Sub { raw, last: None }
    }

    pub fn next(&mut self) -> Value {
        let e: Value = match self.raw.reply() {
            Reply::Bulk(b) => serde_json::from_slice(&b).expect("event JSON"),
            other => panic!("expected an event, got {other:?}"),
        };
        check_envelope(&e);
        let c = cursor(&e);
        assert!(
            self.last.is_none_or(|l| c > l),
            "cursor {c} after {:?}",
            self.last
        );
        self.last = Some(c);
        e
    }

    pub fn take(&mut self, n: usize) -> Vec<Value> {
        (0..n).map(|_| self.next()).collect()
    }

    /// Events up to and including the first one that satisfies `stop`.
    pub fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = vec![self.next()];
        while !stop(out.last().unwrap()) {
            out.push(self.next());
        }
        out
    }
}

pub fn check_envelope(e: &Value) {
    assert_eq!(e["specversion"], "1.0", "{e}");
    let id = e["id"].as_str().and_then(|s| s.strip_prefix("evt_"));
    let id = uuid::Uuid::parse_str(id.unwrap_or("")).unwrap_or_else(|_| panic!("id: {e}"));
    assert_eq!(id.get_version_num(), 7, "event ids are UUIDv7: {e}");
    assert!(
        ty(e).contains('.') && e["subject"].is_string() && e["data"].is_object(),
        "{e}"
    );
    assert!(
        e["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("ojs://ojsd/")),
        "{e}"
    );
    ts(&e["time"]);
    if ty(e).starts_with("job.") {
        let d = &e["data"];
        assert_eq!(d["job_id"], e["subject"], "job events carry job_id: {e}");
        assert!(d["job_type"].is_string() && d["queue"].is_string(), "{e}");
    }
}

/// Every field of `want` is in the event's data with that value.
pub fn has(e: &Value, want: Value) {
    for (k, v) in want.as_object().expect("object") {
        assert_eq!(&e["data"][k], v, "data.{k} of {e}");
    }
}

pub fn ty(e: &Value) -> &str {
    e["type"].as_str().unwrap_or("")
}

pub fn cursor(e: &Value) -> u64 {
    e["cursor"].as_u64().expect("cursor")
}

pub fn subject(e: &Value) -> &str {
    e["subject"].as_str().unwrap_or("")
}

pub fn of<'a>(events: &'a [Value], subj: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| subject(e) == subj).collect()
}

pub fn types<'a>(events: &[&'a Value]) -> Vec<&'a str> {
    events.iter().map(|e| ty(e)).collect()
}

pub fn subjects(events: &[Value]) -> Vec<&str> {
    events.iter().map(subject).collect()
}

pub fn job(job_type: &str, queue: &str) -> Value {
    json!({"type": job_type, "args": [], "queue": queue})
}

pub fn push_n(c: &mut Client, n: usize) -> Vec<String> {
    (0..n).map(|_| push_id(c, &job("t", "q"))).collect()
}

/// Pause a fresh queue: its `queue.paused` comes after every event committed before it.
pub fn mark(c: &mut Client) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let q = format!("mark-{}", N.fetch_add(1, Ordering::Relaxed));
    c.pause_queues(&[&q]).expect("QUEUE PAUSE");
    q
}

pub fn is_mark(q: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| ty(e) == "queue.paused" && subject(e) == q
}

/// Everything an unfiltered stream delivers before a fresh mark.
pub fn drain(sub: &mut Sub, c: &mut Client) -> Vec<Value> {
    let q = mark(c);
    let mut v = sub.until(is_mark(&q));
    v.pop();
    v
}

pub fn assert_consecutive(events: &[Value], first: u64) {
    let cursors: Vec<u64> = events.iter().map(cursor).collect();
    let want: Vec<u64> = (first..first + events.len() as u64).collect();
    assert_eq!(cursors, want, "cursors must have no gap and no repeat");
}
