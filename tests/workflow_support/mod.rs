//! Helpers shared by the workflow suites: WORKFLOW commands, real workers, a barrier that
//! cannot hang a test, HTTP requests with a body, and the event log.
#![allow(dead_code)]

use crate::common::{call_json, wait_for, Server};
use ojs_client::{Client, JobOutcome, Reply, StopHandle, Worker};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(30);

pub fn create(c: &mut Client, def: &Value) -> Value {
    call_json(c, &format!("WORKFLOW CREATE {def}"))
}

pub fn get(c: &mut Client, id: &str) -> Value {
    call_json(c, &format!("WORKFLOW GET {id}"))
}

pub fn wf_id(v: &Value) -> String {
    v["id"].as_str().expect("workflow id").to_string()
}

/// The error (code, message) a raw command got.
pub fn error_of(c: &mut Client, line: &str) -> (String, String) {
    match c.call(line).expect("call") {
        Reply::Error { code, message } => (code, message),
        other => panic!("expected an error for {line:.80}, got {other:?}"),
    }
}

/// Poll WORKFLOW GET until the workflow is in `state`.
pub fn wait_state(c: &mut Client, id: &str, state: &str) -> Value {
    wait_for(WAIT, &format!("workflow {id} to be {state}"), || {
        let w = get(c, id);
        (w["state"] == state).then_some(w)
    })
}

pub fn job(t: &str, args: Value) -> Value {
    json!({"type": t, "args": args})
}

/// A job in `queue` that fails for good on its first failure.
pub fn once(t: &str, queue: &str) -> Value {
    json!({"type": t, "args": [], "options": {"queue": queue, "retry": {"max_attempts": 1}}})
}

pub type Handler = Arc<dyn Fn(&Value) -> JobOutcome + Send + Sync>;

/// A real worker (the client library's) running in the background.
pub struct Running {
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    pub fn start(
        srv: &Server,
        wid: &str,
        queues: &[&str],
        threads: usize,
        types: &[&str],
        h: Handler,
    ) -> Running {
        let mut w = Worker::new(&srv.addr)
            .wid(wid)
            .queues(queues)
            .concurrency(threads)
            .heartbeat_interval(Duration::from_millis(500));
        for t in types {
            let h = h.clone();
            w = w.register(t, move |job| h(job));
        }
        let stop = w.stop_handle();
        let thread = std::thread::spawn(move || {
            let _ = w.run();
        });
        Running {
            stop,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A reusable barrier for `n` threads whose waits give up after `timeout`, so a test that
/// goes wrong fails instead of hanging.
pub struct Gate {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    timeout: Duration,
}

impl Gate {
    pub fn new(n: usize) -> Gate {
        Gate {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Returns false if the others did not arrive in time.
    pub fn wait(&self) -> bool {
        let mut g = self.state.lock().unwrap();
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return true;
        }
        let (mut g, res) = self
            .cv
            .wait_timeout_while(g, self.timeout, |s| s.1 == generation)
            .unwrap();
        if res.timed_out() {
            g.0 = g.0.saturating_sub(1);
            return false;
        }
        true
    }
}

/// One HTTP/1.1 request with an optional JSON body: status, headers (lowercase names) and
/// the body as JSON (`null` when empty).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, Value) {
    let mut s = TcpStream::connect(addr).expect("connect http");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let v = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    };
    (status, headers, v)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Every workflow event in the log so far (envelopes), oldest first.
pub fn workflow_events(srv: &Server) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(c) => format!("/ojs/v1/events?types=workflow.*&limit=1000&after={c}"),
            None => "/ojs/v1/events?types=workflow.*&limit=1000".to_string(),
        };
        let (status, _, page) = http(&srv.http_addr, "GET", &path, None);
        assert_eq!(status, 200, "{page}");
        out.extend(page["events"].as_array().expect("events").iter().cloned());
        if page["has_more"] != true {
            return out;
        }
        after = page["cursor"].as_str().map(str::to_string);
    }
}

/// The events of one workflow, as (type, data).
pub fn events_of(srv: &Server, id: &str) -> Vec<(String, Value)> {
    workflow_events(srv)
        .into_iter()
        .filter(|e| e["subject"] == id)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_string(),
                e["data"].clone(),
            )
        })
        .collect()
}
