//! A raw line connection to either TCP dialect (both frame replies the same way), for
//! tests that need the exact lines a client reads.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Raw {
    r: BufReader<TcpStream>,
    w: TcpStream,
    /// The `+HI` greeting's JSON.
    pub greeting: Value,
}

impl Raw {
    /// Connect and read the `+HI` greeting; not past HELLO.
    pub fn open(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut c = Raw {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
            greeting: Value::Null,
        };
        let hi = c.line();
        let payload = hi.strip_prefix("+HI ").unwrap_or_else(|| panic!("{hi}"));
        c.greeting = serde_json::from_str(payload).unwrap_or_else(|e| panic!("{hi}: {e}"));
        c
    }

    /// Connected and past a HELLO with this payload.
    pub fn hello(addr: &str, hello: &Value) -> Raw {
        let mut c = Raw::open(addr);
        assert_eq!(c.call(&format!("HELLO {hello}")), "+OK");
        c
    }

    /// The next line, without its line break.
    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("read");
        l.trim_end().to_string()
    }

    /// One command; a bulk reply is returned as its payload, anything else as its line.
    pub fn call(&mut self, cmd: &str) -> String {
        self.w.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
        let first = self.line();
        match first.strip_prefix('$') {
            Some("-1") => "$-1".to_string(),
            Some(_) => self.line(),
            None => first,
        }
    }

    /// One command whose reply is a JSON document.
    pub fn json(&mut self, cmd: &str) -> Value {
        let r = self.call(cmd);
        serde_json::from_str(&r).unwrap_or_else(|e| panic!("{cmd}: {r:?}: {e}"))
    }
}
