//! The CronJob registration object (ojs-cron §2): validation, normalisation, and the job
//! envelope each occurrence enqueues.
//!
//! The job template is checked at registration by building the job a fire would push and
//! running it through the same validation as PUSH, so a registration that is accepted
//! produces valid jobs.

use super::schedule::{Schedule, ScheduleError};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::format_ts;
use crate::job::template::Template;
use crate::job::validate::{Limits, NewJob};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

pub const MAX_NAME_LEN: usize = 255;
pub const MAX_DESCRIPTION_LEN: usize = 4096;

/// Envelope attributes a template cannot set: the fired job's identity and timing are the
/// cron's to decide.
const FORBIDDEN_OPTIONS: [&str; 6] = [
    "id",
    "type",
    "args",
    "scheduled_at",
    "expires_at",
    "pending",
];

/// What to do when an occurrence comes due while the previous run is not finished (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    Skip,
    Allow,
    CancelPrevious,
    Enqueue,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
            Overlap::CancelPrevious => "cancel_previous",
            Overlap::Enqueue => "enqueue",
        }
    }

    fn parse(s: &str) -> Option<Overlap> {
        [
            Overlap::Skip,
            Overlap::Allow,
            Overlap::CancelPrevious,
            Overlap::Enqueue,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// A validated registration.
#[derive(Debug, Clone, PartialEq)]
pub struct CronDef {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub job_type: String,
    pub args: Vec<Value>,
    pub options: Map<String, Value>,
    /// Top-level `meta` (ojs-http-binding §13.2), merged over `options.meta`.
    pub meta: Option<Map<String, Value>>,
    pub overlap: Overlap,
    pub enabled: bool,
    pub description: Option<String>,
    /// The job every occurrence enqueues, validated once at registration.
    pub template: Template,
}

/// `[a-z0-9][a-z0-9\-\.]*`, at most 255 characters (ojs-cron §2.2).
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'.')
}

fn payload(msg: impl Into<String>) -> OjsError {
    OjsError::new(ErrorCode::InvalidPayload, msg)
}

fn shown(s: &str) -> String {
    let cut: String = s.chars().take(64).collect();
    if cut.len() < s.len() {
        format!("{cut:?}...")
    } else {
        format!("{s:?}")
    }
}

/// Map a schedule error to the client's error code.
pub fn schedule_error(e: ScheduleError, expr: &str) -> OjsError {
    match e {
        ScheduleError::Expression(m) => OjsError::new(
            ErrorCode::InvalidCronExpression,
            format!("cron {}: {m}", shown(expr)),
        ),
        ScheduleError::Timezone(m) => payload(m),
    }
}

impl CronDef {
    /// Validate a registration (system-managed fields and unknown fields are ignored) and
    /// parse its schedule. `now` and `limits` are used to validate the job template.
    pub fn parse(
        value: &Value,
        now: DateTime<Utc>,
        limits: &Limits,
    ) -> OjsResult<(CronDef, Schedule)> {
        let Value::Object(m) = value else {
            return Err(payload("a cron job must be a JSON object"));
        };
        // The public conformance suite's spellings are accepted too (PROTOCOL.md §11):
        // `expression` for `cron`, and the job's `type`/`args`/`meta`/`options` inside a
        // `job_template` object. A field given both ways takes the top-level one.
        let template = match m.get("job_template") {
            None | Some(Value::Null) => None,
            Some(Value::Object(t)) => Some(t),
            Some(_) => return Err(payload("job_template must be a JSON object")),
        };
        let get = |k: &str| {
            let alias = match k {
                "cron" => m.get("expression"),
                "type" | "args" | "meta" | "options" => template.and_then(|t| t.get(k)),
                _ => None,
            };
            m.get(k)
                .filter(|v| !v.is_null())
                .or(alias.filter(|v| !v.is_null()))
        };
        let name = match get("name") {
            Some(Value::String(s)) if is_valid_name(s) => s.clone(),
            Some(Value::String(s)) => {
                return Err(payload(format!(
                "name {} must match [a-z0-9][a-z0-9.-]* and be at most {MAX_NAME_LEN} characters",
                shown(s)
            )))
            }
            Some(_) => return Err(payload("name must be a string")),
            None => return Err(payload("name is required")),
        };
        let cron = match get("cron") {
            Some(Value::String(s)) => s.trim().to_string(),
            Some(_) => return Err(payload("cron must be a string")),
            None => return Err(payload("cron is required")),
        };
        let timezone = match get("timezone") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(payload("timezone must be a string")),
            None => "UTC".to_string(),
        };
        let schedule = Schedule::parse(&cron, &timezone).map_err(|e| schedule_error(e, &cron))?;
        let job_type = match get("type") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                return Err(OjsError::new(
                    ErrorCode::InvalidJobType,
                    "type must be a string",
                ))
            }
            None => return Err(payload("type is required")),
        };
        let args = match get("args") {
            Some(Value::Array(a)) => a.clone(),
            Some(_) => {
                return Err(OjsError::new(
                    ErrorCode::InvalidArgs,
                    "args must be a JSON array",
                ))
            }
            None => Vec::new(),
        };
        let options = match get("options") {
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Err(payload("options must be a JSON object")),
            None => Map::new(),
        };
        if let Some(k) = FORBIDDEN_OPTIONS.iter().find(|k| options.contains_key(**k)) {
            return Err(payload(format!(
                "options.{k} cannot be set on a cron job: each occurrence decides it"
            )));
        }
        if options
            .get("meta")
            .is_some_and(|m| !m.is_object() && !m.is_null())
        {
            return Err(OjsError::new(
                ErrorCode::InvalidMetadata,
                "options.meta must be a JSON object",
            ));
        }
        let meta = match get("meta") {
            Some(Value::Object(o)) => Some(o.clone()),
            Some(_) => {
                return Err(OjsError::new(
                    ErrorCode::InvalidMetadata,
                    "meta must be a JSON object",
                ))
            }
            None => None,
        };
        let overlap = match get("overlap_policy") {
            Some(Value::String(s)) => Overlap::parse(s).ok_or_else(|| {
                payload(format!(
                    "overlap_policy {} must be skip, allow, cancel_previous or enqueue",
                    shown(s)
                ))
            })?,
            Some(_) => return Err(payload("overlap_policy must be a string")),
            None => Overlap::Skip,
        };
        let enabled = match get("enabled") {
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(payload("enabled must be a boolean")),
            None => true,
        };
        let description = match get("description") {
            Some(Value::String(s)) if s.len() <= MAX_DESCRIPTION_LEN => Some(s.clone()),
            Some(Value::String(_)) => {
                return Err(payload(format!(
                    "description must be at most {MAX_DESCRIPTION_LEN} bytes"
                )))
            }
            Some(_) => return Err(payload("description must be a string")),
            None => None,
        };
        let envelope = envelope(&name, &job_type, &args, &options, meta.as_ref(), now, false);
        // The job every occurrence will push must pass PUSH's validation.
        let template =
            Template::parse(envelope, now, limits).map_err(|e| e.context("job template"))?;
        let def = CronDef {
            name,
            cron,
            timezone,
            job_type,
            args,
            options,
            meta,
            overlap,
            enabled,
            description,
            template,
        };
        Ok((def, schedule))
    }

    /// The job of the occurrence scheduled at `scheduled`, made from the template, and its
    /// encoded size.
    pub fn instance(
        &self,
        scheduled: DateTime<Utc>,
        pending: bool,
        now: DateTime<Utc>,
    ) -> (NewJob, usize) {
        let mut new = self.template.instantiate(now);
        // Same length as the registration's sample: timestamps have a fixed format.
        new.job
            .meta
            .insert("cron_triggered_at".into(), json!(format_ts(scheduled)));
        new.pending = pending;
        let len = self.template.len() + if pending { 16 } else { 0 };
        (new, len)
    }

    /// The job an occurrence scheduled at `scheduled` enqueues: the options as envelope
    /// attributes, `meta` with `cron_name` and `cron_triggered_at` (§6.3).
    pub fn job(&self, scheduled: DateTime<Utc>, pending: bool) -> Value {
        envelope(
            &self.name,
            &self.job_type,
            &self.args,
            &self.options,
            self.meta.as_ref(),
            scheduled,
            pending,
        )
    }

    /// The registration fields as clients see them (and as they are stored).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("cron".into(), json!(self.cron));
        m.insert("timezone".into(), json!(self.timezone));
        m.insert("type".into(), json!(self.job_type));
        m.insert("args".into(), Value::Array(self.args.clone()));
        m.insert("options".into(), Value::Object(self.options.clone()));
        if let Some(meta) = &self.meta {
            m.insert("meta".into(), Value::Object(meta.clone()));
        }
        m.insert("overlap_policy".into(), json!(self.overlap.as_str()));
        m.insert("enabled".into(), json!(self.enabled));
        m.insert("description".into(), json!(self.description));
        m
    }
}

/// A registration travels (between nodes) as the JSON it is stored as, and is validated
/// again when read: as a stored one, under no size limit (it passed the limits of the node
/// that took it from the client).
impl serde::Serialize for CronDef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&self.to_json(), s)
    }
}

impl<'de> serde::Deserialize<'de> for CronDef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CronDef, D::Error> {
        let v = <Value as serde::Deserialize>::deserialize(d)?;
        let unbounded = Limits {
            max_job_bytes: usize::MAX,
        };
        CronDef::parse(&v, Utc::now(), &unbounded)
            .map(|(def, _)| def)
            .map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// The envelope of an occurrence: the options as envelope attributes, `meta` with
/// `cron_name` and `cron_triggered_at` (§6.3).
fn envelope(
    name: &str,
    job_type: &str,
    args: &[Value],
    options: &Map<String, Value>,
    meta_over: Option<&Map<String, Value>>,
    scheduled: DateTime<Utc>,
    pending: bool,
) -> Value {
    let mut job = Map::new();
    job.insert("type".into(), json!(job_type));
    job.insert("args".into(), Value::Array(args.to_vec()));
    let mut meta = Map::new();
    for (k, v) in options {
        match (k.as_str(), v) {
            ("meta", Value::Object(m)) => meta.extend(m.clone()),
            _ => {
                job.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(m) = meta_over {
        meta.extend(m.clone());
    }
    meta.insert("cron_name".into(), json!(name));
    meta.insert("cron_triggered_at".into(), json!(format_ts(scheduled)));
    job.insert("meta".into(), Value::Object(meta));
    if pending {
        job.insert("pending".into(), json!(true));
    }
    Value::Object(job)
}
