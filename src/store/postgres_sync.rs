//! The store's side of the node's group commit (`postgres_commit.rs`): what a commit
//! round takes of a store and how it settles it ([`Source`]), and how a sync waits for
//! the round that carries its batches ([`Shared::sync_to`]).

use super::super::postgres_commit::{Ops, Request, Source};
use super::super::postgres_lease::Lease;
use super::super::{Space, StoreError, StoreResult};
use super::{copy_err, Pending, Shared};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The net effect of `batches`, in key order (so that concurrent transactions lock rows
/// alike): the last op on a key wins.
fn net_of(batches: &[Pending]) -> BTreeMap<(i16, &[u8]), Option<&Bytes>> {
    let mut net = BTreeMap::new();
    for b in batches {
        for (space, key, value) in &b.ops {
            net.insert((space.index() as i16, key.as_slice()), value.as_ref());
        }
    }
    net
}

impl Source for Shared {
    fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Every pending batch, now, unless a round has taken this store's batches already.
    fn take(&self, rider: bool) -> Option<Ops> {
        // A rider with nothing pending is the common case: answered before any other lock.
        if rider && (self.overlay.read().unwrap().pending.is_empty() || self.committable().is_err())
        {
            return None;
        }
        let mut t = self.taken.lock().unwrap();
        if t.busy {
            return None;
        }
        let batches = std::mem::take(&mut self.overlay.write().unwrap().pending);
        if batches.is_empty() && rider {
            return None;
        }
        let ops = net_of(&batches)
            .into_iter()
            .map(|((space, key), value)| (space, key.to_vec(), value.cloned()))
            .collect();
        t.busy = true;
        t.batches = batches;
        Some(ops)
    }

    /// The round ended: committed (drop from the overlay what no later batch overwrote,
    /// keep it in the read cache), away (pending again, ahead of what came since) or
    /// refused for good (fenced, or an error that does not pass).
    fn settle(&self, ops: &Ops, outcome: &StoreResult<()>) {
        let mut t = self.taken.lock().unwrap();
        let batches = std::mem::take(&mut t.batches);
        match outcome {
            Ok(()) => {
                self.note_synced(None);
                if let Some(upto) = batches.last().map(|b| b.seq) {
                    let mut o = self.overlay.write().unwrap();
                    for (space, key, value) in ops {
                        let sp = Space::ALL[*space as usize];
                        match value {
                            Some(v) => self.cache.put(sp, key, Some(v.clone())),
                            None => self.cache.forget(sp, key),
                        }
                        let map = &mut o.spaces[*space as usize];
                        if map.get(key).is_some_and(|(seq, _)| *seq <= upto) {
                            if let Some((_, v)) = map.remove(key) {
                                let freed = key.len() + v.map_or(0, |v| v.len());
                                o.bytes = o.bytes.saturating_sub(freed);
                            }
                        }
                    }
                    drop(o);
                    self.durable.store(upto, Ordering::SeqCst);
                }
            }
            Err(e @ StoreError::Unavailable(_)) => {
                // Pending again, ahead of what was written meanwhile; their entries never
                // left the overlay. The next sync commits them all (see the module docs).
                let mut o = self.overlay.write().unwrap();
                let newer = std::mem::take(&mut o.pending);
                o.pending = batches;
                o.pending.extend(newer);
                drop(o);
                self.note_unsynced(e);
            }
            Err(e) => {
                tracing::error!(error = %e, "postgres commit failed; refusing further writes");
                *self.failed.lock().unwrap() = Some(copy_err(e));
            }
        }
        t.busy = false;
        drop(t);
        self.settled.notify_all();
    }
}

impl Shared {
    /// Make every batch written so far durable.
    pub(super) fn sync(self: &Arc<Self>) -> StoreResult<()> {
        let mark = self.overlay.read().unwrap().last_seq;
        self.sync_to(mark)
    }

    /// Make the batches up to number `mark` durable: at once if a round did already
    /// (a round takes every store's pending batches when it starts, with a request or
    /// not, `postgres_commit.rs`); after the round that has them if one is in flight; else
    /// with a request for the node's next round. What decides is the store's state after
    /// the round (`durable`, `failed`), not the request's outcome: a round can have taken
    /// these batches without this request.
    pub(super) fn sync_to(self: &Arc<Self>, mark: u64) -> StoreResult<()> {
        let _order = self.sync_lock.lock().unwrap();
        loop {
            if self.durable.load(Ordering::SeqCst) >= mark {
                return Ok(());
            }
            if let Some(e) = self.failed.lock().unwrap().as_ref() {
                return Err(copy_err(e));
            }
            {
                let mut t = self.taken.lock().unwrap();
                if t.busy {
                    while t.busy {
                        t = self.settled.wait(t).unwrap();
                    }
                    continue;
                }
            }
            if let Err(e) = self.committable() {
                if matches!(e, StoreError::Unavailable(_)) {
                    self.note_unsynced(&e);
                }
                return Err(e);
            }
            if self.overlay.read().unwrap().pending.is_empty() {
                *self.unsynced.lock().unwrap() = None;
                return Ok(());
            }
            // Unavailable: pending again (settled so), the caller retries later.
            let source: Arc<dyn Source> = self.clone();
            self.node
                .ctx
                .commits
                .submit(&self.node, Request { source })?;
        }
    }
}
