//! Two `ojsd --store postgres` nodes behind a real haproxy running `deploy/haproxy.cfg`:
//! one active, one standby that has bound no client port. Producers and workers talk to
//! haproxy only and reconnect on any error. Under load the active node is killed (kill -9):
//! the standby takes the partition over once the lease has run out, rebuilds and serves,
//! haproxy's health check finds it, and the clients carry on. Checked: every push answered
//! +OK is completed in the end, and no job's ACK is answered +OK twice. Printed: the time
//! from the kill to the first command that succeeds through haproxy. A second test freezes
//! the active node (SIGSTOP) past its lease instead: the standby takes over and the old
//! node, woken, acknowledges nothing and stops.
//!
//! Needs `OJSD_TEST_POSTGRES_URL` and `haproxy` on PATH (.ci/run provides both); skipped
//! with a notice otherwise.

mod common;

use common::{id_of, test_job};
use ojs_client::{Client, ConnectOptions};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LEASE_TTL_MS: u64 = 2000;

fn setup() -> Option<String> {
    let url = std::env::var("OJSD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let Some(url) = url else {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
        return None;
    };
    let haproxy = Command::new("haproxy")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !haproxy.is_ok_and(|s| s.success()) {
        eprintln!("skipped: haproxy is not installed (.ci/run installs Debian's)");
        return None;
    }
    Some(url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn schema() -> String {
    format!(
        "failover_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

/// A child process whose stderr is kept (and echoed on failure) and that is killed on drop.
struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn spawn(name: &'static str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Proc {
            name,
            child: Some(child),
            log,
        }
    }

    fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    self.child = None;
                    return Some(status.code().unwrap_or(-1));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log:", self.name);
            for l in self.log.lock().unwrap().iter() {
                eprintln!("{l}");
            }
        }
        self.kill9();
    }
}

struct Cluster {
    url: String,
    schema: String,
    lb_tcp: String,
    nodes: Vec<(String, String)>,
}

impl Cluster {
    fn new(url: String) -> Cluster {
        let addr = |p: u16| format!("127.0.0.1:{p}");
        Cluster {
            url,
            schema: schema(),
            lb_tcp: addr(free_port()),
            nodes: (0..2)
                .map(|_| (addr(free_port()), addr(free_port())))
                .collect(),
        }
    }

    fn node(&self, i: usize, name: &'static str) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ojsd"));
        cmd.args(["--store", "postgres", "--postgres-url", &self.url])
            .args(["--postgres-schema", &self.schema, "--node-id", name])
            .args([
                "--listen",
                &self.nodes[i].0,
                "--http-listen",
                &self.nodes[i].1,
            ])
            .args(["--lease-ttl-ms", &LEASE_TTL_MS.to_string()])
            .args(["--fetch-wait-ms", "500", "--log-level", "info"]);
        Proc::spawn(name, cmd)
    }

    /// haproxy with deploy/haproxy.cfg, its addresses from the environment.
    fn haproxy(&self) -> (Proc, String) {
        let lb_http = format!("127.0.0.1:{}", free_port());
        let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy.cfg");
        let mut cmd = Command::new("haproxy");
        cmd.args(["-db", "-f", cfg])
            .env("OJSD_LB_TCP", &self.lb_tcp)
            .env("OJSD_LB_HTTP", &lb_http);
        for (i, letter) in ["A", "B"].iter().enumerate() {
            let (tcp, http) = &self.nodes[i];
            cmd.env(format!("OJSD_NODE_{letter}_TCP"), tcp)
                .env(format!("OJSD_NODE_{letter}_HTTP"), http)
                .env(
                    format!("OJSD_NODE_{letter}_HTTP_PORT"),
                    http.rsplit(':').next().unwrap(),
                );
        }
        (Proc::spawn("haproxy", cmd), lb_http)
    }
}

fn connect(addr: &str, wid: Option<String>) -> Option<Client> {
    let opts = ConnectOptions {
        wid,
        timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    Client::connect_with(addr, &opts).ok()
}

/// Wait until `f` holds, or panic after `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CLUSTER through haproxy: the node ids by role.
fn roles(lb: &str) -> Option<HashMap<String, String>> {
    let v = connect(lb, None)?.cluster().ok()?;
    Some(
        v["nodes"]
            .as_array()?
            .iter()
            .map(|n| {
                (
                    n["id"].as_str().unwrap_or("").to_string(),
                    n["role"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect(),
    )
}

/// Node a active behind haproxy, node b a standby that has registered and bound nothing.
fn start_pair(c: &Cluster) -> (Proc, Proc, Proc) {
    let a = c.node(0, "node-a");
    wait_for("node-a to serve", Duration::from_secs(30), || {
        a.logged("ojsd ready")
    });
    let b = c.node(1, "node-b");
    wait_for(
        "node-b to wait as a standby",
        Duration::from_secs(30),
        || b.logged("standby: partition 0 is held by node node-a until"),
    );
    assert!(
        std::net::TcpStream::connect(&c.nodes[1].0).is_err(),
        "a standby binds no client port"
    );
    let (lb, _http) = c.haproxy();
    wait_for(
        "haproxy to route to node-a",
        Duration::from_secs(20),
        || {
            roles(&c.lb_tcp).is_some_and(|r| {
                r.get("node-a").map(String::as_str) == Some("active")
                    && r.get("node-b").map(String::as_str) == Some("standby")
            })
        },
    );
    (a, b, lb)
}

#[derive(Default)]
struct Ledger {
    pushed: Mutex<Vec<String>>,
    acked: Mutex<Vec<String>>,
    push_errors: AtomicUsize,
}

fn producer(lb: String, ledger: Arc<Ledger>, stop: Arc<AtomicBool>, n: usize) {
    let mut c = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(client) = c.as_mut() else {
            c = connect(&lb, None);
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        // A short visibility timeout: a job claimed on the node that died comes back soon.
        let job = test_job("failover", json!({"args": [n], "timeout": 3}));
        match client.push(&job) {
            Ok(j) => ledger.pushed.lock().unwrap().push(id_of(&j)),
            Err(_) => {
                ledger.push_errors.fetch_add(1, Ordering::SeqCst);
                c = None;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn worker(lb: String, ledger: Arc<Ledger>, stop: Arc<AtomicBool>, wid: String) {
    let mut c: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(client) = c.as_mut() else {
            c = connect(&lb, Some(wid.clone()));
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        let job = match client.fetch(&["failover"]) {
            Ok(Some(job)) => job,
            Ok(None) => continue,
            Err(_) => {
                c = None;
                continue;
            }
        };
        let id = id_of(&job);
        match client.ack(&id, None) {
            Ok(()) => ledger.acked.lock().unwrap().push(id),
            // The job comes back (its node died, or the ACK was refused): not counted.
            Err(_) => c = None,
        }
    }
}

/// Push through haproxy on fresh connections until one is answered +OK; how long it took.
fn first_success(lb: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let ok = connect(lb, None)
            .is_some_and(|mut c| c.push(&test_job("failover-probe", json!({}))).is_ok());
        if ok {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "nothing got through haproxy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill9_of_the_active_node_fails_over_through_haproxy() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url);
    let (mut a, b, _lb) = start_pair(&c);

    let ledger = Arc::new(Ledger::default());
    let stop_producers = Arc::new(AtomicBool::new(false));
    let stop_workers = Arc::new(AtomicBool::new(false));
    let mut threads = vec![];
    for n in 0..2 {
        let (lb, l, s) = (c.lb_tcp.clone(), ledger.clone(), stop_producers.clone());
        threads.push((true, std::thread::spawn(move || producer(lb, l, s, n))));
    }
    for n in 0..2 {
        let (lb, l, s) = (c.lb_tcp.clone(), ledger.clone(), stop_workers.clone());
        let wid = format!("w-{n}");
        threads.push((false, std::thread::spawn(move || worker(lb, l, s, wid))));
    }
    wait_for("load before the kill", Duration::from_secs(30), || {
        ledger.acked.lock().unwrap().len() >= 100
    });

    a.kill9();
    let took = first_success(&c.lb_tcp, Duration::from_secs(60));
    let pushed_at_kill = ledger.pushed.lock().unwrap().len();
    // Load on the new node for a while, then stop pushing and let the workers drain.
    wait_for("load after the takeover", Duration::from_secs(30), || {
        ledger.pushed.lock().unwrap().len() >= pushed_at_kill + 100
    });
    stop_producers.store(true, Ordering::SeqCst);
    for (_, t) in threads.iter().filter(|(p, _)| *p) {
        while !t.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let pushed: HashSet<String> = ledger.pushed.lock().unwrap().iter().cloned().collect();
    // Done when each is completed: by an ACK a worker saw answered, or on the server (an
    // ACK whose reply a worker lost to a timeout or a cut during the takeover still
    // completed its job, and no worker will take it again).
    let mut probe: Option<Client> = None;
    wait_for(
        "every acknowledged push to be completed",
        Duration::from_secs(60),
        || {
            let acked: HashSet<String> = ledger.acked.lock().unwrap().iter().cloned().collect();
            let missing: Vec<&String> = pushed.difference(&acked).collect();
            if missing.is_empty() {
                return true;
            }
            if probe.is_none() {
                probe = connect(&c.lb_tcp, None);
            }
            let Some(cl) = probe.as_mut() else {
                return false;
            };
            let done = missing
                .iter()
                .all(|id| cl.job(id).is_ok_and(|j: Value| j["state"] == "completed"));
            if !done {
                probe = None;
            }
            done
        },
    );
    stop_workers.store(true, Ordering::SeqCst);
    for (_, t) in threads {
        t.join().unwrap();
    }

    let acked = ledger.acked.lock().unwrap().clone();
    let mut seen = HashSet::new();
    let twice: Vec<_> = acked.iter().filter(|id| !seen.insert(*id)).collect();
    assert!(twice.is_empty(), "ACK answered +OK twice for {twice:?}");
    // The new node agrees: each of them is completed.
    let mut cl = connect(&c.lb_tcp, None).expect("connect through haproxy");
    for id in &pushed {
        let job: Value = cl.job(id).expect("JOB");
        assert_eq!(job["state"], "completed", "{id}");
    }
    let r = roles(&c.lb_tcp).expect("CLUSTER");
    assert_eq!(r.get("node-b").map(String::as_str), Some("active"));
    assert!(b.logged("took the partition's lease"));
    eprintln!(
        "failover: {} pushes acknowledged ({} refused or cut), all completed, none acked \
         twice; from kill -9 to the first command through haproxy: {} ms (lease TTL {} ms)",
        pushed.len(),
        ledger.push_errors.load(Ordering::SeqCst),
        took.as_millis(),
        LEASE_TTL_MS
    );
}

/// The active node is frozen past its lease; the standby takes over and haproxy moves the
/// clients; the old node, woken, has its commits refused (it answers no push +OK) and
/// exits non-zero, to come back as a standby when restarted.
#[test]
fn a_frozen_active_node_is_fenced_after_the_standby_takes_over() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url);
    let (a, b, _lb) = start_pair(&c);
    let mut direct_a = connect(&c.nodes[0].0, None).expect("connect to node-a");
    let before = id_of(&direct_a.push(&test_job("zombie", json!({}))).unwrap());

    a.signal("-STOP");
    let t0 = Instant::now();
    wait_for("node-b to take over", Duration::from_secs(30), || {
        b.logged("took the partition's lease")
    });
    first_success(&c.lb_tcp, Duration::from_secs(30));
    let took = t0.elapsed();
    a.signal("-CONT");
    let mut a = a;
    let after = direct_a.push(&test_job("zombie", json!({"args": ["after"]})));
    assert!(
        after.is_err(),
        "a fenced node acknowledged a push: {after:?}"
    );
    assert!(
        a.wait_exit(Duration::from_secs(15))
            .is_some_and(|code| code != 0),
        "the fenced node stops with an error"
    );

    let mut cl = connect(&c.lb_tcp, None).expect("connect through haproxy");
    assert_eq!(cl.job(&before).unwrap()["state"], "available");
    let mut w = connect(&c.lb_tcp, Some("w-z".into())).unwrap();
    let job = w
        .fetch(&["zombie"])
        .unwrap()
        .expect("the job pushed before");
    assert_eq!(id_of(&job), before);
    assert!(w.fetch(&["zombie"]).unwrap().is_none(), "nothing else");
    eprintln!(
        "zombie: node-b served {} ms after node-a froze (lease TTL {LEASE_TTL_MS} ms); \
         node-a's push after waking was refused and it exited",
        took.as_millis()
    );
}

/// On an embedded store the server is the whole cluster: CLUSTER over TCP, the HTTP route
/// and `ojsd cluster --json` all name it, active, with partition 0 and its address; a
/// producer token may not ask, an observer may.
#[test]
fn cluster_on_an_embedded_store_is_this_node_alone() {
    let srv = common::Server::start_with(&[
        "--node-id",
        "solo",
        "--token",
        "observer:obs-secret",
        "--token",
        "producer:prod-secret",
    ]);
    let as_role = |secret: &str| {
        let opts = ConnectOptions {
            password: Some(secret.to_string()),
            ..Default::default()
        };
        Client::connect_with(&srv.addr, &opts).expect("connect")
    };
    let v = as_role("obs-secret")
        .cluster()
        .expect("CLUSTER as observer");
    assert_eq!(v["partitions"], 1);
    assert_eq!(v["unowned"], json!([]));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{v}");
    assert_eq!(nodes[0]["id"], "solo");
    assert_eq!(nodes[0]["addr"], srv.addr.as_str());
    assert_eq!(nodes[0]["partitions"], json!([0]));
    assert_eq!(nodes[0]["role"], "active");
    assert_eq!(nodes[0]["local"], true);
    let refused = as_role("prod-secret").cluster();
    assert!(
        format!("{refused:?}").contains("FORBIDDEN"),
        "a producer may not: {refused:?}"
    );

    let r = common::http::send_as(
        &srv.http_addr,
        "obs-secret",
        "GET",
        "/ojs/v1/admin/cluster",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["nodes"][0]["id"], "solo");

    let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args([
            "cluster",
            "--json",
            "--addr",
            &srv.addr,
            "--password",
            "obs-secret",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["nodes"][0]["addr"], srv.addr.as_str());
}
