//! Test harness: start a real `ojsd` process on a free port with its own data directory,
//! talk to it over sockets, stop it politely (SIGTERM) or not (SIGKILL), restart it on the
//! same data. Servers run with `--test-clock`, so tests move time with `CLOCK ADVANCE`
//! instead of sleeping. `OJSD_TEST_STORE=sled` runs them on sled instead of the default
//! store; `OJSD_TEST_STORE=postgres` on the PostgreSQL store in `OJSD_TEST_POSTGRES_URL`,
//! each server in a schema of its own and under a node id of its own that a restart keeps
//! (so a restarted server takes its partition back at once, as a restarted node would).
#![allow(dead_code)]

use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub mod cluster;
pub mod http;
pub mod pg;
pub mod raw;

pub struct Server {
    child: Option<Child>,
    pub addr: String,
    /// The HTTP front end's address (`ojsd http listening on ...`); empty when a test
    /// turned it off with `--http-listen off`.
    pub http_addr: String,
    /// The Faktory dialect's address (`ojsd faktory listening on ...`); empty unless a test
    /// passed `--faktory-listen`.
    pub faktory_addr: String,
    dir: tempfile::TempDir,
    /// The data dir when a test chose it (`start_in`); else `<dir>/db`.
    data: Option<PathBuf>,
    extra: Vec<String>,
    /// `ulimit -n` for the server process, when a test wants it to run short of descriptors.
    fd_limit: Option<u32>,
    /// With the postgres store: this server's schema, also its node id.
    pg_schema: String,
}

/// The flags every test server gets unless a test overrides them: a flag repeated in
/// `extra` replaces the base one (clap refuses a flag given twice).
const BASE_ARGS: &[&str] = &[
    "--test-clock",
    "--fetch-wait-ms",
    "300",
    "--log-level",
    "warn",
    "--http-listen",
    "127.0.0.1:0",
];

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_limited(None, extra)
    }

    /// Like `start_with`, with the server's file descriptors limited to `n` (`ulimit -n`).
    pub fn start_with_fd_limit(n: u32, extra: &[&str]) -> Server {
        Server::start_limited(Some(n), extra)
    }

    /// Like `start_with`, on a data dir the test chose (and may have filled by hand).
    pub fn start_in(data: PathBuf, extra: &[&str]) -> Server {
        Server::start_full(None, Some(data), extra)
    }

    fn start_limited(fd_limit: Option<u32>, extra: &[&str]) -> Server {
        Server::start_full(fd_limit, None, extra)
    }

    fn start_full(fd_limit: Option<u32>, data: Option<PathBuf>, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Server {
            child: None,
            addr: String::new(),
            http_addr: String::new(),
            faktory_addr: String::new(),
            dir,
            data,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            fd_limit,
            pg_schema: format!("t_{:016x}", rand_u64()),
        };
        s.spawn();
        s
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let mut command = match self.fd_limit {
            None => Command::new(env!("CARGO_BIN_EXE_ojsd")),
            // `exec` keeps the pid, so `pid()` and the signals still reach ojsd itself.
            Some(n) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_ojsd"));
                c
            }
        };
        command
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(self.data_path());
        if let Some(store) = test_store() {
            if !self
                .extra
                .iter()
                .any(|e| e == "--store" || e.starts_with("--store="))
            {
                command.args(["--store", &store]);
                if store == "postgres" {
                    command.args(["--postgres-url", &test_postgres_url()]);
                    command.args(["--postgres-schema", &self.pg_schema]);
                    command.args(["--node-id", &self.pg_schema]);
                }
            }
        }
        let mut child = command
            .args(base_args(&self.extra))
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn ojsd");
        let stdout = child.stdout.take().expect("stdout");
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read listening line");
        let addr = line
            .trim()
            .strip_prefix("ojsd listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from ojsd: {line:?}"))
            .to_string();
        self.addr = addr;
        // The HTTP address comes second, unless HTTP is off.
        let http_off = self
            .extra
            .windows(2)
            .any(|w| w[0] == "--http-listen" && w[1].eq_ignore_ascii_case("off"))
            || self
                .extra
                .iter()
                .any(|e| e.eq_ignore_ascii_case("--http-listen=off"));
        self.http_addr = String::new();
        if !http_off {
            let mut line = String::new();
            stdout
                .read_line(&mut line)
                .expect("read http listening line");
            self.http_addr = line
                .trim()
                .strip_prefix("ojsd http listening on ")
                .unwrap_or_else(|| panic!("unexpected second line from ojsd: {line:?}"))
                .to_string();
        }
        self.faktory_addr = String::new();
        if self.extra.iter().any(|e| e.starts_with("--faktory-listen")) {
            let mut line = String::new();
            stdout
                .read_line(&mut line)
                .expect("read faktory listening line");
            self.faktory_addr = line
                .trim()
                .strip_prefix("ojsd faktory listening on ")
                .unwrap_or_else(|| panic!("unexpected line from ojsd: {line:?}"))
                .to_string();
        }
        self.child = Some(child);
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.addr).expect("connect")
    }

    /// A consumer connection: HELLO carries this worker id.
    pub fn worker(&self, wid: &str) -> Client {
        let opts = ConnectOptions {
            wid: Some(wid.to_string()),
            ..Default::default()
        };
        Client::connect_with(&self.addr, &opts).expect("connect worker")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGTERM and wait; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        signal(child.id(), "-TERM");
        child.wait().ok().and_then(|s| s.code())
    }

    /// Send a signal (`-STOP`, `-CONT`, ...) to the server process.
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            signal(c.id(), sig);
        }
    }

    /// Wait up to `limit` for the server to exit by itself; its exit code if it did.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<i32> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Some(status.code().unwrap_or(-1));
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    /// SIGKILL: the process gets no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same data directory (a new port).
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
        self.spawn();
    }

    pub fn data_path(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| self.dir.path().join("db"))
    }
}

/// The store every test server runs on: `OJSD_TEST_STORE` (fjall or sled) if set, else
/// ojsd's default. CI runs the suites that depend on the store once more with sled.
pub fn test_store() -> Option<String> {
    std::env::var("OJSD_TEST_STORE")
        .ok()
        .filter(|s| !s.is_empty())
}

/// True, with a notice, when the store the tests are asked to run on cannot be had:
/// `OJSD_TEST_STORE=postgres` without `OJSD_TEST_POSTGRES_URL`. The suites that CI runs
/// on every store start each test with it (and return), so that asking for PostgreSQL
/// where there is none skips them instead of failing.
pub fn store_missing() -> bool {
    let missing = test_store().as_deref() == Some("postgres")
        && std::env::var("OJSD_TEST_POSTGRES_URL").map_or(true, |u| u.is_empty());
    if missing {
        eprintln!(
            "skipped: OJSD_TEST_STORE=postgres but OJSD_TEST_POSTGRES_URL is not set \
             (source .ci/postgres.sh, or .ci/run, sets it)"
        );
    }
    missing
}

/// The test database for `OJSD_TEST_STORE=postgres` (.ci/run starts one and sets it).
pub fn test_postgres_url() -> String {
    std::env::var("OJSD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .expect("OJSD_TEST_STORE=postgres needs OJSD_TEST_POSTGRES_URL")
}

/// A random number for names (no rand crate in the tests' dependencies).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// `BASE_ARGS` minus the flags (with their values) that `extra` sets itself.
fn base_args(extra: &[String]) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < BASE_ARGS.len() {
        let flag = BASE_ARGS[i];
        let n = match BASE_ARGS.get(i + 1) {
            Some(v) if !v.starts_with("--") => 2,
            _ => 1,
        };
        let overridden = extra
            .iter()
            .any(|e| e == flag || e.starts_with(&format!("{flag}=")));
        if !overridden {
            out.extend_from_slice(&BASE_ARGS[i..i + n]);
        }
        i += n;
    }
    out
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(sig).arg(pid.to_string()).status();
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Move the server's clock forward; every timer that falls due is applied before `+OK`.
pub fn advance(c: &mut Client, secs: f64) {
    match c.call(&format!("CLOCK ADVANCE {secs}")).expect("clock") {
        Reply::Simple(s) if s == "OK" => {}
        other => panic!("CLOCK ADVANCE failed: {other:?}"),
    }
}

/// The error code of a raw command's reply, or panic if it did not fail.
pub fn err_code(c: &mut Client, line: &str) -> String {
    match c.call(line).expect("call") {
        Reply::Error { code, .. } => code,
        other => panic!("expected an error for {line:?}, got {other:?}"),
    }
}

pub fn state_of(c: &mut Client, id: &str) -> String {
    let j = c.job(id).expect("JOB");
    j["state"].as_str().unwrap_or("").to_string()
}

pub fn id_of(job: &Value) -> String {
    job["id"].as_str().expect("job id").to_string()
}

// ---------------------------------------------------------------------------------------
// Time, polling and job helpers shared by the timer and durability suites.
// ---------------------------------------------------------------------------------------

/// Parse an RFC 3339 timestamp the server wrote (panics on anything else).
pub fn ts(v: &Value) -> chrono::DateTime<chrono::Utc> {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("expected a timestamp string, got {v}"));
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("bad timestamp {s:?}: {e}"))
        .with_timezone(&chrono::Utc)
}

/// Format a time the way a client would send `scheduled_at` / `expires_at`.
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The server's engine clock (test offset included), from `INFO`.
pub fn server_now(c: &mut Client) -> chrono::DateTime<chrono::Utc> {
    let info = c.info().expect("INFO");
    ts(&info["server"]["now"])
}

/// Seconds between two timestamps as a float (b - a).
pub fn secs_between(a: chrono::DateTime<chrono::Utc>, b: chrono::DateTime<chrono::Utc>) -> f64 {
    (b - a).num_microseconds().expect("duration in range") as f64 / 1e6
}

/// Push and return the new job's id.
pub fn push_id(c: &mut Client, job: &Value) -> String {
    id_of(&c.push(job).expect("PUSH"))
}

/// FETCH from one queue and insist that a job came back.
pub fn fetch_one(c: &mut Client, queue: &str) -> Value {
    c.fetch(&[queue])
        .expect("FETCH")
        .unwrap_or_else(|| panic!("expected a job from queue {queue}"))
}

/// FETCH from one queue and insist that nothing came back (blocks for the server's wait).
pub fn fetch_none(c: &mut Client, queue: &str) {
    if let Some(j) = c.fetch(&[queue]).expect("FETCH") {
        panic!("expected no job from queue {queue}, got {j}");
    }
}

/// Ids currently in the dead-letter set, newest first.
pub fn dead_ids(c: &mut Client) -> Vec<String> {
    let reply = match c.call("DEAD LIST {\"limit\": 1000}").expect("DEAD LIST") {
        Reply::Bulk(b) => serde_json::from_slice::<Value>(&b).expect("DEAD LIST json"),
        other => panic!("DEAD LIST failed: {other:?}"),
    };
    reply["jobs"]
        .as_array()
        .expect("DEAD LIST jobs")
        .iter()
        .map(id_of)
        .collect()
}

/// Poll `f` until it returns `Some`, or panic with `what` after `timeout`.
pub fn wait_for<T>(
    timeout: std::time::Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A fresh client-side job id (lowercase UUIDv7, which the server accepts verbatim).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// Send `lines` pipelined, in chunks of 200 (well under the server's pipeline depth, so
/// neither side's socket buffer can fill up), and return one reply per line, in order.
pub fn pipeline(c: &mut Client, lines: &[String]) -> Vec<Reply> {
    let mut replies = Vec::with_capacity(lines.len());
    for chunk in lines.chunks(200) {
        for line in chunk {
            c.send_line(line).expect("pipelined send");
        }
        c.flush().expect("pipelined flush");
        for _ in chunk {
            replies.push(c.read_reply().expect("pipelined reply"));
        }
    }
    replies
}

/// The states of many jobs in one pipelined pass; `None` for a job the server does not have.
pub fn states_of(c: &mut Client, ids: &[String]) -> Vec<Option<String>> {
    let lines: Vec<String> = ids.iter().map(|id| format!("JOB {id}")).collect();
    pipeline(c, &lines)
        .into_iter()
        .zip(ids)
        .map(|(r, id)| match r {
            Reply::Bulk(b) => {
                let v: Value = serde_json::from_slice(&b).expect("JOB json");
                Some(v["state"].as_str().expect("state").to_string())
            }
            Reply::Error { code, .. } if code == "NOT_FOUND" => None,
            other => panic!("JOB {id}: {other:?}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Raw-command helpers shared by the protocol and lifecycle suites.
// ---------------------------------------------------------------------------------------

/// Send a raw command line and insist on `+OK`.
pub fn call_ok(c: &mut Client, line: &str) {
    match c.call(line).expect("call") {
        Reply::Simple(s) if s == "OK" => {}
        other => panic!("{line}: expected +OK, got {other:?}"),
    }
}

/// Send a raw command line and parse its bulk JSON reply.
pub fn call_json(c: &mut Client, line: &str) -> Value {
    match c.call(line).expect("call") {
        Reply::Bulk(b) => serde_json::from_slice(&b).expect("bulk reply is JSON"),
        other => panic!("{line}: expected a bulk reply, got {other:?}"),
    }
}

/// Some fields of an object as an array, for one-line comparisons:
/// `assert_eq!(pick(&job, &["state", "attempt"]), json!(["active", 1]))`.
pub fn pick(v: &Value, keys: &[&str]) -> Value {
    Value::Array(keys.iter().map(|k| v[*k].clone()).collect())
}

/// The ids of some job envelopes, in order.
pub fn ids_of(jobs: &[Value]) -> Vec<String> {
    jobs.iter().map(id_of).collect()
}

/// Wait until `n` FETCHes are blocked in the engine waiting for work (INFO
/// `totals.waiting_fetches`), so a test can act while they are parked.
pub fn wait_for_blocked_fetches(c: &mut Client, n: u64) {
    wait_for(std::time::Duration::from_secs(5), "blocked FETCHes", || {
        (c.info().expect("INFO")["totals"]["waiting_fetches"] == n).then_some(())
    });
}

/// A `test.job` in `queue`, with the attributes of `extra` added.
pub fn test_job(queue: &str, extra: Value) -> Value {
    let mut j = serde_json::json!({"type": "test.job", "args": [], "queue": queue});
    for (k, v) in extra.as_object().expect("extra attributes") {
        j[k] = v.clone();
    }
    j
}

/// Fetch the one job of `queue`, check it is `id` at `attempt`, and FAIL it with `etype`.
pub fn fetch_and_fail(w: &mut Client, queue: &str, id: &str, attempt: u64, etype: &str) {
    let job = fetch_one(w, queue);
    assert_eq!(id_of(&job), id);
    assert_eq!(job["attempt"], attempt, "attempt number on fetch");
    w.fail(id, etype, &format!("failure {attempt}"), &[])
        .expect("FAIL");
}

/// Seconds from the failure (the newest `errors` entry) to `next_retry_at`.
pub fn retry_delay(job: &Value) -> f64 {
    let errors = job["errors"].as_array().expect("errors");
    let failed_at = ts(&errors.last().expect("an error entry")["timestamp"]);
    secs_between(failed_at, ts(&job["next_retry_at"]))
}

/// Every event of `types` in the log so far, replayed from the start up to the
/// `queue.paused` event of `mark` (a fresh queue the caller has just paused), so the read
/// never waits for events that will not come.
#[allow(dead_code)]
pub fn events_up_to_mark(addr: &str, types: &[&str], mark: &str) -> Vec<Value> {
    let opts = ConnectOptions {
        timeout: Some(std::time::Duration::from_secs(10)),
        ..Default::default()
    };
    let mut sub = Client::connect_with(addr, &opts).expect("connect");
    let mut wanted: Vec<&str> = types.to_vec();
    wanted.push("queue.paused");
    let line = format!(
        "SUBSCRIBE {}",
        serde_json::json!({"event_types": wanted, "after": 0})
    );
    assert_eq!(
        sub.call(&line).expect("SUBSCRIBE"),
        Reply::Simple("OK".into())
    );
    let mut out = Vec::new();
    loop {
        let e: Value = match sub.read_reply().expect("event") {
            Reply::Bulk(b) => serde_json::from_slice(&b).expect("event JSON"),
            other => panic!("expected an event, got {other:?}"),
        };
        if e["type"] == "queue.paused" {
            if e["data"]["queue"] == mark {
                return out;
            }
            continue;
        }
        out.push(e);
    }
}
