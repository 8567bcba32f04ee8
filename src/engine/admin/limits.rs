//! Rate limits (ojs-rate-limiting): QUEUE LIMIT sets a queue's concurrency cap and
//! sliding-window start rate, durably (a meta record per limited queue, §7.2); a job's own
//! `rate_limit` policy shares counters with every job of its `key` (§6, kept in the index,
//! see `Index::key_can_start`). FETCH skips a queue or a job at its limit, so the jobs stay
//! `available` (`on_limit: wait`); waiting FETCHes are served again when a limited job
//! leaves `active` or a window or spacing moves on.

use crate::engine::api::Answer;
use crate::engine::request::QueueLimit;
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::store::Space;
use serde_json::json;

pub(in crate::engine) const LIMIT_PREFIX: &str = "ratelimit/";

impl Engine {
    /// QUEUE LIMIT: set or lift a queue's limit (logged; no event: the event vocabulary has
    /// none for it).
    pub(in crate::engine) fn set_queue_limit(
        &mut self,
        txn: &mut Txn,
        name: &str,
        limit: Option<QueueLimit>,
    ) -> OjsResult<Answer> {
        if !crate::job::is_valid_queue(name) {
            return Err(OjsError::new(
                ErrorCode::InvalidQueue,
                format!("invalid queue name {name:?}"),
            ));
        }
        self.check_queue_room(name)?;
        let qid = self.index.queue_id(name);
        let q = self.index.queue_mut(qid);
        q.limit = limit;
        q.starts.clear();
        let key = format!("{LIMIT_PREFIX}{name}");
        match limit {
            Some(l) => {
                let bytes = serde_json::to_vec(&l).unwrap_or_default();
                txn.batch.put(Space::Meta, key.as_bytes(), bytes);
            }
            None => {
                txn.batch.delete(Space::Meta, key.as_bytes());
                // Jobs held back by the old limit may go now.
                self.woke = true;
            }
        }
        let shown = limit.map(|l| l.to_json());
        tracing::info!(queue = name, limit = %json!(shown), "queue rate limit set");
        Ok(Answer::Ok)
    }

    /// Start-up: the limits of the previous run.
    pub(in crate::engine) fn load_queue_limit(&mut self, name: &str, value: &[u8]) {
        match serde_json::from_slice::<QueueLimit>(value) {
            Ok(l) => {
                let q = self.index.queue_id(name);
                self.index.queue_mut(q).limit = Some(l);
            }
            Err(e) => {
                tracing::warn!(queue = name, error = %e, "stored rate limit unreadable; ignored")
            }
        }
    }

    /// Drop the starts that have left their windows, so `next_window_free` only names
    /// times still ahead.
    pub(in crate::engine) fn prune_windows(&mut self) {
        let now = self.clock.now().timestamp_millis();
        for q in self.index.queues.iter_mut().filter(|q| q.limit.is_some()) {
            q.prune_window(now);
        }
        self.index.prune_keys(now);
    }

    /// The soonest a job held back by a rate window may start (engine ms), when a FETCH is
    /// waiting for one.
    pub(in crate::engine) fn next_window_free(&self) -> Option<i64> {
        if self.waiters.is_empty() {
            return None;
        }
        let now = self.clock.now().timestamp_millis();
        let queues = self.index.queues.iter().filter_map(|q| q.window_frees_at());
        queues.chain(self.index.key_frees_at(now)).min()
    }
}
