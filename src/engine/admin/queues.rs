//! Queue and worker administration (ojs-admin-api §6, §9): QUEUE LIST, QUEUE STATS,
//! QUEUE PURGE and the worker list. Pause and resume live in admin.rs.

use crate::engine::api::{self, Answer};
use crate::engine::index::{Queue, QueueId};
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::{format_ts, State};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

const MINUTE_MS: i64 = 60_000;

fn ms_to_ts(ms: i64) -> Option<String> {
    DateTime::from_timestamp_millis(ms).map(format_ts)
}

/// What a sliced QUEUE PURGE deletes.
pub(in crate::engine) struct PurgeWork {
    queue: String,
    qid: QueueId,
    states: Vec<State>,
    older_than: Option<DateTime<Utc>>,
}

impl Engine {
    fn known_queue(&self, name: &str) -> OjsResult<QueueId> {
        if !crate::job::is_valid_queue(name) {
            return Err(OjsError::new(
                ErrorCode::InvalidQueue,
                format!("invalid queue name {name:?}"),
            ));
        }
        self.index
            .find_queue(name)
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("no queue named {name}")))
    }

    /// Name, pause state, jobs per state and recent throughput of one queue.
    fn queue_summary(&self, q: &Queue) -> api::QueueSummary {
        let now = self.now_ms();
        let one = q.throughput.window(now, MINUTE_MS);
        let five = q.throughput.window(now, 5 * MINUTE_MS);
        api::QueueSummary {
            name: q.name.clone(),
            state: if q.paused { "paused" } else { "active" },
            paused: q.paused,
            counts: super::counts_of(q),
            throughput: api::Throughput {
                processed_per_minute: one.completed,
                failed_per_minute: one.failed,
                processed_last_5m: five.completed,
                failed_last_5m: five.failed,
            },
        }
    }

    /// QUEUE LIST: every queue, by name.
    pub(in crate::engine) fn queue_list(&self) -> Answer {
        let mut queues: Vec<&Queue> = self.index.queues.iter().filter(|q| q.listed()).collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        let queues: Vec<api::QueueSummary> =
            queues.into_iter().map(|q| self.queue_summary(q)).collect();
        Answer::Queues(api::QueueList {
            total: queues.len(),
            queues,
        })
    }

    /// QUEUE STATS: the summary plus the age of the longest-waiting available job
    /// (`oldest_available_at`, `latency_ms` = now - its `enqueued_at`).
    pub(in crate::engine) fn queue_stats(&self, txn: &Txn, name: &str) -> OjsResult<Answer> {
        let qid = self.known_queue(name)?;
        let q = self.index.queue(qid);
        let oldest = self.oldest_enqueued(txn, qid)?;
        let now = self.now_ms();
        let workers = self
            .workers
            .iter()
            .filter(|(_, w)| {
                w.info["queues"]
                    .as_array()
                    .is_some_and(|qs| qs.iter().any(|x| x.as_str() == Some(name)))
            })
            .count();
        Ok(Answer::QueueStats(Box::new(api::QueueStats {
            summary: self.queue_summary(q),
            depth: q.count(State::Available),
            oldest_available_at: oldest.map(format_ts),
            latency_ms: oldest.map_or(0, |t| (now - t.timestamp_millis()).max(0)),
            workers,
            rate_limit: q.limit.map(|l| l.to_json()),
        })))
    }

    /// When the queue's longest-waiting available job was enqueued (QUEUE STATS, LATENCY).
    pub(in crate::engine) fn oldest_enqueued(
        &self,
        txn: &Txn,
        qid: QueueId,
    ) -> OjsResult<Option<DateTime<Utc>>> {
        Ok(match self.index.oldest_available(qid) {
            Some(id) => txn
                .job(self.store.as_ref(), id)?
                .and_then(|j| j.enqueued_at),
            None => None,
        })
    }

    /// QUEUE PURGE, started: the queue's jobs in `states` (the parser refuses `active`)
    /// listed; `bulk.rs` deletes them in slices, only those older than `older_than` when
    /// it is given: the terminal time of a completed, cancelled or discarded job, the
    /// creation time of a waiting one.
    pub(in crate::engine) fn start_purge(
        &self,
        name: &str,
        states: Vec<State>,
        older_than: Option<DateTime<Utc>>,
    ) -> OjsResult<(PurgeWork, Vec<uuid::Uuid>)> {
        let qid = self.known_queue(name)?;
        let ids: Vec<uuid::Uuid> = self
            .index
            .jobs
            .iter()
            .filter(|(_, e)| e.queue == qid && states.contains(&e.state))
            .map(|(id, _)| *id)
            .collect();
        let work = PurgeWork {
            queue: name.to_string(),
            qid,
            states,
            older_than,
        };
        Ok((work, ids))
    }

    /// One candidate of a QUEUE PURGE: deleted if it (still) matches.
    pub(in crate::engine) fn purge_one(
        &mut self,
        txn: &mut Txn,
        w: &PurgeWork,
        id: uuid::Uuid,
    ) -> OjsResult<bool> {
        if !self
            .index
            .jobs
            .get(&id)
            .is_some_and(|e| e.queue == w.qid && w.states.contains(&e.state))
        {
            return Ok(false);
        }
        if let Some(cut) = w.older_than {
            let Some(job) = txn.job(self.store.as_ref(), id)? else {
                return Ok(false);
            };
            let at = match job.state {
                State::Completed => job.completed_at,
                State::Cancelled => job.cancelled_at,
                State::Discarded => job.discarded_at,
                _ => None,
            }
            .unwrap_or(job.created_at);
            if at >= cut {
                return Ok(false);
            }
        }
        self.delete_job(txn, id);
        Ok(true)
    }

    /// The answer of a finished QUEUE PURGE.
    pub(in crate::engine) fn purged(w: &PurgeWork, purged: usize) -> Answer {
        if purged > 0 {
            tracing::info!(queue = %w.queue, purged, "queue purged");
        }
        Answer::Purged(api::Purged {
            queue: w.queue.clone(),
            purged_count: purged,
            states: w.states.iter().map(|s| s.as_str()).collect(),
        })
    }

    /// WORKERS: every worker the engine knows (connected, or holding jobs until its
    /// heartbeat timeout), by id. `last_heartbeat_at` is the last sign of life: a BEAT or
    /// any other command from one of its connections. `stale` is set after a third of
    /// `--heartbeat-timeout` of silence (a missed 15 s beat at the defaults).
    pub(in crate::engine) fn worker_list(&self) -> Answer {
        let now = self.now_ms();
        let stale_after =
            i64::try_from(self.cfg.heartbeat_timeout.as_millis() / 3).unwrap_or(i64::MAX);
        let mut rows: Vec<_> = self.workers.iter().collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        let (mut running, mut quiet, mut terminate, mut stale_n) = (0, 0, 0, 0);
        let workers: Vec<api::WorkerView> = rows
            .into_iter()
            .map(|(wid, w)| {
                let state = super::directive_name(w.directive);
                match state {
                    "quiet" => quiet += 1,
                    "terminate" => terminate += 1,
                    _ => running += 1,
                }
                let stale = now - w.last_seen > stale_after;
                stale_n += usize::from(stale);
                let mut held: Vec<String> = w.held.iter().map(|id| id.to_string()).collect();
                held.sort();
                let field = |k: &str, default: Value| w.info.get(k).cloned().unwrap_or(default);
                api::WorkerView {
                    id: wid.to_string(),
                    state,
                    connected: w.conns > 0,
                    connections: w.conns,
                    stale,
                    last_heartbeat_at: ms_to_ts(w.last_seen),
                    started_at: ms_to_ts(w.started),
                    active_jobs: held.len(),
                    active_job_ids: held,
                    jobs_completed: w.completed,
                    queues: field("queues", json!([])),
                    concurrency: field("concurrency", Value::Null),
                    hostname: field("hostname", Value::Null),
                    info: w.info.clone(),
                }
            })
            .collect();
        Answer::Workers(api::WorkerList {
            total: workers.len(),
            workers,
            summary: api::WorkerSummary {
                total: running + quiet + terminate,
                running,
                quiet,
                terminate,
                stale: stale_n,
            },
        })
    }
}
