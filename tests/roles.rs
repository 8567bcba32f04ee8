//! Tokens with roles (issue 19, "who may do what"), over real sockets: for each role a
//! command it may run and one it may not, on the OJS TCP port, the Faktory port and HTTP;
//! a refused command leaves the connection open; a wrong token still counts against the
//! address's allowance; `--password` alone is an admin token; tokens from the config file,
//! one of them with its secret read from a file.

mod common;

use common::http::{request, send_as, Sse};
use common::raw::Raw;
use common::Server;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

const TOKENS: &[&str] = &[
    "--token",
    "admin:adm-secret",
    "--token",
    "producer:prod-secret",
    "--token",
    "worker:work-secret",
    "--token",
    "observer:obs-secret",
];

fn start(extra: &[&str]) -> Server {
    let mut args: Vec<&str> = TOKENS.to_vec();
    args.extend_from_slice(&["--faktory-listen", "127.0.0.1:0"]);
    args.extend_from_slice(extra);
    Server::start_with(&args)
}

/// A connection to either TCP dialect past HELLO.
struct Conn;

impl Conn {
    /// Connect and HELLO with `secret` (hashed with the greeting's salt); `Err` holds the
    /// error line a refused HELLO got.
    fn open(addr: &str, secret: Option<&str>, wid: Option<&str>) -> Result<Raw, String> {
        let mut c = Raw::open(addr);
        let greeting = c.greeting.clone();
        let mut hello = json!({"hostname": "h", "pid": 1, "v": 2, "labels": []});
        if let (Some(salt), Some(i)) = (greeting["s"].as_str(), greeting["i"].as_u64()) {
            hello["pwdhash"] = json!(ojs_client::password_hash(secret.unwrap_or(""), salt, i));
        }
        if let Some(w) = wid {
            hello["wid"] = json!(w);
        }
        match c.call(&format!("HELLO {hello}")).as_str() {
            "+OK" => Ok(c),
            other => Err(other.to_string()),
        }
    }
}

fn ojs(srv: &Server, secret: &str) -> Raw {
    Conn::open(&srv.addr, Some(secret), None).expect("HELLO")
}

fn push_line(queue: &str) -> String {
    format!(r#"PUSH {{"type":"t.roles","queue":"{queue}","args":[]}}"#)
}

const PURGE: &str = r#"QUEUE PURGE q {"states":["available"],"confirm":true}"#;

fn assert_forbidden(reply: &str, verb: &str, role: &str) {
    assert_eq!(
        reply,
        format!("-ERR FORBIDDEN {verb} needs the {role} role"),
        "{verb}"
    );
}

#[test]
fn each_role_on_the_ojs_port() {
    let srv = start(&[]);

    // producer: enqueue, read its job by id, INFO; nothing of a worker's or an admin's.
    let mut p = ojs(&srv, "prod-secret");
    let job = p.json(&push_line("q"));
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(p.json(&format!("JOB {id}"))["state"], "available");
    assert!(p.json("INFO")["totals"].is_object());
    assert_forbidden(&p.call("FETCH q"), "FETCH", "worker");
    assert_forbidden(&p.call(PURGE), "QUEUE PURGE", "admin");
    assert_forbidden(&p.call("QUEUE PAUSE q"), "QUEUE PAUSE", "admin");
    assert_forbidden(&p.call("QUEUE LIST"), "QUEUE LIST", "observer");
    assert_forbidden(&p.call("SUBSCRIBE"), "SUBSCRIBE", "observer");
    // The refusals left the connection open and working.
    assert!(p.json(&push_line("q"))["id"].is_string());

    // worker: what a producer may, and FETCH/ACK/FAIL; still no purge.
    let mut w = Conn::open(&srv.addr, Some("work-secret"), Some("w-roles")).unwrap();
    let got = w.json("FETCH q");
    assert_eq!(got["id"], id.as_str());
    assert_eq!(w.call(&format!(r#"ACK {{"id":"{id}"}}"#)), "+OK");
    assert!(w.json(&push_line("q"))["id"].is_string());
    assert_forbidden(&w.call(PURGE), "QUEUE PURGE", "admin");
    assert_forbidden(&w.call("WORKER QUIET w-roles"), "WORKER QUIET", "admin");
    assert_forbidden(&w.call("JOBS {}"), "JOBS", "observer");

    // observer: reads everything, changes nothing.
    let mut o = ojs(&srv, "obs-secret");
    assert!(o.json("INFO")["totals"].is_object());
    assert!(o.json("QUEUE LIST")["queues"].is_array());
    assert_eq!(o.json(&format!("JOB {id}"))["state"], "completed");
    assert_forbidden(&o.call(&push_line("q")), "PUSH", "producer");
    assert_forbidden(&o.call("FETCH q"), "FETCH", "worker");
    assert_forbidden(&o.call(PURGE), "QUEUE PURGE", "admin");
    assert_eq!(
        o.call("SUBSCRIBE"),
        "+OK",
        "an observer may follow the events"
    );

    // admin: everything.
    let mut a = ojs(&srv, "adm-secret");
    assert_eq!(a.json(PURGE)["purged_count"], 2);
    assert_eq!(a.call("QUEUE PAUSE q"), "+OK");
    assert_eq!(a.call("WORKER QUIET w-roles"), "+OK");

    // A token that is none of them.
    let e = Conn::open(&srv.addr, Some("nobody"), None).err().unwrap();
    assert!(e.starts_with("-ERR UNAUTHENTICATED"), "{e}");
}

#[test]
fn each_role_on_the_faktory_port() {
    let srv = start(&[]);
    let fk = |secret: &str, wid: Option<&str>| {
        Conn::open(&srv.faktory_addr, Some(secret), wid).expect("Faktory HELLO")
    };
    let push = |jid: &str| format!(r#"PUSH {{"jid":"{jid}","jobtype":"Roles","args":[]}}"#);

    let mut p = fk("prod-secret", None);
    assert_eq!(p.call(&push("roles-jid-1")), "+OK");
    assert_eq!(p.call("FETCH default"), "-ERR FETCH needs the worker role");
    assert_eq!(p.call("FLUSH"), "-ERR FLUSH needs the admin role");
    assert_eq!(
        p.call("QUEUE PAUSE default"),
        "-ERR QUEUE PAUSE needs the admin role"
    );
    assert_eq!(
        p.call(&push("roles-jid-2")),
        "+OK",
        "the connection stayed open"
    );

    let mut w = fk("work-secret", Some("fw-roles"));
    let job = w.json("FETCH default");
    assert_eq!(job["jid"], "roles-jid-1");
    assert_eq!(w.call(r#"ACK {"jid":"roles-jid-1"}"#), "+OK");
    assert_eq!(w.call(r#"BEAT {"wid":"fw-roles"}"#), "+OK");
    assert_eq!(w.call("FLUSH"), "-ERR FLUSH needs the admin role");

    let mut o = fk("obs-secret", None);
    assert_eq!(o.json("INFO")["faktory"]["queues"]["default"], 1);
    assert_eq!(
        o.call(&push("roles-jid-3")),
        "-ERR PUSH needs the producer role"
    );
    assert_eq!(
        o.call(r#"MUTATE {"cmd":"clear","target":"dead"}"#),
        "-ERR MUTATE needs the admin role"
    );

    let mut a = fk("adm-secret", None);
    assert_eq!(a.call("FLUSH"), "+OK");
    assert_eq!(a.json("INFO")["faktory"]["total_queues"], 0);

    let e = Conn::open(&srv.faktory_addr, Some("prod-secret!"), None)
        .err()
        .unwrap();
    assert!(e.starts_with("-ERR "), "{e}");
}

/// The binding's 403 body for a route the token may not use.
fn assert_http_forbidden(r: &common::http::Response, role: &str) {
    assert_eq!(r.status, 403, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "x_forbidden", "{e}");
    assert_eq!(e["details"]["ojs_code"], "FORBIDDEN", "{e}");
    assert_eq!(e["retryable"], false, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.ends_with(&format!("needs the {role} role")), "{msg}");
}

fn whoami(srv: &Server, token: &str) -> Value {
    let r = send_as(&srv.http_addr, token, "GET", "/ojs/v1/whoami", "");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn each_role_over_http() {
    let srv = start(&[]);
    let h = srv.http_addr.as_str();
    let job = r#"{"type":"t.roles","args":[],"options":{"queue":"hq"}}"#;
    let fetch = r#"{"queues":["hq"],"worker_id":"hw-1"}"#;
    let purge = r#"{"states":["available"],"confirm":true}"#;

    // producer
    assert_eq!(whoami(&srv, "prod-secret")["role"], "producer");
    let r = send_as(h, "prod-secret", "POST", "/ojs/v1/jobs", job);
    assert_eq!(r.status, 201, "{}", r.text());
    let id = r.json()["job"]["id"].as_str().unwrap().to_string();
    let r = send_as(h, "prod-secret", "GET", &format!("/ojs/v1/jobs/{id}"), "");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_http_forbidden(
        &send_as(h, "prod-secret", "POST", "/ojs/v1/workers/fetch", fetch),
        "worker",
    );
    assert_http_forbidden(
        &send_as(
            h,
            "prod-secret",
            "DELETE",
            "/ojs/v1/admin/queues/hq/jobs",
            purge,
        ),
        "admin",
    );
    assert_http_forbidden(
        &send_as(h, "prod-secret", "GET", "/metrics", ""),
        "observer",
    );
    let sse = Sse::connect(
        h,
        "/ojs/v1/events/stream",
        &[("Authorization", "Bearer prod-secret")],
    );
    assert_eq!(sse.status, 403);

    // worker
    assert_eq!(whoami(&srv, "work-secret")["role"], "worker");
    let r = send_as(h, "work-secret", "POST", "/ojs/v1/workers/fetch", fetch);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["jobs"][0]["id"], id.as_str());
    let ack = format!(r#"{{"job_id":"{id}","worker_id":"hw-1"}}"#);
    let r = send_as(h, "work-secret", "POST", "/ojs/v1/workers/ack", &ack);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_http_forbidden(
        &send_as(
            h,
            "work-secret",
            "DELETE",
            "/ojs/v1/admin/queues/hq/jobs",
            purge,
        ),
        "admin",
    );
    assert_http_forbidden(
        &send_as(h, "work-secret", "GET", "/ojs/v1/admin/queues", ""),
        "observer",
    );

    // observer: reads, including the event stream and metrics; writes nothing.
    assert_eq!(whoami(&srv, "obs-secret")["role"], "observer");
    for path in [
        "/metrics",
        "/ojs/v1/queues",
        "/ojs/v1/admin/overview",
        "/ojs/v1/dead-letter",
    ] {
        let r = send_as(h, "obs-secret", "GET", path, "");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    let sse = Sse::connect(
        h,
        "/ojs/v1/events/stream",
        &[("Authorization", "Bearer obs-secret")],
    );
    assert_eq!(sse.status, 200);
    assert_http_forbidden(
        &send_as(h, "obs-secret", "POST", "/ojs/v1/jobs", job),
        "producer",
    );
    assert_http_forbidden(
        &send_as(h, "obs-secret", "POST", "/ojs/v1/admin/queues/hq/pause", ""),
        "admin",
    );
    // A route open to every token, and the same path's write that is not.
    let r = send_as(h, "obs-secret", "GET", &format!("/ojs/v1/jobs/{id}"), "");
    assert_eq!(r.status, 200);
    assert_http_forbidden(
        &send_as(h, "obs-secret", "DELETE", &format!("/ojs/v1/jobs/{id}"), ""),
        "admin",
    );

    // admin
    assert_eq!(whoami(&srv, "adm-secret")["role"], "admin");
    send_as(h, "prod-secret", "POST", "/ojs/v1/jobs", job);
    let r = send_as(
        h,
        "adm-secret",
        "DELETE",
        "/ojs/v1/admin/queues/hq/jobs",
        purge,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["purged_count"], 1);

    // No token, and a wrong one: 401 as before; health needs none.
    assert_eq!(request(h, "GET", "/ojs/v1/whoami", &[]).status, 401);
    assert_eq!(
        send_as(h, "nobody", "GET", "/ojs/v1/whoami", "").status,
        401
    );
    assert_eq!(request(h, "GET", "/ojs/v1/health", &[]).status, 200);
}

/// Without any token everything stays open, and the dashboard is told it is admin.
#[test]
fn an_open_server_is_admin_for_everyone() {
    let srv = Server::start();
    let r = request(&srv.http_addr, "GET", "/ojs/v1/whoami", &[]);
    assert_eq!(r.status, 200);
    // And the TCP port, for the dashboard's first-job help.
    let port: u16 = srv.addr.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        r.json(),
        json!({"role": "admin", "authenticated": false, "tcp_port": port})
    );
    let mut c = Conn::open(&srv.addr, None, None).unwrap();
    c.json(&push_line("q"));
    assert_eq!(c.json(PURGE)["purged_count"], 1);
}

/// Wrong tokens count against the address's allowance whichever port they come to, and
/// once it is spent even a right token is refused, on TCP and HTTP alike; commands refused
/// for their role do not count.
#[test]
fn a_wrong_token_still_counts_against_the_address() {
    let srv = start(&["--max-auth-failures", "2"]);
    // Refusals for a role are no failed credentials: they do not spend the allowance.
    let mut p = ojs(&srv, "prod-secret");
    for _ in 0..5 {
        assert_forbidden(&p.call("FETCH q"), "FETCH", "worker");
        let r = send_as(&srv.http_addr, "prod-secret", "GET", "/metrics", "");
        assert_eq!(r.status, 403);
    }
    drop(p);
    let e = Conn::open(&srv.addr, Some("guess-1"), None).err().unwrap();
    assert!(e.starts_with("-ERR UNAUTHENTICATED"), "{e}");
    let e = Conn::open(&srv.faktory_addr, Some("guess-2"), None)
        .err()
        .unwrap();
    assert!(e.starts_with("-ERR "), "{e}");
    let e = Conn::open(&srv.addr, Some("work-secret"), None)
        .err()
        .unwrap();
    assert!(e.starts_with("-ERR RATE_LIMITED"), "{e}");
    let r = request(
        &srv.http_addr,
        "GET",
        "/ojs/v1/queues",
        &[("Authorization", "Bearer obs-secret")],
    );
    assert_eq!(r.status, 429, "{}", r.text());
}

/// `--password` alone is one admin token: QUEUE PURGE on the OJS port, FLUSH on Faktory's.
#[test]
fn a_password_alone_is_an_admin_token() {
    let srv = Server::start_with(&["--password", "pw", "--faktory-listen", "127.0.0.1:0"]);
    let mut c = ojs(&srv, "pw");
    c.json(&push_line("q"));
    assert_eq!(c.json(PURGE)["purged_count"], 1);
    assert_eq!(c.call("QUEUE PAUSE q"), "+OK");
    let mut f = Conn::open(&srv.faktory_addr, Some("pw"), None).unwrap();
    assert_eq!(f.call("FLUSH"), "+OK");
    let e = Conn::open(&srv.addr, Some("pw2"), None).err().unwrap();
    assert!(e.starts_with("-ERR UNAUTHENTICATED"), "{e}");
    let port: u16 = srv.addr.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        whoami(&srv, "pw"),
        json!({"role": "admin", "authenticated": true, "tcp_port": port})
    );
    let r = send_as(
        &srv.http_addr,
        "pw",
        "POST",
        "/ojs/v1/admin/queues/q/resume",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Tokens from the config file's `tokens` list, one secret read from a file (its final
/// line break is not part of it).
#[test]
fn tokens_from_the_config_file_and_a_secret_file() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("worker.secret");
    std::fs::write(&secret, "from-a-file\n").unwrap();
    let config = dir.path().join("ojsd.toml");
    std::fs::write(
        &config,
        format!(
            "tokens = [\"producer:file-prod\", \"worker:@{}\"]\n",
            secret.display()
        ),
    )
    .unwrap();
    let srv = Server::start_with(&["--config", config.to_str().unwrap()]);
    let mut p = ojs(&srv, "file-prod");
    p.json(&push_line("cfg"));
    assert_forbidden(&p.call("FETCH cfg"), "FETCH", "worker");
    let mut w = ojs(&srv, "from-a-file");
    assert_eq!(w.json("FETCH cfg")["queue"], "cfg");
    assert!(Conn::open(&srv.addr, Some("from-a-file\n"), None).is_err());
}

/// A token spec the server cannot use stops it at startup, without showing the secret.
#[test]
fn a_bad_token_spec_stops_the_server_without_showing_its_secret() {
    for spec in [
        "boss:top-s3cret",
        "top-s3cret",
        "worker:@/nonexistent/dir/x",
        "admin:",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .args(["--data-dir", "/nonexistent/never-created"])
            .args(["--token", spec])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
        assert!(err.contains("--token #1"), "{spec}: {err}");
        assert!(!err.contains("s3cret"), "{spec}: {err}");
    }
}

/// `OJSD_TOKENS` takes several tokens, comma-separated.
#[test]
fn tokens_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--log-level", "warn", "--fetch-wait-ms", "100"])
        .arg("--data-dir")
        .arg(dir.path().join("db"))
        .env("OJSD_TOKENS", "producer:env-prod,worker:env-work")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("ojsd listening on ")
        .unwrap()
        .to_string();
    let mut p = Conn::open(&addr, Some("env-prod"), None).unwrap();
    p.json(&push_line("env"));
    assert_forbidden(&p.call("FETCH env"), "FETCH", "worker");
    let mut w = Conn::open(&addr, Some("env-work"), None).unwrap();
    assert_eq!(w.json("FETCH env")["queue"], "env");
    let _ = child.kill();
    let _ = child.wait();
}
