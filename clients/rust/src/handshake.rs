//! Connection setup: dialing, the HI greeting, the HELLO payload and the
//! password proof.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::client::ConnectOptions;
use crate::wire::Reply;
use crate::{Error, Result};

/// The protocol version this client speaks.
const PROTOCOL_VERSION: i64 = 2;
/// Refuse absurd iteration counts from a hostile server rather than spin.
const MAX_PWD_ITERATIONS: u64 = 10_000_000;

/// `h = sha256(password ++ salt)`, then `iterations - 1` more rounds of
/// `h = sha256(h)` over the raw digest; lowercase hex.
pub fn password_hash(password: &str, salt: &str, iterations: u64) -> String {
    let mut h = Sha256::new()
        .chain_update(password.as_bytes())
        .chain_update(salt.as_bytes())
        .finalize();
    for _ in 1..iterations {
        h = Sha256::digest(h);
    }
    hex::encode(h)
}

pub(crate) fn open(addr: &str, timeout: Option<Duration>) -> Result<TcpStream> {
    let Some(t) = timeout else {
        return Ok(TcpStream::connect(addr)?);
    };
    // connect_timeout takes one SocketAddr; try each resolved one in turn.
    let mut last = None;
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, t) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => Error::Io(e),
        None => Error::Protocol(format!("address {addr:?} resolved to nothing")),
    })
}

pub(crate) fn parse_greeting(reply: Reply) -> Result<Value> {
    let text = match reply.into_result()? {
        Reply::Simple(t) => t,
        other => {
            return Err(Error::Protocol(format!(
                "expected HI greeting, got {other:?}"
            )))
        }
    };
    let payload = match text.strip_prefix("HI") {
        Some(rest) => rest.trim(),
        None => {
            return Err(Error::Protocol(format!(
                "expected HI greeting, got {text:?}"
            )))
        }
    };
    let v: Value = serde_json::from_str(payload)
        .map_err(|e| Error::Protocol(format!("bad HI payload {payload:?}: {e}")))?;
    if v.get("v").and_then(Value::as_i64) != Some(PROTOCOL_VERSION) {
        return Err(Error::Protocol(format!(
            "unsupported protocol version in greeting {v} (want {PROTOCOL_VERSION})"
        )));
    }
    Ok(v)
}

pub(crate) fn build_hello(greeting: &Value, opts: &ConnectOptions) -> Result<Value> {
    let mut hello = Map::new();
    hello.insert("v".into(), json!(PROTOCOL_VERSION));
    let hostname = opts.hostname.clone().unwrap_or_else(local_hostname);
    hello.insert("hostname".into(), json!(hostname));
    hello.insert("pid".into(), json!(std::process::id()));
    if let Some(wid) = &opts.wid {
        hello.insert("wid".into(), json!(wid));
    }
    if opts.wid.is_some() || !opts.labels.is_empty() {
        hello.insert("labels".into(), json!(opts.labels));
    }
    // A salt in the greeting means the server wants a password proof.
    if let Some(salt) = greeting.get("s").and_then(Value::as_str) {
        let iterations = greeting
            .get("i")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        if iterations > MAX_PWD_ITERATIONS {
            return Err(Error::Protocol(format!(
                "unreasonable hash iterations {iterations}"
            )));
        }
        let password = opts.password.as_deref().ok_or_else(|| {
            Error::Protocol("server requires a password but none was configured".into())
        })?;
        hello.insert(
            "pwdhash".into(),
            json!(password_hash(password, salt, iterations)),
        );
    }
    Ok(Value::Object(hello))
}

/// std has no gethostname(); the environment and procfs cover Unix-likes.
fn local_hostname() -> String {
    let candidates = [
        std::env::var("HOSTNAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
        std::fs::read_to_string("/etc/hostname").ok(),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_string())
        .find(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
