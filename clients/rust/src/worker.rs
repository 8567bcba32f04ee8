//! A threaded worker: fetch jobs, run the registered handler, ACK or FAIL.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::runtime::{self, Config, Mode, Shared};
use crate::{Error, Result};

/// What a handler decided about a job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// Success, with an optional result stored on the job.
    Ack(Option<Value>),
    /// Failure; the server applies the job's retry policy.
    Fail {
        error_type: String,
        message: String,
        backtrace: Vec<String>,
    },
}

impl JobOutcome {
    /// Success without a result.
    pub fn ok() -> JobOutcome {
        JobOutcome::Ack(None)
    }

    /// Failure without a backtrace.
    pub fn fail(error_type: &str, message: &str) -> JobOutcome {
        JobOutcome::Fail {
            error_type: error_type.to_string(),
            message: message.to_string(),
            backtrace: Vec::new(),
        }
    }
}

/// A job handler. It receives the whole envelope (`type`, `args`, `id`, ...).
pub type Handler = Arc<dyn Fn(&Value) -> JobOutcome + Send + Sync>;

/// Counters returned by [`Worker::run`]. `processed` counts every job a
/// handler finished (acked or failed); `failed` counts the ones reported
/// with FAIL (including unknown types and panics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub processed: u64,
    pub failed: u64,
}

/// Asks a running (or not yet started) worker to shut down gracefully:
/// stop fetching, finish current jobs, say END, return from `run`.
#[derive(Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.shared.set_mode(Mode::Terminate);
    }
}

/// Builder and runner for a worker process.
pub struct Worker {
    cfg: Config,
    handlers: HashMap<String, Handler>,
    shared: Arc<Shared>,
}

impl Worker {
    pub fn new(addr: &str) -> Worker {
        Worker {
            cfg: Config {
                addr: addr.to_string(),
                queues: vec!["default".to_string()],
                concurrency: 1,
                wid: random_wid(),
                password: None,
                labels: Vec::new(),
                heartbeat_interval: Duration::from_secs(15),
                max_attempts: 10,
                // Comfortably above the server's ~2 s FETCH block so a dead
                // peer is noticed without tripping on normal waits.
                read_timeout: Duration::from_secs(60),
            },
            handlers: HashMap::new(),
            shared: Arc::new(Shared::new()),
        }
    }

    /// Queues to fetch from, in priority order. Default `["default"]`.
    pub fn queues(mut self, q: &[&str]) -> Self {
        self.cfg.queues = q.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Number of jobs processed at once, each on its own connection.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.cfg.concurrency = n.max(1);
        self
    }

    /// Worker id shared by all of this worker's connections.
    pub fn wid(mut self, wid: &str) -> Self {
        self.cfg.wid = wid.to_string();
        self
    }

    pub fn password(mut self, p: &str) -> Self {
        self.cfg.password = Some(p.to_string());
        self
    }

    pub fn labels(mut self, labels: &[&str]) -> Self {
        self.cfg.labels = labels.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.cfg.heartbeat_interval = d;
        self
    }

    /// Consecutive failed connection attempts / commands tolerated per
    /// thread before `run` gives up and returns the error. Default 10.
    pub fn max_reconnect_attempts(mut self, n: u32) -> Self {
        self.cfg.max_attempts = n.max(1);
        self
    }

    /// Socket read timeout for the worker's connections. Default 60 s.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.cfg.read_timeout = d;
        self
    }

    /// Handle jobs whose `type` is `job_type`.
    pub fn register(
        mut self,
        job_type: &str,
        h: impl Fn(&Value) -> JobOutcome + Send + Sync + 'static,
    ) -> Self {
        self.handlers.insert(job_type.to_string(), Arc::new(h));
        self
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The worker id in use (generated unless set with [`wid`](Self::wid)).
    pub fn worker_id(&self) -> &str {
        &self.cfg.wid
    }

    /// Run until terminated by the server or a [`StopHandle`]; returns the
    /// counters, or the error that made a thread give up.
    pub fn run(self) -> Result<WorkerStats> {
        let Worker {
            cfg,
            handlers,
            shared,
        } = self;
        let (cfg, handlers, shared) = (&cfg, &handlers, &*shared);
        let results: Vec<Result<()>> = thread::scope(|s| {
            let mut threads = vec![s.spawn(move || {
                let _guard = runtime::TerminateOnExit(shared);
                runtime::heartbeat(cfg, shared)
            })];
            for slot in 0..cfg.concurrency {
                threads.push(s.spawn(move || {
                    let _guard = runtime::TerminateOnExit(shared);
                    runtime::processor(slot, cfg, handlers, shared)
                }));
            }
            threads
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|_| Err(Error::Protocol("worker thread panicked".into())))
                })
                .collect()
        });
        results.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(shared.stats())
    }
}

/// 64 random bits as hex. RandomState is seeded from the OS, so this needs
/// no extra dependency; time and pid are mixed in for good measure.
fn random_wid() -> String {
    let mut h = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
