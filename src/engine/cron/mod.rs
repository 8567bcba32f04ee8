//! Cron jobs at run time (ojs-cron §6-§9). Registrations live in `c/<name>`, together
//! with their firing state (next occurrence, last run, run count, the jobs still running).
//! An occurrence's job, its events and the updated record go into the same batch, so a
//! fire happens exactly once: after a crash either all of it is on disk or none of it is,
//! and an occurrence not on disk is still due when the engine comes back.
//!
//! Due occurrences are applied each loop turn after the timers, so `CLOCK ADVANCE` replies
//! only once every fire it caused is committed. When more than one occurrence of an entry
//! is due (the engine was down, paused, or the clock jumped), one catch-up job fires for
//! the latest and the others are reported together in one `cron.skipped` (`missed`).

mod entry;

use super::txn::{Out, Txn};
use super::Engine;
use crate::cron::{CronDef, Kind, Overlap};
use crate::engine::api::{self, Answer};
use crate::engine::request::CronCmd;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::Component;
use crate::events::EventKind;
use crate::job::{format_ts, State};
use crate::store::{Space, StoreError};
use chrono::{DateTime, Utc};
use entry::{ms_time, Entry, LOCAL_FORMAT};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// Occurrences walked through when catching up, before jumping straight to the present.
const MAX_CATCH_UP_SCAN: usize = 1000;
/// `enqueue` policy: warn when more occurrences than this wait behind the running one.
const QUEUED_WARNING: usize = 2;

#[derive(Default)]
pub(super) struct CronState {
    entries: BTreeMap<String, Entry>,
    /// (next occurrence in ms, name) of every enabled entry.
    due: BTreeSet<(i64, String)>,
    /// Which entry a running job belongs to.
    by_job: HashMap<Uuid, String>,
}

fn reply(a: Answer) -> Out {
    Out::Answer(Ok(a))
}

fn not_found(name: &str) -> OjsError {
    let shown: String = name.chars().take(64).collect();
    OjsError::new(ErrorCode::NotFound, format!("no cron job named {shown:?}"))
}

impl Engine {
    /// When the next cron occurrence is due (engine-clock ms), for the loop's sleep.
    pub(super) fn next_cron_due(&self) -> Option<i64> {
        self.cron.due.first().map(|(at, _)| *at)
    }

    fn live(&self, id: &Uuid) -> bool {
        self.index
            .jobs
            .get(id)
            .is_some_and(|e| !e.state.is_terminal())
    }

    pub(super) fn cron_cmd(&mut self, txn: &mut Txn, cmd: CronCmd) -> OjsResult<Out> {
        match cmd {
            CronCmd::Add(def) => self.cron_add(txn, *def),
            CronCmd::List {
                enabled,
                limit,
                offset,
            } => {
                let all: Vec<&Entry> = (self.cron.entries.values())
                    .filter(|e| enabled.is_none_or(|want| e.def.enabled == want))
                    .collect();
                let page: Vec<Value> = all
                    .iter()
                    .skip(offset)
                    .take(limit)
                    .map(|e| e.view())
                    .collect();
                let more = offset.saturating_add(page.len()) < all.len();
                Ok(reply(Answer::CronPage(api::CronPage {
                    count: page.len(),
                    cron_jobs: page,
                    pagination: api::Pagination {
                        total: all.len(),
                        limit,
                        offset,
                        has_more: more,
                    },
                })))
            }
            CronCmd::Get(name) => {
                let e = self
                    .cron
                    .entries
                    .get(&name)
                    .ok_or_else(|| not_found(&name))?;
                Ok(reply(Answer::CronJob(api::CronJob {
                    cron_job: e.view(),
                    created: None,
                })))
            }
            CronCmd::Del(name) => {
                self.cron_del(txn, &name)?;
                Ok(reply(Answer::Ok))
            }
            CronCmd::Remove(name) => {
                let cron_job = self.cron_del(txn, &name)?.view();
                Ok(reply(Answer::CronJob(api::CronJob {
                    cron_job,
                    created: None,
                })))
            }
            CronCmd::Enable(name) => self.cron_toggle(txn, &name, true),
            CronCmd::Disable(name) => self.cron_toggle(txn, &name, false),
        }
    }

    /// CRON DEL: forget the entry (jobs it already enqueued are not touched); the removed
    /// entry is handed back for the answers that show it.
    fn cron_del(&mut self, txn: &mut Txn, name: &str) -> OjsResult<Entry> {
        let e = self
            .cron
            .entries
            .remove(name)
            .ok_or_else(|| not_found(name))?;
        if let Some(k) = e.due_key() {
            self.cron.due.remove(&k);
        }
        for id in &e.jobs {
            self.cron.by_job.remove(id);
        }
        txn.batch.delete(Space::Cron, name.as_bytes());
        Ok(e)
    }

    /// Take an entry out of the live set (to change it or evaluate it).
    fn cron_take(&mut self, name: &str) -> Option<Entry> {
        let e = self.cron.entries.remove(name)?;
        if let Some(k) = e.due_key() {
            self.cron.due.remove(&k);
        }
        Some(e)
    }

    /// Put an entry (back) into the live set, writing its record when `write`.
    fn cron_put(&mut self, txn: &mut Txn, e: Entry, write: bool) {
        if write {
            txn.batch
                .put(Space::Cron, e.def.name.as_bytes(), e.encode());
        }
        if let Some(k) = e.due_key() {
            self.cron.due.insert(k);
        }
        self.cron.entries.insert(e.def.name.clone(), e);
    }

    /// CRON ADD: register, or update an existing registration (upsert, ojs-cron §8.1).
    /// Register a validated registration ([`Intake::cron`](crate::engine::intake::Intake)).
    fn cron_add(&mut self, txn: &mut Txn, def: CronDef) -> OjsResult<Out> {
        let now = self.now;
        let schedule = crate::cron::Schedule::parse(&def.cron, &def.timezone)
            .map_err(|e| crate::cron::def::schedule_error(e, &def.cron))?;
        let anchor = ms_time(now.timestamp_millis()).unwrap_or(now);
        if schedule.next_after(now, false, anchor).is_none() {
            return Err(OjsError::new(
                ErrorCode::InvalidCronExpression,
                format!("cron {:?} never fires: no date matches it", def.cron),
            ));
        }
        let old = self.cron_take(&def.name);
        let created = old.is_none();
        let mut e = match old {
            None => Entry {
                def,
                schedule,
                created_at: now,
                anchor,
                next: None,
                last_run_at: None,
                run_count: 0,
                jobs: Vec::new(),
            },
            Some(old) => {
                // Re-registering the same schedule (declarative start-up registration)
                // keeps its next occurrence, so a catch-up due right now is not lost.
                let same = old.def.cron == def.cron && old.def.timezone == def.timezone;
                let keep = same && old.def.enabled;
                Entry {
                    def,
                    schedule,
                    created_at: old.created_at,
                    anchor: if same { old.anchor } else { anchor },
                    next: if keep { old.next } else { None },
                    last_run_at: old.last_run_at,
                    run_count: old.run_count,
                    jobs: old.jobs,
                }
            }
        };
        e.next = match (e.def.enabled, e.next) {
            (false, _) => None,
            (true, Some(n)) => Some(n),
            (true, None) => e.schedule.next_after(now, false, e.anchor),
        };
        let view = e.view();
        self.cron_put(txn, e, true);
        Ok(reply(Answer::CronJob(api::CronJob {
            cron_job: view,
            created: Some(created),
        })))
    }

    /// CRON ENABLE / DISABLE. Enabling schedules from now: occurrences that fell in the
    /// disabled period are not caught up.
    fn cron_toggle(&mut self, txn: &mut Txn, name: &str, on: bool) -> OjsResult<Out> {
        let mut e = self.cron_take(name).ok_or_else(|| not_found(name))?;
        let change = e.def.enabled != on;
        if change {
            e.def.enabled = on;
            e.next = if on {
                e.schedule.next_after(self.now, false, e.anchor)
            } else {
                None
            };
        }
        let view = e.view();
        self.cron_put(txn, e, change);
        Ok(reply(Answer::CronJob(api::CronJob {
            cron_job: view,
            created: None,
        })))
    }

    /// Apply every due occurrence.
    pub(super) fn run_cron(&mut self, txn: &mut Txn) {
        let now_ms = self.now_ms();
        // Each entry is evaluated at most once a turn: afterwards its next occurrence is
        // in the future (or it has none).
        for _ in 0..self.cron.entries.len() {
            let Some((at, name)) = self.cron.due.first().cloned() else {
                return;
            };
            if at > now_ms {
                return;
            }
            let Some(e) = self.cron_take(&name) else {
                self.cron.due.remove(&(at, name));
                continue;
            };
            let e = self.cron_evaluate(txn, e);
            self.cron_put(txn, e, true);
        }
    }

    /// Walk the due occurrences of one entry: report DST gaps, fire once (the latest due
    /// occurrence), report the rest as missed, and move `next` into the future.
    fn cron_evaluate(&mut self, txn: &mut Txn, mut e: Entry) -> Entry {
        let now = self.now;
        let now_ms = self.now_ms();
        let Some(mut cur) = e.next else {
            return e;
        };
        let mut gaps = Vec::new();
        let (mut first, mut missed_last, mut last, mut count) = (None, None, None, 0u64);
        let mut truncated = false;
        let mut scanned = 0;
        e.next = loop {
            match cur.kind {
                Kind::Fire => {
                    first.get_or_insert(cur.at);
                    missed_last = last;
                    last = Some(cur.at);
                    count += 1;
                }
                Kind::DstSkip => gaps.push(cur),
            }
            scanned += 1;
            let next = e
                .schedule
                .next_after(cur.at, cur.kind == Kind::DstSkip, e.anchor);
            match next {
                Some(n) if n.at.timestamp_millis() <= now_ms => {
                    if scanned >= MAX_CATCH_UP_SCAN {
                        truncated = true;
                        break e.schedule.next_after(now, false, e.anchor);
                    }
                    cur = n;
                }
                other => break other,
            }
        };
        for g in gaps {
            let local = g.local.map(|l| l.format(LOCAL_FORMAT).to_string());
            self.cron_skipped(txn, &e, "dst_skip", g.at, json!({"local_time": local}));
        }
        if let (Some(first), true) = (first, count > 1) {
            let extra = json!({"missed_count": count - 1, "last_missed_at": missed_last.map(format_ts),
                "truncated": truncated});
            self.cron_skipped(txn, &e, "missed", first, extra);
        }
        if let Some(at) = last {
            self.cron_fire(txn, &mut e, at);
        }
        e
    }

    /// One occurrence comes due: apply the overlap policy and enqueue.
    fn cron_fire(&mut self, txn: &mut Txn, e: &mut Entry, scheduled: DateTime<Utc>) {
        // A job that finished without passing through `settled` is not running either.
        let (live, done): (Vec<Uuid>, Vec<Uuid>) = e.jobs.iter().partition(|id| self.live(id));
        for id in done {
            self.cron.by_job.remove(&id);
        }
        e.jobs = live;
        match (e.def.overlap, e.jobs.last()) {
            (Overlap::Skip, Some(prev)) => {
                let extra =
                    json!({"existing_job_id": prev.to_string(), "active_job_id": prev.to_string()});
                self.cron_skipped(txn, e, "overlap_skip", scheduled, extra);
                return;
            }
            (Overlap::CancelPrevious, Some(_)) => {
                for id in std::mem::take(&mut e.jobs) {
                    self.cron.by_job.remove(&id);
                    if let Err(err) = self.cancel(txn, id, None) {
                        tracing::warn!(cron = %e.def.name, job = %id, error = %err, "could not cancel the previous run");
                    }
                }
            }
            _ => {}
        }
        let pending = e.def.overlap == Overlap::Enqueue && !e.jobs.is_empty();
        let (job, len) = e.def.instance(scheduled, pending, self.now);
        match self.push_typed(txn, job, len) {
            Ok(id) => {
                // A `unique` template may answer with a job that already exists.
                if !e.jobs.contains(&id) {
                    e.jobs.push(id);
                }
                self.cron.by_job.insert(id, e.def.name.clone());
                e.run_count += 1;
                e.last_run_at = Some(scheduled);
                if pending && e.jobs.len() > QUEUED_WARNING + 1 {
                    tracing::warn!(cron = %e.def.name, queued = e.jobs.len() - 1,
                        "occurrences are piling up behind a run that has not finished");
                }
                let mut data = e.event_data(scheduled);
                let queue = txn.touched(id).map(|j| j.queue.clone());
                data.insert("job_id".into(), json!(id.to_string()));
                data.insert("queue".into(), json!(queue));
                data.insert("run_count".into(), json!(e.run_count));
                data.insert("actual_time".into(), json!(format_ts(self.now)));
                self.emit(
                    txn,
                    EventKind::CronTriggered,
                    Component::Cron,
                    &e.def.name,
                    data,
                );
            }
            Err(err) => {
                tracing::warn!(cron = %e.def.name, error = %err, "the cron job's job could not be enqueued");
                let extra = json!({"error": {"code": err.code.as_str(), "message": err.message}});
                self.cron_skipped(txn, e, "enqueue_failed", scheduled, extra);
            }
        }
    }

    fn cron_skipped(
        &mut self,
        txn: &mut Txn,
        e: &Entry,
        reason: &str,
        at: DateTime<Utc>,
        extra: Value,
    ) {
        let mut data = e.event_data(at);
        data.insert("reason".into(), json!(reason));
        if let Value::Object(m) = extra {
            data.extend(m);
        }
        self.emit(
            txn,
            EventKind::CronSkipped,
            Component::Cron,
            &e.def.name,
            data,
        );
    }

    /// A job reached a terminal state: if a cron job enqueued it, it is no longer running.
    /// Under `enqueue`, the next waiting occurrence is released.
    pub(super) fn cron_settled(&mut self, txn: &mut Txn, uid: Uuid) {
        let Some(name) = self.cron.by_job.remove(&uid) else {
            return;
        };
        let Some(e) = self.cron.entries.get_mut(&name) else {
            return;
        };
        e.jobs.retain(|j| *j != uid);
        let index = &self.index;
        let state = |id: &Uuid| index.jobs.get(id).map(|x| x.state);
        let mut release = None;
        if e.def.overlap == Overlap::Enqueue {
            let running = e
                .jobs
                .iter()
                .any(|j| state(j).is_some_and(|s| !s.is_terminal() && s != State::Pending));
            if !running {
                release = e
                    .jobs
                    .iter()
                    .copied()
                    .find(|j| state(j) == Some(State::Pending));
            }
        }
        txn.batch.put(Space::Cron, name.as_bytes(), e.encode());
        if let Some(id) = release {
            if let Err(err) = self.make_available(txn, id, Some(Component::Cron)) {
                tracing::warn!(cron = %name, job = %id, error = %err, "could not release the next occurrence");
            }
        }
    }

    /// Load registrations at start-up (after the job index, which tells which of their
    /// jobs are still running).
    pub(super) fn rebuild_cron(&mut self) -> Result<(), StoreError> {
        let mut records = Vec::new();
        self.store.scan(Space::Cron, &mut |k, v| {
            records.push((String::from_utf8_lossy(k).into_owned(), v.to_vec()));
            true
        })?;
        let now = self.clock.now();
        for (name, bytes) in records {
            let mut e = match Entry::decode(&bytes, now, &self.cfg.limits) {
                Ok(e) if e.def.name == name => e,
                Ok(_) => {
                    tracing::error!(cron = %name, "cron record names another job; skipped");
                    continue;
                }
                Err(err) => {
                    tracing::error!(cron = %name, error = %err, "unreadable cron record; it is kept but will not fire");
                    continue;
                }
            };
            e.jobs.retain(|id| self.live(id));
            for id in &e.jobs {
                self.cron.by_job.insert(*id, name.clone());
            }
            if e.def.enabled && e.next.is_none() {
                e.next = e.schedule.next_after(now, false, e.anchor);
            }
            if let Some(k) = e.due_key() {
                self.cron.due.insert(k);
            }
            self.cron.entries.insert(name, e);
        }
        Ok(())
    }
}
