//! Group commit across a node's partitions: the syncs of the partition stores a node holds
//! that come at about the same time commit in ONE transaction.
//!
//! Each store's [`Shared::sync`](super::postgres_store) hands a request to the node's
//! [`CommitQueue`] (in `NodeCtx`, shared by all the node's stores). The committer of a
//! round takes, when the round starts ([`Source::take`]), the pending batches of the
//! round's stores and of every other store of the node that has some (riders), folded into
//! their net effect: what an engine wrote while its request waited behind the round in
//! flight commits with it, and that batch's own sync then finds it durable. Leader and
//! followers: the request is queued; when fewer than `in_flight` commits are in
//! flight, its caller becomes a committer, takes every request queued and commits them
//! together; otherwise it waits for a commit in flight to finish, and then either its
//! request was taken by another committer (which sets its outcome) or it is among the
//! next round's, whose committer is the first waiter to wake. Nothing waits to collect more: an
//! idle node's lone sync commits at once, as before; under load the requests that queue
//! up behind one commit share the next.
//!
//! The round is ONE statement, its own transaction (one round trip): it fences every
//! partition in it at once (`live`: `SELECT part FROM ojs_partitions WHERE (part, epoch) IN
//! (unnest(...)) ORDER BY part FOR SHARE`), and a request whose partition is missing from
//! the answer is fenced: it gets [`StoreError::Fenced`] (its store then refuses writes for
//! good, as a single sync's fence did) and its ops are left out (`... WHERE part IN (SELECT
//! part FROM live)`); the others commit in the same statement with one `DELETE ... USING
//! unnest(part[], space[], key[])` and one `INSERT ... SELECT unnest(part[], space[],
//! key[], value[]) ON CONFLICT DO UPDATE`, rows sorted by (part, space, key) so that
//! concurrent transactions lock alike. Any other failure is every
//! request's: `Unavailable` (PostgreSQL away; each store puts its batches back as pending)
//! or a statement refused. What a store does after its round (overlay, read cache,
//! `unsynced`) it does itself, under its own locks ([`Source::settle`]); a store is taken
//! by one round at a time, and since it holds its `sync_lock` across its request, it
//! never has two in a queue.

use super::postgres_errors::timed;
use super::postgres_lease::Lease;
use super::postgres_node::NodeCore;
use super::postgres_store::{err, pool_err};
use super::{StoreError, StoreResult};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A store's net ops: (space, key, value or tombstone), sorted by (space, key).
pub(super) type Ops = Vec<(i16, Vec<u8>, Option<Bytes>)>;

/// A store of the node as its commit rounds see it. Its writes are taken when a round
/// starts, not when its request was queued: a round takes what every store of the node
/// has pending then, with a request queued or not (a store without one *rides* along), so
/// that a write waits at most for the round in flight and its own, whichever thread syncs
/// it. A store is taken by one round at a time (its later writes wait for that round to
/// settle), so its batches commit in order.
pub(super) trait Source: Send + Sync {
    fn lease(&self) -> &Arc<Lease>;
    /// Take what is pending for a round: `None` when a round has taken it and not settled
    /// yet, nothing is pending, or (`rider`: no request of its own) it cannot commit now.
    fn take(&self, rider: bool) -> Option<Ops>;
    /// The round that took `ops` (what `take` returned) ended so. Called once per `take`
    /// that returned `Some`.
    fn settle(&self, ops: &Ops, outcome: &StoreResult<()>);
}

/// One store's sync.
pub(super) struct Request {
    pub(super) source: Arc<dyn Source>,
}

struct Slot {
    req: Request,
    /// Set by the committer that took the request.
    outcome: Mutex<Option<StoreResult<()>>>,
    /// A committer took it (under the state's lock).
    taken: std::sync::atomic::AtomicBool,
}

/// Rounds in flight at once when the engines sync inline (`--commit-pipeline false`):
/// while one waits for PostgreSQL's commit, the syncs queued behind it go as a second
/// transaction instead of waiting for the first, so a blocked engine waits for one commit,
/// not two (two transactions of one node never touch the same rows: a store has at most
/// one request queued, and every partition's rows are its own). Pipelined engines go on
/// applying while their sync waits, so there one round at a time groups twice the syncs
/// per transaction and did more jobs/s (bench/RESULTS.md, round 12).
pub const IN_FLIGHT_INLINE: usize = 2;
pub const IN_FLIGHT_PIPELINED: usize = 1;

#[derive(Default)]
struct State {
    queue: Vec<Arc<Slot>>,
    /// Rounds in flight.
    in_flight: usize,
    /// Test hook: a committer waits until this many requests are queued.
    gather: usize,
}

/// The node's commit queue (see the module docs).
pub(super) struct CommitQueue {
    state: Mutex<State>,
    done: Condvar,
    sql: CommitSql,
    /// Transactions committed (rounds that got as far as their COMMIT).
    rounds: AtomicU64,
    /// Rounds in flight at once, at most (`IN_FLIGHT_*`).
    max_in_flight: usize,
    /// The node's stores (see [`Source`]).
    stores: Mutex<Vec<std::sync::Weak<dyn Source>>>,
}

struct CommitSql {
    /// The whole round: fence, deletes and upserts (see `transaction`).
    round: String,
}

impl CommitQueue {
    /// `s`: the quoted schema; `in_flight`: rounds at once (at least 1).
    pub(super) fn new(s: &str, in_flight: usize) -> CommitQueue {
        CommitQueue {
            max_in_flight: in_flight.max(1),
            state: Mutex::new(State::default()),
            done: Condvar::new(),
            rounds: AtomicU64::new(0),
            stores: Mutex::new(Vec::new()),
            sql: CommitSql {
                round: format!(
                    "WITH live AS (\
                       SELECT part FROM {s}.ojs_partitions \
                       WHERE (part, epoch) IN (SELECT * FROM unnest($1::int[], $2::bigint[])) \
                       ORDER BY part FOR SHARE), \
                     gone AS (\
                       DELETE FROM {s}.ojs_kv k \
                       USING unnest($3::int[], $4::int2[], $5::bytea[]) AS d(part, space, key) \
                       WHERE k.part = d.part AND k.space = d.space AND k.key = d.key \
                         AND d.part IN (SELECT part FROM live)), \
                     put AS (\
                       INSERT INTO {s}.ojs_kv (part, space, key, value) \
                       SELECT u.part, u.space, u.key, u.value \
                       FROM unnest($6::int[], $7::int2[], $8::bytea[], $9::bytea[]) \
                         AS u(part, space, key, value) \
                       WHERE u.part IN (SELECT part FROM live) \
                       ON CONFLICT (part, space, key) DO UPDATE SET value = EXCLUDED.value) \
                     SELECT part FROM live"
                ),
            },
        }
    }

    /// Commit `req` with whatever else is queued now or behind the commit in flight; its
    /// own outcome. From a plain thread (it waits with `core.block_on`).
    pub(super) fn submit(&self, core: &NodeCore, req: Request) -> StoreResult<()> {
        let slot = Arc::new(Slot {
            req,
            outcome: Mutex::new(None),
            taken: Default::default(),
        });
        let mut st = self.state.lock().unwrap();
        st.queue.push(slot.clone());
        if st.gather > 0 {
            self.done.notify_all();
        }
        loop {
            if let Some(r) = slot.outcome.lock().unwrap().take() {
                return r;
            }
            if !slot.taken.load(Ordering::Relaxed) && st.in_flight < self.max_in_flight {
                break;
            }
            st = self.done.wait(st).unwrap();
        }
        // The committer of this round.
        st.in_flight += 1;
        while st.queue.len() < st.gather {
            st = self.done.wait(st).unwrap();
        }
        st.gather = 0;
        let round = std::mem::take(&mut st.queue);
        for s in &round {
            s.taken.store(true, Ordering::Relaxed);
        }
        drop(st);
        // Another committer may have taken this request meanwhile (a committer that
        // waits for the test hook's `gather` lets others in): then this round is what
        // was queued since, possibly nothing, and the request's outcome is that one's.
        if !round.is_empty() {
            let outcomes = self.commit(core, &round);
            for (s, r) in round.iter().zip(outcomes) {
                *s.outcome.lock().unwrap() = Some(r);
            }
        }
        let mut st = self.state.lock().unwrap();
        st.in_flight -= 1;
        self.done.notify_all();
        loop {
            if let Some(r) = slot.outcome.lock().unwrap().take() {
                return r;
            }
            st = self.done.wait(st).unwrap();
        }
    }

    /// One transaction for `round` and the riders (see [`Source`]): each request's outcome,
    /// in order (a request whose store had nothing to take: `Ok`; its caller looks at the
    /// store's state, not at this). Every store taken is settled before this returns.
    fn commit(&self, core: &NodeCore, round: &[Arc<Slot>]) -> Vec<StoreResult<()>> {
        let mut taken: Vec<(Arc<dyn Source>, Ops)> = Vec::with_capacity(round.len());
        let mut of_slot = Vec::with_capacity(round.len());
        for s in round {
            of_slot.push(s.req.source.take(false).map(|ops| {
                taken.push((s.req.source.clone(), ops));
                taken.len() - 1
            }));
        }
        for src in self.others(round) {
            if let Some(ops) = src.take(true) {
                taken.push((src, ops));
            }
        }
        let outcomes = self.commit_taken(core, &taken);
        for ((src, ops), outcome) in taken.iter().zip(&outcomes) {
            src.settle(ops, outcome);
        }
        of_slot
            .into_iter()
            .map(|i| i.map_or(Ok(()), |i| copy_result(&outcomes[i])))
            .collect()
    }

    /// One transaction for what was taken: each store's outcome, in order.
    fn commit_taken(
        &self,
        core: &NodeCore,
        taken: &[(Arc<dyn Source>, Ops)],
    ) -> Vec<StoreResult<()>> {
        let fenced = |src: &Arc<dyn Source>| -> StoreResult<()> {
            Err(src
                .lease()
                .fenced("the partition's epoch moved on (taken over)"))
        };
        // The statement's fence names partitions, so a partition's rows are written under
        // one epoch per round: an older store of a partition this node took again (its
        // epoch is gone) is fenced here and left out.
        let mut newest: HashMap<i32, i64> = HashMap::with_capacity(taken.len());
        for (src, _) in taken {
            let e = newest.entry(src.lease().part).or_insert(src.lease().epoch);
            *e = (*e).max(src.lease().epoch);
        }
        let stale: Vec<bool> = taken
            .iter()
            .map(|(src, _)| newest[&src.lease().part] > src.lease().epoch)
            .collect();
        let live: Vec<&(Arc<dyn Source>, Ops)> = taken
            .iter()
            .zip(&stale)
            .filter_map(|(t, stale)| (!stale).then_some(t))
            .collect();
        let mut results = if live.is_empty() {
            Vec::new()
        } else {
            match core.block_on(timed("a commit", self.transaction(core, &live))) {
                Ok(fenced_now) => live
                    .iter()
                    .zip(fenced_now)
                    .map(|((src, _), f)| if f { fenced(src) } else { Ok(()) })
                    .collect(),
                Err(e) => live.iter().map(|_| Err(copy(&e))).collect(),
            }
        }
        .into_iter();
        taken
            .iter()
            .zip(stale)
            .map(|((src, _), stale)| match stale {
                true => fenced(src),
                false => results.next().unwrap_or(Ok(())),
            })
            .collect()
    }

    /// The node's stores without a request in `round`, dropping those that are gone.
    fn others(&self, round: &[Arc<Slot>]) -> Vec<Arc<dyn Source>> {
        let asked: HashSet<*const ()> = round
            .iter()
            .map(|s| Arc::as_ptr(&s.req.source).cast::<()>())
            .collect();
        let mut stores = self.stores.lock().unwrap();
        stores.retain(|w| w.strong_count() > 0);
        stores
            .iter()
            .filter(|w| !asked.contains(&w.as_ptr().cast::<()>()))
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }

    /// Let the node's rounds take `store`'s writes when it has no request queued.
    pub(super) fn register(&self, store: std::sync::Weak<dyn Source>) {
        self.stores.lock().unwrap().push(store);
    }

    /// Whether each request was fenced; `Err` when the round failed whole.
    ///
    /// One statement, so one round trip, in a transaction of its own (PostgreSQL commits
    /// a statement sent outside `BEGIN` when it ends, durably with `synchronous_commit`
    /// on): the fence (`live`: the round's partitions whose epoch is still the one held,
    /// share-locked in partition order, so a takeover's epoch bump waits for this commit
    /// or, if it committed first, leaves the partition out), then the deletes and upserts
    /// of the live partitions' requests only. It was BEGIN, the fence, DELETE, INSERT
    /// and COMMIT, five round trips, each a wake-up of PostgreSQL and of this side.
    async fn transaction(
        &self,
        core: &NodeCore,
        taken: &[&(Arc<dyn Source>, Ops)],
    ) -> StoreResult<Vec<bool>> {
        let client = core.ctx.pool.get().await.map_err(pool_err)?;
        let parts: Vec<i32> = taken.iter().map(|(s, _)| s.lease().part).collect();
        let epochs: Vec<i64> = taken.iter().map(|(s, _)| s.lease().epoch).collect();
        // Requests by partition (each sorted by (space, key) already), so that the rows go
        // in (part, space, key) order. One store per partition (`commit_taken` left out
        // older epochs), and the fence passes it only under the epoch it holds.
        let mut order: Vec<usize> = (0..taken.len()).collect();
        order.sort_by_key(|&i| parts[i]);
        let (mut del_p, mut del_s, mut del_k) = (vec![], vec![], vec![]);
        let (mut put_p, mut put_s, mut put_k, mut put_v) = (vec![], vec![], vec![], vec![]);
        for &i in &order {
            for (space, key, value) in &taken[i].1 {
                match value {
                    Some(v) => {
                        put_p.push(parts[i]);
                        put_s.push(*space);
                        put_k.push(key.as_slice());
                        put_v.push(&v[..]);
                    }
                    None => {
                        del_p.push(parts[i]);
                        del_s.push(*space);
                        del_k.push(key.as_slice());
                    }
                }
            }
        }
        let st = client.prepare_cached(&self.sql.round).await.map_err(err)?;
        // Durable when this returns: the rows' stream ends at ReadyForQuery, which the
        // server sends after the Sync that commits the statement's implicit transaction
        // (and a commit that fails is an ErrorResponse before it).
        let live: Vec<i32> = client
            .query(
                &st,
                &[
                    &parts, &epochs, &del_p, &del_s, &del_k, &put_p, &put_s, &put_k, &put_v,
                ],
            )
            .await
            .map_err(err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !live.is_empty() {
            self.rounds.fetch_add(1, Ordering::Relaxed);
        }
        Ok(parts.iter().map(|p| !live.contains(p)).collect())
    }

    /// Transactions committed so far.
    #[cfg(test)]
    pub(super) fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::SeqCst)
    }

    /// Test hook: requests queued and not yet taken by a round.
    #[cfg(test)]
    pub(super) fn queued_for_test(&self) -> usize {
        self.state.lock().unwrap().queue.len()
    }

    /// Test hook: the next committer waits until `n` requests are queued, so that they
    /// share one round.
    #[cfg(test)]
    pub(super) fn gather_for_test(&self, n: usize) {
        self.state.lock().unwrap().gather = n;
    }
}

/// A round's outcome for each of its requests.
fn copy_result(r: &StoreResult<()>) -> StoreResult<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(copy(e)),
    }
}

/// A round's error for each of its requests.
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        StoreError::Fenced(m) => StoreError::Fenced(m.clone()),
        StoreError::Backend(m) => StoreError::Backend(m.clone()),
        e => StoreError::Backend(e.to_string()),
    }
}
