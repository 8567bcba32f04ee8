//! Workflows in the engine (ojs-workflows): WORKFLOW CREATE/GET/CANCEL, and advancing a
//! workflow when one of its jobs finishes. Everything runs inside the engine batch of the
//! command or transition that caused it, so the workflow's records, the jobs it enqueues
//! and its events commit atomically with the ACK/FAIL that advanced it: a crash can never
//! leave a workflow stalled or fire a callback twice.
//!
//! Workflow jobs are ordinary jobs created through PUSH's path when their turn comes (a
//! chain's later steps and a batch's callbacks do not exist before that, so no worker can
//! fetch them early). Each carries `workflow_id`, `workflow_step` and `parent_results`.
//!
//! Store layout: `w/<workflow id>\0h` the header, `w/<workflow id>\0n<u32 BE>` each node.

pub mod outbox;
mod records;
mod state;
mod view;

use crate::engine::api::{Answer, WorkflowView};
use crate::engine::request::WorkflowCmd;
use crate::engine::txn::{Out, Txn};
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::Component;
use crate::job::{Job, State};
use crate::json::MAX_STORED_DEPTH;
use crate::store::{Batch, Space, StoreError};
use crate::workflow;
use serde_json::{json, Value};
use state::{Effect, Header, Node, Outcome, Settle, Workflow};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use uuid::Uuid;
use view::Live;

/// Ended workflows past retention deleted per WORKFLOW command.
const PRUNE_PER_CALL: usize = 100;

#[derive(Default)]
pub(in crate::engine) struct Workflows {
    map: HashMap<String, Workflow>,
    /// Enqueued, unfinished workflow jobs → their workflow and node.
    by_job: HashMap<Uuid, (String, u32)>,
    /// Ended workflows by end time (ms), for retention.
    ended: BTreeSet<(i64, String)>,
    /// Letters to other partitions, and the jobs run here for their workflows.
    outbox: outbox::Outbox,
}

enum Rec {
    Header,
    Node(u32),
}

fn key(id: &str, rec: Rec) -> Vec<u8> {
    let mut k = Vec::with_capacity(id.len() + 6);
    k.extend_from_slice(id.as_bytes());
    k.push(0);
    match rec {
        Rec::Header => k.push(b'h'),
        Rec::Node(n) => {
            k.push(b'n');
            k.extend_from_slice(&n.to_be_bytes());
        }
    }
    k
}

fn parse_key(k: &[u8]) -> Option<(String, Rec)> {
    let cut = k.iter().position(|b| *b == 0)?;
    let id = std::str::from_utf8(&k[..cut]).ok()?.to_string();
    match &k[cut + 1..] {
        [b'h'] => Some((id, Rec::Header)),
        [b'n', a, b, c, d] => Some((id, Rec::Node(u32::from_be_bytes([*a, *b, *c, *d])))),
        _ => None,
    }
}

/// Write the records a transition touched into this batch.
fn flush(batch: &mut Batch, wf: &mut Workflow) {
    let (header, nodes) = wf.take_dirty();
    let id = &wf.header.id;
    // Serializing these cannot fail: every map key is a string.
    if header {
        let v = serde_json::to_vec(&wf.header).unwrap_or_default();
        batch.put(Space::Workflow, &key(id, Rec::Header), v);
    }
    for n in nodes {
        if let Some(node) = wf.nodes.get(n as usize) {
            let v = serde_json::to_vec(node).unwrap_or_default();
            batch.put(Space::Workflow, &key(id, Rec::Node(n)), v);
        }
    }
}

fn not_found(id: &str) -> OjsError {
    let shown: String = id.chars().take(64).collect();
    OjsError::new(ErrorCode::NotFound, format!("workflow {shown} not found"))
}

/// How a finished job ended, for the workflow.
fn settle_of(job: &Job, state: State) -> Settle {
    let outcome = match state {
        State::Completed => Outcome::Completed(job.result.clone()),
        State::Cancelled => Outcome::Cancelled,
        _ => {
            let e = job.error.as_ref();
            let field = |k: &str| e.and_then(|e| e.get(k)).cloned();
            Outcome::Failed(json!({
                "code": field("type").unwrap_or(json!("error")),
                "message": field("message").unwrap_or(json!("")),
                "attempt": job.attempt,
            }))
        }
    };
    Settle {
        outcome,
        attempt: job.attempt,
        started_at: job.started_at,
    }
}

impl Engine {
    pub(in crate::engine) fn workflow_cmd(
        &mut self,
        txn: &mut Txn,
        cmd: WorkflowCmd,
    ) -> OjsResult<Out> {
        let cmd = match cmd {
            WorkflowCmd::Outbox { limit } => {
                let letters = self.outbox_take(txn, limit.clamp(1, outbox::TAKE_MAX));
                return Ok(Out::Answer(Ok(Answer::Letters(letters))));
            }
            WorkflowCmd::Delivered(seqs) => {
                self.outbox_delivered(txn, &seqs);
                return Ok(Out::Answer(Ok(Answer::Ok)));
            }
            WorkflowCmd::Deliver { letters, .. } => {
                self.outbox_deliver(txn, letters);
                return Ok(Out::Answer(Ok(Answer::Ok)));
            }
            cmd => {
                self.prune_workflows(txn);
                cmd
            }
        };
        let v = match cmd {
            WorkflowCmd::Outbox { .. }
            | WorkflowCmd::Delivered(_)
            | WorkflowCmd::Deliver { .. } => return Ok(Out::Answer(Ok(Answer::Ok))),
            WorkflowCmd::Create { definition } => self.workflow_create(txn, *definition)?,
            WorkflowCmd::Get(id) => {
                let wf = self.workflows.map.get(&id).ok_or_else(|| not_found(&id))?;
                self.workflow_json(txn, wf)
            }
            WorkflowCmd::Cancel(id) => self.workflow_cancel(txn, &id)?,
            WorkflowCmd::List {
                state,
                limit,
                offset,
            } => {
                return Ok(Out::Answer(Ok(self.workflow_list(
                    state.as_deref(),
                    limit,
                    offset,
                ))))
            }
        };
        let id = v["id"].as_str().unwrap_or_default().to_string();
        Ok(Out::Answer(Ok(Answer::Workflow(WorkflowView {
            id,
            doc: v,
        }))))
    }

    /// WORKFLOW LIST: newest first (by creation time, then id).
    fn workflow_list(&self, state: Option<&str>, limit: usize, offset: usize) -> Answer {
        let mut all: Vec<&Workflow> = self
            .workflows
            .map
            .values()
            .filter(|w| state.is_none_or(|s| w.header.state.as_str() == s))
            .collect();
        all.sort_by(|a, b| {
            (b.header.created_at, &b.header.id).cmp(&(a.header.created_at, &a.header.id))
        });
        let workflows = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|w| {
                let h = &w.header;
                crate::engine::api::WorkflowSummary {
                    id: h.id.clone(),
                    kind: h.kind.as_str(),
                    name: h.name.clone(),
                    state: h.state.as_str(),
                    created_at: crate::job::format_ts(h.created_at),
                    completed_at: h.completed_at.map(crate::job::format_ts),
                    job_count: h.job_count,
                    completed_count: h.completed_count,
                    failed_count: h.failed_count,
                }
            })
            .collect();
        Answer::WorkflowPage(crate::engine::api::WorkflowPage {
            total: all.len(),
            workflows,
        })
    }

    /// Start a validated definition ([`Intake::workflow`](crate::engine::intake::Intake)).
    fn workflow_create(&mut self, txn: &mut Txn, def: workflow::Definition) -> OjsResult<Value> {
        let id = def
            .root
            .id
            .clone()
            .unwrap_or_else(|| Uuid::now_v7().hyphenated().to_string());
        if self.workflows.map.contains_key(&id) {
            return Err(OjsError::new(
                ErrorCode::DuplicateJob,
                format!("a workflow with id {id} already exists"),
            ));
        }
        let mut wf = Workflow::new(id.clone(), def, self.now);
        let effects = wf.start(self.now);
        self.run_effects(txn, &mut wf, effects);
        self.workflow_stored(txn, wf, false);
        let wf = self.workflows.map.get(&id).ok_or_else(|| not_found(&id))?;
        Ok(self.workflow_json(txn, wf))
    }

    /// Put a workflow (back) after a transition: write what changed, note its end.
    fn workflow_stored(&mut self, txn: &mut Txn, mut wf: Workflow, was_terminal: bool) {
        flush(&mut txn.batch, &mut wf);
        if !was_terminal && wf.header.state.is_terminal() {
            let at = wf
                .header
                .completed_at
                .unwrap_or(self.now)
                .timestamp_millis();
            self.workflows.ended.insert((at, wf.header.id.clone()));
        }
        self.workflows.map.insert(wf.header.id.clone(), wf);
    }

    /// The view, with the live state of the jobs still running.
    fn workflow_json(&self, txn: &Txn, wf: &Workflow) -> Value {
        let live = |job_id: &str| -> Option<Live> {
            let uid = Uuid::parse_str(job_id).ok()?;
            let state = self.index.jobs.get(&uid)?.state;
            let body = match state {
                State::Active | State::Retryable => {
                    txn.job(self.store.as_ref(), uid).ok().flatten()
                }
                _ => None,
            };
            Some(Live {
                state,
                attempt: body.as_ref().map_or(0, |j| j.attempt),
                started_at: body.and_then(|j| j.started_at),
            })
        };
        wf.view(&live)
    }

    /// §11.3: waiting and pending jobs are cancelled, active ones may finish.
    fn workflow_cancel(&mut self, txn: &mut Txn, id: &str) -> OjsResult<Value> {
        let mut wf = self.workflows.map.remove(id).ok_or_else(|| not_found(id))?;
        let index = &self.index;
        let running = |job: &str| {
            Uuid::parse_str(job)
                .ok()
                .and_then(|u| index.jobs.get(&u))
                .is_some_and(|e| e.state == State::Active)
        };
        let (effects, jobs) = match wf.cancel(self.now, running) {
            Ok(r) => r,
            Err(state) => {
                self.workflows.map.insert(id.to_string(), wf);
                return Err(OjsError::new(
                    ErrorCode::InvalidStateTransition,
                    format!(
                        "workflow {id} is already in terminal state '{}'",
                        state.as_str()
                    ),
                ));
            }
        };
        self.run_effects(txn, &mut wf, effects);
        self.workflow_stored(txn, wf, false);
        // Each cancellation comes back through `settled`, which records it on its node.
        for (n, job) in jobs {
            let elsewhere = self.workflows.map.get(id).and_then(|wf| wf.node_part(n));
            if let (Some(to), Ok(uid)) = (elsewhere, Uuid::parse_str(&job)) {
                // Its end comes back as a letter, which records it on its node.
                self.post(txn, to, outbox::Letter::Cancel { job: uid });
                continue;
            }
            let cancelled = self
                .job_info(&job)
                .and_then(|uid| self.cancel(txn, uid, None));
            if cancelled.is_err() {
                if let Ok(uid) = Uuid::parse_str(&job) {
                    self.workflows.by_job.remove(&uid);
                }
                if let Some(wf) = self.workflows.map.get_mut(id) {
                    wf.force_cancel(n, self.now);
                    flush(&mut txn.batch, wf);
                }
            }
        }
        let wf = self.workflows.map.get(id).ok_or_else(|| not_found(id))?;
        Ok(self.workflow_json(txn, wf))
    }

    /// Apply what a transition asked for: create jobs (a job that cannot be created fails
    /// its node, which may ask for more) and emit events, in order.
    fn run_effects(&mut self, txn: &mut Txn, wf: &mut Workflow, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            let more = match effect {
                Effect::Event { kind, data } => {
                    let subject = wf.header.id.clone();
                    self.emit_plain(txn, kind, Component::Api, &subject, data);
                    continue;
                }
                Effect::Enqueue {
                    node,
                    parent_results,
                } => {
                    let pushed = match wf.instance(node, parent_results) {
                        // A composed step can be deeper than any client document (which
                        // the command layer bounds); past this it could be stored but not
                        // read back, so the node fails instead.
                        Some((_, _, depth)) if depth > MAX_STORED_DEPTH => Err(OjsError::new(
                            ErrorCode::InvalidPayload,
                            format!("job is nested deeper than {MAX_STORED_DEPTH} levels"),
                        )),
                        Some((new, len, _)) => match self.cfg.partition.elsewhere(&new.job.queue) {
                            Some(to) => {
                                let id = wf.header.id.clone();
                                let r = self.enqueue_elsewhere(txn, &id, node, to, new, len);
                                if r.is_ok() {
                                    wf.set_part(node, to);
                                }
                                r
                            }
                            None => self.push_typed(txn, new, len),
                        },
                        None => Err(OjsError::new(
                            ErrorCode::BackendError,
                            "the job's template is missing",
                        )),
                    };
                    match pushed {
                        Ok(uid) => {
                            let at = (wf.header.id.clone(), node);
                            self.workflows.by_job.insert(uid, at);
                            let id = uid.hyphenated().to_string();
                            wf.enqueued(node, id).into_iter().collect()
                        }
                        Err(e) => {
                            tracing::warn!(workflow = %wf.header.id, node, error = %e,
                                "a workflow job could not be enqueued");
                            let error = json!({"code": e.code.as_str(),
                                "message": e.message, "attempt": 0});
                            let s = Settle {
                                outcome: Outcome::Failed(error),
                                attempt: 0,
                                started_at: None,
                            };
                            wf.leaf_settled(node, s, self.now)
                        }
                    }
                }
            };
            for e in more.into_iter().rev() {
                queue.push_front(e);
            }
        }
    }

    /// Whether `uid` belongs to a workflow that was cancelled.
    pub(in crate::engine) fn workflow_cancelled_for(&self, uid: Uuid) -> bool {
        self.workflows
            .by_job
            .get(&uid)
            .and_then(|(id, _)| self.workflows.map.get(id))
            .is_some_and(|wf| wf.header.state == records::WfState::Cancelled)
    }

    /// A workflow job reached a terminal state (from the `settled` hook).
    pub(in crate::engine) fn workflow_job_settled(
        &mut self,
        txn: &mut Txn,
        uid: Uuid,
        state: State,
    ) {
        if !self.workflows.by_job.contains_key(&uid) {
            self.remote_settled(txn, uid, state);
            return;
        }
        let settle = self.settle_of_job(txn, uid, state);
        self.workflow_node_settled(txn, uid, settle);
    }

    /// How job `uid` ended, for its workflow.
    fn settle_of_job(&self, txn: &Txn, uid: Uuid, state: State) -> Settle {
        match txn.job(self.store.as_ref(), uid) {
            Ok(Some(job)) => settle_of(&job, state),
            _ => Settle {
                outcome: Outcome::Failed(json!({"code": "deleted", "attempt": 0,
                    "message": "the job was deleted before it finished"})),
                attempt: 0,
                started_at: None,
            },
        }
    }

    /// Node of job `uid` (here, or in another partition) ended as `settle`.
    fn workflow_node_settled(&mut self, txn: &mut Txn, uid: Uuid, settle: Settle) {
        let Some((id, n)) = self.workflows.by_job.remove(&uid) else {
            return;
        };
        let Some(mut wf) = self.workflows.map.remove(&id) else {
            return;
        };
        let was_terminal = wf.header.state.is_terminal();
        let effects = wf.leaf_settled(n, settle, self.now);
        self.run_effects(txn, &mut wf, effects);
        self.workflow_stored(txn, wf, was_terminal);
    }

    /// A workflow job was deleted before it finished (QUEUE PURGE): a failure for its
    /// workflow, which would otherwise wait for it forever.
    pub(in crate::engine) fn workflow_job_deleted(&mut self, txn: &mut Txn, uid: Uuid) {
        if self.workflows.by_job.contains_key(&uid) || self.is_remote_job(&uid) {
            self.workflow_job_settled(txn, uid, State::Discarded);
        }
    }

    /// A workflow job was fetched: the first fetch starts its workflow (§8.2).
    pub(in crate::engine) fn workflow_job_started(&mut self, txn: &mut Txn, uid: Uuid) {
        let Some((id, _)) = self.workflows.by_job.get(&uid) else {
            self.remote_started(txn, uid);
            return;
        };
        let Some(wf) = self.workflows.map.get_mut(id) else {
            return;
        };
        let Some(Effect::Event { kind, data }) = wf.job_started(self.now) else {
            return;
        };
        flush(&mut txn.batch, wf);
        let subject = wf.header.id.clone();
        self.emit_plain(txn, kind, Component::Api, &subject, data);
    }

    /// Drop ended workflows older than the job retention, a bounded number per call.
    fn prune_workflows(&mut self, txn: &mut Txn) {
        let cutoff = self
            .now_ms()
            .saturating_sub(crate::time::ms(self.cfg.retention));
        for _ in 0..PRUNE_PER_CALL {
            match self.workflows.ended.first() {
                Some((at, _)) if *at <= cutoff => {}
                _ => break,
            }
            let Some((_, id)) = self.workflows.ended.pop_first() else {
                break;
            };
            let Some(wf) = self.workflows.map.remove(&id) else {
                continue;
            };
            txn.batch.delete(Space::Workflow, &key(&id, Rec::Header));
            for n in 0..wf.nodes.len() as u32 {
                txn.batch.delete(Space::Workflow, &key(&id, Rec::Node(n)));
            }
            for (_, job) in wf.pending_jobs() {
                if let Ok(uid) = Uuid::parse_str(job) {
                    self.workflows.by_job.remove(&uid);
                }
            }
        }
    }

    /// FLUSH: every workflow is deleted (its jobs are deleted by the caller).
    pub(in crate::engine) fn flush_workflows(&mut self, txn: &mut Txn) -> usize {
        let all = std::mem::take(&mut self.workflows);
        all.outbox.flush(&mut txn.batch);
        for (id, wf) in &all.map {
            txn.batch.delete(Space::Workflow, &key(id, Rec::Header));
            for n in 0..wf.nodes.len() as u32 {
                txn.batch.delete(Space::Workflow, &key(id, Rec::Node(n)));
            }
        }
        all.map.len()
    }

    /// Start-up: load every workflow, then settle any job that finished without its
    /// workflow hearing of it (cannot happen with atomic commits; checked all the same).
    pub(in crate::engine) fn rebuild_workflows(&mut self) -> Result<(), StoreError> {
        let mut headers: HashMap<String, Header> = HashMap::new();
        let mut nodes: HashMap<String, BTreeMap<u32, Node>> = HashMap::new();
        let mut bad = 0usize;
        self.store.scan(Space::Workflow, &mut |k, v| {
            match parse_key(k) {
                Some((id, Rec::Header)) => match serde_json::from_slice(v) {
                    Ok(h) => {
                        headers.insert(id, h);
                    }
                    Err(_) => bad += 1,
                },
                Some((id, Rec::Node(n))) => match serde_json::from_slice(v) {
                    Ok(node) => {
                        nodes.entry(id).or_default().insert(n, node);
                    }
                    Err(_) => bad += 1,
                },
                None => bad += 1,
            }
            true
        })?;
        for (id, header) in headers {
            let list = nodes.remove(&id).unwrap_or_default();
            let contiguous = list.keys().copied().eq(0..list.len() as u32);
            let restored = contiguous
                .then(|| Workflow::restore(header, list.into_values().collect()))
                .flatten();
            let Some(wf) = restored else {
                tracing::error!(workflow = %id, "inconsistent workflow records; skipped");
                bad += 1;
                continue;
            };
            if wf.header.state.is_terminal() {
                let at = wf.header.completed_at.unwrap_or(wf.header.created_at);
                self.workflows
                    .ended
                    .insert((at.timestamp_millis(), id.clone()));
            }
            for (n, job) in wf.pending_jobs() {
                if let Ok(uid) = Uuid::parse_str(job) {
                    self.workflows.by_job.insert(uid, (id.clone(), n));
                }
            }
            self.workflows.map.insert(id, wf);
        }
        if bad > 0 {
            tracing::warn!(records = bad, "unreadable workflow records were skipped");
        }
        let workflows = &self.workflows;
        let stale: Vec<(Uuid, State)> = workflows
            .by_job
            .iter()
            // A job in another partition is reported by that partition.
            .filter(|(_, (id, n))| {
                let wf = workflows.map.get(id);
                wf.and_then(|wf| wf.node_part(*n)).is_none()
            })
            .map(|(uid, _)| uid)
            .filter_map(|uid| match self.index.jobs.get(uid) {
                None => Some((*uid, State::Discarded)),
                Some(e) if e.state.is_terminal() => Some((*uid, e.state)),
                Some(_) => None,
            })
            .collect();
        self.now = self.clock.now();
        let mut txn = Txn::default();
        self.rebuild_outbox(&mut txn)?;
        if !stale.is_empty() {
            tracing::warn!(
                jobs = stale.len(),
                "settling workflow jobs that finished unseen"
            );
            for (uid, state) in stale {
                self.workflow_job_settled(&mut txn, uid, state);
            }
        }
        if !txn.batch.is_empty() {
            let index = &self.index;
            let _ = txn.seal(|id| index.jobs.get(&id).map(|e| e.seq).unwrap_or(0));
            self.store.commit(std::mem::take(&mut txn.batch))?;
        }
        tracing::info!(
            workflows = self.workflows.map.len(),
            "workflows rebuilt from the store"
        );
        Ok(())
    }
}
