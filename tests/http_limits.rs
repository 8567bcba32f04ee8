//! What one client can hold or try on the HTTP listener, over real sockets: time for a
//! request body (`--body-timeout-ms`), its size (`--max-body-bytes`, derived from
//! `--max-job-bytes`), and bearer-token guesses (`--max-auth-failures`, shared with the
//! TCP HELLO). Issue 19: D2, D7 and D10.

mod common;

use common::*;
use ojs_client::{Client, ConnectOptions};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One HTTP/1.1 connection written byte for byte, so a test can stop half way through a
/// request, and read answers one at a time (keep-alive).
struct Raw {
    reader: BufReader<TcpStream>,
}

/// A response read off a `Raw` connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {} body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// `error.code` and `error.details.ojs_code` of the binding's error body.
    fn codes(&self) -> (String, String) {
        let v = self.json();
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (
            s(&v["error"]["code"]),
            s(&v["error"]["details"]["ojs_code"]),
        )
    }
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect http");
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        s.set_nodelay(true).unwrap();
        Raw {
            reader: BufReader::new(s),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write");
    }

    /// The request line and headers (and the blank line), nothing of the body.
    fn head(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.write(req.as_bytes());
    }

    /// A whole request with a JSON body.
    fn request(&mut self, method: &str, path: &str, token: Option<&str>, body: &str) {
        let len = body.len().to_string();
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Content-Length", len.as_str()),
        ];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        self.head(method, path, &headers);
        self.write(body.as_bytes());
    }

    /// The next response (its body by `Content-Length`, which the server always sends for
    /// these routes); panics if none comes within the read timeout.
    fn answer(&mut self) -> Answer {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no response, got {line:?}"));
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).expect("header line");
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').expect("header");
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .expect("content-length");
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).expect("body");
        Answer {
            status,
            headers,
            body,
        }
    }

    /// Whether the server closed the connection within `within` (bytes before the close
    /// are skipped).
    fn closed_within(&mut self, within: Duration) -> bool {
        self.reader
            .get_mut()
            .set_read_timeout(Some(within))
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    /// Whether the server has sent something (or closed) within `wait`, without taking it.
    fn answered(&mut self, wait: Duration) -> bool {
        if !self.reader.buffer().is_empty() {
            return true;
        }
        let s = self.reader.get_mut();
        s.set_read_timeout(Some(wait)).unwrap();
        let r = s.peek(&mut [0u8; 1]);
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        !matches!(r, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }
}

const OJS_JSON: &str = "application/openjobspec+json";

/// A 408 in the binding's shape, and the connection closed after it.
fn assert_timed_out(raw: &mut Raw, started: Instant, timeout: Duration) {
    let a = raw.answer();
    let waited = started.elapsed();
    assert_eq!(a.status, 408, "{a:?}");
    assert_eq!(a.header("content-type"), Some(OJS_JSON));
    assert_eq!(a.header("connection"), Some("close"));
    assert_eq!(
        a.codes(),
        ("x_request_timeout".into(), "REQUEST_TIMEOUT".into())
    );
    let v = a.json();
    assert!(v["error"]["request_id"].is_string(), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--body-timeout-ms"),
        "{v}"
    );
    assert!(waited >= timeout, "answered after {waited:?}");
    assert!(waited < Duration::from_secs(4), "answered after {waited:?}");
    assert!(
        raw.closed_within(Duration::from_secs(3)),
        "the connection is closed after the 408"
    );
}

// ---------------------------------------------------------------------------------------
// D2: a body that never completes
// ---------------------------------------------------------------------------------------

/// Headers and 1 byte of a 100-byte body: before, the connection (and its slot) was held
/// forever; now it gets a 408 with the binding's error body at `--body-timeout-ms`, and
/// is closed.
#[test]
fn d2_an_unfinished_body_gets_408_and_the_connection_closes() {
    let srv = Server::start_with(&["--body-timeout-ms", "300"]);
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "100"),
        ],
    );
    let started = Instant::now();
    raw.write(b"{");
    assert_timed_out(&mut raw, started, Duration::from_millis(300));
    // The server still serves.
    assert_eq!(
        common::http::get(&srv.http_addr, "/ojs/v1/health").status,
        200
    );
}

/// An unfinished chunked body from a client with a valid token: the deadline holds past
/// the password check too.
#[test]
fn d2_an_unfinished_chunked_body_with_a_valid_token_gets_408() {
    let srv = Server::start_with(&["--body-timeout-ms", "300", "--password", "pw"]);
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
            ("Authorization", "Bearer pw"),
        ],
    );
    let started = Instant::now();
    raw.write(b"5\r\n{\"typ\r\n");
    assert_timed_out(&mut raw, started, Duration::from_millis(300));

    // A wrong token is answered at once, its body unread, and the connection ends too.
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Transfer-Encoding", "chunked"),
            ("Authorization", "Bearer wrong"),
        ],
    );
    raw.write(b"5\r\n{\"typ\r\n");
    assert_eq!(raw.answer().status, 401);
    assert!(raw.closed_within(Duration::from_secs(3)));
}

/// The deadline covers the whole body, not each read: a client that keeps sending a byte
/// every 200 ms (never idle for the timeout) is still answered 408 at the deadline.
#[test]
fn d2_a_body_dribbled_a_byte_at_a_time_still_meets_the_deadline() {
    let srv = Server::start_with(&["--body-timeout-ms", "1000"]);
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "100"),
        ],
    );
    let started = Instant::now();
    // A byte every 200 ms for up to 3.5 s, stopping as soon as the server answers (a
    // write after its close would reset the connection and lose the answer).
    while started.elapsed() < Duration::from_millis(3500) && !raw.answered(Duration::from_millis(1))
    {
        raw.write(b" ");
        if raw.answered(Duration::from_millis(200)) {
            break;
        }
    }
    assert_timed_out(&mut raw, started, Duration::from_millis(1000));
}

/// Slow-loris sockets hold their slots only until the body deadline: with two slots both
/// taken by unfinished bodies, a new client is served once the deadline has passed.
#[test]
fn d2_unfinished_bodies_give_their_slots_back() {
    let srv = Server::start_with(&["--body-timeout-ms", "300", "--max-connections", "2"]);
    let mut holders: Vec<Raw> = (0..2)
        .map(|_| {
            let mut raw = Raw::connect(&srv.http_addr);
            raw.head("POST", "/ojs/v1/jobs", &[("Content-Length", "100")]);
            raw.write(b"{");
            raw
        })
        .collect();
    for raw in &mut holders {
        assert!(raw.closed_within(Duration::from_secs(4)));
    }
    let r = wait_for(Duration::from_secs(3), "a free HTTP slot", || {
        let r = common::http::get(&srv.http_addr, "/ojs/v1/health");
        (r.status == 200).then_some(r)
    });
    assert_eq!(r.status, 200);
}

// ---------------------------------------------------------------------------------------
// D7: a body over the limit
// ---------------------------------------------------------------------------------------

/// A 413 in the binding's shape, and the connection closed after it.
fn assert_too_large(raw: &mut Raw, limit: usize) {
    let a = raw.answer();
    assert_eq!(a.status, 413, "{a:?}");
    assert_eq!(a.header("content-type"), Some(OJS_JSON));
    assert_eq!(a.header("connection"), Some("close"));
    assert_eq!(
        a.codes(),
        ("x_payload_too_large".into(), "PAYLOAD_TOO_LARGE".into())
    );
    let message = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(&limit.to_string()) && message.contains("--max-body-bytes"),
        "{message}"
    );
    assert!(raw.closed_within(Duration::from_secs(3)));
}

/// A job of `size` bytes of JSON, more or less.
fn job_of(size: usize) -> Value {
    json!({"type": "big.job", "args": ["x".repeat(size)], "options": {"queue": "big"}})
}

/// With the defaults (`--max-job-bytes` 1 MiB) the limit is 4 MiB: a 3 MiB batch of jobs
/// under the job limit is taken (axum's fixed 2 MiB refused it, in plain text), and a
/// declared 4 MiB + 1 gets the binding's 413 at once, before any of it is read.
#[test]
fn d7_the_default_body_limit_is_four_jobs_and_over_it_is_a_json_413() {
    let srv = Server::start();
    let limit = 4 * 1024 * 1024;
    let batch = json!({"jobs": (0..3).map(|_| job_of(1000 * 1000)).collect::<Vec<_>>()});
    let body = batch.to_string();
    assert!(body.len() > 3_000_000 && body.len() < limit);
    let r = common::http::send(&srv.http_addr, "POST", "/ojs/v1/jobs/batch", &body);
    assert_eq!(
        r.status,
        201,
        "{}",
        r.text().chars().take(300).collect::<String>()
    );
    assert_eq!(r.json()["count"], 3);

    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs/batch",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &(limit + 1).to_string()),
        ],
    );
    assert_too_large(&mut raw, limit);
}

/// The limit follows `--max-job-bytes` (4 times it), for a declared length and for a
/// chunked body that only turns out too long as it is read.
#[test]
fn d7_the_limit_follows_max_job_bytes_for_declared_and_chunked_bodies() {
    let srv = Server::start_with(&["--max-job-bytes", "1000"]);
    let limit = 4000;
    // Under the limit, several jobs under the job limit.
    let batch = json!({"jobs": (0..4).map(|_| job_of(700)).collect::<Vec<_>>()});
    let body = batch.to_string();
    assert!(body.len() > 3000 && body.len() < limit, "{}", body.len());
    let r = common::http::send(&srv.http_addr, "POST", "/ojs/v1/jobs/batch", &body);
    assert_eq!(r.status, 201, "{}", r.text());

    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &(limit + 1).to_string()),
        ],
    );
    assert_too_large(&mut raw, limit);

    // Chunked: 5 chunks of 1000 bytes, sent at once, with no last chunk.
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/jobs",
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    let chunk = format!("3e8\r\n{}\r\n", "x".repeat(1000));
    raw.write(chunk.repeat(5).as_bytes());
    assert_too_large(&mut raw, limit);
}

/// `--max-body-bytes` sets the limit itself, and is refused at startup below
/// `--max-job-bytes` (a job the server takes must fit in a request).
#[test]
fn d7_max_body_bytes_sets_the_limit_and_cannot_go_under_a_job() {
    let srv = Server::start_with(&["--max-job-bytes", "1000", "--max-body-bytes", "1500"]);
    let mut raw = Raw::connect(&srv.http_addr);
    raw.head(
        "POST",
        "/ojs/v1/workers/ack",
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    let chunk = format!("3e8\r\n{}\r\n", "x".repeat(1000));
    raw.write(chunk.repeat(2).as_bytes());
    assert_too_large(&mut raw, 1500);

    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(["--max-job-bytes", "2000", "--max-body-bytes", "1999"])
        .arg("--data-dir")
        .arg(dir.path().join("db"))
        .output()
        .expect("run ojsd");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-body-bytes") && stderr.contains("--max-job-bytes"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("db").exists(),
        "refused before the data dir"
    );
}

// ---------------------------------------------------------------------------------------
// D10: bearer-token guessing
// ---------------------------------------------------------------------------------------

/// A 429 in the binding's shape with `Retry-After`.
fn assert_throttled(a: &Answer) -> u64 {
    assert_eq!(a.status, 429, "{a:?}");
    assert_eq!(a.codes(), ("rate_limited".into(), "RATE_LIMITED".into()));
    assert_eq!(a.json()["error"]["retryable"], true);
    let secs: u64 = a
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("Retry-After in seconds: {a:?}"));
    assert!(secs >= 1, "{a:?}");
    secs
}

/// The error code of a refused TCP HELLO; `None` if it was accepted.
fn hello_error(addr: &str, opts: &ConnectOptions) -> Option<String> {
    match Client::connect_with(addr, opts) {
        Ok(_) => None,
        Err(e) => Some(e.code().map_or_else(|| format!("{e:?}"), str::to_string)),
    }
}

/// One keep-alive connection guessing tokens: the first `--max-auth-failures` get 401, then
/// every request from that address gets 429 without its token being looked at (the
/// correct one too, as the TCP HELLO does), while health stays open; the address is
/// refused on the TCP listener too (one limiter for both front ends).
#[test]
fn d10_wrong_tokens_are_throttled_per_address_across_both_listeners() {
    let srv = Server::start_with(&["--password", "pw", "--max-auth-failures", "3"]);
    let mut raw = Raw::connect(&srv.http_addr);
    let mut statuses = Vec::new();
    for i in 0..50 {
        raw.request("GET", "/ojs/v1/queues", Some(&format!("guess{i}")), "");
        let a = raw.answer();
        if a.status == 429 {
            assert_throttled(&a);
        }
        statuses.push(a.status);
    }
    assert_eq!(statuses[..3], [401, 401, 401], "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");

    raw.request("GET", "/ojs/v1/queues", Some("pw"), "");
    let secs = assert_throttled(&raw.answer());
    assert!(secs <= 60, "within the window: {secs}");
    // A request without credentials is not a guess, but it is refused the same way.
    raw.request("GET", "/ojs/v1/queues", None, "");
    assert_throttled(&raw.answer());
    raw.request("GET", "/ojs/v1/health", None, "");
    assert_eq!(raw.answer().status, 200);

    let opts = ConnectOptions {
        password: Some("pw".into()),
        ..Default::default()
    };
    assert_eq!(
        hello_error(&srv.addr, &opts).as_deref(),
        Some("RATE_LIMITED"),
        "the TCP HELLO is refused too"
    );
}

/// Guesses over TCP count against HTTP as well, and once the window has refilled a
/// correct token is accepted again; a correct token never counts as a failure.
#[test]
fn d10_the_allowance_is_shared_and_refills() {
    // 2 failures per 2 s: one comes back every second.
    let srv = Server::start_with(&[
        "--password",
        "pw",
        "--max-auth-failures",
        "2",
        "--auth-failure-window-ms",
        "2000",
    ]);
    let mut raw = Raw::connect(&srv.http_addr);
    for _ in 0..5 {
        raw.request("GET", "/ojs/v1/queues", Some("pw"), "");
        assert_eq!(raw.answer().status, 200);
    }
    let wrong = ConnectOptions {
        password: Some("nope".into()),
        ..Default::default()
    };
    for _ in 0..2 {
        assert_eq!(
            hello_error(&srv.addr, &wrong).as_deref(),
            Some("UNAUTHENTICATED")
        );
    }
    let failed = Instant::now();
    raw.request("GET", "/ojs/v1/queues", Some("pw"), "");
    let secs = assert_throttled(&raw.answer());
    assert!(secs <= 2, "{secs}");
    std::thread::sleep(Duration::from_millis(1100).saturating_sub(failed.elapsed()));
    raw.request("GET", "/ojs/v1/queues", Some("pw"), "");
    let a = raw.answer();
    assert_eq!(a.status, 200, "{a:?}");
}
