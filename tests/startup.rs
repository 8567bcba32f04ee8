//! How ojsd starts, and how it refuses to: ports bound before the data dir is touched, a
//! data dir in use or in the way, a bad log level. Every case runs the real binary.

mod common;

use common::call_json;
use ojs_client::Client;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Generous: a refusal takes milliseconds; the bound only keeps a hung process from
/// hanging the suite, and no assertion depends on how fast the machine is.
const EXIT_WITHIN: Duration = Duration::from_secs(60);

/// The binary with no `OJSD_*` variable inherited from whoever runs the tests.
fn ojsd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ojsd"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OJSD_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

struct Exit {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run to its exit (which must come), collecting both outputs.
fn run_to_exit(mut cmd: Command) -> Exit {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ojsd");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(EXIT_WITHIN) {
        Ok(out) => {
            let out = out.expect("wait for ojsd");
            Exit {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("ojsd did not exit within {EXIT_WITHIN:?}");
        }
    }
}

/// The one line a refusal prints on stderr (it must be exactly one).
fn one_line(e: &Exit) -> &str {
    let lines: Vec<&str> = e.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one stderr line, got {:?}", e.stderr);
    lines[0]
}

/// A running ojsd started by a test, killed when dropped.
struct Running {
    child: Child,
    addr: String,
    /// Kept open: ojsd prints a second line (HTTP), and a closed pipe would kill it.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Running {
    /// Start and wait for `ojsd listening on ADDR` (printed once it serves).
    fn start(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn ojsd");
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        stdout.read_line(&mut line).expect("read the listening line");
        let addr = match line.trim().strip_prefix("ojsd listening on ") {
            Some(a) => a.to_string(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ojsd did not start: first stdout line {line:?}");
            }
        };
        Running {
            child,
            addr,
            _stdout: stdout,
        }
    }

    fn client(&self) -> Client {
        Client::connect(&self.addr).expect("connect")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn taken_port() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a port to occupy");
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

#[test]
fn a_taken_port_fails_at_once_and_leaves_no_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (_held, taken) = taken_port();
    for (flag, other) in [("--listen", "--http-listen"), ("--http-listen", "--listen")] {
        let data = tmp.path().join(format!("data{flag}"));
        let mut cmd = ojsd();
        cmd.args([flag, &taken, other, "127.0.0.1:0", "--data-dir"])
            .arg(&data);
        let e = run_to_exit(cmd);
        assert_eq!(e.code, Some(1), "{flag} on a taken port: {}", e.stderr);
        let line = one_line(&e);
        assert!(
            line.starts_with(&format!("ojsd: cannot listen on {taken} ({flag}): "))
                && line.contains("in use"),
            "{line}"
        );
        assert_eq!(e.stdout, "", "nothing announced as listening");
        assert!(
            !data.exists(),
            "{flag} on a taken port: the data dir {} was created",
            data.display()
        );
    }
}

#[test]
fn a_second_ojsd_on_the_same_data_dir_is_refused_and_the_first_serves_on() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(&data);
    let first = Running::start(cmd);
    let mut c = first.client();
    call_json(&mut c, r#"PUSH {"type":"t","args":[]}"#);

    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&data);
    let e = run_to_exit(cmd);
    assert_eq!(e.code, Some(1), "{}", e.stderr);
    assert_eq!(
        one_line(&e),
        format!("ojsd: another ojsd is using {}", data.display())
    );
    assert_eq!(e.stdout, "");

    // The refused start changed nothing for the one that runs.
    let info = c.info().expect("INFO");
    assert_eq!(info["totals"]["jobs"], 1, "{info}");
}

#[test]
fn a_file_where_the_data_dir_should_be_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    for data in [file.clone(), file.join("below")] {
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(&data);
        let e = run_to_exit(cmd);
        assert_eq!(e.code, Some(1), "{}", e.stderr);
        assert_eq!(
            one_line(&e),
            format!(
                "ojsd: cannot open data dir {}: {} is not a directory",
                data.display(),
                file.display()
            )
        );
    }
}

#[test]
fn an_invalid_log_level_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for (how, level) in [("flag", "infoo"), ("env", "infoo"), ("flag", "ojsd=loud")] {
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(&data);
        if how == "flag" {
            cmd.args(["--log-level", level]);
        } else {
            cmd.env("OJSD_LOG_LEVEL", level);
        }
        let e = run_to_exit(cmd);
        assert_eq!(e.code, Some(2), "{how} {level}: {}", e.stderr);
        let first = e.stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("error: invalid value '{level}' for '--log-level")),
            "{how} {level}: {}",
            e.stderr
        );
        assert!(!data.exists(), "a usage error touched the data dir");
    }
    // Directives that name their level are still accepted.
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--log-level", "warn,ojsd::server=debug"])
        .arg("--data-dir")
        .arg(&data);
    let _ok = Running::start(cmd);
}
