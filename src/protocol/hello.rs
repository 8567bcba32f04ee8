//! The HELLO payload, checked field by field for both dialects: a HELLO the server cannot
//! use as it was meant (a `wid` that is not a string would silently make a worker a
//! producer, a version the server does not speak would be misread) is refused with the
//! field's name and rule instead of being accepted and misunderstood.

use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::{Map, Value};

/// The protocol versions this server speaks (its `HI` offers the newest; Faktory clients
/// send 2).
pub const SUPPORTED_VERSIONS: [i64; 1] = [2];
/// Longest worker id, as for the HTTP binding's `worker_id`.
pub const MAX_WID_BYTES: usize = 256;
/// Longest `hostname`.
pub const MAX_HOSTNAME_BYTES: usize = 256;
/// Most `labels`, and the longest label.
pub const MAX_LABELS: usize = 64;
pub const MAX_LABEL_BYTES: usize = 256;

fn refuse(msg: String) -> OjsError {
    OjsError::new(ErrorCode::MalformedCommand, format!("HELLO: {msg}"))
}

/// Non-empty, at most `max` bytes, with no whitespace or control character: an id that can
/// be written on a command line (`WORKER QUIET <wid>`) and shown as it is.
pub fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The HELLO object once every field it defines has the type and size it must have.
/// `null` counts as absent; fields HELLO does not define are kept (clients add their own).
pub fn check(obj: Map<String, Value>) -> OjsResult<Value> {
    let field = |k: &str| obj.get(k).filter(|v| !v.is_null());
    if let Some(v) = field("v") {
        if !v.as_i64().is_some_and(|n| SUPPORTED_VERSIONS.contains(&n)) {
            return Err(refuse(format!(
                "v must be a supported protocol version number: {SUPPORTED_VERSIONS:?}"
            )));
        }
    }
    if let Some(w) = field("wid") {
        if !w.as_str().is_some_and(|w| is_token(w, MAX_WID_BYTES)) {
            return Err(refuse(format!(
                "wid must be a non-empty string of at most {MAX_WID_BYTES} bytes without \
                 spaces or control characters"
            )));
        }
    }
    if let Some(h) = field("hostname") {
        if h.as_str().is_none_or(|h| h.len() > MAX_HOSTNAME_BYTES) {
            return Err(refuse(format!(
                "hostname must be a string of at most {MAX_HOSTNAME_BYTES} bytes"
            )));
        }
    }
    if let Some(p) = field("pid") {
        if !(p.is_i64() || p.is_u64()) {
            return Err(refuse("pid must be an integer".into()));
        }
    }
    if let Some(l) = field("labels") {
        let ok = l.as_array().is_some_and(|a| {
            a.len() <= MAX_LABELS
                && a.iter()
                    .all(|s| s.as_str().is_some_and(|s| s.len() <= MAX_LABEL_BYTES))
        });
        if !ok {
            return Err(refuse(format!(
                "labels must be an array of at most {MAX_LABELS} strings of at most \
                 {MAX_LABEL_BYTES} bytes each"
            )));
        }
    }
    if let Some(p) = field("pwdhash") {
        if !p.is_string() {
            return Err(refuse("pwdhash must be a string".into()));
        }
    }
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checked(v: Value) -> Result<(), String> {
        match v {
            Value::Object(m) => check(m).map(|_| ()).map_err(|e| e.message),
            _ => unreachable!(),
        }
    }

    #[test]
    fn what_real_clients_send_is_accepted() {
        for ok in [
            json!({}),
            json!({"v": 2}),
            json!({"hostname": "h", "wid": "4f2a9c1d", "pid": 1234, "labels": ["node"], "v": 2}),
            json!({"hostname": "h", "pid": 1, "v": 2, "labels": [], "pwdhash": "00"}),
            json!({"wid": null, "labels": null, "v": 2, "queues": ["a"], "concurrency": 5}),
        ] {
            assert_eq!(checked(ok.clone()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        for (bad, field) in [
            (json!({"v": "x", "wid": 7}), "v must"),
            (json!({"v": 999}), "v must"),
            (json!({"v": 2.5}), "v must"),
            (json!({"v": 2, "wid": ["a"]}), "wid must"),
            (json!({"wid": ""}), "wid must"),
            (json!({"wid": "a b"}), "wid must"),
            (json!({"wid": "w".repeat(257)}), "wid must"),
            (json!({"labels": "notalist", "pid": 1}), "labels must"),
            (json!({"labels": [1]}), "labels must"),
            (json!({"pid": "x"}), "pid must"),
            (json!({"pid": 1.5}), "pid must"),
            (json!({"hostname": 3}), "hostname must"),
            (json!({"pwdhash": 3}), "pwdhash must"),
        ] {
            let msg = checked(bad.clone()).unwrap_err();
            assert!(msg.starts_with(&format!("HELLO: {field}")), "{bad}: {msg}");
        }
    }
}
