//! The OJS job envelope (ojs-core §5) and its lifecycle states (§6).
//!
//! `Job` is what is stored and what clients see. Client-supplied attributes that OJS does
//! not define are kept in `extra` and written back unchanged (§5.5 rule 4).

pub mod duration;
pub mod options;
pub mod parts;
pub mod rate_limit;
pub mod retry;
pub mod template;
pub mod unique;
pub mod validate;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use retry::{BackoffStrategy, OnExhaustion, RetryPolicy};

/// The OJS version of the envelopes ojsd writes (ojs-core: `specversion` MUST be "1.0").
pub const SPEC_VERSION: &str = "1.0";
/// The version ojsd wrote before; still accepted from clients and read from storage.
pub const OLD_SPEC_VERSION: &str = "1.0.0-rc.1";
/// Default visibility timeout (ojs-core §5.2 `timeout`), seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
/// How many error-history entries a job keeps (ojs-retry §10.1 asks for at least 10).
pub const ERROR_HISTORY_LIMIT: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Scheduled,
    Available,
    Pending,
    Active,
    Completed,
    Retryable,
    Cancelled,
    Discarded,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Scheduled,
        State::Available,
        State::Pending,
        State::Active,
        State::Completed,
        State::Retryable,
        State::Cancelled,
        State::Discarded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Scheduled => "scheduled",
            State::Available => "available",
            State::Pending => "pending",
            State::Active => "active",
            State::Completed => "completed",
            State::Retryable => "retryable",
            State::Cancelled => "cancelled",
            State::Discarded => "discarded",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Cancelled | State::Discarded)
    }

    /// The closed transition set of ojs-core §6.3/§6.4, plus `→ discarded` for an
    /// `expires_at` that passes before the job starts (§5.2 `expires_at`).
    pub fn can_transition(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Scheduled, Available)
                | (Pending, Available)
                | (Available, Active)
                | (Active, Completed)
                | (Active, Retryable)
                | (Active, Discarded)
                | (Active, Cancelled)
                | (Active, Available)
                | (Retryable, Available)
                | (Scheduled, Cancelled)
                | (Available, Cancelled)
                | (Pending, Cancelled)
                | (Retryable, Cancelled)
                | (Discarded, Available)
                // expiry before execution
                | (Scheduled, Discarded)
                | (Available, Discarded)
                | (Pending, Discarded)
                | (Retryable, Discarded)
        )
    }
}

/// Longest queue name (ojs-core §5.1).
pub const MAX_QUEUE_BYTES: usize = 128;

/// Names in this namespace are another dialect's names written reversibly in the OJS
/// alphabet (the Faktory port's, `protocol::faktory` names.rs), where each byte outside it
/// takes three. They get the room the escape of a name of the ordinary limit needs, so the
/// limit is on the name the client wrote, not on its encoding.
pub const ESCAPED_NAME_PREFIX: &str = "fk.";

/// The length limit of `name`: `limit`, or for an escaped name what the escape of a name of
/// `limit` bytes takes (every byte escaped, after the prefix and one letter of its kind).
pub fn name_limit(name: &str, limit: usize) -> usize {
    if name.starts_with(ESCAPED_NAME_PREFIX) {
        ESCAPED_NAME_PREFIX.len() + 1 + 3 * limit
    } else {
        limit
    }
}

/// Queue names: `[a-z0-9][a-z0-9\-\.]*`, at most 128 characters (ojs-core §5.1), or
/// [`name_limit`] for an escaped name.
pub fn is_valid_queue(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= name_limit(name, MAX_QUEUE_BYTES)
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'.')
}

/// Timestamps the broker writes: RFC 3339, UTC, microseconds, `Z`.
pub fn format_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parse an RFC 3339 timestamp that carries a time zone (ojs-core §5.5 rule 2).
pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

mod ts {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ts(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_ts(&s).ok_or_else(|| serde::de::Error::custom("bad timestamp"))
    }

    pub mod opt {
        use chrono::{DateTime, Utc};
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&super::super::format_ts(*t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            let s = Option::<String>::deserialize(d)?;
            match s {
                None => Ok(None),
                Some(s) => super::super::parse_ts(&s)
                    .map(Some)
                    .ok_or_else(|| serde::de::Error::custom("bad timestamp")),
            }
        }
    }
}

/// A job envelope as stored and returned. Field order follows ojs-core §5.4.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub specversion: String,
    pub id: String,
    #[serde(rename = "type")]
    pub job_type: String,
    pub queue: String,
    pub args: Vec<Value>,
    #[serde(default)]
    pub meta: Map<String, Value>,
    #[serde(default)]
    pub priority: i64,
    /// Visibility timeout in seconds; `None` or 0 means the server default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Kept as the client wrote it (validated to carry a time zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The effective policy: the client's fields merged over the defaults (ojs-retry §8.1).
    pub retry: RetryPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,

    // --- system-managed (ojs-core §5.3) ---
    pub state: State,
    pub attempt: u32,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub enqueued_at: Option<DateTime<Utc>>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub cancelled_at: Option<DateTime<Utc>>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub discarded_at: Option<DateTime<Utc>>,
    #[serde(default, with = "ts::opt", skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// Error history, oldest first (ojs-retry §10.1), capped at `ERROR_HISTORY_LIMIT`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The worker (`wid`) holding the reservation while `active`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,

    /// Attributes OJS does not define, preserved verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Job {
    pub fn scheduled_time(&self) -> Option<DateTime<Utc>> {
        self.scheduled_at.as_deref().and_then(parse_ts)
    }

    pub fn expires_time(&self) -> Option<DateTime<Utc>> {
        self.expires_at.as_deref().and_then(parse_ts)
    }

    /// Visibility timeout in seconds, with 0 or absent meaning the default.
    pub fn timeout_secs(&self, default: u64) -> u64 {
        match self.timeout {
            Some(t) if t > 0 => t,
            _ => default,
        }
    }

    pub fn push_error(&mut self, entry: Value) {
        self.errors.push(entry);
        if self.errors.len() > ERROR_HISTORY_LIMIT {
            let excess = self.errors.len() - ERROR_HISTORY_LIMIT;
            self.errors.drain(..excess);
        }
    }

    /// The trace id of ojs-events §8.3: `meta.trace_id`, or the trace-id part of a W3C
    /// `meta.traceparent` (`version-traceid-spanid-flags`).
    pub fn trace_id(&self) -> Option<&str> {
        if let Some(t) = self.meta.get("trace_id").and_then(Value::as_str) {
            return Some(t);
        }
        let tp = self.meta.get("traceparent").and_then(Value::as_str)?;
        tp.split('-').nth(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_have_no_exits_but_manual_retry() {
        for from in [State::Completed, State::Cancelled, State::Discarded] {
            for to in State::ALL {
                let allowed = from == State::Discarded && to == State::Available;
                assert_eq!(from.can_transition(to), allowed, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn spec_invalid_examples_are_rejected() {
        assert!(!State::Available.can_transition(State::Completed));
        assert!(!State::Discarded.can_transition(State::Active));
        assert!(!State::Scheduled.can_transition(State::Active));
        assert!(!State::Retryable.can_transition(State::Active));
        assert!(!State::Pending.can_transition(State::Active));
    }
}
