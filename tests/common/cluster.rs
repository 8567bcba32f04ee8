//! Several `ojsd --store postgres` nodes on one PostgreSQL (a schema of their own) behind a
//! real haproxy running `deploy/haproxy.cfg`, for tests/failover.rs and
//! tests/failover_features.rs and tests/forwarding.rs. One node holds the partition's lease
//! and runs the engine; the others are standbys that serve their clients by forwarding to
//! it over the peer protocol (`--peer-listen`). Clients talk to haproxy (or to a node
//! directly) and reconnect on errors.
//!
//! Needs `OJSD_TEST_POSTGRES_URL` and `haproxy` on PATH (.ci/run provides both); `setup`
//! says so and the test returns early otherwise. Ports are the kernel's ephemeral ones.

use super::{id_of, test_job};
use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const LEASE_TTL_MS: u64 = 2000;

/// What a node logs once it holds the partition and serves from its own engine.
pub const HOLDS: &str = "this node holds the partition";

/// The PostgreSQL URL, or `None` (with a notice) when `OJSD_TEST_POSTGRES_URL` is unset.
pub fn pg_url() -> Option<String> {
    let url = std::env::var("OJSD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
    }
    url
}

/// The PostgreSQL URL, or `None` (with a notice) when PostgreSQL or haproxy is missing.
pub fn setup() -> Option<String> {
    let url = pg_url()?;
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

/// A port that is free now and stays free for the test's own processes to bind later.
///
/// Not `bind(":0")`: that hands out a port from the kernel's ephemeral range
/// (32768–60999 here), and once released the same port can become the local end of any
/// outgoing connection (a client's, PostgreSQL's) before the node binds it — CI saw
/// `--peer-listen: Address already in use` that way. Ports below the ephemeral range are
/// never given to outgoing connections; each process walks its own stretch of them, and a
/// port some other program holds is skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(397) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
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
pub struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub fn spawn(name: &'static str, mut cmd: Command) -> Proc {
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

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for the process to end: its exit code (-1 when a signal ended it).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
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

/// Node names by index: the letters of deploy/haproxy.cfg's `OJSD_NODE_<X>_*` variables.
pub const NAMES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

pub struct Cluster {
    pub url: String,
    pub schema: String,
    pub lb_tcp: String,
    /// Each node's (TCP, HTTP) client address.
    pub nodes: Vec<(String, String)>,
    /// Each node's peer listener.
    pub peers: Vec<String>,
    /// `--lease-ttl-ms` of the nodes started from now on.
    pub ttl_ms: u64,
    /// `--fetch-wait-ms` of the nodes started from now on.
    pub fetch_wait_ms: u64,
    /// More flags for the nodes started from now on.
    pub extra: Vec<String>,
}

impl Cluster {
    /// Room for `n` nodes (2 to 4); none is started yet.
    pub fn new(url: String, n: usize) -> Cluster {
        assert!((2..=NAMES.len()).contains(&n));
        let addr = |p: u16| format!("127.0.0.1:{p}");
        Cluster {
            url,
            schema: schema(),
            lb_tcp: addr(free_port()),
            nodes: (0..n)
                .map(|_| (addr(free_port()), addr(free_port())))
                .collect(),
            peers: (0..n).map(|_| addr(free_port())).collect(),
            ttl_ms: LEASE_TTL_MS,
            fetch_wait_ms: 500,
            extra: Vec::new(),
        }
    }

    /// Start node `i` (named `NAMES[i]`).
    pub fn node(&self, i: usize) -> Proc {
        let name = NAMES[i];
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ojsd"));
        cmd.args(["--store", "postgres", "--postgres-url", &self.url])
            .args(["--postgres-schema", &self.schema, "--node-id", name])
            .args([
                "--listen",
                &self.nodes[i].0,
                "--http-listen",
                &self.nodes[i].1,
                "--peer-listen",
                &self.peers[i],
            ])
            .args(["--lease-ttl-ms", &self.ttl_ms.to_string()])
            .args(["--fetch-wait-ms", &self.fetch_wait_ms.to_string()])
            .args(["--log-level", "info"])
            .args(&self.extra);
        Proc::spawn(name, cmd)
    }

    /// Start node `i` and wait until it is a standby behind node `holder`.
    pub fn standby(&self, i: usize, holder: usize) -> Proc {
        let p = self.node(i);
        let line = format!(
            "standby: partition 0 is held by node {} until",
            NAMES[holder]
        );
        wait_until(
            &format!("{} to wait as a standby", NAMES[i]),
            Duration::from_secs(30),
            || p.logged(&line),
        );
        assert!(
            std::net::TcpStream::connect(&self.nodes[i].0).is_ok(),
            "a standby serves its clients (forwarding them to the holder)"
        );
        p
    }

    /// haproxy with deploy/haproxy.cfg, its addresses from the environment. For more than
    /// two nodes a copy gets a `server` line per node after node-b's in both backends, as
    /// the file's comment says to do.
    pub fn haproxy(&self) -> Proc {
        let lb_http = format!("127.0.0.1:{}", free_port());
        let deployed = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/haproxy.cfg");
        let cfg = if self.nodes.len() == 2 {
            std::path::PathBuf::from(deployed)
        } else {
            let text = std::fs::read_to_string(deployed).unwrap();
            let mut out = String::new();
            for line in text.lines() {
                out.push_str(line);
                out.push('\n');
                if line.trim_start().starts_with("server node-b ") {
                    for name in &NAMES[2..self.nodes.len()] {
                        let letter = name[5..].to_uppercase();
                        out.push_str(
                            &line
                                .replace("node-b", name)
                                .replace("_B_", &format!("_{letter}_")),
                        );
                        out.push('\n');
                    }
                }
            }
            let path = std::env::temp_dir().join(format!("{}-haproxy.cfg", self.schema));
            std::fs::write(&path, out).unwrap();
            path
        };
        let mut cmd = Command::new("haproxy");
        cmd.arg("-db")
            .arg("-f")
            .arg(&cfg)
            .env("OJSD_LB_TCP", &self.lb_tcp)
            .env("OJSD_LB_HTTP", &lb_http);
        for (i, (tcp, http)) in self.nodes.iter().enumerate() {
            let letter = NAMES[i][5..].to_uppercase();
            cmd.env(format!("OJSD_NODE_{letter}_TCP"), tcp)
                .env(format!("OJSD_NODE_{letter}_HTTP"), http)
                .env(
                    format!("OJSD_NODE_{letter}_HTTP_PORT"),
                    http.rsplit(':').next().unwrap(),
                );
        }
        Proc::spawn("haproxy", cmd)
    }

    /// Node a active behind haproxy, node b a standby that has registered and forwards
    /// to it: (a, b, haproxy).
    pub fn start_pair(&self) -> (Proc, Proc, Proc) {
        let a = self.node(0);
        wait_until("node-a to serve", Duration::from_secs(30), || {
            a.logged(HOLDS)
        });
        let b = self.standby(1, 0);
        let lb = self.haproxy();
        wait_until(
            "haproxy to route to node-a",
            Duration::from_secs(20),
            || {
                roles(&self.lb_tcp).is_some_and(|r| {
                    r.get("node-a").map(String::as_str) == Some("active")
                        && r.get("node-b").map(String::as_str) == Some("standby")
                })
            },
        );
        (a, b, lb)
    }
}

pub fn connect(addr: &str, wid: Option<String>) -> Option<Client> {
    let opts = ConnectOptions {
        wid,
        timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    Client::connect_with(addr, &opts).ok()
}

/// Wait until `f` holds, or panic after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CLUSTER through haproxy: the node ids by role.
pub fn roles(lb: &str) -> Option<HashMap<String, String>> {
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

/// Push through haproxy on fresh connections until one is answered +OK; how long it took.
pub fn first_success(lb: &str, limit: Duration) -> Duration {
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

/// A command through haproxy, retried on fresh connections until it gets a reply (any
/// reply: an error reply is an answer), for reads and idempotent commands.
pub fn call_retrying(lb: &str, line: &str, limit: Duration) -> Reply {
    let t0 = Instant::now();
    loop {
        if let Some(r) = connect(lb, None).and_then(|mut c| c.call(line).ok()) {
            return r;
        }
        assert!(t0.elapsed() < limit, "no reply through haproxy to {line}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Like `call_retrying`, for a command whose reply is a JSON bulk.
pub fn json_retrying(lb: &str, line: &str, limit: Duration) -> Value {
    match call_retrying(lb, line, limit) {
        Reply::Bulk(b) => serde_json::from_slice(&b).expect("bulk reply is JSON"),
        other => panic!("{line}: expected a bulk reply, got {other:?}"),
    }
}

/// Like `json_retrying`, also retrying while the answer is `BACKEND_UNAVAILABLE` (a
/// partition between holders).
pub fn json_when_served(addr: &str, line: &str, limit: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        match call_retrying(addr, line, limit) {
            Reply::Bulk(b) => return serde_json::from_slice(&b).expect("bulk reply is JSON"),
            Reply::Error { code, .. } if code == "BACKEND_UNAVAILABLE" && t0.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("{line}: expected a bulk reply, got {other:?}"),
        }
    }
}

/// A worker thread on `addr` (as `wid`) fetching from `queues` until `stop`: each job takes
/// `work`, is ACKed with `{"by": wid}`, and its id goes into `acked` once the ACK is
/// answered +OK; any error reconnects.
pub fn acking_worker(
    addr: String,
    wid: String,
    queues: Vec<String>,
    work: Duration,
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let qs: Vec<&str> = queues.iter().map(String::as_str).collect();
        let mut c: Option<Client> = None;
        while !stop.load(Ordering::SeqCst) {
            let Some(cl) = c.as_mut() else {
                c = connect(&addr, Some(wid.clone()));
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let job = match cl.fetch(&qs) {
                Ok(Some(job)) => job,
                Ok(None) => continue,
                Err(_) => {
                    c = None;
                    continue;
                }
            };
            std::thread::sleep(work);
            let id = id_of(&job);
            match cl.ack(&id, Some(&json!({"by": wid}))) {
                Ok(()) => acked.lock().unwrap().push(id),
                Err(_) => c = None,
            }
        }
    })
}

/// Stop `acking_worker`s, wait for them, and check that no ACK was answered +OK twice;
/// the ids ACKed.
pub fn stop_acking(
    stop: &AtomicBool,
    workers: Vec<JoinHandle<()>>,
    acked: &Mutex<Vec<String>>,
) -> Vec<String> {
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let mut seen = HashSet::new();
    let twice: Vec<_> = acked.iter().filter(|id| !seen.insert(*id)).collect();
    assert!(twice.is_empty(), "ACK answered +OK twice for {twice:?}");
    acked
}

/// Each workflow in `workflows` (their WORKFLOW GET documents: a chain whose third step is
/// a batch with `on_complete` and `on_success` callbacks) ran each step once: `jobs` has
/// exactly `total` jobs, all completed, one per (workflow, step), every workflow counts all
/// its jobs completed and none failed, and each callback's job is the one job of its step.
pub fn assert_each_step_once(jobs: &[Value], workflows: &[Value], total: usize) {
    let mut by_step: HashMap<(String, String), Vec<String>> = HashMap::new();
    for j in jobs {
        assert_eq!(j["state"], "completed", "{j}");
        let key = (
            j["workflow_id"].as_str().expect("workflow_id").to_string(),
            j["workflow_step"]
                .as_str()
                .expect("workflow_step")
                .to_string(),
        );
        by_step.entry(key).or_default().push(id_of(j));
    }
    let twice: Vec<_> = by_step.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "steps enqueued more than once: {twice:?}");
    assert_eq!(jobs.len(), total, "one job per step of each workflow");
    for wf in workflows {
        let m = &wf["metadata"];
        assert_eq!(
            (&m["completed_count"], &m["failed_count"]),
            (&m["job_count"], &json!(0)),
            "{wf}"
        );
        let id = wf["id"].as_str().expect("workflow id");
        let cb = &wf["steps"][2]["callbacks"];
        for name in ["on_complete", "on_success"] {
            let key = (id.to_string(), format!("2.{name}"));
            assert_eq!(cb[name]["state"], "completed", "{wf}");
            assert_eq!(
                by_step.get(&key).map(|ids| ids[0].as_str()),
                cb[name]["job_id"].as_str(),
                "the callback's one job"
            );
        }
    }
}

/// What producers and workers saw answered +OK.
#[derive(Default)]
pub struct Ledger {
    pub pushed: Mutex<Vec<String>>,
    pub acked: Mutex<Vec<String>>,
    pub push_errors: AtomicUsize,
    /// The refused pushes by error code (`io` for a cut connection).
    pub push_error_codes: Mutex<HashMap<String, usize>>,
}

fn producer(
    lb: String,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    n: usize,
    queues: Arc<Vec<String>>,
) {
    let mut c = None;
    let mut i = n;
    while !stop.load(Ordering::SeqCst) {
        let Some(client) = c.as_mut() else {
            c = connect(&lb, None);
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        // A short visibility timeout: a job claimed on the node that died comes back soon.
        i += 1;
        let job = test_job(
            "failover",
            json!({"args": [n], "timeout": 3, "queue": queues[i % queues.len()]}),
        );
        match client.push(&job) {
            Ok(j) => ledger.pushed.lock().unwrap().push(id_of(&j)),
            Err(e) => {
                ledger.push_errors.fetch_add(1, Ordering::SeqCst);
                let code = e.code().unwrap_or("io").to_string();
                *ledger
                    .push_error_codes
                    .lock()
                    .unwrap()
                    .entry(code)
                    .or_default() += 1;
                c = None;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn worker(
    lb: String,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    wid: String,
    queues: Arc<Vec<String>>,
) {
    let queues: Vec<&str> = queues.iter().map(String::as_str).collect();
    let mut c: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(client) = c.as_mut() else {
            c = connect(&lb, Some(wid.clone()));
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        let job = match client.fetch(&queues) {
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

/// Producers pushing to queue `failover` and workers working it, all through haproxy.
pub struct Load {
    pub ledger: Arc<Ledger>,
    stop_producers: Arc<AtomicBool>,
    stop_workers: Arc<AtomicBool>,
    producers: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    pub fn start(lb: &str, producers: usize, workers: usize) -> Load {
        Load::split(lb, lb, producers, workers)
    }

    /// Producers connected to `to_producers` and workers to `to_workers` (two nodes, say).
    pub fn split(to_producers: &str, to_workers: &str, producers: usize, workers: usize) -> Load {
        Load::over(
            to_producers,
            to_workers,
            producers,
            workers,
            vec!["failover".to_string()],
        )
    }

    /// [`split`](Self::split), producers pushing to `queues` in turn and workers fetching
    /// from all of them.
    pub fn over(
        to_producers: &str,
        to_workers: &str,
        producers: usize,
        workers: usize,
        queues: Vec<String>,
    ) -> Load {
        let queues = Arc::new(queues);
        let ledger = Arc::new(Ledger::default());
        let stop_producers = Arc::new(AtomicBool::new(false));
        let stop_workers = Arc::new(AtomicBool::new(false));
        let p = (0..producers)
            .map(|n| {
                let (lb, l, s, q) = (
                    to_producers.to_string(),
                    ledger.clone(),
                    stop_producers.clone(),
                    queues.clone(),
                );
                std::thread::spawn(move || producer(lb, l, s, n, q))
            })
            .collect();
        let w = (0..workers)
            .map(|n| {
                let (lb, l, s, q) = (
                    to_workers.to_string(),
                    ledger.clone(),
                    stop_workers.clone(),
                    queues.clone(),
                );
                let wid = format!("w-{n}");
                std::thread::spawn(move || worker(lb, l, s, wid, q))
            })
            .collect();
        Load {
            ledger,
            stop_producers,
            stop_workers,
            producers: p,
            workers: w,
        }
    }

    pub fn pushed(&self) -> usize {
        self.ledger.pushed.lock().unwrap().len()
    }

    /// Stop the producers (the workers go on until `finish_and_check`).
    pub fn stop_pushing(&mut self) {
        self.stop_producers.store(true, Ordering::SeqCst);
        for t in self.producers.drain(..) {
            t.join().unwrap();
        }
    }

    pub fn acked(&self) -> usize {
        self.ledger.acked.lock().unwrap().len()
    }

    /// Stop pushing, let the workers drain, and check the invariants: every push answered
    /// +OK is completed, and no ACK was answered +OK twice. Returns the pushes answered +OK
    /// and those refused or cut.
    pub fn finish_and_check(mut self, lb: &str) -> (usize, usize) {
        self.stop_pushing();
        let ledger = &self.ledger;
        let pushed: HashSet<String> = ledger.pushed.lock().unwrap().iter().cloned().collect();
        // Done when each is completed: by an ACK a worker saw answered, or on the server (an
        // ACK whose reply a worker lost to a timeout or a cut during the takeover still
        // completed its job, and no worker will take it again).
        let mut probe: Option<Client> = None;
        let t0 = Instant::now();
        loop {
            let acked: HashSet<String> = ledger.acked.lock().unwrap().iter().cloned().collect();
            let missing: Vec<&String> = pushed.difference(&acked).collect();
            if missing.is_empty() {
                break;
            }
            if probe.is_none() {
                probe = connect(lb, None);
            }
            if let Some(cl) = probe.as_mut() {
                let states: Vec<(String, String)> = missing
                    .iter()
                    .map(|id| match cl.job(id) {
                        Ok(j) => (
                            id.to_string(),
                            j["state"].as_str().unwrap_or("?").to_string(),
                        ),
                        Err(e) => (id.to_string(), format!("error: {e}")),
                    })
                    .collect();
                if states.iter().all(|(_, st)| st == "completed") {
                    break;
                }
                if states.iter().any(|(_, st)| st.starts_with("error: ")) {
                    probe = None;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "acknowledged pushes not completed after 60 s: {:?}",
                    states
                        .iter()
                        .filter(|(_, st)| st != "completed")
                        .take(10)
                        .collect::<Vec<_>>()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "no node to ask at {lb}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop_workers.store(true, Ordering::SeqCst);
        for t in self.workers.drain(..) {
            t.join().unwrap();
        }
        let acked = ledger.acked.lock().unwrap().clone();
        let mut seen = HashSet::new();
        let twice: Vec<_> = acked.iter().filter(|id| !seen.insert(*id)).collect();
        assert!(twice.is_empty(), "ACK answered +OK twice for {twice:?}");
        // The node serving now agrees: each of them is completed.
        let mut cl = connect(lb, None).expect("connect through haproxy");
        for id in &pushed {
            let job: Value = cl.job(id).expect("JOB");
            assert_eq!(job["state"], "completed", "{id}");
        }
        (pushed.len(), ledger.push_errors.load(Ordering::SeqCst))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop_producers.store(true, Ordering::SeqCst);
        self.stop_workers.store(true, Ordering::SeqCst);
    }
}
