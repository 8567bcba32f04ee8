//! Parsing of the administration commands: `QUEUE`, `DEAD` and the worker list
//! (ojs-admin-api, ojs-dead-letter). The HTTP admin routes build their commands with the
//! same functions, so both front ends accept and refuse exactly the same things.
//!
//! Destructive and bulk commands (`QUEUE PURGE`, `DEAD RETRY {filter}`,
//! `DEAD DELETE {filter}`) need `"confirm": true` (ojs-admin-api §4 "safe by default"),
//! and their payloads refuse unknown keys: a misspelt filter must not widen a purge.

use super::faktory::job_ref;
use super::words::{json_object, malformed, split_verb};
pub use crate::engine::request::{
    DeadCmd, DeadFilter, JobSet, JobsQuery, MutateCmd, MutateOp, QueueCmd, QueueLimit, SetFilter,
};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::State;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

pub const DEAD_LIST_DEFAULT: usize = 50;

/// A paging number (`limit`, `offset`) of a listing's JSON: `default` when absent, at most
/// `max`, refused when it is not a non-negative integer. Shared by every listing's parser.
pub fn page_num(
    verb: &str,
    obj: &Map<String, Value>,
    k: &str,
    default: usize,
    max: usize,
) -> OjsResult<usize> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX).min(max))
            .ok_or_else(|| malformed(format!("{verb}: {k} must be a non-negative integer"))),
    }
}
pub const DEAD_LIST_MAX: usize = 1000;

fn one_word(verb: &str, payload: &str, what: &str) -> OjsResult<String> {
    let mut words = payload.split_whitespace();
    match (words.next(), words.next()) {
        (Some(w), None) => Ok(w.to_string()),
        _ => Err(malformed(format!("{verb} needs exactly one {what}"))),
    }
}

fn only_keys(verb: &str, obj: &Map<String, Value>, allowed: &[&str]) -> OjsResult<()> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => {
            let shown: String = k.chars().take(64).collect();
            Err(malformed(format!(
                "{verb}: unknown field {shown:?} (expected {})",
                allowed.join(", ")
            )))
        }
        None => Ok(()),
    }
}

fn text(verb: &str, obj: &Map<String, Value>, k: &str) -> OjsResult<Option<String>> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(malformed(format!("{verb}: {k} must be a string"))),
    }
}

fn time(verb: &str, obj: &Map<String, Value>, k: &str) -> OjsResult<Option<DateTime<Utc>>> {
    match text(verb, obj, k)? {
        None => Ok(None),
        Some(s) => crate::job::parse_ts(&s).map(Some).ok_or_else(|| {
            malformed(format!(
                "{verb}: {k} must be an RFC 3339 timestamp with a zone"
            ))
        }),
    }
}

fn confirmed(verb: &str, obj: &Map<String, Value>) -> OjsResult<()> {
    match obj.get("confirm") {
        Some(Value::Bool(true)) => Ok(()),
        _ => Err(malformed(format!(
            "{verb} changes many jobs: send \"confirm\": true"
        ))),
    }
}

const FILTER_KEYS: [&str; 6] = [
    "queue",
    "type",
    "error_type",
    "since",
    "until",
    "older_than",
];

/// A dead-letter filter from a JSON object (`older_than` is ojs-admin-api §11.3's name
/// for `until`).
pub fn dead_filter(verb: &str, obj: &Map<String, Value>) -> OjsResult<DeadFilter> {
    let until = time(verb, obj, "until")?;
    let older = time(verb, obj, "older_than")?;
    if until.is_some() && older.is_some() {
        return Err(malformed(format!(
            "{verb}: give until or older_than, not both"
        )));
    }
    Ok(DeadFilter {
        queue: text(verb, obj, "queue")?.map(super::faktory::queue_ref),
        job_type: text(verb, obj, "type")?.map(super::faktory::type_ref),
        error_type: text(verb, obj, "error_type")?,
        since: time(verb, obj, "since")?,
        until: until.or(older),
    })
}

/// `DEAD RETRY {...}` / `DEAD DELETE {...}`: a filter plus `"confirm": true`.
pub fn dead_bulk(verb: &str, obj: &Map<String, Value>) -> OjsResult<DeadFilter> {
    let mut allowed = FILTER_KEYS.to_vec();
    allowed.push("confirm");
    only_keys(verb, obj, &allowed)?;
    confirmed(verb, obj)?;
    dead_filter(verb, obj)
}

/// `DEAD LIST {...}`: a filter plus `limit` (default 50, at most 1000) and `offset`.
pub fn dead_list(obj: &Map<String, Value>) -> OjsResult<DeadCmd> {
    let verb = "DEAD LIST";
    let mut allowed = FILTER_KEYS.to_vec();
    allowed.extend(["limit", "offset"]);
    only_keys(verb, obj, &allowed)?;
    let num = |k: &str, default: usize, max: usize| page_num(verb, obj, k, default, max);
    Ok(DeadCmd::List {
        filter: dead_filter(verb, obj)?,
        limit: num("limit", DEAD_LIST_DEFAULT, DEAD_LIST_MAX)?,
        offset: num("offset", 0, usize::MAX)?,
    })
}

pub fn parse_dead(payload: &str) -> OjsResult<DeadCmd> {
    let (sub, rest) = split_verb(payload);
    let sub = sub.to_ascii_uppercase();
    match sub.as_str() {
        "LIST" if rest.is_empty() => dead_list(&Map::new()),
        "LIST" => dead_list(&json_object("DEAD LIST", rest)?),
        "GET" => Ok(DeadCmd::Get(job_ref(one_word("DEAD GET", rest, "job id")?))),
        "STATS" if rest.is_empty() => Ok(DeadCmd::Stats),
        "STATS" => Err(malformed("DEAD STATS takes no arguments")),
        "RETRY" | "DELETE" => {
            let verb = format!("DEAD {sub}");
            if rest.starts_with('{') {
                let filter = dead_bulk(&verb, &json_object(&verb, rest)?)?;
                Ok(match sub.as_str() {
                    "RETRY" => DeadCmd::RetryAll(filter),
                    _ => DeadCmd::DeleteAll(filter),
                })
            } else {
                let id = job_ref(one_word(&verb, rest, "job id (or a JSON filter)")?);
                Ok(match sub.as_str() {
                    "RETRY" => DeadCmd::Retry(id),
                    _ => DeadCmd::Delete(id),
                })
            }
        }
        _ => Err(malformed("DEAD needs LIST, GET, STATS, RETRY or DELETE")),
    }
}

fn state_named(s: &str) -> Option<State> {
    State::ALL.into_iter().find(|st| st.as_str() == s)
}

/// `QUEUE PURGE <queue> {"states": [...], "older_than"?: "...", "confirm": true}`.
pub fn queue_purge(queue: &str, obj: &Map<String, Value>) -> OjsResult<QueueCmd> {
    let verb = "QUEUE PURGE";
    only_keys(verb, obj, &["states", "older_than", "confirm"])?;
    confirmed(verb, obj)?;
    let names = match obj.get("states") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        _ => {
            return Err(malformed(
                "QUEUE PURGE: states must be a non-empty array of job states",
            ))
        }
    };
    let mut states = Vec::with_capacity(names.len());
    for n in names {
        let st = n
            .as_str()
            .and_then(state_named)
            .ok_or_else(|| malformed(format!("QUEUE PURGE: {n} is not a job state")))?;
        if st == State::Active {
            return Err(malformed(
                "QUEUE PURGE: active jobs are held by workers and cannot be purged; CANCEL them",
            ));
        }
        if !states.contains(&st) {
            states.push(st);
        }
    }
    Ok(QueueCmd::Purge {
        queue: queue.to_string(),
        states,
        older_than: time(verb, obj, "older_than")?,
    })
}

/// `QUEUE ...`; a queue may be named as a Faktory client wrote it (`Critical_Q`).
pub fn parse_queue(payload: &str) -> OjsResult<QueueCmd> {
    parse_queue_names(payload).map(|c| c.map_names(super::faktory::queue_ref))
}

fn parse_queue_names(payload: &str) -> OjsResult<QueueCmd> {
    let (sub, rest) = split_verb(payload);
    match sub.to_ascii_uppercase().as_str() {
        "PAUSE" | "RESUME" => {
            let names: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
            if names.is_empty() {
                return Err(malformed(
                    "QUEUE PAUSE|RESUME needs at least one queue name",
                ));
            }
            Ok(if sub.eq_ignore_ascii_case("PAUSE") {
                QueueCmd::Pause(names)
            } else {
                QueueCmd::Resume(names)
            })
        }
        "LIST" if rest.is_empty() => Ok(QueueCmd::List),
        "LIST" => Err(malformed("QUEUE LIST takes no arguments")),
        "STATS" => Ok(QueueCmd::Stats(one_word(
            "QUEUE STATS",
            rest,
            "queue name",
        )?)),
        "LIMIT" => {
            let (queue, body) = split_verb(rest);
            if queue.is_empty() || body.is_empty() {
                return Err(malformed(
                    "QUEUE LIMIT needs a queue name and {\"concurrency\", \"rate\"} or OFF",
                ));
            }
            let limit = if body.eq_ignore_ascii_case("OFF") {
                None
            } else {
                Some(QueueLimit::parse(&Value::Object(json_object(
                    "QUEUE LIMIT",
                    body,
                )?))?)
            };
            Ok(QueueCmd::Limit {
                queue: queue.to_string(),
                limit,
            })
        }
        "PURGE" => {
            let (queue, body) = split_verb(rest);
            if queue.is_empty() || !body.starts_with('{') {
                return Err(malformed(
                    "QUEUE PURGE needs a queue name and {\"states\": [...], \"confirm\": true}",
                ));
            }
            queue_purge(queue, &json_object("QUEUE PURGE", body)?)
        }
        _ => Err(malformed(
            "QUEUE needs PAUSE, RESUME, LIST, STATS, LIMIT or PURGE",
        )),
    }
}

pub use crate::job::rate_limit::RateWindow;

impl QueueLimit {
    /// `{"concurrency": n?, "rate": {"limit": n, "period": "PT1M"}?}`; unknown keys are
    /// refused, so a misspelt limit is not silently no limit.
    pub fn parse(v: &Value) -> OjsResult<QueueLimit> {
        let bad = |m: String| OjsError::new(ErrorCode::InvalidPayload, m);
        let Value::Object(m) = v else {
            return Err(bad("a rate limit must be a JSON object".into()));
        };
        if let Some(k) = m
            .keys()
            .find(|k| !["concurrency", "rate"].contains(&k.as_str()))
        {
            return Err(bad(format!(
                "rate limit field {k:?} is not supported (concurrency, rate)"
            )));
        }
        use crate::job::rate_limit::count;
        let concurrency = match m.get("concurrency") {
            None | Some(Value::Null) => None,
            Some(v) => Some(count(v, "concurrency", 0)?),
        };
        let rate = match m.get("rate") {
            None | Some(Value::Null) => None,
            Some(v) => Some(RateWindow::parse(v, "rate")?),
        };
        if concurrency.is_none() && rate.is_none() {
            return Err(bad("a rate limit needs concurrency, rate or both".into()));
        }
        Ok(QueueLimit { concurrency, rate })
    }

    /// The wire form, with the period as an ISO 8601 duration.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(c) = self.concurrency {
            m.insert("concurrency".into(), Value::from(c));
        }
        if let Some(r) = self.rate {
            m.insert("rate".into(), r.to_json());
        }
        Value::Object(m)
    }
}

/// `STATS HISTORY {"period"?, "since"?, "until"?}` (ojs-admin-api §10.2): `period` one of
/// `1m`, `5m` (the default), `1h`, `1d`; `since` and `until` RFC 3339 (the last hour by
/// default). A `queue` filter is refused: the history is kept for all queues together.
pub fn parse_stats(payload: &str) -> OjsResult<super::Command> {
    let (sub, rest) = split_verb(payload);
    if !sub.eq_ignore_ascii_case("HISTORY") {
        return Err(malformed("STATS takes HISTORY"));
    }
    let obj = if rest.trim().is_empty() {
        Map::new()
    } else {
        json_object("STATS HISTORY", rest)?
    };
    stats_history(&obj)
}

/// The request of `STATS HISTORY` and `GET /ojs/v1/admin/stats/history` from its fields.
pub fn stats_history(obj: &Map<String, Value>) -> OjsResult<super::Command> {
    let verb = "STATS HISTORY";
    if obj.get("queue").is_some_and(|q| !q.is_null()) {
        return Err(OjsError::new(
            ErrorCode::InvalidPayload,
            "STATS HISTORY: a queue filter is not supported; the history covers every queue \
             (per-queue figures: QUEUE STATS)",
        ));
    }
    only_keys(verb, obj, &["period", "since", "until"])?;
    let period_ms = match text(verb, obj, "period")?.as_deref() {
        None | Some("5m") => 300_000,
        Some("1m") => 60_000,
        Some("1h") => 3_600_000,
        Some("1d") => 86_400_000,
        Some(other) => {
            return Err(malformed(format!(
                "{verb}: period {other:?} is not one of 1m, 5m, 1h, 1d"
            )))
        }
    };
    let since = time(verb, obj, "since")?;
    let until = time(verb, obj, "until")?;
    Ok(super::Command::StatsHistory {
        period_ms,
        since_ms: since.map(|t| t.timestamp_millis()),
        until_ms: until.map(|t| t.timestamp_millis()),
    })
}

pub fn parse_jobs(payload: &str) -> OjsResult<JobsQuery> {
    let obj = if payload.trim().is_empty() {
        Map::new()
    } else {
        json_object("JOBS", payload)?
    };
    jobs_query(&obj)
}

pub fn jobs_query(obj: &Map<String, Value>) -> OjsResult<JobsQuery> {
    let verb = "JOBS";
    only_keys(verb, obj, &["queue", "state", "limit", "offset"])?;
    let text = |k: &str| -> OjsResult<Option<String>> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(malformed(format!("{verb}: {k} must be a string"))),
        }
    };
    let state = match text("state")? {
        None => None,
        Some(s) => Some(
            State::ALL
                .into_iter()
                .find(|x| x.as_str() == s)
                .ok_or_else(|| malformed(format!("{verb}: unknown state {s:?}")))?,
        ),
    };
    let num = |k: &str, default: usize, max: usize| page_num(verb, obj, k, default, max);
    Ok(JobsQuery {
        queue: text("queue")?.map(super::faktory::queue_ref),
        state,
        limit: num("limit", DEAD_LIST_DEFAULT, DEAD_LIST_MAX)?,
        offset: num("offset", 0, usize::MAX)?,
    })
}

/// Longest `MUTATE` glob, bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Most job ids one `MUTATE` filter may list.
pub const MAX_FILTER_IDS: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: OjsResult<impl std::fmt::Debug>) -> ErrorCode {
        r.unwrap_err().code
    }

    #[test]
    fn queue_commands() {
        assert_eq!(parse_queue("LIST").unwrap(), QueueCmd::List);
        assert_eq!(
            parse_queue("stats q1").unwrap(),
            QueueCmd::Stats("q1".into())
        );
        assert_eq!(
            parse_queue(r#"PURGE q {"states":["completed","available"],"confirm":true}"#).unwrap(),
            QueueCmd::Purge {
                queue: "q".into(),
                states: vec![State::Completed, State::Available],
                older_than: None
            }
        );
        #[rustfmt::skip]
        let bad = [
            "PURGE q", r#"PURGE q {"states":["completed"]}"#, r#"PURGE q {"states":[],"confirm":true}"#,
            r#"PURGE q {"states":["active"],"confirm":true}"#, r#"PURGE q {"states":["x"],"confirm":true}"#,
            r#"PURGE q {"states":["completed"],"confirm":true,"stats":1}"#, "STATS", "STATS a b",
            "LIST x", "DRAIN q", "PAUSE",
        ];
        for b in bad {
            assert_eq!(code(parse_queue(b)), ErrorCode::MalformedCommand, "{b}");
        }
    }

    #[test]
    fn dead_commands() {
        assert_eq!(parse_dead("STATS").unwrap(), DeadCmd::Stats);
        let x = crate::protocol::faktory::ojs_id("x");
        assert_eq!(parse_dead("GET x").unwrap(), DeadCmd::Get(x.clone()));
        assert_eq!(parse_dead("RETRY x").unwrap(), DeadCmd::Retry(x.clone()));
        let f = DeadFilter {
            queue: Some("q".into()),
            ..Default::default()
        };
        assert_eq!(
            parse_dead(r#"DELETE {"queue":"q","confirm":true}"#).unwrap(),
            DeadCmd::DeleteAll(f.clone())
        );
        assert_eq!(
            parse_dead(r#"RETRY {"queue":"q","confirm":true}"#).unwrap(),
            DeadCmd::RetryAll(f)
        );
        #[rustfmt::skip]
        let bad = [
            r#"DELETE {"queue":"q"}"#, r#"RETRY {"queu":"q","confirm":true}"#, "PURGE", "GET",
            r#"LIST {"since":"yesterday"}"#, r#"LIST {"until":"2026-01-01T00:00:00Z","older_than":"2026-01-01T00:00:00Z"}"#,
            "STATS x", "RETRY a b",
        ];
        for b in bad {
            assert_eq!(code(parse_dead(b)), ErrorCode::MalformedCommand, "{b}");
        }
    }
}
