//! The state of one running workflow and its transitions (ojs-workflows §4-§9), free of
//! the engine: operations return `Effect`s (jobs to enqueue, events to emit) that the
//! engine applies in the same batch. The definition tree is kept as a flat arena of nodes,
//! node 0 being the workflow itself; every node is its own store record, so a transition
//! rewrites only the few nodes it touched (`take_dirty`).

pub use super::records::{
    Cancellation, Effect, Header, Node, NodeKind, NodeState, Outcome, Settle, WfState,
};
use crate::events::EventKind;
use crate::job::validate::NewJob;
use crate::workflow::{Def, Definition, Flow, JobDef, Role};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
pub struct Workflow {
    pub header: Header,
    pub nodes: Vec<Node>,
    dirty_header: bool,
    dirty: BTreeSet<u32>,
}

fn child_path(parent: &str, part: &str) -> String {
    if parent.is_empty() {
        part.to_string()
    } else {
        format!("{parent}.{part}")
    }
}

impl Workflow {
    /// A new workflow in `pending`, every node `waiting`; `start` enqueues the first jobs.
    pub fn new(id: String, def: Definition, now: DateTime<Utc>) -> Workflow {
        let header = Header {
            id,
            kind: def.root.kind,
            name: def.root.name.clone(),
            state: WfState::Pending,
            created_at: now,
            started_at: None,
            completed_at: None,
            cancelled_at: None,
            job_count: def.job_count as u32,
            callback_count: def.callback_count as u32,
            completed_count: 0,
            failed_count: 0,
            nodes: 0,
        };
        let mut wf = Workflow {
            header,
            nodes: Vec::new(),
            dirty_header: true,
            dirty: BTreeSet::new(),
        };
        wf.add_flow(def.root, String::new(), None, 0);
        wf.header.nodes = wf.nodes.len() as u32;
        wf.dirty = (0..wf.header.nodes).collect();
        wf
    }

    /// Rebuilt from stored records; `None` unless they form a consistent tree, so that no
    /// later index into `nodes` can go out of bounds.
    pub fn restore(header: Header, nodes: Vec<Node>) -> Option<Workflow> {
        let n = nodes.len();
        let root = nodes.first()?;
        if n != header.nodes as usize || root.parent.is_some() || root.is_job() {
            return None;
        }
        for (i, node) in nodes.iter().enumerate() {
            let kids: Vec<u32> = node
                .children
                .iter()
                .chain(&node.callbacks)
                .copied()
                .collect();
            let linked = kids.iter().all(|c| {
                (1..n).contains(&(*c as usize)) && nodes[*c as usize].parent == Some(i as u32)
            });
            // Nodes are stored in pre-order, so a parent always comes first: no cycles.
            let placed = match (node.parent, node.role) {
                (None, _) => i == 0,
                (Some(p), _) if p as usize >= i => false,
                (Some(p), None) => nodes
                    .get(p as usize)
                    .is_some_and(|p| p.children.get(node.index as usize) == Some(&(i as u32))),
                (Some(p), Some(_)) => nodes
                    .get(p as usize)
                    .is_some_and(|p| p.callbacks.contains(&(i as u32))),
            };
            let shaped = node.is_job() == kids.is_empty();
            // A DAG step waits only for other steps of its own DAG.
            let deps_ok = node.deps.iter().all(|d| {
                *d as usize != i
                    && nodes
                        .get(*d as usize)
                        .is_some_and(|s| s.parent.is_some() && s.parent == node.parent)
            }) && (node.deps.is_empty()
                || node
                    .parent
                    .is_some_and(|p| nodes[p as usize].kind == NodeKind::Dag));
            if !(linked && placed && shaped && deps_ok) {
                return None;
            }
        }
        Some(Workflow {
            header,
            nodes,
            dirty_header: false,
            dirty: BTreeSet::new(),
        })
    }

    fn push(&mut self, node: Node) -> u32 {
        self.nodes.push(node);
        (self.nodes.len() - 1) as u32
    }

    fn add_flow(&mut self, f: Flow, path: String, parent: Option<u32>, index: u32) -> u32 {
        let mut node = Node::new(f.kind.into(), path.clone(), parent, index);
        node.id = f.id;
        node.name = f.name;
        let me = self.push(node);
        for (i, child) in f.children.into_iter().enumerate() {
            // A DAG step is known by its id: its path (`workflow_step`) is that id.
            let part = f.dag.get(i).map_or_else(|| i.to_string(), |s| s.id.clone());
            let p = child_path(&path, &part);
            let c = match child {
                Def::Job(j) => self.add_job(j, p, me, i as u32, None),
                Def::Flow(sub) => self.add_flow(sub, p, Some(me), i as u32),
            };
            self.nodes[me as usize].children.push(c);
        }
        for (role, j) in f.callbacks {
            let p = child_path(&path, role.as_str());
            let c = self.add_job(j, p, me, 0, Some(role));
            self.nodes[me as usize].callbacks.push(c);
        }
        let kids = self.nodes[me as usize].children.clone();
        for (step, &c) in f.dag.into_iter().zip(&kids) {
            let node = &mut self.nodes[c as usize];
            node.id = Some(step.id);
            node.deps = step.depends_on.iter().map(|d| kids[*d as usize]).collect();
        }
        me
    }

    fn add_job(
        &mut self,
        j: JobDef,
        path: String,
        parent: u32,
        index: u32,
        role: Option<Role>,
    ) -> u32 {
        let mut node = Node::new(NodeKind::Job, path, Some(parent), index);
        node.role = role;
        node.job_type = Some(j.job_type);
        node.template = Some(*j.template);
        self.push(node)
    }

    fn node(&mut self, n: u32) -> &mut Node {
        self.dirty.insert(n);
        &mut self.nodes[n as usize]
    }

    /// The records changed since the last call: whether the header was, and which nodes.
    pub fn take_dirty(&mut self) -> (bool, Vec<u32>) {
        let nodes = std::mem::take(&mut self.dirty).into_iter().collect();
        (std::mem::take(&mut self.dirty_header), nodes)
    }

    /// `workflow.created`, then the first jobs: step 0 of a chain, every job of a group or
    /// batch (§4.3, §5.3, §6.4).
    pub fn start(&mut self, now: DateTime<Utc>) -> Vec<Effect> {
        let mut out = vec![self.event(EventKind::WorkflowCreated, json!({}))];
        self.activate(0, Map::new(), now, &mut out);
        out
    }

    fn activate(
        &mut self,
        n: u32,
        incoming: Map<String, Value>,
        now: DateTime<Utc>,
        out: &mut Vec<Effect>,
    ) {
        let node = self.node(n);
        node.state = NodeState::Pending;
        node.enqueued_at = Some(now);
        let kind = node.kind;
        let children = node.children.clone();
        match kind {
            NodeKind::Job => out.push(Effect::Enqueue {
                node: n,
                parent_results: incoming,
            }),
            NodeKind::Chain => {
                if let Some(&first) = children.first() {
                    self.activate(first, incoming, now, out);
                }
            }
            NodeKind::Group | NodeKind::Batch => {
                for c in children {
                    self.activate(c, incoming.clone(), now, out);
                }
            }
            // The steps that depend on nothing; the rest when their dependencies are done.
            NodeKind::Dag => {
                for c in children {
                    if self.nodes[c as usize].deps.is_empty() {
                        self.activate(c, incoming.clone(), now, out);
                    }
                }
            }
        }
    }

    /// Node `n`'s job was created. Returns `workflow.callback_fired` for a callback.
    pub fn enqueued(&mut self, n: u32, job_id: String) -> Option<Effect> {
        let node = self.node(n);
        node.template = None;
        node.job_id = Some(job_id.clone());
        let role = node.role?;
        let (path, job_type) = (node.path.clone(), node.job_type.clone());
        let data = json!({"callback": role.as_str(), "step_id": path,
            "job_id": job_id, "job_type": job_type});
        Some(self.event(EventKind::WorkflowCallbackFired, data))
    }

    /// One of the workflow's jobs was fetched: the first one starts the workflow (§8.2).
    pub fn job_started(&mut self, now: DateTime<Utc>) -> Option<Effect> {
        if self.header.state != WfState::Pending {
            return None;
        }
        self.header.state = WfState::Running;
        self.header.started_at = Some(now);
        self.dirty_header = true;
        let total = self.nodes.first().map_or(0, |r| r.children.len());
        let data = json!({"total_steps": total, "job_count": self.header.job_count});
        Some(self.event(EventKind::WorkflowStarted, data))
    }

    /// Node `n`'s job reached a terminal state. Ignored unless the node was waiting for it
    /// (a dead-letter retry of an already counted job changes nothing).
    pub fn leaf_settled(&mut self, n: u32, s: Settle, now: DateTime<Utc>) -> Vec<Effect> {
        let mut out = Vec::new();
        let Some(node) = self.nodes.get(n as usize) else {
            return out;
        };
        if !node.is_job() || node.state != NodeState::Pending {
            return out;
        }
        let live = !self.header.state.is_terminal();
        let counted = node.role.is_none();
        let node = self.node(n);
        node.attempt = Some(s.attempt);
        node.started_at = s.started_at;
        node.completed_at = Some(now);
        let (state, failed) = match s.outcome {
            Outcome::Completed(result) => {
                node.result = result;
                (NodeState::Completed, false)
            }
            Outcome::Failed(error) => {
                node.error = Some(error);
                (NodeState::Failed, true)
            }
            // A job cancelled on its own while the workflow runs fails its workflow; one
            // cancelled by WORKFLOW CANCEL is simply cancelled.
            Outcome::Cancelled if live => {
                node.error = Some(json!({"code": "cancelled", "attempt": s.attempt,
                    "message": "the job was cancelled while its workflow was running"}));
                (NodeState::Cancelled, true)
            }
            Outcome::Cancelled => (NodeState::Cancelled, false),
        };
        node.state = state;
        if counted && (state == NodeState::Completed || failed) {
            if failed {
                self.header.failed_count += 1;
            } else {
                self.header.completed_count += 1;
            }
            self.dirty_header = true;
        }
        if live {
            self.finished(n, now, &mut out);
        }
        out
    }

    /// Node `n` just finished (completed, failed or cancelled): tell its parent (§4.3,
    /// §5.3, §6.4, §10.4 — a nested workflow's outcome is its step's outcome).
    fn finished(&mut self, n: u32, now: DateTime<Utc>, out: &mut Vec<Effect>) {
        let node = &self.nodes[n as usize];
        let ok = node.state == NodeState::Completed;
        let Some(p) = node.parent else {
            return self.conclude(ok, now, out);
        };
        let (index, role) = (node.index, node.role);
        out.push(self.child_event(n, p, now));
        let parent = &self.nodes[p as usize];
        let kind = parent.kind;
        match kind {
            NodeKind::Chain => {
                let rest = parent.children.get(index as usize + 1..).unwrap_or(&[]);
                let (next, later) = (rest.first().copied(), rest.to_vec());
                match (ok, next) {
                    (true, Some(next)) => {
                        let results = self.results_of(p, index + 1);
                        self.activate(next, results, now, out);
                    }
                    (true, None) => self.close(p, true, now, out),
                    (false, _) => {
                        for l in later {
                            self.cancel_waiting(l);
                        }
                        self.close(p, false, now, out);
                    }
                }
            }
            NodeKind::Group | NodeKind::Batch if role.is_none() => {
                let total = parent.children.len() as u32;
                let node = self.node(p);
                node.done += 1;
                node.failed += u32::from(!ok);
                if node.done < total {
                    return;
                }
                let any_failed = node.failed > 0;
                if kind == NodeKind::Group {
                    return self.close(p, !any_failed, now, out);
                }
                let results = self.results_of(p, total);
                let mut fired = false;
                for cb in self.nodes[p as usize].callbacks.clone() {
                    let fires = self.nodes[cb as usize]
                        .role
                        .is_some_and(|r| r.fires(any_failed));
                    if fires {
                        fired = true;
                        self.activate(cb, results.clone(), now, out);
                    } else {
                        self.node(cb).state = NodeState::Skipped;
                    }
                }
                // With no callback selected there is nothing left to wait for (§8.3).
                if !fired {
                    self.close(p, true, now, out);
                }
            }
            NodeKind::Dag => self.dag_step_finished(n, p, ok, now, out),
            NodeKind::Group | NodeKind::Batch => {
                // A callback: the batch ends when every fired callback has (§6.4 rule 7).
                let cbs = &self.nodes[p as usize].callbacks;
                let states: Vec<NodeState> =
                    cbs.iter().map(|c| self.nodes[*c as usize].state).collect();
                if states.iter().all(|s| s.is_finished()) {
                    let ok = !states
                        .iter()
                        .any(|s| matches!(s, NodeState::Failed | NodeState::Cancelled));
                    self.close(p, ok, now, out);
                }
            }
            NodeKind::Job => {}
        }
    }

    /// A step of DAG `p` finished: the steps now ready are enqueued, with their
    /// dependencies' results keyed by step id; if it failed, every step depending on it
    /// (directly or not) is cancelled unstarted while other branches go on. The DAG ends
    /// once no step is waiting or running: `failed` if any step failed, else `completed`.
    fn dag_step_finished(
        &mut self,
        n: u32,
        p: u32,
        ok: bool,
        now: DateTime<Utc>,
        out: &mut Vec<Effect>,
    ) {
        let node = self.node(p);
        node.done += 1;
        node.failed += u32::from(!ok);
        let steps = node.children.clone();
        if ok {
            for s in steps.iter().copied() {
                let step = &self.nodes[s as usize];
                let ready = step.state == NodeState::Waiting
                    && step.deps.contains(&n)
                    && step
                        .deps
                        .iter()
                        .all(|d| self.nodes[*d as usize].state == NodeState::Completed);
                if ready {
                    let results = self.dag_results(s);
                    self.activate(s, results, now, out);
                }
            }
        } else {
            let mut doomed = vec![n];
            while let Some(f) = doomed.pop() {
                for s in steps.iter().copied() {
                    let step = &self.nodes[s as usize];
                    if step.state == NodeState::Waiting && step.deps.contains(&f) {
                        self.cancel_waiting(s);
                        doomed.push(s);
                    }
                }
            }
        }
        let open = steps
            .iter()
            .any(|s| !self.nodes[*s as usize].state.is_finished());
        if !open {
            let ok = self.nodes[p as usize].failed == 0;
            self.close(p, ok, now, out);
        }
    }

    /// A DAG step's `parent_results`: each dependency's result, keyed by its step id.
    fn dag_results(&self, s: u32) -> Map<String, Value> {
        let mut m = Map::new();
        for d in &self.nodes[s as usize].deps {
            let dep = &self.nodes[*d as usize];
            let key = dep.id.clone().unwrap_or_else(|| dep.index.to_string());
            m.insert(key, self.outcome_value(*d));
        }
        m
    }

    /// A nested workflow (or the whole one) is done.
    fn close(&mut self, n: u32, ok: bool, now: DateTime<Utc>, out: &mut Vec<Effect>) {
        let node = self.node(n);
        node.state = if ok {
            NodeState::Completed
        } else {
            NodeState::Failed
        };
        node.completed_at = Some(now);
        self.finished(n, now, out);
    }

    fn conclude(&mut self, ok: bool, now: DateTime<Utc>, out: &mut Vec<Effect>) {
        self.header.state = if ok {
            WfState::Completed
        } else {
            WfState::Failed
        };
        self.header.completed_at = Some(now);
        self.dirty_header = true;
        let ev = if ok {
            self.completed_event(now)
        } else {
            self.failed_event()
        };
        out.push(ev);
    }

    /// A chain stopped before reaching `n`: it and everything under it never run (§9.2).
    fn cancel_waiting(&mut self, n: u32) {
        let node = &self.nodes[n as usize];
        if node.state != NodeState::Waiting {
            return;
        }
        let below: Vec<u32> = node
            .children
            .iter()
            .chain(&node.callbacks)
            .copied()
            .collect();
        self.node(n).state = NodeState::Cancelled;
        for c in below {
            self.cancel_waiting(c);
        }
    }

    /// The `parent_results` a node passes on: its children `0..upto` that finished, keyed
    /// by index (§7.2-§7.4; a DAG's by step id).
    pub fn results_of(&self, n: u32, upto: u32) -> Map<String, Value> {
        let mut m = Map::new();
        let node = &self.nodes[n as usize];
        for (i, c) in node.children.iter().take(upto as usize).enumerate() {
            let child = &self.nodes[*c as usize];
            if child.state.is_finished() && child.state != NodeState::Skipped {
                let key = match (node.kind, &child.id) {
                    (NodeKind::Dag, Some(id)) => id.clone(),
                    _ => i.to_string(),
                };
                m.insert(key, self.outcome_value(*c));
            }
        }
        m
    }

    /// What a finished node contributes to `parent_results`: a job's result (`null` if it
    /// gave none) or `{"error": ...}` if it failed; a nested workflow's children by index.
    pub fn outcome_value(&self, n: u32) -> Value {
        let node = &self.nodes[n as usize];
        match (node.kind, node.state) {
            (NodeKind::Job, NodeState::Completed) => node.result.clone().unwrap_or(Value::Null),
            (NodeKind::Job, NodeState::Failed | NodeState::Cancelled) => {
                json!({"error": node.error.clone().unwrap_or(Value::Null)})
            }
            (NodeKind::Job, _) => Value::Null,
            _ => Value::Object(self.results_of(n, node.children.len() as u32)),
        }
    }

    /// WORKFLOW CANCEL (§11.3): every node not started is cancelled; the jobs of started
    /// nodes are returned for the caller to cancel, except those `running(job_id)` says are
    /// executing, which may finish. Refused (with the state) once the workflow is terminal.
    pub fn cancel(
        &mut self,
        now: DateTime<Utc>,
        running: impl Fn(&str) -> bool,
    ) -> Result<Cancellation, WfState> {
        if self.header.state.is_terminal() {
            return Err(self.header.state);
        }
        self.header.state = WfState::Cancelled;
        self.header.cancelled_at = Some(now);
        self.header.completed_at = Some(now);
        self.dirty_header = true;
        let mut jobs = Vec::new();
        for n in 0..self.nodes.len() as u32 {
            let node = &self.nodes[n as usize];
            match (node.kind, node.state, node.job_id.clone()) {
                (_, NodeState::Waiting, _) => {
                    let node = self.node(n);
                    node.state = NodeState::Cancelled;
                    node.template = None;
                }
                (NodeKind::Job, NodeState::Pending, Some(id)) if !running(&id) => {
                    jobs.push((n, id))
                }
                (NodeKind::Job, _, _) => {}
                (_, NodeState::Pending, _) => self.node(n).state = NodeState::Cancelled,
                _ => {}
            }
        }
        let data = json!({"completed_count": self.header.completed_count,
            "failed_count": self.header.failed_count, "jobs_cancelled": jobs.len()});
        Ok((vec![self.event(EventKind::WorkflowCancelled, data)], jobs))
    }

    /// A started job that could not be cancelled because it no longer exists.
    pub fn force_cancel(&mut self, n: u32, now: DateTime<Utc>) {
        let node = self.node(n);
        if node.state == NodeState::Pending {
            node.state = NodeState::Cancelled;
            node.completed_at = Some(now);
        }
    }

    /// The partition node `n`'s job was enqueued in, when not this workflow's.
    pub fn node_part(&self, n: u32) -> Option<u32> {
        self.nodes.get(n as usize)?.part
    }

    /// Node `n`'s job was enqueued in partition `part` (not this workflow's).
    pub fn set_part(&mut self, n: u32, part: u32) {
        self.node(n).part = Some(part);
    }

    /// Jobs the workflow is waiting on, with their nodes.
    pub fn pending_jobs(&self) -> impl Iterator<Item = (u32, &str)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match (n.kind, n.state) {
                (NodeKind::Job, NodeState::Pending) => n.job_id.as_deref().map(|id| (i as u32, id)),
                _ => None,
            })
    }

    /// The job to create for node `n`: its template plus the workflow attributes, with its
    /// nesting depth and its encoded size counting `parent_results`, so a step that would
    /// carry more than the job size limit of earlier results is refused (and its node
    /// fails) like any oversized job, instead of being stored without a bound.
    pub fn instance(
        &self,
        n: u32,
        parent_results: Map<String, Value>,
    ) -> Option<(NewJob, usize, usize)> {
        let template = self.nodes.get(n as usize)?.template.as_ref()?;
        let node = &self.nodes[n as usize];
        let results = Value::Object(parent_results);
        let results_len = serde_json::to_vec(&results).map_or(usize::MAX, |b| b.len());
        let depth = template.depth().max(1 + crate::json::depth(&results));
        let mut new = template.instantiate(Utc::now());
        let extra = &mut new.job.extra;
        extra.insert("workflow_id".into(), json!(self.header.id));
        extra.insert("workflow_step".into(), json!(node.path));
        extra.insert("parent_results".into(), results);
        // The three attributes' names and punctuation, beside the values.
        let added = 64 + self.header.id.len() + node.path.len() + results_len;
        Some((new, template.len().saturating_add(added), depth))
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
