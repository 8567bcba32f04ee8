//! The PostgreSQL store's partition lease as the owning node holds it: the renewal task
//! (which also refreshes the node's `ojs_nodes` row) and the store's own-clock fence check
//! (see `postgres_store.rs`, "The lease and the fence").

use super::postgres_store::{err, pool_err};
use super::{StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lease, shared with the renewal task (which holds nothing else of the store, so the
/// store and its runtime are never dropped on one of the runtime's own threads).
pub(super) struct Lease {
    pub(super) pool: Pool,
    pub(super) renew_sql: String,
    pub(super) heartbeat_sql: String,
    pub(super) part: i32,
    pub(super) node: String,
    /// The client address registered with each heartbeat.
    pub(super) addr: Option<String>,
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

    /// `Fenced` once the lease is lost or, on this node's monotonic clock, about to expire.
    pub(super) fn check(&self) -> StoreResult<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.fenced("a renewal found it taken over"));
        }
        let age = self.renewed_at.lock().unwrap().elapsed();
        if age + self.ttl / 5 >= self.ttl {
            return Err(self.fenced(&format!(
                "its last renewal was {} ms ago, the lease lasts {} ms",
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
        client
            .execute(&self.heartbeat_sql, &[&self.node, &self.addr])
            .await
            .map_err(err)?;
        Ok(n)
    }

    pub(super) async fn renew_loop(self: Arc<Lease>, every: Duration) {
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
                }
                Ok(Ok(_)) => {
                    self.lost.store(true, Ordering::SeqCst);
                    tracing::error!(part = self.part, epoch = self.epoch, node = %self.node,
                        "lost the partition's lease to another node; refusing writes");
                    return;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
        }
    }
}
