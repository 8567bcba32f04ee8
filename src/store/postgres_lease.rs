//! The PostgreSQL store's partition lease as the owning node holds it: the renewal task
//! (which also refreshes the node's `ojs_nodes` row and, as the holder, prunes long-dead
//! nodes from it) and the store's own-clock check (see `postgres_store.rs`, "The lease and
//! the fence", and "When PostgreSQL goes away").

use super::postgres_store::{err, pool_err};
use super::{StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A node whose heartbeat is older than this many lease TTLs is deleted from `ojs_nodes` by
/// the partition's holder, so that CLUSTER does not list dead nodes for ever (it shows them
/// as `gone` until then).
pub const PRUNE_AFTER_TTLS: i64 = 10;

/// The lease, shared with the renewal task (which holds nothing else of the store, so the
/// store and its runtime are never dropped on one of the runtime's own threads).
pub(super) struct Lease {
    pub(super) pool: Pool,
    pub(super) renew_sql: String,
    pub(super) heartbeat_sql: String,
    pub(super) part: i32,
    pub(super) node: String,
    /// The client address registered with each heartbeat (set once the listener is bound:
    /// a port 0 is only known then).
    pub(super) addr: Mutex<Option<String>>,
    /// The peer listener's address (`--peer-listen`), if any.
    pub(super) peer_addr: Option<String>,
    /// Deletes `ojs_nodes` rows whose heartbeat is older than [`PRUNE_AFTER_TTLS`] leases.
    pub(super) prune_sql: String,
    pub(super) epoch: i64,
    pub(super) ttl: Duration,
    /// When the last successful renewal (or the acquisition) was sent.
    pub(super) renewed_at: Mutex<Instant>,
    /// A renewal found the partition owned by a later epoch.
    pub(super) lost: AtomicBool,
    pub(super) stop: tokio::sync::Notify,
    /// Test hook: a frozen node (no renewals).
    pub(super) paused: AtomicBool,
}

impl Lease {
    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
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
                "node {} has not renewed its lease of partition {} for {} ms (it lasts {}                  ms): waiting for a renewal to get through",
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

    async fn renew(&self) -> Result<u64, StoreError> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let n = client
            .execute(
                &self.renew_sql,
                &[&self.part, &self.node, &self.epoch, &self.ttl_ms()],
            )
            .await
            .map_err(err)?;
        let addr = self.addr.lock().unwrap().clone();
        client
            .execute(&self.heartbeat_sql, &[&self.node, &addr, &self.peer_addr])
            .await
            .map_err(err)?;
        if n == 1 {
            // The holder keeps `ojs_nodes` to the living (and the recently gone).
            let ttls = self.ttl_ms().saturating_mul(PRUNE_AFTER_TTLS);
            let pruned = client
                .execute(&self.prune_sql, &[&ttls, &self.node])
                .await
                .map_err(err)?;
            if pruned > 0 {
                tracing::info!(pruned, "forgot nodes whose heartbeat stopped long ago");
            }
        }
        Ok(n)
    }

    /// Register `addr` at once (the listener is bound), then with every renewal.
    pub(super) async fn announce(&self, addr: String) -> StoreResult<()> {
        *self.addr.lock().unwrap() = Some(addr.clone());
        let client = self.pool.get().await.map_err(pool_err)?;
        client
            .execute(
                &self.heartbeat_sql,
                &[&self.node, &Some(addr), &self.peer_addr],
            )
            .await
            .map_err(err)?;
        Ok(())
    }

    pub(super) async fn renew_loop(self: Arc<Lease>, every: Duration) {
        let mut failing: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = self.stop.notified() => return,
            }
            if self.paused.load(Ordering::SeqCst) {
                continue;
            }
            let sent = Instant::now();
            match tokio::time::timeout(self.ttl, self.renew()).await {
                Ok(Ok(1)) => {
                    let mut at = self.renewed_at.lock().unwrap();
                    *at = (*at).max(sent);
                    if let Some(since) = failing.take() {
                        tracing::warn!(
                            part = self.part,
                            epoch = self.epoch,
                            failing_ms = since.elapsed().as_millis() as u64,
                            "renewed the partition's lease again (same epoch: no other node \
                             took it meanwhile)"
                        );
                    }
                }
                Ok(Ok(_)) => {
                    self.lost.store(true, Ordering::SeqCst);
                    tracing::error!(part = self.part, epoch = self.epoch, node = %self.node,
                        "lost the partition's lease to another node; refusing writes");
                    return;
                }
                Ok(Err(e)) => {
                    failing.get_or_insert(sent);
                    tracing::warn!(error = %e, "lease renewal failed")
                }
                Err(_) => {
                    failing.get_or_insert(sent);
                    tracing::warn!("lease renewal timed out")
                }
            }
        }
    }
}
