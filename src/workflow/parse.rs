//! Parsing and validating a workflow definition. Every problem is collected (not just the
//! first) with its JSONPath, so a client can fix a definition in one round trip (§11.1).
//!
//! Jobs are written as in the workflow spec (`{"type", "args", "options": {...}}`, §3.2)
//! and folded into the flat envelope PUSH takes, then checked by the job validator itself,
//! so a workflow job is exactly as valid as the same job pushed on its own.

use super::{
    is_valid_id, Def, Definition, Flow, JobDef, Kind, Problem, Role, MAX_DEPTH, MAX_JOBS,
    MAX_NAME_CHARS, MAX_PROBLEMS,
};
use crate::job::template::Template;
use crate::job::validate::Limits;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

mod dag;

/// Options accepted in a job's `options` object, and the envelope attribute each sets.
/// `timeout_ms` and `visibility_timeout` (ISO 8601) are converted to whole seconds (rounded
/// up), the rest are moved as they are; `retry_policy` is the conformance suite's name for
/// `retry` (PROTOCOL.md §14 reading 18).
const OPTIONS: &[(&str, &str)] = &[
    ("queue", "queue"),
    ("priority", "priority"),
    ("retry", "retry"),
    ("retry_policy", "retry"),
    ("unique", "unique"),
    ("expires_at", "expires_at"),
    ("scheduled_at", "scheduled_at"),
    ("delay_until", "scheduled_at"),
    ("timeout", "timeout"),
    ("timeout_ms", "timeout"),
    ("visibility_timeout_ms", "timeout"),
    ("visibility_timeout", "timeout"),
    ("pending", "pending"),
    ("tags", "tags"),
];

/// Attributes the runtime writes on every workflow job.
const SERVER_SET: [&str; 3] = ["workflow_id", "workflow_step", "parent_results"];

/// Top-level envelope attributes a job validator message can start with.
const ENVELOPE_KEYS: [&str; 14] = [
    "specversion",
    "id",
    "type",
    "queue",
    "args",
    "meta",
    "priority",
    "timeout",
    "scheduled_at",
    "expires_at",
    "retry",
    "unique",
    "schema",
    "pending",
];

struct Ctx<'a> {
    problems: Vec<Problem>,
    unlisted: usize,
    /// Jobs seen so far (callbacks included); validation of jobs stops past `MAX_JOBS`.
    total: usize,
    jobs: usize,
    callbacks: usize,
    limits: &'a Limits,
    now: DateTime<Utc>,
}

fn quoted(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

fn present<'v>(m: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// Validate a definition (`v`, the client's JSON) against the job limits; `now` only
/// matters to the job validator's bookkeeping.
pub fn parse_definition(
    v: &Value,
    limits: &Limits,
    now: DateTime<Utc>,
) -> Result<Definition, Vec<Problem>> {
    let mut cx = Ctx {
        problems: Vec::new(),
        unlisted: 0,
        total: 0,
        jobs: 0,
        callbacks: 0,
        limits,
        now,
    };
    let root = match v {
        Value::Object(m) => match m.get("type") {
            // The binding's shape (§14.1): no type, steps with ids and depends_on.
            None | Some(Value::Null) if dag::is_dag(m) => cx.dag(m),
            Some(Value::String(t)) if Kind::from_type(t).is_some() => cx.flow(m, "$", 1),
            Some(Value::String(t)) => {
                let msg = format!(
                    r#"type must be "chain", "group" or "batch", not {}"#,
                    quoted(t)
                );
                cx.problem("$.type".into(), msg);
                None
            }
            None | Some(Value::Null) => {
                let msg = r#"type is required: "chain", "group" or "batch" (a DAG has no type, and steps with "id" and "depends_on")"#;
                cx.problem("$.type".into(), msg.into());
                None
            }
            Some(_) => {
                cx.problem("$.type".into(), "type must be a string".into());
                None
            }
        },
        _ => {
            let msg = "a workflow definition must be a JSON object";
            cx.problem("$".into(), msg.into());
            None
        }
    };
    if cx.total > MAX_JOBS {
        let message = format!(
            "the workflow defines {} jobs (callbacks included); at most {MAX_JOBS} are allowed",
            cx.total
        );
        cx.problems.insert(
            0,
            Problem {
                path: "$".into(),
                message,
            },
        );
    }
    if cx.unlisted > 0 {
        cx.problems.push(Problem {
            path: "$".into(),
            message: format!("... and {} more problems", cx.unlisted),
        });
    }
    match root {
        Some(root) if cx.problems.is_empty() => Ok(Definition {
            root,
            job_count: cx.jobs,
            callback_count: cx.callbacks,
        }),
        _ => Err(cx.problems),
    }
}

impl Ctx<'_> {
    fn problem(&mut self, path: String, message: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem { path, message });
        } else {
            self.unlisted += 1;
        }
    }

    /// A workflow's optional `id` and `name`.
    fn id_and_name(
        &mut self,
        m: &Map<String, Value>,
        path: &str,
        ok: &mut bool,
    ) -> (Option<String>, Option<String>) {
        let id = match present(m, "id") {
            None => None,
            Some(Value::String(s)) if is_valid_id(s) => Some(s.clone()),
            Some(_) => {
                let msg = "id must be a string of 1 to 128 characters from [A-Za-z0-9._:-]";
                self.problem(format!("{path}.id"), msg.into());
                *ok = false;
                None
            }
        };
        let name = match present(m, "name") {
            None => None,
            Some(Value::String(s)) if s.chars().count() <= MAX_NAME_CHARS => Some(s.clone()),
            Some(_) => {
                let msg = format!("name must be a string of at most {MAX_NAME_CHARS} characters");
                self.problem(format!("{path}.name"), msg);
                *ok = false;
                None
            }
        };
        (id, name)
    }

    /// A chain, group or batch object whose `type` was already recognized.
    fn flow(&mut self, m: &Map<String, Value>, path: &str, depth: usize) -> Option<Flow> {
        let kind = m
            .get("type")
            .and_then(Value::as_str)
            .and_then(Kind::from_type)?;
        if depth > MAX_DEPTH {
            let msg = format!(
                "nesting depth {depth} exceeds the maximum of {MAX_DEPTH} levels (the top-level workflow is level 1)"
            );
            self.problem(path.into(), msg);
            return None;
        }
        let mut ok = true;
        let (id, name) = self.id_and_name(m, path, &mut ok);
        let field = kind.children_field();
        let other = if kind == Kind::Chain { "jobs" } else { "steps" };
        if m.contains_key(other) {
            let msg = format!(
                "a {} has no {other}; its children go in {field}",
                kind.as_str()
            );
            self.problem(format!("{path}.{other}"), msg);
            ok = false;
        }
        let mut children = Vec::new();
        match present(m, field) {
            None => {
                self.problem(format!("{path}.{field}"), format!("{field} is required"));
                ok = false;
            }
            Some(Value::Array(items)) if items.is_empty() => {
                let msg = format!("{field} array must contain at least one element");
                self.problem(format!("{path}.{field}"), msg);
                ok = false;
            }
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match self.child(item, &format!("{path}.{field}[{i}]"), depth) {
                        Some(d) => children.push(d),
                        None => ok = false,
                    }
                }
            }
            Some(_) => {
                self.problem(
                    format!("{path}.{field}"),
                    format!("{field} must be an array"),
                );
                ok = false;
            }
        }
        let callbacks = self.callbacks(kind, m, path, &mut ok);
        ok.then_some(Flow {
            kind,
            id,
            name,
            children,
            callbacks,
            dag: Vec::new(),
        })
    }

    fn callbacks(
        &mut self,
        kind: Kind,
        m: &Map<String, Value>,
        path: &str,
        ok: &mut bool,
    ) -> Vec<(Role, JobDef)> {
        let at = format!("{path}.callbacks");
        let mut out = Vec::new();
        let need =
            "a batch needs callbacks with at least one of on_complete, on_success, on_failure";
        match (kind, present(m, "callbacks")) {
            (Kind::Batch, None) => {
                self.problem(at, need.into());
                *ok = false;
            }
            (Kind::Batch, Some(Value::Object(cb))) => {
                for key in cb.keys() {
                    if !Role::ALL.iter().any(|r| r.as_str() == key) {
                        let msg = "unknown callback; use on_complete, on_success or on_failure";
                        self.problem(format!("{at}.{key}"), msg.into());
                        *ok = false;
                    }
                }
                let mut any = false;
                for role in Role::ALL {
                    let Some(v) = present(cb, role.as_str()) else {
                        continue;
                    };
                    any = true;
                    match self.callback(v, &format!("{at}.{}", role.as_str())) {
                        Some(job) => out.push((role, job)),
                        None => *ok = false,
                    }
                }
                if !any {
                    self.problem(at, need.into());
                    *ok = false;
                }
            }
            (Kind::Batch, Some(_)) => {
                self.problem(at, "callbacks must be an object".into());
                *ok = false;
            }
            (_, Some(_)) => {
                let msg = format!("a {} has no callbacks; only a batch does", kind.as_str());
                self.problem(at, msg);
                *ok = false;
            }
            (_, None) => {}
        }
        out
    }

    fn child(&mut self, item: &Value, path: &str, depth: usize) -> Option<Def> {
        let Value::Object(m) = item else {
            let msg = "must be a job envelope or a nested workflow object";
            self.problem(path.into(), msg.into());
            return None;
        };
        let nested = m
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| Kind::from_type(t).is_some());
        if nested {
            return self.flow(m, path, depth + 1).map(Def::Flow);
        }
        self.jobs += 1;
        self.job(m, path).map(Def::Job)
    }

    fn callback(&mut self, v: &Value, path: &str) -> Option<JobDef> {
        let Value::Object(m) = v else {
            self.problem(
                path.into(),
                "a callback must be a job envelope object".into(),
            );
            return None;
        };
        if let Some(t) = m.get("type").and_then(Value::as_str) {
            if Kind::from_type(t).is_some() {
                let msg = "a callback is a single job, not a nested workflow";
                self.problem(format!("{path}.type"), msg.into());
                return None;
            }
        }
        self.callbacks += 1;
        self.job(m, path)
    }

    /// Fold `options` into a flat envelope and run the job validator on it.
    fn job(&mut self, m: &Map<String, Value>, path: &str) -> Option<JobDef> {
        self.total += 1;
        if self.total > MAX_JOBS {
            return None; // reported once, as a count
        }
        let mut ok = true;
        if present(m, "id").is_some() {
            let msg = "job ids are assigned by the server when the job is enqueued";
            self.problem(format!("{path}.id"), msg.into());
            ok = false;
        }
        for key in SERVER_SET {
            if m.contains_key(key) {
                let msg = format!("{key} is set by the server");
                self.problem(format!("{path}.{key}"), msg);
                ok = false;
            }
        }
        let mut env = m.clone();
        // Envelope attribute → the option it came from, to point errors at the option.
        let mut from_options: Vec<(&str, String)> = Vec::new();
        match env.shift_remove("options") {
            None | Some(Value::Null) => {}
            Some(Value::Object(opts)) => {
                for (key, value) in opts {
                    if value.is_null() {
                        continue;
                    }
                    let at = format!("{path}.options.{key}");
                    let Some(&(_, target)) = OPTIONS.iter().find(|(k, _)| *k == key) else {
                        let known: Vec<&str> = OPTIONS.iter().map(|(k, _)| *k).collect();
                        let msg = format!("unknown job option; known: {}", known.join(", "));
                        self.problem(at, msg);
                        ok = false;
                        continue;
                    };
                    if present(&env, target).is_some() {
                        let msg = format!("{target} is given both here and outside options");
                        self.problem(at, msg);
                        ok = false;
                        continue;
                    }
                    let value = if key.ends_with("_ms") {
                        match value.as_u64() {
                            Some(ms) => Value::from(ms.div_ceil(1000)),
                            None => {
                                let msg = "must be a non-negative integer number of milliseconds";
                                self.problem(at, msg.into());
                                ok = false;
                                continue;
                            }
                        }
                    } else if key == "visibility_timeout" {
                        let d = value.as_str().map(crate::job::duration::parse_duration);
                        match d {
                            Some(Ok(d)) => {
                                Value::from(d.as_secs() + u64::from(d.subsec_nanos() > 0))
                            }
                            _ => {
                                self.problem(at, "must be an ISO 8601 duration".into());
                                ok = false;
                                continue;
                            }
                        }
                    } else {
                        value
                    };
                    env.insert(target.to_string(), value);
                    from_options.push((target, key));
                }
            }
            Some(_) => {
                self.problem(
                    format!("{path}.options"),
                    "options must be an object".into(),
                );
                ok = false;
            }
        }
        let retry_at = match from_options.iter().find(|(t, _)| *t == "retry") {
            Some(_) => format!("{path}.options.retry"),
            None => format!("{path}.retry"),
        };
        if let Some(Value::Object(r)) = env.get_mut("retry") {
            for (iso, aliases) in [
                ("initial_interval", ["initial_interval_ms", "base_delay_ms"]),
                ("max_interval", ["max_interval_ms", "max_delay_ms"]),
            ] {
                for alias in aliases {
                    let Some(v) = r.shift_remove(alias).filter(|v| !v.is_null()) else {
                        continue;
                    };
                    match v.as_u64() {
                        Some(ms) if present(r, iso).is_none() => {
                            r.insert(iso.into(), Value::String(iso_duration(ms)));
                        }
                        Some(_) => {} // the ISO 8601 form wins
                        None => {
                            let msg = "must be a non-negative integer number of milliseconds";
                            self.problem(format!("{retry_at}.{alias}"), msg.into());
                            ok = false;
                        }
                    }
                }
            }
        }
        if let Some(tags) = present(&env, "tags") {
            let strings = tags
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string));
            if !strings {
                let at = match from_options.iter().find(|(t, _)| *t == "tags") {
                    Some(_) => format!("{path}.options.tags"),
                    None => format!("{path}.tags"),
                };
                self.problem(at, "tags must be an array of strings".into());
                ok = false;
            }
        }
        // Run even after a problem above, to report the envelope's own first problem too.
        let envelope = Value::Object(env);
        match Template::parse(envelope, self.now, self.limits) {
            Ok(template) => ok.then(|| JobDef {
                job_type: template.job_type().to_owned(),
                template: Box::new(template),
            }),
            Err(e) => {
                let at = error_path(path, &e.message, &from_options);
                self.problem(at, e.message);
                None
            }
        }
    }
}

/// `ms` as an ISO 8601 duration: `PT1S`, `PT0.25S`.
fn iso_duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("PT{}S", ms / 1000)
    } else {
        format!("PT{}.{:03}S", ms / 1000, ms % 1000)
    }
}

/// Point a job validator message ("queue \"Q\" must ...", "retry.max_attempts must ...")
/// at the attribute it names, under `options` when that is where the client wrote it.
fn error_path(path: &str, message: &str, from_options: &[(&str, String)]) -> String {
    let token = message.split(' ').next().unwrap_or("");
    let root = token.split('.').next().unwrap_or("");
    if !ENVELOPE_KEYS.contains(&root) {
        return path.to_string();
    }
    let rest = &token[root.len()..];
    match from_options.iter().find(|(t, _)| *t == root) {
        Some((_, option)) => format!("{path}.options.{option}{rest}"),
        None => format!("{path}.{token}"),
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
