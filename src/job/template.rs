//! A job that the server itself enqueues later, perhaps many times: a cron entry's job, a
//! workflow step. It is validated once, when it is registered, into a typed [`NewJob`];
//! each enqueue clones it and stamps what changes (a fresh id, the time, the cron or
//! workflow attributes). No JSON is built or parsed on the engine thread for it.
//!
//! A template is stored (inside a workflow's node records) as the flat client envelope it
//! was built from, so records written before templates were typed read the same way;
//! [`Template::envelope`] writes that envelope back from the typed job.

use super::validate::{parse_new_job, Limits, NewJob};
use crate::error::{ErrorCode, OjsError, OjsResult};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    new: NewJob,
    /// The definition named the job's id (a workflow step may); otherwise every
    /// instance gets a fresh UUIDv7.
    id_given: bool,
    /// Encoded size of the envelope, counted against the job size limit and the queued
    /// bytes bound.
    len: usize,
    /// Nesting depth of the envelope, so an instance with more attributes can be bounded
    /// without walking the job again.
    depth: usize,
}

impl Template {
    /// Validate `envelope` as PUSH would.
    pub fn parse(envelope: Value, now: DateTime<Utc>, limits: &Limits) -> OjsResult<Template> {
        let len = serde_json::to_vec(&envelope).map_or(usize::MAX, |b| b.len());
        let depth = crate::json::depth(&envelope);
        let id_given = envelope.get("id").is_some_and(|v| !v.is_null());
        let mut new = parse_new_job(envelope, len, now, limits)?;
        // No id of its own until an instance is made: two parses of one definition are
        // equal (a stored cron entry compares equal to the one registered).
        if !id_given {
            new.job.id.clear();
        }
        Ok(Template {
            new,
            id_given,
            len,
            depth,
        })
    }

    /// A template read back from a record this server wrote: it passed validation when it
    /// was registered, under the limits of that time, so size is not checked again.
    pub fn stored(envelope: Value) -> OjsResult<Template> {
        let unbounded = Limits {
            max_job_bytes: usize::MAX,
        };
        Template::parse(envelope, Utc::now(), &unbounded)
    }

    /// The queue every instance goes to.
    pub fn queue(&self) -> &str {
        &self.new.job.queue
    }

    pub fn job_type(&self) -> &str {
        &self.new.job.job_type
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// A new job from the template: its own id (unless the definition gave one), created
    /// now. The caller adds what belongs to this instance.
    pub fn instantiate(&self, now: DateTime<Utc>) -> NewJob {
        let mut new = self.new.clone();
        if !self.id_given {
            new.job.id = uuid::Uuid::now_v7().hyphenated().to_string();
        }
        new.job.created_at = now;
        new
    }

    /// The flat client envelope the template stands for (what PUSH would take).
    pub fn envelope(&self) -> Value {
        let j = &self.new.job;
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_owned(), v);
        };
        put("specversion", Value::String(j.specversion.clone()));
        if self.id_given {
            put("id", Value::String(j.id.clone()));
        }
        put("type", Value::String(j.job_type.clone()));
        put("queue", Value::String(j.queue.clone()));
        put("args", Value::Array(j.args.clone()));
        put("meta", Value::Object(j.meta.clone()));
        put("priority", Value::from(j.priority));
        if let Some(t) = j.timeout {
            put("timeout", Value::from(t));
        }
        if let Some(s) = &j.scheduled_at {
            put("scheduled_at", Value::String(s.clone()));
        }
        if let Some(s) = &j.expires_at {
            put("expires_at", Value::String(s.clone()));
        }
        // A policy always serializes; `Null` would only mean a bug, and reads as the default.
        put(
            "retry",
            serde_json::to_value(&j.retry).unwrap_or(Value::Null),
        );
        if let Some(u) = &j.unique {
            put("unique", u.clone());
        }
        if let Some(s) = &j.schema {
            put("schema", Value::String(s.clone()));
        }
        if self.new.pending {
            put("pending", Value::Bool(true));
        }
        for (k, v) in &j.extra {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Value::Object(m)
    }
}

/// An instance too large for the job size limit: what parsing its envelope would say.
pub fn check_len(len: usize, limits: &Limits) -> OjsResult<()> {
    let max = limits.max_job_bytes;
    if len > max {
        return Err(OjsError::new(
            ErrorCode::PayloadTooLarge,
            format!("job envelope is {len} bytes; the limit is {max}"),
        ));
    }
    Ok(())
}

impl serde::Serialize for Template {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.envelope().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Template {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Template, D::Error> {
        let v = Value::deserialize(d)?;
        Template::stored(v).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        "2026-02-12T10:30:00Z".parse().unwrap()
    }

    fn limits() -> Limits {
        Limits {
            max_job_bytes: 1 << 20,
        }
    }

    /// Envelope -> template -> envelope -> template gives the same typed job: what a
    /// workflow stores is what it later enqueues.
    #[test]
    fn a_stored_template_reads_back_as_the_same_job() {
        let cases = [
            json!({"type": "a", "args": []}),
            json!({"type": "mail.send", "queue": "mail", "args": [1, {"x": [null]}],
                   "meta": {"k": "v"}, "priority": -3, "timeout": 30,
                   "scheduled_at": "2026-03-01T00:00:00+01:00",
                   "expires_at": "2026-03-02T00:00:00Z",
                   "retry": {"max_attempts": 7, "initial_interval": "PT2S"},
                   "unique": {"keys": ["type"], "period": "PT1H"}, "schema": "s1",
                   "pending": true, "rate_limit": {"key": "k", "rate": {"limit": 5, "period": "PT1S"}},
                   "x_custom": {"deep": [1, 2]}}),
            json!({"id": "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "type": "b", "args": [true]}),
        ];
        for env in cases {
            let t = Template::parse(env.clone(), now(), &limits()).unwrap();
            let back = Template::stored(t.envelope()).unwrap();
            let (a, b) = (t.instantiate(now()), back.instantiate(now()));
            let strip = |mut n: NewJob| {
                n.job.id = if t.id_given { n.job.id } else { String::new() };
                n
            };
            assert_eq!(strip(a), strip(b), "{env}");
            assert_eq!(t.id_given, back.id_given);
            // And the stored form is a valid PUSH envelope in its own right.
            parse_new_job(t.envelope(), 0, now(), &limits()).unwrap();
        }
    }

    #[test]
    fn two_parses_of_one_definition_are_equal() {
        let env = json!({"type": "a", "args": [1]});
        let a = Template::parse(env.clone(), now(), &limits()).unwrap();
        let b = Template::parse(env, now(), &limits()).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn each_instance_has_its_own_id_unless_the_definition_named_one() {
        let t = Template::parse(json!({"type": "a", "args": []}), now(), &limits()).unwrap();
        let (a, b) = (t.instantiate(now()), t.instantiate(now()));
        assert_ne!(a.job.id, b.job.id);
        let id = "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
        let t =
            Template::parse(json!({"id": id, "type": "a", "args": []}), now(), &limits()).unwrap();
        assert_eq!(t.instantiate(now()).job.id, id);
    }

    #[test]
    fn parse_applies_the_push_rules() {
        let e = Template::parse(json!({"type": "A", "args": []}), now(), &limits()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidJobType);
        let big = json!({"type": "a", "args": ["x".repeat(2 << 20)]});
        let e = Template::parse(big, now(), &limits()).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert!(check_len(10, &limits()).is_ok());
        assert_eq!(
            check_len(2 << 20, &limits()).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
    }
}
