//! The command-line shape of the admin subcommands (clap): what each takes.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

/// How to reach the server; every subcommand takes these.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The server's TCP address.
    #[arg(
        long,
        env = "OJSD_ADDR",
        default_value = "127.0.0.1:7419",
        global = true
    )]
    pub addr: String,
    /// The server's password, when it has one.
    #[arg(long, env = "OJSD_PASSWORD", hide_env_values = true, global = true)]
    pub password: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// One page of a listing.
#[derive(Args, Debug, Clone, Copy)]
pub struct Page {
    /// Most rows to show.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Rows to skip first (the next page is at offset + limit).
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Enqueue one job.
    Push(Push),
    /// Show one job's envelope (by id, or by the jid a Faktory client gave it).
    Job {
        /// The job's id, or its Faktory jid.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// List jobs of a queue and/or in a state, newest first.
    Jobs {
        /// Only this queue (as its client wrote it).
        #[arg(long)]
        queue: Option<String>,
        /// scheduled, available, pending, active, retryable, completed, cancelled or
        /// discarded.
        #[arg(long)]
        state: Option<String>,
        #[command(flatten)]
        page: Page,
        #[command(flatten)]
        conn: Conn,
    },
    /// Cancel a job that has not finished (a finished one is left as it is).
    Cancel {
        /// The job's id, or its Faktory jid.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the queues with their counts and throughput.
    Queues {
        #[command(flatten)]
        conn: Conn,
    },
    /// Pause, resume or purge a queue.
    Queue {
        #[command(subcommand)]
        action: QueueAction,
        #[command(flatten)]
        conn: Conn,
    },
    /// The dead-letter set: list, show, stats, retry, delete.
    Dead {
        #[command(subcommand)]
        action: DeadAction,
        #[command(flatten)]
        conn: Conn,
    },
    /// List workers, or tell one to go quiet or terminate.
    Workers {
        #[command(subcommand)]
        action: Option<WorkerAction>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Cron registrations: list, show, add, enable, disable, delete.
    Cron {
        #[command(subcommand)]
        action: CronAction,
        #[command(flatten)]
        conn: Conn,
    },
    /// Workflows: list, show, cancel.
    Workflow {
        #[command(subcommand)]
        action: WorkflowAction,
        #[command(flatten)]
        conn: Conn,
    },
    /// Follow the event stream (ojs-events), optionally filtered; Ctrl-C stops.
    Tail(Tail),
    /// Server totals, per-state counts and workers at a glance.
    Stats {
        #[command(flatten)]
        conn: Conn,
    },
    /// The cluster's nodes (active, standby, gone), the partitions each holds, their lease
    /// epochs and heartbeats (--store postgres); on an embedded store, the server alone.
    Cluster {
        #[command(flatten)]
        conn: Conn,
    },
}

#[derive(Args, Debug)]
pub struct Push {
    /// The job type, e.g. `email.send`.
    #[arg(required_unless_present = "envelope")]
    pub job_type: Option<String>,
    /// The job's args as a JSON array (a single JSON value is wrapped in one).
    pub args: Option<String>,
    /// The queue (default: `default`).
    #[arg(long)]
    pub queue: Option<String>,
    /// Higher runs first within its queue (default 0).
    #[arg(long)]
    pub priority: Option<i64>,
    /// When the job becomes available (RFC 3339 with a zone, e.g. 2026-12-01T09:00:00Z).
    #[arg(long, value_parser = rfc3339)]
    pub at: Option<String>,
    /// `meta` as a JSON object.
    #[arg(long)]
    pub meta: Option<String>,
    /// A whole job envelope as JSON, `@file` or `-` for stdin (the other options are
    /// applied over it).
    #[arg(long)]
    pub envelope: Option<String>,
    #[command(flatten)]
    pub conn: Conn,
}

#[derive(Subcommand, Debug)]
pub enum QueueAction {
    /// Stop FETCH from taking jobs from these queues (they still accept jobs).
    Pause {
        queues: Vec<String>,
        /// Also pause a queue the server does not know yet (one that has never held a
        /// job), so that it is paused when its first job arrives; without this a name the
        /// server does not know is taken for a typo and refused.
        #[arg(long)]
        new: bool,
    },
    Resume {
        queues: Vec<String>,
    },
    /// Delete a queue's jobs in the given states (default: available, scheduled).
    Purge {
        /// The queue (as its client wrote it).
        queue: String,
        /// A state to purge (repeat for several): available, scheduled, pending,
        /// retryable, completed, cancelled, discarded.
        #[arg(long = "state")]
        states: Vec<String>,
        /// Only jobs older than this (RFC 3339).
        #[arg(long)]
        older_than: Option<String>,
        /// Really delete (without it, the command shows what it would delete).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args, Debug, Clone, Default)]
pub struct DeadFilter {
    /// Only dead letters of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Job type.
    #[arg(long = "type")]
    pub job_type: Option<String>,
    /// The last error's type.
    #[arg(long)]
    pub error_type: Option<String>,
}

impl DeadFilter {
    pub(super) fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in [
            ("queue", &self.queue),
            ("type", &self.job_type),
            ("error_type", &self.error_type),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        m
    }
}

#[derive(Subcommand, Debug)]
pub enum DeadAction {
    /// Totals by queue and error type, and the retention.
    Stats,
    /// One dead letter's envelope, with its error history.
    Get {
        /// The job's id, or its Faktory jid.
        id: String,
    },
    /// List dead letters, newest first.
    List {
        #[command(flatten)]
        filter: DeadFilter,
        /// Most rows to show.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Rows to skip first (the next page is at offset + limit).
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Retry one dead letter (by id), or every one matching the filter with `--all`.
    Retry {
        /// One dead letter's id (or Faktory jid).
        id: Option<String>,
        /// Every dead letter the filter matches, instead of one.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        filter: DeadFilter,
        /// Really do it to all of them (without it, `--all` shows how many it would touch).
        #[arg(long)]
        yes: bool,
    },
    /// Delete one dead letter (by id), or every one matching the filter with `--all`.
    Delete {
        /// One dead letter's id (or Faktory jid).
        id: Option<String>,
        /// Every dead letter the filter matches, instead of one.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        filter: DeadFilter,
        /// Really do it to all of them (without it, `--all` shows how many it would touch).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum WorkerAction {
    /// Ask a worker (on its next heartbeat) to stop fetching.
    Quiet {
        /// The worker's id (its HELLO `wid`).
        wid: String,
    },
    /// Ask a worker (on its next heartbeat) to finish up and exit.
    Terminate {
        /// The worker's id (its HELLO `wid`).
        wid: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum CronAction {
    /// Every registration with its next and last run.
    List,
    /// One registration.
    Get {
        /// The registration's name.
        name: String,
    },
    /// Register (or replace) a cron job: its definition as JSON, `@file` or `-` for stdin.
    Add {
        /// The registration (ojs-cron §8) as JSON, `@file` or `-` for stdin.
        definition: String,
    },
    /// Fire again from the next occurrence on.
    Enable {
        /// The registration's name.
        name: String,
    },
    /// Stop firing (the registration is kept).
    Disable {
        /// The registration's name.
        name: String,
    },
    /// Remove a registration (jobs it already enqueued are not touched).
    Del {
        /// The registration's name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum WorkflowAction {
    /// Workflows, newest first.
    List {
        /// running, completed, failed or cancelled.
        #[arg(long)]
        state: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// A workflow with every step's state.
    Get {
        /// The workflow's id.
        id: String,
    },
    /// Cancel a workflow: its waiting steps never run, its running jobs are cancelled.
    Cancel {
        /// The workflow's id.
        id: String,
    },
}

#[derive(Args, Debug)]
#[command(mut_arg("json", |a| a.help("Print each event as one JSON value per line")))]
pub struct Tail {
    /// Event types (exact, or a prefix ending in `*` like `job.*`); repeat for several.
    #[arg(long = "type")]
    pub types: Vec<String>,
    /// Only events of jobs in this queue (its exact name); repeat for several.
    #[arg(long = "queue")]
    pub queues: Vec<String>,
    /// Only events of jobs of this type (its exact name); repeat for several.
    #[arg(long = "job-type")]
    pub job_types: Vec<String>,
    /// Replay from after this cursor, then follow.
    #[arg(long, conflicts_with = "since")]
    pub after: Option<u64>,
    /// Replay from this time (RFC 3339), then follow.
    #[arg(long)]
    pub since: Option<String>,
    /// Stop after this many events.
    #[arg(long)]
    pub count: Option<u64>,
    #[command(flatten)]
    pub conn: Conn,
}

/// `--at`: refused by clap (exit 2, naming the flag) unless it is a timestamp the server
/// takes, rather than sent and refused by the server as an envelope field.
fn rfc3339(s: &str) -> Result<String, String> {
    match crate::job::parse_ts(s) {
        Some(_) => Ok(s.to_string()),
        None => Err("must be an RFC 3339 timestamp with a zone, e.g. 2026-12-01T09:00:00Z".into()),
    }
}
