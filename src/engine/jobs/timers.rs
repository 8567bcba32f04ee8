//! What happens to jobs without a client asking: timers (promotion, visibility timeout,
//! expiry, pruning), workers that stopped beating, and FETCH replies that never arrived.

use super::Ended;
use crate::engine::events::job_data;
use crate::engine::index::TimerKind;
use crate::engine::txn::Txn;
use crate::engine::{ConnId, Engine};
use crate::error::OjsResult;
use crate::events::Component;
use crate::events::EventKind;
use crate::job::State;
use serde_json::json;
use std::sync::Arc;
use uuid::Uuid;

/// Timers fired per loop turn, so a restart after a long outage cannot build one giant batch.
const MAX_TIMERS_PER_TURN: usize = 10_000;

impl Engine {
    /// Put back jobs whose FETCH reply never reached a client. The worker never saw them,
    /// so no attempt is spent: they return to `available` even with no attempt left (the
    /// attempt counter itself only moves forward).
    pub(in crate::engine) fn unclaim_undelivered(&mut self, txn: &mut Txn) {
        for uid in std::mem::take(&mut self.undelivered) {
            if self.index.jobs.get(&uid).map(|e| e.state) != Some(State::Active) {
                continue;
            }
            self.release(uid);
            let now = self.now;
            let Ok(job) = txn.job_mut(self.store.as_ref(), uid) else {
                continue;
            };
            job.state = State::Available;
            job.started_at = None;
            job.worker_id = None;
            job.enqueued_at = Some(now);
            let data = job_data(job);
            let extra = json!({"attempt": job.attempt, "error": {"code": "undelivered",
                "message": "the fetching connection closed before the job was handed over", "retryable": true}});
            self.index.set_state(uid, State::Available, None);
            self.woke = true;
            self.emit_with(txn, EventKind::JobFailed, Component::Scheduler, data, extra);
        }
    }

    /// `Command::Unclaim`: jobs this caller holds go back as undelivered ones, at the next
    /// turn of the loop. Checked whole before any is given back.
    pub(in crate::engine) fn unclaim(
        &mut self,
        wid: Option<&Arc<str>>,
        ids: &[String],
    ) -> OjsResult<()> {
        let uids = ids
            .iter()
            .map(|id| self.active_job(id, wid, "UNCLAIM"))
            .collect::<OjsResult<Vec<_>>>()?;
        self.undelivered.extend(uids);
        self.woke = true;
        Ok(())
    }

    /// A reservation that ended without ACK or FAIL.
    pub(in crate::engine) fn lost(
        &mut self,
        txn: &mut Txn,
        uid: Uuid,
        etype: &str,
        message: String,
    ) -> OjsResult<()> {
        self.release(uid);
        let error = json!({"type": etype, "message": message});
        self.failed_attempt(txn, uid, error, Ended::Lost, Component::Scheduler)
    }

    pub(in crate::engine) fn run_timers(&mut self, txn: &mut Txn) {
        let now_ms = self.now_ms();
        let mut due = self.index.take_due(now_ms);
        if due.len() > MAX_TIMERS_PER_TURN {
            // Put back what this turn will not handle; the loop comes round again at once.
            for t in due.split_off(MAX_TIMERS_PER_TURN) {
                self.index.rearm(t);
            }
        }
        for (at, uid, kind) in due {
            let Some(e) = self.index.jobs.get(&uid) else {
                continue;
            };
            let state = e.state;
            let current =
                e.timer == Some((at, kind)) || (kind == TimerKind::Expire && e.expires == Some(at));
            if !current {
                continue;
            }
            let res = match kind {
                TimerKind::Promote if matches!(state, State::Scheduled | State::Retryable) => self
                    .make_available(
                        txn,
                        uid,
                        (state == State::Scheduled).then_some(Component::Scheduler),
                    ),
                TimerKind::Visibility if state == State::Active => {
                    let secs = e.timeout_ms / 1000;
                    self.lost(
                        txn,
                        uid,
                        "timeout",
                        format!("no ACK or FAIL within the {secs}s visibility timeout"),
                    )
                }
                TimerKind::Expire if !state.is_terminal() && state != State::Active => {
                    self.expire(txn, uid)
                }
                TimerKind::Prune if state.is_terminal() => {
                    self.delete_job(txn, uid);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = res {
                tracing::error!(job = %uid, error = %e, "timer could not be applied");
            }
        }
    }

    /// A connection without a worker id closed: the jobs it fetched and still holds go
    /// back to their queues now, in this batch's one commit, rather than after their
    /// visibility timeout (PROTOCOL.md §5.4). A job that changed hands since is untouched.
    pub(in crate::engine) fn connection_gone(&mut self, txn: &mut Txn, conn: ConnId) {
        let held = self.conn_holds.close(conn);
        if !held.is_empty() {
            tracing::debug!(
                conn,
                jobs = held.len(),
                "connection closed; requeueing its jobs"
            );
        }
        for uid in held {
            let ours = self
                .index
                .jobs
                .get(&uid)
                .is_some_and(|e| e.state == State::Active && e.worker.is_none());
            if !ours {
                continue;
            }
            self.release(uid);
            let error = json!({"type": "connection_closed",
                "message": "the connection that fetched the job closed before ACK or FAIL"});
            if let Err(e) =
                self.failed_attempt(txn, uid, error, Ended::Closed, Component::Scheduler)
            {
                tracing::error!(job = %uid, error = %e, "could not requeue");
            }
        }
    }

    /// Jobs of workers that stopped talking go back to the queue (ojs-worker-protocol §10).
    pub(in crate::engine) fn sweep_workers(&mut self, txn: &mut Txn) {
        let cutoff = self
            .now_ms()
            .saturating_sub(crate::time::ms(self.cfg.heartbeat_timeout));
        for (wid, held, connected, reserve) in self.workers.reap(cutoff) {
            if connected {
                let data = json!({"worker_id": &*wid, "reason": "error"});
                self.worker_stopped(txn, &wid, data);
            }
            // A worker that held nothing lost nothing (an HTTP worker that fetched, acked and
            // left without a heartbeat; a Faktory producer): not worth a warning.
            if held.is_empty() {
                tracing::debug!(worker = %wid, "worker gone quiet; it held no job");
                continue;
            }
            if reserve {
                // Faktory's rule: the jobs stay `active`, held by the worker's id, until their
                // visibility timeout (`reserve_for`); the worker may still ACK them.
                tracing::warn!(worker = %wid, jobs = held.len(),
                    "Faktory worker missed its heartbeats; its jobs stay reserved until their reserve_for");
                continue;
            }
            tracing::warn!(worker = %wid, jobs = held.len(), "worker missed its heartbeats; requeueing its jobs");
            for uid in held {
                let active = self
                    .index
                    .jobs
                    .get(&uid)
                    .is_some_and(|e| e.state == State::Active);
                if active {
                    let msg = format!("worker {wid} stopped sending heartbeats");
                    if let Err(e) = self.lost(txn, uid, "worker_death", msg) {
                        tracing::error!(job = %uid, error = %e, "could not requeue");
                    }
                }
            }
        }
    }
}
