//! Retry policy (companion ojs-retry.md): defaults (§8), partial overrides (§8.1),
//! validation (§11), exponential backoff with cap and jitter (§3.3, §3.5, §5) and
//! non-retryable error matching (§6).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::duration::parse_duration;
use crate::error::{ErrorCode, OjsError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhaustion {
    Discard,
    DeadLetter,
    /// An extension (PROTOCOL.md §15): the job is deleted in the commit that records its
    /// last failure, as Faktory does with `retry: 0`.
    Delete,
}

/// How retry delays grow (ojs-retry §3; the strategy is inferred from the coefficient
/// unless this `backoff_strategy` extension field sets it, §3 opening).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackoffStrategy {
    /// §3.3 `initial_interval * coefficient^(n-1)`.
    #[default]
    Exponential,
    /// §3.4 `initial_interval * n^coefficient`.
    Polynomial,
    /// §3.2 `initial_interval * n`.
    Linear,
    /// §3.1 always `initial_interval`.
    None,
    /// Faktory's schedule, `count^4 + 15 + rand(30) * (count + 1)` seconds with `count`
    /// the failures before this one; capped by `max_interval`; `jitter` is ignored (the
    /// random term is the jitter). A lost reservation counts as a failure with backoff.
    Faktory,
}

impl BackoffStrategy {
    fn is_default(&self) -> bool {
        *self == BackoffStrategy::Exponential
    }
}

/// The effective retry policy of a job. Durations are stored as ISO 8601 strings on the wire
/// and as milliseconds here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    #[serde(with = "super::duration::serde_iso")]
    pub initial_interval: std::time::Duration,
    pub backoff_coefficient: f64,
    #[serde(with = "super::duration::serde_iso")]
    pub max_interval: std::time::Duration,
    pub jitter: bool,
    pub non_retryable_errors: Vec<String>,
    pub on_exhaustion: OnExhaustion,
    #[serde(default, skip_serializing_if = "BackoffStrategy::is_default")]
    pub backoff_strategy: BackoffStrategy,
}

impl Default for RetryPolicy {
    /// ojs-retry §8.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval: Duration::from_secs(1),
            backoff_coefficient: 2.0,
            max_interval: Duration::from_secs(300),
            jitter: true,
            non_retryable_errors: Vec::new(),
            on_exhaustion: OnExhaustion::Discard,
            backoff_strategy: BackoffStrategy::Exponential,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    Retry {
        delay: Duration,
    },
    /// No retry: the job goes to its `on_exhaustion` outcome.
    Exhausted,
}

fn policy_err(message: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::InvalidRetryPolicy, message)
}

fn duration_field(v: &Value, field: &str) -> Result<Duration, OjsError> {
    let s = v
        .as_str()
        .ok_or_else(|| policy_err(format!("retry.{field} must be an ISO 8601 duration string")))?;
    let d =
        parse_duration(s).map_err(|e| policy_err(format!("retry.{field} is not valid: {e}")))?;
    // A delay the server cannot add to a timestamp is refused here, never met at FAIL.
    crate::time::check_duration(&format!("retry.{field}"), d).map_err(policy_err)?;
    Ok(d)
}

impl RetryPolicy {
    /// The client's `retry` attribute merged over the defaults (§8.1) and validated
    /// (§11.1). A field set to `null` counts as absent (ojs-json-format §14.2); keys this
    /// version does not know are ignored.
    pub fn from_json(v: Option<&Value>) -> Result<RetryPolicy, OjsError> {
        let obj = match v {
            None | Some(Value::Null) => return Ok(RetryPolicy::default()),
            Some(Value::Object(obj)) => obj,
            Some(_) => return Err(policy_err("retry must be an object")),
        };
        let field = |name: &str| obj.get(name).filter(|v| !v.is_null());
        let mut p = RetryPolicy::default();

        if let Some(v) = field("max_attempts") {
            p.max_attempts = v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    policy_err(format!(
                        "retry.max_attempts must be a non-negative integer no greater than {}",
                        u32::MAX
                    ))
                })?;
        }
        if let Some(v) = field("initial_interval") {
            p.initial_interval = duration_field(v, "initial_interval")?;
            if p.initial_interval.is_zero() {
                return Err(policy_err(
                    "retry.initial_interval must be greater than zero",
                ));
            }
        }
        if let Some(v) = field("backoff_coefficient") {
            p.backoff_coefficient = v
                .as_f64()
                .filter(|c| c.is_finite() && *c >= 1.0)
                .ok_or_else(|| policy_err("retry.backoff_coefficient must be >= 1.0"))?;
        }
        if let Some(v) = field("max_interval") {
            p.max_interval = duration_field(v, "max_interval")?;
        }
        // Checked after the merge: an overridden initial_interval can exceed the default cap.
        if p.max_interval < p.initial_interval {
            return Err(policy_err(
                "retry.max_interval must be >= retry.initial_interval",
            ));
        }
        if let Some(v) = field("jitter") {
            p.jitter = v
                .as_bool()
                .ok_or_else(|| policy_err("retry.jitter must be a boolean"))?;
        }
        if let Some(v) = field("non_retryable_errors") {
            let not_strings =
                || policy_err("retry.non_retryable_errors must be an array of strings");
            p.non_retryable_errors = v
                .as_array()
                .ok_or_else(not_strings)?
                .iter()
                .map(|e| e.as_str().map(str::to_owned).ok_or_else(not_strings))
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = field("on_exhaustion") {
            p.on_exhaustion = match v.as_str() {
                Some("discard") => OnExhaustion::Discard,
                Some("dead_letter") => OnExhaustion::DeadLetter,
                Some("delete") => OnExhaustion::Delete,
                _ => {
                    return Err(policy_err(
                        r#"retry.on_exhaustion must be "discard", "dead_letter" or "delete""#,
                    ))
                }
            };
        }
        if let Some(v) = field("backoff_strategy") {
            p.backoff_strategy = match v.as_str() {
                Some("exponential") => BackoffStrategy::Exponential,
                Some("polynomial") => BackoffStrategy::Polynomial,
                Some("linear") => BackoffStrategy::Linear,
                Some("none") => BackoffStrategy::None,
                Some("faktory") => BackoffStrategy::Faktory,
                _ => {
                    return Err(policy_err(
                        r#"retry.backoff_strategy must be "exponential", "polynomial", "linear", "none" or "faktory""#,
                    ))
                }
            };
        }
        Ok(p)
    }

    /// §6.2: exact match, or an entry `prefix.*` matching types that start with `prefix.`.
    pub fn is_non_retryable(&self, error_type: &str) -> bool {
        self.non_retryable_errors.iter().any(|entry| {
            entry == error_type
                || entry
                    .strip_suffix('*')
                    .filter(|prefix| prefix.ends_with('.'))
                    .is_some_and(|prefix| error_type.starts_with(prefix))
        })
    }

    /// Delay before retry `retry_number` (1 = the first retry, scheduled when attempt 1
    /// fails; 0 is treated as 1). Exponential backoff capped at `max_interval` (§3.5); with
    /// jitter, scaled by `0.5 + jitter_sample` for a sample in `[0, 1)` and capped again
    /// (§5.3). Saturates at `max_interval` instead of overflowing.
    pub fn backoff(&self, retry_number: u32, jitter_sample: f64) -> Duration {
        let cap = self.max_interval;
        let n = f64::from(retry_number.max(1));
        let initial = self.initial_interval.as_secs_f64();
        let raw = match self.backoff_strategy {
            BackoffStrategy::Exponential => initial * self.backoff_coefficient.powf(n - 1.0),
            BackoffStrategy::Polynomial => initial * n.powf(self.backoff_coefficient),
            BackoffStrategy::Linear => initial * n,
            BackoffStrategy::None => initial,
            BackoffStrategy::Faktory => {
                let count = n - 1.0;
                let sample = if jitter_sample.is_nan() {
                    0.5
                } else {
                    jitter_sample.clamp(0.0, 0.999_999)
                };
                // rand(30) is an integer in 0..30.
                count.powi(4) + 15.0 + (sample * 30.0).floor() * (count + 1.0)
            }
        };
        let capped = match Duration::try_from_secs_f64(raw) {
            Ok(d) if d < cap => d,
            // Too large, infinite or NaN: all saturate.
            _ => cap,
        };
        if !self.jitter || self.backoff_strategy == BackoffStrategy::Faktory {
            return capped;
        }
        // Out-of-range samples are clamped so a bad RNG cannot escape the §5.2 bounds.
        let sample = if jitter_sample.is_nan() {
            0.5
        } else {
            jitter_sample.clamp(0.0, 1.0)
        };
        match Duration::try_from_secs_f64(capped.as_secs_f64() * (0.5 + sample)) {
            Ok(d) if d < cap => d,
            _ => cap,
        }
    }

    /// Whether attempt number `failed_attempt` (1-based), which just failed with
    /// `error_type`, gets a retry, and after what delay.
    pub fn decide(
        &self,
        failed_attempt: u32,
        error_type: Option<&str>,
        jitter_sample: f64,
    ) -> RetryDecision {
        let non_retryable = error_type.is_some_and(|t| self.is_non_retryable(t));
        if self.max_attempts == 0 || failed_attempt >= self.max_attempts || non_retryable {
            RetryDecision::Exhausted
        } else {
            RetryDecision::Retry {
                delay: self.backoff(failed_attempt, jitter_sample),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn policy(v: Value) -> RetryPolicy {
        RetryPolicy::from_json(Some(&v)).unwrap()
    }

    #[test]
    fn exponential_table_cap_and_saturation() {
        let p = policy(json!({"jitter": false}));
        // §3.3 table, retries 1..=10; the 10th (512s) is capped at PT5M.
        let expected = [1, 2, 4, 8, 16, 32, 64, 128, 256, 300];
        for (n, want) in (1..).zip(expected) {
            assert_eq!(p.backoff(n, 0.7), secs(want), "retry {n}");
        }
        for n in [11, 64, 1_000, 1_000_000, u32::MAX] {
            assert_eq!(p.backoff(n, 0.0), secs(300));
        }
        assert_eq!(p.backoff(0, 0.0), secs(1));
        assert_eq!(RetryPolicy::default().backoff(u32::MAX, 0.999), secs(300));
        let huge = RetryPolicy {
            backoff_coefficient: f64::MAX,
            ..p
        };
        assert_eq!(huge.backoff(3, 0.0), secs(300));
        let constant = policy(json!({"backoff_coefficient": 1, "initial_interval": "PT5S"}));
        assert_eq!(constant.backoff(50, 0.0).as_secs_f64(), 2.5);
    }

    #[test]
    fn jitter_bounds_and_post_jitter_cap() {
        let p = policy(json!({"initial_interval": "PT10S"}));
        // §5.3: retries 1..=5 are 10..160s raw, all below the cap.
        for (n, d) in [(1, 10.0), (2, 20.0), (3, 40.0), (4, 80.0), (5, 160.0)] {
            let low = p.backoff(n, 0.0).as_secs_f64();
            let high = p.backoff(n, 0.999).as_secs_f64();
            assert!((low - 0.5 * d).abs() < 1e-6, "retry {n} low {low}");
            assert!(high < 1.5 * d && high > 1.49 * d, "retry {n} high {high}");
        }
        // Retry 6: raw 320s, capped 300s; jittered range [150s, 300s].
        assert_eq!(p.backoff(6, 0.0), secs(150));
        assert_eq!(p.backoff(6, 0.5), secs(300));
        assert_eq!(p.backoff(6, 0.999), secs(300));
        // Out-of-range samples stay within bounds.
        assert_eq!(p.backoff(1, -3.0), secs(5));
        assert_eq!(p.backoff(1, f64::NAN), secs(10));
        assert!(p.backoff(1, 7.0) <= secs(15));
    }

    #[test]
    fn non_retryable_matching_of_section_6_2() {
        let p = policy(json!({"non_retryable_errors": ["validation.payload_invalid", "auth.*"]}));
        for (t, want) in [
            ("validation.payload_invalid", true),
            ("validation.schema_error", false),
            ("auth.token_expired", true),
            ("auth.forbidden", true),
            ("auth", false),
            ("external.auth.failure", false),
            ("authx.y", false),
        ] {
            assert_eq!(p.is_non_retryable(t), want, "{t}");
        }
        let star = policy(json!({"non_retryable_errors": ["*"]}));
        assert!(!star.is_non_retryable("anything"));
    }

    #[test]
    fn defaults_and_partial_override() {
        let d = RetryPolicy::default();
        let section_8 = json!({
            "max_attempts": 3, "initial_interval": "PT1S", "backoff_coefficient": 2.0,
            "max_interval": "PT5M", "jitter": true, "non_retryable_errors": [],
            "on_exhaustion": "discard"
        });
        assert_eq!(serde_json::to_value(&d).unwrap(), section_8);
        assert_eq!(serde_json::from_value::<RetryPolicy>(section_8).unwrap(), d);
        assert_eq!(RetryPolicy::from_json(None), Ok(d.clone()));
        assert_eq!(RetryPolicy::from_json(Some(&Value::Null)), Ok(d.clone()));
        assert_eq!(policy(json!({})), d);
        // Null fields count as absent; unknown keys are ignored.
        assert_eq!(
            policy(json!({"jitter": null, "backoff_shape": "linear"})),
            d
        );

        // §8.1 example.
        let p = policy(json!({"max_attempts": 10, "on_exhaustion": "dead_letter"}));
        let on_exhaustion = OnExhaustion::DeadLetter;
        assert_eq!(
            p,
            RetryPolicy {
                max_attempts: 10,
                on_exhaustion,
                ..d
            }
        );
        assert_eq!(
            serde_json::to_value(&p).unwrap()["on_exhaustion"],
            "dead_letter"
        );

        let p = policy(json!({
            "max_attempts": 0, "initial_interval": "PT0.5S", "backoff_coefficient": 1,
            "max_interval": "PT1H", "jitter": false, "non_retryable_errors": ["a.b"]
        }));
        assert_eq!(
            (p.max_attempts, p.backoff_coefficient, p.jitter),
            (0, 1.0, false)
        );
        assert_eq!(
            (p.initial_interval, p.max_interval),
            (Duration::from_millis(500), secs(3600))
        );
        assert_eq!(p.non_retryable_errors, ["a.b"]);
        assert_eq!(
            serde_json::to_value(&p).unwrap()["initial_interval"],
            "PT0.5S"
        );
        // Equal intervals are allowed.
        assert_eq!(
            policy(json!({"initial_interval": "PT5M"})).initial_interval,
            secs(300)
        );
    }

    #[test]
    fn every_section_11_1_rule_is_enforced() {
        let greater = "retry.max_interval must be >= retry.initial_interval";
        #[rustfmt::skip]
        let cases = [
            (json!("3"), "retry must be an object"),
            (json!([1]), "retry must be an object"),
            (json!({"max_attempts": -1}), "retry.max_attempts"),
            (json!({"max_attempts": 2.5}), "retry.max_attempts"),
            (json!({"max_attempts": 3.0}), "retry.max_attempts"),
            (json!({"max_attempts": "3"}), "retry.max_attempts"),
            (json!({"max_attempts": 5_000_000_000u64}), "retry.max_attempts"),
            (json!({"initial_interval": "1s"}), "retry.initial_interval"),
            (json!({"initial_interval": 1000}), "retry.initial_interval"),
            (json!({"initial_interval": "PT0S"}), "retry.initial_interval must be greater than zero"),
            (json!({"backoff_coefficient": 0.5}), "retry.backoff_coefficient must be >= 1.0"),
            (json!({"backoff_coefficient": "2"}), "retry.backoff_coefficient must be >= 1.0"),
            (json!({"max_interval": "five minutes"}), "retry.max_interval"),
            (json!({"max_interval": 300}), "retry.max_interval"),
            (json!({"max_interval": "PT1S", "initial_interval": "PT2S"}), greater),
            (json!({"initial_interval": "PT10M"}), greater),
            (json!({"jitter": "true"}), "retry.jitter must be a boolean"),
            (json!({"jitter": 1}), "retry.jitter must be a boolean"),
            (json!({"non_retryable_errors": "auth.*"}), "retry.non_retryable_errors"),
            (json!({"non_retryable_errors": ["a", 1]}), "retry.non_retryable_errors"),
            (json!({"on_exhaustion": "retry"}), "retry.on_exhaustion"),
            (json!({"on_exhaustion": "DEAD_LETTER"}), "retry.on_exhaustion"),
            (json!({"backoff_strategy": "fibonacci"}), "retry.backoff_strategy"),
            (json!({"backoff_strategy": 4}), "retry.backoff_strategy"),
        ];
        for (v, msg) in cases {
            let err = RetryPolicy::from_json(Some(&v)).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRetryPolicy, "{v}");
            assert!(err.message.starts_with(msg), "{v}: {}", err.message);
        }
    }

    #[test]
    fn decisions() {
        let retry = |d| RetryDecision::Retry { delay: d };
        let zero = policy(json!({"max_attempts": 0}));
        assert_eq!(zero.decide(1, None, 0.0), RetryDecision::Exhausted);
        let one = policy(json!({"max_attempts": 1}));
        assert_eq!(one.decide(1, None, 0.0), RetryDecision::Exhausted);
        let three = policy(json!({"jitter": false, "non_retryable_errors": ["auth.*"]}));
        assert_eq!(three.decide(1, None, 0.0), retry(secs(1)));
        assert_eq!(three.decide(2, Some("io.timeout"), 0.0), retry(secs(2)));
        assert_eq!(three.decide(2, Some("auth"), 0.0), retry(secs(2)));
        assert_eq!(
            three.decide(1, Some("auth.forbidden"), 0.0),
            RetryDecision::Exhausted
        );
        assert_eq!(three.decide(3, None, 0.0), RetryDecision::Exhausted);
        assert_eq!(three.decide(4, None, 0.0), RetryDecision::Exhausted);
        let jittered = RetryPolicy::default();
        assert_eq!(
            jittered.decide(1, None, 0.0),
            retry(Duration::from_millis(500))
        );
    }

    #[test]
    fn the_other_strategies_of_section_3_and_faktory() {
        let p = |strategy: &str| {
            policy(json!({"backoff_strategy": strategy, "jitter": false,
                "initial_interval": "PT2S", "backoff_coefficient": 3, "max_interval": "PT1H"}))
        };
        let table = |p: &RetryPolicy| {
            (1..=4)
                .map(|n| p.backoff(n, 0.0).as_secs())
                .collect::<Vec<_>>()
        };
        assert_eq!(table(&p("exponential")), [2, 6, 18, 54]);
        assert_eq!(table(&p("polynomial")), [2, 16, 54, 128]);
        assert_eq!(table(&p("linear")), [2, 4, 6, 8]);
        assert_eq!(table(&p("none")), [2, 2, 2, 2]);
        // The strategy is kept on the wire only when it is not the default.
        assert_eq!(
            serde_json::to_value(p("linear")).unwrap()["backoff_strategy"],
            "linear"
        );
        assert!(serde_json::to_value(p("exponential"))
            .unwrap()
            .get("backoff_strategy")
            .is_none());
        let back: RetryPolicy =
            serde_json::from_value(serde_json::to_value(p("none")).unwrap()).unwrap();
        assert_eq!(back, p("none"));
        // Faktory: count^4 + 15 + rand(30) * (count + 1), count = failures before this one.
        let f = policy(json!({"backoff_strategy": "faktory", "max_interval": "P365D"}));
        assert_eq!(f.backoff(1, 0.0), secs(15));
        assert_eq!(f.backoff(1, 0.999), secs(15 + 29));
        assert_eq!(f.backoff(2, 0.0), secs(1 + 15));
        assert_eq!(f.backoff(2, 0.5), secs(1 + 15 + 15 * 2));
        assert_eq!(f.backoff(5, 0.1), secs(256 + 15 + 3 * 5));
        assert_eq!(f.backoff(u32::MAX, 0.5), secs(365 * 86_400));
        assert_eq!(f.backoff(3, f64::NAN), secs(16 + 15 + 15 * 3));
        let gone = policy(json!({"max_attempts": 1, "on_exhaustion": "delete"}));
        assert_eq!(gone.on_exhaustion, OnExhaustion::Delete);
        assert_eq!(gone.decide(1, None, 0.0), RetryDecision::Exhausted);
    }
}
