//! Unique jobs (ojs-unique-jobs.md): the `unique` policy a job carries, its validation at
//! enqueue time (§2.2), and the uniqueness key (§4): SHA-256 over the canonical JSON of the
//! selected dimensions. Pure functions; the engine keeps the index of keys.
//!
//! `args` is an array in OJS, so `args_keys` (§2.1 "top-level keys within args") names the
//! keys of the first argument when that is an object (the keyword-arguments convention,
//! `"args": [{"user_id": 42}]`); when it is not, `args_keys` are positions (`"0"`, `"1"`).

use super::duration::parse_duration;
use super::State;
use crate::error::{ErrorCode, OjsError};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write;
use unicode_normalization::UnicodeNormalization;

/// §6.1: the states a duplicate counts in when the policy names none.
pub const DEFAULT_STATES: [State; 5] = [
    State::Available,
    State::Active,
    State::Scheduled,
    State::Retryable,
    State::Pending,
];

const FIELDS: &str = "keys, args_keys, meta_keys, period, states, on_conflict";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    Reject,
    Replace,
    ReplaceExceptSchedule,
    Ignore,
}

pub type UniqueKey = [u8; 32];

#[derive(Debug, Clone, PartialEq)]
pub struct UniquePolicy {
    pub queue: bool,
    pub args: bool,
    pub meta: bool,
    /// `None`: all of `args`.
    pub args_keys: Option<Vec<String>>,
    pub meta_keys: Vec<String>,
    pub period_ms: Option<i64>,
    pub states: Vec<State>,
    pub on_conflict: OnConflict,
}

fn bad(message: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::InvalidPayload, message)
}

/// A JSON array of distinct strings (null = absent).
fn names(p: &Map<String, Value>, field: &str) -> Result<Option<Vec<String>>, OjsError> {
    let must = || {
        bad(format!(
            "unique.{field} must be an array of distinct strings"
        ))
    };
    match p.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => {
            let mut out: Vec<String> = Vec::with_capacity(items.len());
            for it in items {
                let s = it.as_str().ok_or_else(must)?;
                if out.iter().any(|o| o == s) {
                    return Err(must());
                }
                out.push(s.to_string());
            }
            Ok(Some(out))
        }
        Some(_) => Err(must()),
    }
}

fn state_named(s: &str) -> Option<State> {
    State::ALL.into_iter().find(|st| st.as_str() == s)
}

/// The positions or keys `args_keys` may name, for the message of a missing one.
fn args_key_exists(args: &[Value], key: &str) -> bool {
    match args.first() {
        Some(Value::Object(o)) => o.contains_key(key),
        _ => key
            .parse::<usize>()
            .is_ok_and(|i| i < args.len() && key == i.to_string()),
    }
}

impl UniquePolicy {
    /// Validate a `unique` object against the job's `args` (§2.2: every rule fails fast,
    /// with a message naming the field).
    pub fn parse(v: &Value, args: &[Value]) -> Result<UniquePolicy, OjsError> {
        let Value::Object(p) = v else {
            return Err(bad("unique must be a JSON object"));
        };
        if let Some(k) = p
            .keys()
            .find(|k| !FIELDS.split(", ").any(|f| f == k.as_str()))
        {
            let shown: String = k.chars().take(64).collect();
            return Err(bad(format!(
                "unique.{shown} is not a unique policy field ({FIELDS})"
            )));
        }
        let mut policy = UniquePolicy {
            queue: false,
            args: false,
            meta: false,
            args_keys: names(p, "args_keys")?,
            meta_keys: names(p, "meta_keys")?.unwrap_or_default(),
            period_ms: None,
            states: DEFAULT_STATES.to_vec(),
            on_conflict: OnConflict::Reject,
        };
        for k in names(p, "keys")?.unwrap_or_default() {
            match k.as_str() {
                "type" => {} // always part of the key (§3.1)
                "queue" => policy.queue = true,
                "args" => policy.args = true,
                "meta" => policy.meta = true,
                other => {
                    let shown: String = other.chars().take(64).collect();
                    return Err(bad(format!(
                        r#"unique.keys: unknown dimension {shown:?}; use "type", "queue", "args" or "meta""#
                    )));
                }
            }
        }
        if let Some(keys) = &policy.args_keys {
            if !policy.args {
                return Err(bad(r#"unique.args_keys needs "args" in unique.keys"#));
            }
            if keys.is_empty() {
                return Err(bad(
                    "unique.args_keys must not be empty (omit it to use all of args)",
                ));
            }
            if let Some(k) = keys.iter().find(|k| !args_key_exists(args, k)) {
                let shown: String = k.chars().take(64).collect();
                let where_ = match args.first() {
                    Some(Value::Object(_)) => "a key of the job's first argument",
                    _ => "a position in args (the first argument is not an object)",
                };
                return Err(bad(format!("unique.args_keys: {shown:?} is not {where_}")));
            }
        }
        if policy.meta && policy.meta_keys.is_empty() {
            return Err(bad(
                r#"unique.meta_keys must list at least one key when "meta" is in unique.keys"#,
            ));
        }
        if !policy.meta && p.get("meta_keys").is_some_and(|v| !v.is_null()) {
            return Err(bad(r#"unique.meta_keys needs "meta" in unique.keys"#));
        }
        match p.get("period") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                let d = parse_duration(s).map_err(|e| bad(format!("unique.period: {e}")))?;
                crate::time::check_duration("unique.period", d).map_err(bad)?;
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                if ms <= 0 {
                    return Err(bad("unique.period must be at least 1 millisecond"));
                }
                policy.period_ms = Some(ms);
            }
            Some(_) => {
                return Err(bad(
                    r#"unique.period must be an ISO 8601 duration string such as "PT1H""#,
                ))
            }
        }
        if let Some(states) = names(p, "states")? {
            if states.is_empty() {
                return Err(bad("unique.states must name at least one state"));
            }
            policy.states = Vec::with_capacity(states.len());
            for s in &states {
                let st = state_named(s).ok_or_else(|| {
                    let shown: String = s.chars().take(64).collect();
                    bad(format!("unique.states: {shown:?} is not a job state"))
                })?;
                policy.states.push(st);
            }
        }
        policy.on_conflict = match p.get("on_conflict") {
            None | Some(Value::Null) => OnConflict::Reject,
            Some(Value::String(s)) => match s.as_str() {
                "reject" => OnConflict::Reject,
                "replace" => OnConflict::Replace,
                "replace_except_schedule" => OnConflict::ReplaceExceptSchedule,
                "ignore" => OnConflict::Ignore,
                _ => return Err(bad(on_conflict_rule())),
            },
            Some(_) => return Err(bad(on_conflict_rule())),
        };
        Ok(policy)
    }

    /// Does an existing job in `state`, created at `created_ms`, count as a duplicate at
    /// `now_ms` (§7.4: in one of the states AND inside the period)?
    pub fn counts(&self, state: State, created_ms: i64, now_ms: i64) -> bool {
        self.states.contains(&state)
            && self
                .period_ms
                .is_none_or(|p| created_ms.saturating_add(p) > now_ms)
    }

    /// The uniqueness key (§4.1). `type` is always included (§2.2).
    pub fn key(
        &self,
        job_type: &str,
        queue: &str,
        args: &[Value],
        meta: &Map<String, Value>,
    ) -> UniqueKey {
        let mut dims = Map::new();
        dims.insert("type".into(), Value::String(job_type.into()));
        if self.queue {
            dims.insert("queue".into(), Value::String(queue.into()));
        }
        if self.args {
            let v = match &self.args_keys {
                None => Value::Array(args.to_vec()),
                Some(keys) => {
                    let mut sel = Map::new();
                    for k in keys {
                        let v = match args.first() {
                            Some(Value::Object(o)) => o.get(k),
                            _ => k.parse::<usize>().ok().and_then(|i| args.get(i)),
                        };
                        sel.insert(k.clone(), v.cloned().unwrap_or(Value::Null));
                    }
                    Value::Object(sel)
                }
            };
            dims.insert("args".into(), v);
        }
        if self.meta {
            let sel: Map<String, Value> = self
                .meta_keys
                .iter()
                .filter_map(|k| meta.get(k).map(|v| (k.clone(), v.clone())))
                .collect();
            dims.insert("meta".into(), Value::Object(sel));
        }
        let mut text = String::with_capacity(128);
        canonical(&Value::Object(dims), &mut text);
        Sha256::digest(text.as_bytes()).into()
    }
}

fn on_conflict_rule() -> String {
    r#"unique.on_conflict must be "reject", "replace", "replace_except_schedule" or "ignore""#
        .into()
}

/// Canonical JSON (§4.1 step 2, RFC 8785): object keys sorted by UTF-16 code units at
/// every level, no whitespace, strings NFC-normalized (§4.2). Numbers: integers as
/// integers, an integral float as an integer (`1.0` and `1` are the same argument),
/// other floats in Rust's shortest round-trip decimal form.
pub fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    let _ = write!(out, "{}", f as i128);
                } else {
                    let _ = write!(out, "{f}");
                }
            }
        }
        Value::String(s) => string(&s.nfc().collect::<String>(), out),
        Value::Array(items) => {
            out.push('[');
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(it, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut entries: Vec<(String, &Value)> =
                m.iter().map(|(k, v)| (k.nfc().collect(), v)).collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
    }
}

/// A JSON string with RFC 8785's escaping.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, args: Value) -> Result<UniquePolicy, OjsError> {
        UniquePolicy::parse(&v, args.as_array().unwrap())
    }

    fn key(p: &Value, t: &str, q: &str, args: Value, meta: Value) -> UniqueKey {
        let a = args.as_array().unwrap().clone();
        let pol = UniquePolicy::parse(p, &a).unwrap();
        pol.key(t, q, &a, meta.as_object().unwrap())
    }

    #[test]
    fn canonical_form_matches_the_spec_example() {
        let mut s = String::new();
        let v = json!({"type": "email.send", "queue": "notifications", "args": {"user_id": 42}});
        canonical(&v, &mut s);
        assert_eq!(
            s,
            r#"{"args":{"user_id":42},"queue":"notifications","type":"email.send"}"#
        );
        let mut s = String::new();
        canonical(
            &json!({"b": [1.0, 2.5, "e\u{301}", "\u{1}"], "a": null}),
            &mut s,
        );
        assert_eq!(s, "{\"a\":null,\"b\":[1,2.5,\"\u{e9}\",\"\\u0001\"]}");
    }

    #[test]
    fn defaults_and_validation() {
        let p = parse(json!({}), json!([])).unwrap();
        assert_eq!(p.states, DEFAULT_STATES.to_vec());
        assert_eq!(p.on_conflict, OnConflict::Reject);
        assert!(!p.queue && !p.args && !p.meta && p.period_ms.is_none());
        let p = parse(
            json!({"keys": ["queue", "args"], "args_keys": ["user_id"], "period": "PT1H",
                   "states": ["completed"], "on_conflict": "ignore"}),
            json!([{"user_id": 1}]),
        )
        .unwrap();
        assert!(p.queue && p.args && p.period_ms == Some(3_600_000));
        assert_eq!(
            (p.states.clone(), p.on_conflict),
            (vec![State::Completed], OnConflict::Ignore)
        );
        #[rustfmt::skip]
        let bad_cases = [
            (json!(true), json!([]), "unique must"),
            (json!({"key": ["type"]}), json!([]), "unique.key is not"),
            (json!({"keys": ["argz"]}), json!([]), "unique.keys: unknown"),
            (json!({"keys": "type"}), json!([]), "unique.keys must"),
            (json!({"keys": ["type", "type"]}), json!([]), "unique.keys must"),
            (json!({"keys": ["meta"]}), json!([]), "unique.meta_keys must list"),
            (json!({"keys": ["meta"], "meta_keys": []}), json!([]), "unique.meta_keys must list"),
            (json!({"meta_keys": ["t"]}), json!([]), "unique.meta_keys needs"),
            (json!({"args_keys": ["a"]}), json!([{"a": 1}]), "unique.args_keys needs"),
            (json!({"keys": ["args"], "args_keys": ["b"]}), json!([{"a": 1}]), "unique.args_keys: \"b\""),
            (json!({"keys": ["args"], "args_keys": ["1"]}), json!(["x"]), "unique.args_keys: \"1\""),
            (json!({"keys": ["args"], "args_keys": []}), json!(["x"]), "unique.args_keys must not"),
            (json!({"period": "1h"}), json!([]), "unique.period:"),
            (json!({"period": 60}), json!([]), "unique.period must"),
            (json!({"period": "PT0S"}), json!([]), "unique.period must"),
            (json!({"states": ["done"]}), json!([]), "unique.states: \"done\""),
            (json!({"states": []}), json!([]), "unique.states must"),
            (json!({"on_conflict": "skip"}), json!([]), "unique.on_conflict"),
        ];
        for (v, args, msg) in bad_cases {
            let e = parse(v.clone(), args).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidPayload, "{v}");
            assert!(e.message.starts_with(msg), "{v}: {}", e.message);
        }
        assert!(parse(json!({"keys": ["args"], "args_keys": ["0"]}), json!(["x"])).is_ok());
    }

    #[test]
    fn keys_follow_the_dimensions() {
        let none = json!({});
        let t = |p: &Value, ty, q, a, m| key(p, ty, q, a, m);
        // type only: args and queue do not matter, the type does
        assert_eq!(
            t(&none, "a", "q1", json!([1]), json!({})),
            t(&none, "a", "q2", json!([2]), json!({}))
        );
        assert_ne!(
            t(&none, "a", "q", json!([]), json!({})),
            t(&none, "b", "q", json!([]), json!({}))
        );
        let q = json!({"keys": ["queue"]});
        assert_ne!(
            t(&q, "a", "q1", json!([]), json!({})),
            t(&q, "a", "q2", json!([]), json!({}))
        );
        let all = json!({"keys": ["args"]});
        assert_ne!(
            t(&all, "a", "q", json!([1]), json!({})),
            t(&all, "a", "q", json!([2]), json!({}))
        );
        // key order and NFC do not matter
        assert_eq!(
            t(&all, "a", "q", json!([{"x": 1, "y": "é"}]), json!({})),
            t(
                &all,
                "a",
                "q",
                json!([{"y": "e\u{301}", "x": 1.0}]),
                json!({})
            )
        );
        let sel = json!({"keys": ["args"], "args_keys": ["u"]});
        assert_eq!(
            t(&sel, "a", "q", json!([{"u": 1, "v": 1}]), json!({})),
            t(&sel, "a", "q", json!([{"u": 1, "v": 2}]), json!({}))
        );
        let pos = json!({"keys": ["args"], "args_keys": ["0"]});
        assert_eq!(
            t(&pos, "a", "q", json!(["x", 1]), json!({})),
            t(&pos, "a", "q", json!(["x", 2]), json!({}))
        );
        let m = json!({"keys": ["meta"], "meta_keys": ["tenant"]});
        assert_eq!(
            t(&m, "a", "q", json!([]), json!({"tenant": "t1", "trace": 1})),
            t(&m, "a", "q", json!([]), json!({"tenant": "t1", "trace": 2}))
        );
        assert_ne!(
            t(&m, "a", "q", json!([]), json!({"tenant": "t1"})),
            t(&m, "a", "q", json!([]), json!({"tenant": "t2"}))
        );
    }

    #[test]
    fn counts_checks_state_and_period() {
        let p = parse(json!({"period": "PT1S"}), json!([])).unwrap();
        assert!(p.counts(State::Available, 0, 999));
        assert!(!p.counts(State::Available, 0, 1000));
        assert!(!p.counts(State::Completed, 0, 1));
    }
}
