//! Worker internals: shared shutdown state, the processor loop, the
//! heartbeat loop, and reconnect-with-backoff.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{Client, ConnectOptions, Directive};
use crate::worker::{Handler, JobOutcome, WorkerStats};
use crate::Result;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(crate) struct Config {
    pub addr: String,
    pub queues: Vec<String>,
    pub concurrency: usize,
    pub wid: String,
    pub password: Option<String>,
    pub labels: Vec<String>,
    pub heartbeat_interval: Duration,
    pub max_attempts: u32,
    pub read_timeout: Duration,
}

impl Config {
    fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            wid: Some(self.wid.clone()),
            password: self.password.clone(),
            labels: self.labels.clone(),
            hostname: None,
            timeout: Some(self.read_timeout),
        }
    }
}

/// Ordered so a mode can only move forward: Running → Quiet → Terminate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    Running,
    Quiet,
    Terminate,
}

/// State shared by all worker threads and stop handles.
pub(crate) struct Shared {
    mode: Mutex<Mode>,
    changed: Condvar,
    /// slot → id of the job that slot is running, for BEAT.
    active: Mutex<BTreeMap<usize, String>>,
    processed: AtomicU64,
    failed: AtomicU64,
}

/// Our own locks never guard half-updated data, so a poisoned lock (a
/// panicking thread) is safe to keep using.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            mode: Mutex::new(Mode::Running),
            changed: Condvar::new(),
            active: Mutex::new(BTreeMap::new()),
            processed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    pub fn mode(&self) -> Mode {
        *lock(&self.mode)
    }

    pub fn set_mode(&self, m: Mode) {
        let mut cur = lock(&self.mode);
        if m > *cur {
            *cur = m;
            self.changed.notify_all();
        }
    }

    /// Sleep up to `d`, waking early on terminate. True if terminating.
    fn sleep_unless_terminated(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut cur = lock(&self.mode);
        while *cur != Mode::Terminate {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cur = match self.changed.wait_timeout(cur, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        true
    }

    /// Block while quiet (a quiet worker only ever moves on to terminate).
    fn wait_while_quiet(&self) {
        let mut cur = lock(&self.mode);
        while *cur == Mode::Quiet {
            cur = self.changed.wait(cur).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn active_ids(&self) -> Vec<String> {
        lock(&self.active).values().cloned().collect()
    }

    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            processed: self.processed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// Any worker thread exiting (normally, with an error, or by panic) means
/// the whole worker is shutting down; tell the others.
pub(crate) struct TerminateOnExit<'a>(pub &'a Shared);

impl Drop for TerminateOnExit<'_> {
    fn drop(&mut self) {
        self.0.set_mode(Mode::Terminate);
    }
}

fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    (FIRST_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
}

/// Connect, retrying with exponential backoff. `Ok(None)` if asked to
/// terminate while waiting; `Err` after `max_attempts` failures.
fn connect_retry(cfg: &Config, shared: &Shared) -> Result<Option<Client>> {
    let opts = cfg.connect_options();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match Client::connect_with(&cfg.addr, &opts) {
            Ok(c) => return Ok(Some(c)),
            Err(e) if attempt >= cfg.max_attempts => return Err(e),
            Err(_) => {
                if shared.sleep_unless_terminated(backoff(attempt)) {
                    return Ok(None);
                }
            }
        }
    }
}

/// An ACK/FAIL that has not reached the server yet.
struct Report {
    id: String,
    outcome: JobOutcome,
}

/// Deliver a report. A server error reply (e.g. the job was cancelled or
/// its reservation expired) is final, so only connection errors are kept
/// for a retry after reconnecting. With `fetch` queues, an ACK also takes the
/// next job (`ACK … fetch`), which is returned.
fn deliver(
    conn: &mut Client,
    pending: &mut Option<Report>,
    fetch: Option<&[&str]>,
) -> Result<Option<Value>> {
    let Some(r) = pending.as_ref() else {
        return Ok(None);
    };
    let res = match (&r.outcome, fetch) {
        (JobOutcome::Ack(result), Some(queues)) => {
            conn.ack_fetch(&r.id, result.as_ref(), queues, None)
        }
        (JobOutcome::Ack(result), None) => conn.ack(&r.id, result.as_ref()).map(|()| None),
        (
            JobOutcome::Fail {
                error_type,
                message,
                backtrace,
            },
            _,
        ) => conn
            .fail(&r.id, error_type, message, backtrace)
            .map(|()| None),
    };
    match res {
        Err(e) if e.is_connection_error() => Err(e),
        res => {
            *pending = None;
            Ok(res.unwrap_or(None))
        }
    }
}

/// One processor slot: FETCH when it holds no job, handler, then ACK with
/// fetch (the reply is the next job) or FAIL, until terminated.
pub(crate) fn processor(
    slot: usize,
    cfg: &Config,
    handlers: &HashMap<String, Handler>,
    shared: &Shared,
) -> Result<()> {
    let queues: Vec<&str> = cfg.queues.iter().map(String::as_str).collect();
    let mut conn: Option<Client> = None;
    let mut pending: Option<Report> = None;
    let mut held: Option<Value> = None;
    let mut failures = 0u32;
    loop {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match connect_retry(cfg, shared)? {
                Some(c) => conn.insert(c),
                None => break,
            },
        };
        match step(slot, c, &queues, handlers, shared, &mut pending, &mut held) {
            Ok(true) => failures = 0,
            Ok(false) => break,
            Err(e) => {
                failures += 1;
                if failures >= cfg.max_attempts {
                    return Err(e);
                }
                if e.is_connection_error() {
                    conn = None;
                }
                // With a report still owed, go round once more even when
                // terminating: the reconnect gives up fast if it must.
                if shared.sleep_unless_terminated(backoff(failures)) && pending.is_none() {
                    break;
                }
            }
        }
    }
    if let Some(c) = conn {
        let _ = c.end();
    }
    Ok(())
}

/// One iteration. `Ok(false)` means the worker is terminating.
fn step(
    slot: usize,
    conn: &mut Client,
    queues: &[&str],
    handlers: &HashMap<String, Handler>,
    shared: &Shared,
    pending: &mut Option<Report>,
    held: &mut Option<Value>,
) -> Result<bool> {
    // A report left over from a lost connection: a plain ACK, then FETCH.
    deliver(conn, pending, None)?;
    // A job in hand (from the last ACK) is run whatever the mode: it is ours.
    let job = match held.take() {
        Some(job) => job,
        None => {
            match shared.mode() {
                Mode::Terminate => return Ok(false),
                Mode::Quiet => {
                    shared.wait_while_quiet();
                    return Ok(true);
                }
                Mode::Running => {}
            }
            let Some(job) = conn.fetch(queues)? else {
                return Ok(true); // nothing within the server's block time
            };
            job
        }
    };
    // Without an id the job can be neither run safely nor reported.
    let Some(id) = job.get("id").and_then(Value::as_str).map(str::to_string) else {
        return Ok(true);
    };
    lock(&shared.active).insert(slot, id.clone());
    let outcome = dispatch(handlers, &job);
    lock(&shared.active).remove(&slot);
    shared.processed.fetch_add(1, Ordering::Relaxed);
    if matches!(outcome, JobOutcome::Fail { .. }) {
        shared.failed.fetch_add(1, Ordering::Relaxed);
    }
    *pending = Some(Report { id, outcome });
    // While quiet or terminating, ACK without taking a new job.
    let fetch = (shared.mode() == Mode::Running).then_some(queues);
    *held = deliver(conn, pending, fetch)?;
    Ok(true)
}

/// Run the handler for the job's type, turning panics into failures.
fn dispatch(handlers: &HashMap<String, Handler>, job: &Value) -> JobOutcome {
    let job_type = job.get("type").and_then(Value::as_str).unwrap_or("");
    let Some(handler) = handlers.get(job_type) else {
        return JobOutcome::fail(
            "unknown_job_type",
            &format!("no handler registered for job type {job_type:?}"),
        );
    };
    // The handler only sees a shared &Value, so observing it after a panic
    // cannot expose broken invariants of ours.
    match catch_unwind(AssertUnwindSafe(|| handler(job))) {
        Ok(outcome) => outcome,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_string());
            JobOutcome::fail("panic", &msg)
        }
    }
}

/// Heartbeat loop on its own connection: report active jobs, obey the
/// server's quiet/terminate directives.
pub(crate) fn heartbeat(cfg: &Config, shared: &Shared) -> Result<()> {
    // Connect up front so a bad address or password surfaces immediately.
    let mut conn = connect_retry(cfg, shared)?;
    let mut failures = 0u32;
    loop {
        if shared.sleep_unless_terminated(cfg.heartbeat_interval) {
            break;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match connect_retry(cfg, shared)? {
                Some(c) => conn.insert(c),
                None => break,
            },
        };
        match c.beat(&cfg.wid, &shared.active_ids()) {
            Ok(Directive::Running) => failures = 0,
            Ok(Directive::Quiet) => {
                failures = 0;
                shared.set_mode(Mode::Quiet);
            }
            Ok(Directive::Terminate) => {
                shared.set_mode(Mode::Terminate);
                break;
            }
            Err(e) => {
                failures += 1;
                if failures >= cfg.max_attempts {
                    return Err(e);
                }
                if e.is_connection_error() {
                    conn = None;
                }
            }
        }
    }
    if let Some(c) = conn {
        let _ = c.end();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(4), Duration::from_millis(800));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[test]
    fn mode_only_moves_forward() {
        let s = Shared::new();
        s.set_mode(Mode::Terminate);
        s.set_mode(Mode::Quiet);
        assert_eq!(s.mode(), Mode::Terminate);
        assert!(s.sleep_unless_terminated(Duration::from_secs(60)));
    }
}
