//! The HTTP binding's `options` object (ojs-http-binding §9.1) folded into the OJS
//! envelope, for every front end that takes it (HTTP PUSH, and TCP PUSH/PUSHB, since the
//! SDKs send the same shape over both).

use serde_json::{json, Map, Value};

fn iso_ms<E>(ms: &Value, what: &str, err: &impl Fn(String) -> E) -> Result<Value, E> {
    let ms = ms
        .as_u64()
        .ok_or_else(|| err(format!("{what} must be a non-negative integer")))?;
    Ok(Value::String(if ms % 1000 == 0 {
        format!("PT{}S", ms / 1000)
    } else {
        format!("PT{}.{:03}S", ms / 1000, ms % 1000)
    }))
}

/// Fold a request's `options` (the HTTP binding's §9.1 shape, which the SDKs also send over
/// TCP) into the envelope's own attributes: `queue`, `priority`, `timeout_ms` (as whole
/// seconds, rounded up), `delay_until` (as `scheduled_at`), `retry` (or `retry_policy`) with
/// `*_ms` durations (as ISO 8601), `visibility_timeout` (an ISO 8601 duration, as whole
/// seconds of `timeout`), `metadata` (merged into `meta`), the rest as they are. `err` makes the
/// front end's error from a message.
pub fn fold<E>(
    mut req: Map<String, Value>,
    err: impl Fn(String) -> E,
) -> Result<Map<String, Value>, E> {
    let options = match req.remove("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(err("options must be a JSON object".into())),
    };
    let mut retry_from_options = false;
    for (k, v) in options {
        let (key, value) = match k.as_str() {
            "queue" | "priority" | "expires_at" | "unique" | "tags" | "pending"
            | "scheduled_at" => (k, v),
            "delay_until" => ("scheduled_at".to_string(), v),
            "timeout_ms" | "visibility_timeout_ms" => {
                let ms = v
                    .as_u64()
                    .ok_or_else(|| err(format!("options.{k} must be a non-negative integer")))?;
                // The envelope's timeout is whole seconds; a part of a second rounds up.
                ("timeout".to_string(), json!(ms.div_ceil(1000)))
            }
            // `retry_policy` is the conformance suite's name for the same object (PROTOCOL.md
            // §14 reading 18); given with `retry`, the request is ambiguous and refused.
            "retry" | "retry_policy" => {
                if retry_from_options {
                    return Err(err(
                        "options.retry and options.retry_policy are the same policy: give one"
                            .into(),
                    ));
                }
                retry_from_options = true;
                let Value::Object(r) = v else {
                    return Err(err(format!("options.{k} must be a JSON object")));
                };
                let mut out = Map::new();
                for (rk, rv) in r {
                    match rk.strip_suffix("_ms") {
                        Some(base) => {
                            out.insert(
                                base.to_string(),
                                iso_ms(&rv, &format!("retry.{rk}"), &err)?,
                            );
                        }
                        None => {
                            out.insert(rk, rv);
                        }
                    }
                }
                ("retry".to_string(), Value::Object(out))
            }
            // The suite's ISO 8601 form of `visibility_timeout_ms` (reading 18).
            "visibility_timeout" => {
                let d = v
                    .as_str()
                    .ok_or_else(|| err(format!("options.{k} must be an ISO 8601 duration")))
                    .and_then(|s| {
                        super::duration::parse_duration(s)
                            .map_err(|e| err(format!("options.{k}: {e}")))
                    })?;
                let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                ("timeout".to_string(), json!(secs))
            }
            "metadata" => {
                let Value::Object(extra) = v else {
                    return Err(err("options.metadata must be a JSON object".into()));
                };
                let meta = req.entry("meta").or_insert_with(|| json!({}));
                match meta {
                    Value::Object(m) => m.extend(extra),
                    _ => return Err(err("meta must be a JSON object".into())),
                }
                continue;
            }
            _ => (k, v),
        };
        req.insert(key, value);
    }
    top_level_max_attempts(&mut req, &err)?;
    Ok(req)
}

/// The binding's examples carry `max_attempts` beside `retry` (and its replies show it
/// there): taken as `retry.max_attempts`, which must then say the same if it is given too.
fn top_level_max_attempts<E>(
    req: &mut Map<String, Value>,
    err: &impl Fn(String) -> E,
) -> Result<(), E> {
    let n = match req.remove("max_attempts") {
        None | Some(Value::Null) => return Ok(()),
        Some(n) => n,
    };
    let retry = req.entry("retry").or_insert_with(|| json!({}));
    let Value::Object(r) = retry else {
        return Err(err("retry must be a JSON object".into()));
    };
    match r.get("max_attempts") {
        None | Some(Value::Null) => {
            r.insert("max_attempts".into(), n);
        }
        Some(given) if *given == n => {}
        Some(given) => {
            return Err(err(format!(
                "max_attempts ({n}) and retry.max_attempts ({given}) differ"
            )))
        }
    }
    Ok(())
}
