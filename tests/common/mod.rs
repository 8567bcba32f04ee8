//! Test harness: start a real `ojsd` process on a free port with its own data directory,
//! talk to it over sockets, stop it politely (SIGTERM) or not (SIGKILL), restart it on the
//! same data. Servers run with `--test-clock`, so tests move time with `CLOCK ADVANCE`
//! instead of sleeping.
#![allow(dead_code)]

use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Server {
    child: Option<Child>,
    pub addr: String,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

/// The flags every test server gets unless a test overrides them (later flags win in clap,
/// so `extra` may repeat one).
const BASE_ARGS: &[&str] = &[
    "--test-clock",
    "--fetch-wait-ms",
    "300",
    "--log-level",
    "warn",
];

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Server {
            child: None,
            addr: String::new(),
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(self.dir.path().join("db"))
            .args(BASE_ARGS)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn ojsd");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read listening line");
        let addr = line
            .trim()
            .strip_prefix("ojsd listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from ojsd: {line:?}"))
            .to_string();
        self.addr = addr;
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
        self.dir.path().join("db")
    }
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
