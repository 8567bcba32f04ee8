//! Committing a batch: its writes go to the store in one atomic batch, and its replies and
//! events are released only once that batch is durable.
//!
//! Two ways, chosen by `--commit-pipeline`:
//! - **inline** (the default): the engine thread writes the batch (`Store::write`), sends
//!   its FETCH replies, syncs (`Syncer::sync`), then sends the other replies. While the
//!   store syncs, the engine does nothing else.
//! - **pipelined**: the engine thread writes the batch (`Store::write`: applied, visible to
//!   reads, not yet durable) and hands its replies to the syncer thread (`ojsd-sync`), which
//!   syncs (`Syncer::sync`, covering every batch written so far) and then sends them. The
//!   engine meanwhile applies the next batch. Events are published to live subscribers, and
//!   event reads see them, only once the syncer reports their batch durable
//!   (`Msg::Synced`), so nothing is seen that a crash could take back.
//!
//! Either way a reply never leaves before its own batch is durable, and since a store keeps
//! batches in order, nothing a reply could have observed is lost either — with one
//! exception: a FETCH's reply (the jobs it claimed) leaves as soon as the batch is
//! written. A crash that loses the claim leaves the job `available` after the restart,
//! which is what a crash after the claim does too (every `active` job is made available
//! again at start-up): at-least-once either way, one durable round trip
//! fewer per job. The job itself was durable before, unless its PUSH is in the same batch,
//! and then that PUSH was not acknowledged yet. An ACK with `fetch` waits for the sync.
//!
//! **A store that is away** (PostgreSQL restarting: `StoreError::Unavailable`). A sync that
//! fails that way keeps its batches pending in the store, which commits them with a later
//! sync; the engine answers that batch's waiting replies with `BACKEND_UNAVAILABLE` (the
//! command may still take effect, as when a reply is lost: retry), holds its events until
//! a sync gets through, and goes on. Until `Store::ready` says the store commits again,
//! the engine refuses every client command with `BACKEND_UNAVAILABLE` before applying it
//! (so nothing more piles up in memory), and asks again every `READY_RETRY`; the upkeep
//! (timers, cron, sweeps, pruning) waits as well and runs late. Any other
//! store error (fenced, a write refused) leaves memory ahead of what can ever be
//! committed: the engine fails what waits and stops, and the process exits.

use super::inbox::Inbox;
use super::txn::{self, Out, Txn};
use super::{Engine, Msg};
use crate::engine::api::Answered;
use crate::error::{ErrorCode, OjsError};
use crate::events::Event;
use crate::store::{StoreError, Syncer};
use crossbeam_channel::{Receiver, Sender};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use tokio::sync::oneshot;
use uuid::Uuid;

/// Batches handed to the syncer and not yet synced, at most; the engine waits past that.
const MAX_UNSYNCED: usize = 8;

/// One batch's replies, waiting for durability. `claimed` is what a FETCH reply holds, to
/// put back if its connection went away.
struct Group {
    no: u64,
    /// The store's mark after the group's batch (`Store::written`).
    mark: u64,
    replies: Vec<(oneshot::Sender<Answered>, Answered, Vec<Uuid>)>,
}

/// Where a pipelined engine hands its groups: to a sync thread of its own, or to the one
/// its host's engines share ([`SharedSync`]).
enum Handoff {
    Own {
        tx: Sender<Group>,
        thread: std::thread::JoinHandle<()>,
    },
    Shared {
        key: u64,
        tx: Sender<SyncMsg>,
        unsynced: Arc<Unsynced>,
    },
}

/// The engine's side of a pipelined commit.
pub(super) struct Pipeline {
    handoff: Option<Handoff>,
    /// Number of the last group handed to the syncer.
    written: u64,
    /// Events of written batches not yet durable, by group, oldest first.
    unpublished: VecDeque<(u64, Vec<Event>)>,
    /// Set once a sync failed for good: the engine must stop.
    failed: Option<String>,
}

/// The reply to a command whose commit did not get through (the store is away): it may
/// still take effect once the store is back, so clients retry as after a lost reply.
pub(super) fn not_committed(e: &StoreError) -> OjsError {
    OjsError::new(
        ErrorCode::BackendUnavailable,
        format!("the commit did not complete ({e}); it may still take effect; retry"),
    )
}

/// The reply to a command refused while the store is away: nothing was done.
pub(super) fn refused_while_down(why: &str) -> OjsError {
    OjsError::new(
        ErrorCode::BackendUnavailable,
        format!("the store is unavailable ({why}); nothing was done; retry"),
    )
}

impl Pipeline {
    /// Start the syncer thread; it reports to the engine's own channel.
    pub(super) fn start(syncer: Box<dyn Syncer>, engine: Inbox) -> std::io::Result<Pipeline> {
        let (tx, rx) = crossbeam_channel::bounded(MAX_UNSYNCED);
        let thread = std::thread::Builder::new()
            .name("ojsd-sync".into())
            .spawn(move || sync_loop(syncer, rx, engine))?;
        Ok(Pipeline::with(Handoff::Own { tx, thread }))
    }

    fn with(handoff: Handoff) -> Pipeline {
        Pipeline {
            handoff: Some(handoff),
            written: 0,
            unpublished: VecDeque::new(),
            failed: None,
        }
    }

    /// Hand a written batch's group over; false if the syncer is gone. Waits while
    /// [`MAX_UNSYNCED`] of the engine's groups are not synced yet.
    fn hand(&self, group: Group) -> bool {
        match &self.handoff {
            Some(Handoff::Own { tx, .. }) => tx.send(group).is_ok(),
            Some(Handoff::Shared { key, tx, unsynced }) => {
                unsynced.enter() && tx.send(SyncMsg::Group(*key, group)).is_ok()
            }
            None => false,
        }
    }

    /// The first event cursor not yet durable, if any batch holding events is in flight.
    fn first_unpublished(&self) -> Option<u64> {
        self.unpublished
            .iter()
            .find_map(|(_, events)| events.first().map(|e| e.cursor))
    }

    /// Let every handed-over group be synced and answered (at shutdown).
    pub(super) fn finish(&mut self) {
        match self.handoff.take() {
            Some(Handoff::Own { tx, thread }) => {
                drop(tx);
                let _ = thread.join();
            }
            Some(Handoff::Shared { key, tx, .. }) => {
                let (done, left) = crossbeam_channel::bounded(1);
                if tx.send(SyncMsg::Leave(key, done)).is_ok() {
                    let _ = left.recv();
                }
            }
            None => {}
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The syncer thread: take every waiting group, sync once, answer them all.
fn sync_loop(mut syncer: Box<dyn Syncer>, rx: Receiver<Group>, engine: Inbox) {
    let mut failed: Option<String> = None;
    while let Ok(first) = rx.recv() {
        let mut groups = vec![first];
        groups.extend(rx.try_iter());
        sync_groups(&mut *syncer, &engine, &mut failed, groups);
    }
}

/// Sync one engine's `groups` at once (unless its syncer `failed` for good before), tell
/// the engine, then send their replies.
fn sync_groups(
    syncer: &mut dyn Syncer,
    engine: &Inbox,
    failed: &mut Option<String>,
    groups: Vec<Group>,
) {
    let upto = groups.last().map_or(0, |g| g.no);
    let mark = groups.iter().map(|g| g.mark).max().unwrap_or(0);
    let mut away = None;
    if failed.is_none() {
        // Only these groups' writes: what the engine wrote since may already be in
        // the commit that made them durable, or wait for the next sync.
        match syncer.sync_to(mark) {
            Ok(()) => {}
            Err(e @ StoreError::Unavailable(_)) => away = Some(e),
            Err(e) => {
                tracing::error!(error = %e, "sync failed; stopping the engine");
                *failed = Some(e.to_string());
            }
        }
    }
    // Reported before any reply leaves, so that whatever a client sends after its reply
    // reaches the engine after this: a subscription opened then starts past these events.
    let _ = engine.send(Msg::Synced {
        upto,
        failed: failed.clone(),
        away: away.as_ref().map(|e| e.to_string()),
    });
    let mut undelivered = Vec::new();
    for group in groups {
        for (to, answer, claimed) in group.replies {
            let answer = match (&*failed, &away) {
                (Some(e), _) => Err(OjsError::new(
                    ErrorCode::BackendError,
                    format!("commit failed: {e}"),
                )),
                (None, Some(e)) => Err(not_committed(e)),
                (None, None) => answer,
            };
            // A claim whose reply failed goes back to its queue like an undelivered one.
            let sent = to.send(answer).is_ok();
            if away.is_some() || !sent {
                undelivered.extend(claimed);
            }
        }
    }
    if !undelivered.is_empty() {
        let _ = engine.send(Msg::Undelivered(undelivered));
    }
}

/// One sync thread for the pipelined engines of a host (`host.rs`): it takes the groups
/// every engine handed over since its last turn and syncs each engine's at once, in
/// turn. On PostgreSQL the first engine's sync is a commit round that takes every store's
/// pending batches, so the others' are durable by then and return at once: a host's
/// engines wait on one thread's wake-up per round instead of one each.
pub(crate) struct SharedSync {
    tx: Sender<SyncMsg>,
    next: u64,
}

enum SyncMsg {
    Join(u64, Member),
    Group(u64, Group),
    /// The engine stops: its groups before this are answered, then `done` is told.
    Leave(u64, Sender<()>),
}

struct Member {
    syncer: Box<dyn Syncer>,
    engine: Inbox,
    failed: Option<String>,
    unsynced: Arc<Unsynced>,
}

/// An engine's groups handed to the shared syncer and not yet answered; the engine waits
/// at [`MAX_UNSYNCED`], as at a full channel of its own.
#[derive(Default)]
struct Unsynced {
    /// Groups out, and whether the sync thread is gone.
    n: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Unsynced {
    /// Count one more group, once fewer than `MAX_UNSYNCED` are out; false if the sync
    /// thread is gone.
    fn enter(&self) -> bool {
        let mut n = self.n.lock().unwrap_or_else(|p| p.into_inner());
        while n.0 >= MAX_UNSYNCED && !n.1 {
            n = self.cv.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        n.0 += 1;
        !n.1
    }

    fn leave(&self, groups: usize, gone: bool) {
        let mut n = self.n.lock().unwrap_or_else(|p| p.into_inner());
        n.0 = n.0.saturating_sub(groups);
        n.1 |= gone;
        self.cv.notify_all();
    }
}

impl SharedSync {
    pub(super) fn start() -> std::io::Result<SharedSync> {
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("ojsd-sync".into())
            .spawn(move || shared_sync_loop(rx))?;
        Ok(SharedSync { tx, next: 0 })
    }

    /// A pipeline for an engine reporting to `engine`, synced by this thread.
    pub(super) fn join(
        &mut self,
        syncer: Box<dyn Syncer>,
        engine: Inbox,
    ) -> std::io::Result<Pipeline> {
        self.next += 1;
        let key = self.next;
        let unsynced = Arc::new(Unsynced::default());
        let member = Member {
            syncer,
            engine,
            failed: None,
            unsynced: unsynced.clone(),
        };
        if self.tx.send(SyncMsg::Join(key, member)).is_err() {
            return Err(std::io::Error::other("the shared sync thread is gone"));
        }
        Ok(Pipeline::with(Handoff::Shared {
            key,
            tx: self.tx.clone(),
            unsynced,
        }))
    }
}

fn shared_sync_loop(rx: Receiver<SyncMsg>) {
    /// Whatever ends the loop, engines waiting to hand a group over are let go.
    struct Members(HashMap<u64, Member>);
    impl Drop for Members {
        fn drop(&mut self) {
            for m in self.0.values() {
                m.unsynced.leave(0, true);
            }
        }
    }
    let mut members = Members(HashMap::new());
    // Each engine's groups since the last turn, engines in the order they handed over.
    let mut due: Vec<(u64, Vec<Group>)> = Vec::new();
    let settle = |members: &mut Members, due: &mut Vec<(u64, Vec<Group>)>| {
        for (key, groups) in due.drain(..) {
            if let Some(m) = members.0.get_mut(&key) {
                let n = groups.len();
                sync_groups(&mut *m.syncer, &m.engine, &mut m.failed, groups);
                m.unsynced.leave(n, false);
            }
        }
    };
    while let Ok(first) = rx.recv() {
        for msg in std::iter::once(first).chain(rx.try_iter()) {
            match msg {
                SyncMsg::Join(key, m) => {
                    members.0.insert(key, m);
                }
                SyncMsg::Group(key, g) => match due.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, groups)) => groups.push(g),
                    None => due.push((key, vec![g])),
                },
                SyncMsg::Leave(key, done) => {
                    settle(&mut members, &mut due);
                    members.0.remove(&key);
                    let _ = done.send(());
                }
            }
        }
        settle(&mut members, &mut due);
    }
}

impl Engine {
    /// The cursor up to which (excluded) logged events are durable and may be read.
    pub(super) fn event_head(&self) -> u64 {
        let held = self.held_events.first().map(|e| e.cursor);
        held.or_else(|| self.pipeline.as_ref().and_then(Pipeline::first_unpublished))
            .unwrap_or(self.events.next)
    }

    /// The syncer made groups up to `upto` durable (unless the store was `away`): publish
    /// their events.
    pub(super) fn synced(&mut self, upto: u64, failed: Option<String>, away: Option<String>) {
        let Some(p) = self.pipeline.as_mut() else {
            return;
        };
        if failed.is_some() {
            p.failed = failed;
        }
        if let Some(why) = away {
            // Not durable yet: their events wait for a sync that gets through.
            self.store_away(why);
            return;
        }
        let mut durable = Vec::new();
        while p.unpublished.front().is_some_and(|(no, _)| *no <= upto) {
            if let Some((_, events)) = p.unpublished.pop_front() {
                durable.extend(events);
            }
        }
        self.publish(&durable);
    }

    /// Commit the batch (see the module docs). A sync that failed for want of the store
    /// fails the batch's replies and goes on (the store keeps the batch pending); any other
    /// failed write or sync leaves memory ahead of what can be committed, so the engine
    /// refuses to continue: the process restarts from the store.
    pub(super) fn commit(&mut self, mut txn: Txn) -> Result<(), StoreError> {
        let index = &self.index;
        let written = txn.seal(|id| index.jobs.get(&id).map(|e| e.seq).unwrap_or(0));
        self.log_events(&mut txn);
        let batch = std::mem::take(&mut txn.batch);
        let wrote = !batch.is_empty();
        self.compaction.note(
            crate::store::Space::Job,
            batch.deletes(crate::store::Space::Job) as u64,
        );
        let failed = self.pipeline.as_ref().and_then(|p| p.failed.clone());
        let result = match &failed {
            Some(e) => Err(StoreError::Backend(format!("an earlier sync failed: {e}"))),
            None => {
                let began = std::time::Instant::now();
                // The store's mark after this batch: what its sync must cover.
                let r = self.store.write(batch).map(|()| self.store.written());
                self.slow.write = began.elapsed();
                r
            }
        };
        self.slow.sync = std::time::Duration::ZERO;
        self.slow.sync_cpu = std::time::Duration::ZERO;
        let mark = match result {
            Ok(mark) => mark,
            Err(e) => return Err(self.refuse(txn.out.into_iter().map(|(to, _)| to), e)),
        };
        if !txn.events.is_empty() {
            self.logged(mark);
        }
        self.cache = std::mem::take(&mut txn.cache);
        // FETCH replies leave now, before the batch is durable: a claim lost in a crash is
        // the same as one made before it (every `active` job is available again at start),
        // so waiting for the disk would only add a round trip to each job. Everything else
        // (PUSH, ACK, FAIL, ... and an ACK's next job) waits for the sync.
        let mut later = Vec::with_capacity(txn.out.len());
        for (to, out) in txn.out {
            let (claimed, early) = match &out {
                Out::Claimed { ids, early, .. } => (ids.clone(), *early),
                _ => (Vec::new(), false),
            };
            let reply = txn::resolve(out, &written, &self.cache, self.store.as_ref());
            if !early {
                later.push((to, reply, claimed));
            } else if to.send(reply).is_err() {
                // The connection went away before its FETCH was answered.
                self.undelivered.extend(claimed);
            }
        }
        let Some(p) = self.pipeline.as_mut() else {
            // Inline: every earlier batch is durable already (or pending in the store after a
            // sync that failed for want of it, which `store_ready` retries), so only a
            // batch that wrote something needs a sync before its replies.
            if let (true, Some(syncer)) = (wrote, self.inline_syncer.as_mut()) {
                let (synced, wall, cpu) = super::slow::timed(|| syncer.sync());
                (self.slow.sync, self.slow.sync_cpu) = (wall, cpu);
                match synced {
                    Ok(()) => {}
                    Err(e @ StoreError::Unavailable(_)) => {
                        for (to, _, claimed) in later {
                            let _ = to.send(Err(not_committed(&e)));
                            self.undelivered.extend(claimed);
                        }
                        self.held_events.append(&mut txn.events);
                        self.store_away(e.to_string());
                        return Ok(());
                    }
                    Err(e) => {
                        return Err(self.refuse(later.into_iter().map(|(to, _, _)| to), e));
                    }
                }
            }
            for (to, reply, claimed) in later {
                if to.send(reply).is_err() {
                    self.undelivered.extend(claimed);
                }
            }
            if !self.held_events.is_empty() {
                let held = std::mem::take(&mut self.held_events);
                self.publish(&held);
            }
            self.publish(&txn.events);
            return Ok(());
        };
        // A batch that wrote something is synced even with nothing to answer (timers,
        // pruning), so that no write waits for the next client to be made durable.
        if later.is_empty() && txn.events.is_empty() && !wrote {
            return Ok(());
        }
        p.written += 1;
        let no = p.written;
        if !txn.events.is_empty() {
            p.unpublished
                .push_back((no, std::mem::take(&mut txn.events)));
        }
        let sent = p.hand(Group {
            no,
            mark,
            replies: later,
        });
        if !sent {
            return Err(StoreError::Backend("the syncer thread is gone".into()));
        }
        Ok(())
    }

    /// The store cannot commit now: refuse clients' commands until it can (`store_ready`).
    fn store_away(&mut self, why: String) {
        if self.store_down.is_none() {
            tracing::warn!(error = %why, "the store is unavailable; refusing commands until \
                it is back");
            self.store_down = Some((std::time::Instant::now(), why));
        } else if let Some((_, w)) = self.store_down.as_mut() {
            *w = why;
        }
    }

    /// Before a batch: `Ok(None)` when the store commits (after an outage, publishes what it
    /// held back: every write so far is durable once `ready` says so), `Ok(Some(why))` while
    /// it is away, `Err` when it never will again (the engine stops).
    pub(super) fn store_ready(&mut self) -> Result<Option<String>, StoreError> {
        match self.store.ready() {
            Ok(()) => {
                if let Some((since, _)) = self.store_down.take() {
                    tracing::warn!(
                        after_ms = since.elapsed().as_millis() as u64,
                        "the store is back; serving commands again"
                    );
                    let mut durable = std::mem::take(&mut self.held_events);
                    if let Some(p) = self.pipeline.as_mut() {
                        for (_, events) in p.unpublished.drain(..) {
                            durable.extend(events);
                        }
                    }
                    self.publish(&durable);
                }
                Ok(None)
            }
            Err(StoreError::Unavailable(why)) => {
                self.store_away(why.clone());
                Ok(Some(why))
            }
            Err(e) => {
                tracing::error!(error = %e, "the store refuses writes for good; stopping");
                Err(e)
            }
        }
    }

    /// A write or sync failed: answer every reply still waiting with the error.
    fn refuse(
        &self,
        waiting: impl Iterator<Item = oneshot::Sender<Answered>>,
        e: StoreError,
    ) -> StoreError {
        tracing::error!(error = %e, "commit failed; stopping the engine");
        for to in waiting {
            let _ = to.send(Err(OjsError::new(
                ErrorCode::BackendError,
                format!("commit failed: {e}"),
            )));
        }
        e
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
