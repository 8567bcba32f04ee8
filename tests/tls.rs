//! TLS on both listeners (`--tls-cert`, `--tls-key`), with real TLS clients: rustls in
//! this process, and `openssl s_client` when the machine has it. The certificate is
//! self-signed and made at test time (rcgen).

mod common;

use common::*;
use ojs_client::wire::read_reply;
use ojs_client::Reply;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A self-signed certificate for localhost and 127.0.0.1, written as PEM files.
struct Cert {
    dir: tempfile::TempDir,
    der: CertificateDer<'static>,
}

impl Cert {
    fn new() -> Cert {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("self-signed certificate");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
        Cert {
            dir,
            der: ck.cert.der().clone(),
        }
    }

    fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.path().join("key.pem")
    }

    /// A server with TLS on both listeners.
    fn server(&self, extra: &[&str]) -> Server {
        let (cert, key) = (self.cert(), self.key());
        let mut args = vec![
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Server::start_with(&args)
    }

    /// A rustls client that trusts only this certificate.
    fn connect(&self, addr: &str, alpn: Option<&[u8]>) -> Tls {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        if let Some(p) = alpn {
            cfg.alpn_protocols = vec![p.to_vec()];
        }
        let name = ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        BufReader::new(rustls::StreamOwned::new(conn, tcp))
    }
}

type Tls = BufReader<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>;

fn send(s: &mut Tls, line: &str) {
    let w = s.get_mut();
    w.write_all(line.as_bytes()).unwrap();
    w.write_all(b"\r\n").unwrap();
    w.flush().unwrap();
}

fn call(s: &mut Tls, line: &str) -> Reply {
    send(s, line);
    read_reply(s).expect("reply")
}

fn bulk_json(r: Reply) -> Value {
    match r {
        Reply::Bulk(b) => serde_json::from_slice(&b).expect("JSON"),
        other => panic!("expected a bulk reply, got {other:?}"),
    }
}

fn ok(r: Reply) {
    assert_eq!(r, Reply::Simple("OK".into()));
}

/// The whole handshake and a job's life over TLS, with a password, from a rustls client.
#[test]
fn a_tls_client_pushes_fetches_and_acks() {
    let cert = Cert::new();
    let server = cert.server(&["--password", "secret"]);
    let mut c = cert.connect(&server.addr, None);
    let greeting = match read_reply(&mut c).expect("greeting") {
        Reply::Simple(s) => serde_json::from_str::<Value>(s.trim_start_matches("HI ")).unwrap(),
        other => panic!("expected +HI, got {other:?}"),
    };
    let pwdhash = ojs_client::password_hash(
        "secret",
        greeting["s"].as_str().unwrap(),
        greeting["i"].as_u64().unwrap(),
    );
    ok(call(
        &mut c,
        &format!(
            "HELLO {}",
            json!({"v": 2, "wid": "tls-w", "pwdhash": pwdhash})
        ),
    ));
    let job = test_job("secure", json!({"args": ["over tls"]}));
    let pushed = bulk_json(call(&mut c, &format!("PUSH {job}")));
    let id = id_of(&pushed);
    let fetched = bulk_json(call(&mut c, "FETCH secure"));
    assert_eq!(id_of(&fetched), id);
    assert_eq!(fetched["args"], json!(["over tls"]));
    ok(call(&mut c, &format!("ACK {}", json!({"id": id}))));
    let info = bulk_json(call(&mut c, &format!("JOB {id}")));
    assert_eq!(info["state"], "completed");
    send(&mut c, "END");
}

/// `openssl s_client` as the client, driven line by line over its stdin and stdout.
#[test]
fn openssl_s_client_speaks_the_protocol() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("openssl is not installed here: skipping (the rustls client tests still run)");
        return;
    }
    let cert = Cert::new();
    let server = cert.server(&[]);
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-verify_return_error",
            "-servername",
            "localhost",
        ])
        .arg("-connect")
        .arg(&server.addr)
        .arg("-CAfile")
        .arg(cert.cert())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        while let Ok(reply) = read_reply(&mut r) {
            if tx.send(reply).is_err() {
                break;
            }
        }
    });
    let mut call = |line: &str| -> Reply {
        writeln!(stdin, "{line}\r").unwrap();
        stdin.flush().unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no reply to {line:?} through openssl"))
    };
    let greeting = rx.recv_timeout(Duration::from_secs(10)).expect("+HI");
    assert!(
        matches!(&greeting, Reply::Simple(s) if s.starts_with("HI ")),
        "{greeting:?}"
    );
    ok(call(r#"HELLO {"v":2,"wid":"openssl"}"#));
    let id = id_of(&bulk_json(call(&format!(
        "PUSH {}",
        test_job("ossl", json!({}))
    ))));
    assert_eq!(id_of(&bulk_json(call("FETCH ossl"))), id);
    ok(call(&format!("ACK {}", json!({"id": id}))));
    assert_eq!(bulk_json(call(&format!("JOB {id}")))["state"], "completed");
    let _ = child.kill();
    let _ = child.wait();
}

/// HTTPS on the HTTP listener: health, and an SSE stream that carries an event.
#[test]
fn https_health_and_event_stream() {
    let cert = Cert::new();
    let server = cert.server(&[]);
    let mut h = cert.connect(&server.http_addr, Some(b"http/1.1"));
    h.get_mut()
        .write_all(b"GET /ojs/v1/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    let _ = h.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"status\":\"ok\""), "{resp}");

    // curl as a second client, when it is installed.
    if let Ok(out) = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(cert.cert())
        .arg(format!(
            "https://localhost:{}/ojs/v1/health",
            port(&server.http_addr)
        ))
        .args(["--resolve"])
        .arg(format!("localhost:{}:127.0.0.1", port(&server.http_addr)))
        .output()
    {
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "curl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(body.contains("\"status\":\"ok\""), "{body}");
    }

    // A streaming response over TLS (SSE).
    let mut sse = cert.connect(&server.http_addr, Some(b"http/1.1"));
    sse.get_mut()
        .write_all(
            b"GET /ojs/v1/events/stream?types=job.enqueued HTTP/1.1\r\nHost: localhost\r\n\r\n",
        )
        .unwrap();
    let mut status = String::new();
    sse.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // The stream is in place once the headers are out; an event pushed now must arrive.
    loop {
        let mut line = String::new();
        sse.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let mut c = cert.connect(&server.addr, None);
    read_reply(&mut c).unwrap();
    ok(call(&mut c, r#"HELLO {"v":2}"#));
    let id = id_of(&bulk_json(call(
        &mut c,
        &format!("PUSH {}", test_job("sse", json!({}))),
    )));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while !seen.contains(&id) && Instant::now() < deadline {
        let mut line = String::new();
        if sse.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&line);
    }
    assert!(
        seen.contains("job.enqueued") && seen.contains(&id),
        "{seen}"
    );
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap()
}

/// Plain text on a TLS port: the connection is closed cleanly (no greeting, nothing that
/// hangs), and the server keeps serving TLS clients.
#[test]
fn plaintext_on_a_tls_port_is_closed_and_the_server_stays_up() {
    let cert = Cert::new();
    let server = cert.server(&["--hello-timeout-ms", "2000"]);
    for addr in [&server.addr, &server.http_addr] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"HELLO {\"v\":2}\r\nGET / HTTP/1.1\r\n\r\n");
        let mut got = Vec::new();
        let start = Instant::now();
        // EOF (or a reset) well before the read timeout; at most a TLS alert comes back.
        let _ = s.read_to_end(&mut got);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{addr}: not closed"
        );
        assert!(
            !got.starts_with(b"+HI") && !got.starts_with(b"HTTP/"),
            "{got:?}"
        );
    }
    // A plain client that says nothing is closed at the handshake deadline.
    let mut silent = TcpStream::connect(&server.addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let _ = silent.read_to_end(&mut Vec::new());
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "a silent socket was held {took:?}"
    );
    // Still serving.
    let mut c = cert.connect(&server.addr, None);
    assert!(matches!(read_reply(&mut c).unwrap(), Reply::Simple(s) if s.starts_with("HI ")));
    ok(call(&mut c, r#"HELLO {"v":2}"#));
}

/// Problems with the key or certificate stop the server at startup: exit code not 0, and
/// one error line that names the file.
#[test]
fn bad_certificates_fail_startup_with_one_clear_line() {
    let cert = Cert::new();
    let other = Cert::new();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let (good_cert, good_key, other_key) = (cert.cert(), cert.key(), other.key());
    let cases: Vec<(&Path, &Path, &str)> = vec![
        (&missing, &good_key, "missing.pem"),
        (&garbage, &good_key, "garbage.pem"),
        (&good_cert, &garbage, "garbage.pem"),
        // A key that is not the certificate's.
        (&good_cert, &other_key, "key.pem"),
    ];
    for (c, k, names) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
            .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.path().join("db"))
            .arg("--tls-cert")
            .arg(c)
            .arg("--tls-key")
            .arg(k)
            .output()
            .expect("run ojsd");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_ne!(out.status.code(), Some(0), "{c:?} {k:?}");
        assert!(out.stdout.is_empty(), "it must not start listening");
        assert_eq!(lines.len(), 1, "one line: {stderr}");
        assert!(
            lines[0].starts_with("ojsd: ") && lines[0].contains(names),
            "{stderr}"
        );
        assert!(
            !dir.path().join("db").exists(),
            "certificates are read before the data dir is touched"
        );
    }
    // Only one of the two flags: refused by the flag parser.
    let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .arg("--tls-cert")
        .arg(cert.cert())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"));
}
