//! A small blocking HTTP/1.1 client over `std::net::TcpStream` for the HTTP front end:
//! plain requests (`Connection: close`, body read to the end, chunked or not) and an SSE
//! reader that parses messages as they arrive. Reads time out, so a missing event fails
//! the test instead of hanging it.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

/// The body of a chunked response, decoded as it is read.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if self.inner.read_line(&mut line)? == 0 {
                // The server closed without a last chunk (it was stopped): end of body.
                self.done = true;
                return Ok(0);
            }
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(size, 16).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("chunk {line:?}"))
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// Send a request and read the status line and headers; the body reader is what is left.
fn open(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Box<dyn BufRead + Send>) {
    open_with_body(addr, method, path, headers, b"")
}

/// `open` with a request body (its `Content-Length` is added when it is not empty).
fn open_with_body(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Box<dyn BufRead + Send>) {
    let mut s = TcpStream::connect(addr).expect("connect http");
    s.set_read_timeout(Some(HTTP_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes).expect("send request");
    let mut r = BufReader::new(s);
    let mut status_line = String::new();
    r.read_line(&mut status_line).expect("status line");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut hs = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').expect("header");
        hs.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let find = |n: &str| hs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let body: Box<dyn BufRead + Send> =
        if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            Box::new(BufReader::new(Chunked {
                inner: r,
                left: 0,
                done: false,
            }))
        } else if let Some(n) = find("content-length").and_then(|v| v.parse::<u64>().ok()) {
            Box::new(BufReader::new(r.take(n)))
        } else {
            Box::new(r)
        };
    (status, hs, body)
}

pub fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let (status, headers, mut body) = open(addr, method, path, headers);
    let mut buf = Vec::new();
    body.read_to_end(&mut buf).expect("read body");
    Response {
        status,
        headers,
        body: buf,
    }
}

/// A request with a JSON body, read to the end (an empty body sends `Content-Length: 0`).
pub fn send(addr: &str, method: &str, path: &str, body: &str) -> Response {
    send_with(addr, None, method, path, body)
}

/// `send` with `Authorization: Bearer <token>`.
pub fn send_as(addr: &str, token: &str, method: &str, path: &str, body: &str) -> Response {
    send_with(addr, Some(token), method, path, body)
}

fn send_with(addr: &str, token: Option<&str>, method: &str, path: &str, body: &str) -> Response {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    if body.is_empty() {
        headers.push(("Content-Length", "0"));
    }
    let (status, headers, mut reader) =
        open_with_body(addr, method, path, &headers, body.as_bytes());
    let mut buf = Vec::new();
    reader.read_to_end(&mut buf).expect("read body");
    Response {
        status,
        headers,
        body: buf,
    }
}

pub fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path, &[])
}

/// One SSE message: `id:`, `event:` and the `data:` lines joined with newlines.
#[derive(Debug, Clone, Default)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseMessage {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {}", self.data))
    }
}

/// What the stream sent next: a message, or a comment line (`: keepalive`).
#[derive(Debug, Clone)]
pub enum SseItem {
    Message(SseMessage),
    Comment(String),
}

pub struct Sse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: Box<dyn BufRead + Send>,
}

impl Sse {
    /// Open a stream. The server sends a comment as soon as the subscription is in place,
    /// and it is read here: once `connect` returns, every later event will arrive.
    pub fn connect(addr: &str, path: &str, headers: &[(&str, &str)]) -> Sse {
        let mut h = vec![("Accept", "text/event-stream")];
        h.extend_from_slice(headers);
        let (status, headers, body) = open(addr, "GET", path, &h);
        let mut sse = Sse {
            status,
            headers,
            body,
        };
        if status == 200 {
            match sse.next_item() {
                Some(SseItem::Comment(_)) => {}
                other => panic!("expected the opening comment, got {other:?}"),
            }
        }
        sse
    }

    /// The body of a stream that was refused (status other than 200), as JSON.
    pub fn error_body(mut self) -> Value {
        let mut buf = Vec::new();
        self.body.read_to_end(&mut buf).expect("read error body");
        serde_json::from_slice(&buf).expect("error body JSON")
    }

    /// The next message or comment; `None` when the stream ended.
    pub fn next_item(&mut self) -> Option<SseItem> {
        let mut msg = SseMessage::default();
        let mut has_data = false;
        loop {
            let mut line = String::new();
            let n = match self.body.read_line(&mut line) {
                Ok(n) => n,
                // The server went away mid-chunk.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    0
                }
                Err(e) => panic!("SSE read failed (timed out?): {e}"),
            };
            if n == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if has_data || msg.event.is_some() || msg.id.is_some() {
                    return Some(SseItem::Message(msg));
                }
                continue;
            }
            if let Some(c) = line.strip_prefix(':') {
                if !has_data && msg.id.is_none() && msg.event.is_none() {
                    // A comment is followed by a blank line here; consume it.
                    return Some(SseItem::Comment(c.trim().to_string()));
                }
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "id" => msg.id = Some(value.to_string()),
                "event" => msg.event = Some(value.to_string()),
                "data" => {
                    if has_data {
                        msg.data.push('\n');
                    }
                    msg.data.push_str(value);
                    has_data = true;
                }
                _ => {}
            }
        }
    }

    /// The next message, skipping comments; panics if the stream ends.
    pub fn next_message(&mut self) -> SseMessage {
        loop {
            match self.next_item() {
                Some(SseItem::Message(m)) => return m,
                Some(SseItem::Comment(_)) => continue,
                None => panic!("the SSE stream ended"),
            }
        }
    }

    /// The next event: its SSE message and envelope, checking that `id:` is the cursor
    /// and `event:` the type.
    pub fn next_event(&mut self) -> (SseMessage, Value) {
        let m = self.next_message();
        let v = m.json();
        assert_eq!(
            m.id.as_deref(),
            Some(v["cursor"].to_string().as_str()),
            "id: is the cursor"
        );
        assert_eq!(m.event.as_deref(), v["type"].as_str(), "event: is the type");
        (m, v)
    }
}
