//! Bulk changes to the sets of waiting jobs (MUTATE: kill, requeue, discard or clear the
//! scheduled, retrying or dead jobs a filter matches), FLUSH (every job and workflow, in
//! one commit), and the queue commands Faktory adds: REMOVE (delete a queue's waiting jobs
//! and forget it), LATENCY and `*` for every queue.

use crate::engine::api::{self, Answer};
use crate::engine::index::QueueId;
use crate::engine::request::{JobSet, MutateCmd, MutateOp, SetFilter};
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::Component;
use crate::events::EventKind;
use crate::job::State;
use crate::store::Space;
use serde_json::json;
use uuid::Uuid;

/// Every queue, when a queue command names `*`.
pub const ALL_QUEUES: &str = "*";

fn invalid(msg: String) -> OjsError {
    OjsError::new(ErrorCode::InvalidPayload, msg)
}

/// A Redis-style glob (`*`, `?`, `[...]`, `\x`) compiled once for a whole MUTATE.
fn compile_glob(pattern: &str) -> OjsResult<globset::GlobMatcher> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            invalid(format!(
                "filter regexp {pattern:?} is not a valid glob: {e}"
            ))
        })
}

/// Most wildcards (`*`, `?`, `[`) in a `MUTATE` glob. The glob becomes a regular
/// expression, whose cost per byte of every envelope it is matched against grows with its
/// wildcards; Redis bounds its glob nesting for the same reason.
pub const MAX_GLOB_WILDCARDS: usize = 32;

/// A Redis-style glob checked against the bounds before it is compiled.
fn bounded_glob(pattern: &str) -> OjsResult<globset::GlobMatcher> {
    let wildcards = pattern
        .bytes()
        .filter(|b| matches!(b, b'*' | b'?' | b'['))
        .count();
    if wildcards > MAX_GLOB_WILDCARDS {
        return Err(invalid(format!(
            "filter regexp has {wildcards} wildcards; at most {MAX_GLOB_WILDCARDS} are allowed"
        )));
    }
    compile_glob(pattern)
}

/// The queues a sliced QUEUE REMOVE empties and then forgets.
pub(in crate::engine) struct RemoveWork {
    names: Vec<String>,
    qids: Vec<QueueId>,
}

/// What a sliced MUTATE does to each job it looks at.
pub(in crate::engine) struct MutateWork {
    op: MutateOp,
    set: JobSet,
    job_type: Option<String>,
    glob: Option<globset::GlobMatcher>,
}

impl Engine {
    /// MUTATE, started: the filter checked and the candidates listed (the jobs of `set`,
    /// or those of the listed ids); `bulk.rs` works through them in slices.
    pub(in crate::engine) fn start_mutate(
        &self,
        m: MutateCmd,
    ) -> OjsResult<(MutateWork, Vec<Uuid>)> {
        let filter = match m.op {
            MutateOp::Clear => SetFilter::default(),
            _ => m.filter,
        };
        let glob = filter.pattern.as_deref().map(bounded_glob).transpose()?;
        let state = m.set.state();
        let in_set = |id: &Uuid| self.index.jobs.get(id).is_some_and(|e| e.state == state);
        let mut ids: Vec<Uuid> = match &filter.ids {
            // Unknown or malformed ids simply match nothing, as in Faktory.
            Some(list) => list
                .iter()
                .filter_map(|s| Uuid::parse_str(s).ok())
                .filter(in_set)
                .collect(),
            None => self
                .index
                .jobs
                .iter()
                .filter(|(_, e)| e.state == state)
                .map(|(id, _)| *id)
                .collect(),
        };
        ids.sort_unstable();
        ids.dedup();
        let work = MutateWork {
            op: m.op,
            set: m.set,
            job_type: filter.job_type,
            glob,
        };
        Ok((work, ids))
    }

    /// One candidate of a MUTATE: whether it (still) matches, and whether it changed.
    pub(in crate::engine) fn mutate_one(
        &mut self,
        txn: &mut Txn,
        w: &MutateWork,
        uid: Uuid,
    ) -> OjsResult<(bool, bool)> {
        // Between slices a job may have left the set (run, retried, deleted).
        if !self
            .index
            .jobs
            .get(&uid)
            .is_some_and(|e| e.state == w.set.state())
        {
            return Ok((false, false));
        }
        if w.job_type.is_some() || w.glob.is_some() {
            let Some(job) = txn.job(self.store.as_ref(), uid)? else {
                return Ok((false, false));
            };
            if w.job_type.as_deref().is_some_and(|t| t != job.job_type) {
                return Ok((false, false));
            }
            if let Some(g) = &w.glob {
                let text = serde_json::to_string(&job).unwrap_or_default();
                if !g.is_match(text.as_str()) {
                    return Ok((false, false));
                }
            }
        }
        let changed = match (w.op, w.set) {
            (MutateOp::Discard | MutateOp::Clear, _) => {
                self.delete_job(txn, uid);
                true
            }
            (MutateOp::Kill, JobSet::Dead) => false,
            (MutateOp::Kill, _) => {
                self.kill(txn, uid)?;
                true
            }
            (MutateOp::Requeue, JobSet::Dead) => {
                self.dead_retry(txn, uid)?;
                true
            }
            (MutateOp::Requeue, _) => {
                self.make_available(txn, uid, Some(Component::Api))?;
                true
            }
        };
        Ok((true, changed))
    }

    /// The answer of a finished MUTATE.
    pub(in crate::engine) fn mutated(w: &MutateWork, matched: usize, changed: usize) -> Answer {
        if changed > 0 {
            tracing::info!(op = ?w.op, set = ?w.set, changed, "jobs mutated");
        }
        Answer::Mutated(api::Mutated { matched, changed })
    }

    /// A scheduled or retrying job straight to the dead set.
    fn kill(&mut self, txn: &mut Txn, uid: Uuid) -> OjsResult<()> {
        let now = self.now;
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        const WHY: &str = "moved to the dead set by an operator";
        let error = json!({"type": "killed", "message": WHY});
        job.push_error(error.clone());
        job.error = Some(error);
        job.state = State::Discarded;
        job.discarded_at = Some(now);
        job.completed_at = Some(now);
        job.next_retry_at = None;
        let extra = json!({"total_attempts": job.attempt,
            "last_error": {"code": "killed", "message": WHY}});
        let data = crate::engine::events::job_data(job);
        self.emit_with(txn, EventKind::JobDiscarded, Component::Api, data, extra);
        let now_ms = self.now_ms();
        self.discarded(txn, uid, now_ms);
        self.settled(txn, uid, State::Discarded);
        Ok(())
    }

    /// FLUSH: every job, workflow, unique key and queue pause, in this one commit. Cron
    /// registrations and the event log stay (they are configuration and history).
    pub(in crate::engine) fn flush(&mut self, txn: &mut Txn) -> Answer {
        let workflows = self.flush_workflows(txn);
        let ids: Vec<Uuid> = self.index.jobs.keys().copied().collect();
        for &uid in &ids {
            if let Some(e) = self.index.remove(uid) {
                if let Some(w) = e.worker {
                    self.workers.release(&w, uid);
                }
            }
            txn.delete_job(uid);
            self.cron_settled(txn, uid);
        }
        self.conn_holds.clear();
        let names: Vec<String> = self.index.queues.iter().map(|q| q.name.clone()).collect();
        for name in names {
            self.forget_queue(txn, &name);
        }
        self.stats = Default::default();
        tracing::warn!(jobs = ids.len(), workflows, "FLUSH: every job deleted");
        Answer::Flushed(api::Flushed {
            jobs: ids.len(),
            workflows,
        })
    }

    /// Unpause a queue and hide it from the queue lists until a job names it again.
    fn forget_queue(&mut self, txn: &mut Txn, name: &str) {
        let Some(qid) = self.index.find_queue(name) else {
            return;
        };
        let q = self.index.queue_mut(qid);
        q.removed = true;
        if std::mem::take(&mut q.paused) {
            let key = format!("{}{name}", super::PAUSED_PREFIX);
            txn.batch.delete(Space::Meta, key.as_bytes());
        }
    }

    /// The names a queue command lists, with `*` standing for every known queue.
    pub(in crate::engine) fn expand_queues(&self, names: Vec<String>) -> OjsResult<Vec<String>> {
        if names.iter().any(|n| n == ALL_QUEUES) {
            return Ok(self
                .index
                .queues
                .iter()
                .filter(|q| q.listed())
                .map(|q| q.name.clone())
                .collect());
        }
        if let Some(bad) = names.iter().find(|n| !crate::job::is_valid_queue(n)) {
            return Err(OjsError::new(
                ErrorCode::InvalidQueue,
                format!("invalid queue name {bad:?}"),
            ));
        }
        Ok(names)
    }

    /// QUEUE REMOVE, started: each queue's waiting (`available`) jobs listed, to be deleted
    /// in slices (`bulk.rs`); then the queues are forgotten. Their scheduled, retrying and
    /// running jobs stay and bring a queue back when they return.
    pub(in crate::engine) fn start_remove(
        &self,
        names: Vec<String>,
    ) -> OjsResult<(RemoveWork, Vec<Uuid>)> {
        let names = self.expand_queues(names)?;
        let qids: Vec<QueueId> = names
            .iter()
            .filter_map(|n| self.index.find_queue(n))
            .collect();
        let ids = self
            .index
            .jobs
            .iter()
            .filter(|(_, e)| e.state == State::Available && qids.contains(&e.queue))
            .map(|(id, _)| *id)
            .collect();
        Ok((RemoveWork { names, qids }, ids))
    }

    /// One candidate of a QUEUE REMOVE: deleted if it is still waiting in one of them.
    pub(in crate::engine) fn remove_one(
        &mut self,
        txn: &mut Txn,
        w: &RemoveWork,
        id: Uuid,
    ) -> bool {
        let waiting = self
            .index
            .jobs
            .get(&id)
            .is_some_and(|e| e.state == State::Available && w.qids.contains(&e.queue));
        if waiting {
            self.delete_job(txn, id);
        }
        waiting
    }

    /// A QUEUE REMOVE whose jobs are deleted: forget the queues, and answer.
    pub(in crate::engine) fn removed(
        &mut self,
        txn: &mut Txn,
        w: &RemoveWork,
        removed: usize,
    ) -> Answer {
        for name in &w.names {
            self.forget_queue(txn, name);
        }
        Answer::Mutated(api::Mutated {
            matched: removed,
            changed: removed,
        })
    }

    /// QUEUE LATENCY: per queue, seconds since its longest-waiting job was enqueued.
    pub(in crate::engine) fn queue_latency(
        &self,
        txn: &Txn,
        names: Vec<String>,
    ) -> OjsResult<Answer> {
        let now = self.now_ms();
        let mut out = Vec::new();
        for name in self.expand_queues(names)? {
            let oldest = match self.index.find_queue(&name) {
                Some(qid) => self
                    .oldest_enqueued(txn, qid)?
                    .map(|t| t.timestamp_millis()),
                None => None,
            };
            let secs = oldest.map_or(0.0, |t| (now.saturating_sub(t)).max(0) as f64 / 1000.0);
            out.push(api::QueueLatency {
                queue: name,
                seconds: secs,
            });
        }
        Ok(Answer::Latencies(out))
    }
}
