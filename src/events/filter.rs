//! Subscription filters (ojs-events §6.1): event types (with `prefix.*` wildcards), queues,
//! job types and sources (with a trailing `*`), combined with AND. An empty dimension
//! matches everything.

use super::Event;
use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EventFilter {
    pub event_types: Vec<String>,
    pub queues: Vec<String>,
    pub job_types: Vec<String>,
    pub sources: Vec<String>,
}

fn wildcard(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => pattern == value,
    }
}

fn list(obj: &Map<String, Value>, key: &str) -> OjsResult<Vec<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(format!("{key} must be an array of strings"))),
        Some(_) => Err(bad(format!("{key} must be an array of strings"))),
    }
}

fn bad(msg: String) -> OjsError {
    OjsError::new(ErrorCode::MalformedCommand, msg)
}

/// Split a comma-separated query parameter (`types=job.completed,job.failed`).
pub fn split_csv(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl EventFilter {
    pub fn from_json(obj: &Map<String, Value>) -> OjsResult<EventFilter> {
        Ok(EventFilter {
            event_types: list(obj, "event_types")?,
            queues: list(obj, "queues")?,
            job_types: list(obj, "job_types")?,
            sources: list(obj, "sources")?,
        })
    }

    pub fn matches(&self, e: &Event) -> bool {
        let dim = |patterns: &[String], value: Option<&str>, wild: bool| {
            patterns.is_empty()
                || value.is_some_and(|v| {
                    patterns
                        .iter()
                        .any(|p| if wild { wildcard(p, v) } else { p == v })
                })
        };
        dim(&self.event_types, Some(&e.kind), true)
            && dim(&self.queues, e.queue.as_deref(), false)
            && dim(&self.job_types, e.job_type.as_deref(), false)
            && dim(&self.sources, Some(&e.source), true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, queue: Option<&str>, jt: Option<&str>) -> Event {
        let mut data = serde_json::Map::new();
        if let Some(q) = queue {
            data.insert("queue".into(), q.into());
        }
        if let Some(t) = jt {
            data.insert("job_type".into(), t.into());
        }
        let e = crate::events::build(
            1,
            kind,
            "ojs://ojsd/api".into(),
            chrono::Utc::now(),
            "s",
            data,
        );
        assert_eq!((e.queue.as_deref(), e.job_type.as_deref()), (queue, jt));
        e
    }

    #[test]
    fn dimensions_are_anded_and_types_take_prefix_wildcards() {
        let f = EventFilter {
            event_types: vec!["job.*".into()],
            queues: vec!["mail".into()],
            ..Default::default()
        };
        assert!(f.matches(&ev("job.completed", Some("mail"), None)));
        assert!(!f.matches(&ev("job.completed", Some("other"), None)));
        assert!(!f.matches(&ev("queue.paused", Some("mail"), None)));
        // An event without a queue does not match a queue filter.
        assert!(!f.matches(&ev("job.completed", None, None)));
        assert!(EventFilter::default().matches(&ev("worker.started", None, None)));
        let s = EventFilter {
            sources: vec!["ojs://ojsd/*".into()],
            ..Default::default()
        };
        assert!(s.matches(&ev("x", None, None)));
        let jt = EventFilter {
            job_types: vec!["email.send".into()],
            ..Default::default()
        };
        assert!(jt.matches(&ev("job.started", Some("q"), Some("email.send"))));
        assert!(!jt.matches(&ev("job.started", Some("q"), Some("email.other"))));
    }

    #[test]
    fn bad_filters_are_refused() {
        let obj = serde_json::json!({"queues": "mail"});
        assert!(EventFilter::from_json(obj.as_object().unwrap()).is_err());
        let obj = serde_json::json!({"event_types": [1]});
        assert!(EventFilter::from_json(obj.as_object().unwrap()).is_err());
    }
}
