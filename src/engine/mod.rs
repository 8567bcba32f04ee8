//! The single-writer engine. One thread owns the index, the timers and the store; every
//! connection sends it commands over a channel. It drains a batch of commands, applies them
//! in memory, commits all their writes to the store at once (durably), and only then
//! replies. Timers run in the same loop, so nothing else ever mutates state.

mod admin;
pub mod api;
mod clock;
mod cluster;
mod commit;
mod compact;
mod config;
mod cron;
mod events;
mod handle;
mod hooks;
mod host;
mod inbox;
mod index;
pub mod intake;
mod jobs;
mod lean;
pub mod metrics;
pub mod partition;
mod rebuild;
mod record;
pub mod request;
mod slow;
mod stored;
mod subscription;
#[cfg(test)]
mod test_cmds;
#[cfg(test)]
mod test_store;
mod throughput;
mod txn;
mod waiters;
mod workers;
mod workflow;

pub use api::{Answer, Answered, JobView};
pub use clock::Clock;
pub use config::{
    compact_after_deletes_default, Config, DEFAULT_MAX_QUEUED_BYTES, DEFAULT_MAX_QUEUES,
    DEFAULT_OUTBOX_MEMORY, QUEUE_IDLE,
};
pub use events::{EventConfig, Page};
pub use handle::{unavailable, EngineHandle, Shared};
pub use host::{Ended, Host};
pub use subscription::{PageSource, Subscription};

/// The stored job record formats, for the `record` fuzz target (`fuzz/`) only: not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::record::state::{decode_state, encode_state, StateRecord};
    pub use super::record::{
        decode_job_record, decode_record, encode_job_record, encode_record, IndexHeader, JobRecord,
        Record,
    };
}

use crate::engine::request::Command;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use index::Index;
use jobs::Prepared;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use txn::{Out, Txn};
use waiters::{Fetching, Waiter};
use workers::{ConnHolds, Workers};

/// Which TCP connection without a worker id a command came from, so the jobs it fetches
/// can be put back when it closes ([`EngineHandle::connection_closed`]).
pub type ConnId = u64;

/// One command from a connection, with the worker id its HELLO gave (if any).
struct Request {
    wid: Option<Arc<str>>,
    /// The connection, when it has no worker id (its FETCHes are held by it).
    conn: Option<ConnId>,
    work: Work,
    reply: oneshot::Sender<Answered>,
    /// Its share of the queue bound, given back when the engine takes the request up.
    permit: Option<OwnedSemaphorePermit>,
    /// Answer a state change (ACK, FAIL, CANCEL, ACTIVATE) with the job as that change
    /// left it, taken in the same step (`EngineHandle::call_viewed`).
    viewed: bool,
}

/// The bound on requests queued for the engine thread, in permits: each request takes one
/// permit plus one per [`PERMIT_BYTES`] of its command line, so the queue holds at most
/// 8,192 requests or about 128 MiB of payload. A full queue makes `submit` wait, which
/// stops the submitting connection from reading: a flood slows its producers instead of
/// growing the server's memory.
pub const QUEUE_PERMITS: usize = 8192;
pub const PERMIT_BYTES: usize = 16 * 1024;

/// A command as the engine thread receives it. The front end validated the jobs of PUSH
/// and PUSHB ([`Intake`]); `submit` also encodes them on the caller's thread, so the engine
/// thread, which every command waits for, only does what needs its state (ids, unique
/// keys, queues).
enum Work {
    Command(Command),
    Push(jobs::PushWork),
}

impl Work {
    fn of(cmd: Command) -> Work {
        use jobs::PushWork;
        match cmd {
            Command::Push { job, len, resend } => Work::Push(PushWork::One(Box::new(
                Prepared::typed(*job, len).map(|p| p.resent(resend)),
            ))),
            Command::PushBatch(jobs) => Work::Push(PushWork::Batch(
                jobs.into_iter()
                    .map(|(job, len)| Prepared::typed(job, len))
                    .collect(),
            )),
            // Faktory's PUSHB: a job resent is accepted as the one already there.
            Command::PushEach(jobs) => Work::Push(PushWork::Each(
                jobs.into_iter()
                    .map(|(job, len)| Prepared::typed(job, len).map(|p| p.resent(true)))
                    .collect(),
            )),
            cmd => Work::Command(cmd),
        }
    }
}

enum Msg {
    Request(Request),
    Register {
        wid: Arc<str>,
        info: serde_json::Value,
        reserve: bool,
    },
    /// A connection that said HELLO with this `wid` closed.
    Disconnect {
        wid: Arc<str>,
    },
    /// A connection without a worker id closed: its jobs go back to their queues.
    Closed {
        conn: ConnId,
    },
    /// Read the event log (and optionally join the live feed); answered between batches.
    Events(events::Read),
    Metrics {
        reply: oneshot::Sender<metrics::MetricsView>,
    },
    /// From the syncer: groups up to `upto` are durable (or the sync failed).
    Synced {
        upto: u64,
        failed: Option<String>,
        /// The sync failed for want of the store (`StoreError::Unavailable`): the groups
        /// stay pending in it.
        away: Option<String>,
    },
    /// From the syncer: jobs claimed by FETCH replies whose connection had gone.
    Undelivered(Vec<uuid::Uuid>),
    Shutdown,
}

#[derive(Default)]
struct Stats {
    enqueued: u64,
    completed: u64,
    failed: u64,
}

pub struct Engine {
    store: Box<dyn Store>,
    cfg: Config,
    clock: Clock,
    index: Index,
    workers: Workers,
    /// The jobs held by connections without a worker id.
    conn_holds: ConnHolds,
    waiters: VecDeque<Waiter>,
    /// Reads of the event log not answered yet: each iteration answers them for at most
    /// [`READ_BUDGET`], so thousands of subscribers paging cannot stall the commands.
    reads: VecDeque<events::Read>,
    /// MUTATE and QUEUE PURGE under way, worked through in slices (`admin/bulk.rs`).
    bulk: VecDeque<admin::Bulk>,
    slow: slow::SlowLog,
    /// Set when a job became available, so waiting FETCHes are worth another look.
    woke: bool,
    stats: Stats,
    started: Instant,
    connections: Arc<AtomicUsize>,
    events: events::EventState,
    metrics: metrics::Metrics,
    /// Jobs claimed for a FETCH whose connection closed before the reply; put back next turn.
    undelivered: Vec<uuid::Uuid>,
    last_prune: Instant,
    /// When the event log was last pruned (`events.rs`: a slice every 100 ms), and whether
    /// that slice stopped short of all there was to prune.
    last_event_prune: Instant,
    event_prune_behind: bool,
    /// Engine-clock time of the batch being applied.
    now: DateTime<Utc>,
    rx: Receiver<Msg>,
    /// Decoded recent jobs, lent to each batch's `Txn`.
    cache: txn::JobCache,
    cron: cron::CronState,
    workflows: workflow::Workflows,
    /// The last minutes at a glance, for OVERVIEW.
    overview: admin::Overview,
    /// The syncer, when commits are pipelined.
    pipeline: Option<commit::Pipeline>,
    /// Otherwise the engine thread syncs each batch itself, after sending its FETCH
    /// replies (`commit.rs`).
    inline_syncer: Option<Box<dyn crate::store::Syncer>>,
    /// Compacting a space after large deletions (`compact.rs`).
    compaction: compact::Compaction,
    /// Since when, and why, the store cannot commit (`commit.rs`): clients' commands are
    /// refused until `Store::ready` says it can again.
    store_down: Option<(Instant, String)>,
    /// Events of batches whose inline sync failed for want of the store: published once a
    /// sync gets through.
    held_events: Vec<crate::events::Event>,
}

/// Longest an iteration spends answering reads of the event log before it takes up
/// commands again (at least one read is answered each time).
const READ_BUDGET: Duration = Duration::from_millis(2);

/// Open the engine over a store: rebuild the index, then run it on its own thread.
pub fn start(
    store: Box<dyn Store>,
    cfg: Config,
) -> Result<
    (
        EngineHandle,
        std::thread::JoinHandle<Result<(), StoreError>>,
    ),
    StoreError,
> {
    let shared = Shared::new(cfg.events.held);
    start_with(store, cfg, shared)
}

/// [`start`], with the subscribers' pool and the connection count given.
pub fn start_with(
    store: Box<dyn Store>,
    cfg: Config,
    shared: Shared,
) -> Result<
    (
        EngineHandle,
        std::thread::JoinHandle<Result<(), StoreError>>,
    ),
    StoreError,
> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (engine, handle) = build(store, cfg, shared, inbox::Inbox::alone(tx), rx, None)?;
    let thread = std::thread::Builder::new()
        .name("ojsd-engine".into())
        .spawn(move || engine.run())
        .map_err(StoreError::from)?;
    Ok((handle, thread))
}

/// [`start_with`], the engine run by `host` (with other engines) instead of a thread of
/// its own; `ended` is told how it ended.
pub fn start_hosted(
    store: Box<dyn Store>,
    cfg: Config,
    shared: Shared,
    host: &mut Host,
    ended: Ended,
) -> Result<EngineHandle, StoreError> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let bell = host.bell();
    let tx = inbox::Inbox::rung(tx, bell.clone());
    let (engine, handle) = build(store, cfg, shared, tx, rx, Some(host.sync()?))?;
    host.add(engine, bell, ended)?;
    Ok(handle)
}

/// The engine over `store`, its index rebuilt, and its handle. A pipelined engine's
/// batches are synced by `sync` when given (its host's), else by a thread of its own.
fn build(
    store: Box<dyn Store>,
    cfg: Config,
    shared: Shared,
    tx: inbox::Inbox,
    rx: Receiver<Msg>,
    sync: Option<&mut commit::SharedSync>,
) -> Result<(Engine, EngineHandle), StoreError> {
    let Shared {
        subscribers,
        connections,
        next_conn,
    } = shared;
    let store_kind = store.name();
    let max_metric_series = cfg.max_metric_series;
    let cache = txn::JobCache::sized(cfg.job_cache_bytes);
    let mut engine = Engine {
        store,
        clock: Clock::new(cfg.test_clock),
        cfg,
        index: Index::default(),
        workers: Workers::default(),
        conn_holds: ConnHolds::default(),
        waiters: VecDeque::new(),
        reads: VecDeque::new(),
        bulk: VecDeque::new(),
        slow: slow::SlowLog::default(),
        woke: false,
        stats: Stats::default(),
        started: Instant::now(),
        connections: connections.clone(),
        events: Default::default(),
        metrics: metrics::Metrics::new(max_metric_series),
        undelivered: Vec::new(),
        last_prune: Instant::now(),
        last_event_prune: Instant::now(),
        event_prune_behind: false,
        now: Utc::now(),
        rx,
        cache,
        cron: Default::default(),
        workflows: Default::default(),
        overview: Default::default(),
        pipeline: None,
        inline_syncer: None,
        compaction: compact::Compaction::new(None, 0),
        store_down: None,
        held_events: Vec::new(),
    };
    engine.compaction =
        compact::Compaction::new(engine.store.compactor(), engine.cfg.compact_after_deletes);
    let syncer = engine.store.syncer()?;
    if engine.cfg.commit_pipeline {
        engine.pipeline = Some(match sync {
            Some(sync) => sync.join(syncer, tx.clone())?,
            None => commit::Pipeline::start(syncer, tx.clone())?,
        });
    } else {
        engine.inline_syncer = Some(syncer);
    }
    engine.rebuild()?;
    engine.rebuild_cron()?;
    engine.rebuild_events()?;
    engine.rebuild_workflows()?;
    let intake = intake::Intake::new(engine.cfg.limits.clone(), engine.clock.clone());
    let handle = EngineHandle {
        tx,
        intake,
        queue: Arc::new(Semaphore::new(QUEUE_PERMITS)),
        connections,
        next_conn,
        store_kind,
        subscribers,
    };
    Ok((engine, handle))
}

impl Engine {
    /// Forget queues that have held nothing for [`QUEUE_IDLE`], and their metric series.
    fn retire_idle_queues(&mut self) {
        let now = self.now_ms();
        let idle = i64::try_from(QUEUE_IDLE.as_millis()).unwrap_or(i64::MAX);
        let retired = self.index.retire_idle(now, idle);
        if !retired.is_empty() {
            tracing::debug!(queues = retired.len(), "idle queues forgotten");
            self.metrics.forget_queues(&retired);
        }
    }

    fn now_ms(&self) -> i64 {
        self.now.timestamp_millis()
    }

    /// Time until the loop must wake on its own: a timer, a FETCH deadline, or a dead-worker sweep.
    fn wait_budget(&self) -> Duration {
        if self.store_down.is_some() {
            // Only FETCH deadlines, and asking the store again (the upkeep waits for it).
            let fetch = self.waiters.front().map(|w| w.deadline);
            let fetch = fetch.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            return crate::store::READY_RETRY.min(fetch);
        }
        if !self.reads.is_empty() || !self.bulk.is_empty() {
            return Duration::ZERO;
        }
        let mut budget = Duration::from_secs(1);
        if let Some(due) = self.index.next_timer() {
            let ms = due - self.clock.now().timestamp_millis();
            budget = budget.min(Duration::from_millis(ms.max(0) as u64));
        }
        if let Some(due) = self.next_cron_due() {
            let ms = due - self.clock.now().timestamp_millis();
            budget = budget.min(Duration::from_millis(ms.max(0) as u64));
        }
        if let Some(d) = self.waiters.front().map(|w| w.deadline) {
            budget = budget.min(d.saturating_duration_since(Instant::now()));
        }
        if let Some(due) = self.next_window_free() {
            let ms = due - self.clock.now().timestamp_millis();
            budget = budget.min(Duration::from_millis(ms.max(0) as u64));
        }
        budget
    }

    /// The engine on a thread of its own: wait for a message or the wait budget, then run
    /// an iteration over what arrived; until it stops.
    fn run(mut self) -> Result<(), StoreError> {
        loop {
            let first = match self.rx.recv_timeout(self.wait_budget()) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    self.iterate(Vec::new(), true)?;
                    return Ok(());
                }
            };
            let (batch, _, gone) = self.take_batch(first);
            if self.iterate(batch, gone)? {
                return Ok(());
            }
        }
    }

    /// `first` and what else waits in the channel, up to a batch: with whether more may
    /// wait, and whether every sender is gone.
    fn take_batch(&self, first: Option<Msg>) -> (Vec<Msg>, bool, bool) {
        let mut batch: Vec<Msg> = first.into_iter().collect();
        while batch.len() < self.cfg.max_batch {
            match self.rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(TryRecvError::Empty) => return (batch, false, false),
                Err(TryRecvError::Disconnected) => return (batch, false, true),
            }
        }
        (batch, true, false)
    }

    /// One iteration: apply `batch`, run the upkeep, commit, answer reads. `stopping`: the
    /// channel is gone; a `Shutdown` message also stops. Whether the engine stopped (after
    /// its last commit).
    fn iterate(&mut self, batch: Vec<Msg>, mut stopping: bool) -> Result<bool, StoreError> {
        self.now = self.clock.now();
        let began = Instant::now();
        let began_cpu = slow::thread_cpu();
        let messages = batch.len();
        // While the store cannot commit, clients' commands are refused before they
        // change anything (`commit.rs`).
        let away = self.store_ready()?;
        let mut txn = Txn::with_cache(std::mem::take(&mut self.cache));
        for msg in batch {
            match msg {
                Msg::Request(req) if away.is_some() => {
                    let why = away.as_deref().unwrap_or_default();
                    let _ = req.reply.send(Err(commit::refused_while_down(why)));
                }
                Msg::Request(req) => self.handle(req, &mut txn),
                Msg::Register { wid, info, reserve } => {
                    self.worker_hello(&mut txn, wid, info, reserve)
                }
                Msg::Disconnect { wid } => self.worker_gone(&mut txn, wid),
                Msg::Closed { conn } => self.connection_gone(&mut txn, conn),
                Msg::Events(read) => self.reads.push_back(read),
                Msg::Metrics { reply } => {
                    let mut view = self.metrics.view(&self.index);
                    view.compactions = self.compaction.finished();
                    let _ = reply.send(view);
                }
                Msg::Synced { upto, failed, away } => self.synced(upto, failed, away),
                Msg::Undelivered(ids) => self.undelivered.extend(ids),
                Msg::Shutdown => stopping = true,
            }
        }
        let applied = began.elapsed();
        // While the store is away the upkeep waits: timers, cron, sweeps and pruning read
        // records it may not answer for, and a timer that failed would be lost; they run
        // late once it is back. Waiting FETCHes still get their empty answers in time.
        if away.is_none() {
            self.run_bulk(&mut txn, stopping);
            self.unclaim_undelivered(&mut txn);
            self.run_timers(&mut txn);
            self.prune_dead(&mut txn);
            self.run_cron(&mut txn);
            self.sweep_workers(&mut txn);
        }
        self.sample_overview();
        self.serve_waiters(&mut txn, stopping);
        let prune_every = if self.event_prune_behind {
            events::PRUNE_EVERY_BEHIND
        } else {
            events::PRUNE_EVERY
        };
        if away.is_none() && self.last_event_prune.elapsed() >= prune_every {
            self.last_event_prune = Instant::now();
            self.event_prune_behind = self.prune_events(&mut txn);
        }
        if away.is_none() && self.last_prune.elapsed() >= Duration::from_secs(1) {
            self.last_prune = Instant::now();
            self.drop_job_count_hint(&mut txn);
            self.retire_idle_queues();
        }
        let upkept = began.elapsed();
        self.commit(txn)?;
        let (jobs, events) = (self.index.jobs.len() as u64, &self.events);
        let logged = events.next - events.oldest;
        self.compaction.maybe_start(|space| match space {
            crate::store::Space::Job => jobs.saturating_mul(2),
            _ => logged,
        });
        let committed = began.elapsed();
        // Reads run once the batch is in the log, so a new live feed starts exactly
        // after the last event the read could see.
        let mut reads = 0usize;
        while let Some(read) = self.reads.pop_front() {
            self.answer_read(read);
            reads += 1;
            if began.elapsed().saturating_sub(committed) >= READ_BUDGET {
                break;
            }
        }
        let total = began.elapsed();
        if total >= slow::SLOW_ITERATION && self.slow.log_now() {
            // What a stall was made of, for the operator and the benchmark notes.
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            tracing::warn!(
                also_slow_since_last_report = std::mem::take(&mut self.slow.unlogged),
                total_ms = ms(total),
                // The engine thread's CPU in the iteration: well under total_ms means
                // it waited (an fsync, a store write, or a core taken by other threads).
                cpu_ms = ms(slow::thread_cpu().saturating_sub(began_cpu)),
                jobs = self.index.jobs.len(),
                messages,
                apply_ms = ms(applied),
                upkeep_ms = ms(upkept - applied),
                commit_ms = ms(committed - upkept),
                // Of which the store's write, and the inline sync (wall; CPU).
                write_ms = ms(self.slow.write),
                sync_ms = ms(self.slow.sync),
                sync_cpu_ms = ms(self.slow.sync_cpu),
                reads,
                reads_ms = ms(total - committed),
                bulk_pending = self.bulk.len(),
                reads_pending = self.reads.len(),
                waiters = self.waiters.len(),
                "slow engine iteration"
            );
        }
        if stopping {
            if let Some(p) = self.pipeline.as_mut() {
                p.finish();
            }
            tracing::info!("engine stopped after its last commit");
            return Ok(true);
        }
        Ok(false)
    }

    fn handle(&mut self, req: Request, txn: &mut Txn) {
        let Request {
            wid,
            conn,
            work,
            reply,
            permit,
            viewed,
        } = req;
        drop(permit);
        if let Some(w) = &wid {
            let now = self.now_ms();
            self.workers.touch(w, now);
        }
        let cmd = match work {
            Work::Command(cmd) => cmd,
            Work::Push(push) => {
                let out = self.push_work(txn, push);
                return answer(txn, reply, out);
            }
        };
        let view_of = if viewed {
            match self.viewable(&cmd) {
                Ok(id) => id,
                Err(e) => return answer(txn, reply, Err(e)),
            }
        } else {
            None
        };
        let out = match cmd {
            // `submit` prepares these; a command that arrives otherwise is prepared here.
            cmd @ (Command::Push { .. } | Command::PushBatch(_) | Command::PushEach(_)) => {
                let work = Work::of(cmd);
                return self.handle(
                    Request {
                        wid,
                        conn,
                        work,
                        reply,
                        permit: None,
                        viewed,
                    },
                    txn,
                );
            }
            Command::Fetch {
                queues,
                count,
                wait,
            } => {
                let fetch = Fetching {
                    queues,
                    count,
                    wait,
                    durable: false,
                };
                if let Some((reply, out)) = self.fetch_or_wait(txn, wid, conn, fetch, reply) {
                    answer(txn, reply, out);
                }
                return;
            }
            Command::AckFetch {
                id,
                result,
                queues,
                wait,
            } => {
                if let Some((reply, out)) =
                    self.ack_fetch(txn, wid, conn, &id, result, queues, wait, reply)
                {
                    answer(txn, reply, out);
                }
                return;
            }
            Command::Ack {
                id,
                result,
                handed_out,
            } => self.ack(txn, wid.as_ref(), &id, result, handed_out).map(ok),
            Command::AckBatch(acks) => {
                let mut each = api::Each::default();
                for (i, a) in acks.into_iter().enumerate() {
                    match self.ack(txn, wid.as_ref(), &a.id, a.result, false) {
                        Ok(()) => each.accepted += 1,
                        Err(e) => each.rejected.push((i, e)),
                    }
                }
                Ok(answer_of(Answer::Acked(each)))
            }
            Command::Fail {
                id,
                error,
                handed_out,
                requeue,
            } => self
                .fail(txn, wid.as_ref(), &id, error, handed_out, requeue)
                .map(ok),
            Command::Cancel { id } => self
                .job_info(&id)
                .and_then(|uid| self.cancel(txn, uid, wid.as_ref()))
                .map(ok),
            Command::Activate { id } => self.activate(txn, &id).map(ok),
            Command::Unclaim { ids } => self.unclaim(wid.as_ref(), &ids).map(ok),
            Command::Job { id } => self.job_info(&id).map(Out::Job),
            Command::Beat {
                wid,
                active_job_ids,
                report,
            } => Ok(answer_of(self.beat(
                txn,
                &wid,
                active_job_ids.as_deref(),
                report,
            ))),
            Command::Info => Ok(answer_of(self.info())),
            Command::Cluster => match self.cluster(reply) {
                Some((reply, a)) => return answer(txn, reply, Ok(answer_of(a))),
                None => return,
            },
            Command::Queue(q) => return self.queue_cmd(txn, q, wid.as_ref(), reply),
            Command::Workers => Ok(answer_of(self.worker_list())),
            Command::Jobs(q) => self.jobs_page(txn, &q).map(answer_of),
            Command::Overview => Ok(answer_of(self.overview())),
            Command::StatsHistory {
                period_ms,
                since_ms,
                until_ms,
            } => Ok(answer_of(self.stats_history(period_ms, since_ms, until_ms))),
            Command::Cron(c) => self.cron_cmd(txn, c),
            Command::Workflow(w) => self.workflow_cmd(txn, w),
            Command::Dead(d) => self.dead_cmd(txn, d),
            // Changing many jobs runs in slices and answers when done (admin/bulk.rs).
            Command::Mutate(m) => match self.start_mutate(m) {
                Ok((work, ids)) => {
                    let bulk = admin::Bulk::new(admin::BulkWork::Mutate(work), ids, reply);
                    return self.start_bulk(txn, bulk);
                }
                Err(e) => Err(e),
            },
            Command::Flush => Ok(answer_of(self.flush(txn))),
            Command::Worker { wid, directive } => self.direct_worker(txn, &wid, directive).map(ok),
            Command::Progress {
                id,
                percent,
                message,
            } => self
                .progress(txn, wid.as_ref(), &id, percent, message)
                .map(ok),
            Command::ClockAdvance { ms } => {
                if self.clock.advance(ms) {
                    self.now = self.clock.now();
                    Ok(answer_of(Answer::Ok))
                } else {
                    Err(OjsError::new(
                        ErrorCode::UnknownCommand,
                        "CLOCK is only available when ojsd runs with --test-clock",
                    ))
                }
            }
            // Handled by the connection; never sent here.
            Command::Hello(_) | Command::End | Command::Subscribe { .. } => {
                Ok(answer_of(Answer::Ok))
            }
        };
        let out = match (view_of, out) {
            (Some(uid), Ok(_)) => {
                let job = txn.snapshot(&[uid]).pop();
                Ok(answer_of(job.map_or(Answer::Nothing, Answer::Job)))
            }
            (_, out) => out,
        };
        answer(txn, reply, out);
    }

    /// The job a viewed command changes; a CANCEL of a finished job is refused (HTTP
    /// answers 409 where TCP CANCEL is idempotent).
    fn viewable(&self, cmd: &Command) -> OjsResult<Option<uuid::Uuid>> {
        let id = match cmd {
            Command::Ack { id, .. }
            | Command::Fail { id, .. }
            | Command::Cancel { id }
            | Command::Activate { id } => id,
            _ => return Ok(None),
        };
        let Ok(uid) = uuid::Uuid::parse_str(id) else {
            return Ok(None);
        };
        if let (Command::Cancel { .. }, Some(e)) = (cmd, self.index.jobs.get(&uid)) {
            if e.state.is_terminal() {
                return Err(OjsError::new(
                    ErrorCode::InvalidStateTransition,
                    format!(
                        "job {id} is {}; this needs a job that is not yet finished",
                        e.state.as_str()
                    ),
                ));
            }
        }
        Ok(Some(uid))
    }
}

fn ok(_: ()) -> Out {
    answer_of(Answer::Ok)
}

/// A typed answer known before the commit (it still waits for the commit to be sent).
fn answer_of(a: Answer) -> Out {
    Out::Answer(Ok(a))
}

/// Queue the reply to one command: its output, or its error.
fn answer(txn: &mut Txn, reply: oneshot::Sender<Answered>, out: Result<Out, OjsError>) {
    txn.reply(reply, out.unwrap_or_else(|e| Out::Answer(Err(e))));
}

pub(crate) fn connections_open(c: &AtomicUsize) -> usize {
    c.load(Ordering::Relaxed)
}
