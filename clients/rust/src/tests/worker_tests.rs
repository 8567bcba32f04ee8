use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use super::{serve_many, Conn, PLAIN_HI};
use crate::{Error, JobOutcome, Worker, WorkerStats};

const WAIT: Duration = Duration::from_secs(10);

type BeatHook = Box<dyn Fn(&Value) + Send + Sync>;

#[derive(Debug)]
enum Ev {
    Hello(Value),
    Fetch,
    Ack(Value),
    Fail(Value),
    Beat(Value),
    End,
}

/// A tiny in-memory broker: a job queue, scripted BEAT replies, and an
/// event stream of everything the worker sent.
#[derive(Default)]
struct Broker {
    jobs: Mutex<VecDeque<Value>>,
    resolved: Mutex<usize>,
    resolved_cv: Condvar,
    events: Mutex<Option<Sender<Ev>>>,
    /// Hold every BEAT reply until this many ACK/FAILs arrived, then
    /// answer "terminate": no timing assumptions.
    terminate_after: Option<usize>,
    /// JSON payloads for the first BEAT replies; `+OK` afterwards.
    beat_script: Mutex<VecDeque<&'static str>>,
    on_beat: Option<BeatHook>,
    /// Hang up on the first FETCH to force a reconnect.
    drop_first_fetch: AtomicBool,
}

impl Broker {
    fn start(mut self, jobs: Vec<Value>) -> (String, Receiver<Ev>) {
        let (tx, rx) = channel();
        self.events = Mutex::new(Some(tx));
        self.jobs = Mutex::new(jobs.into());
        let b = Arc::new(self);
        let addr = serve_many(move |c| serve_conn(c, &b));
        (addr, rx)
    }

    fn emit(&self, ev: Ev) {
        if let Some(tx) = self.events.lock().unwrap().as_ref() {
            let _ = tx.send(ev);
        }
    }
}

fn serve_conn(mut c: Conn, b: &Broker) {
    b.emit(Ev::Hello(c.handshake(PLAIN_HI)));
    while let Some(line) = c.line() {
        let (verb, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let payload = || serde_json::from_str::<Value>(rest).unwrap();
        match verb {
            "FETCH" => {
                if b.drop_first_fetch.swap(false, Ordering::SeqCst) {
                    return;
                }
                b.emit(Ev::Fetch);
                next_job(&mut c, b);
            }
            "ACK" | "FAIL" => {
                let body = payload();
                let fetch = verb == "ACK" && body.get("fetch").is_some();
                b.emit(if verb == "ACK" {
                    Ev::Ack(body)
                } else {
                    Ev::Fail(body)
                });
                *b.resolved.lock().unwrap() += 1;
                b.resolved_cv.notify_all();
                if fetch {
                    next_job(&mut c, b); // ACK … fetch: the reply is the next job
                } else {
                    c.send("+OK\r\n");
                }
            }
            "BEAT" => {
                let beat = payload();
                if let Some(f) = &b.on_beat {
                    f(&beat);
                }
                b.emit(Ev::Beat(beat));
                if let Some(n) = b.terminate_after {
                    let guard = b.resolved.lock().unwrap();
                    let (_g, t) = b
                        .resolved_cv
                        .wait_timeout_while(guard, WAIT, |r| *r < n)
                        .unwrap();
                    assert!(!t.timed_out(), "jobs were not resolved");
                    c.bulk(r#"{"state":"terminate"}"#);
                } else if let Some(p) = b.beat_script.lock().unwrap().pop_front() {
                    c.bulk(p);
                } else {
                    c.send("+OK\r\n");
                }
            }
            "END" => {
                b.emit(Ev::End);
                return;
            }
            other => panic!("unexpected command {other}"),
        }
    }
}

/// Answer a FETCH (or an ACK with fetch): the next job, or null.
fn next_job(c: &mut Conn, b: &Broker) {
    let job = b.jobs.lock().unwrap().pop_front();
    match job {
        Some(j) => c.bulk(&j.to_string()),
        None => {
            // Stand-in for the server-side block; only throttles.
            thread::sleep(Duration::from_millis(20));
            c.send("$-1\r\n");
        }
    }
}

/// Drain events until `ends` connections have said END.
fn until_ends(rx: &Receiver<Ev>, ends: usize) -> Vec<Ev> {
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < ends {
        let ev = rx.recv_timeout(WAIT).expect("timed out waiting for END");
        if matches!(ev, Ev::End) {
            seen += 1;
        }
        out.push(ev);
    }
    out
}

fn fast_worker(addr: &str) -> Worker {
    Worker::new(addr)
        .heartbeat_interval(Duration::from_millis(10))
        .read_timeout(WAIT)
}

#[test]
fn worker_acks_fails_unknown_and_terminates_on_beat() {
    let broker = Broker {
        terminate_after: Some(2),
        ..Default::default()
    };
    let (addr, rx) = broker.start(vec![
        json!({"id": "j1", "type": "email.send", "args": ["a@b.c"]}),
        json!({"id": "j2", "type": "no.such.type", "args": []}),
    ]);
    let stats = fast_worker(&addr)
        .wid("w-test")
        .queues(&["default"])
        .register("email.send", |job| {
            assert_eq!(job["args"][0], "a@b.c");
            JobOutcome::Ack(Some(json!({"sent": true})))
        })
        .run()
        .unwrap();
    assert_eq!(
        stats,
        WorkerStats {
            processed: 2,
            failed: 1
        }
    );

    let evs = until_ends(&rx, 2); // heartbeat + one processor connection
    let hellos: Vec<&Value> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Hello(h) => Some(h),
            _ => None,
        })
        .collect();
    assert_eq!(hellos.len(), 2);
    assert!(hellos.iter().all(|h| h["wid"] == "w-test" && h["v"] == 2));
    let acks: Vec<&Value> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Ack(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(
        acks,
        vec![&json!({"id": "j1", "result": {"sent": true}, "fetch": ["default"]})]
    );
    // j2 came with j1's ACK: one FETCH before the first job, none between.
    let fetches_before_fail = evs
        .iter()
        .take_while(|e| !matches!(e, Ev::Fail(_)))
        .filter(|e| matches!(e, Ev::Fetch))
        .count();
    assert_eq!(fetches_before_fail, 1);
    let fails: Vec<&Value> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Fail(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(fails.len(), 1);
    assert_eq!(fails[0]["id"], "j2");
    assert_eq!(fails[0]["error"]["type"], "unknown_job_type");
    assert!(evs
        .iter()
        .any(|e| matches!(e, Ev::Beat(b) if b["wid"] == "w-test")));
}

#[test]
fn heartbeat_reports_active_jobs_and_panics_become_failures() {
    let (gate_tx, gate_rx) = channel::<()>();
    let gate_tx = Mutex::new(gate_tx);
    let broker = Broker {
        // Release the slow job only once a BEAT has reported it as active.
        on_beat: Some(Box::new(move |beat| {
            if beat["active_job_ids"]
                .as_array()
                .is_some_and(|ids| ids.contains(&json!("s1")))
            {
                let _ = gate_tx.lock().unwrap().send(());
            }
        })),
        ..Default::default()
    };
    let (addr, rx) = broker.start(vec![
        json!({"id": "s1", "type": "slow", "args": []}),
        json!({"id": "b1", "type": "boom", "args": []}),
    ]);
    let gate_rx = Mutex::new(gate_rx);
    let worker = fast_worker(&addr)
        .concurrency(2)
        .register("slow", move |_| {
            match gate_rx.lock().unwrap().recv_timeout(WAIT) {
                Ok(()) => JobOutcome::Ack(Some(json!("done"))),
                Err(_) => JobOutcome::fail("timeout", "never reported as active"),
            }
        })
        .register("boom", |_| panic!("kaboom"));
    let stop = worker.stop_handle();
    let runner = thread::spawn(move || worker.run());

    let (mut ack, mut fail) = (None, None);
    while ack.is_none() || fail.is_none() {
        match rx.recv_timeout(WAIT).expect("no ACK/FAIL") {
            Ev::Ack(a) => ack = Some(a),
            Ev::Fail(f) => fail = Some(f),
            _ => {}
        }
    }
    assert_eq!(
        ack.unwrap(),
        json!({"id": "s1", "result": "done", "fetch": ["default"]})
    );
    let fail = fail.unwrap();
    assert_eq!(
        (fail["id"].as_str(), fail["error"]["type"].as_str()),
        (Some("b1"), Some("panic"))
    );
    assert_eq!(fail["error"]["message"], "kaboom");

    stop.stop();
    let stats = runner.join().unwrap().unwrap();
    assert_eq!(
        stats,
        WorkerStats {
            processed: 2,
            failed: 1
        }
    );
    until_ends(&rx, 3); // heartbeat + two processors
}

#[test]
fn quiet_directive_then_stop_handle() {
    let broker = Broker {
        beat_script: Mutex::new(VecDeque::from([r#"{"state":"quiet"}"#])),
        ..Default::default()
    };
    let (addr, rx) = broker.start(vec![]);
    let worker = fast_worker(&addr);
    let stop = worker.stop_handle();
    let runner = thread::spawn(move || worker.run());
    // The second BEAT is sent only after the quiet reply was handled, and
    // beats keep flowing while quiet.
    let mut beats = 0;
    while beats < 2 {
        if let Ev::Beat(_) = rx.recv_timeout(WAIT).expect("no BEAT") {
            beats += 1;
        }
    }
    stop.stop();
    assert_eq!(runner.join().unwrap().unwrap(), WorkerStats::default());
    until_ends(&rx, 2);
}

#[test]
fn worker_reconnects_after_dropped_connection() {
    let broker = Broker {
        terminate_after: Some(1),
        drop_first_fetch: AtomicBool::new(true),
        ..Default::default()
    };
    let (addr, rx) = broker.start(vec![json!({"id": "r1", "type": "t", "args": []})]);
    let stats = fast_worker(&addr)
        .register("t", |_| JobOutcome::ok())
        .run()
        .unwrap();
    assert_eq!(
        stats,
        WorkerStats {
            processed: 1,
            failed: 0
        }
    );
    let evs = until_ends(&rx, 2);
    assert_eq!(evs.iter().filter(|e| matches!(e, Ev::Hello(_))).count(), 3);
    assert!(evs
        .iter()
        .any(|e| matches!(e, Ev::Ack(a) if a["id"] == "r1")));
}

#[test]
fn stop_before_run_returns_promptly() {
    let (addr, rx) = Broker::default().start(vec![]);
    let worker = fast_worker(&addr).heartbeat_interval(Duration::from_secs(3600));
    worker.stop_handle().stop();
    assert_eq!(worker.run().unwrap(), WorkerStats::default());
    until_ends(&rx, 2);
}

#[test]
fn unreachable_server_gives_up_after_bounded_attempts() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }; // listener dropped: connections are refused
    let res = Worker::new(&addr).max_reconnect_attempts(2).run();
    assert!(matches!(res, Err(Error::Io(_))), "{:?}", res.map(|_| ()));
}

#[test]
fn each_ack_carries_the_next_job() {
    let broker = Broker {
        terminate_after: Some(3),
        ..Default::default()
    };
    let (addr, rx) = broker.start(
        (1..=3)
            .map(|i| json!({"id": format!("n{i}"), "type": "t", "args": [i]}))
            .collect(),
    );
    let stats = fast_worker(&addr)
        .queues(&["hi", "lo"])
        .register("t", |job| JobOutcome::Ack(Some(job["args"][0].clone())))
        .run()
        .unwrap();
    assert_eq!(stats.processed, 3);
    let evs = until_ends(&rx, 2);
    let work: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Fetch => Some("FETCH".to_string()),
            Ev::Ack(a) => {
                assert_eq!(a["fetch"], json!(["hi", "lo"]));
                Some(format!("ACK {} {}", a["id"].as_str().unwrap(), a["result"]))
            }
            _ => None,
        })
        .collect();
    // One FETCH, then each ACK takes the next job; FETCH again only once empty.
    assert_eq!(work[..4], ["FETCH", "ACK n1 1", "ACK n2 2", "ACK n3 3"]);
    assert!(work[4..].iter().all(|w| w == "FETCH"), "{work:?}");
}

#[test]
fn a_stopping_worker_acks_without_fetch() {
    let (addr, rx) = Broker::default().start(vec![
        json!({"id": "a1", "type": "t", "args": []}),
        json!({"id": "a2", "type": "t", "args": []}),
    ]);
    let worker = fast_worker(&addr);
    let stop = worker.stop_handle();
    let stats = worker
        .register("t", move |_| {
            stop.stop(); // the worker is asked to stop while the job runs
            JobOutcome::ok()
        })
        .run()
        .unwrap();
    assert_eq!(stats.processed, 1);
    let evs = until_ends(&rx, 2);
    let acks: Vec<&Value> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Ack(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(acks, vec![&json!({"id": "a1"})]);
}
