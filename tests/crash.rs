//! Crash at random points: producers pushing PUSHB batches, workers doing FETCH COUNT and
//! ACK, and a pruner moving the clock so completed jobs are deleted, all at once; then
//! `kill -9` after a random delay, 20 times over. After every restart:
//! - every job whose PUSHB was answered is still there, or was completed (and maybe
//!   pruned) after a worker got it;
//! - every ACK answered `+OK` stays completed (or pruned);
//! - no job is completed twice (a drain after the restart never delivers an ACKed job);
//! - the server always reopens.
//!
//! `kill -9` leaves the page cache to the kernel, which still writes it; what a power cut
//! takes with it is tested in `tests/power_loss.rs`, on a file system that drops every
//! write not fsynced.

mod common;

use common::*;
use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const QUEUE: &str = "crash";

#[derive(Default)]
struct Log {
    /// Ids of jobs in PUSHB batches answered with the stored jobs.
    pushed: Vec<String>,
    /// Batches whose reply was lost: each job stored or not, all or none.
    push_unknown: Vec<Vec<String>>,
    /// Delivered to a worker by FETCH.
    delivered: Vec<String>,
    /// ACK answered +OK.
    acked: Vec<String>,
    /// ACK sent, reply lost.
    ack_unknown: Vec<String>,
    wrong: Vec<String>,
}

impl Log {
    fn merge(&mut self, o: Log) {
        self.pushed.extend(o.pushed);
        self.push_unknown.extend(o.push_unknown);
        self.delivered.extend(o.delivered);
        self.acked.extend(o.acked);
        self.ack_unknown.extend(o.ack_unknown);
        self.wrong.extend(o.wrong);
    }
}

fn connect(addr: &str, wid: Option<&str>) -> Option<Client> {
    let opts = ConnectOptions {
        wid: wid.map(str::to_string),
        timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    Client::connect_with(addr, &opts).ok()
}

fn producer(addr: String, stop: Arc<AtomicBool>, pushed: Arc<AtomicUsize>) -> Log {
    let mut log = Log::default();
    let Some(mut c) = connect(&addr, None) else {
        return log;
    };
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<String> = (0..20).map(|_| new_id()).collect();
        let jobs: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "crash.job", "args": [], "queue": QUEUE}))
            .collect();
        match c.push_bulk(&jobs) {
            Ok(stored) if stored.len() == ids.len() => {
                pushed.fetch_add(ids.len(), Ordering::Relaxed);
                log.pushed.extend(ids);
            }
            Ok(stored) => log
                .wrong
                .push(format!("PUSHB answered {} jobs", stored.len())),
            Err(e) if e.is_connection_error() => {
                log.push_unknown.push(ids);
                break;
            }
            Err(e) => {
                log.wrong.push(format!("PUSHB: {e}"));
                break;
            }
        }
    }
    log
}

fn worker(addr: String, wid: String, stop: Arc<AtomicBool>) -> Log {
    let mut log = Log::default();
    let Some(mut c) = connect(&addr, Some(&wid)) else {
        return log;
    };
    'outer: while !stop.load(Ordering::Relaxed) {
        let jobs = match c.fetch_many(&[QUEUE], 10) {
            Ok(j) => j,
            Err(e) if e.is_connection_error() => break,
            Err(e) => {
                log.wrong.push(format!("FETCH: {e}"));
                break;
            }
        };
        for job in jobs {
            let id = id_of(&job);
            log.delivered.push(id.clone());
            match c.ack(&id, None) {
                Ok(()) => log.acked.push(id),
                Err(e) if e.is_connection_error() => {
                    log.ack_unknown.push(id);
                    break 'outer;
                }
                Err(e) => {
                    log.wrong.push(format!("ACK {id}: {e}"));
                    break 'outer;
                }
            }
        }
    }
    log
}

/// Moves the engine clock so that completed jobs pass their retention and are pruned
/// while the load runs.
fn pruner(addr: String, stop: Arc<AtomicBool>) -> Log {
    let log = Log::default();
    let Some(mut c) = connect(&addr, None) else {
        return log;
    };
    while !stop.load(Ordering::Relaxed) {
        if c.call("CLOCK ADVANCE 2").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    log
}

/// A random delay in `lo..hi` ms, from the clock (no RNG dependency needed for this).
fn random_ms(lo: u64, hi: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    lo + nanos % (hi - lo)
}

#[test]
fn kill9_at_random_points_of_pushb_fetch_ack_and_pruning() {
    if common::store_missing() {
        return;
    }
    let mut srv = Server::start_with(&["--retention", "1"]);
    let mut completed_before: HashSet<String> = HashSet::new();
    let mut total_pushed = 0;
    for cycle in 0..20 {
        let stop = Arc::new(AtomicBool::new(false));
        let pushed = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for _ in 0..3 {
            let (a, s, p) = (srv.addr.clone(), stop.clone(), pushed.clone());
            threads.push(std::thread::spawn(move || producer(a, s, p)));
        }
        for i in 0..3 {
            let (a, s) = (srv.addr.clone(), stop.clone());
            let wid = format!("w-{cycle}-{i}");
            threads.push(std::thread::spawn(move || worker(a, wid, s)));
        }
        let (a, s) = (srv.addr.clone(), stop.clone());
        threads.push(std::thread::spawn(move || pruner(a, s)));

        // Some work first, then the crash at a random moment of it.
        wait_for(Duration::from_secs(20), "some acknowledged pushes", || {
            (pushed.load(Ordering::Relaxed) >= 100).then_some(())
        });
        std::thread::sleep(Duration::from_millis(random_ms(0, 300)));
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        let mut log = Log::default();
        for t in threads {
            log.merge(t.join().expect("load thread"));
        }
        assert!(log.wrong.is_empty(), "cycle {cycle}: {:#?}", log.wrong);

        // It always reopens.
        srv.restart();
        let mut c = srv.client();
        let delivered: HashSet<&String> = log.delivered.iter().collect();
        let ack_sent: HashSet<&String> = log.acked.iter().chain(&log.ack_unknown).collect();

        // Every answered PUSHB's jobs are there, or were completed after a worker got them.
        for (id, s) in log.pushed.iter().zip(states_of(&mut c, &log.pushed)) {
            match s.as_deref() {
                Some("available" | "completed") => {}
                None if ack_sent.contains(id) => {} // completed, then pruned
                other => panic!("cycle {cycle}: acknowledged push {id} is {other:?}"),
            }
            if s.as_deref() == Some("completed") {
                assert!(
                    ack_sent.contains(id),
                    "cycle {cycle}: {id} completed unasked"
                );
            }
        }
        // Every +OK'd ACK stays completed (or was pruned).
        for (id, s) in log.acked.iter().zip(states_of(&mut c, &log.acked)) {
            assert!(
                matches!(s.as_deref(), Some("completed") | None),
                "cycle {cycle}: ACKed {id} is {s:?}"
            );
        }
        // A batch whose reply was lost is there whole or not at all (PUSHB is atomic):
        // once any of its jobs is seen, each of the others is there or was completed and
        // pruned after a worker got it.
        for ids in &log.push_unknown {
            let found = states_of(&mut c, ids);
            let stored = ids
                .iter()
                .zip(&found)
                .any(|(id, s)| s.is_some() || delivered.contains(id));
            if stored {
                for (id, s) in ids.iter().zip(&found) {
                    assert!(
                        s.is_some() || ack_sent.contains(id),
                        "cycle {cycle}: a PUSHB whose reply was lost kept only part: {id} is missing"
                    );
                }
            }
        }

        // Drain: nothing ACKed (in this cycle or before) is delivered again.
        let mut w = srv.worker(&format!("drain-{cycle}"));
        loop {
            let jobs = w.fetch_many(&[QUEUE], 500).expect("drain FETCH");
            if jobs.is_empty() {
                break;
            }
            let ids: Vec<String> = jobs.iter().map(id_of).collect();
            for id in &ids {
                assert!(
                    !log.acked.contains(id) && !completed_before.contains(id),
                    "cycle {cycle}: {id} was ACKed and delivered again"
                );
            }
            let acks: Vec<String> = ids
                .iter()
                .map(|id| format!("ACK {}", json!({"id": id})))
                .collect();
            for r in pipeline(&mut w, &acks) {
                assert_eq!(r, Reply::Simple("OK".into()));
            }
            completed_before.extend(ids);
        }
        completed_before.extend(log.acked.iter().cloned());
        total_pushed += log.pushed.len();
    }
    eprintln!("crash test: 20 kill -9 cycles, {total_pushed} acknowledged pushes");
}
