//! What one client, or a crowd of them, can hold on the TCP listener: reply bytes it does
//! not read (`--max-pending-reply-bytes`), slots (`--max-connections`, the handshake pool),
//! time (`--hello-timeout-ms`, `--idle-timeout-ms`) and password guesses
//! (`--max-auth-failures`). Every test runs a real server over real sockets.

mod common;

use common::*;
use ojs_client::{password_hash, Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A socket that has read the greeting and nothing else.
struct Raw {
    reader: BufReader<TcpStream>,
    greeting: Value,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reader = BufReader::new(s);
        let greeting = match ojs_client::wire::read_reply(&mut reader).expect("greeting") {
            Reply::Simple(s) => serde_json::from_str(s.trim_start_matches("HI ")).unwrap(),
            other => panic!("expected +HI, got {other:?}"),
        };
        Raw { reader, greeting }
    }

    fn send(&mut self, line: &str) {
        let s = self.reader.get_mut();
        s.write_all(line.as_bytes()).unwrap();
        s.write_all(b"\r\n").unwrap();
    }

    fn reply(&mut self) -> Reply {
        ojs_client::wire::read_reply(&mut self.reader).expect("reply")
    }

    fn call(&mut self, line: &str) -> Reply {
        self.send(line);
        self.reply()
    }

    /// HELLO with the proof for `password` (if the server asked for one).
    fn hello(&mut self, password: Option<&str>) -> Reply {
        let mut hello = json!({"v": 2});
        if let (Some(pw), Some(salt)) = (password, self.greeting["s"].as_str()) {
            let i = self.greeting["i"].as_u64().unwrap();
            hello["pwdhash"] = password_hash(pw, salt, i).into();
        }
        self.call(&format!("HELLO {hello}"))
    }

    /// Wait for the server to close: how long it took, or `None` if it did not within
    /// `within`. Replies that arrive before the close are skipped.
    fn closed_within(&mut self, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        self.reader
            .get_mut()
            .set_read_timeout(Some(within))
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(_) => return Some(start.elapsed()), // reset: closed too
            }
        }
    }
}

fn error_code(r: &Reply) -> &str {
    match r {
        Reply::Error { code, .. } => code,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// Resident memory of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

// ---------------------------------------------------------------------------------------
// D3: replies a client does not read
// ---------------------------------------------------------------------------------------

/// Clients that pipeline `JOB <id>` for ~1 MiB jobs and never read: before the byte budget
/// each pinned 256 replies (~250 MiB); now each owes at most a few MiB and the server stops
/// reading it. The server keeps serving others, and a stuck client's replies are intact.
#[test]
fn clients_that_do_not_read_cannot_pin_memory() {
    const CLIENTS: usize = 4;
    const LINES: usize = 3000;
    let server = Server::start();
    let mut c = server.client();
    let big = "x".repeat(1_000_000);
    let ids: Vec<String> = (0..4)
        .map(|_| push_id(&mut c, &json!({"type": "big.job", "args": [big]})))
        .collect();
    // Read each once, so caches are as warm as they will get before measuring.
    for id in &ids {
        c.job(id).expect("JOB");
    }
    let before = rss_kib(server.pid());

    let mut stuck = Vec::new();
    for _ in 0..CLIENTS {
        let mut raw = Raw::connect(&server.addr);
        assert!(matches!(raw.hello(None), Reply::Simple(_)));
        let mut lines = String::new();
        for i in 0..LINES {
            lines.push_str(&format!("JOB {}\r\n", ids[i % ids.len()]));
        }
        // Write what the socket takes; never read.
        let s = raw.reader.get_mut();
        s.set_nonblocking(true).unwrap();
        let mut rest = lines.as_bytes();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !rest.is_empty() && Instant::now() < deadline {
            match s.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("write: {e}"),
            }
        }
        s.set_nonblocking(false).unwrap();
        stuck.push(raw);
    }

    // Watch the server's memory until it has done all it will do for them. The engine
    // answers commands in arrival order, so once a later INFO is answered every JOB the
    // server took from those sockets has its reply built: no guessing how long that takes.
    let mut control = server.client();
    let mut peak = before;
    let mut last = 0;
    for round in 0..30 {
        control.info().expect("INFO");
        std::thread::sleep(Duration::from_millis(200));
        let now = rss_kib(server.pid());
        peak = peak.max(now);
        if round >= 2 && now <= last + 2048 {
            break; // steady: nothing more is being taken in
        }
        last = now;
    }
    let grew_mib = peak.saturating_sub(before) / 1024;
    eprintln!("RSS before {} MiB, peak {} MiB", before / 1024, peak / 1024);
    // Without the bound: ~CLIENTS * 256 MiB. With it: a few MiB per client.
    assert!(
        grew_mib < 150,
        "{CLIENTS} non-reading clients grew the server by {grew_mib} MiB"
    );

    // Another client is served as usual.
    let mut other = server.client();
    let id = push_id(&mut other, &json!({"type": "small.job", "args": [1]}));
    assert_eq!(state_of(&mut other, &id), "available");

    // A stuck client that starts reading gets its replies, in order and whole.
    let raw = &mut stuck[0];
    raw.reader
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..8 {
        match raw.reply() {
            Reply::Bulk(b) => {
                let job: Value = serde_json::from_slice(&b).expect("job JSON");
                assert_eq!(job["id"], ids[i % ids.len()].as_str());
                assert_eq!(job["args"][0].as_str().map(str::len), Some(1_000_000));
            }
            other => panic!("JOB reply {i}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// D6: connection cap, HELLO deadline, idle timeout
// ---------------------------------------------------------------------------------------

/// Thousands of sockets that never say HELLO, against a server that has only 1,024 file
/// descriptors: without a cap they take every descriptor and nobody else gets in. With the
/// cap and the handshake pool, the oldest silent sockets are dropped for newcomers, and a
/// client with the password connects and works while the flood is still open.
#[test]
fn a_flood_of_silent_sockets_leaves_an_authenticated_client_served() {
    const FLOOD: usize = 3000;
    let server = Server::start_with_fd_limit(
        1024,
        &[
            "--password",
            "secret",
            "--max-connections",
            "600",
            "--max-handshaking",
            "100",
        ],
    );
    let mut flood = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        match TcpStream::connect(&server.addr) {
            Ok(s) => flood.push(s),
            // The listen backlog may overflow while the server is busy: that is fine.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert!(flood.len() > FLOOD / 2, "only {} connected", flood.len());

    let opts = ConnectOptions {
        wid: Some("w1".into()),
        password: Some("secret".into()),
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let mut w = Client::connect_with(&server.addr, &opts).expect("authenticated client");
    let id = push_id(&mut w, &test_job("flood", json!({})));
    let job = fetch_one(&mut w, "flood");
    assert_eq!(id_of(&job), id);
    w.ack(&id, None).expect("ACK");
    assert_eq!(state_of(&mut w, &id), "completed");

    // The oldest silent socket was dropped to make room, with a reason.
    let first = flood.remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut text = String::new();
    let _ = BufReader::new(first).read_to_string(&mut text);
    assert!(text.starts_with("+HI "), "{text:?}");
    assert!(text.contains("-ERR TOO_MANY_CONNECTIONS"), "{text:?}");
}

/// Established connections fill `--max-connections`; the next one is told so and closed,
/// and a slot freed is a slot available again.
#[test]
fn connections_past_the_cap_are_refused_with_an_error() {
    let server = Server::start_with(&["--max-connections", "3", "--max-handshaking", "3"]);
    let mut held: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let s = TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut text = String::new();
    let _ = BufReader::new(s).read_to_string(&mut text);
    assert!(text.starts_with("-ERR TOO_MANY_CONNECTIONS "), "{text:?}");
    held.pop().unwrap().end().unwrap();
    wait_for(Duration::from_secs(5), "a free slot", || {
        Client::connect(&server.addr).ok()
    });
    assert!(held[0].info().is_ok());
}

/// A socket that never sends HELLO, or sends anything but HELLO, is closed at the deadline.
/// (1.5 s leaves a debug build's client ample time for its 5,000-10,000 SHA-256 rounds.)
#[test]
fn no_hello_before_the_deadline_closes_the_connection() {
    let server = Server::start_with(&["--password", "pw", "--hello-timeout-ms", "1500"]);
    let start = Instant::now();
    let mut silent = Raw::connect(&server.addr);
    let mut chatty = Raw::connect(&server.addr);
    assert_eq!(error_code(&chatty.call("INFO")), "HELLO_REQUIRED");
    let writer = std::thread::spawn({
        let mut s = chatty.reader.get_ref().try_clone().unwrap();
        move || {
            // Slowloris: a line every 50 ms for up to 5 s, never HELLO.
            for _ in 0..100 {
                if s.write_all(b"INFO\r\n").is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        }
    });
    let took = silent
        .closed_within(Duration::from_secs(5))
        .expect("a silent connection is closed after --hello-timeout-ms");
    assert!(start.elapsed() >= Duration::from_millis(1500), "{took:?}");
    assert!(chatty.closed_within(Duration::from_secs(5)).is_some());
    assert!(writer.join().unwrap(), "writes fail once the server closed");
    // Others still get in.
    let opts = ConnectOptions {
        password: Some("pw".into()),
        ..Default::default()
    };
    assert!(Client::connect_with(&server.addr, &opts).is_ok());
}

/// A producer connection that says nothing is closed after `--idle-timeout-ms`; a worker
/// connection, a FETCH blocked longer than that, and an event stream are not idle.
#[test]
fn idle_connections_without_a_worker_id_are_closed() {
    let server = Server::start_with(&["--idle-timeout-ms", "400", "--fetch-wait-ms", "1200"]);
    let start = Instant::now();
    let mut producer = Raw::connect(&server.addr);
    assert!(matches!(producer.hello(None), Reply::Simple(_)));
    let mut worker = server.worker("w-idle");
    let mut fetcher = Raw::connect(&server.addr);
    assert!(matches!(fetcher.hello(None), Reply::Simple(_)));
    let mut stream = Raw::connect(&server.addr);
    assert!(matches!(stream.hello(None), Reply::Simple(_)));
    assert!(matches!(
        stream.call(r#"SUBSCRIBE {"event_types": ["job.enqueued"]}"#),
        Reply::Simple(_)
    ));

    // A FETCH on an empty queue waits 1.2 s: three idle periods, yet not idle.
    fetcher.send("FETCH empty-queue");
    assert_eq!(fetcher.reply(), Reply::Null);
    assert!(matches!(fetcher.call("INFO"), Reply::Bulk(_)));

    producer
        .closed_within(Duration::from_secs(5))
        .expect("an idle producer connection is closed");
    assert!(start.elapsed() >= Duration::from_millis(400));

    // Quiet for more than the idle timeout, all three still work.
    std::thread::sleep(Duration::from_millis(600));
    assert!(worker.info().is_ok(), "a worker connection is never idle");
    let mut c = server.client();
    let id = push_id(&mut c, &test_job("idle", json!({})));
    match stream.reply() {
        Reply::Bulk(b) => {
            let ev: Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(ev["type"], "job.enqueued");
            assert_eq!(ev["subject"], id.as_str());
        }
        other => panic!("event stream: {other:?}"),
    }
}

/// Idle time counts from the last thing that happened on the connection, a reply written
/// included: a client that pauses (less than the idle timeout) after a long FETCH's reply
/// is not cut off because the FETCH itself took longer than the idle timeout.
#[test]
fn idle_time_counts_from_the_last_reply() {
    let server = Server::start_with(&["--idle-timeout-ms", "1000", "--fetch-wait-ms", "1500"]);
    let mut c = Raw::connect(&server.addr);
    assert!(matches!(c.hello(None), Reply::Simple(_)));
    c.send("FETCH nothing-here");
    assert_eq!(c.reply(), Reply::Null);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        matches!(c.call("INFO"), Reply::Bulk(_)),
        "closed 0.7 s after its last reply"
    );
}

// ---------------------------------------------------------------------------------------
// D7: password guessing
// ---------------------------------------------------------------------------------------

/// After `--max-auth-failures` wrong passwords from one address, its HELLOs are refused
/// with RATE_LIMITED before the password is even checked (a correct one too), until the
/// allowance refills.
#[test]
fn wrong_passwords_are_throttled_per_address() {
    // 3 failures per 6 s: one comes back every 2 s.
    let server = Server::start_with(&[
        "--password",
        "secret",
        "--max-auth-failures",
        "3",
        "--auth-failure-window-ms",
        "6000",
    ]);
    // Greeted in advance, so the HELLOs below go out back to back.
    let mut conns: Vec<Raw> = (0..5).map(|_| Raw::connect(&server.addr)).collect();
    for raw in &mut conns[..3] {
        assert_eq!(error_code(&raw.hello(Some("guess"))), "UNAUTHENTICATED");
    }
    let last_failure = Instant::now();
    // Sent before either is answered (a refusal is delayed by a second).
    let (wrong, right) = conns[3..].split_at_mut(1);
    let (wrong, right) = (&mut wrong[0], &mut right[0]);
    let wrong_hello = {
        let (s, i) = (
            wrong.greeting["s"].as_str().unwrap(),
            wrong.greeting["i"].as_u64().unwrap(),
        );
        json!({"v": 2, "pwdhash": password_hash("guess", s, i)})
    };
    let right_hello = {
        let (s, i) = (
            right.greeting["s"].as_str().unwrap(),
            right.greeting["i"].as_u64().unwrap(),
        );
        json!({"v": 2, "pwdhash": password_hash("secret", s, i)})
    };
    wrong.send(&format!("HELLO {wrong_hello}"));
    right.send(&format!("HELLO {right_hello}"));
    let r = wrong.reply();
    assert_eq!(error_code(&r), "RATE_LIMITED", "{r:?}");
    let r = right.reply();
    assert_eq!(
        error_code(&r),
        "RATE_LIMITED",
        "refused before checking: {r:?}"
    );
    assert!(wrong.closed_within(Duration::from_secs(5)).is_some());

    // One failure's allowance is back 2 s after the last failure.
    let back = Duration::from_millis(2200);
    std::thread::sleep(back.saturating_sub(last_failure.elapsed()));
    let opts = ConnectOptions {
        password: Some("secret".into()),
        ..Default::default()
    };
    let mut c =
        Client::connect_with(&server.addr, &opts).expect("correct password after the window");
    assert!(c.info().is_ok());
}

/// Without a password nothing is hashed or throttled, and the HELLO of a password server
/// still accepts a correct hash from a fresh address right away.
#[test]
fn correct_passwords_are_not_throttled() {
    let server = Server::start_with(&["--password", "secret", "--max-auth-failures", "2"]);
    let opts = ConnectOptions {
        password: Some("secret".into()),
        ..Default::default()
    };
    for _ in 0..10 {
        let mut c = Client::connect_with(&server.addr, &opts).expect("connect");
        assert!(c.info().is_ok());
    }
}

// ---------------------------------------------------------------------------------------
// The HTTP listener: its own cap, and a deadline on request headers
// ---------------------------------------------------------------------------------------

/// HTTP connections past `--max-connections` get a 503 and are closed; a connection that
/// sends no request (or half a header) is closed at `--hello-timeout-ms`, freeing its slot.
#[test]
fn http_connections_are_capped_and_slow_ones_closed() {
    let server = Server::start_with(&["--max-connections", "2", "--hello-timeout-ms", "800"]);
    let start = Instant::now();
    let silent = TcpStream::connect(&server.http_addr).unwrap();
    let mut slow = TcpStream::connect(&server.http_addr).unwrap();
    slow.write_all(b"GET /ojs/v1/health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut third = TcpStream::connect(&server.http_addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut text = String::new();
    let _ = third.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("TOO_MANY_CONNECTIONS"), "{text}");
    for mut s in [silent, slow] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    assert!(start.elapsed() >= Duration::from_millis(800));
    assert!(
        start.elapsed() < Duration::from_secs(9),
        "closed at the header deadline"
    );
    // Their slots are free again.
    let r = wait_for(Duration::from_secs(5), "a free HTTP slot", || {
        let r = common::http::get(&server.http_addr, "/ojs/v1/health");
        (r.status == 200).then_some(r)
    });
    assert_eq!(r.status, 200);
}
