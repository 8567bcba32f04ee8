//! Every node serves every client (cluster mode, PROTOCOL.md §15): three `ojsd --store
//! postgres` nodes, no load balancer, clients connected straight to the standbys, which
//! forward to the partition's holder over the peer protocol (`--peer-listen`).
//!
//! - jobs pushed through one standby, fetched through the other, ACKed through the first;
//! - a worker waiting in FETCH on a standby receives a job pushed to the holder;
//! - a client of a standby that disconnects with a fetched job: the job is available again
//!   at once (not after its visibility timeout); so are the jobs of a standby killed -9;
//! - kill -9 of the holder with producers on one standby and workers on the other: they
//!   get retryable errors, a standby takes over, the other forwards to it, every push
//!   answered +OK completes and none is ACKed twice;
//! - a peer with a wrong password is refused (a raw peer connection, and a whole node);
//! - a peer frame over the limit ends that peer connection and nothing else;
//! - with TLS on, peers speak TLS;
//! - a subscriber on a standby sees the holder's events in order;
//! - a peer that reads none of its answers is held to its budget.
//!
//! Needs `OJSD_TEST_POSTGRES_URL` (.ci/run sets it); skipped with a notice otherwise. The
//! harness is tests/common/cluster.rs (haproxy is not used here).

mod common;

use common::cluster::{connect, wait_until, Cluster, Load, Proc, HOLDS, NAMES};
use common::{id_of, test_job};
use ojs_client::{Client, ConnectOptions};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

fn url() -> Option<String> {
    common::cluster::pg_url()
}

/// Node a holding the partition, the others standbys forwarding to it (each has said so
/// in its log and answers a command through node a).
fn start(c: &Cluster) -> Vec<Proc> {
    let a = c.node(0);
    wait_until("node-a to hold the partition", LIMIT, || a.logged(HOLDS));
    let mut nodes = vec![a];
    for (i, name) in NAMES.iter().enumerate().take(c.nodes.len()).skip(1) {
        let p = c.standby(i, 0);
        wait_until(&format!("{name} to forward"), LIMIT, || {
            p.logged("forwarding to the partition's holder")
        });
        nodes.push(p);
    }
    nodes
}

fn client(addr: &str, wid: Option<&str>) -> Client {
    Client::connect_with(
        addr,
        &ConnectOptions {
            wid: wid.map(str::to_string),
            timeout: Some(Duration::from_secs(15)),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// HTTP GET on `addr`: (status, body as text).
fn http_text(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, body.to_string())
}

/// HTTP GET on `addr`: (status, body as JSON).
fn http_get(addr: &str, path: &str) -> (u16, Value) {
    let (status, body) = http_text(addr, path);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[test]
fn pushed_through_one_standby_fetched_through_the_other_acked_through_the_first() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 3);
    let _nodes = start(&c);
    let (b, cc) = (&c.nodes[1].0, &c.nodes[2].0);
    // The same worker id on both standbys: a job fetched on one is the worker's, so it
    // may settle it on the other.
    let mut producer = client(b, Some("w-1"));
    let mut fetcher = client(cc, Some("w-1"));
    let n = 20;
    let mut pushed = Vec::new();
    for i in 0..n {
        let j = producer
            .push(&test_job("fwd", json!({"args": [i]})))
            .unwrap();
        pushed.push(id_of(&j));
    }
    let mut fetched = Vec::new();
    while fetched.len() < n {
        let job = fetcher
            .fetch(&["fwd"])
            .unwrap()
            .expect("a job for each push");
        assert_eq!(job["state"], "active");
        fetched.push(id_of(&job));
    }
    assert_eq!(fetched, pushed, "fetched in the order pushed");
    for id in &fetched {
        producer.ack(id, None).unwrap();
    }
    // The holder itself agrees, and so does the other standby.
    let mut holder = client(&c.nodes[0].0, None);
    for id in &pushed {
        assert_eq!(holder.job(id).unwrap()["state"], "completed", "{id}");
        assert_eq!(fetcher.job(id).unwrap()["state"], "completed", "{id}");
    }
    // A standby's health check passes through the holder and names it.
    let (status, health) = http_get(&c.nodes[1].1, "/ojs/v1/health");
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["node"]["role"], "forwarding", "{health}");
    assert_eq!(health["node"]["holder"], "node-a", "{health}");
    let (_, health) = http_get(&c.nodes[0].1, "/ojs/v1/health");
    assert_eq!(health["node"]["role"], "active", "{health}");
    // A standby's /metrics are the holder's: the 20 jobs completed through the standbys.
    let (status, metrics) = http_text(&c.nodes[2].1, "/metrics");
    assert_eq!(status, 200, "{metrics}");
    let completed = metrics
        .lines()
        .find(|l| l.starts_with("ojs_jobs_completed_total") && l.contains("queue=\"fwd\""))
        .unwrap_or_else(|| panic!("no completed counter for fwd in:\n{metrics}"));
    assert!(completed.ends_with(&format!(" {n}")), "{completed}");
    // CLUSTER lists every node's peer address, and `local` is the node asked (node-c),
    // though the holder answered.
    let cl = fetcher.cluster().unwrap();
    for (i, node) in cl["nodes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(node["peer_addr"], c.peers[i].as_str(), "{cl}");
        assert_eq!(node["local"], i == 2, "{cl}");
    }
}

#[test]
fn a_worker_waiting_in_fetch_on_a_standby_receives_a_job_pushed_to_the_holder() {
    let Some(url) = url() else { return };
    let mut c = Cluster::new(url, 3);
    c.fetch_wait_ms = 8000;
    let _nodes = start(&c);
    let b = c.nodes[1].0.clone();
    let waiting = std::thread::spawn(move || {
        let mut w = client(&b, Some("w-wait"));
        let t0 = Instant::now();
        let job = w.fetch(&["wake"]).unwrap();
        (job, t0.elapsed())
    });
    // Long enough for the FETCH to be parked at the holder.
    std::thread::sleep(Duration::from_millis(1500));
    let mut holder = client(&c.nodes[0].0, None);
    let pushed_at = Instant::now();
    let id = id_of(&holder.push(&test_job("wake", json!({}))).unwrap());
    let (job, waited) = waiting.join().unwrap();
    let job = job.expect("the parked FETCH got the job");
    assert_eq!(id_of(&job), id);
    assert!(
        waited >= Duration::from_millis(1400),
        "it waited for the push: {waited:?}"
    );
    assert!(
        pushed_at.elapsed() < Duration::from_secs(3),
        "it woke at the push, not at the end of its wait"
    );
}

#[test]
fn a_standby_client_that_disconnects_with_a_fetched_job_releases_it_at_once() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 3);
    let _nodes = start(&c);
    let mut producer = client(&c.nodes[0].0, None);
    // A visibility timeout far beyond the test: only the disconnect can bring it back.
    let id = id_of(
        &producer
            .push(&test_job("held", json!({"timeout": 600})))
            .unwrap(),
    );
    // A client without a worker id: the connection holds the jobs it fetches.
    let mut taker = client(&c.nodes[1].0, None);
    let job = taker.fetch(&["held"]).unwrap().expect("the job");
    assert_eq!(id_of(&job), id);
    assert_eq!(producer.job(&id).unwrap()["state"], "active");
    drop(taker);
    let t0 = Instant::now();
    wait_until(
        "the job to be available again",
        Duration::from_secs(5),
        || producer.job(&id).unwrap()["state"] == "available",
    );
    let mut other = client(&c.nodes[2].0, None);
    let again = other.fetch(&["held"]).unwrap().expect("fetched again");
    assert_eq!(id_of(&again), id);
    eprintln!(
        "released {} ms after the standby's client closed",
        t0.elapsed().as_millis()
    );
}

/// The holder closes what a peer connection carried when it drops: a standby killed with
/// its client's fetched job (600 s visibility timeout) gives the job back at once.
#[test]
fn a_standby_killed_with_fetched_jobs_gives_them_back_at_once() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 3);
    let mut nodes = start(&c);
    let mut producer = client(&c.nodes[0].0, None);
    let id = id_of(
        &producer
            .push(&test_job("dropped", json!({"timeout": 600})))
            .unwrap(),
    );
    let mut taker = client(&c.nodes[2].0, None);
    assert_eq!(
        id_of(&taker.fetch(&["dropped"]).unwrap().expect("the job")),
        id
    );
    assert_eq!(producer.job(&id).unwrap()["state"], "active");
    nodes[2].kill9();
    wait_until(
        "the job of the killed standby's client to be available again",
        Duration::from_secs(5),
        || producer.job(&id).unwrap()["state"] == "available",
    );
    // The other standby's clients are not affected.
    let mut other = client(&c.nodes[1].0, None);
    assert_eq!(
        id_of(&other.fetch(&["dropped"]).unwrap().expect("again")),
        id
    );
}

#[test]
fn kill9_of_the_holder_with_clients_on_the_standbys() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 3);
    let mut nodes = start(&c);
    let (b, cc) = (c.nodes[1].0.clone(), c.nodes[2].0.clone());
    let load = Load::split(&b, &cc, 2, 2);
    wait_until("load before the kill", LIMIT, || load.acked() >= 100);
    let errors_before = load
        .ledger
        .push_errors
        .load(std::sync::atomic::Ordering::SeqCst);
    nodes[0].kill9();
    let t0 = Instant::now();
    // One of the standbys takes over; the other forwards to it.
    wait_until("a standby to take over", LIMIT, || {
        nodes[1].logged(HOLDS) || nodes[2].logged(HOLDS)
    });
    let (new, other) = if nodes[1].logged(HOLDS) {
        (1, 2)
    } else {
        (2, 1)
    };
    let pushed_at_kill = load.pushed();
    wait_until("load after the takeover", LIMIT, || {
        load.pushed() >= pushed_at_kill + 100
    });
    let took = t0.elapsed();
    let errors = load
        .ledger
        .push_errors
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        errors > errors_before,
        "the producers' forwards failed while no node held the partition"
    );
    // Connected to a standby, they kept their connection: every refusal was the
    // retryable BACKEND_UNAVAILABLE, none a cut.
    let codes = load.ledger.push_error_codes.lock().unwrap().clone();
    assert!(
        codes.keys().all(|c| c == "BACKEND_UNAVAILABLE"),
        "{codes:?}"
    );
    let (pushed, refused) = load.finish_and_check(&b);
    let (_, health) = http_get(&c.nodes[other].1, "/ojs/v1/health");
    assert_eq!(health["node"]["role"], "forwarding", "{health}");
    assert_eq!(health["node"]["holder"], NAMES[new], "{health}");
    let (_, health) = http_get(&c.nodes[new].1, "/ojs/v1/health");
    assert_eq!(health["node"]["role"], "active", "{health}");
    eprintln!(
        "forwarding failover: {pushed} pushes acknowledged ({refused} refused or cut), all \
         completed, none acked twice; {} took over, 100 more pushes {} ms after the kill",
        NAMES[new],
        took.as_millis()
    );
}

/// One frame of the peer protocol: a 4-byte big-endian length, then the bytes.
fn send_frame(s: &mut TcpStream, body: &[u8]) {
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
}

/// The next frame, or `None` when the connection closed.
fn read_frame(s: &mut TcpStream) -> Option<Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).expect("a JSON frame"))
}

fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
        || matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

#[test]
fn a_peer_with_a_wrong_password_is_refused() {
    let Some(url) = url() else { return };
    let mut c = Cluster::new(url, 3);
    c.extra = vec!["--password".into(), "right".into()];
    let a = c.node(0);
    wait_until("node-a to hold the partition", LIMIT, || a.logged(HOLDS));
    // A raw peer connection answering the challenge with a wrong password.
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let challenge = read_frame(&mut s).expect("a challenge");
    let ch = &challenge["Challenge"];
    assert_eq!(ch["auth"], true, "{challenge}");
    let salt = ch["salt"].as_str().unwrap();
    let wrong = ojs_client::password_hash("wrong", salt, 5000);
    let auth = json!({"Auth": {"version": 2, "node": "intruder", "pwdhash": wrong}});
    send_frame(&mut s, auth.to_string().as_bytes());
    let refused = read_frame(&mut s).expect("an answer");
    assert_eq!(refused["Refused"]["code"], "Unauthenticated", "{refused}");
    assert!(closed(&mut s), "the connection closes");
    // No password at all is refused too, and so is a request sent without the handshake.
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frame(&mut s).expect("a challenge");
    let submit = json!({"Submit": {"id": 1, "part": 0, "conn": null, "wid": null, "cmd": "Info",
                                   "bytes": 0, "viewed": false}});
    send_frame(&mut s, submit.to_string().as_bytes());
    assert!(read_frame(&mut s).is_none_or(|f| f.get("Answer").is_none()));
    // A node started with the wrong password forwards nothing: its clients get the
    // retryable BACKEND_UNAVAILABLE, and the holder logs the refusal.
    c.extra = vec!["--password".into(), "wrong".into()];
    let b = c.node(1);
    c.extra = vec!["--password".into(), "right".into()];
    wait_until("node-b to look for the holder", LIMIT, || {
        b.logged("forwarding to the partition's holder")
    });
    let mut cl = Client::connect_with(
        &c.nodes[1].0,
        &ConnectOptions {
            password: Some("wrong".into()),
            timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        },
    )
    .unwrap();
    let e = cl.push(&test_job("pw", json!({}))).unwrap_err();
    assert_eq!(e.code(), Some("BACKEND_UNAVAILABLE"), "{e}");
    wait_until("the holder to log the refusal", LIMIT, || {
        a.logged("peer connection refused")
    });
    // With the right password, the same node forwards.
    let right = c.node(2);
    wait_until("node-c to forward", LIMIT, || {
        right.logged("connected to the partition's holder")
            || right.logged("forwarding to the partition's holder")
    });
    let mut ok = Client::connect_with(
        &c.nodes[2].0,
        &ConnectOptions {
            password: Some("right".into()),
            timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        },
    )
    .unwrap();
    ok.push(&test_job("pw", json!({}))).unwrap();
}

#[test]
fn a_peer_frame_over_the_limit_is_refused_without_harm() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 2);
    let nodes = start(&c);
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let challenge = read_frame(&mut s).expect("a challenge");
    assert_eq!(challenge["Challenge"]["auth"], false, "{challenge}");
    let auth = json!({"Auth": {"version": 2, "node": "big", "pwdhash": null}});
    send_frame(&mut s, auth.to_string().as_bytes());
    assert_eq!(read_frame(&mut s).expect("welcome"), json!("Welcome"));
    // A frame that says it is 1 GiB long (and then a little of it): refused from the
    // length alone, without reading or allocating it.
    s.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    let _ = s.write_all(&[b'x'; 4096]);
    assert!(closed(&mut s), "the holder closes that connection");
    wait_until("the holder to log the bad frame", LIMIT, || {
        nodes[0].logged("bad frame")
    });
    // Nothing else is harmed: the standby forwards as before, the holder serves.
    let mut cl = connect(&c.nodes[1].0, None).expect("connect to the standby");
    let id = id_of(&cl.push(&test_job("after", json!({}))).unwrap());
    let mut h = connect(&c.nodes[0].0, None).expect("connect to the holder");
    assert_eq!(h.job(&id).unwrap()["state"], "available");
}

/// With `--tls-cert`, the peer listener speaks TLS only, and a standby reaches the holder
/// over TLS, checking its certificate against the cluster's own.
#[test]
fn peers_speak_tls_when_the_nodes_do() {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let Some(url) = url() else { return };
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("self-signed certificate");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let mut c = Cluster::new(url, 2);
    c.extra = vec![
        "--tls-cert".into(),
        cert.to_str().unwrap().into(),
        "--tls-key".into(),
        key.to_str().unwrap().into(),
    ];
    let _nodes = start(&c);
    let tls = |addr: &str| {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ck.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        std::io::BufReader::new(rustls::StreamOwned::new(conn, tcp))
    };
    let call = |s: &mut std::io::BufReader<rustls::StreamOwned<_, _>>, line: &str| {
        let w = s.get_mut();
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\r\n").unwrap();
        w.flush().unwrap();
        ojs_client::wire::read_reply(s).expect("reply")
    };
    let mut standby = tls(&c.nodes[1].0);
    ojs_client::wire::read_reply(&mut standby).expect("greeting");
    assert_eq!(
        call(&mut standby, r#"HELLO {"v":2}"#),
        ojs_client::Reply::Simple("OK".into())
    );
    let pushed = match call(
        &mut standby,
        &format!("PUSH {}", test_job("tls", json!({}))),
    ) {
        ojs_client::Reply::Bulk(b) => serde_json::from_slice::<Value>(&b).unwrap(),
        other => panic!("PUSH through the standby: {other:?}"),
    };
    let id = id_of(&pushed);
    let mut holder = tls(&c.nodes[0].0);
    ojs_client::wire::read_reply(&mut holder).expect("greeting");
    call(&mut holder, r#"HELLO {"v":2}"#);
    match call(&mut holder, &format!("JOB {id}")) {
        ojs_client::Reply::Bulk(b) => {
            assert_eq!(
                serde_json::from_slice::<Value>(&b).unwrap()["state"],
                "available"
            )
        }
        other => panic!("JOB on the holder: {other:?}"),
    }
    // In plain text the peer listener gives nothing away: no challenge, and the
    // connection ends.
    let mut plain = TcpStream::connect(&c.peers[0]).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    send_frame(
        &mut plain,
        json!({"Auth": {"version": 2, "node": "x", "pwdhash": null}})
            .to_string()
            .as_bytes(),
    );
    let mut first = [0u8; 4];
    let got = plain.read(&mut first).unwrap_or(0);
    assert!(
        got == 0 || first[0] == 0x15,
        "a TLS alert or a close, not a challenge: {first:?}"
    );
}

/// A subscriber on a standby sees the holder's events, in cursor order with no gap: the
/// replay and then what is committed after it subscribed (read from the holder's log
/// page by page, PROTOCOL.md §16).
#[test]
fn a_subscriber_on_a_standby_sees_the_holders_events_in_order() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 2);
    let _nodes = start(&c);
    let mut holder = client(&c.nodes[0].0, None);
    let before = id_of(&holder.push(&test_job("sub", json!({}))).unwrap());
    let mut sub = client(&c.nodes[1].0, None);
    let ok = sub
        .call(r#"SUBSCRIBE {"queues": ["sub"], "event_types": ["job.enqueued"], "after": 0}"#)
        .unwrap();
    assert_eq!(ok, ojs_client::Reply::Simple("OK".into()));
    let mut ids = vec![before];
    for i in 0..5 {
        ids.push(id_of(
            &holder.push(&test_job("sub", json!({"args": [i]}))).unwrap(),
        ));
    }
    let t0 = Instant::now();
    let mut seen = Vec::new();
    let mut cursors = Vec::new();
    while seen.len() < ids.len() {
        match sub.read_reply().expect("an event") {
            ojs_client::Reply::Bulk(b) => {
                let e: Value = serde_json::from_slice(&b).unwrap();
                seen.push(e["data"]["job_id"].as_str().unwrap().to_string());
                cursors.push(e["cursor"].as_u64().unwrap());
            }
            other => panic!("expected an event, got {other:?}"),
        }
    }
    assert_eq!(seen, ids, "every enqueue, in order, once");
    assert!(cursors.windows(2).all(|w| w[0] < w[1]), "{cursors:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// Resident memory of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// A peer that asks for page after page of events and reads none of the answers: the
/// holder stops reading it once its unsent answers hold the peer connection's budget
/// (64 MiB), instead of queueing them all, and serves everyone else meanwhile.
#[test]
fn a_peer_that_reads_no_answers_is_held_to_its_budget() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 2);
    let nodes = start(&c);
    let mut producer = client(&c.nodes[0].0, None);
    let jobs: Vec<Value> = (0..1000)
        .map(|i| test_job("pages", json!({"args": [i]})))
        .collect();
    for chunk in jobs.chunks(100) {
        producer.push_bulk(chunk).unwrap();
    }
    let pid = nodes[0].pid().unwrap();
    let before = rss_kib(pid);
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frame(&mut s).expect("a challenge");
    let auth = json!({"Auth": {"version": 2, "node": "greedy", "pwdhash": null}});
    send_frame(&mut s, auth.to_string().as_bytes());
    assert_eq!(read_frame(&mut s).expect("welcome"), json!("Welcome"));
    // 1500 pages of ~1000 events (some 350 KB each): about 500 MB if all were queued.
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut sent = 0;
    for id in 0..1500u64 {
        let req = json!({"Events": {"id": id, "part": 0, "start": {"After": 0}, "limit": 1000,
            "bytes": 32 << 20,
            "filter": {"event_types": [], "queues": [], "job_types": [], "sources": []}}});
        let body = req.to_string();
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body.as_bytes());
        if s.write_all(&frame).is_err() {
            break; // the holder stopped reading: what the test is after
        }
        sent += 1;
    }
    // The most the holder holds while it works through what it took.
    let mut after = 0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        after = after.max(rss_kib(pid));
    }
    eprintln!(
        "greedy peer: {sent} requests written; holder RSS {} MiB -> {} MiB",
        before / 1024,
        after / 1024
    );
    assert!(
        after < before + 50 * 1024,
        "the holder grew from {before} KiB to {after} KiB"
    );
    // Everyone else is served meanwhile, directly and through the standby.
    let mut other = client(&c.nodes[1].0, None);
    other.push(&test_job("pages", json!({}))).unwrap();
    producer.push(&test_job("pages", json!({}))).unwrap();
    drop(s);
}

/// The holder answers a peer's events request that finds nothing yet once an event
/// matches (a long poll, PROTOCOL.md §16), not with an empty page at once: a subscriber on
/// a standby gets live events without polling.
#[test]
fn a_peers_events_request_waits_for_the_next_event() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 2);
    let _nodes = start(&c);
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    read_frame(&mut s).expect("a challenge");
    let auth = json!({"Auth": {"version": 2, "node": "poller", "pwdhash": null}});
    send_frame(&mut s, auth.to_string().as_bytes());
    assert_eq!(read_frame(&mut s).expect("welcome"), json!("Welcome"));
    let req = json!({"Events": {"id": 1, "part": 0, "start": {"After": 0}, "limit": 100,
        "bytes": 1 << 20, "wait_ms": 8000,
        "filter": {"event_types": ["job.enqueued"], "queues": ["lp"], "job_types": [],
                   "sources": []}}});
    send_frame(&mut s, req.to_string().as_bytes());
    // The request is parked at the holder; then a job is pushed to the queue it watches.
    std::thread::sleep(Duration::from_millis(500));
    let mut producer = client(&c.nodes[1].0, None);
    producer.push(&test_job("lp", json!({}))).unwrap();
    let answer = read_frame(&mut s).expect("the events page");
    let page = &answer["Events"]["page"]["Ok"];
    assert_eq!(page["count"], json!(1), "{answer}");
}

/// Subscribers' long polls cannot hold up a peer's commands: many parked events requests
/// (each holding its page's share of the peer's budget) and then an INFO on the same peer
/// connection: the INFO is answered while the polls still wait (a few of them park, the
/// rest are answered at once).
#[test]
fn parked_event_polls_do_not_hold_up_a_peers_commands() {
    let Some(url) = url() else { return };
    let c = Cluster::new(url, 2);
    let _nodes = start(&c);
    let mut s = TcpStream::connect(&c.peers[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    read_frame(&mut s).expect("a challenge");
    let auth = json!({"Auth": {"version": 2, "node": "many-polls", "pwdhash": null}});
    send_frame(&mut s, auth.to_string().as_bytes());
    assert_eq!(read_frame(&mut s).expect("welcome"), json!("Welcome"));
    // 40 polls of 4 MiB pages: 8 MiB of the peer's 64 MiB budget each while they wait.
    for id in 0..40u64 {
        let req = json!({"Events": {"id": id, "part": 0, "start": {"After": 0}, "limit": 100,
            "bytes": 4 << 20, "wait_ms": 15000,
            "filter": {"event_types": ["job.enqueued"], "queues": ["nothing-here"],
                       "job_types": [], "sources": []}}});
        send_frame(&mut s, req.to_string().as_bytes());
    }
    let t0 = Instant::now();
    let info = json!({"Submit": {"id": 1000, "part": 0, "conn": null, "wid": null,
        "cmd": "Info", "bytes": 0, "viewed": false}});
    send_frame(&mut s, info.to_string().as_bytes());
    loop {
        let f = read_frame(&mut s).expect("a frame");
        if f["Answer"]["id"] == json!(1000) {
            break;
        }
    }
    // The parked polls wait 15 s; the INFO does not wait for them.
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}
