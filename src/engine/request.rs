//! The engine's requests: every command a front end (the TCP dialects, HTTP, the CLI's
//! connection, later a peer node) can ask of the engine, as typed values. Front ends parse
//! their wire forms into these (`protocol/`, `http/`); the engine takes them and answers
//! typed outcomes (`api.rs`). Nothing here knows a wire format.
//!
//! Client bodies arrive validated: a job is a [`NewJob`], a cron registration a
//! [`CronDef`], a workflow a [`Definition`], built by the front end with
//! [`Intake`](super::intake::Intake). Every request is serializable (serde), so that a node
//! can hand it to the node that owns its partition; a request read back that way was
//! validated by the node that took it from the client.

use crate::cron::CronDef;
use crate::job::validate::NewJob;
use crate::job::State;
use crate::workflow::Definition;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::job::rate_limit::RateWindow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerDirective {
    Quiet,
    Terminate,
}

/// What a worker may say about itself in a BEAT (Faktory's `current_state` and `rss_kb`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeatReport {
    /// The worker went quiet or is terminating on its own (e.g. after a signal).
    pub state: Option<WorkerDirective>,
    /// Its resident memory, KiB.
    pub rss_kb: Option<u64>,
}

/// One acknowledgement of an `ACKB`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckItem {
    pub id: String,
    pub result: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    Hello(Value),
    /// One validated job, with its encoded size on the wire (counted against
    /// `--max-queued-bytes`). `resend`: a job whose id exists with the same client-supplied
    /// attributes is accepted as the one already there, not refused as a duplicate
    /// (Faktory clients resend after a network error).
    Push {
        job: Box<NewJob>,
        len: usize,
        resend: bool,
    },
    /// All or nothing (PUSHB of the OJS dialect, HTTP's batch).
    PushBatch(Vec<(NewJob, usize)>),
    /// Each job on its own: those the engine refuses (a duplicate id, the queued-bytes
    /// bound) are reported by position, the others enqueued (Faktory's PUSHB; the front end
    /// reports the jobs it could not validate itself).
    PushEach(Vec<(NewJob, usize)>),
    Fetch {
        queues: Vec<String>,
        count: Option<usize>,
        /// How long to wait for a job when none is available, at most `--fetch-wait-ms`
        /// (which is also the default); zero answers at once.
        wait: Option<std::time::Duration>,
    },
    /// `handed_out`: also settle a job that was handed out and is `available` again (after a
    /// restart, or a reservation that was lost): Faktory keeps reservations across
    /// restarts, so its workers ACK by jid after one. An `active` job is settled only by
    /// its holder, whatever the front end (ojs-core §7.3, PROTOCOL.md §5.2).
    Ack {
        id: String,
        result: Option<Value>,
        handed_out: bool,
    },
    /// `ACKB`: each ACK on its own, answered together once durable (a batch worker settles
    /// what one `FETCH … COUNT n` handed it in one round trip). A refused one (not held,
    /// not active, unknown) is reported by its position; the others complete.
    AckBatch(Vec<AckItem>),
    /// ACK, then a FETCH of one job for the same worker, answered together once the ACK is
    /// durable: one round trip per job for a worker loop (`ACK {"id", "fetch": [...]}`).
    AckFetch {
        id: String,
        result: Option<Value>,
        queues: Vec<String>,
        /// As FETCH's `wait`: at most `--fetch-wait-ms`, the default; zero answers at once.
        wait: Option<std::time::Duration>,
    },
    /// `requeue`: back to `available` at once when the policy allows a retry, without the
    /// backoff (the HTTP binding's NACK `requeue`).
    Fail {
        id: String,
        error: Value,
        handed_out: bool,
        requeue: bool,
    },
    Beat {
        wid: String,
        active_job_ids: Option<Vec<String>>,
        report: BeatReport,
    },
    Cancel {
        id: String,
    },
    /// Give back jobs a FETCH claimed for this caller that it will not work (cluster mode:
    /// a FETCH over queues of several partitions took a job from one partition, and
    /// another's answer came too late). Each goes back to its queue as an undelivered job
    /// does, without spending an attempt. Not a client command: no front end parses it.
    Unclaim {
        ids: Vec<String>,
    },
    Activate {
        id: String,
    },
    Job {
        id: String,
    },
    Info,
    /// `CLUSTER`: the nodes and which partitions each holds.
    Cluster,
    Queue(QueueCmd),
    Dead(DeadCmd),
    Worker {
        wid: String,
        directive: WorkerDirective,
    },
    /// `WORKERS` / `WORKER LIST`: the known workers, their heartbeats and jobs.
    Workers,
    /// `JOBS {filter}`: one page of jobs by queue and state, newest first.
    Jobs(JobsQuery),
    /// `OVERVIEW`: the last minutes of throughput, queue depth and pickup latency.
    Overview,
    /// `STATS HISTORY`: completed, failed and enqueued per period (ms), from the engine's
    /// minute and hour rings (ojs-admin-api §10.2); the last hour by default.
    StatsHistory {
        period_ms: i64,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
    },
    /// A worker's progress report on a job it holds.
    Progress {
        id: String,
        percent: f64,
        message: Option<String>,
    },
    /// Turn the connection into an event stream (ojs-events §6.1 filter, optional start).
    Subscribe {
        filter: crate::events::EventFilter,
        start: crate::events::Start,
    },
    /// Moves the engine clock forward; accepted only when the server runs with a test clock.
    ClockAdvance {
        ms: i64,
    },
    /// Cron job registrations (ojs-cron §8), see `protocol::cron`.
    Cron(CronCmd),
    /// Workflows (ojs-workflows §11), see `protocol::workflow`.
    Workflow(WorkflowCmd),
    /// Kill, requeue, discard or clear scheduled, retrying or dead jobs (Faktory's MUTATE).
    Mutate(MutateCmd),
    /// Delete every job and workflow in one commit (Faktory's FLUSH).
    Flush,
    End,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QueueCmd {
    Pause(Vec<String>),
    Resume(Vec<String>),
    /// Every known queue with its counts.
    List,
    /// One queue in detail.
    Stats(String),
    /// Delete the queue's jobs in `states` (never `active`), optionally only those whose
    /// terminal time (or creation time, for waiting jobs) is before `older_than`.
    Purge {
        queue: String,
        states: Vec<State>,
        older_than: Option<DateTime<Utc>>,
    },
    /// Delete the queues' available jobs and forget the queues (`*`: every queue).
    Remove(Vec<String>),
    /// Set (or with `None` lift) a queue's rate limit (ojs-rate-limiting §7.2).
    Limit {
        queue: String,
        limit: Option<QueueLimit>,
    },
    /// Seconds the oldest available job of each queue has waited (`*`: every queue).
    Latency(Vec<String>),
}

impl QueueCmd {
    /// The same command with every queue name passed through `f` (front ends use it to
    /// take names as their users write them).
    pub fn map_names(self, f: impl Fn(String) -> String) -> QueueCmd {
        let all = |v: Vec<String>| v.into_iter().map(&f).collect();
        match self {
            QueueCmd::Pause(v) => QueueCmd::Pause(all(v)),
            QueueCmd::Resume(v) => QueueCmd::Resume(all(v)),
            QueueCmd::List => QueueCmd::List,
            QueueCmd::Stats(q) => QueueCmd::Stats(f(q)),
            QueueCmd::Purge {
                queue,
                states,
                older_than,
            } => QueueCmd::Purge {
                queue: f(queue),
                states,
                older_than,
            },
            QueueCmd::Remove(v) => QueueCmd::Remove(all(v)),
            QueueCmd::Limit { queue, limit } => QueueCmd::Limit {
                queue: f(queue),
                limit,
            },
            QueueCmd::Latency(v) => QueueCmd::Latency(all(v)),
        }
    }
}

/// Which dead letters a command covers; every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeadFilter {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    /// The `type` of the job's most recent error.
    pub error_type: Option<String>,
    /// Discarded at or after.
    pub since: Option<DateTime<Utc>>,
    /// Discarded before.
    pub until: Option<DateTime<Utc>>,
}

impl DeadFilter {
    /// Set when matching needs the job body, not just the index.
    pub fn needs_body(&self) -> bool {
        self.job_type.is_some() || self.error_type.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DeadCmd {
    List {
        filter: DeadFilter,
        limit: usize,
        offset: usize,
    },
    Get(String),
    Stats,
    Retry(String),
    RetryAll(DeadFilter),
    Delete(String),
    DeleteAll(DeadFilter),
}

/// A queue's rate limit (ojs-rate-limiting §7.2): at most `concurrency` jobs of the queue
/// active at once, and at most `rate.limit` started within any `rate.period` (a sliding
/// window). Either may be absent; `concurrency: 0` holds every job back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateWindow>,
}

/// `JOBS {"queue"?, "state"?, "limit"?, "offset"?}`: jobs of one queue and/or state, newest
/// first, one page (for the dashboard's job browser and the admin API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsQuery {
    pub queue: Option<String>,
    pub state: Option<State>,
    pub limit: usize,
    pub offset: usize,
}

/// The sets of waiting jobs `MUTATE` works on (Faktory's retries, scheduled and dead sets:
/// ojsd's `retryable`, `scheduled` and `discarded` jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobSet {
    Retries,
    Scheduled,
    Dead,
}

impl JobSet {
    pub fn state(self) -> State {
        match self {
            JobSet::Retries => State::Retryable,
            JobSet::Scheduled => State::Scheduled,
            JobSet::Dead => State::Discarded,
        }
    }
}

/// What `MUTATE` does to the jobs its filter matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MutateOp {
    /// Move to the dead set (`discarded`).
    Kill,
    /// Back to its queue now (`available`).
    Requeue,
    /// Delete.
    Discard,
    /// Delete every job of the set, whatever the filter says (as Faktory does).
    Clear,
}

/// Which jobs of a set a `MUTATE` touches; every field that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SetFilter {
    /// Job ids (OJS ids; the Faktory dialect maps jids to them).
    pub ids: Option<Vec<String>>,
    /// The job's OJS type.
    pub job_type: Option<String>,
    /// A Redis-style glob (`*`, `?`, `[...]`, `\`) over the job's stored JSON envelope.
    pub pattern: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutateCmd {
    pub op: MutateOp,
    pub set: JobSet,
    pub filter: SetFilter,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CronCmd {
    /// Register or update (upsert) a cron job.
    Add(Box<CronDef>),
    List {
        enabled: Option<bool>,
        limit: usize,
        offset: usize,
    },
    Get(String),
    Del(String),
    /// CRON DEL answering the entry it removed (HTTP `DELETE /ojs/v1/cron/{name}`).
    Remove(String),
    Enable(String),
    Disable(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WorkflowCmd {
    Create {
        definition: Box<Definition>,
    },
    Get(String),
    Cancel(String),
    /// Newest first; `state` (pending, running, completed, failed, cancelled) filters.
    List {
        state: Option<String>,
        limit: usize,
        offset: usize,
    },
    /// Between partitions of a cluster (`workflow/outbox.rs`), never from a client: the
    /// oldest letters of this engine's outbox, at most `limit` (answers `Answer::Letters`).
    Outbox {
        limit: usize,
    },
    /// Between partitions: these letters of this engine's outbox were delivered.
    Delivered(Vec<u64>),
    /// Between partitions: letters for partition `part`, applied in order in one commit.
    Deliver {
        part: u32,
        letters: Vec<Letter>,
    },
}

pub use super::workflow::outbox::{Letter, Posted, TAKE_MAX as OUTBOX_TAKE_MAX};
