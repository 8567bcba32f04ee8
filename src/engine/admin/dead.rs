//! The dead-letter set (ojs-dead-letter): every `discarded` job (PROTOCOL.md §10.2). List
//! with filters and paging, inspect, statistics, retry or delete one job or every job a
//! filter matches, and the retention sweep of §5/§8 (`--dead-retention`, default 180 days,
//! and `--dead-max`, default 10,000; a job over either limit is pruned, oldest first).

use crate::engine::api::{self, Answer, JobView};
use crate::engine::request::{DeadCmd, DeadFilter};
use crate::engine::txn::{Out, Txn};
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::Component;
use crate::job::{format_ts, Job, State};
use serde_json::{json, Map};
use std::ops::Bound;
use uuid::Uuid;

/// Dead letters pruned per loop turn at most; the rest go on the next turns.
const MAX_PRUNE_PER_TURN: usize = 10_000;
/// Per-job failures a bulk retry reports (the counts are always complete).
const MAX_REPORTED_ERRORS: usize = 100;

fn error_type(job: &Job) -> Option<&str> {
    job.error.as_ref()?.get("type")?.as_str()
}

fn ms_to_ts(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(format_ts)
}

/// A retention age as ISO 8601, in days when it is whole days (`P180D`).
fn age_text(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(86_400) && d.subsec_nanos() == 0 {
        format!("P{}D", s / 86_400)
    } else {
        crate::job::duration::format_duration(d)
    }
}

impl Engine {
    fn dead_retention_ms(&self) -> i64 {
        crate::time::ms(self.cfg.dead_retention)
    }

    /// A job id that must name a dead letter. `missing` is the code for a job in another
    /// state: NOT_FOUND for reads, INVALID_STATE_TRANSITION for changes.
    fn dead_id(&self, id: &str, missing: ErrorCode) -> OjsResult<Uuid> {
        match self.lookup(id)? {
            (uid, State::Discarded) => Ok(uid),
            (uid, state) => Err(OjsError::new(
                missing,
                format!(
                    "job {uid} is {}, not in the dead-letter set",
                    state.as_str()
                ),
            )),
        }
    }

    /// Visit the dead letters `f` matches, newest first, with their discard time (and the
    /// body, when the filter needed it); `visit` returns false to stop.
    fn dead_matches(
        &self,
        txn: &Txn,
        f: &DeadFilter,
        mut visit: impl FnMut(Uuid, i64, Option<Job>) -> bool,
    ) -> OjsResult<()> {
        let since = f.since.map(|t| t.timestamp_millis());
        let until = f.until.map(|t| t.timestamp_millis());
        if let (Some(s), Some(u)) = (since, until) {
            if s > u {
                return Ok(()); // an empty window (and BTreeSet::range would panic)
            }
        }
        let qid = match &f.queue {
            Some(q) => match self.index.find_queue(q) {
                Some(id) => Some(id),
                None => return Ok(()),
            },
            None => None,
        };
        let lo = since.map_or(Bound::Unbounded, |s| Bound::Included((s, Uuid::nil())));
        let hi = until.map_or(Bound::Unbounded, |u| Bound::Excluded((u, Uuid::nil())));
        for &(at, uid) in self.index.dead.range((lo, hi)).rev() {
            if qid.is_some() && self.index.jobs.get(&uid).map(|e| e.queue) != qid {
                continue;
            }
            let body = if f.needs_body() {
                let Some(job) = txn.job(self.store.as_ref(), uid)? else {
                    continue;
                };
                let type_ok = f.job_type.as_deref().is_none_or(|t| t == job.job_type);
                let err_ok = f.error_type.is_none() || f.error_type.as_deref() == error_type(&job);
                if !(type_ok && err_ok) {
                    continue;
                }
                Some(job)
            } else {
                None
            };
            if !visit(uid, at, body) {
                break;
            }
        }
        Ok(())
    }

    fn dead_ids(&self, txn: &Txn, f: &DeadFilter) -> OjsResult<Vec<Uuid>> {
        let mut ids = Vec::new();
        self.dead_matches(txn, f, |uid, _, _| {
            ids.push(uid);
            true
        })?;
        Ok(ids)
    }

    pub(in crate::engine) fn dead_cmd(&mut self, txn: &mut Txn, cmd: DeadCmd) -> OjsResult<Out> {
        match cmd {
            DeadCmd::List {
                filter,
                limit,
                offset,
            } => self.dead_list(txn, &filter, limit, offset),
            DeadCmd::Get(id) => Ok(Out::Job(self.dead_id(&id, ErrorCode::NotFound)?)),
            DeadCmd::Stats => self.dead_stats(txn),
            DeadCmd::Retry(id) => {
                let uid = self.dead_id(&id, ErrorCode::InvalidStateTransition)?;
                self.dead_retry(txn, uid)?;
                Ok(Out::Answer(Ok(Answer::Ok)))
            }
            DeadCmd::Delete(id) => {
                let uid = self.dead_id(&id, ErrorCode::InvalidStateTransition)?;
                self.delete_job(txn, uid);
                Ok(Out::Answer(Ok(Answer::Ok)))
            }
            DeadCmd::RetryAll(filter) => {
                let ids = self.dead_ids(txn, &filter)?;
                let (mut retried, mut errors) = (0usize, Vec::new());
                for uid in &ids {
                    match self.dead_retry(txn, *uid) {
                        Ok(()) => retried += 1,
                        Err(e) if errors.len() < MAX_REPORTED_ERRORS => {
                            errors.push(api::BulkError {
                                job_id: uid.to_string(),
                                error: e.to_string(),
                            })
                        }
                        Err(_) => {}
                    }
                }
                Ok(Out::Answer(Ok(Answer::DeadRetried(api::DeadRetried {
                    matched: ids.len(),
                    retried,
                    failed: ids.len() - retried,
                    errors,
                }))))
            }
            DeadCmd::DeleteAll(filter) => {
                let ids = self.dead_ids(txn, &filter)?;
                for uid in &ids {
                    self.delete_job(txn, *uid);
                }
                Ok(Out::Answer(Ok(Answer::DeadDeleted(api::DeadDeleted {
                    matched: ids.len(),
                    deleted: ids.len(),
                }))))
            }
        }
    }

    /// `{"total": n, "jobs": [...]}`, newest first; `total` counts every match.
    fn dead_list(
        &self,
        txn: &Txn,
        filter: &DeadFilter,
        limit: usize,
        offset: usize,
    ) -> OjsResult<Out> {
        let mut total = 0usize;
        let mut page: Vec<(Uuid, Option<Job>)> = Vec::new();
        self.dead_matches(txn, filter, |uid, _, body| {
            if total >= offset && page.len() < limit {
                page.push((uid, body));
            }
            total += 1;
            true
        })?;
        let mut jobs = Vec::with_capacity(page.len());
        for (uid, body) in page {
            let job = match body {
                Some(j) => Some(j),
                None => txn.job(self.store.as_ref(), uid)?,
            };
            if let Some(job) = job {
                let json = serde_json::to_vec(&job).unwrap_or_default();
                jobs.push(JobView::encoded(json.into()));
            }
        }
        Ok(Out::Answer(Ok(Answer::DeadPage(api::DeadPage {
            total,
            jobs,
        }))))
    }

    /// ojs-dead-letter §10.1. `by_error_type` reads every dead letter's body (at most
    /// `--dead-max` of them): an operator's query, not a hot path.
    fn dead_stats(&self, txn: &Txn) -> OjsResult<Out> {
        let mut by_queue = Map::new();
        let mut by_error: std::collections::BTreeMap<String, u64> = Default::default();
        let mut queue_counts = vec![0u64; self.index.queues.len()];
        for (_, uid) in &self.index.dead {
            if let Some(e) = self.index.jobs.get(uid) {
                if let Some(c) = queue_counts.get_mut(e.queue as usize) {
                    *c += 1;
                }
            }
            if let Some(job) = txn.job(self.store.as_ref(), *uid)? {
                let t = error_type(&job).unwrap_or("unknown").to_string();
                *by_error.entry(t).or_default() += 1;
            }
        }
        for (q, n) in self.index.queues.iter().zip(queue_counts) {
            if n > 0 {
                by_queue.insert(q.name.clone(), json!(n));
            }
        }
        let oldest = self.index.dead.first().map(|d| d.0);
        let next_prune = oldest.map(|o| o.saturating_add(self.dead_retention_ms()));
        Ok(Out::Answer(Ok(Answer::DeadStats(Box::new(
            api::DeadStats {
                total: self.index.dead.len(),
                by_queue,
                by_error_type: by_error,
                oldest_at: oldest.and_then(ms_to_ts),
                newest_at: self.index.dead.last().and_then(|d| ms_to_ts(d.0)),
                retention: api::DeadRetention {
                    max_age: age_text(self.cfg.dead_retention),
                    max_count: self.cfg.dead_max,
                    next_prune_at: next_prune.and_then(ms_to_ts),
                },
            },
        )))))
    }

    /// discarded → available with a fresh start (ojs-core §6.3: attempt reset to 0, errors
    /// cleared; the id is kept). Refused while another job holds its unique key.
    pub(super) fn dead_retry(&mut self, txn: &mut Txn, uid: Uuid) -> OjsResult<()> {
        self.unique_clear_for(txn, uid)?;
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        job.attempt = 0;
        job.error = None;
        job.errors.clear();
        job.discarded_at = None;
        job.completed_at = None;
        job.started_at = None;
        self.index.remove_dead(uid);
        self.make_available(txn, uid, Some(Component::Api))
    }

    /// Apply dead-letter retention: first every job discarded longer ago than
    /// `--dead-retention`, then the oldest while more than `--dead-max` remain. Runs at
    /// the end of every batch (a peek when there is nothing to do), so a limit lowered
    /// across a restart is applied at once too.
    pub(in crate::engine) fn prune_dead(&mut self, txn: &mut Txn) {
        let cutoff = self.now_ms().saturating_sub(self.dead_retention_ms());
        let mut pruned = 0usize;
        while pruned < MAX_PRUNE_PER_TURN {
            let Some(&(at, uid)) = self.index.dead.first() else {
                break;
            };
            if at > cutoff && self.index.dead.len() <= self.cfg.dead_max {
                break;
            }
            self.index.remove_dead(uid);
            self.index.dead.remove(&(at, uid)); // progress even if `dead_at` was out of step
                                                // Only a job that is still a dead letter is deleted; anything else was stale.
            if self.index.jobs.get(&uid).map(|e| e.state) == Some(State::Discarded) {
                self.delete_job(txn, uid);
                pruned += 1;
            }
        }
        if pruned > 0 {
            tracing::info!(pruned, "dead-letter retention pruned jobs");
        }
    }
}
