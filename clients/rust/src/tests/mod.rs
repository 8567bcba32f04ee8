//! A scripted fake broker on 127.0.0.1:0 for exercising the client.

mod client_tests;
mod worker_tests;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};

use serde_json::Value;

pub const PLAIN_HI: &str = "+HI {\"v\":2}\r\n";

/// The server side of one accepted connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Next command line without CRLF; `None` at EOF.
    pub fn line(&mut self) -> Option<String> {
        let mut s = String::new();
        if self.reader.read_line(&mut s).unwrap_or(0) == 0 {
            return None;
        }
        assert!(s.ends_with("\r\n"), "command not CRLF-terminated: {s:?}");
        s.truncate(s.len() - 2);
        Some(s)
    }

    /// Next line, which must exist and start with `verb `; returns the rest.
    pub fn expect(&mut self, verb: &str) -> String {
        let l = self.line().expect("connection closed early");
        if l == verb {
            return String::new();
        }
        l.strip_prefix(&format!("{verb} "))
            .unwrap_or_else(|| panic!("expected {verb}, got {l:?}"))
            .to_string()
    }

    pub fn send(&mut self, raw: &str) {
        self.writer.write_all(raw.as_bytes()).unwrap();
    }

    pub fn bulk(&mut self, payload: &str) {
        self.send(&format!("${}\r\n{}\r\n", payload.len(), payload));
    }

    /// Greet, read HELLO, answer +OK; returns the HELLO payload.
    pub fn handshake(&mut self, greeting: &str) -> Value {
        self.send(greeting);
        let hello: Value = serde_json::from_str(&self.expect("HELLO")).unwrap();
        self.send("+OK\r\n");
        hello
    }
}

/// Serve exactly one connection with `script`; join the handle to surface
/// the script's assertion failures in the test thread.
pub fn serve_once(script: impl FnOnce(Conn) + Send + 'static) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let h = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        script(Conn::new(stream));
    });
    (addr, h)
}

/// Serve every connection with `handler`, each on its own thread. The
/// accept loop lives until the test process exits.
pub fn serve_many(handler: impl Fn(Conn) + Send + Sync + Clone + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let h = handler.clone();
            thread::spawn(move || h(Conn::new(stream)));
        }
    });
    addr
}
