//! Heartbeats, INFO, the QUEUE command (pause/resume here; list, stats and purge in
//! queues.rs) and worker directives. The dead-letter set is in dead.rs.

mod bulk;
mod dead;
mod limits;
mod mutate;
mod overview;
mod queues;

pub(in crate::engine) use bulk::{Bulk, BulkWork};
pub(in crate::engine) use overview::Overview;

use crate::engine::api::{self, Answer, Answered};
use crate::engine::events::job_data;
use crate::engine::index::TimerKind;
use crate::engine::request::{BeatReport, QueueCmd, WorkerDirective};
use crate::engine::txn::{Out, Txn};
use crate::engine::Engine;
use crate::error::OjsResult;
use crate::events::Component;
use crate::events::EventKind;
use crate::job::{format_ts, State};
use crate::store::Space;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::oneshot;

pub(in crate::engine) const PAUSED_PREFIX: &str = "paused/";
pub(in crate::engine) use limits::LIMIT_PREFIX;

impl Engine {
    /// BEAT: a sign of life that also extends the reservations of every job the worker holds
    /// (ojs-retry §9.3), answered with the pending directive if there is one.
    pub(in crate::engine) fn beat(
        &mut self,
        txn: &mut Txn,
        wid: &str,
        _reported: Option<&[String]>,
        report: BeatReport,
    ) -> Answer {
        let w: Arc<str> = Arc::from(wid);
        let now_ms = self.now_ms();
        self.workers.touch(&w, now_ms);
        if let Some(kb) = report.rss_kb {
            self.workers.set_rss_kb(wid, kb);
        }
        // A worker that went quiet (or is terminating) on its own is treated as if an
        // operator had said so: no new jobs, and its BEATs answer that state.
        if let Some(d) = report.state {
            if self.workers.directive(wid) != Some(d) {
                let _ = self.direct_worker(txn, wid, d);
            }
        }
        // A Faktory worker's reservations run for their `reserve_for` whatever its beats say,
        // as on Faktory (PROTOCOL.md §15).
        let held = if self.workers.reserves(wid) {
            Vec::new()
        } else {
            self.workers.held(wid)
        };
        for id in &held {
            let Some(e) = self.index.jobs.get(id) else {
                continue;
            };
            if e.state != State::Active {
                continue;
            }
            let due = now_ms.saturating_add(e.timeout_ms);
            self.index
                .set_timer(*id, Some((due, TimerKind::Visibility)));
            if let Ok(Some(job)) = txn.job(self.store.as_ref(), *id) {
                let until = chrono::DateTime::from_timestamp_millis(due).map(format_ts);
                let extra =
                    json!({"worker_id": wid, "attempt": job.attempt, "visible_until": until});
                self.emit_with(
                    txn,
                    EventKind::JobHeartbeat,
                    Component::Worker(Some(wid)),
                    job_data(&job),
                    extra,
                );
            }
        }
        let directive = self.workers.directive(wid);
        let state = directive_name(directive);
        let queues = self
            .workers
            .get(wid)
            .and_then(|r| r.info.get("queues").cloned())
            .unwrap_or(json!([]));
        if self.worker_events(wid) {
            let data = json!({"worker_id": wid, "active_jobs": held.len(), "queues": queues, "state": state});
            self.emit_plain(
                txn,
                EventKind::WorkerHeartbeat,
                Component::Worker(Some(wid)),
                wid,
                data,
            );
        }
        match directive {
            None => Answer::Ok,
            Some(d) => Answer::Directive(d),
        }
    }

    /// HELLO with a `wid`: the first connection of a worker announces it.
    pub(in crate::engine) fn worker_hello(
        &mut self,
        txn: &mut Txn,
        wid: Arc<str>,
        info: Value,
        reserve: bool,
    ) {
        let now = self.now_ms();
        let queues = info.get("queues").cloned().unwrap_or(json!([]));
        let concurrency = info.get("concurrency").cloned().unwrap_or(json!(1));
        let hostname = info.get("hostname").cloned();
        if self.workers.register(wid.clone(), info, now, reserve) && self.worker_events(&wid) {
            let data = json!({"worker_id": &*wid, "queues": queues, "concurrency": concurrency, "hostname": hostname});
            self.emit_plain(
                txn,
                EventKind::WorkerStarted,
                Component::Worker(Some(&wid)),
                &wid,
                data,
            );
        }
    }

    pub(in crate::engine) fn worker_gone(&mut self, txn: &mut Txn, wid: Arc<str>) {
        if let Some((completed, started)) = self.workers.disconnect(&wid) {
            let data = json!({"worker_id": &*wid, "reason": "shutdown", "jobs_completed": completed,
                "uptime_ms": (self.now_ms() - started).max(0)});
            self.worker_stopped(txn, &wid, data);
        }
    }

    /// Whether this engine emits `wid`'s own events (`worker.started`, `.heartbeat`,
    /// `.quiet`, `.stopped`). A worker is known to every partition's engine (cluster mode:
    /// each HELLO, BEAT and hang-up reaches them all), and one of them speaks for it: the
    /// partition its id hashes to, as a queue name would. So a stream over every partition
    /// has each once.
    pub(in crate::engine) fn worker_events(&self, wid: &str) -> bool {
        let p = self.cfg.partition;
        p.count <= 1 || crate::engine::partition::partition_of(wid, p.count) == p.index
    }

    /// `worker.stopped` (ojs-events §3), from the worker itself.
    pub(in crate::engine) fn worker_stopped(&mut self, txn: &mut Txn, wid: &str, data: Value) {
        if !self.worker_events(wid) {
            return;
        }
        self.emit_plain(
            txn,
            EventKind::WorkerStopped,
            Component::Worker(Some(wid)),
            wid,
            data,
        );
    }

    pub(in crate::engine) fn direct_worker(
        &mut self,
        txn: &mut Txn,
        wid: &str,
        d: WorkerDirective,
    ) -> OjsResult<()> {
        let before = self.workers.directive(wid);
        self.workers.direct(wid, d)?;
        if d == WorkerDirective::Quiet && before.is_none() && self.worker_events(wid) {
            let active = self.workers.held(wid).len();
            let data = json!({"worker_id": wid, "active_jobs": active});
            self.emit_plain(txn, EventKind::WorkerQuiet, Component::Api, wid, data);
        }
        Ok(())
    }

    /// PROGRESS from the worker holding a job (ojs-events `job.progress`).
    pub(in crate::engine) fn progress(
        &mut self,
        txn: &mut Txn,
        wid: Option<&Arc<str>>,
        id: &str,
        percent: f64,
        message: Option<String>,
    ) -> OjsResult<()> {
        let uid = self.active_job(id, wid, "PROGRESS")?;
        let job = txn
            .job(self.store.as_ref(), uid)?
            .ok_or_else(|| crate::engine::jobs::not_found(id))?;
        let extra = json!({"worker_id": job.worker_id, "attempt": job.attempt,
            "progress_percent": percent, "progress_message": message});
        self.emit_with(
            txn,
            EventKind::JobProgress,
            Component::Worker(wid.map(|w| &**w)),
            job_data(&job),
            extra,
        );
        Ok(())
    }

    pub(in crate::engine) fn info(&self) -> Answer {
        let queues = self
            .index
            .queues
            .iter()
            .filter(|q| q.listed())
            .map(|q| api::QueueCounts {
                name: q.name.clone(),
                paused: q.paused,
                counts: counts_of(q),
            })
            .collect();
        let workers = self
            .workers
            .iter()
            .map(|(wid, w)| api::InfoWorker {
                wid: wid.to_string(),
                state: directive_name(w.directive),
                last_seen: chrono::DateTime::from_timestamp_millis(w.last_seen).map(format_ts),
                active_jobs: w.held.len(),
                info: w.info.clone(),
            })
            .collect();
        Answer::Info(Box::new(api::Info {
            server: api::ServerInfo {
                name: "ojsd",
                version: env!("CARGO_PKG_VERSION"),
                now: format_ts(self.now),
                uptime_s: self.started.elapsed().as_secs(),
                connections: crate::engine::connections_open(&self.connections),
                store: self.store.name(),
                store_bytes: self.store.size_on_disk().unwrap_or(0),
            },
            totals: api::Totals {
                enqueued: self.stats.enqueued,
                completed: self.stats.completed,
                failed: self.stats.failed,
                jobs: self.index.jobs.len(),
                dead: self.index.dead.len(),
                unique_keys: self.index.unique.jobs(),
                waiting_fetches: self.waiters.len(),
            },
            queues: api::QueueCountsMap(queues),
            workers,
        }))
    }

    pub(in crate::engine) fn queue_cmd(
        &mut self,
        txn: &mut Txn,
        cmd: QueueCmd,
        actor: Option<&Arc<str>>,
        reply: oneshot::Sender<Answered>,
    ) {
        let answer = match cmd {
            QueueCmd::Pause(n) => self.pause_queues(txn, n, true, actor).map(|_| Answer::Ok),
            QueueCmd::Resume(n) => self.pause_queues(txn, n, false, actor).map(|_| Answer::Ok),
            QueueCmd::Remove(n) => match self.start_remove(n) {
                Ok((work, ids)) => {
                    return self.start_bulk(txn, Bulk::new(BulkWork::Remove(work), ids, reply))
                }
                Err(e) => Err(e),
            },
            QueueCmd::Limit { queue, limit } => self.set_queue_limit(txn, &queue, limit),
            QueueCmd::Latency(n) => self.queue_latency(txn, n),
            QueueCmd::List => Ok(self.queue_list()),
            QueueCmd::Stats(name) => self.queue_stats(txn, &name),
            // Deleting many jobs runs in slices and answers when done (bulk.rs).
            QueueCmd::Purge {
                queue,
                states,
                older_than,
            } => match self.start_purge(&queue, states, older_than) {
                Ok((work, ids)) => {
                    return self.start_bulk(txn, Bulk::new(BulkWork::Purge(work), ids, reply))
                }
                Err(e) => Err(e),
            },
        };
        txn.reply(reply, Out::Answer(answer));
    }

    /// QUEUE PAUSE/RESUME: durable (a meta record per paused queue), announced with
    /// `queue.paused` / `queue.resumed` when the state changes.
    fn pause_queues(
        &mut self,
        txn: &mut Txn,
        names: Vec<String>,
        pause: bool,
        actor: Option<&Arc<str>>,
    ) -> OjsResult<()> {
        let names = self.expand_queues(names)?;
        let by = actor
            .map(|a| format!("worker:{a}"))
            .unwrap_or_else(|| "api".into());
        for name in names {
            self.check_queue_room(&name)?;
            let qid = self.index.queue_id(&name);
            if self.index.queue(qid).paused == pause {
                continue;
            }
            self.index.queue_mut(qid).paused = pause;
            let (kind, field) = if pause {
                (EventKind::QueuePaused, "paused_by")
            } else {
                (EventKind::QueueResumed, "resumed_by")
            };
            let data = json!({"queue": &name, field: &by});
            self.emit_plain(txn, kind, Component::Api, &name, data);
            let key = format!("{PAUSED_PREFIX}{name}");
            if pause {
                txn.batch.put(Space::Meta, key.as_bytes(), vec![1]);
            } else {
                txn.batch.delete(Space::Meta, key.as_bytes());
                self.woke = true;
            }
        }
        Ok(())
    }
}

pub(in crate::engine) use api::directive_name;

/// A queue's jobs per state.
fn counts_of(q: &crate::engine::index::Queue) -> api::StateCounts {
    let mut c = api::StateCounts::default();
    for (n, s) in c.0.iter_mut().zip(State::ALL) {
        *n = q.count(s);
    }
    c
}
