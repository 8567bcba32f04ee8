//! Bulk admin work in slices: a MUTATE, QUEUE PURGE or QUEUE REMOVE over many jobs does not hold the
//! engine for the whole set. It lists its candidates when it arrives, then each engine
//! iteration works through them for at most [`SLICE_BUDGET`] (each slice committed with
//! that iteration's batch), so other clients' commands are served between slices. The
//! reply is sent when the whole operation is done, after the commit of its last slice.
//!
//! A candidate is looked at again when its slice comes: a job that left the set in the
//! meantime (fetched, retried, deleted) is passed over. A crash part-way leaves the slices
//! already committed done and the rest untouched; the client, which got no reply, may send
//! the command again and it applies to what is left.

use super::mutate::{MutateWork, RemoveWork};
use super::queues::PurgeWork;
use crate::engine::api::{Answer, Answered};
use crate::engine::txn::{Out, Txn};
use crate::engine::Engine;
use crate::error::OjsResult;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use uuid::Uuid;

/// Longest an iteration works on bulk operations before it takes up commands again.
pub const SLICE_BUDGET: Duration = Duration::from_millis(4);
/// Candidates handled between two looks at the clock.
const STRIDE: usize = 64;

pub(in crate::engine) enum BulkWork {
    Mutate(MutateWork),
    Purge(PurgeWork),
    Remove(RemoveWork),
}

/// One bulk operation under way.
pub(in crate::engine) struct Bulk {
    work: BulkWork,
    ids: Vec<Uuid>,
    next: usize,
    matched: usize,
    changed: usize,
    reply: oneshot::Sender<Answered>,
}

impl Bulk {
    pub(in crate::engine) fn new(
        work: BulkWork,
        ids: Vec<Uuid>,
        reply: oneshot::Sender<Answered>,
    ) -> Bulk {
        Bulk {
            work,
            ids,
            next: 0,
            matched: 0,
            changed: 0,
            reply,
        }
    }

    fn done(&self) -> bool {
        self.next >= self.ids.len()
    }
}

impl Engine {
    /// Queue a bulk operation; an empty one is answered in this batch.
    pub(in crate::engine) fn start_bulk(&mut self, txn: &mut Txn, bulk: Bulk) {
        if bulk.done() {
            let answer = self.bulk_answer(txn, &bulk);
            txn.reply(bulk.reply, Out::Answer(Ok(answer)));
        } else {
            self.bulk.push_back(bulk);
        }
    }

    /// Work on the bulk operations, oldest first, for at most [`SLICE_BUDGET`] (all of
    /// them when the engine is stopping, so none is left unanswered). Each finished one is
    /// answered with this batch.
    pub(in crate::engine) fn run_bulk(&mut self, txn: &mut Txn, stopping: bool) {
        let started = Instant::now();
        while let Some(mut bulk) = self.bulk.pop_front() {
            let mut failed = None;
            while !bulk.done() {
                let end = (bulk.next + STRIDE).min(bulk.ids.len());
                if let Err(e) = self.bulk_slice(txn, &mut bulk, end) {
                    failed = Some(e);
                    break;
                }
                if !stopping && started.elapsed() >= SLICE_BUDGET {
                    break;
                }
            }
            if let Some(e) = failed {
                tracing::warn!(error = %e, "bulk operation stopped part-way");
                txn.reply(bulk.reply, Out::Answer(Err(e)));
            } else if bulk.done() {
                let answer = self.bulk_answer(txn, &bulk);
                txn.reply(bulk.reply, Out::Answer(Ok(answer)));
            } else {
                self.bulk.push_front(bulk);
                return;
            }
            if !stopping && started.elapsed() >= SLICE_BUDGET {
                return;
            }
        }
    }

    /// The answer of a finished bulk operation (QUEUE REMOVE forgets its queues now).
    fn bulk_answer(&mut self, txn: &mut Txn, bulk: &Bulk) -> Answer {
        match &bulk.work {
            BulkWork::Mutate(w) => Engine::mutated(w, bulk.matched, bulk.changed),
            BulkWork::Purge(w) => Engine::purged(w, bulk.changed),
            BulkWork::Remove(w) => self.removed(txn, w, bulk.changed),
        }
    }

    /// Candidates `bulk.next..end`.
    fn bulk_slice(&mut self, txn: &mut Txn, bulk: &mut Bulk, end: usize) -> OjsResult<()> {
        while bulk.next < end {
            let id = bulk.ids[bulk.next];
            bulk.next += 1;
            match &bulk.work {
                BulkWork::Mutate(w) => {
                    let (matched, changed) = self.mutate_one(txn, w, id)?;
                    bulk.matched += usize::from(matched);
                    bulk.changed += usize::from(changed);
                }
                BulkWork::Purge(w) => {
                    let purged = self.purge_one(txn, w, id)?;
                    bulk.matched += usize::from(purged);
                    bulk.changed += usize::from(purged);
                }
                BulkWork::Remove(w) => {
                    let removed = self.remove_one(txn, w, id);
                    bulk.matched += usize::from(removed);
                    bulk.changed += usize::from(removed);
                }
            }
        }
        Ok(())
    }
}
