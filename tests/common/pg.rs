//! A throw-away PostgreSQL 15 of a test's own, which the test may stop, start and restart
//! (the shared one of `OJSD_TEST_POSTGRES_URL` must not be). Made as `.ci/postgres.sh`
//! makes that one: `initdb` into a temporary directory (as the `postgres` user when the
//! tests run as root, since PostgreSQL refuses to run as root), listening on 127.0.0.1 on a
//! free port and on a socket in that directory, with fsync and synchronous_commit on.
//! Stopped (immediate) and removed on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct TestPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

/// Where `initdb` and `pg_ctl` are: `OJSD_PG_BIN`, else Debian's PostgreSQL 15.
fn pg_bin() -> Option<PathBuf> {
    let bin = std::env::var("OJSD_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/usr/lib/postgresql/15/bin"));
    bin.join("initdb").exists().then_some(bin)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl TestPostgres {
    /// A fresh cluster with a database `ojsd_test`, running; `None` (with a notice) when
    /// PostgreSQL's programs are not installed.
    pub fn start() -> Option<TestPostgres> {
        let Some(bin) = pg_bin() else {
            eprintln!(
                "skipped: PostgreSQL 15's initdb is not installed (.ci/postgres.sh installs it; \
                 OJSD_PG_BIN points elsewhere)"
            );
            return None;
        };
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("ojsd-test-pg")
            .tempdir()
            .expect("tempdir");
        if as_postgres {
            let ok = Command::new("chown")
                .args(["postgres"])
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown postgres {}", dir.path().display());
        }
        let port = super::cluster::free_port();
        let pg = TestPostgres {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "--auth=trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        pg.up();
        pg.run(
            "createdb",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &pg.port.to_string(),
                "-U",
                "postgres",
                "ojsd_test",
            ],
        );
        Some(pg)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/ojsd_test", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let out = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir().join("server.log")).unwrap_or_default()
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let log = self.dir().join("server.log");
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=on \
             -c synchronous_commit=on -c max_connections=100",
            self.port,
            self.dir().display()
        );
        let mut all = vec![
            "-D",
            data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-t",
            "60",
            "-o",
            &opts,
        ];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn up(&self) {
        self.pg_ctl(&["start"]);
    }

    /// Start it again after `stop`.
    pub fn start_again(&self) {
        self.up();
    }

    /// Stop it: `-m fast` ends every session at once (clients see their connections
    /// closed), as an operator's restart or a failover of the database does.
    pub fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "stop"]);
    }

    /// `pg_ctl restart -m fast`.
    pub fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "restart"]);
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", data.to_str().unwrap(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // Give the server a moment to let go of its files before they are removed.
        std::thread::sleep(Duration::from_millis(50));
    }
}
