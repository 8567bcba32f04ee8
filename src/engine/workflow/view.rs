//! What a workflow looks like from outside: the JSON of WORKFLOW GET / `GET
//! /ojs/v1/workflows/:id` (ojs-workflows §11.2, error report §9.6) and the data of the
//! workflow events (ojs-events §4.4, ojs-workflows Appendix B).

use super::state::{Effect, NodeKind, NodeState, Workflow};
use crate::events::EventKind;
use crate::job::{format_ts, State};
use crate::workflow::Kind;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

/// The live side of a started job, read from the job itself.
pub struct Live {
    pub state: State,
    pub attempt: u32,
    pub started_at: Option<DateTime<Utc>>,
}

fn ts(t: Option<DateTime<Utc>>) -> Option<String> {
    t.map(format_ts)
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<impl Into<Value>>) {
    if let Some(v) = v {
        m.insert(key.into(), v.into());
    }
}

fn ms_between(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> i64 {
    match (a, b) {
        (Some(a), Some(b)) => (b - a).num_milliseconds().max(0),
        _ => 0,
    }
}

impl Workflow {
    fn failed(&self, n: u32) -> bool {
        matches!(
            self.nodes[n as usize].state,
            NodeState::Failed | NodeState::Cancelled
        )
    }

    /// The job whose failure failed node `n`: a chain's failed step, a group's first failed
    /// job, a batch's failed callback, followed down to a job.
    fn cause(&self, n: u32) -> u32 {
        let node = &self.nodes[n as usize];
        let next = match node.kind {
            NodeKind::Job => return n,
            NodeKind::Batch => node.callbacks.iter().find(|c| self.failed(**c)),
            // Not a step cancelled because what it depends on failed: the failed one.
            NodeKind::Dag => node
                .children
                .iter()
                .find(|c| self.failed(**c) && self.nodes[**c as usize].error.is_some()),
            _ => node.children.iter().find(|c| self.failed(**c)),
        };
        next.map_or(n, |c| self.cause(*c))
    }

    /// An event about this workflow: its id, name and type, plus `extra`.
    pub(in crate::engine) fn event(&self, kind: EventKind, extra: Value) -> Effect {
        let h = &self.header;
        let mut data = Map::new();
        data.insert("workflow_id".into(), json!(h.id));
        data.insert(
            "workflow_name".into(),
            json!(h.name.as_deref().unwrap_or(&h.id)),
        );
        data.insert("workflow_type".into(), json!(h.kind.as_str()));
        if let Value::Object(m) = extra {
            data.extend(m);
        }
        Effect::Event {
            kind,
            data: Value::Object(data),
        }
    }

    /// A step of a chain, or a job/callback of a group or batch, finished.
    pub(in crate::engine) fn child_event(&self, n: u32, p: u32, now: DateTime<Utc>) -> Effect {
        let node = &self.nodes[n as usize];
        let parent = &self.nodes[p as usize];
        let ok = node.state == NodeState::Completed;
        let step_type = node
            .job_type
            .clone()
            .unwrap_or_else(|| node.kind.as_str().to_string());
        let start = if node.is_job() {
            node.started_at
        } else {
            node.enqueued_at
        };
        let mut data = Map::new();
        data.insert("step_id".into(), json!(node.path));
        data.insert("step_type".into(), json!(step_type));
        data.insert("job_id".into(), json!(node.job_id));
        data.insert("duration_ms".into(), json!(ms_between(start, Some(now))));
        put(&mut data, "error", node.error.clone());
        let kind = if matches!(parent.kind, NodeKind::Chain | NodeKind::Dag) {
            let left = if parent.kind == NodeKind::Chain {
                parent.children.len() as i64 - i64::from(node.index) - 1
            } else {
                // A DAG's steps not finished yet (waiting or running).
                let open = parent.children.iter();
                open.filter(|c| !self.nodes[**c as usize].state.is_finished())
                    .count() as i64
            };
            data.insert("step_index".into(), json!(node.index));
            data.insert("steps_remaining".into(), json!(left.max(0)));
            data.insert("remaining_steps".into(), json!(left.max(0)));
            if ok {
                EventKind::WorkflowStepCompleted
            } else {
                EventKind::WorkflowStepFailed
            }
        } else {
            match node.role {
                Some(r) => data.insert("callback".into(), json!(r.as_str())),
                None => data.insert("job_index".into(), json!(node.index)),
            };
            if ok {
                EventKind::WorkflowJobCompleted
            } else {
                EventKind::WorkflowJobFailed
            }
        };
        self.event(kind, Value::Object(data))
    }

    pub(in crate::engine) fn completed_event(&self, now: DateTime<Utc>) -> Effect {
        let h = &self.header;
        let total = self.nodes.first().map_or(0, |r| r.children.len());
        let data = json!({"total_steps": total,
            "duration_ms": ms_between(Some(h.created_at), Some(now)),
            "job_count": h.job_count, "completed_count": h.completed_count,
            "failed_count": h.failed_count});
        self.event(EventKind::WorkflowCompleted, data)
    }

    pub(in crate::engine) fn failed_event(&self) -> Effect {
        let c = &self.nodes[self.cause(0) as usize];
        let error = c.error.clone().unwrap_or(Value::Null);
        let data = json!({"failed_step_id": c.path, "failed_step_type": c.job_type,
            "job_id": c.job_id,
            "error": {"code": error.get("code").cloned().unwrap_or(json!("error")),
                      "message": error.get("message").cloned().unwrap_or(json!(""))},
            "failed_count": self.header.failed_count});
        self.event(EventKind::WorkflowFailed, data)
    }

    /// The full state: per-step/per-job states, results and errors, and the metadata.
    pub fn view(&self, live: &dyn Fn(&str) -> Option<Live>) -> Value {
        let h = &self.header;
        let mut w = Map::new();
        w.insert("id".into(), json!(h.id));
        w.insert("type".into(), json!(h.kind.as_str()));
        put(&mut w, "name", h.name.clone());
        w.insert("state".into(), json!(h.state.as_str()));
        if h.kind == Kind::Dag {
            // The HTTP binding's §14 shape has the creation time at the top.
            w.insert("created_at".into(), json!(format_ts(h.created_at)));
        }
        self.children_view(0, &mut w, live);
        let mut meta = Map::new();
        meta.insert("created_at".into(), json!(format_ts(h.created_at)));
        put(&mut meta, "started_at", ts(h.started_at));
        put(&mut meta, "completed_at", ts(h.completed_at));
        put(&mut meta, "cancelled_at", ts(h.cancelled_at));
        meta.insert("job_count".into(), json!(h.job_count));
        meta.insert("completed_count".into(), json!(h.completed_count));
        meta.insert("failed_count".into(), json!(h.failed_count));
        if h.callback_count > 0 {
            meta.insert("callback_count".into(), json!(h.callback_count));
        }
        put(&mut meta, "error", self.error_report());
        w.insert("metadata".into(), Value::Object(meta));
        Value::Object(w)
    }

    /// §9.6: failed job ids and their errors, and for a chain the failed step.
    fn error_report(&self) -> Option<Value> {
        let mut ids = Vec::new();
        let mut errors = Vec::new();
        for n in &self.nodes {
            let (true, true, Some(err)) = (n.is_job(), self.failed_state(n.state), &n.error) else {
                continue;
            };
            ids.push(json!(n.job_id));
            let mut e = Map::new();
            e.insert("job_id".into(), json!(n.job_id));
            if let Value::Object(m) = err {
                e.extend(m.clone());
            }
            e.insert("step_id".into(), json!(n.path));
            put(&mut e, "callback", n.role.map(|r| r.as_str()));
            errors.push(Value::Object(e));
        }
        if errors.is_empty() {
            return None;
        }
        let mut r = Map::new();
        if self.header.kind == Kind::Chain {
            let root = self.nodes.first()?;
            let failed = root.children.iter().position(|c| self.failed(*c));
            put(&mut r, "failed_step_index", failed);
        }
        r.insert("failed_job_ids".into(), Value::Array(ids));
        r.insert("errors".into(), Value::Array(errors));
        Some(Value::Object(r))
    }

    fn failed_state(&self, s: NodeState) -> bool {
        matches!(s, NodeState::Failed | NodeState::Cancelled)
    }

    fn children_view(
        &self,
        n: u32,
        into: &mut Map<String, Value>,
        live: &dyn Fn(&str) -> Option<Live>,
    ) {
        let node = &self.nodes[n as usize];
        let field = match node.kind {
            NodeKind::Chain | NodeKind::Dag => "steps",
            _ => "jobs",
        };
        let children: Vec<Value> = node
            .children
            .iter()
            .map(|c| self.node_view(*c, live))
            .collect();
        into.insert(field.into(), Value::Array(children));
        if node.kind == NodeKind::Batch {
            let mut cbs = Map::new();
            for c in &node.callbacks {
                if let Some(role) = self.nodes[*c as usize].role {
                    cbs.insert(role.as_str().into(), self.node_view(*c, live));
                }
            }
            into.insert("callbacks".into(), Value::Object(cbs));
        }
    }

    fn node_view(&self, n: u32, live: &dyn Fn(&str) -> Option<Live>) -> Value {
        let node = &self.nodes[n as usize];
        let mut v = Map::new();
        match node.role {
            Some(r) => v.insert("callback".into(), json!(r.as_str())),
            None => v.insert("index".into(), json!(node.index)),
        };
        v.insert("path".into(), json!(node.path));
        let in_dag = node
            .parent
            .is_some_and(|p| self.nodes[p as usize].kind == NodeKind::Dag);
        if in_dag {
            let deps: Vec<Value> = node
                .deps
                .iter()
                .map(|d| json!(self.nodes[*d as usize].id))
                .collect();
            v.insert("id".into(), json!(node.id));
            v.insert("depends_on".into(), Value::Array(deps));
        }
        if !node.is_job() {
            v.insert("type".into(), json!(node.kind.as_str()));
            put(&mut v, "id", node.id.clone());
            put(&mut v, "name", node.name.clone());
            let state = match node.state {
                NodeState::Pending => "running",
                s => state_name(s),
            };
            v.insert("state".into(), json!(state));
            put(&mut v, "started_at", ts(node.enqueued_at));
            put(&mut v, "completed_at", ts(node.completed_at));
            self.children_view(n, &mut v, live);
            return Value::Object(v);
        }
        v.insert("type".into(), json!(node.job_type));
        let now = match (node.state, node.job_id.as_deref()) {
            (NodeState::Pending, Some(id)) => live(id),
            _ => None,
        };
        let state = match (&now, node.state) {
            (Some(l), NodeState::Pending) if l.state == State::Active => "active",
            (_, s) => state_name(s),
        };
        v.insert("state".into(), json!(state));
        v.insert("job_id".into(), json!(node.job_id));
        put(&mut v, "job_state", now.as_ref().map(|l| l.state.as_str()));
        let attempt = now.as_ref().map(|l| l.attempt).or(node.attempt);
        put(&mut v, "attempt", attempt.filter(|a| *a > 0));
        if node.state == NodeState::Completed {
            v.insert("result".into(), node.result.clone().unwrap_or(Value::Null));
        }
        put(&mut v, "error", node.error.clone());
        put(&mut v, "enqueued_at", ts(node.enqueued_at));
        let started = now.as_ref().and_then(|l| l.started_at).or(node.started_at);
        put(&mut v, "started_at", ts(started));
        put(&mut v, "completed_at", ts(node.completed_at));
        Value::Object(v)
    }
}

fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Waiting => "waiting",
        NodeState::Pending => "pending",
        NodeState::Completed => "completed",
        NodeState::Failed => "failed",
        NodeState::Cancelled => "cancelled",
        NodeState::Skipped => "skipped",
    }
}
