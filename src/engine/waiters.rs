//! FETCHes that wait: a FETCH (or an ACK with `fetch`) with no job for it now is parked
//! as a [`Waiter`], in deadline order, until a job becomes available in one of its queues
//! (`serve_waiters`, once per engine iteration) or its wait runs out (answered null).

use super::txn::{Out, Txn};
use super::workers::Holder;
use super::{answer_of, Answer, Answered, ConnId, Engine};
use crate::error::OjsResult;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub(super) struct Waiter {
    wid: Option<Arc<str>>,
    conn: Option<ConnId>,
    queues: Vec<String>,
    count: Option<usize>,
    pub(super) deadline: Instant,
    reply: oneshot::Sender<Answered>,
    /// The reply also confirms an ACK: it must not leave before its batch is durable.
    durable: bool,
}

/// A FETCH to serve: from FETCH itself, or from an ACK that asked for the next job.
pub(super) struct Fetching {
    pub(super) queues: Vec<String>,
    pub(super) count: Option<usize>,
    pub(super) wait: Option<Duration>,
    pub(super) durable: bool,
}

impl Engine {
    /// Claim jobs for a FETCH now, or park it as a waiter (`None`: the waiter holds the
    /// reply) until a job comes or its wait ends.
    /// ACK, then FETCH for the same worker in the same batch: one reply, sent once the ACK
    /// is durable, carries the next job (or nothing, at once, to a worker told to stop).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ack_fetch(
        &mut self,
        txn: &mut Txn,
        wid: Option<Arc<str>>,
        conn: Option<ConnId>,
        id: &str,
        result: Option<serde_json::Value>,
        queues: Vec<String>,
        wait: Option<Duration>,
        reply: oneshot::Sender<Answered>,
    ) -> Option<(oneshot::Sender<Answered>, OjsResult<Out>)> {
        if let Err(e) = self.ack(txn, wid.as_ref(), id, result, false) {
            return Some((reply, Err(e)));
        }
        let f = Fetching {
            queues,
            count: None,
            wait,
            durable: true,
        };
        self.fetch_or_wait(txn, wid, conn, f, reply)
    }

    /// FETCH (and the fetch of an ACK with `fetch`): a job now, or wait for one (`None`:
    /// it waits, and is answered later). A worker told to go quiet or terminate gets no new
    /// job: its FETCH waits out its wait and answers null, as Faktory's does, so a client
    /// looping on FETCH does not spin (on both dialects); its ACK's fetch answers null at
    /// once.
    pub(super) fn fetch_or_wait(
        &mut self,
        txn: &mut Txn,
        wid: Option<Arc<str>>,
        conn: Option<ConnId>,
        f: Fetching,
        reply: oneshot::Sender<Answered>,
    ) -> Option<(oneshot::Sender<Answered>, OjsResult<Out>)> {
        if wid
            .as_deref()
            .is_some_and(|w| self.workers.directive(w).is_some())
        {
            if f.durable {
                return Some((reply, Ok(answer_of(Answer::Nothing))));
            }
            return self.park(wid, conn, f, reply);
        }
        let by = Holder::of(wid.as_ref(), conn);
        match self.fetch(txn, by, &f.queues, f.count.unwrap_or(1)) {
            Ok(ids) if ids.is_empty() => self.park(wid, conn, f, reply),
            Ok(ids) => Some((reply, Ok(fetch_out(ids, f.count, f.durable)))),
            Err(e) => Some((reply, Err(e))),
        }
    }

    /// A FETCH with nothing for it now: answered null at once when its wait is zero, else
    /// parked until a job comes (`serve_waiters`) or its wait runs out.
    pub(super) fn park(
        &mut self,
        wid: Option<Arc<str>>,
        conn: Option<ConnId>,
        f: Fetching,
        reply: oneshot::Sender<Answered>,
    ) -> Option<(oneshot::Sender<Answered>, OjsResult<Out>)> {
        if f.wait.is_some_and(|w| w.is_zero()) {
            return Some((reply, Ok(answer_of(Answer::Nothing))));
        }
        let wait = f
            .wait
            .map_or(self.cfg.fetch_wait, |w| w.min(self.cfg.fetch_wait));
        let deadline = Instant::now() + wait;
        // Kept in deadline order, so only the front can be due: a shorter wait goes before
        // the longer ones already waiting.
        let at = self.waiters.partition_point(|w| w.deadline <= deadline);
        self.waiters.insert(
            at,
            Waiter {
                wid,
                conn,
                queues: f.queues,
                count: f.count,
                deadline,
                reply,
                durable: f.durable,
            },
        );
        None
    }

    /// Hand newly available jobs to waiting FETCHes, oldest waiter first, and time out the rest.
    pub(super) fn serve_waiters(&mut self, txn: &mut Txn, stopping: bool) {
        let now = Instant::now();
        // A slot of a rate-limited queue came free, or its window moved on.
        self.prune_windows();
        if std::mem::take(&mut self.index.limit_freed)
            || self
                .next_window_free()
                .is_some_and(|t| t <= self.clock.now().timestamp_millis())
        {
            self.woke = true;
        }
        if std::mem::take(&mut self.woke) && !stopping {
            // Offer what became available, oldest waiter first.
            let mut keep = VecDeque::with_capacity(self.waiters.len());
            while let Some(w) = self.waiters.pop_front() {
                if w.reply.is_closed() {
                    continue;
                }
                // A worker told to go quiet while it waited gets nothing (null at its deadline).
                let quiet = w
                    .wid
                    .as_deref()
                    .is_some_and(|x| self.workers.directive(x).is_some());
                if !quiet && self.any_available(&w.queues) {
                    let by = Holder::of(w.wid.as_ref(), w.conn);
                    match self.fetch(txn, by, &w.queues, w.count.unwrap_or(1)) {
                        Ok(ids) if !ids.is_empty() => {
                            txn.reply(w.reply, fetch_out(ids, w.count, w.durable));
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            txn.reply(w.reply, Out::Answer(Err(e)));
                            continue;
                        }
                    }
                }
                keep.push_back(w);
            }
            self.waiters = keep;
        }
        // Waiters are kept in deadline order (FETCH inserts them so), so only the front can
        // be due: idle connections cost nothing per turn.
        while self
            .waiters
            .front()
            .is_some_and(|w| stopping || w.deadline <= now)
        {
            if let Some(w) = self.waiters.pop_front() {
                txn.reply(w.reply, answer_of(Answer::Nothing));
            }
        }
    }

    /// Whether any of these queues has a job a FETCH could take right now.
    fn any_available(&self, queues: &[String]) -> bool {
        queues.iter().any(|q| {
            self.index.find_queue(q).is_some_and(|id| {
                let queue = self.index.queue(id);
                !queue.paused && queue.count(crate::job::State::Available) > 0
            })
        })
    }
}

/// A FETCH's reply: sent as soon as its batch is written, before the batch is durable
/// (`commit.rs`), unless it also confirms an ACK (`durable`).
pub(super) fn fetch_out(ids: Vec<uuid::Uuid>, count: Option<usize>, durable: bool) -> Out {
    Out::Claimed {
        array: count.is_some() || ids.len() != 1,
        ids,
        early: !durable,
    }
}
