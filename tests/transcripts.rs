//! Replays every `protocol/transcripts/*.txt` session against a fresh server (format in
//! protocol/transcripts/README.md), so the documented sessions stay true.

mod common;

use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

enum Got {
    Line(String),
    Bulk(Vec<u8>),
}

fn read_reply(r: &mut BufReader<TcpStream>) -> Got {
    let mut line = String::new();
    r.read_line(&mut line).expect("read reply");
    let line = line.trim_end_matches(['\r', '\n']).to_string();
    match line.strip_prefix('$') {
        Some(n) if n != "-1" => {
            let n: usize = n.parse().expect("bulk length");
            let mut buf = vec![0; n + 2];
            r.read_exact(&mut buf).expect("bulk body");
            buf.truncate(n);
            Got::Bulk(buf)
        }
        _ => Got::Line(line),
    }
}

fn subst(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("${k}"), v);
    }
    out
}

/// `want` ⊆ `got`: every field of `want` is in `got` with an equal value (recursively for objects).
fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        _ => got == want,
    }
}

fn run(name: &str, script: &str) {
    let srv = common::Server::start();
    let stream = TcpStream::connect(&srv.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let mut vars = HashMap::new();
    for (n, raw) in script.lines().enumerate() {
        let at = format!("{name}:{}", n + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("> ") {
            writer
                .write_all(format!("{}\r\n", subst(cmd, &vars)).as_bytes())
                .expect("send");
            continue;
        }
        let expect = line
            .strip_prefix("< ")
            .unwrap_or_else(|| panic!("{at}: bad line {line:?}"));
        let (expect, capture) = match expect.split_once(" => ") {
            Some((e, c)) => (e, Some(c.trim())),
            None => (expect, None),
        };
        let expect = subst(expect, &vars);
        let got = read_reply(&mut reader);
        if let Some(code) = expect.strip_prefix("-ERR ") {
            match got {
                Got::Line(l) => assert!(
                    l.starts_with(&format!("-ERR {code} ")),
                    "{at}: want -ERR {code}, got {l:?}"
                ),
                Got::Bulk(b) => panic!(
                    "{at}: want an error, got bulk {}",
                    String::from_utf8_lossy(&b)
                ),
            }
        } else if expect.starts_with('{') || expect.starts_with('[') {
            let Got::Bulk(body) = got else {
                panic!("{at}: want bulk JSON, got a line");
            };
            let v: Value = serde_json::from_slice(&body).expect("bulk is JSON");
            if let Some(n) = expect.strip_prefix('[').and_then(|e| e.strip_suffix(']')) {
                let n: usize = n.parse().expect("array length");
                assert_eq!(v.as_array().map(Vec::len), Some(n), "{at}: {v}");
            } else {
                let want: Value =
                    serde_json::from_str(&expect).unwrap_or_else(|e| panic!("{at}: {e}"));
                assert!(contains(&v, &want), "{at}: {v} does not contain {want}");
            }
            if let Some(name) = capture {
                vars.insert(
                    name.to_string(),
                    v["id"].as_str().expect("captured id").to_string(),
                );
            }
        } else {
            match got {
                Got::Line(l) => assert_eq!(l, expect, "{at}"),
                Got::Bulk(b) => panic!(
                    "{at}: want {expect:?}, got bulk {}",
                    String::from_utf8_lossy(&b)
                ),
            }
        }
    }
}

#[test]
fn every_transcript_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("protocol/transcripts");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("transcripts dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "transcripts missing");
    for f in files {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let script = std::fs::read_to_string(&f).expect("read transcript");
        run(&name, &script);
    }
}
