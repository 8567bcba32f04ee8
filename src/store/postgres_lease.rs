//! The PostgreSQL store's partition leases as the owning node holds them: each store's
//! [`Lease`] (its epoch, the own-clock check) and the node's renewal of all of them at once
//! (`renew_held`: one statement per tick, which also refreshes the node's `ojs_nodes` row
//! and, when the node holds a lease, prunes long-dead nodes from it). See
//! `postgres_store.rs`, "The lease and the fence", `postgres_node.rs` for the tick, and
//! `postgres_errors.rs` for what happens while PostgreSQL is away.

use super::postgres_node::NodeCtx;
use super::postgres_store::{err, pool_err};
use super::{StoreError, StoreResult};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A node whose heartbeat is older than this many lease TTLs is deleted from `ojs_nodes` by
/// a node that holds a lease, so that CLUSTER does not list dead nodes for ever (it shows
/// them as `gone` until then).
pub const PRUNE_AFTER_TTLS: i64 = 10;

/// One partition's lease as its store holds it, shared with the node's registry of held
/// leases (which holds nothing else of the store, so that a store is never kept alive, or
/// dropped, by the node's tasks).
pub(super) struct Lease {
    pub(super) part: i32,
    pub(super) node: String,
    pub(super) epoch: i64,
    pub(super) ttl: Duration,
    /// When the last successful renewal (or the acquisition) was sent.
    pub(super) renewed_at: Mutex<Instant>,
    /// A renewal found the partition owned by a later epoch (or by nobody).
    pub(super) lost: AtomicBool,
    /// The store was dropped and gave the lease back: not renewed, not "lost".
    pub(super) released: AtomicBool,
    /// Test hook: a frozen store (its lease is left out of the renewals).
    pub(super) paused: AtomicBool,
}

impl Lease {
    pub(super) fn new(part: i32, node: &str, epoch: i64, ttl: Duration, sent: Instant) -> Lease {
        Lease {
            part,
            node: node.to_string(),
            epoch,
            ttl,
            renewed_at: Mutex::new(sent),
            lost: AtomicBool::new(false),
            released: AtomicBool::new(false),
            paused: AtomicBool::new(false),
        }
    }

    /// `Fenced` once a renewal found the lease lost; `Unavailable` while, on this node's
    /// monotonic clock, it is about to expire or has (the renewals did not get through: the
    /// database is away). A renewal that gets through again at the same epoch, which only
    /// happens when no other node took the partition meanwhile, ends the latter.
    pub(super) fn check(&self) -> StoreResult<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.fenced("a renewal found it taken over"));
        }
        let age = self.renewed_at.lock().unwrap().elapsed();
        if age + self.ttl / 5 >= self.ttl {
            return Err(StoreError::Unavailable(format!(
                "node {} has not renewed its lease of partition {} for {} ms (it lasts {} \
                 ms): waiting for a renewal to get through",
                self.node,
                self.part,
                age.as_millis(),
                self.ttl.as_millis()
            )));
        }
        Ok(())
    }

    pub(super) fn fenced(&self, why: &str) -> StoreError {
        StoreError::Fenced(format!(
            "node {} no longer holds partition {} at epoch {}: {why}",
            self.node, self.part, self.epoch
        ))
    }
}

pub(super) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// Heartbeat the node's row, then renew every held lease (but the frozen ones) in one
/// statement: a held lease the statement does not return is lost (another node took the
/// partition, or an operator moved its epoch on), and its store is fenced from then on.
/// Returns how many leases were renewed.
pub(super) async fn renew_held(ctx: &NodeCtx) -> StoreResult<usize> {
    let held: Vec<Arc<Lease>> = ctx
        .held
        .lock()
        .unwrap()
        .values()
        .filter(|h| {
            !h.lease.paused.load(Ordering::SeqCst) && !h.lease.released.load(Ordering::SeqCst)
        })
        .map(|h| h.lease.clone())
        .collect();
    let client = ctx.pool.get().await.map_err(pool_err)?;
    let addr = ctx.addr.lock().unwrap().clone();
    client
        .execute(&ctx.sql.heartbeat, &[&ctx.node, &addr, &ctx.peer_addr])
        .await
        .map_err(err)?;
    if held.is_empty() {
        return Ok(0);
    }
    let parts: Vec<i32> = held.iter().map(|l| l.part).collect();
    let epochs: Vec<i64> = held.iter().map(|l| l.epoch).collect();
    let sent = Instant::now();
    let rows = client
        .query(
            &ctx.sql.renew,
            &[&parts, &epochs, &ttl_ms(ctx.ttl), &ctx.node],
        )
        .await
        .map_err(err)?;
    let renewed: HashSet<i32> = rows.iter().map(|r| r.get(0)).collect();
    for lease in &held {
        if renewed.contains(&lease.part) {
            let mut at = lease.renewed_at.lock().unwrap();
            *at = (*at).max(sent);
        } else if !lease.released.load(Ordering::SeqCst) {
            lease.lost.store(true, Ordering::SeqCst);
            ctx.forget(lease);
            tracing::error!(part = lease.part, epoch = lease.epoch, node = %ctx.node,
                "lost the partition's lease to another node; its store refuses writes");
        }
    }
    if !renewed.is_empty() {
        // A holder keeps `ojs_nodes` to the living (and the recently gone).
        let ttls = ttl_ms(ctx.ttl).saturating_mul(PRUNE_AFTER_TTLS);
        let pruned = client
            .execute(&ctx.sql.prune, &[&ttls, &ctx.node])
            .await
            .map_err(err)?;
        if pruned > 0 {
            tracing::info!(pruned, "forgot nodes whose heartbeat stopped long ago");
        }
    }
    Ok(renewed.len())
}
