//! Start-up: rebuild the in-memory index from the store. Jobs that were `active` when the
//! process stopped go back to `available` (their worker's connection is gone with it).

use super::index::{Entry, TimerKind};
use super::txn::{decode_record, Txn};
use super::Engine;
use crate::job::{parse_ts, State};
use crate::store::{Space, StoreError};
use serde::Deserialize;
use uuid::Uuid;

/// The fields of a stored envelope the index needs; the rest is skipped unparsed.
#[derive(Deserialize)]
struct View {
    state: State,
    queue: String,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    scheduled_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    next_retry_at: Option<String>,
    #[serde(default)]
    completed_at: Option<String>,
    #[serde(default)]
    cancelled_at: Option<String>,
    #[serde(default)]
    discarded_at: Option<String>,
    /// Only whether it is there: the few jobs that have one are parsed in full.
    #[serde(default)]
    unique: Option<serde::de::IgnoredAny>,
}

fn ms(s: &Option<String>) -> Option<i64> {
    s.as_deref()
        .and_then(parse_ts)
        .map(|t| t.timestamp_millis())
}

impl Engine {
    pub(super) fn rebuild(&mut self) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let now_ms = self.clock.now().timestamp_millis();
        let retention = self.cfg.retention.as_millis() as i64;
        let default_timeout = self.cfg.default_timeout_secs;
        let mut interrupted = Vec::new();
        let mut bad = 0usize;
        let mut max_seq = 0u64;
        let mut unique = Vec::new();
        let index = &mut self.index;
        self.store.scan(Space::Job, &mut |key, value| {
            let (Ok(id), Some((seq, json))) = (Uuid::from_slice(key), decode_record(value)) else {
                bad += 1;
                return true;
            };
            let Ok(v) = serde_json::from_slice::<View>(json) else {
                bad += 1;
                return true;
            };
            max_seq = max_seq.max(seq);
            let mut state = v.state;
            if state == State::Active {
                interrupted.push(id);
                state = State::Available;
            }
            let timer = match state {
                State::Scheduled => ms(&v.scheduled_at).map(|t| (t, TimerKind::Promote)),
                State::Retryable => ms(&v.next_retry_at).map(|t| (t, TimerKind::Promote)),
                State::Completed => ms(&v.completed_at).map(|t| (t + retention, TimerKind::Prune)),
                State::Cancelled => ms(&v.cancelled_at).map(|t| (t + retention, TimerKind::Prune)),
                // Dead letters are pruned by `prune_dead`, not by a timer.
                _ => None,
            };
            // A scheduled or retryable job must always have its timer; promote at once if not.
            let timer = match (state, timer) {
                (State::Scheduled | State::Retryable, None) => Some((now_ms, TimerKind::Promote)),
                (_, t) => t,
            };
            if state == State::Discarded {
                index.add_dead(ms(&v.discarded_at).unwrap_or(now_ms), id);
            }
            if v.unique.is_some() {
                let job = serde_json::from_slice::<crate::job::Job>(json).ok();
                match job.as_ref().and_then(super::unique::policy_of) {
                    Some((_, key)) => {
                        let created = job.map_or(now_ms, |j| j.created_at.timestamp_millis());
                        unique.push((id, key, created));
                    }
                    None => {
                        tracing::warn!(job = %id, "stored unique policy unreadable; not indexed")
                    }
                }
            }
            let queue = index.queue_id(&v.queue);
            index.insert(
                id,
                Entry {
                    state,
                    queue,
                    priority: v.priority,
                    seq,
                    timer,
                    expires: ms(&v.expires_at),
                    worker: None,
                    timeout_ms: (v.timeout.filter(|t| *t > 0).unwrap_or(default_timeout) as i64)
                        .saturating_mul(1000),
                },
            );
            true
        })?;
        self.index.next_seq = max_seq + 1;
        self.index_unique(unique);
        let mut paused = Vec::new();
        self.store.scan(Space::Meta, &mut |key, _| {
            if let Some(name) = key.strip_prefix(super::admin::PAUSED_PREFIX.as_bytes()) {
                paused.push(String::from_utf8_lossy(name).into_owned());
            }
            true
        })?;
        for name in paused {
            let q = self.index.queue_id(&name);
            self.index.queue_mut(q).paused = true;
        }
        // Rewrite interrupted jobs as available, in one commit, before serving anyone.
        self.now = self.clock.now();
        let mut txn = Txn::default();
        for id in &interrupted {
            let now = self.now;
            match txn.job_mut(self.store.as_ref(), *id) {
                Ok(job) => {
                    job.state = State::Available;
                    job.started_at = None;
                    job.worker_id = None;
                    job.enqueued_at = Some(now);
                }
                Err(e) => {
                    tracing::error!(job = %id, error = %e, "could not requeue interrupted job")
                }
            }
        }
        let index = &self.index;
        let _ = txn.seal(|id| index.jobs.get(&id).map(|e| e.seq).unwrap_or(0));
        self.store.commit(std::mem::take(&mut txn.batch))?;
        if bad > 0 {
            tracing::warn!(records = bad, "unreadable job records were skipped");
        }
        tracing::info!(
            jobs = self.index.jobs.len(),
            requeued = interrupted.len(),
            ms = started.elapsed().as_millis() as u64,
            "index rebuilt from the store"
        );
        Ok(())
    }
}
