//! How ojsd starts, and how it refuses to: ports bound before the data dir is touched, a
//! data dir in use or in the way, a bad log level, and the config file with its precedence
//! (flag > OJSD_* variable > file > built-in default). Every case runs the real binary.

mod common;

use common::call_json;
use ojs_client::{Client, Reply};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
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
    assert_eq!(
        lines.len(),
        1,
        "expected one stderr line, got {:?}",
        e.stderr
    );
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
        stdout
            .read_line(&mut line)
            .expect("read the listening line");
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
    for store in STORES {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .args(["--store", store])
            .arg("--data-dir")
            .arg(&data);
        let first = Running::start(cmd);
        let mut c = first.client();
        call_json(&mut c, r#"PUSH {"type":"t","args":[]}"#);

        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .env("OJSD_STORE", store)
            .arg("--data-dir")
            .arg(&data);
        let e = run_to_exit(cmd);
        assert_eq!(e.code, Some(1), "{store}: {}", e.stderr);
        assert_eq!(
            one_line(&e),
            format!("ojsd: another ojsd is using {}", data.display()),
            "{store}"
        );
        assert_eq!(e.stdout, "");

        // The refused start changed nothing for the one that runs.
        let info = c.info().expect("INFO");
        assert_eq!(info["totals"]["jobs"], 1, "{store}: {info}");
    }
}

const STORES: [&str; 2] = ["fjall", "sled"];

/// Start on `data` with `store` (None: the default), push one job, stop politely.
fn push_one_and_stop(data: &Path, store: Option<&str>) {
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(data);
    if let Some(store) = store {
        cmd.args(["--store", store]);
    }
    let mut s = Running::start(cmd);
    call_json(&mut s.client(), r#"PUSH {"type":"t","args":[]}"#);
    let _ = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status();
    let status = s.child.wait().expect("wait for ojsd");
    assert_eq!(status.code(), Some(0), "ojsd stopped with {status:?}");
}

/// The jobs a server on `data` with `store` holds.
fn jobs_with(data: &Path, store: &str) -> u64 {
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .args(["--store", store])
        .arg("--data-dir")
        .arg(data);
    let s = Running::start(cmd);
    let info = s.client().info().expect("INFO");
    info["totals"]["jobs"].as_u64().expect("totals.jobs")
}

/// Starting with `store` on `data` is refused with the one line naming the store that
/// wrote it, and changes nothing in the directory.
fn assert_refused(data: &Path, store: &str, how: &str, written_by: &str) {
    let listing = || {
        let mut v: Vec<_> = std::fs::read_dir(data)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(data);
    if how == "env" {
        cmd.env("OJSD_STORE", store);
    } else {
        cmd.args(["--store", store]);
    }
    let e = run_to_exit(cmd);
    assert_eq!(
        e.code,
        Some(1),
        "{store} ({how}) on a {written_by} dir: {}",
        e.stderr
    );
    assert_eq!(
        one_line(&e),
        format!(
            "ojsd: {} was written by the {written_by} store; start with --store {written_by} \
             (or use an empty data dir)",
            data.display()
        )
    );
    assert_eq!(e.stdout, "");
    assert_eq!(listing(), before, "the refused start wrote nothing");
}

#[test]
fn a_data_dir_is_refused_by_the_store_that_did_not_write_it() {
    let tmp = tempfile::tempdir().unwrap();

    // The default store (fjall) writes a dir; sled refuses it, by flag or by variable.
    let fjall_dir = tmp.path().join("fjall");
    push_one_and_stop(&fjall_dir, None);
    assert_eq!(
        std::fs::read_to_string(fjall_dir.join("ojsd-store")).unwrap(),
        "fjall 2\n"
    );
    assert_refused(&fjall_dir, "sled", "flag", "fjall");
    assert_refused(&fjall_dir, "sled", "env", "fjall");
    assert_eq!(
        jobs_with(&fjall_dir, "fjall"),
        1,
        "the refusals lost nothing"
    );

    // A sled dir: refused by the default store, served by --store sled.
    let sled_dir = tmp.path().join("sled");
    push_one_and_stop(&sled_dir, Some("sled"));
    assert_eq!(
        std::fs::read_to_string(sled_dir.join("ojsd-store")).unwrap(),
        "sled 2\n"
    );
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
        .arg("--data-dir")
        .arg(&sled_dir);
    let e = run_to_exit(cmd);
    assert_eq!(e.code, Some(1), "{}", e.stderr);
    assert!(
        one_line(&e).contains("was written by the sled store"),
        "{}",
        e.stderr
    );
    assert_refused(&sled_dir, "fjall", "env", "sled");
    assert_eq!(jobs_with(&sled_dir, "sled"), 1);

    // A sled dir from before the marker existed is recognised as sled by its files.
    std::fs::remove_file(sled_dir.join("ojsd-store")).unwrap();
    assert_refused(&sled_dir, "fjall", "flag", "sled");
    assert_eq!(jobs_with(&sled_dir, "sled"), 1);
    assert_eq!(
        std::fs::read_to_string(sled_dir.join("ojsd-store")).unwrap(),
        "sled 2\n",
        "the old dir got its marker"
    );

    // A dir of the previous layout (whole-envelope records) is served and marked with
    // the current one, so that an ojsd that knows only the old layout refuses it.
    std::fs::write(fjall_dir.join("ojsd-store"), "fjall 1\n").unwrap();
    assert_eq!(jobs_with(&fjall_dir, "fjall"), 1);
    assert_eq!(
        std::fs::read_to_string(fjall_dir.join("ojsd-store")).unwrap(),
        "fjall 2\n"
    );
    std::fs::write(fjall_dir.join("ojsd-store"), "fjall 3\n").unwrap();
    let e = run_to_exit({
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .arg("--data-dir")
            .arg(&fjall_dir);
        cmd
    });
    assert_eq!(e.code, Some(1), "a newer layout is refused: {}", e.stderr);
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

/// A PUSH line whose envelope is exactly `n` bytes.
fn push_of_len(n: usize) -> String {
    let head = r#"{"type":"big.job","args":[""#;
    format!(r#"PUSH {head}{}"]}}"#, "x".repeat(n - head.len() - 3))
}

/// Whether the server takes an `n`-byte job (else it must refuse it as too large).
fn takes(c: &mut Client, n: usize) -> bool {
    match c.call(&push_of_len(n)).expect("PUSH") {
        Reply::Bulk(_) => true,
        Reply::Error { code, .. } if code == "PAYLOAD_TOO_LARGE" => false,
        other => panic!("PUSH of {n} bytes: {other:?}"),
    }
}

/// Whether `CLOCK ADVANCE` is on (`--test-clock`).
fn test_clock_on(c: &mut Client) -> bool {
    match c.call("CLOCK ADVANCE 1").expect("CLOCK") {
        Reply::Simple(s) if s == "OK" => true,
        Reply::Error { code, .. } if code == "UNKNOWN_COMMAND" => false,
        other => panic!("CLOCK ADVANCE: {other:?}"),
    }
}

#[test]
fn config_file_values_apply_and_env_and_flags_override_them() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("ojsd.toml");
    std::fs::write(
        &config,
        "# both spellings of a key are accepted\n\
         max_job_bytes = 2000\n\
         test-clock = true\n\
         http_listen = \"off\"\n\
         log_level = \"warn\"\n",
    )
    .unwrap();
    let start = |n: usize, env: &[(&str, &str)], flags: &[&str]| {
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(tmp.path().join(format!("data{n}")))
            .envs(env.iter().copied())
            .args(flags);
        Running::start(cmd)
    };

    // The file alone (named by OJSD_CONFIG): its limit and its flag apply.
    let s = start(1, &[("OJSD_CONFIG", config.to_str().unwrap())], &[]);
    let mut c = s.client();
    assert!(takes(&mut c, 2000), "the file's limit admits 2000 bytes");
    assert!(
        !takes(&mut c, 3000),
        "the file's limit (not 1 MiB) refuses 3000"
    );
    assert!(test_clock_on(&mut c), "test_clock = true from the file");
    drop(s);

    // A variable beats the file.
    let cfg = format!("--config={}", config.display());
    let env = [("OJSD_MAX_JOB_BYTES", "5000"), ("OJSD_TEST_CLOCK", "false")];
    let s = start(2, &env, &[&cfg]);
    let mut c = s.client();
    assert!(
        takes(&mut c, 3000),
        "the variable's 5000 beats the file's 2000"
    );
    assert!(!takes(&mut c, 7000));
    assert!(
        !test_clock_on(&mut c),
        "OJSD_TEST_CLOCK=false beats the file"
    );
    drop(s);

    // A flag beats both.
    let s = start(
        3,
        &env,
        &[
            "--config",
            config.to_str().unwrap(),
            "--max-job-bytes",
            "10000",
            "--test-clock",
        ],
    );
    let mut c = s.client();
    assert!(
        takes(&mut c, 7000),
        "the flag's 10000 beats the variable's 5000"
    );
    assert!(!takes(&mut c, 11000));
    assert!(
        test_clock_on(&mut c),
        "--test-clock beats OJSD_TEST_CLOCK=false"
    );
}

#[test]
fn config_file_mistakes_are_usage_errors_naming_the_file_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cases: &[(&str, Option<&str>, &str)] = &[
        (
            "unknown.toml",
            Some("listen = \"127.0.0.1:0\"\nmax_lines = 5\n"),
            "unknown key `max_lines`",
        ),
        (
            "malformed.toml",
            Some("listen = \"127.0.0.1:0\"\nmax_job_bytes = = 5\n"),
            "not valid TOML at line 2, column ",
        ),
        (
            "badvalue.toml",
            Some("max_job_bytes = \"lots\"\n"),
            "max_job_bytes = \"lots\": invalid digit",
        ),
        (
            "twice.toml",
            Some("max_job_bytes = 1\nmax-job-bytes = 2\n"),
            "are the same setting",
        ),
        ("missing.toml", None, "cannot read it: "),
    ];
    for (name, text, expect) in cases {
        let path = tmp.path().join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let mut cmd = ojsd();
        cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "off"])
            .arg("--config")
            .arg(&path)
            .arg("--data-dir")
            .arg(&data);
        let e = run_to_exit(cmd);
        assert_eq!(e.code, Some(2), "{name}: {}", e.stderr);
        let line = one_line(&e);
        let prefix = format!("error: config {}: ", path.display());
        assert!(
            line.starts_with(&prefix) && line.contains(expect),
            "{name}: expected {prefix}...{expect}..., got {line}"
        );
        assert!(
            !data.exists(),
            "{name}: a refused config touched the data dir"
        );
    }
}

/// Every settable flag of `ojsd --help` with its default (`None` when it has none).
fn flags_from_help() -> BTreeMap<String, Option<String>> {
    let mut cmd = ojsd();
    cmd.arg("--help");
    let e = run_to_exit(cmd);
    assert_eq!(e.code, Some(0), "{}", e.stderr);
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in e.stdout.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("--") {
            let name = rest.split([' ', '=']).next().unwrap().to_string();
            flags.insert(name.clone(), None);
            current = Some(name);
        } else if t.starts_with("-h, --help") || t.starts_with("-V, --version") {
            current = None;
        } else if let (Some(name), Some(d)) = (&current, t.strip_prefix("[default: ")) {
            flags.insert(name.clone(), Some(d.trim_end_matches(']').to_string()));
        }
    }
    flags.remove("config");
    flags
}

#[test]
fn the_sample_config_lists_every_flag_with_its_default_and_is_accepted() {
    let sample_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ojsd.toml.sample");
    let sample = std::fs::read_to_string(&sample_path).expect("ojsd.toml.sample");
    // Settings are the commented-out `# key = value` lines.
    let mut settings = BTreeMap::new();
    let mut lines = BTreeMap::new();
    for line in sample.lines() {
        let Some(rest) = line.strip_prefix("# ") else {
            continue;
        };
        let Some((key, value)) = rest.split_once(" = ") else {
            continue;
        };
        if key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            // `tokens` is the file's spelling of the repeatable `--token` (its alias).
            let key = if key == "tokens" { "token" } else { key };
            let flag = key.replace('_', "-");
            settings.insert(flag.clone(), value.trim_matches('"').to_string());
            lines.insert(flag, rest.to_string());
        }
    }
    let flags = flags_from_help();
    let missing: Vec<&String> = flags
        .keys()
        .filter(|f| !settings.contains_key(*f))
        .collect();
    let extra: Vec<&String> = settings
        .keys()
        .filter(|k| !flags.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ojsd.toml.sample is out of date: flags missing from it {missing:?}, keys that are \
         not flags {extra:?}"
    );
    for (flag, default) in &flags {
        if let Some(default) = default {
            assert_eq!(
                &settings[flag], default,
                "ojsd.toml.sample gives {flag} a value other than its default"
            );
        }
    }

    // Its settings that have a built-in default, uncommented, are accepted as they are
    // (those without one, like password, are examples).
    let uncommented: String = settings
        .iter()
        .filter(|(flag, _)| matches!(flags.get(*flag), Some(Some(_))))
        .map(|(flag, _)| lines[flag].clone() + "\n")
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("all.toml");
    std::fs::write(&config, uncommented).unwrap();
    let mut cmd = ojsd();
    cmd.arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(tmp.path().join("data"));
    let s = Running::start(cmd);
    let mut c = s.client();
    assert_eq!(c.info().expect("INFO")["totals"]["jobs"], 0);
}

/// An ojsd on ephemeral TCP and HTTP ports (plus `extra` flags) with its stderr lines sent
/// to the receiver as they come: the process, its HTTP address, its log.
fn spawn_logging(dir: &Path, extra: &[&str]) -> (Child, String, mpsc::Receiver<String>) {
    let mut cmd = ojsd();
    cmd.args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--data-dir")
        .arg(dir.join("db"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ojsd");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for l in &mut lines {
        stdout.read_line(l).expect("a listening line");
    }
    let http = lines[1]
        .trim()
        .strip_prefix("ojsd http listening on ")
        .expect("the HTTP line")
        .to_string();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, http, rx)
}

/// The start-up log names the dashboard's address, the one a newcomer opens first.
#[test]
fn the_dashboard_address_is_logged_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, http, rx) = spawn_logging(dir.path(), &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut line = None;
    while let Ok(l) = rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
    {
        if l.contains("dashboard:") {
            line = Some(l);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("a dashboard line on stderr");
    assert!(
        line.contains(&format!("dashboard: http://{http}/")),
        "{line}"
    );
}

/// A worker that fetched and acknowledged over HTTP and then went away (the README's
/// fetch/ack example) lost nothing, so it gets no warning; a worker that went away holding
/// a job does, naming it.
#[test]
fn only_a_worker_that_held_jobs_is_warned_about_when_it_goes_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, http, rx) = spawn_logging(dir.path(), &["--heartbeat-timeout", "1"]);
    let post = |path: &str, body: serde_json::Value| {
        let r = common::http::send(&http, "POST", path, &body.to_string());
        assert!(r.status < 300, "{path}: {}", r.text());
        r.json()
    };
    post(
        "/ojs/v1/jobs",
        serde_json::json!({"type": "a.b", "args": [], "options": {"queue": "qa"}}),
    );
    post(
        "/ojs/v1/jobs",
        serde_json::json!({"type": "a.b", "args": [], "options": {"queue": "qb"}}),
    );
    let got = post(
        "/ojs/v1/workers/fetch",
        serde_json::json!({"queues": ["qa"], "worker_id": "done-worker", "wait_ms": 0}),
    );
    let id = got["jobs"][0]["id"].as_str().expect("a job").to_string();
    post(
        "/ojs/v1/workers/ack",
        serde_json::json!({"job_id": id, "worker_id": "done-worker"}),
    );
    post(
        "/ojs/v1/workers/fetch",
        serde_json::json!({"queues": ["qb"], "worker_id": "holding-worker", "wait_ms": 0}),
    );
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !seen.iter().any(|l: &String| l.contains("holding-worker")) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    // The sweep that found one finds the other in the same pass, or did before.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    let all = seen.join("\n");
    assert!(
        seen.iter().any(|l| l.contains("WARN")
            && l.contains("holding-worker")
            && l.contains("requeueing")),
        "no warning for the worker that held a job:\n{all}"
    );
    assert!(
        !seen.iter().any(|l| l.contains("done-worker")),
        "the worker that held nothing was logged:\n{all}"
    );
}
