//! The memory held for event subscribers is bounded (issue 19, D1): subscribers of every
//! transport that never read their sockets cannot grow the server past
//! `--max-subscriber-bytes-total`, and a subscriber that reads is still served every
//! event, in order, while they sit there.

mod common;

use common::http::{self, Sse};
use common::Server;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Long names make every event large, so that a few thousand fill what the kernel buffers
/// for a socket and the server really holds what a reader does not take.
fn job_type() -> String {
    format!("flood.{}", "t".repeat(240))
}
fn queue() -> String {
    format!("flood.{}", "q".repeat(110))
}

/// A socket whose receive buffer is small, so that the kernel holds little of what the
/// server sends to a reader that stops.
fn small_socket(addr: &str) -> TcpStream {
    let addr: SocketAddr = addr.parse().unwrap();
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&addr.into()).unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(http::HTTP_TIMEOUT)).unwrap();
    s
}

/// A TCP `SUBSCRIBE` stream to every event after `after`, on a small socket.
fn tcp_subscriber(srv: &Server, after: u64) -> BufReader<TcpStream> {
    let s = small_socket(&srv.addr);
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("+HI"), "{line}");
    let w = r.get_mut();
    w.write_all(b"HELLO {\"v\":2}\r\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    let w = r.get_mut();
    w.write_all(format!("SUBSCRIBE {{\"after\":{after}}}\r\n").as_bytes())
        .unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    r
}

/// The next event of a TCP `SUBSCRIBE` stream (a RESP bulk string).
fn tcp_event(r: &mut BufReader<TcpStream>) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).expect("bulk header");
    let n: usize = line
        .trim_end()
        .strip_prefix('$')
        .unwrap_or_else(|| panic!("not a bulk string: {line:?}"))
        .parse()
        .unwrap();
    let mut body = vec![0; n + 2];
    r.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body[..n]).unwrap()
}

/// An SSE stream to every event, on a small socket; its headers are not even read.
fn stalled_sse(srv: &Server) -> TcpStream {
    let mut s = small_socket(&srv.http_addr);
    write!(
        s,
        "GET /ojs/v1/events/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    s
}

fn push_jobs(c: &mut ojs_client::Client, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let jobs: Vec<Value> = (0..500.min(n - ids.len()))
            .map(|i| json!({"type": job_type(), "queue": queue(), "args": [ids.len() + i]}))
            .collect();
        match c
            .call(&format!("PUSHB {}", Value::Array(jobs)))
            .expect("PUSHB")
        {
            ojs_client::Reply::Bulk(b) => {
                let v: Value = serde_json::from_slice(&b).unwrap();
                for j in v.as_array().expect("jobs") {
                    ids.push(j["id"].as_str().unwrap().to_string());
                }
            }
            other => panic!("PUSHB: {other:?}"),
        }
    }
    ids
}

fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmRSS")
        / 1024
}

fn metric(addr: &str, name: &str) -> u64 {
    let text = http::get(addr, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

/// A WebSocket with `n` subscriptions to every event; the acknowledgements are read, then
/// nothing more.
fn stalled_ws(srv: &Server, n: usize) -> tungstenite::WebSocket<TcpStream> {
    let tcp = TcpStream::connect(&srv.http_addr).expect("connect ws");
    tcp.set_read_timeout(Some(http::HTTP_TIMEOUT)).unwrap();
    let url = format!("ws://{}/ojs/v1/ws", srv.http_addr);
    let (mut ws, _) = tungstenite::client(url.as_str(), tcp).expect("ws handshake");
    for _ in 0..n {
        let sub = json!({"action": "subscribe", "channel": "events", "filter": {}});
        ws.send(tungstenite::Message::Text(sub.to_string().into()))
            .unwrap();
    }
    let mut acks = 0;
    while acks < n {
        if let tungstenite::Message::Text(t) = ws.read().expect("ws ack") {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["action"] == "subscribed" {
                acks += 1;
            }
        }
    }
    ws
}

#[test]
fn never_reading_subscribers_stay_within_the_total_bound_and_a_reader_gets_every_event() {
    // Half of what the stalled connections below can hold at their own bound (122
    // connections, the WebSocket subscriptions of a socket sharing its buffer, x 64 KiB
    // = 7.6 MiB): the kernel's socket buffers take a varying share of each stream (up
    // to 4 MiB here), and at 8 MiB the stalled ones held 6.3-6.9 MiB in some runs, so
    // the total was never reached.
    const TOTAL: u64 = 4 << 20;
    let srv = Server::start_with(&[
        "--max-subscriber-bytes",
        "65536",
        "--max-subscriber-bytes-total",
        &TOTAL.to_string(),
    ]);
    let mut c = srv.client();
    let before = rss_mib(srv.pid());
    const JOBS: usize = 12_000;

    // 60 TCP SUBSCRIBE streams, 60 SSE streams and 2 sockets of 30 WebSocket
    // subscriptions, all to every event, none of which reads again.
    let stalled_tcp: Vec<_> = (0..60).map(|_| tcp_subscriber(&srv, 0)).collect();
    let stalled_sse: Vec<_> = (0..60).map(|_| stalled_sse(&srv)).collect();
    let stalled_ws: Vec<_> = (0..2).map(|_| stalled_ws(&srv, 30)).collect();

    // One subscriber that reads, on its own thread.
    let http_addr = srv.http_addr.clone();
    let reader = std::thread::spawn(move || {
        let mut sse = Sse::connect(
            &http_addr,
            &format!(
                "/ojs/v1/events/stream?queues={}&types=job.enqueued",
                queue()
            ),
            &[],
        );
        let mut seen = HashSet::new();
        let mut last_cursor = 0u64;
        while seen.len() < JOBS {
            let (_, e) = sse.next_event();
            let cursor = e["cursor"].as_u64().expect("cursor");
            assert!(cursor > last_cursor, "in cursor order, no repeat");
            last_cursor = cursor;
            assert_eq!(e["type"], "job.enqueued", "{e}");
            assert!(seen.insert(e["data"]["job_id"].as_str().unwrap().to_string()));
        }
        seen.len()
    });

    let started = Instant::now();
    push_jobs(&mut c, JOBS);
    let got = reader.join().expect("the reading subscriber");
    assert_eq!(got, JOBS);
    eprintln!("{JOBS} jobs pushed and read in {:?}", started.elapsed());

    let held = metric(&srv.http_addr, "ojsd_subscriber_buffer_bytes");
    let emptied = metric(&srv.http_addr, "ojsd_subscriber_buffers_emptied_total");
    let grown = rss_mib(srv.pid()).saturating_sub(before);
    eprintln!("held {held} bytes, {emptied} buffers emptied, RSS grew {grown} MiB");
    assert!(held <= TOTAL, "held {held} > {TOTAL}");
    assert!(emptied > 0, "stalled subscribers' buffers were emptied");
    // Without the bound (before issue 19), 360 such subscribers grew the server by 845
    // MiB here; with it, 105 MiB: what remains is the transports' own per-connection
    // buffers, the jobs, and the allocator's slack.
    assert!(grown < 150, "RSS grew {grown} MiB");
    drop((stalled_tcp, stalled_sse, stalled_ws));
}

#[test]
fn a_stalled_subscriber_that_reads_again_resumes_without_a_gap() {
    // The total is one subscriber's bound: while the first subscriber does not read, it
    // holds everything, so the second can only be served by emptying its buffer. When the
    // first reads again it gets every event, from the log, once and in order.
    let srv = Server::start_with(&[
        "--max-subscriber-bytes",
        "1048576",
        "--max-subscriber-bytes-total",
        "1048576",
    ]);
    let mut c = srv.client();
    let mut slow = tcp_subscriber(&srv, 0);
    // More than the kernel buffers for the socket (up to 4 MiB here), in batches small
    // enough for the live feed to keep up until the socket is full.
    let mut ids = Vec::new();
    for _ in 0..80 {
        ids.extend(push_jobs(&mut c, 100));
    }
    std::thread::sleep(Duration::from_millis(600));
    let mut other = tcp_subscriber(&srv, 0);
    for _ in 0..200 {
        assert_eq!(tcp_event(&mut other)["type"], "job.enqueued");
    }
    assert!(metric(&srv.http_addr, "ojsd_subscriber_buffers_emptied_total") > 0);
    ids.extend(push_jobs(&mut c, 1000));
    let mut got = Vec::new();
    while got.len() < ids.len() {
        let e = tcp_event(&mut slow);
        if e["type"] == "job.enqueued" {
            got.push(e["data"]["job_id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(got, ids, "every event once, in order");
}
