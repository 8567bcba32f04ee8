//! A job's `rate_limit` policy (ojs-rate-limiting §6): jobs with the same `key` share a
//! concurrency cap, a sliding start window (`rate`) and an even spacing of starts
//! (`throttle`). ojsd supports `on_limit: "wait"` (the default): a job over its limit stays
//! `available` and FETCH takes the next eligible one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorCode, OjsError, OjsResult};

/// `limit` starts per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateWindow {
    pub limit: u32,
    /// The window, ms (an ISO 8601 `period` on the wire).
    pub period_ms: i64,
}

/// Largest concurrency or window count a limit may set.
pub const MAX_LIMIT_COUNT: u64 = 1_000_000;
/// Longest window: a day.
pub const MAX_LIMIT_PERIOD_MS: i64 = 86_400_000;
const MAX_KEY_LEN: usize = 255;

fn bad(m: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::InvalidPayload, m)
}

/// An integer from `min` to [`MAX_LIMIT_COUNT`].
pub fn count(v: &Value, what: &str, min: u64) -> OjsResult<u32> {
    v.as_u64()
        .filter(|n| (min..=MAX_LIMIT_COUNT).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| {
            bad(format!(
                "{what} must be an integer from {min} to {MAX_LIMIT_COUNT}"
            ))
        })
}

impl RateWindow {
    /// `{"limit": n, "period": "PT1M"}`.
    pub fn parse(v: &Value, what: &str) -> OjsResult<RateWindow> {
        let Value::Object(r) = v else {
            return Err(bad(format!("{what} must be an object {{limit, period}}")));
        };
        let limit = count(
            r.get("limit").unwrap_or(&Value::Null),
            &format!("{what}.limit"),
            1,
        )?;
        let period = r
            .get("period")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{what}.period must be an ISO 8601 duration")))?;
        let d = super::duration::parse_duration(period)
            .map_err(|e| bad(format!("{what}.period: {e}")))?;
        let period_ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if !(1..=MAX_LIMIT_PERIOD_MS).contains(&period_ms) {
            return Err(bad(format!("{what}.period must be from 1 ms to one day")));
        }
        Ok(RateWindow { limit, period_ms })
    }

    /// The wire form.
    pub fn to_json(self) -> Value {
        let period = std::time::Duration::from_millis(self.period_ms.max(0) as u64);
        serde_json::json!({"limit": self.limit,
            "period": super::duration::format_duration(period)})
    }
}

/// A job's `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitPolicy {
    pub key: String,
    pub concurrency: Option<u32>,
    pub rate: Option<RateWindow>,
    pub throttle: Option<RateWindow>,
}

/// `^[a-zA-Z0-9][a-zA-Z0-9._:-]*$` (§6.2), at most 255 bytes.
fn is_valid_key(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_KEY_LEN
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

impl RateLimitPolicy {
    pub fn parse(v: &Value) -> OjsResult<RateLimitPolicy> {
        let Value::Object(m) = v else {
            return Err(bad("rate_limit must be a JSON object"));
        };
        let known = ["key", "concurrency", "rate", "throttle", "on_limit"];
        if let Some(k) = m.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(bad(format!("rate_limit.{k} is not a rate limit field")));
        }
        let key = match m.get("key") {
            Some(Value::String(k)) if is_valid_key(k) => k.clone(),
            Some(_) => {
                return Err(bad(
                    "rate_limit.key must match [a-zA-Z0-9][a-zA-Z0-9._:-]* (at most 255 bytes)",
                ))
            }
            None => return Err(bad("rate_limit.key is required")),
        };
        let get = |k: &str| m.get(k).filter(|v| !v.is_null());
        let concurrency = get("concurrency")
            .map(|v| count(v, "rate_limit.concurrency", 0))
            .transpose()?;
        let rate = get("rate")
            .map(|v| RateWindow::parse(v, "rate_limit.rate"))
            .transpose()?;
        let throttle = get("throttle")
            .map(|v| RateWindow::parse(v, "rate_limit.throttle"))
            .transpose()?;
        match get("on_limit").map(|v| v.as_str()) {
            None | Some(Some("wait")) => {}
            Some(Some(other @ ("reschedule" | "drop"))) => {
                return Err(bad(format!(
                    "rate_limit.on_limit {other:?} is not supported by this server; use \"wait\""
                )))
            }
            Some(_) => {
                return Err(bad(
                    r#"rate_limit.on_limit must be "wait", "reschedule" or "drop""#,
                ))
            }
        }
        Ok(RateLimitPolicy {
            key,
            concurrency,
            rate,
            throttle,
        })
    }

    /// The policy of a stored job, if it has one it can read.
    pub fn of(job: &super::Job) -> Option<RateLimitPolicy> {
        RateLimitPolicy::parse(job.extra.get("rate_limit")?).ok()
    }

    /// The smallest gap between two starts under `throttle`, ms.
    pub fn spacing_ms(&self) -> Option<i64> {
        self.throttle
            .map(|t| (t.period_ms / i64::from(t.limit.max(1))).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_parse_and_bad_ones_are_refused() {
        let p = RateLimitPolicy::parse(&json!({"key": "stripe-api", "concurrency": 5,
            "rate": {"limit": 100, "period": "PT1M"}, "throttle": {"limit": 10, "period": "PT1S"},
            "on_limit": "wait"}))
        .unwrap();
        assert_eq!(p.key, "stripe-api");
        assert_eq!(p.concurrency, Some(5));
        assert_eq!(
            p.rate,
            Some(RateWindow {
                limit: 100,
                period_ms: 60_000
            })
        );
        assert_eq!(p.spacing_ms(), Some(100));
        assert_eq!(
            p.rate.unwrap().to_json(),
            json!({"limit": 100, "period": "PT1M"})
        );
        for bad in [
            json!("k"),
            json!({}),
            json!({"key": "-k"}),
            json!({"key": "a b"}),
            json!({"key": "k".repeat(256)}),
            json!({"key": "k", "concurrency": -1}),
            json!({"key": "k", "rate": {"limit": 0, "period": "PT1S"}}),
            json!({"key": "k", "rate": {"limit": 1, "period": "P2D"}}),
            json!({"key": "k", "throttle": {"limit": 1}}),
            json!({"key": "k", "on_limit": "drop"}),
            json!({"key": "k", "on_limit": "explode"}),
            json!({"key": "k", "burst": 3}),
        ] {
            assert!(RateLimitPolicy::parse(&bad).is_err(), "{bad}");
        }
        assert!(RateLimitPolicy::parse(&json!({"key": "tenant:acme.api_1-x"})).is_ok());
    }
}
