//! Job lifecycle operations (ojs-core §6, §7): every state change goes through here, and
//! each one checks the transition table before touching anything.

mod timers;
pub(in crate::engine) mod unique;
pub(in crate::engine) use unique::PushWork;

use crate::engine::events::job_data;
use crate::engine::index::{Entry, TimerKind};
use crate::engine::metrics::Observe;
use crate::engine::txn::Txn;
use crate::engine::workers::Holder;
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::Component;
use crate::events::EventKind;
use crate::job::parts::Parts;
use crate::job::retry::RetryDecision;
use crate::job::validate::NewJob;
use crate::job::{format_ts, BackoffStrategy, OnExhaustion, State};
use serde_json::{json, Value};
use std::sync::Arc;
use uuid::Uuid;

/// Jobs one FETCH passes over per queue because their `rate_limit` key is at its limit.
const MAX_RATE_SKIPS: usize = 64;

pub(crate) fn parse_id(id: &str) -> OjsResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| not_found(id))
}

pub(crate) fn not_found(id: &str) -> OjsError {
    let shown: String = id.chars().take(64).collect();
    OjsError::new(ErrorCode::NotFound, format!("no job with id {shown}"))
}

fn wrong_state(id: Uuid, state: State, op: &str, needs: &str) -> OjsError {
    OjsError::new(
        ErrorCode::InvalidStateTransition,
        format!(
            "job {id} is {}; {op} needs a job that is {needs}",
            state.as_str()
        ),
    )
}

/// A client's new job, checked and encoded without the engine's state, so that it can be
/// done on the connection's thread (`EngineHandle::submit`).
pub struct Prepared {
    id: Uuid,
    pub new: NewJob,
    /// The encoded client part. Left out for unique jobs: admitting one may rewrite its
    /// `scheduled_at` (replace_except_schedule), and the engine encodes it afterwards.
    parts: Option<Parts>,
    /// The envelope's size on the wire, counted against `--max-queued-bytes`.
    pub len: usize,
    /// A job already stored under this id with the same client part answers the PUSH
    /// (`Command::Push::resend`).
    resend: bool,
}

impl Prepared {
    /// A validated job: a client's (the front end built it with
    /// [`Intake`](crate::engine::intake::Intake)) or one the server built itself from a
    /// [`Template`](crate::job::template) (a cron occurrence, a workflow step). `created_at`
    /// is set again from the engine's clock when the job is inserted.
    pub fn typed(new: NewJob, len: usize) -> OjsResult<Prepared> {
        let id = Uuid::parse_str(&new.job.id)
            .map_err(|_| OjsError::new(ErrorCode::InvalidPayload, "id must be a UUIDv7"))?;
        let parts = new.job.unique.is_none().then(|| Parts::of(&new.job));
        Ok(Prepared {
            id,
            new,
            parts,
            len,
            resend: false,
        })
    }
}

impl Prepared {
    /// Accept a resend of a job already stored (see [`Command::Push`]).
    pub fn resent(mut self, resend: bool) -> Prepared {
        self.resend = resend;
        self
    }
}

impl Engine {
    /// The checks a prepared job needs the engine's state for.
    pub(in crate::engine) fn validate_new(
        &self,
        p: OjsResult<Prepared>,
    ) -> OjsResult<(Uuid, Prepared)> {
        let p = p?;
        let id = p.id;
        if self.index.jobs.contains_key(&id) {
            return Err(OjsError::new(
                ErrorCode::DuplicateJob,
                format!("a job with id {id} already exists"),
            ));
        }
        self.check_queued_bytes(p.len as u64)?;
        self.check_queue_room(&p.new.job.queue)?;
        Ok((id, p))
    }

    /// Refuse a queue the engine does not know yet when it already knows `--max-queues`
    /// (0 = no limit), so no client can grow the index, listings and metrics with names.
    /// (A PUSHB checks each job against the queues known before it, so one batch may pass
    /// the limit by its new names.)
    pub(in crate::engine) fn check_queue_room(&self, name: &str) -> OjsResult<()> {
        let max = self.cfg.max_queues;
        let known = self.index.live_queues();
        if max > 0 && known >= max && self.index.find_queue(name).is_none() {
            return Err(OjsError::new(
                ErrorCode::QueueFull,
                format!(
                    "the server knows {known} queues and the limit (--max-queues) is {max}; \
                     a queue that has held no job for {} minutes is forgotten",
                    super::QUEUE_IDLE.as_secs() / 60
                ),
            ));
        }
        Ok(())
    }

    /// Refuse new jobs of `more` bytes when the jobs not yet finished already hold
    /// `--max-queued-bytes` (0 = no limit), so no client can fill the host's memory and disk
    /// within the per-job limit.
    pub(in crate::engine) fn check_queued_bytes(&self, more: u64) -> OjsResult<()> {
        let max = self.cfg.max_queued_bytes;
        let held = self.index.queued_bytes;
        if max > 0 && held.saturating_add(more) > max {
            return Err(OjsError::new(
                ErrorCode::QueueFull,
                format!(
                    "the server holds {held} bytes of unfinished jobs and the limit \
                     (--max-queued-bytes) is {max}; retry once jobs complete"
                ),
            ));
        }
        Ok(())
    }

    /// Store a validated job (PUSH and PUSHB themselves, with the uniqueness check, are
    /// in unique.rs).
    pub(in crate::engine) fn insert_new(&mut self, txn: &mut Txn, id: Uuid, p: Prepared) {
        let Prepared {
            new, parts, len, ..
        } = p;
        let NewJob { mut job, pending } = new;
        let now_ms = self.now_ms();
        let scheduled = job.scheduled_time().map(|t| t.timestamp_millis());
        let (state, timer) = match scheduled {
            _ if pending => (State::Pending, None),
            Some(at) if at > now_ms => (State::Scheduled, Some((at, TimerKind::Promote))),
            _ => (State::Available, None),
        };
        job.state = state;
        job.created_at = self.now;
        if state == State::Available {
            job.enqueued_at = Some(self.now);
            self.woke = true;
        }
        let queue = self.index.queue_id(&job.queue);
        let entry = Entry {
            state,
            queue,
            priority: job.priority,
            seq: self.index.take_seq(),
            timer,
            expires: job.expires_time().map(|t| t.timestamp_millis()),
            worker: None,
            timeout_ms: crate::time::timeout_ms(job.timeout_secs(self.cfg.default_timeout_secs)),
            bytes: u32::try_from(len).unwrap_or(u32::MAX),
        };
        self.index.insert(id, entry);
        match state {
            State::Available => {
                self.emit_job(
                    txn,
                    EventKind::JobEnqueued,
                    Component::Api,
                    &job,
                    json!({"priority": job.priority}),
                );
                self.metrics
                    .observe(&job.job_type, &job.queue, Observe::Enqueued);
            }
            State::Scheduled => {
                let at = json!({"scheduled_at": job.scheduled_at});
                self.emit_job(txn, EventKind::JobScheduled, Component::Api, &job, at);
            }
            _ => {} // pending: announced by ACTIVATE
        }
        // Cached decoded only if it may be fetched before the cache has turned over: behind
        // more available jobs than the cache holds it would be evicted unread, and caching
        // it would only cost the insertion, the eviction and the drop (batch pushes into a
        // deep backlog spent ~9% of the engine's time so).
        let keep = state == State::Available
            && self.index.queue(queue).count(State::Available) < txn.cache.capacity();
        txn.insert_job(id, job, parts, keep);
        self.stats.enqueued += 1;
        let now = self.now_ms();
        self.overview.pushed(now);
    }

    /// Claim up to `count` jobs for `by`, queues in the given order, best job first within
    /// a queue.
    pub(in crate::engine) fn fetch(
        &mut self,
        txn: &mut Txn,
        by: Holder<'_>,
        queues: &[String],
        count: usize,
    ) -> OjsResult<Vec<Uuid>> {
        for q in queues {
            if !crate::job::is_valid_queue(q) {
                return Err(OjsError::new(
                    ErrorCode::InvalidQueue,
                    format!("invalid queue name {q:?}"),
                ));
            }
        }
        let now_ms = self.now_ms();
        let mut claimed = Vec::new();
        for name in queues {
            let Some(qid) = self.index.find_queue(name) else {
                continue;
            };
            if self.index.queue(qid).paused {
                continue;
            }
            // A queue at its rate limit is skipped; its jobs stay available. So is a job
            // whose own `rate_limit` key is at its limit: the next one is tried, up to
            // MAX_RATE_SKIPS of them, and the skipped go back in their places.
            let mut held_back = Vec::new();
            while claimed.len() < count && self.index.queue_mut(qid).can_start(now_ms) {
                if held_back.len() >= MAX_RATE_SKIPS {
                    break;
                }
                let Some(id) = self.index.pop_available(qid) else {
                    break;
                };
                let expired = self
                    .index
                    .jobs
                    .get(&id)
                    .and_then(|e| e.expires)
                    .is_some_and(|at| at <= now_ms);
                let res = if expired {
                    self.expire(txn, id).map(|_| false)
                } else {
                    self.claim(txn, id, by)
                };
                match res {
                    Err(e) => {
                        // Put it back so the failed read does not lose the job.
                        self.index.set_state(id, State::Available, None);
                        for h in held_back {
                            self.index.unpop(qid, h);
                        }
                        return Err(e);
                    }
                    Ok(true) => {
                        self.index.queue_mut(qid).started(now_ms);
                        claimed.push(id);
                    }
                    Ok(false) if expired => {}
                    Ok(false) => held_back.push(id),
                }
            }
            for h in held_back {
                self.index.unpop(qid, h);
            }
            if claimed.len() >= count {
                break;
            }
        }
        Ok(claimed)
    }

    /// Claim an available job for a FETCH; `false` when its `rate_limit` key is at its
    /// limit (the job is left as it was).
    fn claim(&mut self, txn: &mut Txn, id: Uuid, by: Holder<'_>) -> OjsResult<bool> {
        let wid = by.wid();
        let now = self.now;
        let now_ms = self.now_ms();
        // Looked at, not touched: a job passed over is not written back. Lean where it can
        // be: a claim changes only the state record (engine/lean.rs).
        let limit = txn.job_lean(self.store.as_ref(), id, false)?.rate_limit();
        if let Some(p) = &limit {
            if !self.index.key_can_start(p, now_ms) {
                return Ok(false);
            }
        }
        let mut job = txn.job_lean(self.store.as_ref(), id, true)?;
        let wait_ms = job.claim(now, wid.map(|w| &**w));
        let extra = json!({"worker_id": job.worker_id(), "attempt": job.attempt()});
        let fields = job.fields();
        self.observe_job(fields.job_type, fields.queue, Observe::Started { wait_ms });
        let from = Component::Worker(wid.map(|w| &**w));
        let event = self.job_event(EventKind::JobStarted, from, &fields, &extra);
        txn.events.push(event);
        let timeout = self.index.jobs.get(&id).map(|e| e.timeout_ms).unwrap_or(0);
        self.index.set_state(
            id,
            State::Active,
            Some((self.now_ms().saturating_add(timeout), TimerKind::Visibility)),
        );
        if let Some(e) = self.index.jobs.get_mut(&id) {
            e.worker = wid.cloned();
        }
        match by {
            Holder::Worker(w) => self.workers.hold(w, id),
            Holder::Conn(c) => self.conn_holds.hold(c, id),
            Holder::Nobody => {}
        }
        if let Some(p) = &limit {
            self.index.key_started(id, p, now_ms);
        }
        self.started(txn, id);
        Ok(true)
    }

    /// The active job a worker reports on, after checking state and reservation owner.
    pub(in crate::engine) fn active_job(
        &self,
        id: &str,
        wid: Option<&Arc<str>>,
        op: &str,
    ) -> OjsResult<Uuid> {
        let uid = parse_id(id)?;
        let e = self.index.jobs.get(&uid).ok_or_else(|| not_found(id))?;
        if e.state != State::Active {
            return Err(wrong_state(uid, e.state, op, "active"));
        }
        self.check_holder(uid, e.worker.as_ref(), wid)?;
        Ok(uid)
    }

    /// ojs-core §7.3: only the worker holding a reservation may settle it, from whichever
    /// front end; a caller that names no worker (a connection without a `wid`, HTTP without
    /// `worker_id`) may settle only a job no worker holds by name (PROTOCOL.md §5.2).
    fn check_holder(
        &self,
        uid: Uuid,
        owner: Option<&Arc<str>>,
        wid: Option<&Arc<str>>,
    ) -> OjsResult<()> {
        if let Some(owner) = owner {
            if wid != Some(owner) {
                let caller = wid
                    .map(|w| format!("worker {w}"))
                    .unwrap_or_else(|| "a caller that names no worker".into());
                return Err(OjsError::new(
                    ErrorCode::NotOwner,
                    format!("job {uid} is reserved by worker {owner}, not {caller}"),
                ));
            }
        }
        Ok(())
    }

    /// `active_job`, and with `handed_out` also a job that was handed out and is
    /// `available` again only because the server restarted (or its reservation was lost)
    /// in the meantime: Faktory keeps reservations across restarts, so its workers ACK by
    /// jid after one (PROTOCOL.md §15). Never a job that was not handed out yet, and an
    /// active job only by its holder, as everywhere.
    fn active_job_held(
        &self,
        txn: &Txn,
        id: &str,
        wid: Option<&Arc<str>>,
        op: &str,
        handed_out: bool,
    ) -> OjsResult<Uuid> {
        let uid = parse_id(id)?;
        let e = self.index.jobs.get(&uid).ok_or_else(|| not_found(id))?;
        if handed_out && e.state == State::Available {
            let delivered = txn
                .job(self.store.as_ref(), uid)?
                .is_some_and(|j| j.attempt > 0);
            if delivered {
                return Ok(uid);
            }
        }
        self.active_job(id, wid, op)
    }

    fn release(&mut self, id: Uuid) {
        self.conn_holds.release(id);
        if let Some(w) = self.index.jobs.get_mut(&id).and_then(|e| e.worker.take()) {
            self.workers.release(&w, id);
        }
    }

    pub(in crate::engine) fn ack(
        &mut self,
        txn: &mut Txn,
        wid: Option<&Arc<str>>,
        id: &str,
        result: Option<Value>,
        handed_out: bool,
    ) -> OjsResult<()> {
        let uid = self.active_job_held(txn, id, wid, "ACK", handed_out)?;
        if let Some(r) = &result {
            let size = serde_json::to_vec(r).map(|v| v.len()).unwrap_or(0);
            if size > self.cfg.limits.max_job_bytes {
                return Err(OjsError::new(
                    ErrorCode::PayloadTooLarge,
                    format!(
                        "result is {size} bytes; the limit is {}",
                        self.cfg.limits.max_job_bytes
                    ),
                ));
            }
        }
        let now = self.now;
        // Lean where it can be, as the claim (engine/lean.rs).
        let mut job = txn.job_lean(self.store.as_ref(), uid, true)?;
        let shown = json!(result);
        let duration_ms = job.complete(now, result);
        let extra = json!({"duration_ms": duration_ms, "attempt": job.attempt(), "result": shown});
        let fields = job.fields();
        let done = Observe::Completed {
            duration_ms: duration_ms as f64,
        };
        self.observe_job(fields.job_type, fields.queue, done);
        let from = Component::Worker(wid.map(|w| &**w));
        let event = self.job_event(EventKind::JobCompleted, from, &fields, &extra);
        txn.events.push(event);
        if let Some(w) = wid {
            self.workers.completed(w);
        }
        let prune = self
            .now_ms()
            .saturating_add(crate::time::ms(self.cfg.retention));
        self.release(uid);
        self.index
            .set_state(uid, State::Completed, Some((prune, TimerKind::Prune)));
        self.stats.completed += 1;
        self.settled(txn, uid, State::Completed);
        Ok(())
    }

    pub(in crate::engine) fn fail(
        &mut self,
        txn: &mut Txn,
        wid: Option<&Arc<str>>,
        id: &str,
        error: Value,
        handed_out: bool,
        requeue: bool,
    ) -> OjsResult<()> {
        let uid = self.active_job_held(txn, id, wid, "FAIL", handed_out)?;
        self.stats.failed += 1;
        self.release(uid);
        let how = if requeue {
            Ended::Requeue
        } else {
            Ended::Failed
        };
        self.failed_attempt(txn, uid, error, how, Component::Worker(wid.map(|w| &**w)))
    }

    /// Record a failed attempt and apply the retry policy (ojs-retry §2-§6). An attempt that
    /// ended without a FAIL (`Ended::Lost`: visibility timeout, dead worker) goes straight
    /// back to `available` while attempts remain (ojs-core §6.3), as does a FAIL that asked
    /// to be requeued; an error with `retryable: false` discards the job at once.
    fn failed_attempt(
        &mut self,
        txn: &mut Txn,
        uid: Uuid,
        error: Value,
        how: Ended,
        from: Component<'_>,
    ) -> OjsResult<()> {
        // No verdict came: the policy's error filters and `retryable` do not apply.
        let lost = matches!(how, Ended::Lost | Ended::Closed);
        let now = self.now;
        let now_ms = self.now_ms();
        let sample: f64 = rand::random();
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        // Under Faktory's schedule a lost reservation is an ordinary failure, retried with
        // backoff and named as Faktory names it.
        let faktory = job.retry.backoff_strategy == BackoffStrategy::Faktory;
        let delete_when_exhausted = job.retry.on_exhaustion == OnExhaustion::Delete;
        let mut error = error;
        if let (true, Value::Object(m)) = (how == Ended::Lost && faktory, &mut error) {
            m.insert("type".into(), json!("ReservationExpired"));
        }
        // Straight back to `available` (when a retry is allowed): a lost reservation outside
        // Faktory's rules, a FAIL that asked to be requeued, or a closed connection's job.
        let immediate = (lost && !faktory) || matches!(how, Ended::Requeue | Ended::Closed);
        let not_retryable = error.get("retryable") == Some(&Value::Bool(false));
        let duration_ms = job.started_at.map(|t| (now - t).num_milliseconds());
        let etype = error
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut entry = error.clone();
        if let Value::Object(m) = &mut entry {
            // ojs-errors §6.1's fields beside ojsd's own (`timestamp`, `type`): the worker's
            // code if it sent one, else what ended the attempt.
            let code = match (m.get("code").and_then(Value::as_str), how) {
                (Some(c), _) => c.to_owned(),
                (None, _) if not_retryable => "NON_RETRYABLE_ERROR".into(),
                (None, Ended::Lost) => "HANDLER_TIMEOUT".into(),
                (None, _) => "HANDLER_ERROR".into(),
            };
            m.insert("code".into(), json!(code));
            m.insert("attempt".into(), json!(job.attempt));
            m.insert("timestamp".into(), json!(format_ts(now)));
            m.insert("occurred_at".into(), json!(format_ts(now)));
        }
        job.push_error(entry);
        job.error = Some(error.clone());
        job.worker_id = None;
        let decision = job.retry.decide(
            job.attempt,
            if lost { None } else { etype.as_deref() },
            sample,
        );
        // A cancelled workflow lets running jobs finish but starts no new attempt.
        let decision = match decision {
            RetryDecision::Retry { .. } if not_retryable && !lost => RetryDecision::Exhausted,
            RetryDecision::Retry { .. } if self.workflow_cancelled_for(uid) => {
                RetryDecision::Exhausted
            }
            d => d,
        };
        let attempt = job.attempt;
        let max_attempts = job.retry.max_attempts;
        let data = job_data(job);
        let code = etype.clone().unwrap_or_else(|| "error".into());
        let message = error.get("message").cloned().unwrap_or(json!(""));
        let mut event_error = json!({"code": code, "message": message,
            "retryable": matches!(decision, RetryDecision::Retry { .. })});
        if let Some(Value::Array(frames)) = error.get("backtrace") {
            let lines: Vec<&str> = frames.iter().filter_map(Value::as_str).collect();
            event_error["stack_trace"] = json!(lines.join("\n"));
        }
        let mut retry_at = None;
        match decision {
            RetryDecision::Retry { delay } if immediate => {
                let _ = delay;
                job.state = State::Available;
                job.started_at = None;
                job.enqueued_at = Some(now);
                self.index.set_state(uid, State::Available, None);
                self.woke = true;
            }
            RetryDecision::Retry { delay } => {
                let at = crate::time::add(now, delay);
                job.state = State::Retryable;
                job.next_retry_at = Some(at);
                // The history keeps when this failure's retry was due (Faktory's `next_at`
                // on the refetched job).
                if let Some(Value::Object(m)) = job.errors.last_mut() {
                    m.insert("next_retry_at".into(), json!(format_ts(at)));
                }
                retry_at = Some(at);
                self.index.set_state(
                    uid,
                    State::Retryable,
                    Some((at.timestamp_millis(), TimerKind::Promote)),
                );
            }
            RetryDecision::Exhausted => {
                job.state = State::Discarded;
                job.discarded_at = Some(now);
                job.completed_at = Some(now);
                if !delete_when_exhausted {
                    self.discarded(txn, uid, now_ms);
                }
            }
        }
        let delete = exhausted_by(&decision) && delete_when_exhausted;
        let exhausted = exhausted_by(&decision);
        self.observe(
            &data,
            Observe::Failed {
                duration_ms: duration_ms.map(|d| d as f64),
                discarded: exhausted,
            },
        );
        let failed = json!({"attempt": attempt, "error": event_error, "duration_ms": duration_ms});
        self.emit_with(txn, EventKind::JobFailed, from, data.clone(), failed);
        let short = json!({"code": code, "message": message});
        if let Some(at) = retry_at {
            let extra = json!({"attempt": attempt, "max_attempts": max_attempts,
                "next_retry_at": format_ts(at), "error": short});
            self.emit_with(txn, EventKind::JobRetrying, from, data, extra);
        } else if exhausted {
            let extra = json!({"total_attempts": attempt, "last_error": short});
            self.emit_with(txn, EventKind::JobDiscarded, from, data, extra);
            self.settled(txn, uid, State::Discarded);
            if delete {
                // `on_exhaustion: delete`: gone in the commit that records the failure.
                self.delete_job(txn, uid);
            }
        }
        Ok(())
    }

    /// Bookkeeping for a job that just became `discarded`: the dead-letter set. Its
    /// retention (age and count) is applied at the end of the batch (`prune_dead`).
    pub(in crate::engine) fn discarded(&mut self, _txn: &mut Txn, uid: Uuid, now_ms: i64) {
        self.index.set_state(uid, State::Discarded, None);
        self.index.add_dead(now_ms, uid);
    }

    pub(in crate::engine) fn delete_job(&mut self, txn: &mut Txn, uid: Uuid) {
        self.conn_holds.release(uid);
        if let Some(e) = self.index.remove(uid) {
            if let Some(w) = e.worker {
                self.workers.release(&w, uid);
            }
        }
        txn.delete_job(uid);
        self.deleted(txn, uid);
    }

    /// `expires_at` passed before the job started (ojs-core §5.2): discarded, never run.
    fn expire(&mut self, txn: &mut Txn, uid: Uuid) -> OjsResult<()> {
        let now = self.now;
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        let msg = format!(
            "expires_at {} passed before the job started",
            job.expires_at.as_deref().unwrap_or("?")
        );
        let error = json!({"type": "expired", "message": msg});
        job.error = Some(error.clone());
        job.push_error(error);
        job.state = State::Discarded;
        job.discarded_at = Some(now);
        job.completed_at = Some(now);
        let ttl_ms = job
            .expires_time()
            .map(|t| (t - job.created_at).num_milliseconds());
        let extra = json!({"created_at": format_ts(job.created_at), "expired_at": format_ts(now), "ttl_ms": ttl_ms});
        let data = job_data(job);
        let now_ms = self.now_ms();
        self.discarded(txn, uid, now_ms);
        self.emit_with(
            txn,
            EventKind::JobExpired,
            Component::Scheduler,
            data,
            extra,
        );
        self.settled(txn, uid, State::Discarded);
        Ok(())
    }

    pub(in crate::engine) fn cancel(
        &mut self,
        txn: &mut Txn,
        uid: Uuid,
        actor: Option<&Arc<str>>,
    ) -> OjsResult<()> {
        let state = self
            .index
            .jobs
            .get(&uid)
            .ok_or_else(|| not_found(&uid.hyphenated().to_string()))?
            .state;
        if state.is_terminal() {
            return Ok(()); // idempotent (ojs-core §7.6 rule 4)
        }
        let now = self.now;
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        job.state = State::Cancelled;
        job.cancelled_at = Some(now);
        job.worker_id = None;
        let data = job_data(job);
        let by = actor
            .map(|a| format!("worker:{a}"))
            .unwrap_or_else(|| "api".into());
        self.emit_with(
            txn,
            EventKind::JobCancelled,
            Component::Api,
            data,
            json!({"cancelled_by": by}),
        );
        let prune = self
            .now_ms()
            .saturating_add(crate::time::ms(self.cfg.retention));
        self.release(uid);
        self.index
            .set_state(uid, State::Cancelled, Some((prune, TimerKind::Prune)));
        self.settled(txn, uid, State::Cancelled);
        Ok(())
    }

    pub(in crate::engine) fn activate(&mut self, txn: &mut Txn, id: &str) -> OjsResult<()> {
        let (uid, state) = self.lookup(id)?;
        if state != State::Pending {
            return Err(wrong_state(uid, state, "ACTIVATE", "pending"));
        }
        self.make_available(txn, uid, Some(Component::Api))
    }

    /// scheduled/retryable/pending/discarded → available. `announce` emits `job.enqueued`:
    /// a job placed into a queue is announced, a retry coming due is not (ojs-events §10.2
    /// goes from `job.retrying` straight to `job.started`).
    pub(in crate::engine) fn make_available(
        &mut self,
        txn: &mut Txn,
        uid: Uuid,
        announce: Option<Component<'_>>,
    ) -> OjsResult<()> {
        let now = self.now;
        let job = txn.job_mut(self.store.as_ref(), uid)?;
        job.state = State::Available;
        job.enqueued_at = Some(now);
        job.next_retry_at = None;
        let data = announce.map(|_| (job_data(job), json!({"priority": job.priority})));
        self.index.set_state(uid, State::Available, None);
        self.woke = true;
        if let (Some(from), Some((data, extra))) = (announce, data) {
            self.observe(&data, Observe::Enqueued);
            self.emit_with(txn, EventKind::JobEnqueued, from, data, extra);
        }
        Ok(())
    }

    /// A job's id and current state, or NOT_FOUND.
    pub(in crate::engine) fn lookup(&self, id: &str) -> OjsResult<(Uuid, State)> {
        let uid = parse_id(id)?;
        let e = self.index.jobs.get(&uid).ok_or_else(|| not_found(id))?;
        Ok((uid, e.state))
    }

    pub(in crate::engine) fn job_info(&self, id: &str) -> OjsResult<Uuid> {
        self.lookup(id).map(|(uid, _)| uid)
    }
}

fn exhausted_by(d: &RetryDecision) -> bool {
    matches!(d, RetryDecision::Exhausted)
}

/// How an attempt ended without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// FAIL: retried after the policy's backoff.
    Failed,
    /// FAIL asking to be requeued: retried at once.
    Requeue,
    /// No ACK or FAIL came (visibility timeout, dead worker).
    Lost,
    /// The connection without a worker id that fetched it closed before ACK or FAIL: the
    /// attempt counts, and the job is back in its queue at once when the policy allows
    /// another, under every backoff strategy (PROTOCOL.md §5.4).
    Closed,
}
