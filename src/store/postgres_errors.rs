//! The PostgreSQL store's errors, and what it does when PostgreSQL goes away (restarted,
//! failed over, unreachable for a while).
//!
//! The pool makes new connections as
//! needed (a closed one is not recycled), and every commit and read is given up after
//! [`STATEMENT_TIMEOUT`]. Errors that pass (no connection, SQLSTATE classes 08 and 53,
//! 57P01-57P03, serialization failures; see [`err`]) are [`StoreError::Unavailable`]:
//! - a sync that fails so puts its batches back at the head of the pending ones (their
//!   overlay entries never left) and fails; a later sync commits them with whatever was
//!   written since, as one net effect. Its COMMIT may or may not have landed: committing
//!   the same net effect again is harmless, since the fence proves no one else wrote the
//!   partition meanwhile. The engine answers the batch's clients `BACKEND_UNAVAILABLE`
//!   ("may still take effect"), and refuses new commands until `Store::ready` (which
//!   tries the pending batches again, at most every `READY_RETRY`) says commits go
//!   through;
//! - the lease: renewals that fail are tried again every `renew_every`. When the last
//!   successful one was sent more than `ttl - ttl/5` ago on this node's monotonic clock,
//!   the store stops committing (`Unavailable`, without asking the database: another node
//!   may take the partition once the lease has run out in database time) but keeps taking
//!   writes, which stay pending. The node keeps its partition across an outage: the
//!   renewal SQL needs only owner and epoch, so when the database is back and no other
//!   node took the partition meanwhile (a one-node deployment, or the standbys were cut
//!   off too), the next renewal succeeds at the same epoch and the pending batches commit;
//!   if another node took it, the renewal (or the fence) finds the epoch moved on and the
//!   store is fenced for good, its pending batches never land, and the process exits (a
//!   fresh process comes back as a standby).
//!

use super::{StoreError, StoreResult};
use std::time::Duration;

/// Longest a commit or a read waits for PostgreSQL (a connection included) before it is
/// given up as `Unavailable`, so that no client waits without bound while it is away.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PostgreSQL error as the store's: [`StoreError::Unavailable`] for what passes (the
/// connection failed or was closed, the server is shutting down, starting up or out of
/// connections, a serialization failure or deadlock), [`StoreError::Backend`] for the rest
/// (a statement the server refuses: a bug, or a schema changed under us).
pub(crate) fn err(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => {
            let text = format!(
                "postgres: {}: {} ({})",
                db.severity(),
                db.message(),
                db.code().code()
            );
            if passes(db.code().code()) {
                StoreError::Unavailable(text)
            } else {
                StoreError::Backend(text)
            }
        }
        // No answer from the server: the connection is gone (or never was).
        None => StoreError::Unavailable(format!("postgres: {e}")),
    }
}

/// SQLSTATEs of conditions that pass: class 08 (connection exception), 53 (insufficient
/// resources), 57P01-57P03 (admin or crash shutdown, cannot connect now), 40001 and 40P01.
fn passes(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(code, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => err(e),
        deadpool_postgres::PoolError::Timeout(t) => {
            StoreError::Unavailable(format!("postgres pool: timed out ({t:?})"))
        }
        e => StoreError::Backend(format!("postgres pool: {e}")),
    }
}

/// `f` within [`STATEMENT_TIMEOUT`], else `Unavailable` (its outcome unknown).
pub(super) async fn timed<T>(
    what: &str,
    f: impl std::future::Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    match tokio::time::timeout(STATEMENT_TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::Unavailable(format!(
            "postgres: {what} took longer than {} s",
            STATEMENT_TIMEOUT.as_secs()
        ))),
    }
}
