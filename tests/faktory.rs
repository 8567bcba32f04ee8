//! The Faktory dialect on `--faktory-listen`, over a raw socket: the exact replies a
//! Faktory client reads, and the same jobs seen from the OJS port.

mod common;

use common::raw::Raw;
use common::Server;
use serde_json::json;
use std::time::Duration;

/// A Faktory connection past HELLO (with `wid`, a worker).
struct Conn;

impl Conn {
    fn open(addr: &str, wid: Option<&str>) -> Raw {
        let mut hello = json!({"hostname": "h", "pid": 1, "v": 2, "labels": []});
        if let Some(w) = wid {
            hello["wid"] = json!(w);
        }
        Raw::hello(addr, &hello)
    }
}

fn start() -> Server {
    Server::start_with(&["--faktory-listen", "127.0.0.1:0"])
}

#[test]
fn push_fetch_ack_round_trip_faktory_names_and_fields() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w1"));
    let job = json!({"jid": "abcdefgh1234", "jobtype": "SomeWorker", "args": [1, "two"],
        "queue": "High_Prio", "retry": 5, "reserve_for": 600, "custom": {"k": "v"}, "extra": 1});
    assert_eq!(c.call(&format!("PUSH {job}")), "+OK");
    assert_eq!(c.call("FETCH default"), "$-1");
    let got = c.json("FETCH High_Prio default");
    for k in [
        "jid",
        "jobtype",
        "args",
        "queue",
        "retry",
        "reserve_for",
        "custom",
    ] {
        assert_eq!(got[k], job[k], "{k} in {got}");
    }
    // Unknown top-level fields are dropped, as Faktory does.
    assert!(got.get("extra").is_none(), "{got}");
    assert!(
        got["created_at"].is_string() && got["enqueued_at"].is_string(),
        "{got}"
    );
    // The same record on the OJS side.
    let mut o = s.client();
    let id = ojsd::protocol::faktory::ojs_id("abcdefgh1234");
    assert_eq!(common::state_of(&mut o, &id), "active");
    // The queue keeps its Faktory name in INFO (byte for byte).
    let info = c.json("INFO");
    assert!(
        info["faktory"]["queues"].get("High_Prio").is_some(),
        "{info}"
    );
    assert_eq!(c.call(r#"ACK {"jid":"abcdefgh1234"}"#), "+OK");
    assert_eq!(common::state_of(&mut o, &id), "completed");
    // ACK of a finished or unknown jid is an error (PROTOCOL.md §5.2), from any connection.
    let mut other = Conn::open(&s.faktory_addr, None);
    let e = other.call(r#"ACK {"jid":"abcdefgh1234"}"#);
    assert!(e.starts_with("-ERR ") && e.contains("is completed"), "{e}");
    assert_eq!(
        other.call(r#"ACK {"jid":"never-pushed-1"}"#),
        "-ERR Job not found"
    );
    assert_eq!(c.call("END"), "");
}

#[test]
fn bad_input_gets_faktory_errors_and_the_connection_stays() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, None);
    let e = c.call(r#"PUSH {"jid":"abcdefgh12"}"#);
    assert!(
        e.starts_with("-ERR ") && e.ends_with("jobs must have a jobtype parameter"),
        "{e}"
    );
    let e = c.call(r#"PUSH {"jid":"short","jobtype":"x"}"#);
    assert!(
        e.ends_with("jobs must have a reasonable jid parameter"),
        "{e}"
    );
    let e = c.call("BATCH NEW {}");
    assert!(
        e.ends_with("BATCH is only available in Faktory Enterprise"),
        "{e}"
    );
    let e = c.call("NOPE");
    assert_eq!(e, "-ERR unknown command NOPE");
    // The OJS dialect's commands are not this port's.
    assert!(c.call("QUEUE LIST").starts_with("-ERR"));
    assert_eq!(
        c.call(r#"PUSH {"jid":"abcdefgh12","jobtype":"x","args":[]}"#),
        "+OK"
    );
}

#[test]
fn fail_then_info_and_beat_directives() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w-beat"));
    assert_eq!(
        c.call(r#"PUSH {"jid":"failing-job-1","jobtype":"Boom","args":[]}"#),
        "+OK"
    );
    let got = c.json("FETCH default");
    assert_eq!(got["jid"], "failing-job-1");
    assert_eq!(
        c.call(r#"FAIL {"jid":"failing-job-1","errtype":"RuntimeError","message":"bad","backtrace":["a:1"]}"#),
        "+OK"
    );
    let mut o = s.client();
    let j = o
        .job(&ojsd::protocol::faktory::ojs_id("failing-job-1"))
        .unwrap();
    assert_eq!(j["state"], "retryable", "{j}");
    let info = c.json("INFO");
    assert_eq!(info["server"]["faktory_version"], "1.9.4");
    assert!(info["server"]["description"].is_string());
    assert_eq!(info["faktory"]["tasks"]["Retries"]["size"], 1, "{info}");
    // Faktory's web UI serves the same document at /stats, for monitoring that scrapes it.
    let stats = common::http::send(&s.http_addr, "GET", "/stats", "");
    assert_eq!(stats.status, 200);
    let stats = stats.json();
    assert_eq!(stats["faktory"]["tasks"]["Retries"]["size"], 1, "{stats}");
    assert_eq!(stats["server"]["faktory_version"], "1.9.4", "{stats}");
    assert_eq!(stats["faktory"]["total_failures"], 1, "{stats}");
    assert_eq!(c.call(r#"BEAT {"wid":"w-beat"}"#), "+OK");
    o.call("WORKER QUIET w-beat").unwrap();
    assert_eq!(
        c.json(r#"BEAT {"wid":"w-beat"}"#),
        json!({"state": "quiet"})
    );
}

#[test]
fn off_by_default() {
    let s = Server::start();
    assert!(s.faktory_addr.is_empty());
}

#[test]
fn ack_by_jid_after_kill_9() {
    let mut s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w-k"));
    for jid in ["survivor-123", "survivor-456"] {
        let push = format!(r#"PUSH {{"jid":"{jid}","jobtype":"K","args":[]}}"#);
        assert_eq!(c.call(&push), "+OK");
        assert_eq!(c.json("FETCH default")["jid"], jid);
    }
    drop(c);
    s.kill9();
    s.restart();
    let id = |jid: &str| ojsd::protocol::faktory::ojs_id(jid);
    let mut o = s.client();
    // The worker finished the first job while the server was down: its ACK by jid, from a
    // new connection of another worker, completes it.
    let mut c = Conn::open(&s.faktory_addr, Some("w-k2"));
    assert_eq!(c.call(r#"ACK {"jid":"survivor-123"}"#), "+OK");
    assert_eq!(common::state_of(&mut o, &id("survivor-123")), "completed");
    // The second was requeued at restart: fetched again and acknowledged by its jid.
    assert_eq!(c.json("FETCH default")["jid"], "survivor-456");
    assert_eq!(c.call(r#"ACK {"jid":"survivor-456"}"#), "+OK");
    assert_eq!(common::state_of(&mut o, &id("survivor-456")), "completed");
    // A job never handed out is not completed by an ACK: an error, and it stays available.
    assert_eq!(
        c.call(r#"PUSH {"jid":"never-fetched-1","jobtype":"K","args":[]}"#),
        "+OK"
    );
    let e = c.call(r#"ACK {"jid":"never-fetched-1"}"#);
    assert!(e.starts_with("-ERR ") && e.contains("is available"), "{e}");
    assert_eq!(
        common::state_of(&mut o, &id("never-fetched-1")),
        "available"
    );
}

#[test]
fn retry_zero_and_minus_one_are_not_retried() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w-r"));
    let mut o = s.client();
    for (jid, retry) in [("zero-retry-1", 0), ("dead-retry-1", -1)] {
        let job = json!({"jid": jid, "jobtype": "R", "args": [], "retry": retry});
        assert_eq!(c.call(&format!("PUSH {job}")), "+OK");
        assert_eq!(c.json("FETCH default")["jid"], jid);
        let fail = json!({"jid": jid, "errtype": "E", "message": "no"});
        assert_eq!(c.call(&format!("FAIL {fail}")), "+OK");
    }
    let zero = ojsd::protocol::faktory::ojs_id("zero-retry-1");
    let dead = ojsd::protocol::faktory::ojs_id("dead-retry-1");
    assert!(common::dead_ids(&mut o).contains(&dead));
    // `retry: 0`: deleted in the commit that recorded its failure, as in Faktory.
    let gone = o.job(&zero).unwrap_err().to_string();
    assert!(gone.contains("NOT_FOUND"), "{gone}");
    assert!(!common::dead_ids(&mut o).contains(&zero));
    let e = c.call(r#"PUSH {"jid":"bad-retry-1","jobtype":"R","args":[],"retry":-2}"#);
    assert!(e.starts_with("-ERR") && e.contains("retry must be"), "{e}");
}

#[test]
fn a_refetched_job_carries_the_failure_record() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w-f"));
    let mut o = s.client();
    assert_eq!(
        c.call(r#"PUSH {"jid":"retried-job-1","jobtype":"F","args":[],"retry":3}"#),
        "+OK"
    );
    assert_eq!(c.json("FETCH default")["jid"], "retried-job-1");
    let fail = r#"FAIL {"jid":"retried-job-1","errtype":"IOError","message":"disk","backtrace":["x.rb:1"]}"#;
    assert_eq!(c.call(fail), "+OK");
    common::advance(&mut o, 3600.0);
    let got = c.json("FETCH default");
    assert_eq!(got["jid"], "retried-job-1", "{got}");
    let f = &got["failure"];
    assert_eq!(f["errtype"], "IOError", "{got}");
    assert_eq!(f["message"], "disk");
    assert_eq!(f["backtrace"], json!(["x.rb:1"]));
    assert_eq!(f["retry_count"], 0, "{got}");
    assert_eq!(f["remaining"], 3, "{got}");
}

#[test]
fn mutate_by_glob_and_jobtype_flush_and_queue_remove() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, None);
    let mut o = s.client();
    let at = "2099-01-01T00:00:00Z";
    for (jid, t, arg) in [
        ("sched-aaaa-1", "Mailer", "needle"),
        ("sched-bbbb-2", "Mailer", "hay"),
        ("sched-cccc-3", "Billing", "needle"),
    ] {
        let job = json!({"jid": jid, "jobtype": t, "args": [arg], "at": at});
        assert_eq!(c.call(&format!("PUSH {job}")), "+OK");
    }
    let id = |jid: &str| ojsd::protocol::faktory::ojs_id(jid);
    // A bad glob is refused before anything changes.
    let e = c.call(r#"MUTATE {"cmd":"kill","target":"scheduled","filter":{"regexp":"[oops"}}"#);
    assert!(
        e.starts_with("-ERR ") && e.contains("not a valid glob"),
        "{e}"
    );
    // Kill the scheduled Mailer jobs whose JSON holds "needle": exactly one.
    let kill = r#"MUTATE {"cmd":"kill","target":"scheduled","filter":{"jobtype":"Mailer","regexp":"*needle*"}}"#;
    assert_eq!(c.call(kill), "+OK");
    assert_eq!(common::state_of(&mut o, &id("sched-aaaa-1")), "discarded");
    assert_eq!(common::state_of(&mut o, &id("sched-bbbb-2")), "scheduled");
    assert_eq!(common::state_of(&mut o, &id("sched-cccc-3")), "scheduled");
    // Requeue one by jid from the dead set; discard another from the scheduled set.
    let requeue = r#"MUTATE {"cmd":"requeue","target":"dead","filter":{"jids":["sched-aaaa-1"]}}"#;
    assert_eq!(c.call(requeue), "+OK");
    assert_eq!(common::state_of(&mut o, &id("sched-aaaa-1")), "available");
    let discard =
        r#"MUTATE {"cmd":"discard","target":"scheduled","filter":{"jids":["sched-cccc-3"]}}"#;
    assert_eq!(c.call(discard), "+OK");
    assert!(o.job(&id("sched-cccc-3")).is_err());
    // QUEUE REMOVE deletes the waiting jobs and forgets the queue; the scheduled one stays.
    let info = c.json("INFO");
    assert_eq!(info["faktory"]["queues"]["default"], 1, "{info}");
    assert_eq!(c.call("QUEUE REMOVE default"), "+OK");
    assert!(o.job(&id("sched-aaaa-1")).is_err());
    assert_eq!(common::state_of(&mut o, &id("sched-bbbb-2")), "scheduled");
    // FLUSH: nothing is left, and INFO's totals start again.
    assert_eq!(c.call("FLUSH"), "+OK");
    assert!(o.job(&id("sched-bbbb-2")).is_err());
    let info = c.json("INFO");
    assert_eq!(info["faktory"]["queues"], json!({}), "{info}");
    assert_eq!(info["faktory"]["tasks"]["Scheduled"]["size"], 0, "{info}");
    assert_eq!(info["faktory"]["total_processed"], 0, "{info}");
}

#[test]
fn a_worker_told_to_go_quiet_while_it_waits_gets_no_job() {
    let s = Server::start_with(&["--faktory-listen", "127.0.0.1:0", "--fetch-wait-ms", "5000"]);
    let addr = s.faktory_addr.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = Conn::open(&addr, Some("w-quiet"));
        c.call("FETCH qq")
    });
    let mut o = s.client();
    common::wait_for_blocked_fetches(&mut o, 1);
    o.call("WORKER QUIET w-quiet").unwrap();
    let mut p = Conn::open(&s.faktory_addr, None);
    assert_eq!(
        p.call(r#"PUSH {"jid":"quiet-wait-1","jobtype":"Q","args":[],"queue":"qq"}"#),
        "+OK"
    );
    assert_eq!(waiter.join().unwrap(), "$-1");
    let id = ojsd::protocol::faktory::ojs_id("quiet-wait-1");
    assert_eq!(common::state_of(&mut o, &id), "available");
}

/// A Faktory client that resends a PUSH after a network error (the first one landed) gets
/// +OK, as from Faktory, and still one job; a different job under a jid already used is
/// refused. The OJS port keeps answering DUPLICATE_JOB (PROTOCOL.md §4.1, §15).
#[test]
fn a_resent_push_is_accepted_once_and_a_different_one_refused() {
    let s = start();
    let mut c = Conn::open(&s.faktory_addr, Some("w-resend"));
    let job = json!({"jid": "resend-000001", "jobtype": "Mail", "args": [1], "queue": "q1"});
    assert_eq!(c.call(&format!("PUSH {job}")), "+OK");
    assert_eq!(
        c.call(&format!("PUSH {job}")),
        "+OK",
        "the resend is accepted"
    );
    let other = json!({"jid": "resend-000001", "jobtype": "Mail", "args": [2], "queue": "q1"});
    let e = c.call(&format!("PUSH {other}"));
    assert!(
        e.starts_with("-ERR ") && e.contains("already exists"),
        "{e}"
    );
    // PUSHB: the resent job counts as accepted, the clash is reported by position.
    let fresh = json!({"jid": "resend-000002", "jobtype": "Mail", "args": [3], "queue": "q1"});
    let reply = c.call(&format!("PUSHB {}", json!([job, other, fresh])));
    assert!(
        reply.contains("already exists") && !reply.contains("resend-000002"),
        "{reply}"
    );
    // One job per jid: two in the queue, and the first is the one first pushed.
    let got = c.json("FETCH q1");
    assert_eq!(
        (got["jid"].as_str(), &got["args"]),
        (Some("resend-000001"), &json!([1]))
    );
    assert_eq!(c.json("FETCH q1")["jid"], "resend-000002");
    assert_eq!(c.call("FETCH q1"), "$-1");
    // Even after it finished, a resend is the job already there.
    assert_eq!(c.call(r#"ACK {"jid":"resend-000001"}"#), "+OK");
    assert_eq!(c.call(&format!("PUSH {job}")), "+OK");
    assert_eq!(c.call("FETCH q1"), "$-1");
    // The OJS port does not resend-match: its clients get DUPLICATE_JOB (documented).
    let mut o = s.client();
    let id = ojsd::protocol::faktory::ojs_id("resend-000002");
    let dup = json!({"id": id, "type": "x", "args": []}).to_string();
    assert_eq!(
        common::err_code(&mut o, &format!("PUSH {dup}")),
        "DUPLICATE_JOB"
    );
}

/// A Faktory jid finds its job wherever a user types it (issue 22): `JOB <jid>` and
/// `CANCEL <jid>` on the OJS port, `GET /ojs/v1/jobs/<jid>` over HTTP, and the CLI.
#[test]
fn a_jid_finds_its_job_on_every_port() {
    let s = start();
    let mut f = Conn::open(&s.faktory_addr, None);
    let job = json!({"jid": "order-4711-abc", "jobtype": "Ship", "args": [7], "queue": "q2"});
    assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
    let id = ojsd::protocol::faktory::ojs_id("order-4711-abc");
    let mut o = s.client();
    let got = common::call_json(&mut o, "JOB order-4711-abc");
    assert_eq!(
        (got["id"].as_str(), &got["args"]),
        (Some(id.as_str()), &json!([7]))
    );
    let h = common::http::get(&s.http_addr, "/ojs/v1/jobs/order-4711-abc");
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(h.json()["job"]["id"], id.as_str());
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args(["job", "order-4711-abc", "--json"])
        .env("OJSD_ADDR", &s.addr)
        .env_remove("OJSD_PASSWORD")
        .output()
        .expect("run the CLI");
    let shown: serde_json::Value = serde_json::from_slice(&cli.stdout).expect("JSON");
    assert_eq!(shown["id"], id.as_str());
    common::call_ok(&mut o, "CANCEL order-4711-abc");
    assert_eq!(common::state_of(&mut o, &id), "cancelled");
    // An id that is neither a UUID nor a known jid is simply not found.
    assert_eq!(common::err_code(&mut o, "JOB never-pushed"), "NOT_FOUND");
}

/// On the Faktory port a job stays reserved for its `reserve_for`, as on Faktory: a worker
/// that stops heartbeating does not lose it after `--heartbeat-timeout` (an OJS-port
/// worker does), and heartbeats do not extend it past `reserve_for` (issue 22).
#[test]
fn faktory_jobs_keep_their_reserve_for() {
    let s = Server::start_with(&[
        "--faktory-listen",
        "127.0.0.1:0",
        "--heartbeat-timeout",
        "45",
    ]);
    let mut o = s.client();
    let mut f = Conn::open(&s.faktory_addr, Some("fw-1"));
    let job = json!({"jid": "reserve-00001", "jobtype": "Long", "args": [], "queue": "rq",
        "reserve_for": 600});
    assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
    assert_eq!(f.json("FETCH rq")["jid"], "reserve-00001");
    let fid = ojsd::protocol::faktory::ojs_id("reserve-00001");
    // The same on the OJS port, for contrast.
    let mut w = s.worker("ow-1");
    let oid = common::push_id(&mut o, &common::test_job("oq", json!({"timeout": 600})));
    assert_eq!(common::id_of(&common::fetch_one(&mut w, "oq")), oid);
    // Two minutes without a heartbeat from either.
    common::advance(&mut o, 120.0);
    common::wait_for(Duration::from_secs(10), "the OJS worker's job back", || {
        (common::state_of(&mut o, &oid) == "available").then_some(())
    });
    assert_eq!(common::state_of(&mut o, &fid), "active", "still reserved");
    // Heartbeats do not extend it: past 600 s it goes back, attempt counted.
    assert!(f.call(r#"BEAT {"wid":"fw-1"}"#).starts_with("+OK"));
    common::advance(&mut o, 400.0);
    assert!(f.call(r#"BEAT {"wid":"fw-1"}"#).starts_with("+OK"));
    common::advance(&mut o, 100.0);
    common::wait_for(Duration::from_secs(10), "reserve_for to run out", || {
        (common::state_of(&mut o, &fid) != "active").then_some(())
    });
    let st = common::state_of(&mut o, &fid);
    assert!(st == "available" || st == "retryable", "{st}");
    assert_eq!(o.job(&fid).expect("JOB")["attempt"], 1);
}

/// A quiet worker's FETCH waits out the fetch wait and answers null, as Faktory's does,
/// rather than at once (a client looping on FETCH would spin); a job waiting in the queue
/// is not handed to it (issue 22).
#[test]
fn a_quiet_workers_fetch_waits_before_answering_null() {
    let s = Server::start_with(&["--faktory-listen", "127.0.0.1:0", "--fetch-wait-ms", "600"]);
    let mut o = s.client();
    let mut w = Conn::open(&s.faktory_addr, Some("w-spin"));
    let job = json!({"jid": "spin-000001", "jobtype": "S", "args": [], "queue": "sq"});
    assert_eq!(w.call(&format!("PUSH {job}")), "+OK");
    o.call("WORKER QUIET w-spin").unwrap();
    let began = std::time::Instant::now();
    assert_eq!(w.call("FETCH sq"), "$-1");
    let waited = began.elapsed();
    assert!(
        waited >= Duration::from_millis(550),
        "answered after {waited:?}"
    );
    let id = ojsd::protocol::faktory::ojs_id("spin-000001");
    assert_eq!(common::state_of(&mut o, &id), "available");
}

/// Queues a Faktory client named show as it wrote them in the admin listings (TCP and
/// HTTP, hence the CLI and the dashboard), and every admin command takes that name
/// (issue 22).
#[test]
fn faktory_queue_names_show_and_filter_as_written() {
    let s = start();
    let mut f = Conn::open(&s.faktory_addr, None);
    let job = json!({"jid": "named-000001", "jobtype": "N", "args": [], "queue": "Critical_Q"});
    assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
    let mut o = s.client();
    let list = common::call_json(&mut o, "QUEUE LIST");
    let names: Vec<&str> = list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert!(names.contains(&"Critical_Q"), "{list}");
    let stats = common::call_json(&mut o, "QUEUE STATS Critical_Q");
    assert_eq!(
        (stats["name"].as_str(), &stats["counts"]["available"]),
        (Some("Critical_Q"), &json!(1))
    );
    common::call_ok(&mut o, "QUEUE PAUSE Critical_Q");
    assert_eq!(
        f.call("FETCH Critical_Q"),
        "$-1",
        "paused by its written name"
    );
    let h = common::http::get(&s.http_addr, "/ojs/v1/admin/queues");
    assert!(
        h.json()["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["name"] == "Critical_Q"),
        "{}",
        h.text()
    );
    let one = common::http::get(&s.http_addr, "/ojs/v1/admin/queues/Critical_Q");
    assert_eq!(one.json()["paused"], true, "{}", one.text());
    let r = common::http::send(
        &s.http_addr,
        "POST",
        "/ojs/v1/admin/queues/Critical_Q/resume",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.json("FETCH Critical_Q")["jid"], "named-000001");
}

/// A Faktory jobtype and queue show as written in the admin job listing and the CLI, and
/// filter by that name; the job's own resource keeps its OJS names.
#[test]
fn faktory_type_names_show_as_written_in_listings_and_the_cli() {
    let s = start();
    let mut f = Conn::open(&s.faktory_addr, None);
    let job = json!({"jid": "typed-000001", "jobtype": "SendEmail", "args": [], "queue": "Mail_Q"});
    assert_eq!(f.call(&format!("PUSH {job}")), "+OK");
    let h = common::http::get(&s.http_addr, "/ojs/v1/admin/jobs?queue=Mail_Q");
    let items = h.json()["items"].clone();
    assert_eq!(items[0]["type"], "SendEmail", "{items}");
    assert_eq!(items[0]["queue"], "Mail_Q", "{items}");
    let id = ojsd::protocol::faktory::ojs_id("typed-000001");
    let own = common::http::get(&s.http_addr, &format!("/ojs/v1/jobs/{id}")).json();
    assert!(
        own["job"]["type"].as_str().unwrap().starts_with("fk."),
        "{own}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args(["jobs", "--queue", "Mail_Q"])
        .env("OJSD_ADDR", &s.addr)
        .env_remove("OJSD_PASSWORD")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("SendEmail") && text.contains("Mail_Q"),
        "{text}"
    );
    let fetched = f.json("FETCH Mail_Q");
    assert_eq!(fetched["jobtype"], "SendEmail");
}
