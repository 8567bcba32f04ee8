//! Query parameters shared by the SSE and polling endpoints (RFC-0005 §1, ojs-events §6.4):
//! `types` (`event_types` too), `queues`, `job_types`, `sources` as comma-separated lists
//! (a repeated parameter adds to the list), `after` (also `last_event_id`, `cursor`) as a
//! decimal event cursor, `since` as an RFC 3339 time, and `limit`. Unknown parameters are
//! ignored; a value that cannot be used is a 400.

use super::error::ApiError;
use crate::events::{split_csv, EventFilter, Start};
use chrono::{DateTime, Utc};

/// Events per polling page unless `limit` says otherwise, and the most one page returns.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;

#[derive(Debug, Default)]
pub struct EventQuery {
    pub filter: EventFilter,
    /// `Start::After(cursor)`, or a merged stream's `Start::Each` (a position token).
    pub after: Option<Start>,
    pub since: Option<DateTime<Utc>>,
    pub limit: Option<usize>,
}

/// A decimal cursor, as SSE `id:` lines and the polling `cursor` carry it.
pub fn parse_cursor(what: &str, v: &str) -> Result<u64, ApiError> {
    v.trim().parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "{what} must be an event cursor (a non-negative integer), got {v:?}"
        ))
    })
}

/// A cursor, or a merged stream's position (`p<N>:<c0>,...`, PROTOCOL.md §16).
pub fn parse_resume(what: &str, v: &str) -> Result<Start, ApiError> {
    match crate::events::parse_position(v.trim()) {
        Some(each) => Ok(Start::Each(each)),
        None => parse_cursor(what, v).map(Start::After).map_err(|_| {
            ApiError::bad_request(format!(
                "{what} must be an event cursor (a non-negative integer) or a stream \
                 position (p<N>:<cursor>,...), got {v:?}"
            ))
        }),
    }
}

fn parse_since(v: &str) -> Result<DateTime<Utc>, ApiError> {
    // An unencoded `+01:00` arrives as ` 01:00` (a `+` in a query string is a space).
    crate::job::parse_ts(v)
        .or_else(|| crate::job::parse_ts(&v.replace(' ', "+")))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "since must be an RFC 3339 timestamp with a zone (e.g. 2025-06-01T10:30:00Z), got {v:?}"
            ))
        })
}

fn parse_limit(v: &str) -> Result<usize, ApiError> {
    match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n.min(MAX_LIMIT)),
        _ => Err(ApiError::bad_request(format!(
            "limit must be an integer from 1 to {MAX_LIMIT}, got {v:?}"
        ))),
    }
}

/// `*` is a suffix-only wildcard (RFC-0005 §4); one anywhere else could never match.
fn check_patterns(what: &str, items: &[String]) -> Result<(), ApiError> {
    match items
        .iter()
        .find(|p| p.trim_end_matches('*').contains('*') || p.ends_with("**"))
    {
        Some(p) => Err(ApiError::bad_request(format!(
            "{what}: {p:?} has a '*' that is not a single trailing wildcard"
        ))),
        None => Ok(()),
    }
}

impl EventQuery {
    pub fn parse(pairs: &[(String, String)]) -> Result<EventQuery, ApiError> {
        let mut q = EventQuery::default();
        for (k, v) in pairs {
            match k.as_str() {
                "types" | "event_types" => q.filter.event_types.extend(split_csv(v)),
                "queues" => q.filter.queues.extend(split_csv(v)),
                "job_types" => q.filter.job_types.extend(split_csv(v)),
                "sources" => q.filter.sources.extend(split_csv(v)),
                "after" | "last_event_id" | "cursor" if !v.trim().is_empty() => {
                    let c = parse_resume(k, v)?;
                    if q.after.as_ref().is_some_and(|a| *a != c) {
                        return Err(ApiError::bad_request(
                            "after, last_event_id and cursor name different cursors",
                        ));
                    }
                    q.after = Some(c);
                }
                "since" if !v.trim().is_empty() => q.since = Some(parse_since(v)?),
                "limit" => q.limit = Some(parse_limit(v)?),
                _ => {}
            }
        }
        check_patterns("types", &q.filter.event_types)?;
        check_patterns("sources", &q.filter.sources)?;
        if let Some(bad) = q
            .filter
            .queues
            .iter()
            .find(|n| !crate::job::is_valid_queue(n))
        {
            return Err(ApiError::bad_request(format!("invalid queue name {bad:?}")));
        }
        if q.after.is_some() && q.since.is_some() {
            return Err(ApiError::bad_request(
                "give after (or last_event_id) or since, not both",
            ));
        }
        Ok(q)
    }

    /// Where a stream starts: the `Last-Event-ID` header first (an `EventSource`
    /// reconnecting sends it along with the original URL, `since` included), then
    /// `after`, then `since`; with none of them, only new events.
    pub fn stream_start(&self, last_event_id: Option<&str>) -> Result<Start, ApiError> {
        if let Some(h) = last_event_id.filter(|h| !h.trim().is_empty()) {
            return parse_resume("Last-Event-ID", h);
        }
        Ok(match (self.after.clone(), self.since) {
            (Some(c), _) => c,
            (None, Some(t)) => Start::Since(t),
            (None, None) => Start::Live,
        })
    }

    /// Where a poll starts: after the cursor, at the time, or at the oldest event kept.
    pub fn poll_start(&self) -> Start {
        match (self.after.clone(), self.since) {
            (Some(c), _) => c,
            (None, Some(t)) => Start::Since(t),
            (None, None) => Start::Since(DateTime::<Utc>::MIN_UTC),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &[(&str, &str)]) -> Result<EventQuery, ApiError> {
        let pairs: Vec<(String, String)> = s
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EventQuery::parse(&pairs)
    }

    #[test]
    fn lists_are_split_and_merged() {
        let e = q(&[
            ("types", "job.*, queue.paused"),
            ("types", "worker.started"),
            ("queues", "a,b"),
            ("job_types", "x.y"),
            ("limit", "5000"),
        ])
        .unwrap();
        assert_eq!(
            e.filter.event_types,
            ["job.*", "queue.paused", "worker.started"]
        );
        assert_eq!(e.filter.queues, ["a", "b"]);
        assert_eq!(e.filter.job_types, ["x.y"]);
        assert_eq!(e.limit, Some(MAX_LIMIT));
        assert_eq!(e.stream_start(None).unwrap(), Start::Live);
    }

    #[test]
    fn starts_follow_the_header_then_after_then_since() {
        let e = q(&[("since", "2025-06-01T10:00:00 00:00")]).unwrap();
        assert!(matches!(e.stream_start(None).unwrap(), Start::Since(_)));
        assert_eq!(e.stream_start(Some("42")).unwrap(), Start::After(42));
        let e = q(&[("last_event_id", "7")]).unwrap();
        assert_eq!(e.poll_start(), Start::After(7));
        assert!(e.stream_start(Some("x")).is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            &[("since", "yesterday")][..],
            &[("after", "-1")],
            &[("after", "evt_1")],
            &[("limit", "0")],
            &[("limit", "ten")],
            &[("types", "job.*.x")],
            &[("after", "1"), ("since", "2025-06-01T10:00:00Z")],
            &[("after", "1"), ("cursor", "2")],
            &[("queues", "bad queue!")],
        ] {
            let e = q(bad).expect_err("should be refused");
            assert_eq!(e.code, "INVALID_REQUEST", "{bad:?}");
        }
    }
}
