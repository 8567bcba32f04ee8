//! PostgreSQL restarted under load: an `ojsd --store postgres` on a PostgreSQL of the test's
//! own (tests/common/pg.rs), with producers and workers running, sees its database
//! restarted (`pg_ctl restart -m fast`), then stopped for longer than the lease and started
//! again. Checked: ojsd does not exit; while the database is away every command is
//! answered within a bound, with BACKEND_UNAVAILABLE (a clear, retryable error) and
//! nothing else; work resumes once it is back; every push answered +OK is completed in the
//! end, and no job's ACK is answered +OK twice.
//!
//! Needs PostgreSQL 15's programs (`initdb`, `pg_ctl`) and `OJSD_TEST_POSTGRES_URL` set
//! (the switch for the PostgreSQL tests; .ci/run sets it); skipped with a notice otherwise.

mod common;

use common::pg::TestPostgres;
use common::{id_of, test_job, Server};
use ojs_client::{Client, ConnectOptions};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const QUEUE: &str = "pg-restart";
/// No command may take longer than this, database or not (the store gives a statement up
/// after 10 s; a command refused while the database is away is answered at once).
const BOUND: Duration = Duration::from_secs(15);

#[derive(Default)]
struct Ledger {
    /// Pushes answered +OK.
    pushed: Vec<String>,
    /// ACKs answered +OK, per job.
    acked: HashMap<String, usize>,
    /// Error codes answered, and how often.
    errors: HashMap<String, usize>,
    /// Other failures (connection errors): none expected.
    broken: Vec<String>,
    /// The longest any command took.
    slowest: Duration,
}

impl Ledger {
    fn timed<T>(
        ledger: &Mutex<Ledger>,
        f: impl FnOnce() -> ojs_client::Result<T>,
    ) -> ojs_client::Result<T> {
        let t0 = Instant::now();
        let r = f();
        let took = t0.elapsed();
        let mut l = ledger.lock().unwrap();
        l.slowest = l.slowest.max(took);
        match &r {
            Err(ojs_client::Error::Server { code, .. }) => {
                *l.errors.entry(code.clone()).or_default() += 1
            }
            Err(e) => l.broken.push(e.to_string()),
            Ok(_) => {}
        }
        r
    }
}

fn connect(addr: &str, wid: Option<&str>) -> Client {
    let opts = ConnectOptions {
        wid: wid.map(str::to_string),
        timeout: Some(BOUND * 2),
        ..Default::default()
    };
    Client::connect_with(addr, &opts).expect("connect")
}

fn producer(addr: String, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>, n: usize) {
    let mut c = connect(&addr, None);
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let job = test_job(QUEUE, json!({"args": [n, i]}));
        match Ledger::timed(&ledger, || c.push(&job)) {
            Ok(j) => ledger.lock().unwrap().pushed.push(id_of(&j)),
            Err(e) if e.is_connection_error() => {
                std::thread::sleep(Duration::from_millis(100));
                c = connect(&addr, None);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Fetch and ACK until `stop`; an ACK answered with an error is sent again until it is
/// answered +OK or the job is no longer this worker's to acknowledge (an earlier ACK whose
/// reply said "may still take effect" did).
fn worker(addr: String, wid: String, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let mut c = connect(&addr, Some(&wid));
    while !stop.load(Ordering::SeqCst) {
        let job = match Ledger::timed(&ledger, || c.fetch(&[QUEUE])) {
            Ok(Some(job)) => job,
            Ok(None) => continue,
            Err(e) if e.is_connection_error() => {
                std::thread::sleep(Duration::from_millis(100));
                c = connect(&addr, Some(&wid));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let id = id_of(&job);
        loop {
            match Ledger::timed(&ledger, || c.ack(&id, None)) {
                Ok(()) => {
                    *ledger.lock().unwrap().acked.entry(id).or_default() += 1;
                    break;
                }
                Err(ojs_client::Error::Server { code, .. }) if code == "BACKEND_UNAVAILABLE" => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                // The job is not active for us any more: an earlier ACK took effect.
                Err(ojs_client::Error::Server { .. }) => break,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(100));
                    c = connect(&addr, Some(&wid));
                }
            }
        }
    }
}

fn pushed(ledger: &Mutex<Ledger>) -> usize {
    ledger.lock().unwrap().pushed.len()
}

fn unavailable(ledger: &Mutex<Ledger>) -> usize {
    ledger
        .lock()
        .unwrap()
        .errors
        .get("BACKEND_UNAVAILABLE")
        .copied()
        .unwrap_or(0)
}

/// Wait (bounded) until the producers got `more` pushes through past `from`.
fn progress(ledger: &Mutex<Ledger>, from: usize, more: usize, what: &str) {
    let t0 = Instant::now();
    while pushed(ledger) < from + more {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what}: no progress ({} pushes, {} before)",
            pushed(ledger),
            from
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(srv: &mut Server) {
    assert_eq!(
        srv.wait_exit(Duration::from_millis(1)),
        None,
        "ojsd exited while PostgreSQL was away"
    );
}

#[test]
fn postgres_restarted_under_load_inline() {
    restarted_under_load("false");
}

#[test]
fn postgres_restarted_under_load_pipelined() {
    restarted_under_load("true");
}

/// With several partitions the node's engines share threads and sync threads
/// (`engine/host.rs`): the outage reaches each of them through the shared syncer.
#[test]
fn postgres_restarted_under_load_partitioned() {
    restarted_under_load_with("true", &["--partitions", "4"]);
}

/// A PostgreSQL of the test's own, when the PostgreSQL tests run at all (`.ci/run` sets
/// `OJSD_TEST_POSTGRES_URL`); `None`, with a notice, otherwise.
fn own_postgres() -> Option<TestPostgres> {
    if std::env::var("OJSD_TEST_POSTGRES_URL").map_or(true, |u| u.is_empty()) {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
        return None;
    }
    TestPostgres::start()
}

fn restarted_under_load(pipeline: &str) {
    restarted_under_load_with(pipeline, &[]);
}

fn restarted_under_load_with(pipeline: &str, extra: &[&str]) {
    let Some(pg) = own_postgres() else {
        return;
    };
    let url = pg.url();
    let mut args = vec![
        "--store",
        "postgres",
        "--postgres-url",
        &url,
        "--postgres-schema",
        "restart",
        "--node-id",
        "node-r",
        "--lease-ttl-ms",
        "2000",
        "--log-level",
        "warn",
        "--commit-pipeline",
        pipeline,
    ];
    args.extend_from_slice(extra);
    let mut srv = Server::start_with(&args);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for n in 0..2 {
        let (addr, l, s) = (srv.addr.clone(), ledger.clone(), stop.clone());
        threads.push(std::thread::spawn(move || producer(addr, l, s, n)));
    }
    let worker_stop = Arc::new(AtomicBool::new(false));
    let workers = Arc::new(AtomicUsize::new(0));
    for n in 0..2 {
        let (addr, l, s) = (srv.addr.clone(), ledger.clone(), worker_stop.clone());
        let w = workers.clone();
        threads.push(std::thread::spawn(move || {
            worker(addr, format!("w-{n}"), l, s);
            w.fetch_add(1, Ordering::SeqCst);
        }));
    }
    progress(&ledger, 0, 200, "before the restarts");

    // A quick restart: every session is ended, the server is back within a second or two.
    let before = pushed(&ledger);
    pg.restart();
    alive(&mut srv);
    progress(&ledger, before, 200, "after pg_ctl restart");

    // Away for longer than the lease (2 s): the node's lease lapses on its own clock, and
    // its renewal at the same epoch (no other node took the partition) brings it back.
    let errors_before = unavailable(&ledger);
    pg.stop();
    std::thread::sleep(Duration::from_millis(3500));
    alive(&mut srv);
    let during = pushed(&ledger);
    let refused = unavailable(&ledger) - errors_before;
    pg.start_again();
    progress(&ledger, during, 200, "after stop, 3.5 s away, start");
    alive(&mut srv);
    assert!(
        refused > 0,
        "clients were told the store is unavailable while PostgreSQL was stopped"
    );

    // Drain: every push answered +OK completes.
    stop.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    let all: Vec<String> = ledger.lock().unwrap().pushed.clone();
    let t0 = Instant::now();
    let mut c = srv.client();
    loop {
        let acked = ledger.lock().unwrap().acked.len();
        if acked >= all.len() {
            break;
        }
        let states = common::states_of(&mut c, &all);
        if states.iter().all(|s| s.as_deref() == Some("completed")) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not every acknowledged push completed: {} of {} acknowledged",
            acked,
            all.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    worker_stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    alive(&mut srv);

    let l = ledger.lock().unwrap();
    let states = common::states_of(&mut c, &all);
    let not_done: Vec<_> = all
        .iter()
        .zip(&states)
        .filter(|(_, s)| s.as_deref() != Some("completed"))
        .collect();
    assert!(
        not_done.is_empty(),
        "{} acknowledged pushes not completed: {:?}",
        not_done.len(),
        &not_done[..not_done.len().min(10)]
    );
    let twice: Vec<_> = l.acked.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ACKs answered +OK twice: {twice:?}");
    let other: Vec<_> = l
        .errors
        .iter()
        .filter(|(code, _)| code.as_str() != "BACKEND_UNAVAILABLE")
        .collect();
    assert!(
        l.broken.is_empty(),
        "connections broke or timed out: {:?}",
        &l.broken[..l.broken.len().min(5)]
    );
    assert!(
        l.slowest < BOUND,
        "a command took {:?} (bound {BOUND:?})",
        l.slowest
    );
    eprintln!(
        "postgres restarted under load (pipeline {pipeline}): {} pushes, {} acknowledged, {} refused as \
         BACKEND_UNAVAILABLE ({} while stopped for 3.5 s), other errors {other:?}, slowest \
         command {:?}",
        all.len(),
        l.acked.len(),
        unavailable_in(&l),
        refused,
        l.slowest
    );
    // The ACK retries of a worker whose first ACK took effect may meet another answer
    // (the job is no longer active); nothing else may.
    for (code, _) in other {
        assert!(
            matches!(
                code.as_str(),
                "INVALID_STATE_TRANSITION" | "NOT_OWNER" | "NOT_FOUND"
            ),
            "unexpected error code {code}"
        );
    }
    // And it works on, as before.
    let id = common::push_id(&mut c, &test_job("pg-restart-after", json!({})));
    let mut w = srv.worker("w-after");
    assert_eq!(id_of(&common::fetch_one(&mut w, "pg-restart-after")), id);
    w.ack(&id, None).unwrap();
}

fn unavailable_in(l: &Ledger) -> usize {
    l.errors.get("BACKEND_UNAVAILABLE").copied().unwrap_or(0)
}

/// A standby killed on drop.
struct Standby(std::process::Child);

impl Drop for Standby {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The node's role in CLUSTER as `c`'s node sees it, `None` while the answer is an error
/// (the store is unavailable) or the node is not listed.
fn role_of(c: &mut Client, node: &str) -> Option<String> {
    let cluster = c.cluster().ok()?;
    cluster["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == node)
        .map(|n| n["role"].as_str().unwrap_or_default().to_string())
}

fn wait_role(c: &mut Client, node: &str, role: &str) {
    let t0 = Instant::now();
    while role_of(c, node).as_deref() != Some(role) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{node} is not {role}: {:?}",
            c.cluster()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A standby waiting for the lease lives through the database's restarts (its tries that
/// find the database away are tries like others), heartbeats again once it is back, and
/// takes over when the active node is killed afterwards, with everything acknowledged
/// before. The outages here are shorter than the lease (5 s), so the active node keeps it;
/// after a longer one the standby may win the expired lease, and the old active node, fenced,
/// exits (README, cluster section).
#[test]
fn a_standby_lives_through_a_postgres_restart_and_takes_over_after() {
    let Some(pg) = own_postgres() else {
        return;
    };
    let url = pg.url();
    let pg_args = |node: &'static str| {
        vec![
            "--store",
            "postgres",
            "--postgres-url",
            url.as_str(),
            "--postgres-schema",
            "standby",
            "--node-id",
            node,
            "--lease-ttl-ms",
            "5000",
        ]
    };
    let mut a = Server::start_with(&pg_args("node-a"));
    let mut c = a.client();
    let ids: Vec<String> = (0..40)
        .map(|i| common::push_id(&mut c, &test_job(QUEUE, json!({"args": [i]}))))
        .collect();
    let mut w = a.worker("w-a");
    let mut acked = Vec::new();
    for _ in 0..10 {
        let id = id_of(&common::fetch_one(&mut w, QUEUE));
        w.ack(&id, None).unwrap();
        acked.push(id);
    }
    let data = tempfile::tempdir().unwrap();
    let mut b = Standby(
        std::process::Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "off",
                "--data-dir",
            ])
            .arg(data.path())
            .args(pg_args("node-s"))
            .args(["--log-level", "warn"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the standby"),
    );
    wait_role(&mut c, "node-s", "standby");

    pg.restart();
    pg.stop();
    std::thread::sleep(Duration::from_millis(1500));
    pg.start_again();
    alive(&mut a);
    assert!(
        b.0.try_wait().unwrap().is_none(),
        "the standby exited while PostgreSQL was away"
    );
    // Both heartbeat again; the active node commits again.
    wait_role(&mut c, "node-s", "standby");
    wait_role(&mut c, "node-a", "active");
    let after = common::push_id(&mut c, &test_job(QUEUE, json!({"args": ["after"]})));

    a.kill9();
    let stdout = b.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    // A standby serves its clients at once (forwarding them to the holder, here none it
    // can reach: it has no --peer-listen to learn of), and from its own engine once it
    // has taken over: wait for a command to succeed.
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the standby listens");
    let addr = line.trim().strip_prefix("ojsd listening on ").unwrap();
    let t0 = std::time::Instant::now();
    let mut cb = loop {
        if let Ok(mut cb) = Client::connect(addr) {
            if cb.info().is_ok() {
                break cb;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the standby took over and serves"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let states = common::states_of(&mut cb, &ids);
    for (id, state) in ids.iter().zip(&states) {
        let want = if acked.contains(id) {
            "completed"
        } else {
            "available"
        };
        assert_eq!(state.as_deref(), Some(want), "{id}");
    }
    assert_eq!(
        common::states_of(&mut cb, std::slice::from_ref(&after)),
        vec![Some("available".to_string())]
    );
}
