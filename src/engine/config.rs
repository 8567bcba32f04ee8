//! The engine's configuration (`Config`, built from the command line in `main.rs`) and its
//! defaults.

use super::{compact, metrics, partition, txn, EventConfig};
use crate::job::validate::Limits;
use std::sync::Arc;
use std::time::Duration;

/// The default `--max-queued-bytes`: 2 GiB of unfinished job envelopes.
pub const DEFAULT_MAX_QUEUED_BYTES: u64 = 2 << 30;

#[derive(Debug, Clone)]
pub struct Config {
    pub limits: Limits,
    /// Visibility timeout for jobs that set none, seconds.
    pub default_timeout_secs: u64,
    /// How long completed and cancelled jobs stay inspectable.
    pub retention: Duration,
    /// How long discarded (dead-letter) jobs are kept, and how many at most.
    pub dead_retention: Duration,
    pub dead_max: usize,
    /// A worker silent for this long is dead and its jobs are requeued.
    pub heartbeat_timeout: Duration,
    /// How long an empty FETCH waits for a job.
    pub fetch_wait: Duration,
    /// Most commands applied in one group commit.
    pub max_batch: usize,
    /// Most bytes of unfinished job envelopes held; PUSH past it gets `QUEUE_FULL`. 0 = no
    /// limit.
    pub max_queued_bytes: u64,
    pub test_clock: bool,
    pub events: EventConfig,
    /// Sync each batch on a second thread while the engine applies the next one
    /// (`--commit-pipeline`; see `commit.rs`).
    pub commit_pipeline: bool,
    /// Most queues known at once (`--max-queues`); 0 = no limit.
    pub max_queues: usize,
    /// Most (job type, queue) series of the job metrics (`--max-metric-series`).
    pub max_metric_series: usize,
    /// Deletions after which a space is compacted (`--compact-after-deletes`; 0: never).
    pub compact_after_deletes: u64,
    /// This node's id and client address, for CLUSTER on a store of one node.
    pub node_id: String,
    pub node_addr: Option<String>,
    /// The partition this engine serves (cluster mode with `--partitions` > 1).
    pub partition: partition::Partition,
    /// Woken when a letter to another partition is written (its relay waits on it).
    pub outbox_wake: Option<Arc<tokio::sync::Notify>>,
    /// Bytes of undelivered workflow letters kept in memory; past that they are read
    /// back from the store when relayed (`engine/workflow/outbox.rs`).
    pub outbox_memory: usize,
    /// Jobs kept in memory (lean where they can be) for their next FETCH or ACK, by their
    /// encoded size
    /// (`--job-cache-mb`; `txn::JobCache`).
    pub job_cache_bytes: usize,
    /// Threads that run a cluster node's partition engines (`--engine-threads`; 0:
    /// automatic, a thread per `cluster::node::ENGINES_PER_HOST` engines, up to one per
    /// core). Each thread hosts several engines (`host.rs`).
    pub engine_threads: usize,
}

/// Default `Config::outbox_memory`.
pub const DEFAULT_OUTBOX_MEMORY: usize = 16 << 20;

/// Default `--compact-after-deletes`.
pub const fn compact_after_deletes_default() -> u64 {
    compact::DEFAULT_AFTER_DELETES
}

/// Default `--max-queues`.
pub const DEFAULT_MAX_QUEUES: usize = 100_000;
/// A queue that has held no job for this long is forgotten (`Index::retire_idle`).
pub const QUEUE_IDLE: Duration = Duration::from_secs(10 * 60);

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            default_timeout_secs: crate::job::DEFAULT_TIMEOUT_SECS,
            retention: Duration::from_secs(24 * 3600),
            dead_retention: Duration::from_secs(180 * 24 * 3600),
            dead_max: 10_000,
            heartbeat_timeout: Duration::from_secs(45),
            fetch_wait: Duration::from_secs(2),
            max_batch: 4096,
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
            test_clock: false,
            events: EventConfig::default(),
            commit_pipeline: false,
            max_queues: DEFAULT_MAX_QUEUES,
            max_metric_series: metrics::DEFAULT_MAX_SERIES,
            compact_after_deletes: compact::DEFAULT_AFTER_DELETES,
            node_id: "local".to_string(),
            node_addr: None,
            partition: partition::Partition::default(),
            outbox_wake: None,
            outbox_memory: DEFAULT_OUTBOX_MEMORY,
            job_cache_bytes: txn::CACHE_BYTES,
            engine_threads: 0,
        }
    }
}
