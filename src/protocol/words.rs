//! Small pieces every command parser of the OJS dialect shares: the error for a line that
//! does not parse, the verb split, and JSON payloads.

use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::{Map, Value};

/// A line that is not a well-formed command.
pub(crate) fn malformed(msg: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::MalformedCommand, msg)
}

/// `VERB rest...` → (`VERB`, `rest...`), the rest without leading spaces.
pub(crate) fn split_verb(line: &str) -> (&str, &str) {
    match line.find(' ') {
        Some(i) => (&line[..i], line[i + 1..].trim_start()),
        None => (line, ""),
    }
}

/// The command's JSON payload, which must be there.
pub(crate) fn json_payload(verb: &str, payload: &str) -> OjsResult<Value> {
    if payload.is_empty() {
        return Err(malformed(format!("{verb} needs a JSON payload")));
    }
    crate::json::parse(payload.as_bytes()).map_err(|e| malformed(format!("{verb}: {e}")))
}

/// The command's JSON payload, which must be an object.
pub(crate) fn json_object(verb: &str, payload: &str) -> OjsResult<Map<String, Value>> {
    match json_payload(verb, payload)? {
        Value::Object(m) => Ok(m),
        _ => Err(malformed(format!("{verb} payload must be a JSON object"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_and_payloads() {
        assert_eq!(split_verb("PUSH  {}"), ("PUSH", "{}"));
        assert_eq!(split_verb("INFO"), ("INFO", ""));
        assert!(json_object("X", "")
            .unwrap_err()
            .message
            .contains("needs a JSON payload"));
        assert!(json_object("X", "[1]")
            .unwrap_err()
            .message
            .contains("must be a JSON object"));
        assert!(json_object("X", "{")
            .unwrap_err()
            .message
            .starts_with("X: "));
        assert_eq!(json_object("X", r#"{"a":1}"#).unwrap()["a"], 1);
    }
}
