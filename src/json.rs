//! Client JSON with a depth bound. The server keeps what clients send (args, meta, results,
//! errors, definitions) and composes new documents from it (a workflow step's
//! `parent_results` holds earlier results). serde_json refuses to read anything nested
//! deeper than 128 levels, so a value accepted at 126 levels and then wrapped would be
//! stored but never read back. Every client document is therefore refused past
//! [`MAX_DEPTH`] levels where it enters, and a composed job past [`MAX_STORED_DEPTH`],
//! leaving room below serde_json's own limit.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The deepest nesting accepted in a client document (objects and arrays both count).
pub const MAX_DEPTH: usize = 64;

/// The deepest nesting of a document the server stores, composed parts included.
pub const MAX_STORED_DEPTH: usize = 100;

/// The nesting depth of JSON text, found by a scan that needs no recursion: brackets
/// inside strings do not count. Stops counting once past `limit`, so a hostile document
/// costs no more than `limit` levels of attention. Not a validator: the parser that
/// follows does that.
pub fn text_depth(text: &[u8], limit: usize) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    max = depth;
                    if max > limit {
                        return max;
                    }
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The nesting depth of a value, without recursion.
pub fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 1)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                max = max.max(d);
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// Why a client document was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    TooDeep,
    Invalid(String),
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsonError::TooDeep => write!(f, "JSON nested deeper than {MAX_DEPTH} levels"),
            JsonError::Invalid(e) => write!(f, "invalid JSON: {e}"),
        }
    }
}

/// Parse a client document, refusing one nested deeper than [`MAX_DEPTH`].
pub fn parse<T: DeserializeOwned>(text: &[u8]) -> Result<T, JsonError> {
    if text_depth(text, MAX_DEPTH) > MAX_DEPTH {
        return Err(JsonError::TooDeep);
    }
    serde_json::from_slice(text).map_err(|e| JsonError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!("{}1{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(text_depth(b"1", 64), 0);
        assert_eq!(text_depth(br#"{"a":[1,{"b":2}]}"#, 64), 3);
        assert_eq!(text_depth(br#"["[[[[", "\"[[[", {}]"#, 64), 2);
        assert_eq!(
            text_depth(nested(1000).as_bytes(), 64),
            65,
            "stops past the limit"
        );
        let v: Value = serde_json::from_str(r#"{"a":[1,{"b":[]}],"c":{}}"#).unwrap();
        assert_eq!(depth(&v), 4);
        assert_eq!(depth(&Value::Null), 0);
    }

    #[test]
    fn parse_refuses_deep_documents_and_keeps_shallow_ones() {
        assert_eq!(
            parse::<Value>(nested(MAX_DEPTH).as_bytes()).map(|v| depth(&v)),
            Ok(64)
        );
        assert_eq!(
            parse::<Value>(nested(MAX_DEPTH + 1).as_bytes()),
            Err(JsonError::TooDeep)
        );
        assert!(matches!(parse::<Value>(b"{"), Err(JsonError::Invalid(_))));
    }
}
