//! The PostgreSQL implementation of `Store` (`--store postgres`): cluster mode
//! (shared/design/cluster.md). One store serves one partition of the cluster's data under a
//! lease that fences every commit; the partitions a process holds share one [`PgNode`]
//! (runtime, pool, renewals, balancer: `postgres_node.rs`).
//!
//! # Tables
//!
//! ojsd creates and migrates its own tables, in the schema it is given (`--postgres-schema`,
//! default `public`), versioned in `ojs_meta` (`schema_version`, `partitions`):
//! `ojs_nodes(node, peer_addr, heartbeat_at)`, `ojs_partitions(part, owner, epoch,
//! lease_until)` and `ojs_kv(part, space, key, value)`, which holds the engine's records
//! exactly as fjall does (one row per key of a [`Space`], key without its prefix). The
//! migration runs in one transaction under a transaction-scoped advisory lock, so two nodes
//! starting at once neither race on `CREATE` nor apply a step twice; a schema newer than
//! this build knows is refused. The partition count (`ojs_meta.partitions`) is fixed when
//! the schema is created; `ojs_partitions` has a row for each.
//!
//! # Overlay and group commit
//!
//! [`Store::write`] appends the batch to an in-memory overlay (per space, an ordered map of
//! key to value or tombstone, each stamped with its batch's number) that every read merges
//! over PostgreSQL, so a write is visible at once. A commit round of the node
//! (`postgres_commit.rs`) takes every pending batch when it starts, whether this store's
//! [`Syncer::sync`] asked for it or not, folds them into their net effect (the last op on
//! a key wins) and commits that in ONE transaction (a `DELETE ... USING unnest(...)` and an
//! `INSERT ... SELECT unnest(...) ON CONFLICT DO UPDATE`); the store then drops from the
//! overlay each entry no later batch has overwritten (`postgres_sync.rs`). A sync returns
//! once its batches are durable, at once when a round already made them so
//! ([`Syncer::sync_to`]). A crash loses the pending batches whole and never keeps a later
//! one without an earlier one, since they commit together or not at all and a store is in
//! one round at a time.
//! [`Store::commit`] is `write` then `sync`. The overlay holds at most what the engine has
//! in flight (`MAX_UNSYNCED` batches, engine/commit.rs); past [`OVERLAY_MAX_BYTES`] of
//! pending values a `write` syncs on its own first, so the overlay stays bounded whoever
//! calls it.
//!
//! A read holds the overlay's read lock while it asks PostgreSQL, and a sync removes
//! entries only under the write lock after its transaction committed: so a reader sees an
//! entry either in the overlay or in the table, never in neither. Scans go in pages
//! (keyset pagination on the primary key; [`PAGE_ROWS`] keys first, each page larger up to
//! [`MAX_PAGE_ROWS`]), each merged with the overlay entries of its key range, and the lock
//! is released before the callback runs; a scan is not a snapshot across pages (as with
//! sled).
//!
//! # The read cache
//!
//! Committed records are also kept in a cache bounded in bytes (`postgres_cache.rs`,
//! `--postgres-cache-mb`), consulted after the overlay and before the table. A sync writes
//! what it committed into it (a delete removes the key) under the overlay's write lock;
//! `get` misses and scan pages fill it under the overlay's read lock, which no sync can
//! take between their query and their fill. Since this node is the partition's only
//! writer while it holds the lease, the cache never holds a value older than the table's.
//!
//! # The lease and the fence
//!
//! A store is made by taking its partition: `UPDATE ojs_partitions SET owner = node, epoch
//! = epoch + 1, lease_until = now() + ttl WHERE part = p AND (owner IS NULL OR owner = node
//! OR lease_until < now())` (database time is the lease clock), once ([`PgNode::take`], the
//! balancer) or retried until `acquire_wait`, then refused as [`StoreError::Leased`]
//! ([`PgNode::acquire`], [`PostgresStore::open`]). The node renews all its leases every
//! `renew_every` in one statement (`... WHERE part = p AND owner = node AND epoch = e` for
//! each); a renewal that does not return a partition marks its lease lost. Every sync's
//! transaction first runs
//! `SELECT part FROM ojs_partitions WHERE (part, epoch) IN (...) FOR SHARE` for the
//! partitions in it: a takeover's `epoch + 1` waits for that lock, and once it has
//! committed the old owner's next sync finds no row for its partition and fails with
//! [`StoreError::Fenced`] (the others in its transaction commit). A fenced
//! store (or one whose sync failed for a reason that does not pass: a statement the
//! server refuses) refuses every later write for good; the engine then answers the waiting
//! clients with an error and stops, so nothing is acknowledged that was not committed
//! under the lease. Dropping the store releases the lease (`owner = NULL`, same epoch), so
//! a successor need not wait out the TTL. A node's renewal, when it holds a lease, also
//! deletes `ojs_nodes` rows whose heartbeat is older than `PRUNE_AFTER_TTLS` (10) leases
//! and that hold no live lease, so CLUSTER lists a dead node as `gone` for a while, not for
//! ever.
//!
//! # When PostgreSQL goes away
//!
//! The store keeps its partition and its pending writes across an outage; see
//! `postgres_errors.rs`.
//!
//! The node's small tokio runtime (two workers, `ojsd-pg`) runs the pool's connections and
//! the node's tick; the trait's synchronous calls come from the engine's, the syncer's and
//! the rebuild's own threads and wait on it with `block_on`. They must never be made from
//! inside a tokio runtime.

use super::{Batch, Bounds, Op, PostgresOptions, Space, Store, StoreError, StoreResult, Syncer};
use bytes::Bytes;
use deadpool_postgres::Pool;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use super::postgres_cache::ReadCache;
use super::postgres_cluster::PgClusterView;
use super::postgres_commit::Source;
use super::postgres_errors::timed;
pub(super) use super::postgres_errors::{err, pool_err};
use super::postgres_lease::Lease;
use super::postgres_node::NodeCore;
use super::postgres_schema::Sql;
use super::{ClusterView, PgNode};

/// Rows of a scan's first page: a scan that stops early (an event log read, a floor key)
/// reads little; each next page is [`PAGE_GROWTH`] times larger, up to [`MAX_PAGE_ROWS`],
/// so a whole-space scan (the rebuild) takes few round trips.
pub const PAGE_ROWS: i64 = 64;
/// How much larger each page of a scan is than the one before.
const PAGE_GROWTH: i64 = 4;
/// The largest page of a scan.
pub const MAX_PAGE_ROWS: i64 = 4096;
/// Bytes of pending values past which `write` syncs before taking more.
pub const OVERLAY_MAX_BYTES: usize = 64 << 20;

/// One pending batch: its ops, last op per key only, in the order written.
struct Pending {
    seq: u64,
    ops: Vec<(Space, Vec<u8>, Option<Bytes>)>,
}

/// What a commit round took of a store.
#[derive(Default)]
struct Taken {
    /// A round has taken `batches` and not settled.
    busy: bool,
    batches: Vec<Pending>,
}

type Entry = (u64, Option<Bytes>);
/// A batch's last op on a key: its position in the batch, its space, value or tombstone.
type LastOp = (usize, Space, Option<Bytes>);

#[derive(Default)]
struct Overlay {
    /// In the order of [`Space::ALL`]: key -> (batch number, value or tombstone).
    spaces: [BTreeMap<Vec<u8>, Entry>; 6],
    /// Written and not yet taken by a sync.
    pending: Vec<Pending>,
    last_seq: u64,
    /// Bytes of keys and values in `spaces`.
    bytes: usize,
}

struct Shared {
    /// The node's runtime and tasks; the runtime ends with the last store and `PgNode`.
    node: Arc<NodeCore>,
    pool: Pool,
    sql: Sql,
    lease: Arc<Lease>,
    overlay: RwLock<Overlay>,
    /// Committed records (see `postgres_cache.rs`): filled and changed only under the
    /// overlay's lock, read after the overlay.
    cache: ReadCache,
    /// Held across a whole sync, so that syncs commit batches in order.
    sync_lock: Mutex<()>,
    /// The batches a commit round took from `pending` and has not settled yet (see
    /// `postgres_commit::Source`); `settled` is notified when it does.
    taken: Mutex<Taken>,
    settled: Condvar,
    /// The number of the last batch committed (see `sync_to`).
    durable: AtomicU64,
    /// Why the store refuses writes for good: fenced, or a sync failed for a reason that
    /// does not pass (see [`err`]).
    failed: Mutex<Option<StoreError>>,
    /// Why the last sync failed for a reason that passes, and when: its batches are pending
    /// again, and `ready` tries them again every [`super::READY_RETRY`].
    unsynced: Mutex<Option<(std::time::Instant, String)>>,
    /// When `ready` last tried a sync again.
    last_try: Mutex<Option<std::time::Instant>>,
    /// Test hook: skip the clock check so that only the database's fence stands.
    clock_check: AtomicBool,
}

pub struct PostgresStore {
    shared: Arc<Shared>,
    cluster: Arc<PgClusterView>,
}

fn copy_err(e: &StoreError) -> StoreError {
    match e {
        StoreError::Fenced(m) => StoreError::Fenced(m.clone()),
        e => StoreError::Backend(format!("an earlier sync failed: {e}")),
    }
}

// The store's side of the node's group commit: how a round takes and settles this store,
// and how a sync waits for it.
#[path = "postgres_sync.rs"]
mod sync;

impl Shared {
    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.node.block_on(f)
    }

    /// Whether a write may be taken: not once fenced (or failed for good). A lease that
    /// lapsed on this node's clock does not stop a write: it stays pending until a sync
    /// can commit it under the lease (see "When PostgreSQL goes away").
    fn writable(&self) -> StoreResult<()> {
        if let Some(e) = self.failed.lock().unwrap().as_ref() {
            return Err(copy_err(e));
        }
        if self.lease.lost.load(Ordering::SeqCst) {
            let e = self.lease.fenced("a renewal found it taken over");
            *self.failed.lock().unwrap() = Some(copy_err(&e));
            return Err(e);
        }
        Ok(())
    }

    /// `writable`, and the lease live on this node's clock.
    fn committable(&self) -> StoreResult<()> {
        self.writable()?;
        if self.clock_check.load(Ordering::SeqCst) {
            self.lease.check()?;
        }
        Ok(())
    }

    /// Remember that commits fail for a reason that passes (logged when it starts).
    fn note_unsynced(&self, e: &StoreError) {
        let mut u = self.unsynced.lock().unwrap();
        match u.as_mut() {
            Some((_, why)) => *why = e.to_string(),
            None => {
                tracing::warn!(error = %e, "postgres commits fail; the writes are kept and \
                    tried again");
                *u = Some((std::time::Instant::now(), e.to_string()));
            }
        }
    }

    /// Commits go through again: forget the note [`note_unsynced`](Self::note_unsynced)
    /// made (only if it is the one made at `since`, when given) and say so.
    pub(super) fn note_synced(&self, since: Option<std::time::Instant>) {
        let mut u = self.unsynced.lock().unwrap();
        if let Some((at, _)) = u.as_ref().filter(|(at, _)| since.is_none_or(|s| s == *at)) {
            tracing::warn!(
                after_ms = at.elapsed().as_millis() as u64,
                "postgres commits go through again"
            );
            *u = None;
        }
    }

    /// See [`Store::ready`].
    fn ready(self: &Arc<Self>) -> StoreResult<()> {
        if let Err(e) = self.committable() {
            if matches!(e, StoreError::Unavailable(_)) {
                self.note_unsynced(&e);
            }
            return Err(e);
        }
        let retry = {
            let mut last = self.last_try.lock().unwrap();
            match self.unsynced.lock().unwrap().as_ref() {
                None => return Ok(()),
                Some((_, why)) if last.is_some_and(|t| t.elapsed() < super::READY_RETRY) => {
                    Err(why.clone())
                }
                Some((since, _)) => {
                    *last = Some(std::time::Instant::now());
                    Ok(*since)
                }
            }
        };
        match retry {
            Err(why) => Err(StoreError::Unavailable(why)),
            Ok(since) => {
                self.sync()?;
                // Every write is durable. This sync may have had nothing to commit (a
                // partition without writes since the outage): then no round's settle clears
                // the note, and `ready` would keep answering its old error between retries.
                self.note_synced(Some(since));
                Ok(())
            }
        }
    }

    /// Visit the merged records of `space` with keys in `(lo, hi)`, ascending or (with
    /// `reverse`) descending, until `f` returns false.
    fn range(
        &self,
        space: Space,
        mut lo: Bound<Vec<u8>>,
        mut hi: Bound<Vec<u8>>,
        reverse: bool,
        first_page: i64,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        let sp = space.index() as i16;
        let mut rows_wanted = first_page.clamp(1, MAX_PAGE_ROWS);
        // The event log is read once, in order, and would only push records out.
        let fill = space != Space::Event;
        loop {
            let mut sql = self.sql.kv.clone();
            let mut params: Vec<Vec<u8>> = Vec::new();
            for (bound, (incl, excl)) in [(&lo, (">=", ">")), (&hi, ("<=", "<"))] {
                let (op, k) = match bound {
                    Bound::Included(k) => (incl, k),
                    Bound::Excluded(k) => (excl, k),
                    Bound::Unbounded => continue,
                };
                params.push(k.clone());
                sql.push_str(&format!(" AND key {op} ${}", params.len() + 3));
            }
            sql.push_str(if reverse {
                " ORDER BY key DESC"
            } else {
                " ORDER BY key"
            });
            sql.push_str(" LIMIT $3");
            let guard = self.overlay.read().unwrap();
            let rows = self.block_on(timed("a read", async {
                let client = self.pool.get().await.map_err(pool_err)?;
                let st = client.prepare_cached(&sql).await.map_err(err)?;
                let mut p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    vec![&self.lease.part, &sp, &rows_wanted];
                for k in &params {
                    p.push(k);
                }
                client.query(&st, &p).await.map_err(err)
            }))?;
            let full = rows.len() as i64 == rows_wanted;
            rows_wanted = (rows_wanted * PAGE_GROWTH).min(MAX_PAGE_ROWS);
            // Values as `Bytes`, shared with the cache and the overlay rather than copied.
            let mut page: BTreeMap<Vec<u8>, Bytes> = BTreeMap::new();
            for row in &rows {
                let (k, v): (Vec<u8>, Vec<u8>) = (row.get(0), row.get(1));
                let v = Bytes::from(v);
                if fill {
                    // Committed values, read under the overlay's lock (see `get`).
                    self.cache.put(space, &k, Some(v.clone()));
                }
                page.insert(k, v);
            }
            // The page covers the range up to its last key when full, else the rest.
            let last = rows.last().map(|r| r.get::<_, Vec<u8>>(0));
            let (plo, phi) = match (&last, full, reverse) {
                (Some(k), true, false) => (lo.clone(), Bound::Included(k.clone())),
                (Some(k), true, true) => (Bound::Included(k.clone()), hi.clone()),
                _ => (lo.clone(), hi.clone()),
            };
            if valid(&plo, &phi) {
                let range = (as_ref(&plo), as_ref(&phi));
                for (k, (_, v)) in guard.spaces[space.index()].range::<[u8], _>(range) {
                    match v {
                        Some(v) => page.insert(k.clone(), v.clone()),
                        None => page.remove(k),
                    };
                }
            }
            drop(guard);
            let go_on = if reverse {
                page.iter().rev().all(|(k, v)| f(k, v))
            } else {
                page.iter().all(|(k, v)| f(k, v))
            };
            match last {
                Some(k) if full && go_on => {
                    if reverse {
                        hi = Bound::Excluded(k);
                    } else {
                        lo = Bound::Excluded(k);
                    }
                }
                _ => return Ok(()),
            }
        }
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether `BTreeMap::range` takes these bounds (it panics on an empty or inverted one).
fn valid(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

impl Drop for Shared {
    /// Give the partition back at once (same epoch: nothing of ours is fenced by it), so
    /// that another node need not wait out the lease. Inside a tokio runtime, where waiting
    /// is not allowed, the release is handed to the node's runtime and not waited for (if
    /// this was the node's last store and handle, its runtime stops and the lease expires
    /// by itself).
    fn drop(&mut self) {
        let lease = self.lease.clone();
        lease.released.store(true, Ordering::SeqCst);
        let ctx = self.node.ctx.clone();
        if lease.lost.load(Ordering::SeqCst) {
            ctx.forget(&lease);
            return;
        }
        // Held (so the balancer does not take it again) until the release is through.
        let release = async move {
            let r = tokio::time::timeout(Duration::from_secs(2), async {
                let client = ctx.pool.get().await.ok()?;
                client
                    .execute(&ctx.sql.release, &[&lease.part, &lease.node, &lease.epoch])
                    .await
                    .ok()
            })
            .await;
            match r.ok().flatten() {
                Some(_) => tracing::info!(
                    part = lease.part,
                    epoch = lease.epoch,
                    "released the partition's lease"
                ),
                None => tracing::warn!(
                    part = lease.part,
                    "could not release the partition's lease; it expires by itself"
                ),
            }
            ctx.forget(&lease);
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            self.node.handle().spawn(release);
        } else {
            self.node.block_on(release);
        }
    }
}

impl PostgresStore {
    /// Open a node of its own ([`PgNode::open`]) and take partition `opts.part`, waiting as
    /// a standby up to `opts.acquire_wait` ([`PgNode::acquire`]).
    pub fn open(opts: &PostgresOptions) -> StoreResult<PostgresStore> {
        PgNode::open(opts)?.acquire(opts)
    }

    /// The store of a partition `node` has just taken under `lease`.
    pub(super) fn from_node(node: Arc<NodeCore>, lease: Arc<Lease>) -> PostgresStore {
        let ctx = &node.ctx;
        let store = PostgresStore {
            cluster: ctx.cluster.clone(),
            shared: Arc::new(Shared {
                pool: ctx.pool.clone(),
                sql: Sql::new(&ctx.schema),
                lease,
                overlay: RwLock::new(Overlay::default()),
                cache: ReadCache::new(ctx.cache_bytes),
                sync_lock: Mutex::new(()),
                taken: Mutex::new(Taken::default()),
                settled: Condvar::new(),
                durable: AtomicU64::new(0),
                failed: Mutex::new(None),
                unsynced: Mutex::new(None),
                last_try: Mutex::new(None),
                clock_check: AtomicBool::new(true),
                node: node.clone(),
            }),
        };
        let weak: std::sync::Weak<dyn Source> = Arc::downgrade(&store.shared) as _;
        node.ctx.commits.register(weak);
        store
    }

    /// The partition this store serves.
    pub fn part(&self) -> u32 {
        self.shared.lease.part as u32
    }

    /// The epoch under which this store writes.
    pub fn epoch(&self) -> i64 {
        self.shared.lease.epoch
    }

    /// Test hook: run SQL on the store's pool (to look at or tamper with its tables).
    #[cfg(test)]
    pub(crate) fn sql_for_test(&self, sql: &str) -> Vec<tokio_postgres::Row> {
        let sh = &self.shared;
        sh.block_on(async {
            let client = sh.pool.get().await.unwrap();
            client.query(sql, &[]).await.unwrap()
        })
    }

    /// Test hooks: a frozen node stops renewing; the clock check can be turned off so that
    /// the database's fence alone is tested.
    #[cfg(test)]
    pub(crate) fn freeze_for_test(&self, frozen: bool, clock_check: bool) {
        self.shared.lease.paused.store(frozen, Ordering::SeqCst);
        self.shared.clock_check.store(clock_check, Ordering::SeqCst);
    }
}

struct PgSyncer(Arc<Shared>);

impl Syncer for PgSyncer {
    fn sync(&mut self) -> StoreResult<()> {
        self.0.sync()
    }

    fn sync_to(&mut self, mark: u64) -> StoreResult<()> {
        self.0.sync_to(mark)
    }
}

impl Store for PostgresStore {
    fn write(&mut self, batch: Batch) -> StoreResult<()> {
        let sh = &self.shared;
        sh.writable()?;
        // Checked whole before any of it applies; the last op on a key wins.
        let mut last: HashMap<(usize, Vec<u8>), LastOp> = HashMap::new();
        for (i, op) in batch.ops.into_iter().enumerate() {
            let (k, v) = match op {
                Op::Put(k, v) => (k, Some(Bytes::from(v))),
                Op::Delete(k) => (k, None),
            };
            let (space, key) = match Space::split(&k) {
                Some((space, key)) if !key.is_empty() => (space, key.to_vec()),
                _ => {
                    return Err(StoreError::Backend(format!(
                        "a key without a known space prefix, or empty: {k:?}"
                    )))
                }
            };
            last.insert((space.index(), key), (i, space, v));
        }
        if last.is_empty() {
            return Ok(());
        }
        let mut ops: Vec<_> = last.into_iter().collect();
        ops.sort_by_key(|(_, (i, _, _))| *i);
        let too_big = {
            let mut o = sh.overlay.write().unwrap();
            o.last_seq += 1;
            let seq = o.last_seq;
            let mut pending = Vec::with_capacity(ops.len());
            for ((_, key), (_, space, value)) in ops {
                let size = key.len() + value.as_ref().map_or(0, |v| v.len());
                o.bytes += size;
                if let Some((_, old)) =
                    o.spaces[space.index()].insert(key.clone(), (seq, value.clone()))
                {
                    o.bytes = o
                        .bytes
                        .saturating_sub(key.len() + old.map_or(0, |v| v.len()));
                }
                pending.push((space, key, value));
            }
            o.pending.push(Pending { seq, ops: pending });
            o.bytes > OVERLAY_MAX_BYTES
        };
        if too_big {
            match sh.sync() {
                // The batch is taken and pending; the overlay's bound waits for the database
                // (the engine refuses clients' commands meanwhile, see `ready`).
                Err(StoreError::Unavailable(_)) | Ok(()) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn commit(&mut self, batch: Batch) -> StoreResult<()> {
        self.write(batch)?;
        self.shared.sync()
    }

    fn syncer(&self) -> StoreResult<Box<dyn Syncer>> {
        Ok(Box::new(PgSyncer(self.shared.clone())))
    }

    fn written(&self) -> u64 {
        self.shared.overlay.read().unwrap().last_seq
    }

    /// A round takes `pending` whole: a batch is still held while the oldest pending one
    /// is not newer.
    fn still_pending(&self, mark: u64) -> bool {
        let o = self.shared.overlay.read().unwrap();
        mark <= o.last_seq && o.pending.first().is_some_and(|b| b.seq <= mark)
    }

    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let sh = &self.shared;
        let guard = sh.overlay.read().unwrap();
        if let Some((_, v)) = guard.spaces[space.index()].get(key) {
            return Ok(v.as_ref().map(|v| v.to_vec()));
        }
        if let Some(v) = sh.cache.get(space, key) {
            return Ok(v.map(|v| v.to_vec()));
        }
        let sp = space.index() as i16;
        let row = sh.block_on(timed("a read", async {
            let client = sh.pool.get().await.map_err(pool_err)?;
            let st = client.prepare_cached(&sh.sql.get).await.map_err(err)?;
            client
                .query_opt(&st, &[&sh.lease.part, &sp, &key])
                .await
                .map_err(err)
        }))?;
        let value: Option<Vec<u8>> = row.map(|r| r.get(0));
        // Still under the overlay's read lock: no sync can have put a newer value in the
        // cache since the query (see `postgres_cache.rs`).
        sh.cache
            .put(space, key, value.as_deref().map(Bytes::copy_from_slice));
        drop(guard);
        Ok(value)
    }

    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()> {
        self.shared.range(
            space,
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            MAX_PAGE_ROWS,
            f,
        )
    }

    fn scan_from(
        &self,
        space: Space,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        let lo = Bound::Included(from.to_vec());
        self.shared
            .range(space, lo, Bound::Unbounded, false, PAGE_ROWS, f)
    }

    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let mut found = None;
        let hi = Bound::Included(key.to_vec());
        self.shared
            .range(space, Bound::Unbounded, hi, true, 1, &mut |k, _| {
                found = Some(k.to_vec());
                false
            })?;
        Ok(found)
    }

    fn bounds(&self, space: Space) -> StoreResult<Bounds> {
        let mut ends = [None, None];
        for (i, reverse) in [false, true].into_iter().enumerate() {
            let u = Bound::Unbounded;
            self.shared
                .range(space, u.clone(), u, reverse, 1, &mut |k, _| {
                    ends[i] = Some(k.to_vec());
                    false
                })?;
        }
        let [first, last] = ends;
        Ok((first, last))
    }

    /// `pg_total_relation_size` of `ojs_kv` (table, indexes and TOAST): every partition's
    /// rows together, since PostgreSQL does not size a part of a table cheaply.
    fn size_on_disk(&self) -> StoreResult<u64> {
        let sh = &self.shared;
        let size: i64 = sh.block_on(async {
            let client = sh.pool.get().await.map_err(pool_err)?;
            let row = client.query_one(&sh.sql.size, &[]).await.map_err(err)?;
            Ok::<_, StoreError>(row.get(0))
        })?;
        Ok(size.max(0) as u64)
    }

    fn name(&self) -> &'static str {
        super::StoreKind::Postgres.name()
    }

    fn cluster_view(&self) -> Option<Arc<dyn ClusterView>> {
        Some(self.cluster.clone())
    }

    fn ready(&self) -> StoreResult<()> {
        self.shared.ready()
    }

    fn announce(&self, addr: &str) {
        self.shared.node.announce(addr)
    }
}

#[cfg(test)]
#[path = "postgres_tests.rs"]
mod tests;
