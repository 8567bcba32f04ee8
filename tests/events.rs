//! The event system over TCP `SUBSCRIBE` (ojs-events §2-§4, §6.1, §9, §10): lifecycle
//! sequences and their data, filters, replay by cursor and by time, the log across
//! restarts, the replay/live seam, a stalled subscriber, and concurrency. Tests wait for
//! events they know are coming (the last event of a known sequence, or a "mark": pausing
//! a fresh queue) and move time with `CLOCK ADVANCE`; the read timeout is a safety net.

mod common;

use common::*;
use ojs_client::{wire, Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One raw protocol connection, for HELLO payloads and socket options the client hides.
struct Raw {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Raw {
    fn connect(addr: &str, hello: Value, rcvbuf: Option<usize>) -> Raw {
        let sa: std::net::SocketAddr = addr.parse().expect("server address");
        let domain = socket2::Domain::for_address(sa);
        let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
        if let Some(n) = rcvbuf {
            sock.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        sock.connect(&sa.into()).expect("connect");
        let s: TcpStream = sock.into();
        s.set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        let r = BufReader::new(s.try_clone().expect("clone"));
        let mut raw = Raw { r, w: s };
        let hi = raw.reply();
        assert!(
            matches!(&hi, Reply::Simple(s) if s.starts_with("HI ")),
            "{hi:?}"
        );
        assert_eq!(raw.call(&format!("HELLO {hello}")), ok());
        raw
    }

    fn send(&mut self, line: &str) {
        self.w
            .write_all(format!("{line}\r\n").as_bytes())
            .expect("write");
    }

    fn reply(&mut self) -> Reply {
        wire::read_reply(&mut self.r).expect("read a reply (timed out?)")
    }

    fn call(&mut self, line: &str) -> Reply {
        self.send(line);
        self.reply()
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// An event stream. Every event read is checked against the envelope rules (§2) and for a
/// cursor greater than the one before.
struct Sub {
    raw: Raw,
    last: Option<u64>,
}

impl Sub {
    fn open(srv: &Server, filter: Value) -> Sub {
        Sub::open_with(&srv.addr, filter, None)
    }

    fn open_with(addr: &str, filter: Value, rcvbuf: Option<usize>) -> Sub {
        let mut raw = Raw::connect(addr, json!({"v": 2}), rcvbuf);
        assert_eq!(raw.call(&format!("SUBSCRIBE {filter}")), ok(), "{filter}");
        Sub { raw, last: None }
    }

    fn next(&mut self) -> Value {
        let e: Value = match self.raw.reply() {
            Reply::Bulk(b) => serde_json::from_slice(&b).expect("event JSON"),
            other => panic!("expected an event, got {other:?}"),
        };
        check_envelope(&e);
        let c = cursor(&e);
        assert!(
            self.last.is_none_or(|l| c > l),
            "cursor {c} after {:?}",
            self.last
        );
        self.last = Some(c);
        e
    }

    fn take(&mut self, n: usize) -> Vec<Value> {
        (0..n).map(|_| self.next()).collect()
    }

    /// Events up to and including the first one that satisfies `stop`.
    fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = vec![self.next()];
        while !stop(out.last().unwrap()) {
            out.push(self.next());
        }
        out
    }
}

fn check_envelope(e: &Value) {
    assert_eq!(e["specversion"], "1.0", "{e}");
    let id = e["id"].as_str().and_then(|s| s.strip_prefix("evt_"));
    let id = uuid::Uuid::parse_str(id.unwrap_or("")).unwrap_or_else(|_| panic!("id: {e}"));
    assert_eq!(id.get_version_num(), 7, "event ids are UUIDv7: {e}");
    assert!(
        ty(e).contains('.') && e["subject"].is_string() && e["data"].is_object(),
        "{e}"
    );
    assert!(
        e["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("ojs://ojsd/")),
        "{e}"
    );
    ts(&e["time"]);
    if ty(e).starts_with("job.") {
        let d = &e["data"];
        assert_eq!(d["job_id"], e["subject"], "job events carry job_id: {e}");
        assert!(d["job_type"].is_string() && d["queue"].is_string(), "{e}");
    }
}

/// Every field of `want` is in the event's data with that value.
fn has(e: &Value, want: Value) {
    for (k, v) in want.as_object().expect("object") {
        assert_eq!(&e["data"][k], v, "data.{k} of {e}");
    }
}

fn ty(e: &Value) -> &str {
    e["type"].as_str().unwrap_or("")
}

fn cursor(e: &Value) -> u64 {
    e["cursor"].as_u64().expect("cursor")
}

fn subject(e: &Value) -> &str {
    e["subject"].as_str().unwrap_or("")
}

fn of<'a>(events: &'a [Value], subj: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| subject(e) == subj).collect()
}

fn types<'a>(events: &[&'a Value]) -> Vec<&'a str> {
    events.iter().map(|e| ty(e)).collect()
}

fn subjects(events: &[Value]) -> Vec<&str> {
    events.iter().map(subject).collect()
}

fn job(job_type: &str, queue: &str) -> Value {
    json!({"type": job_type, "args": [], "queue": queue})
}

fn push_n(c: &mut Client, n: usize) -> Vec<String> {
    (0..n).map(|_| push_id(c, &job("t", "q"))).collect()
}

/// Pause a fresh queue: its `queue.paused` comes after every event committed before it.
fn mark(c: &mut Client) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let q = format!("mark-{}", N.fetch_add(1, Ordering::Relaxed));
    c.pause_queues(&[&q]).expect("QUEUE PAUSE");
    q
}

fn is_mark(q: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| ty(e) == "queue.paused" && subject(e) == q
}

/// Everything an unfiltered stream delivers before a fresh mark.
fn drain(sub: &mut Sub, c: &mut Client) -> Vec<Value> {
    let q = mark(c);
    let mut v = sub.until(is_mark(&q));
    v.pop();
    v
}

fn assert_consecutive(events: &[Value], first: u64) {
    let cursors: Vec<u64> = events.iter().map(cursor).collect();
    let want: Vec<u64> = (first..first + events.len() as u64).collect();
    assert_eq!(cursors, want, "cursors must have no gap and no repeat");
}

// ---------------------------------------------------------------------------------------
// ojs-events §10: lifecycle scenarios
// ---------------------------------------------------------------------------------------

#[test]
fn successful_job_is_enqueued_started_completed() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-ok"));
    let new = json!({"type": "email.send", "args": ["a@b.c"], "queue": "email", "priority": 3});
    let id = push_id(&mut c, &new);
    assert_eq!(id_of(&fetch_one(&mut w, "email")), id);
    advance(&mut c, 1.5);
    w.ack(&id, Some(&json!({"message_id": "m1"}))).expect("ACK");

    let evs = sub.until(|e| ty(e) == "job.completed");
    let mine = of(&evs, &id);
    assert_eq!(
        types(&mine),
        ["job.enqueued", "job.started", "job.completed"]
    );
    let [enq, started, done] = mine[..] else {
        unreachable!()
    };
    assert_eq!(enq["source"], "ojs://ojsd/api");
    has(
        enq,
        json!({"job_type": "email.send", "queue": "email", "priority": 3}),
    );
    for e in [started, done] {
        assert_eq!(e["source"], "ojs://ojsd/workers/w-ok");
    }
    has(started, json!({"worker_id": "w-ok", "attempt": 1}));
    has(done, json!({"attempt": 1, "result": {"message_id": "m1"}}));
    let ms = done["data"]["duration_ms"]
        .as_i64()
        .expect("integer duration_ms");
    assert!(
        (1500..6500).contains(&ms),
        "duration_ms {ms} follows the engine clock"
    );
}

#[test]
fn failing_job_retries_twice_then_is_discarded() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0, "event_types": ["job.*"]}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-fail"));
    let retry = json!({"max_attempts": 3, "initial_interval": "PT1S", "jitter": false});
    let new = json!({"type": "pay.charge", "args": [], "queue": "pay", "retry": retry});
    let id = push_id(&mut c, &new);
    let mut evs = Vec::new();
    for attempt in 1..=3u64 {
        assert_eq!(fetch_one(&mut w, "pay")["attempt"], attempt);
        let trace = ["at charge".to_string(), "at main".to_string()];
        let msg = format!("gateway timeout {attempt}");
        w.fail(&id, "handler_error", &msg, &trace).expect("FAIL");
        let last = if attempt < 3 {
            "job.retrying"
        } else {
            "job.discarded"
        };
        evs.extend(sub.until(|e| ty(e) == last));
        if attempt < 3 {
            let r = evs.last().unwrap();
            let delay = secs_between(ts(&r["time"]), ts(&r["data"]["next_retry_at"]));
            assert!(
                (delay - attempt as f64).abs() < 0.002,
                "retry {attempt}: {delay}s"
            );
            advance(&mut c, delay + 0.5); // past next_retry_at
        }
    }
    let mine = of(&evs, &id);
    assert_eq!(mine.len(), evs.len(), "only this job's events");
    #[rustfmt::skip]
    assert_eq!(types(&mine), ["job.enqueued", "job.started", "job.failed", "job.retrying",
        "job.started", "job.failed", "job.retrying", "job.started", "job.failed", "job.discarded"]);
    let mut attempt = 0u64;
    for e in &mine[1..] {
        assert_eq!(e["source"], "ojs://ojsd/workers/w-fail", "{e}");
        attempt += (ty(e) == "job.started") as u64;
        let short =
            json!({"code": "handler_error", "message": format!("gateway timeout {attempt}")});
        match ty(e) {
            "job.started" => has(e, json!({"attempt": attempt, "worker_id": "w-fail"})),
            "job.failed" => {
                let mut full = short.clone();
                full["retryable"] = json!(attempt < 3);
                full["stack_trace"] = json!("at charge\nat main");
                has(e, json!({"attempt": attempt, "error": full}));
                assert!(e["data"]["duration_ms"].is_i64(), "{e}");
            }
            "job.retrying" => {
                has(
                    e,
                    json!({"attempt": attempt, "max_attempts": 3, "error": short}),
                );
                ts(&e["data"]["next_retry_at"]);
            }
            _ => has(e, json!({"total_attempts": 3, "last_error": short})),
        }
    }
    assert_eq!(state_of(&mut c, &id), "discarded");
}

#[test]
fn scheduled_job_cancelled_before_it_runs() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let at = rfc3339(server_now(&mut c) + chrono::Duration::hours(1));
    let new = json!({"type": "campaign.launch", "args": [], "queue": "mkt", "scheduled_at": at});
    let id = push_id(&mut c, &new);
    c.cancel(&id).expect("CANCEL");
    advance(&mut c, 7200.0); // the cancelled job's promotion timer must not fire
    let evs = drain(&mut sub, &mut c);
    let mine = of(&evs, &id);
    assert_eq!(types(&mine), ["job.scheduled", "job.cancelled"]);
    assert_eq!(ts(&mine[0]["data"]["scheduled_at"]), ts(&json!(at)));
    has(
        mine[1],
        json!({"queue": "mkt", "job_type": "campaign.launch", "cancelled_by": "api"}),
    );
    assert!(mine.iter().all(|e| e["source"] == "ojs://ojsd/api"));
}

#[test]
fn job_expires_before_anyone_fetches_it() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let exp = rfc3339(server_now(&mut c) + chrono::Duration::seconds(30));
    let new = json!({"type": "notify.push", "args": [], "queue": "notify", "expires_at": exp});
    let id = push_id(&mut c, &new);
    advance(&mut c, 31.0);
    let evs = sub.until(|e| ty(e) == "job.expired");
    let mine = of(&evs, &id);
    assert_eq!(types(&mine), ["job.enqueued", "job.expired"]);
    let (e, d) = (mine[1], &mine[1]["data"]);
    assert_eq!(e["source"], "ojs://ojsd/scheduler");
    let (created, expired, exp) = (ts(&d["created_at"]), ts(&d["expired_at"]), ts(&json!(exp)));
    assert_eq!(d["ttl_ms"], (exp - created).num_milliseconds(), "{e}");
    assert!(
        expired >= exp && secs_between(created, expired) < 40.0,
        "{e}"
    );
}

#[test]
fn worker_started_heartbeat_quiet_stopped() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let queues = json!(["email", "default"]);
    let hello = json!({"v": 2, "wid": "w-life", "hostname": "box1", "queues": queues,
        "concurrency": 4});
    let mut w1 = Raw::connect(&srv.addr, hello.clone(), None);
    let id = push_id(&mut c, &job("email.send", "email"));
    assert!(matches!(w1.call("FETCH email"), Reply::Bulk(_)));
    assert_eq!(w1.call(&format!("ACK {}", json!({"id": id}))), ok());
    assert_eq!(w1.call(r#"BEAT {"wid":"w-life"}"#), ok());
    c.quiet_worker("w-life").expect("WORKER QUIET");
    let quiet = w1.call(r#"BEAT {"wid":"w-life"}"#);
    assert!(matches!(&quiet, Reply::Bulk(b) if b.starts_with(br#"{"state":"quiet""#)));
    // A second connection of the same worker is not a new start, closing it not a stop.
    let mut w2 = Raw::connect(&srv.addr, hello, None);
    advance(&mut c, 5.0);
    w2.send("END");
    w1.send("END");
    let mut evs = sub.until(|e| ty(e) == "worker.stopped");
    evs.extend(drain(&mut sub, &mut c));
    let mine = of(&evs, "w-life");
    #[rustfmt::skip]
    assert_eq!(types(&mine), ["worker.started", "worker.heartbeat", "worker.quiet",
        "worker.heartbeat", "worker.stopped"]);
    for e in &mine {
        has(e, json!({"worker_id": "w-life"}));
        let from_worker = e["source"] == "ojs://ojsd/workers/w-life";
        assert!(from_worker || ty(e) == "worker.quiet", "{e}");
    }
    has(
        mine[0],
        json!({"queues": queues, "concurrency": 4, "hostname": "box1"}),
    );
    has(
        mine[1],
        json!({"active_jobs": 0, "queues": queues, "state": "running"}),
    );
    has(mine[2], json!({"active_jobs": 0}));
    has(mine[3], json!({"state": "quiet"}));
    has(mine[4], json!({"reason": "shutdown", "jobs_completed": 1}));
    let uptime = mine[4]["data"]["uptime_ms"].as_i64();
    assert!(uptime.is_some_and(|u| u >= 5000), "{}", mine[4]);
}

#[test]
fn queue_paused_and_resumed() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-q"));
    c.pause_queues(&["email"]).expect("PAUSE");
    c.pause_queues(&["email"]).expect("PAUSE again: no event");
    c.resume_queues(&["email"]).expect("RESUME");
    c.resume_queues(&["email"]).expect("RESUME again: no event");
    w.pause_queues(&["reports"]).expect("PAUSE by a worker");
    let evs = drain(&mut sub, &mut c);
    let email = of(&evs, "email");
    assert_eq!(types(&email), ["queue.paused", "queue.resumed"]);
    assert_eq!(
        email[0]["data"],
        json!({"queue": "email", "paused_by": "api"})
    );
    assert_eq!(
        email[1]["data"],
        json!({"queue": "email", "resumed_by": "api"})
    );
    assert!(email.iter().all(|e| e["source"] == "ojs://ojsd/api"));
    let reports = of(&evs, "reports");
    assert_eq!(types(&reports), ["queue.paused"]);
    has(
        reports[0],
        json!({"queue": "reports", "paused_by": "worker:w-q"}),
    );
}

#[test]
fn trace_id_is_on_every_job_event_and_progress_is_reported() {
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let (mut c, mut w) = (srv.client(), srv.worker("w-tr"));
    let (t1, t2) = (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "0af7651916cd43dd8448eb211c80319c",
    );
    let traced = |meta: Value| json!({"type": "order.go", "args": [], "queue": "o", "meta": meta});
    let a = push_id(&mut c, &traced(json!({"trace_id": t1})));
    let tp = format!("00-{t2}-b7ad6b7169203331-01");
    let b = push_id(&mut c, &traced(json!({"traceparent": tp})));
    let plain = push_id(&mut c, &job("order.go", "o"));

    assert_eq!(id_of(&fetch_one(&mut w, "o")), a);
    for p in [
        json!({"id": a, "percent": 25, "message": "1 of 4"}),
        json!({"id": a, "percent": 75.5}),
    ] {
        assert_eq!(w.call(&format!("PROGRESS {p}")).expect("PROGRESS"), ok());
    }
    w.beat("w-tr", std::slice::from_ref(&a)).expect("BEAT");
    w.ack(&a, None).expect("ACK");
    assert_eq!(id_of(&fetch_one(&mut w, "o")), b);
    w.fail(&b, "handler_error", "no stock", &[]).expect("FAIL");
    c.cancel(&b).expect("CANCEL");
    assert_eq!(id_of(&fetch_one(&mut w, "o")), plain);
    w.ack(&plain, None).expect("ACK");
    let evs = drain(&mut sub, &mut c);

    let ea = of(&evs, &a);
    #[rustfmt::skip]
    assert_eq!(types(&ea), ["job.enqueued", "job.started", "job.progress", "job.progress",
        "job.heartbeat", "job.completed"]);
    ea.iter().for_each(|e| has(e, json!({"trace_id": t1})));
    #[rustfmt::skip]
    has(ea[2], json!({"worker_id": "w-tr", "attempt": 1, "progress_percent": 25.0,
        "progress_message": "1 of 4"}));
    has(
        ea[3],
        json!({"progress_percent": 75.5, "progress_message": null}),
    );
    assert_eq!(ea[2]["source"], "ojs://ojsd/workers/w-tr");
    has(ea[4], json!({"worker_id": "w-tr", "attempt": 1}));
    ts(&ea[4]["data"]["visible_until"]);

    let eb = of(&evs, &b);
    #[rustfmt::skip]
    assert_eq!(types(&eb), ["job.enqueued", "job.started", "job.failed", "job.retrying",
        "job.cancelled"]);
    eb.iter().for_each(|e| has(e, json!({"trace_id": t2})));
    let ep = of(&evs, &plain);
    assert_eq!(ep.len(), 3);
    assert!(
        ep.iter().all(|e| e["data"].get("trace_id").is_none()),
        "{ep:?}"
    );
}

// ---------------------------------------------------------------------------------------
// §6.1 filters
// ---------------------------------------------------------------------------------------

#[test]
fn filters_deliver_exactly_the_matching_events() {
    type Pred = fn(&Value) -> bool;
    #[rustfmt::skip]
    let filters: [(Value, Pred); 8] = [
        (json!({"event_types": ["job.*"]}), |e| ty(e).starts_with("job.")),
        (json!({"event_types": ["job.completed", "queue.paused"]}),
            |e| ["job.completed", "queue.paused"].contains(&ty(e))),
        (json!({"event_types": ["job.c*"], "queues": ["q-a", "q-b"]}),
            |e| ty(e).starts_with("job.c") && in_queue(e, &["q-a", "q-b"])),
        (json!({"queues": ["q-a"]}), |e| in_queue(e, &["q-a"])),
        (json!({"job_types": ["t.x"]}), |e| e["data"]["job_type"] == "t.x"),
        (json!({"event_types": ["job.started", "job.completed"], "queues": ["q-a"],
                "job_types": ["t.x"]}),
            |e| ["job.started", "job.completed"].contains(&ty(e)) && in_queue(e, &["q-a"])
                && e["data"]["job_type"] == "t.x"),
        (json!({"sources": ["ojs://ojsd/workers/*"]}),
            |e| e["source"].as_str().is_some_and(|s| s.starts_with("ojs://ojsd/workers/"))),
        (json!({"sources": ["ojs://ojsd/*"], "queues": ["q-c", "q-a"]}),
            |e| in_queue(e, &["q-c", "q-a"])),
    ];
    let srv = Server::start();
    let mut all = Sub::open(&srv, json!({"after": 0}));
    let mut subs: Vec<Sub> = filters
        .iter()
        .map(|(f, _)| Sub::open(&srv, json!({"after": 0}).merge(f)))
        .collect();
    let (mut c, mut w) = (srv.client(), srv.worker("w-f"));
    let no_retry = json!({"type": "t.y", "args": [], "queue": "q-a", "retry": {"max_attempts": 1}});
    let j1 = push_id(&mut c, &job("t.x", "q-a"));
    let j2 = push_id(&mut c, &no_retry);
    let j3 = push_id(&mut c, &job("t.x", "q-b"));
    let j4 = push_id(&mut c, &job("t.y", "q-b"));
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), j1);
    w.ack(&j1, None).expect("ACK");
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), j2);
    w.fail(&j2, "boom", "no", &[]).expect("FAIL");
    c.cancel(&j3).expect("CANCEL");
    assert_eq!(id_of(&fetch_one(&mut w, "q-b")), j4);
    w.ack(&j4, None).expect("ACK");
    c.pause_queues(&["q-c"]).expect("PAUSE");
    c.resume_queues(&["q-c"]).expect("RESUME");
    // The sentinel: its job.completed matches every filter above and is the last event.
    let s = push_id(&mut c, &job("t.x", "q-a"));
    assert_eq!(id_of(&fetch_one(&mut w, "q-a")), s);
    w.ack(&s, None).expect("ACK");
    let sentinel = |e: &Value| ty(e) == "job.completed" && subject(e) == s;

    let oracle = all.until(sentinel);
    assert_eq!(oracle.len(), 18, "{oracle:#?}");
    for ((f, pred), sub) in filters.iter().zip(&mut subs) {
        let got = sub.until(sentinel);
        let want: Vec<&Value> = oracle.iter().filter(|e| pred(e)).collect();
        assert!(
            want.len() >= 4 && want.len() < oracle.len(),
            "filter {f} is a real test"
        );
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "filter {f}");
    }
    // The AND filter, spelled out.
    let and: Vec<_> = oracle
        .iter()
        .filter(|e| filters[5].1(e))
        .map(|e| (ty(e), subject(e)))
        .collect();
    let (j1, s) = (j1.as_str(), s.as_str());
    #[rustfmt::skip]
    assert_eq!(and, [("job.started", j1), ("job.completed", j1), ("job.started", s),
        ("job.completed", s)]);
}

fn in_queue(e: &Value, names: &[&str]) -> bool {
    names.iter().any(|n| e["data"]["queue"] == *n)
}

trait Merge {
    fn merge(self, other: &Value) -> Value;
}

impl Merge for Value {
    fn merge(mut self, other: &Value) -> Value {
        for (k, v) in other.as_object().expect("object") {
            self[k] = v.clone();
        }
        self
    }
}

// ---------------------------------------------------------------------------------------
// Replay (§9.1) and the durable log
// ---------------------------------------------------------------------------------------

#[test]
fn resubscribe_after_last_cursor_gets_exactly_the_missed_events_then_live() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut s1 = Sub::open(&srv, json!({"after": 0}));
    let first = push_n(&mut c, 3);
    let seen = s1.take(3);
    assert_eq!(subjects(&seen), first);
    let last = cursor(&seen[2]);
    drop(s1);
    let mut missed = push_n(&mut c, 3);
    c.pause_queues(&["q"]).expect("PAUSE");
    missed.push("q".into());

    let mut s2 = Sub::open(&srv, json!({"after": last}));
    let replay = s2.take(4);
    assert_consecutive(&replay, last + 1);
    assert_eq!(subjects(&replay), missed);
    let live = push_id(&mut c, &job("t", "q"));
    let e = s2.next();
    assert_eq!((subject(&e), cursor(&e)), (live.as_str(), last + 5));
}

#[test]
fn resubscribe_since_a_time_replays_from_that_time_then_live() {
    let srv = Server::start();
    let mut c = srv.client();
    let mut s1 = Sub::open(&srv, json!({"after": 0}));
    push_n(&mut c, 2);
    let seen = s1.take(2);
    drop(s1);
    advance(&mut c, 10.0);
    let missed = push_n(&mut c, 3);

    let since = rfc3339(ts(&seen[1]["time"]) + chrono::Duration::seconds(5));
    let mut s2 = Sub::open(&srv, json!({"since": since}));
    let replay = s2.take(3);
    assert_consecutive(&replay, cursor(&seen[1]) + 1);
    assert_eq!(subjects(&replay), missed);
    let live = push_id(&mut c, &job("t", "q"));
    assert_eq!(subject(&s2.next()), live);
    // A time before everything replays the whole log.
    let mut s3 = Sub::open(&srv, json!({"since": "2000-01-01T00:00:00Z"}));
    assert_consecutive(&s3.take(6), 1);
}

#[test]
fn events_survive_restart_and_kill_and_cursors_keep_increasing() {
    let mut srv = Server::start();
    let (mut c, mut w) = (srv.client(), srv.client());
    let mut s = Sub::open(&srv, json!({"after": 0}));
    let id = push_id(&mut c, &job("t", "q"));
    fetch_one(&mut w, "q");
    w.ack(&id, Some(&json!([1, 2]))).expect("ACK");
    let q = mark(&mut c);
    let before = s.until(is_mark(&q));
    assert_eq!(before.len(), 4);
    drop((s, c, w));

    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": 0}));
    assert_eq!(
        s.take(before.len()),
        before,
        "the log is replayed as it was written"
    );
    let top = cursor(before.last().unwrap());
    let id2 = push_id(&mut c, &job("t", "q"));
    let e = s.next();
    assert_eq!((subject(&e), cursor(&e)), (id2.as_str(), top + 1));

    // An answered PUSH is in the log even when the process is killed right after.
    srv.kill9();
    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": top}));
    assert_eq!(s.next(), e);
    let id3 = push_id(&mut c, &job("t", "q"));
    let e3 = s.next();
    assert_eq!((subject(&e3), cursor(&e3)), (id3.as_str(), top + 2));
}

/// `SUBSCRIBE` from `after` on a fresh connection: `Some(code)` for an error reply.
fn subscribe_error(srv: &Server, after: u64) -> Option<String> {
    let mut raw = Raw::connect(&srv.addr, json!({"v": 2}), None);
    match raw.call(&format!(r#"SUBSCRIBE {{"after": {after}}}"#)) {
        Reply::Error { code, .. } => {
            // The stream is closed after the error.
            assert!(matches!(wire::read_reply(&mut raw.r), Err(e) if e.is_connection_error()));
            Some(code)
        }
        _ => None,
    }
}

#[test]
fn pruned_cursor_is_refused_and_cursors_continue_after_restart() {
    let mut srv = Server::start();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": 0}));
    push_id(&mut c, &job("t", "q"));
    let top = cursor(&s.next());
    drop(s);
    // Past the 7-day retention: the engine prunes the log within about a second.
    advance(&mut c, 8.0 * 86_400.0);
    let expired = || subscribe_error(&srv, 0).filter(|code| code == "CURSOR_EXPIRED");
    wait_for(Duration::from_secs(5), "the log to be pruned", expired);
    let mut s = Sub::open(&srv, json!({"after": top}));
    push_id(&mut c, &job("t", "q"));
    assert_eq!(cursor(&s.next()), top + 1);
    drop(s);
    advance(&mut c, 8.0 * 86_400.0);
    let expired = || subscribe_error(&srv, top).filter(|code| code == "CURSOR_EXPIRED");
    wait_for(
        Duration::from_secs(5),
        "the log to be pruned again",
        expired,
    );
    // Restarting on an empty log: cursors still continue where they were.
    srv.restart();
    let mut c = srv.client();
    let mut s = Sub::open(&srv, json!({"after": top + 1}));
    let id = push_id(&mut c, &job("t", "q"));
    let e = s.next();
    assert_eq!((subject(&e), cursor(&e)), (id.as_str(), top + 2));
}

// ---------------------------------------------------------------------------------------
// Live subscriptions, the replay/live seam, slow subscribers, concurrency
// ---------------------------------------------------------------------------------------

#[test]
fn live_only_subscription_covers_everything_after_its_ok() {
    let srv = Server::start();
    let mut c = srv.client();
    push_n(&mut c, 3); // history a live subscription does not replay
    for round in 0..40 {
        let mut s = Sub::open(&srv, json!({}));
        let ids = push_n(&mut c, 2);
        assert_eq!(subject(&s.next()), ids[0], "round {round}");
    }
}

#[test]
fn replay_joins_live_without_gap_or_duplicate_while_jobs_arrive() {
    let srv = Server::start();
    let mut all = Sub::open(&srv, json!({"after": 0}));
    let stop = Arc::new(AtomicBool::new(false));
    let pushed = Arc::new(AtomicU64::new(0));
    let producer = {
        let (mut c, stop, pushed) = (srv.client(), stop.clone(), pushed.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                push_id(&mut c, &job("t", "seam"));
                pushed.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let head = all.take(20);
    let early = cursor(&head[4]);
    let mut s = Sub::open(&srv, json!({"after": early}));
    // One event per push: read until well past the head at the time we subscribed.
    let target = pushed.load(Ordering::Relaxed) + 300;
    let mut got = s.until(|e| cursor(e) >= target);
    stop.store(true, Ordering::Relaxed);
    producer.join().expect("producer");
    let mut c = srv.client();
    let q = mark(&mut c);
    got.extend(s.until(is_mark(&q)));
    let mut full = head;
    full.extend(all.until(is_mark(&q)));
    assert_consecutive(&full, 1);
    assert_consecutive(&got, early + 1);
    assert_eq!(got[..], full[early as usize..]);
}

#[test]
fn stalled_subscriber_does_not_block_the_engine_and_catches_up_in_order() {
    // 6,600 job events of at least 1.86 KB: more than the 4,096-event live buffer plus
    // what the sockets can hold (Linux's tcp_wmem max is 4 MiB: ~2,250 events; the receive
    // buffer is tiny), so the stalled subscriber is necessarily cut from the live feed and
    // catches up from the log. (Far fewer jobs than 20,000 keep a debug build under 10 s.)
    const JOBS: usize = 2200;
    const BATCH: usize = 550;
    let srv = Server::start();
    let mut stalled = Sub::open_with(&srv.addr, json!({"after": 0}), Some(4096));
    let trace = "a".repeat(1500); // copied into every job event
    let new = json!({"type": "t", "args": [], "queue": "bulk", "meta": {"trace_id": trace}});
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (mut c, mut w) = (srv.client(), srv.worker("w-bulk"));
    let work = std::thread::spawn(move || {
        for _ in 0..JOBS / BATCH {
            // Client-side ids, and FIFO: the FETCH returns exactly the batch just pushed.
            let ids: Vec<String> = (0..BATCH).map(|_| new_id()).collect();
            let jobs: Vec<Value> = ids
                .iter()
                .map(|id| new.clone().merge(&json!({"id": id})))
                .collect();
            let pushed = c.call(&format!("PUSHB {}", Value::from(jobs)));
            assert!(matches!(pushed, Ok(Reply::Bulk(_))), "{pushed:?}");
            let fetched = w.call(&format!("FETCH bulk COUNT {BATCH}"));
            assert!(matches!(fetched, Ok(Reply::Bulk(_))), "{fetched:?}");
            for id in &ids {
                w.send_line(&format!("ACK {}", json!({"id": id})))
                    .expect("send");
            }
            w.flush().expect("flush");
            for _ in &ids {
                assert_eq!(w.read_reply().expect("ACK"), ok());
            }
        }
        let _ = done_tx.send(());
        (c, w)
    });
    let finished = done_rx.recv_timeout(Duration::from_secs(60));
    finished.expect("the workload finishes while a subscriber is stalled");
    let (mut c, _w) = work.join().expect("workload");
    let q = mark(&mut c);
    let all = Sub::open(&srv, json!({"after": 0})).until(is_mark(&q));
    assert_eq!(
        all.len(),
        3 * JOBS + 2,
        "worker.started, 3 events per job, the mark"
    );
    assert_consecutive(&all, 1);
    let got = stalled.until(is_mark(&q));
    assert_eq!(got, all);
}

#[test]
fn concurrent_workers_unique_ids_and_per_job_order() {
    const JOBS: usize = 1000;
    let srv = Server::start();
    let mut sub = Sub::open(&srv, json!({"after": 0}));
    let mut c = srv.client();
    let mut ids = HashSet::new();
    for _ in 0..JOBS / 250 {
        let stored = c.push_bulk(&vec![job("t", "conc"); 250]).expect("PUSHB");
        ids.extend(stored.iter().map(id_of));
    }
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let mut w = srv.worker(&format!("w-c{i}"));
            std::thread::spawn(move || {
                let mut n = 0;
                while let Some(j) = w.fetch(&["conc"]).expect("FETCH") {
                    w.ack(&id_of(&j), None).expect("ACK");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let done: usize = workers.into_iter().map(|t| t.join().expect("worker")).sum();
    assert_eq!(done, JOBS);
    let evs = drain(&mut sub, &mut c);
    let unique: HashSet<&str> = evs.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(unique.len(), evs.len(), "event ids are unique");
    let mut per_job: HashMap<&str, Vec<&Value>> = HashMap::new();
    for e in evs.iter().filter(|e| ty(e).starts_with("job.")) {
        per_job.entry(subject(e)).or_default().push(e);
    }
    assert_eq!(per_job.len(), JOBS);
    for (id, list) in &per_job {
        assert!(ids.contains(*id));
        // `Sub::next` checked that cursors increase, so list order is cursor order.
        assert_eq!(
            types(list),
            ["job.enqueued", "job.started", "job.completed"],
            "{id}"
        );
        let wid = list[1]["data"]["worker_id"].as_str().unwrap();
        assert_eq!(list[2]["source"], format!("ojs://ojsd/workers/{wid}"));
    }
}

#[test]
fn bad_subscribe_payloads_are_refused_and_the_connection_keeps_working() {
    let srv = Server::start();
    let opts = ConnectOptions {
        timeout: Some(READ_TIMEOUT),
        ..Default::default()
    };
    let mut c = Client::connect_with(&srv.addr, &opts).expect("connect");
    for bad in [
        r#"{"queues":"x"}"#,
        r#"{"event_types":[1]}"#,
        r#"{"after":-1}"#,
        r#"{"after":1.5}"#,
        r#"{"after":1,"since":"2024-01-01T00:00:00Z"}"#,
        r#"{"since":"yesterday"}"#,
        r#"{"since":"2024-01-01T00:00:00"}"#,
        r#"["job.*"]"#,
        "not json",
    ] {
        let code = err_code(&mut c, &format!("SUBSCRIBE {bad}"));
        assert_eq!(code, "MALFORMED_COMMAND", "{bad}");
        c.info().expect("the connection still takes commands");
    }
    // ... and can still become an event stream.
    let id = push_id(&mut c, &job("t", "q"));
    assert_eq!(c.call(r#"SUBSCRIBE {"after":0}"#).expect("SUBSCRIBE"), ok());
    match c.read_reply().expect("event") {
        Reply::Bulk(b) => assert_eq!(serde_json::from_slice::<Value>(&b).unwrap()["subject"], id),
        other => panic!("expected an event, got {other:?}"),
    }
}
