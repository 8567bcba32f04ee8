use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{serve_once, Conn, PLAIN_HI};
use crate::{job, password_hash, Client, ConnectOptions, Directive, Error, Reply};

/// Independent computation of the documented password scheme.
fn reference_hash(password: &[u8], salt: &[u8], iterations: usize) -> String {
    let mut input = password.to_vec();
    input.extend_from_slice(salt);
    let mut h: Vec<u8> = Sha256::digest(&input).to_vec();
    for _ in 1..iterations {
        h = Sha256::digest(&h).to_vec();
    }
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Connect a producer to a fake that handshakes and then runs `script`.
fn with_server(
    script: impl FnOnce(&mut Conn) + Send + 'static,
) -> (Client, std::thread::JoinHandle<()>) {
    let (addr, h) = serve_once(move |mut c| {
        c.handshake(PLAIN_HI);
        script(&mut c);
    });
    (Client::connect(&addr).unwrap(), h)
}

#[test]
fn greeting_and_producer_hello() {
    let (addr, h) = serve_once(|mut c| {
        let hello = c.handshake(PLAIN_HI);
        assert_eq!(hello["v"], 2);
        assert!(hello["hostname"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(hello["pid"], std::process::id());
        assert!(hello.get("wid").is_none() && hello.get("pwdhash").is_none());
        assert_eq!(c.expect("END"), "");
        assert!(c.line().is_none(), "client should close after END");
    });
    let client = Client::connect(&addr).unwrap();
    assert_eq!(client.greeting(), &json!({"v": 2}));
    client.end().unwrap();
    h.join().unwrap();
}

#[test]
fn password_hash_matches_reference_vector() {
    let expected = reference_hash(b"secret", b"abc", 3);
    assert_eq!(password_hash("secret", "abc", 3), expected);
    assert_eq!(
        password_hash("secret", "abc", 1),
        reference_hash(b"secret", b"abc", 1)
    );
    assert_ne!(password_hash("secret", "abc", 2), expected);
}

#[test]
fn worker_hello_with_password_wid_and_labels() {
    let expected = reference_hash(b"secret", b"abc", 3);
    let (addr, h) = serve_once(move |mut c| {
        let hello = c.handshake("+HI {\"v\":2,\"i\":3,\"s\":\"abc\"}\r\n");
        assert_eq!(hello["pwdhash"], expected);
        assert_eq!(hello["wid"], "w-1");
        assert_eq!(hello["labels"], json!(["rust", "blue"]));
        assert_eq!(hello["hostname"], "box1");
    });
    let opts = ConnectOptions {
        wid: Some("w-1".into()),
        password: Some("secret".into()),
        labels: vec!["rust".into(), "blue".into()],
        hostname: Some("box1".into()),
        timeout: Some(std::time::Duration::from_secs(10)),
    };
    let client = Client::connect_with(&addr, &opts).unwrap();
    assert_eq!(client.greeting()["i"], 3);
    h.join().unwrap();
}

#[test]
fn handshake_failures() {
    // Password required but not configured: refused locally.
    let (addr, h) = serve_once(|mut c| c.send("+HI {\"v\":2,\"i\":1,\"s\":\"x\"}\r\n"));
    assert!(matches!(Client::connect(&addr), Err(Error::Protocol(_))));
    h.join().unwrap();
    // Wrong protocol version.
    let (addr, h) = serve_once(|mut c| c.send("+HI {\"v\":1}\r\n"));
    assert!(matches!(Client::connect(&addr), Err(Error::Protocol(_))));
    h.join().unwrap();
    // HELLO rejected by the server.
    let (addr, h) = serve_once(|mut c| {
        c.send("+HI {\"v\":2,\"i\":1,\"s\":\"x\"}\r\n");
        c.expect("HELLO");
        c.send("-ERR AUTH_FAILED invalid password\r\n");
    });
    let opts = ConnectOptions {
        password: Some("nope".into()),
        ..Default::default()
    };
    match Client::connect_with(&addr, &opts) {
        Err(Error::Server { code, message }) => {
            assert_eq!(
                (code.as_str(), message.as_str()),
                ("AUTH_FAILED", "invalid password")
            );
        }
        other => panic!("unexpected {:?}", other.map(|_| ())),
    }
    h.join().unwrap();
}

#[test]
fn push_push_bulk_and_job_with_crlf_in_bulk() {
    let (mut client, h) = with_server(|c| {
        let pushed: Value = serde_json::from_str(&c.expect("PUSH")).unwrap();
        assert_eq!(
            pushed,
            json!({"type": "email.send", "args": ["a@b.c"], "queue": "mail"})
        );
        c.bulk(r#"{"id":"0193-a","type":"email.send","args":["a@b.c"],"queue":"mail","state":"available"}"#);
        let batch: Value = serde_json::from_str(&c.expect("PUSHB")).unwrap();
        assert_eq!(batch.as_array().map(Vec::len), Some(2));
        c.bulk(r#"[{"id":"1","type":"a","args":[]},{"id":"2","type":"b","args":[]}]"#);
        assert_eq!(c.expect("JOB"), "0193-a");
        // Pretty-printed JSON: the bulk payload itself contains CRLFs.
        c.bulk("{\r\n  \"id\": \"0193-a\",\r\n  \"note\": \"line1\\r\\nline2\"\r\n}");
        c.send("+PONG\r\n");
    });
    let mut j = job("email.send", json!(["a@b.c"]));
    j["queue"] = json!("mail");
    let stored = client.push(&j).unwrap();
    assert_eq!(stored["id"], "0193-a");
    assert_eq!(stored["state"], "available");
    let many = client
        .push_bulk(&[job("a", json!([])), job("b", json!([]))])
        .unwrap();
    assert_eq!(many.len(), 2);
    assert_eq!(many[1]["id"], "2");
    let got = client.job("0193-a").unwrap();
    assert_eq!(got["note"], "line1\r\nline2");
    // The stream is still aligned after the CRLF-laden bulk.
    assert_eq!(client.read_reply().unwrap(), Reply::Simple("PONG".into()));
    h.join().unwrap();
}

#[test]
fn server_errors_typed_and_raw() {
    let (mut client, h) = with_server(|c| {
        c.expect("JOB");
        c.send("-ERR NOT_FOUND job 0193-x not found\r\n");
        c.expect("CANCEL");
        c.send("-ERR something went wrong\r\n");
        c.expect("ACTIVATE");
        c.send("-INVALID_STATE job is not pending\r\n");
        assert_eq!(c.expect("BOGUS"), "x");
        c.send("-ERR UNKNOWN_COMMAND BOGUS\r\n");
        c.expect("INFO");
        c.bulk(r#"{"server":"ojsd","queues":{}}"#);
    });
    let err = client.job("0193-x").unwrap_err();
    assert_eq!(err.code(), Some("NOT_FOUND"));
    assert_eq!(
        err.to_string(),
        "server error NOT_FOUND: job 0193-x not found"
    );
    match client.cancel("j") {
        Err(Error::Server { code, message }) => assert_eq!(
            (code.as_str(), message.as_str()),
            ("ERR", "something went wrong")
        ),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        client.activate("j").unwrap_err().code(),
        Some("INVALID_STATE")
    );
    // `call` hands error replies back as data.
    assert_eq!(
        client.call("BOGUS x").unwrap(),
        Reply::Error {
            code: "UNKNOWN_COMMAND".into(),
            message: "BOGUS".into()
        }
    );
    // A server error leaves the connection usable.
    assert_eq!(client.info().unwrap()["server"], "ojsd");
    h.join().unwrap();
}

#[test]
fn pipelined_commands() {
    let (mut client, h) = with_server(|c| {
        // Read all three commands before replying to any: only a client
        // that really pipelines gets past this point.
        let lines: Vec<String> = (0..3).map(|_| c.line().unwrap()).collect();
        assert_eq!(lines[0], r#"ACK {"id":"1"}"#);
        assert_eq!(lines[1], "FETCH default");
        assert_eq!(lines[2], "INFO");
        c.send("+OK\r\n$-1\r\n");
        c.bulk(r#"{"ok":true}"#);
    });
    client.send_line(r#"ACK {"id":"1"}"#).unwrap();
    client.send_line("FETCH default").unwrap();
    client.send_line("INFO").unwrap();
    client.flush().unwrap();
    assert_eq!(client.read_reply().unwrap(), Reply::Simple("OK".into()));
    assert_eq!(client.read_reply().unwrap(), Reply::Null);
    assert_eq!(
        client.read_reply().unwrap(),
        Reply::Bulk(br#"{"ok":true}"#.to_vec())
    );
    assert!(matches!(
        client.send_line("INFO\r\nEND"),
        Err(Error::Protocol(_))
    ));
    h.join().unwrap();
}

#[test]
fn fetch_and_fetch_many() {
    let (mut client, h) = with_server(|c| {
        assert_eq!(c.expect("FETCH"), "critical default");
        c.send("$-1\r\n");
        assert_eq!(c.expect("FETCH"), "default");
        c.bulk(r#"{"id":"7","type":"t","args":[1]}"#);
        assert_eq!(c.expect("FETCH"), "a b COUNT 5");
        c.send("$-1\r\n");
        assert_eq!(c.expect("FETCH"), "a COUNT 2");
        c.bulk(r#"[{"id":"8","type":"t","args":[]},{"id":"9","type":"t","args":[]}]"#);
    });
    assert_eq!(client.fetch(&["critical", "default"]).unwrap(), None);
    assert_eq!(client.fetch(&[]).unwrap().unwrap()["id"], "7");
    assert!(client.fetch_many(&["a", "b"], 5).unwrap().is_empty());
    let jobs = client.fetch_many(&["a"], 2).unwrap();
    assert_eq!(
        jobs.iter().map(|j| j["id"].clone()).collect::<Vec<_>>(),
        vec![json!("8"), json!("9")]
    );
    // Invalid queue names never reach the wire.
    assert!(matches!(
        client.fetch(&["bad queue"]),
        Err(Error::Protocol(_))
    ));
    h.join().unwrap();
}

#[test]
fn ack_many_sends_one_ackb_and_reports_the_refused_by_position() {
    let (mut client, h) = with_server(|c| {
        let acks: Value = serde_json::from_str(&c.expect("ACKB")).unwrap();
        assert_eq!(
            acks,
            json!([{"id": "1", "result": {"n": 1}}, {"id": "2"}, {"id": "3"}])
        );
        c.bulk(r#"{"acked":2,"rejected":[{"index":1,"code":"NOT_OWNER","message":"not yours"}]}"#);
        assert_eq!(c.expect("ACKB"), r#"[{"id":"4"}]"#);
        c.bulk(r#"{"acked":1,"rejected":[]}"#);
        assert_eq!(c.expect("ACKB"), r#"[{"id":"5"}]"#);
        c.bulk(r#"{"acked":0,"rejected":[{"index":9,"code":"NOT_FOUND","message":"x"}]}"#);
    });
    let r = json!({"n": 1});
    let refused = client
        .ack_many(&[("1", Some(&r)), ("2", None), ("3", None)])
        .unwrap();
    assert_eq!(refused.len(), 1);
    assert_eq!((refused[0].0, refused[0].1.code()), (1, Some("NOT_OWNER")));
    assert!(client.ack_many(&[("4", None)]).unwrap().is_empty());
    // Nothing to acknowledge: nothing sent.
    assert!(client.ack_many(&[]).unwrap().is_empty());
    // A position the request does not have is a protocol error, not a silent success.
    assert!(matches!(
        client.ack_many(&[("5", None)]),
        Err(Error::Protocol(_))
    ));
    h.join().unwrap();
}

#[test]
fn ack_fail_beat_and_admin_commands() {
    let (mut client, h) = with_server(|c| {
        let ack: Value = serde_json::from_str(&c.expect("ACK")).unwrap();
        assert_eq!(ack, json!({"id": "1", "result": {"sent": 3}}));
        c.send("+OK\r\n");
        let fail: Value = serde_json::from_str(&c.expect("FAIL")).unwrap();
        assert_eq!(
            fail,
            json!({"id": "2", "error": {"type": "io", "message": "boom", "backtrace": ["a.rs:1"]}})
        );
        c.send("+OK\r\n");
        let beat: Value = serde_json::from_str(&c.expect("BEAT")).unwrap();
        assert_eq!(beat, json!({"wid": "w", "active_job_ids": ["1", "2"]}));
        c.send("+OK\r\n");
        c.expect("BEAT");
        c.bulk(r#"{"state":"quiet"}"#);
        c.expect("BEAT");
        c.bulk(r#"{"state":"terminate"}"#);
        c.expect("BEAT");
        c.bulk(r#"{"state":"sideways"}"#);
        assert_eq!(c.expect("CANCEL"), r#"{"id":"3"}"#);
        c.send("+OK\r\n");
        assert_eq!(c.expect("ACTIVATE"), r#"{"id":"4"}"#);
        c.send("+OK\r\n");
        assert_eq!(c.expect("QUEUE"), "PAUSE a b");
        c.send("+OK\r\n");
        assert_eq!(c.expect("QUEUE"), "RESUME a");
        c.send("+OK\r\n");
        assert_eq!(c.expect("WORKER"), "QUIET w");
        c.send("+OK\r\n");
        assert_eq!(c.expect("WORKER"), "TERMINATE w");
        c.send("+OK\r\n");
    });
    client.ack("1", Some(&json!({"sent": 3}))).unwrap();
    client
        .fail("2", "io", "boom", &["a.rs:1".to_string()])
        .unwrap();
    let ids = vec!["1".to_string(), "2".to_string()];
    assert_eq!(client.beat("w", &ids).unwrap(), Directive::Running);
    assert_eq!(client.beat("w", &[]).unwrap(), Directive::Quiet);
    assert_eq!(client.beat("w", &[]).unwrap(), Directive::Terminate);
    assert!(matches!(client.beat("w", &[]), Err(Error::Protocol(_))));
    client.cancel("3").unwrap();
    client.activate("4").unwrap();
    client.pause_queues(&["a", "b"]).unwrap();
    client.resume_queues(&["a"]).unwrap();
    client.quiet_worker("w").unwrap();
    client.terminate_worker("w").unwrap();
    h.join().unwrap();
}

#[test]
fn connection_is_unusable_after_truncated_reply() {
    let (mut client, h) = with_server(|c| {
        c.expect("INFO");
        c.send("$10\r\n{\"a\""); // then hang up mid-bulk
    });
    assert!(matches!(client.info(), Err(Error::Io(_))));
    h.join().unwrap();
    assert!(matches!(client.info(), Err(Error::Protocol(_))));
}

#[test]
fn ack_fetch_returns_the_next_job_or_none() {
    let (mut client, h) = with_server(|c| {
        let body: Value = serde_json::from_str(&c.expect("ACK")).unwrap();
        assert_eq!(
            body,
            json!({"id": "j1", "result": {"n": 1}, "fetch": ["a", "b"]})
        );
        c.bulk(r#"{"id":"j2","type":"t","args":[]}"#);
        let body: Value = serde_json::from_str(&c.expect("ACK")).unwrap();
        assert_eq!(
            body,
            json!({"id": "j2", "fetch": ["default"], "wait_ms": 0})
        );
        c.send("$-1\r\n");
        c.expect("ACK");
        c.send("-ERR NOT_OWNER job j3 is held by another worker\r\n");
    });
    let next = client
        .ack_fetch("j1", Some(&json!({"n": 1})), &["a", "b"], None)
        .unwrap();
    assert_eq!(next.unwrap()["id"], "j2");
    assert_eq!(client.ack_fetch("j2", None, &[], Some(0)).unwrap(), None);
    let err = client.ack_fetch("j3", None, &["a"], None).unwrap_err();
    assert_eq!(err.code(), Some("NOT_OWNER"));
    assert!(matches!(
        client.ack_fetch("j4", None, &["bad queue"], None),
        Err(Error::Protocol(_))
    ));
    h.join().unwrap();
}
