//! The wire protocol: handshake, authentication, every command family, malformed input,
//! pipelining and size limits.

mod common;

use common::*;
use ojs_client::{password_hash, wire, Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A bare socket, for bytes the client library refuses to send.
struct Raw {
    reader: BufReader<TcpStream>,
    stream: TcpStream,
}

impl Raw {
    /// Connect and return the greeting line's text.
    fn connect(addr: &str) -> (Raw, String) {
        let stream = TcpStream::connect(addr).expect("connect");
        let timeout = Some(Duration::from_secs(5));
        stream.set_read_timeout(timeout).expect("timeout");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut raw = Raw { reader, stream };
        match raw.reply() {
            Reply::Simple(hi) => (raw, hi),
            other => panic!("expected a +HI greeting, got {other:?}"),
        }
    }

    /// Connected and past HELLO.
    fn ready(addr: &str) -> Raw {
        let (mut raw, _) = Raw::connect(addr);
        assert_eq!(raw.line(r#"HELLO {"v":2,"hostname":"raw","pid":1}"#), ok());
        raw
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn reply(&mut self) -> Reply {
        wire::read_reply(&mut self.reader).expect("a reply")
    }

    fn line(&mut self, line: &str) -> Reply {
        self.bytes(line.as_bytes())
    }

    /// Send `bytes` plus CRLF and read one reply.
    fn bytes(&mut self, bytes: &[u8]) -> Reply {
        self.send(&[bytes, &b"\r\n"[..]].concat());
        self.reply()
    }

    fn code(&mut self, bytes: &[u8]) -> String {
        match self.bytes(bytes) {
            Reply::Error { code, .. } => code,
            other => panic!("{:?}: expected an error, got {other:?}", show(bytes)),
        }
    }

    fn is_bulk(&mut self, line: &str) -> bool {
        matches!(self.line(line), Reply::Bulk(_))
    }

    /// True once the server has closed the connection (EOF or reset).
    fn closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        match self.reader.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        }
    }
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(80)]).into_owned()
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn json_of(r: Reply) -> Value {
    match r {
        Reply::Bulk(b) => serde_json::from_slice(&b).expect("bulk reply is JSON"),
        other => panic!("expected a bulk reply, got {other:?}"),
    }
}

/// Every line must fail with `code`.
fn all_fail(c: &mut Client, code: &str, lines: &[&str]) {
    for line in lines {
        assert_eq!(err_code(c, line), code, "{line}");
    }
}

#[test]
fn greeting_then_hello_is_required() {
    let srv = Server::start();
    let (mut raw, hi) = Raw::connect(&srv.addr);
    assert_eq!(hi, r#"HI {"v":2}"#);
    for line in ["INFO", r#"PUSH {"type":"a","args":[]}"#, "FETCH q", "JOB x"] {
        assert_eq!(raw.code(line.as_bytes()), "HELLO_REQUIRED", "{line}");
    }
    assert_eq!(raw.code(b"NONSENSE"), "UNKNOWN_COMMAND");
    assert_eq!(raw.code(b"HELLO [1]"), "MALFORMED_COMMAND");
    // Without a password configured, a pwdhash is simply ignored.
    assert_eq!(raw.line(r#"HELLO {"v":2,"pwdhash":"00"}"#), ok());
    assert!(raw.is_bulk("INFO"));
    assert_eq!(
        raw.code(br#"HELLO {"v":2}"#),
        "MALFORMED_COMMAND",
        "HELLO twice"
    );
    assert!(raw.is_bulk("info"), "verbs are case-insensitive");
}

#[test]
fn password_is_checked_with_the_faktory_scheme() {
    let srv = Server::start_with(&["--password", "secret"]);
    let (mut raw, hi) = Raw::connect(&srv.addr);
    let g: Value = serde_json::from_str(hi.strip_prefix("HI ").expect("HI")).expect("JSON");
    let salt = g["s"].as_str().expect("a salt").to_string();
    let iterations = g["i"].as_u64().expect("iterations");
    assert!(g["v"] == 2 && !salt.is_empty() && iterations >= 1, "{g}");
    assert_eq!(raw.code(b"INFO"), "HELLO_REQUIRED");
    let hash = password_hash("secret", &salt, iterations);
    assert_eq!(
        raw.line(&format!(r#"HELLO {{"v":2,"pwdhash":"{hash}"}}"#)),
        ok()
    );
    assert!(raw.is_bulk("INFO"));

    let wrong = password_hash("wrong", &salt, iterations);
    for pwdhash in [
        r#","pwdhash":"0000""#,
        "",
        format!(r#","pwdhash":"{wrong}""#).as_str(),
    ] {
        let (mut bad, _) = Raw::connect(&srv.addr);
        let hello = format!(r#"HELLO {{"v":2{pwdhash}}}"#);
        assert_eq!(bad.code(hello.as_bytes()), "UNAUTHENTICATED", "{hello}");
        assert!(bad.closed(), "the socket closes after a failed HELLO");
    }

    let opts = |p: Option<&str>| ConnectOptions {
        password: p.map(str::to_string),
        ..Default::default()
    };
    let mut c = Client::connect_with(&srv.addr, &opts(Some("secret"))).expect("right password");
    push_id(&mut c, &json!({"type": "auth.job", "args": []}));
    match Client::connect_with(&srv.addr, &opts(Some("wrong"))) {
        Err(e) => assert_eq!(e.code(), Some("UNAUTHENTICATED"), "{e}"),
        Ok(_) => panic!("a wrong password was accepted"),
    }
    assert!(Client::connect_with(&srv.addr, &opts(None)).is_err());
}

#[test]
fn end_closes_the_connection() {
    let srv = Server::start();
    let (mut early, _) = Raw::connect(&srv.addr);
    early.send(b"END\r\n");
    assert!(early.closed(), "END before HELLO");

    let mut raw = Raw::ready(&srv.addr);
    raw.send(b"INFO\r\nEND\r\nINFO\r\n");
    assert!(
        matches!(raw.reply(), Reply::Bulk(_)),
        "replies before END are sent"
    );
    assert!(raw.closed(), "nothing is answered after END");

    srv.client().end().expect("END from the client");
}

#[test]
fn push_and_pushb_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let j = call_json(&mut c, r#"PUSH {"type":"email.send","args":["a@b.c"]}"#);
    let id = id_of(&j);
    assert_eq!((id.len(), &id[14..15]), (36, "7"), "a UUIDv7: {id}");
    let fields = [
        "specversion",
        "queue",
        "state",
        "attempt",
        "priority",
        "args",
    ];
    let want = json!(["1.0", "default", "available", 0, 0, ["a@b.c"]]);
    assert_eq!(pick(&j, &fields), want);
    assert!(
        j["created_at"].is_string() && j["enqueued_at"].is_string(),
        "{j}"
    );
    assert!(
        j["retry"]["max_attempts"].is_u64(),
        "effective retry policy: {j}"
    );
    assert_eq!(
        c.job(&id).expect("JOB"),
        j,
        "JOB returns what PUSH returned"
    );
    let line = format!(r#"PUSH {{"type":"a","args":[],"id":"{id}"}}"#);
    assert_eq!(err_code(&mut c, &line), "DUPLICATE_JOB");

    let line = r#"PUSHB [{"type":"b","args":[1]},{"type":"b","args":[2],"queue":"q2"}]"#;
    let many = call_json(&mut c, line);
    let many = many.as_array().expect("an array");
    assert_eq!(many.len(), 2);
    assert_eq!(pick(&many[0], &["args", "queue"]), json!([[1], "default"]));
    assert_eq!(pick(&many[1], &["args", "queue"]), json!([[2], "q2"]));
    all_fail(
        &mut c,
        "MALFORMED_COMMAND",
        &["PUSHB []", "PUSHB {}", "PUSHB [1"],
    );
}

#[test]
fn fetch_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-f");
    assert_eq!(w.call("FETCH default").expect("FETCH"), Reply::Null);
    let jobs = [
        json!({"type": "f", "args": [1]}),
        json!({"type": "f", "args": [2]}),
    ];
    c.push_bulk(&jobs).expect("PUSHB");
    let one = call_json(&mut w, "FETCH default");
    assert_eq!(pick(&one, &["args", "state"]), json!([[1], "active"]));
    let arr = call_json(&mut w, "FETCH default COUNT 5");
    assert_eq!(
        arr.as_array().map(Vec::len),
        Some(1),
        "COUNT gives an array: {arr}"
    );
    #[rustfmt::skip]
    all_fail(&mut w, "MALFORMED_COMMAND", &[
        "FETCH", "FETCH q COUNT 0", "FETCH q COUNT 1001", "FETCH q COUNT x", "FETCH q COUNT 2 r",
    ]);
    assert_eq!(err_code(&mut w, "FETCH Bad_Queue"), "INVALID_QUEUE");
}

#[test]
fn ack_and_fail_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-a");
    c.push_bulk(&vec![json!({"type": "x", "args": []}); 3])
        .expect("PUSHB");
    let ids = ids_of(&w.fetch_many(&["default"], 3).expect("FETCH"));
    call_ok(
        &mut w,
        &format!(r#"ACK {{"id":"{}","result":[1,2]}}"#, ids[0]),
    );
    assert_eq!(c.job(&ids[0]).expect("JOB")["result"], json!([1, 2]));
    // Faktory's field names are accepted too.
    call_ok(&mut w, &format!(r#"ACK {{"jid":"{}"}}"#, ids[1]));
    assert_eq!(state_of(&mut c, &ids[1]), "completed");
    let (id, tail) = (
        &ids[2],
        r#""errtype":"Timeout","message":"slow","backtrace":["x.rs:1"]"#,
    );
    call_ok(&mut w, &format!(r#"FAIL {{"jid":"{id}",{tail}}}"#));
    let j = c.job(id).expect("JOB");
    assert_eq!(j["state"], "retryable");
    let want = json!({"type": "Timeout", "message": "slow", "backtrace": ["x.rs:1"]});
    assert_eq!(j["error"], want);
    #[rustfmt::skip]
    all_fail(&mut w, "MALFORMED_COMMAND", &[
        "ACK", "ACK {}", "ACK [1]", r#"ACK {"id":""}"#, r#"ACK {"id":7}"#, r#"FAIL {"id":"x"}"#,
        r#"FAIL {"id":"x","error":{"message":"m"}}"#, r#"FAIL {"id":"x","error":"boom"}"#,
        r#"FAIL {"id":"x","error":{"type":"E","backtrace":[1]}}"#,
    ]);
}

/// `ACK {"id", "fetch": [...]}`: the ACK, then the next job in the same reply (as FETCH
/// answers it), or a null reply when none comes within the wait.
#[test]
fn ack_with_fetch_answers_the_next_job() {
    let srv = Server::start_with(&["--fetch-wait-ms", "200"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-af");
    let a = push_id(&mut c, &test_job("af", json!({})));
    let b = push_id(&mut c, &test_job("af", json!({})));
    assert_eq!(id_of(&fetch_one(&mut w, "af")), a);
    let next = json_of(
        w.call(&format!(
            r#"ACK {{"id":"{a}","result":7,"fetch":["other","af"]}}"#
        ))
        .expect("ACK with fetch"),
    );
    assert_eq!(id_of(&next), b);
    assert_eq!(next["state"], "active");
    let done = c.job(&a).expect("JOB");
    assert_eq!(
        (done["state"].as_str(), &done["result"]),
        (Some("completed"), &json!(7))
    );
    // Nothing left: the ACK is done and the reply is null, after the wait or at once.
    assert_eq!(
        w.call(&format!(r#"ACK {{"id":"{b}","fetch":["af"],"wait_ms":0}}"#))
            .expect("ACK"),
        Reply::Null
    );
    assert_eq!(state_of(&mut c, &b), "completed");
    // An ACK that cannot be done takes nothing.
    let d = push_id(&mut c, &test_job("af", json!({})));
    assert_eq!(
        err_code(&mut w, &format!(r#"ACK {{"id":"{a}","fetch":["af"]}}"#)),
        "INVALID_STATE_TRANSITION"
    );
    assert_eq!(state_of(&mut c, &d), "available");
    #[rustfmt::skip]
    all_fail(&mut w, "MALFORMED_COMMAND", &[
        r#"ACK {"id":"x","fetch":[]}"#, r#"ACK {"id":"x","fetch":"af"}"#,
        r#"ACK {"id":"x","fetch":[1]}"#, r#"ACK {"id":"x","fetch":["af"],"wait_ms":-1}"#,
        r#"ACK {"id":"x","wait_ms":5}"#,
    ]);
}

/// `ACKB [ack, ...]`: each ACK on its own, in one round trip; the refused ones are named
/// by position and change nothing, the others complete with their results.
#[test]
fn ackb_settles_each_ack_on_its_own() {
    let srv = Server::start_with(&["--fetch-wait-ms", "200"]);
    let mut c = srv.client();
    let mut w = srv.worker("w-ab");
    let mut other = srv.worker("w-other");
    let ids: Vec<String> = (0..4)
        .map(|_| push_id(&mut c, &test_job("ab", json!({}))))
        .collect();
    let mine = json_of(w.call("FETCH ab COUNT 3").expect("FETCH COUNT"));
    let mine: Vec<String> = mine.as_array().unwrap().iter().map(id_of).collect();
    assert_eq!(mine, ids[..3]);
    assert_eq!(id_of(&fetch_one(&mut other, "ab")), ids[3]);
    let unknown = "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b";
    let line = format!(
        r#"ACKB [{{"id":"{}","result":{{"n":1}}}},{{"id":"{}"}},{{"id":"{unknown}"}},{{"jid":"{}"}},{{"id":"{}"}}]"#,
        ids[0], ids[3], ids[1], ids[0]
    );
    let reply = call_json(&mut w, &line);
    assert_eq!(reply["acked"], 2, "{reply}");
    let refused: Vec<(u64, &str)> = reply["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["index"].as_u64().unwrap(), r["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        refused,
        vec![
            (1, "NOT_OWNER"),
            (2, "NOT_FOUND"),
            (4, "INVALID_STATE_TRANSITION")
        ]
    );
    let done = c.job(&ids[0]).expect("JOB");
    assert_eq!(
        (done["state"].as_str(), &done["result"]),
        (Some("completed"), &json!({"n": 1}))
    );
    assert_eq!(state_of(&mut c, &ids[1]), "completed");
    assert_eq!(state_of(&mut c, &ids[2]), "active");
    assert_eq!(state_of(&mut c, &ids[3]), "active");
    #[rustfmt::skip]
    all_fail(&mut w, "MALFORMED_COMMAND", &[
        "ACKB", "ACKB []", r#"ACKB {"id":"x"}"#, r#"ACKB [{"result":1}]"#, "ACKB [7]",
        r#"ACKB [{"id":"x","fetch":["ab"]}]"#,
    ]);
}

#[test]
fn beat_and_worker_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut w = srv.worker("w-b");
    let beat = r#"BEAT {"wid":"w-b"}"#;
    call_ok(&mut w, beat);
    call_ok(&mut w, r#"BEAT {"wid":"w-b","active_job_ids":[]}"#);
    call_ok(&mut c, "WORKER QUIET w-b");
    assert_eq!(call_json(&mut w, beat), json!({"state": "quiet"}));
    call_ok(&mut c, "WORKER TERMINATE w-b");
    assert_eq!(call_json(&mut w, beat), json!({"state": "terminate"}));
    call_ok(&mut c, "WORKER QUIET w-b");
    let after = call_json(&mut w, beat);
    assert_eq!(
        after,
        json!({"state": "terminate"}),
        "quiet does not undo terminate"
    );
    assert_eq!(err_code(&mut c, "WORKER QUIET nobody"), "NOT_FOUND");
    #[rustfmt::skip]
    all_fail(&mut c, "MALFORMED_COMMAND", &[
        "BEAT {}", r#"BEAT {"wid":""}"#, r#"BEAT {"wid":"w","active_job_ids":"x"}"#,
        "WORKER PAUSE w-b", "WORKER QUIET",
    ]);
}

#[test]
fn cancel_activate_and_job_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let a = push_id(&mut c, &json!({"type": "c", "args": []}));
    let b = push_id(&mut c, &json!({"type": "c", "args": [], "pending": true}));
    let d = push_id(&mut c, &json!({"type": "c", "args": []}));
    call_ok(&mut c, &format!("CANCEL {a}"));
    call_ok(&mut c, &format!(r#"CANCEL {{"id":"{d}"}}"#));
    call_ok(&mut c, &format!("CANCEL {a}"));
    call_ok(&mut c, &format!(r#"ACTIVATE {{"id":"{b}"}}"#));
    let j = call_json(&mut c, &format!("JOB {b}"));
    assert_eq!(pick(&j, &["id", "state"]), json!([b, "available"]));
    #[rustfmt::skip]
    all_fail(&mut c, "MALFORMED_COMMAND", &[
        "CANCEL", "CANCEL a b", "CANCEL {}", "ACTIVATE", "ACTIVATE {}", "JOB", "JOB a b",
    ]);
}

#[test]
fn info_queue_and_clock_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    let _w = srv.worker("w-i");
    push_id(&mut c, &json!({"type": "i", "args": [], "queue": "iq"}));
    let info = c.info().expect("INFO");
    assert_eq!(info["server"]["name"], "ojsd");
    assert_eq!(info["totals"]["enqueued"], 1);
    assert_eq!(
        pick(&info["queues"]["iq"], &["available", "paused"]),
        json!([1, false])
    );
    let workers = info["workers"].as_array().expect("workers");
    assert!(workers.iter().any(|w| w["wid"] == "w-i"), "{info}");
    call_ok(&mut c, "QUEUE PAUSE iq other");
    let queues = c.info().expect("INFO")["queues"].clone();
    assert!(queues["iq"]["paused"] == true && queues["other"]["paused"] == true);
    call_ok(&mut c, "queue resume iq");
    assert_eq!(c.info().expect("INFO")["queues"]["iq"]["paused"], false);
    all_fail(
        &mut c,
        "MALFORMED_COMMAND",
        &["QUEUE PAUSE", "QUEUE DRAIN iq"],
    );
    let long = format!("QUEUE PAUSE {}", "q".repeat(300));
    assert_eq!(err_code(&mut c, &long), "INVALID_QUEUE");

    let before = server_now(&mut c);
    call_ok(&mut c, "CLOCK ADVANCE 90.5");
    let moved = secs_between(before, server_now(&mut c));
    assert!((90.5..95.0).contains(&moved), "clock moved {moved} s");
    #[rustfmt::skip]
    all_fail(&mut c, "MALFORMED_COMMAND", &[
        "CLOCK ADVANCE -1", "CLOCK ADVANCE x", "CLOCK ADVANCE", "CLOCK STOP 1",
    ]);
}

#[test]
fn dead_replies() {
    let srv = Server::start();
    let mut c = srv.client();
    assert_eq!(
        call_json(&mut c, "DEAD LIST"),
        json!({"total": 0, "jobs": []})
    );
    let job = json!({"type": "dead.job", "args": [], "retry": {"max_attempts": 1}});
    let (a, b) = (push_id(&mut c, &job), push_id(&mut c, &job));
    let mut w = srv.worker("w-d");
    for id in [&a, &b] {
        fetch_one(&mut w, "default");
        w.fail(id, "E", "m", &[]).expect("FAIL");
    }
    let list = call_json(&mut c, r#"DEAD LIST {"limit":1}"#);
    assert_eq!(list["total"], 2);
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(1));
    call_ok(&mut c, &format!("DEAD RETRY {a}"));
    assert_eq!(state_of(&mut c, &a), "available");
    call_ok(&mut c, &format!("DEAD DELETE {b}"));
    assert_eq!(err_code(&mut c, &format!("JOB {b}")), "NOT_FOUND");
    #[rustfmt::skip]
    all_fail(&mut c, "MALFORMED_COMMAND", &[
        "DEAD", "DEAD PURGE", "DEAD RETRY", "DEAD DELETE a b", "DEAD LIST [1]",
        r#"DEAD LIST {"limit":"x"}"#, r#"DEAD LIST {"offset":-1}"#, r#"DEAD LIST {"queue":5}"#,
    ]);
}

/// Job payloads that must be refused, with the code each gets.
#[rustfmt::skip]
const BAD_JOBS: &[(&str, &str)] = &[
    (r#"[1,2]"#, "INVALID_PAYLOAD"),
    (r#""job""#, "INVALID_PAYLOAD"),
    (r#"{"type":"a","args":[]} trailing"#, "MALFORMED_COMMAND"),
    (r#"{"type":"a","args":{"x":1}}"#, "INVALID_ARGS"),
    (r#"{"type":"a","args":"x"}"#, "INVALID_ARGS"),
    (r#"{"type":"a","args":[],"priority":"urgent"}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"a","args":[],"priority":1.5}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"a","args":[],"queue":"Default"}"#, "INVALID_QUEUE"),
    (r#"{"type":"a","args":[],"queue":7}"#, "INVALID_QUEUE"),
    (r#"{"type":"a","args":[],"id":"not-a-uuid"}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"a","args":[],"id":"019461a8-1a2b-4c3d-8e4f-5a6b7c8d9e0f"}"#, "INVALID_PAYLOAD"), // v4
    (r#"{"type":"a","args":[],"id":"019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F"}"#, "INVALID_PAYLOAD"), // upper
    (r#"{"type":"a","args":[],"scheduled_at":"2030-01-01T00:00:00"}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"a","args":[],"expires_at":"2030-01-01"}"#, "INVALID_PAYLOAD"),
    (r#"{"args":[]}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"a"}"#, "INVALID_PAYLOAD"),
    (r#"{"type":null,"args":[]}"#, "INVALID_PAYLOAD"),
    (r#"{"type":"Bad.Type","args":[]}"#, "INVALID_JOB_TYPE"),
    (r#"{"type":"a","args":[],"meta":[]}"#, "INVALID_METADATA"),
    (r#"{"type":"a","args":[],"retry":{"max_attempts":-1}}"#, "INVALID_RETRY_POLICY"),
    (r#"{"type":"a","args":[],"pending":"yes"}"#, "INVALID_PAYLOAD"),
];

#[test]
fn malformed_input_gets_an_error_and_the_connection_survives() {
    let srv = Server::start_with(&["--max-line-bytes", "1024"]);
    let mut raw = Raw::ready(&srv.addr);
    #[rustfmt::skip]
    let lines: &[(&[u8], &str)] = &[
        (b"\x00\x01\x02\x03\xfe\xff garbage", "MALFORMED_COMMAND"), // not UTF-8
        (b"\x00\x01binary\x7f", "UNKNOWN_COMMAND"),
        (b"PUSH {\"type\":\"a\",\"args\":[\"\xff\xfe\"]}", "MALFORMED_COMMAND"),
        (b"", "MALFORMED_COMMAND"), (b"   ", "MALFORMED_COMMAND"),
        (b"PUSH", "MALFORMED_COMMAND"), (b"PUSH {oops", "MALFORMED_COMMAND"),
        (b"BOGUS", "UNKNOWN_COMMAND"), (b"FROB the widget", "UNKNOWN_COMMAND"),
        (b"IN\rFO", "UNKNOWN_COMMAND"),
    ];
    for (bytes, want) in lines {
        assert_eq!(raw.code(bytes), *want, "{:?}", show(bytes));
    }
    for (job, want) in BAD_JOBS {
        assert_eq!(raw.code(format!("PUSH {job}").as_bytes()), *want, "{job}");
    }

    // Over-long lines are discarded up to their newline; the connection stays in step.
    assert_eq!(raw.code(&[b'a'; 5000]), "LINE_TOO_LONG");
    assert!(raw.is_bulk("INFO"), "INFO after LINE_TOO_LONG");
    raw.send(&[b'P'; 3000]);
    raw.send(&[b'Q'; 3000]);
    assert_eq!(
        raw.code(b"tail"),
        "LINE_TOO_LONG",
        "a long line sent in pieces"
    );
    let line_of = |n: usize| {
        let mut l = br#"PUSH {"type":"edge.job","args":[""#.to_vec();
        l.resize(n - 3, b'x');
        [l, br#""]}"#.to_vec()].concat()
    };
    assert!(
        matches!(raw.bytes(&line_of(1024)), Reply::Bulk(_)),
        "1024 bytes fit"
    );
    match raw.bytes(&line_of(1025)) {
        // The error names the flag and what to do (a PUSHB too big for the line limit).
        Reply::Error { code, message } => {
            assert_eq!(code, "LINE_TOO_LONG");
            assert!(
                message.contains("--max-line-bytes") && message.contains("smaller batches"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    raw.send(b"INFO\n"); // a bare LF ends a line too
    let enqueued = json_of(raw.reply())["totals"]["enqueued"].clone();
    assert_eq!(enqueued, 1, "only the 1024-byte job was stored");

    let (mut early, _) = Raw::connect(&srv.addr);
    assert_eq!(
        early.code(&[b'z'; 2000]),
        "LINE_TOO_LONG",
        "before HELLO too"
    );

    let mut c = srv.client();
    let job = json!({"type": "after.job", "args": [], "queue": "after"});
    let id = push_id(&mut c, &job);
    assert_eq!(id_of(&fetch_one(&mut srv.worker("w"), "after")), id);
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let srv = Server::start();
    let mut raw = Raw::ready(&srv.addr);
    let burst: String = (0..100)
        .map(|i| format!("PUSH {{\"type\":\"pipe.job\",\"args\":[{i}],\"queue\":\"pipe\"}}\r\n"))
        .collect();
    raw.send(burst.as_bytes());
    let mut ids = Vec::new();
    for i in 0..100 {
        let j = json_of(raw.reply());
        assert_eq!(j["args"], json!([i]), "reply {i} out of order");
        ids.push(id_of(&j));
    }
    // Mixed commands, errors and instant replies included, keep their order too.
    let (a, b) = (&ids[0], &ids[1]);
    let mixed = format!(
        "JOB {a}\r\nBOGUS\r\nPUSH {{bad\r\nINFO\r\nCANCEL {b}\r\nJOB {b}\r\nFETCH pipe COUNT 2\r\n"
    );
    raw.send(mixed.as_bytes());
    assert_eq!(id_of(&json_of(raw.reply())), *a);
    assert!(matches!(raw.reply(), Reply::Error { code, .. } if code == "UNKNOWN_COMMAND"));
    assert!(matches!(raw.reply(), Reply::Error { code, .. } if code == "MALFORMED_COMMAND"));
    assert_eq!(json_of(raw.reply())["queues"]["pipe"]["available"], 100);
    assert_eq!(raw.reply(), ok());
    assert_eq!(json_of(raw.reply())["state"], "cancelled");
    let fetched = ids_of(json_of(raw.reply()).as_array().expect("jobs"));
    assert_eq!(
        fetched,
        [a.clone(), ids[2].clone()],
        "FIFO, minus the cancelled job"
    );
}

#[test]
fn job_size_limit() {
    let srv = Server::start_with(&["--max-job-bytes", "2048"]);
    let mut c = srv.client();
    let job_of_len = |n: usize| {
        let head = r#"{"type":"big.job","args":[""#;
        let s = format!(r#"{head}{}"]}}"#, "x".repeat(n - head.len() - 3));
        assert_eq!(s.len(), n);
        s
    };
    call_json(&mut c, &format!("PUSH {}", job_of_len(2048)));
    for n in [2049, 100_000] {
        let line = format!("PUSH {}", job_of_len(n));
        assert_eq!(err_code(&mut c, &line), "PAYLOAD_TOO_LARGE", "{n} bytes");
    }
    let batch = format!(
        r#"PUSHB [{{"type":"small","args":[]}},{}]"#,
        job_of_len(3000)
    );
    assert_eq!(err_code(&mut c, &batch), "PAYLOAD_TOO_LARGE");
    let enqueued = c.info().expect("INFO")["totals"]["enqueued"].clone();
    assert_eq!(enqueued, 1, "only the 2048-byte job");

    // The same limit applies to an ACK result; the job stays active.
    let mut w = srv.worker("w");
    let id = id_of(&fetch_one(&mut w, "default"));
    let big = format!(r#"ACK {{"id":"{id}","result":"{}"}}"#, "r".repeat(3000));
    assert_eq!(err_code(&mut w, &big), "PAYLOAD_TOO_LARGE");
    assert_eq!(state_of(&mut c, &id), "active");
    w.ack(&id, Some(&json!("small"))).expect("ACK");
    assert_eq!(state_of(&mut c, &id), "completed");
}

#[test]
fn unknown_attributes_are_kept_and_system_attributes_ignored() {
    let srv = Server::start();
    let mut c = srv.client();
    let old = "2000-01-01T00:00:00Z";
    let sent = json!({
        "type": "keep.job", "args": [1], "queue": "keep",
        "x-tenant": "acme", "custom": {"nested": [1, {"deep": true}]}, "flag": null,
        "state": "completed", "attempt": 7, "created_at": old, "started_at": old,
        "result": {"forged": true}, "errors": [{"type": "x"}], "worker_id": "mallory",
    });
    let j = c.push(&sent).expect("PUSH");
    let id = id_of(&j);
    for stored in [j.clone(), c.job(&id).expect("JOB")] {
        let kept = pick(&stored, &["x-tenant", "custom", "state", "attempt"]);
        assert_eq!(kept, json!(["acme", sent["custom"], "available", 0]));
        assert!(stored.as_object().expect("object").contains_key("flag"));
        assert_ne!(stored["created_at"], old);
        for forged in ["result", "errors", "started_at", "worker_id"] {
            let v = stored.get(forged);
            assert!(v.is_none(), "{forged} was taken from the client: {stored}");
        }
    }
    let mut w = srv.worker("w");
    let fetched = fetch_one(&mut w, "keep");
    assert_eq!(pick(&fetched, &["x-tenant", "attempt"]), json!(["acme", 1]));
    w.ack(&id, None).expect("ACK");
    let done = c.job(&id).expect("JOB");
    assert_eq!(done["custom"], sent["custom"]);
    assert!(done.get("result").is_none(), "{done}");
}

/// A reply that is ready must not wait behind a later FETCH that is still blocking.
#[test]
fn a_pipelined_reply_is_not_held_back_by_a_blocking_fetch() {
    let srv = Server::start_with(&["--fetch-wait-ms", "5000"]);
    let mut c = srv.client();
    let id = push_id(&mut c, &json!({"type": "p.q", "args": [], "queue": "pipe"}));
    let mut w = srv.worker("pw");
    let job = w.fetch(&["pipe"]).expect("FETCH").expect("a job");
    assert_eq!(id_of(&job), id);
    w.send_line(&format!("ACK {{\"id\":\"{id}\"}}"))
        .expect("send ACK");
    w.send_line("FETCH pipe").expect("send FETCH");
    w.flush().expect("flush");
    let started = std::time::Instant::now();
    let first = w.read_reply().expect("ACK reply");
    assert_eq!(first, ojs_client::Reply::Simple("OK".into()));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "the ACK reply waited {:?} behind the FETCH",
        started.elapsed()
    );
    assert_eq!(
        w.read_reply().expect("FETCH reply"),
        ojs_client::Reply::Null
    );
}
