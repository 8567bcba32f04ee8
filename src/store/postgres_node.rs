//! A node of a PostgreSQL cluster ([`PgNode`]): what the partitions a process holds share —
//! one tokio runtime (`ojsd-pg`, two workers), one connection pool, the node's row in
//! `ojs_nodes`, the renewal of its leases, the balancer, and the key → partition lookup.
//! Each partition it holds is a [`PostgresStore`] of its own (overlay, read cache, lease,
//! fence: `postgres_store.rs`) over that runtime and pool.
//!
//! # Opening
//!
//! [`PgNode::open`] migrates the schema (`postgres_schema.rs`) and learns the partition
//! count: the cluster's is fixed when its schema is created (`ojs_meta.partitions`, from
//! `--partitions`); a later open asking for another count uses the stored one and says so.
//! The pool holds `clamp(4 + 2 P, 8, 32)` connections: each held partition's engine and
//! syncer make one synchronous call at a time, and the node's tasks need a few.
//!
//! # Taking a partition, and giving it back
//!
//! [`PgNode::take`] takes partition `p` once, now, if it is free, expired or already this
//! node's (`epoch + 1`; database time is the lease clock) and returns its store;
//! [`PgNode::acquire`] waits for one as a standby (today's single-partition start-up,
//! `open_postgres`). Each store gets `read_cache_bytes / P` of read cache, so that however
//! many partitions a node comes to hold, its caches stay within `--postgres-cache-mb`
//! (a node holding a fair share of `P / nodes` uses that fraction of it). Dropping a store
//! releases its lease (`owner = NULL`, same epoch) so that another node can take it at
//! once; the runtime and pool live on until the last `PgNode` clone and the last store are
//! gone. A store dropped on a thread inside a tokio runtime (where waiting is not allowed)
//! hands the release to the node's runtime and does not wait for it.
//!
//! # The tick: heartbeat, renewal, balance
//!
//! A task on the node's runtime runs every `renew_every` (at once when the balancer's
//! `wake` is notified, at least 50 ms apart). It heartbeats the node's row and renews every
//! held lease in one statement (`postgres_lease.rs`, `renew_held`): a held partition the
//! renewal does not return is lost, and its store fenced. Once [`PgNode::run`] gave it
//! hooks, it then reads the routing table (`ojs_partitions ⋈ ojs_nodes`: owner, epoch,
//! whether the lease is live in database time, the owner's addresses) and the live nodes
//! (heartbeat within one lease TTL), hands the routes to `NodeHooks::routes`, and balances
//! to a fair share `ceil(P / live nodes)` (`postgres_balance.rs`):
//! - below its share, it takes free or expired partitions, trying them from an offset of
//!   its own (a hash of its id) so that nodes starting together try different rows first;
//!   a race lost to another node is a partition not taken. Each store it takes goes to
//!   `NodeHooks::acquired`, which runs on the runtime and must not block;
//! - availability beats balance: a partition this node has seen free or expired for more
//!   than two lease TTLs is taken whatever the share;
//! - above its share while some live node holds fewer than `floor(P / live)`, it asks the
//!   node to give up the surplus, highest partitions first (`NodeHooks::release`), once per
//!   partition until the store is dropped, and never one it took less than two ticks ago.
//!
//! The hooks are kept by the node's task: they must not hold a `PgNode` (or a store), or
//! the runtime would keep itself alive.
//!
//! # Which partition holds a key
//!
//! [`PgNode::locate`] answers `SELECT part FROM ojs_kv WHERE space = ... AND key = ...` on
//! the node's runtime, through a oneshot, so that any runtime can await it (the cluster
//! routes an ACK by job id without asking every node). Committed rows only. For
//! a job record ([`Space::Job`], a 16-byte id) it uses the partial index `ojs_kv (key)
//! WHERE space = 0 AND octet_length(key) = 16` (schema version 4): one probe, and the
//! predicate written out in the statement lets every plan use it. A full
//! `(space, key)` index would also serve the other spaces, but every insert and delete of
//! every record would pay for it, the event log's above all (appended and pruned all the
//! time), for lookups nobody makes; the job records are where the jobs an ACK names are
//! (their state records, under id + 0x01, are left out since version 4: every transition
//! rewrites one). Other keys are looked up through the primary key, `part = ANY(0..P)`:
//! one probe per partition.

use super::postgres_balance::{plan, HeldInfo, View};
use super::postgres_cluster::PgClusterView;
use super::postgres_commit::CommitQueue;
use super::postgres_errors::{timed, STATEMENT_TIMEOUT};
use super::postgres_lease::{renew_held, ttl_ms, Lease};
use super::postgres_schema::{
    acquire, check_partitions, heartbeat_sql, migrate, quote_schema, take_sql,
};
use super::postgres_store::{err, pool_err};
use super::{
    ClusterView, NodeHooks, PartRoute, PostgresOptions, PostgresStore, Space, StoreError,
    StoreResult,
};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// A node's connections: `clamp(4 + 2 P, MIN, MAX)`.
const MIN_POOL: usize = 8;
const MAX_POOL: usize = 32;
/// Woken ticks are at least this far apart.
const MIN_TICK: Duration = Duration::from_millis(50);

fn pool_size(parts: u32) -> usize {
    (4 + 2 * parts as usize).clamp(MIN_POOL, MAX_POOL)
}

/// A partition this node holds: the store's lease, and what the balancer knows of it.
pub(super) struct Held {
    pub(super) lease: Arc<Lease>,
    pub(super) info: HeldInfo,
}

pub(super) struct NodeSql {
    pub(super) heartbeat: String,
    pub(super) renew: String,
    pub(super) prune: String,
    pub(super) take: String,
    pub(super) release: String,
    routes: String,
    live_nodes: String,
    locate_job: String,
    locate_any: String,
}

impl NodeSql {
    fn new(s: &str) -> NodeSql {
        NodeSql {
            heartbeat: heartbeat_sql(s),
            // The rows are locked in partition order first, as a group commit's fence
            // locks them (`postgres_commit.rs`): in any other order a renewal and a commit
            // of the same node could deadlock.
            renew: format!(
                "UPDATE {s}.ojs_partitions p \
                 SET lease_until = now() + $3::bigint * interval '1 millisecond' \
                 WHERE p.part IN (SELECT q.part FROM {s}.ojs_partitions q \
                   JOIN unnest($1::int[], $2::bigint[]) AS h(part, epoch) \
                   ON q.part = h.part AND q.epoch = h.epoch \
                   WHERE q.owner = $4 ORDER BY q.part FOR UPDATE OF q) \
                 AND p.owner = $4 \
                 RETURNING p.part"
            ),
            prune: format!(
                "DELETE FROM {s}.ojs_nodes WHERE node <> $2 AND \
                 (heartbeat_at IS NULL OR heartbeat_at < now() - $1::bigint * interval '1 millisecond') \
                 AND NOT EXISTS (SELECT 1 FROM {s}.ojs_partitions p \
                   WHERE p.owner = ojs_nodes.node AND p.lease_until > now())"
            ),
            take: take_sql(s),
            release: format!(
                "UPDATE {s}.ojs_partitions SET owner = NULL, lease_until = NULL \
                 WHERE part = $1 AND owner = $2 AND epoch = $3"
            ),
            routes: format!(
                "SELECT p.part, p.owner, p.epoch, COALESCE(p.lease_until > now(), false), \
                 n.peer_addr, n.client_addr \
                 FROM {s}.ojs_partitions p LEFT JOIN {s}.ojs_nodes n ON n.node = p.owner \
                 WHERE p.part >= 0 AND p.part < $1 ORDER BY p.part"
            ),
            live_nodes: format!(
                "SELECT node FROM {s}.ojs_nodes \
                 WHERE heartbeat_at > now() - $1::bigint * interval '1 millisecond'"
            ),
            locate_job: format!(
                "SELECT part FROM {s}.ojs_kv WHERE space = {job} AND octet_length(key) = 16 \
                 AND key = $1 ORDER BY part LIMIT 1",
                job = Space::Job.index()
            ),
            locate_any: format!(
                "SELECT part FROM {s}.ojs_kv WHERE part = ANY($1::int[]) AND space = $2 \
                 AND key = $3 ORDER BY part LIMIT 1"
            ),
        }
    }
}

/// What the node's tasks share with its stores; it holds no runtime and no store, so that
/// a task never keeps the runtime alive or drops it.
pub(super) struct NodeCtx {
    pub(super) pool: Pool,
    pub(super) sql: NodeSql,
    /// The quoted schema name.
    pub(super) schema: String,
    pub(super) node: String,
    /// The client address registered with each heartbeat (set once the listener is bound).
    pub(super) addr: Mutex<Option<String>>,
    pub(super) peer_addr: Option<String>,
    pub(super) ttl: Duration,
    pub(super) renew_every: Duration,
    pub(super) partitions: u32,
    /// Each partition's read cache, bytes.
    pub(super) cache_bytes: u64,
    /// The partitions this node holds, by number.
    pub(super) held: Mutex<BTreeMap<u32, Held>>,
    tick: AtomicU64,
    /// Wakes the tick (`run`).
    kick: tokio::sync::Notify,
    hooks: Mutex<Option<NodeHooks>>,
    /// Test hook: a frozen node (no heartbeat, renewal or balance).
    paused: AtomicBool,
    pub(super) cluster: Arc<PgClusterView>,
    /// The node's group commit: every held partition's syncs (`postgres_commit.rs`).
    pub(super) commits: CommitQueue,
}

impl NodeCtx {
    fn register(&self, lease: &Arc<Lease>) {
        let info = HeldInfo {
            taken_tick: self.tick.load(Ordering::SeqCst),
            release_asked: false,
        };
        let held = Held {
            lease: lease.clone(),
            info,
        };
        if let Some(old) = self.held.lock().unwrap().insert(lease.part as u32, held) {
            // Taken again by this node: the old store's epoch is gone.
            old.lease.lost.store(true, Ordering::SeqCst);
        }
    }

    /// Forget a held lease (released or lost), unless it was taken again meanwhile.
    pub(super) fn forget(&self, lease: &Arc<Lease>) {
        let mut held = self.held.lock().unwrap();
        let part = lease.part as u32;
        if held
            .get(&part)
            .is_some_and(|h| Arc::ptr_eq(&h.lease, lease))
        {
            held.remove(&part);
        }
    }

    /// One try at partition `part`: its new lease, registered as held, or `None`.
    async fn take_once(&self, part: u32) -> StoreResult<Option<Arc<Lease>>> {
        let p = self.part(part)?;
        let client = self.pool.get().await.map_err(pool_err)?;
        let sent = Instant::now();
        let row = client
            .query_opt(&self.sql.take, &[&p, &self.node, &ttl_ms(self.ttl)])
            .await
            .map_err(err)?;
        Ok(row.map(|r| {
            let lease = Arc::new(Lease::new(p, &self.node, r.get(0), self.ttl, sent));
            self.register(&lease);
            lease
        }))
    }

    fn part(&self, part: u32) -> StoreResult<i32> {
        if part >= self.partitions {
            return Err(StoreError::Other(format!(
                "partition {part} does not exist: the cluster has {} (0 to {})",
                self.partitions,
                self.partitions - 1
            )));
        }
        Ok(part as i32)
    }

    async fn locate(&self, space: Space, key: &[u8]) -> StoreResult<Option<u32>> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let row = if space == Space::Job && key.len() == 16 {
            let st = client
                .prepare_cached(&self.sql.locate_job)
                .await
                .map_err(err)?;
            client.query_opt(&st, &[&key]).await.map_err(err)?
        } else {
            let parts: Vec<i32> = (0..self.partitions as i32).collect();
            let sp = space.index() as i16;
            let st = client
                .prepare_cached(&self.sql.locate_any)
                .await
                .map_err(err)?;
            client
                .query_opt(&st, &[&parts, &sp, &key])
                .await
                .map_err(err)?
        };
        Ok(row.map(|r| r.get::<_, i32>(0) as u32))
    }

    async fn routes(&self) -> StoreResult<(Vec<PartRoute>, Vec<String>)> {
        let client = self.pool.get().await.map_err(pool_err)?;
        let rows = client
            .query(&self.sql.routes, &[&(self.partitions as i32)])
            .await
            .map_err(err)?;
        let routes = rows
            .iter()
            .map(|r| PartRoute {
                part: r.get::<_, i32>(0) as u32,
                owner: r.get(1),
                epoch: r.get(2),
                live: r.get(3),
                peer_addr: r.get(4),
                client_addr: r.get(5),
            })
            .collect();
        let nodes = client
            .query(&self.sql.live_nodes, &[&ttl_ms(self.ttl)])
            .await
            .map_err(err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok((routes, nodes))
    }
}

/// Owns the node's runtime; the stores and every `PgNode` clone hold it.
pub(super) struct NodeCore {
    rt: Option<tokio::runtime::Runtime>,
    pub(super) ctx: Arc<NodeCtx>,
}

impl NodeCore {
    /// Wait for `f` on the node's runtime: from a plain thread only.
    pub(super) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.handle().block_on(f)
    }

    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.as_ref().expect("the node's runtime").handle()
    }

    pub(super) fn announce(&self, addr: &str) {
        let ctx = self.ctx.clone();
        *ctx.addr.lock().unwrap() = Some(addr.to_string());
        if tokio::runtime::Handle::try_current().is_ok() {
            // No waiting here: the next tick registers it.
            self.ctx.kick.notify_one();
            return;
        }
        // Registered now, so that CLUSTER shows it before the next tick.
        let r = self.block_on(timed("registering the node", async move {
            let client = ctx.pool.get().await.map_err(pool_err)?;
            let addr = ctx.addr.lock().unwrap().clone();
            client
                .execute(&ctx.sql.heartbeat, &[&ctx.node, &addr, &ctx.peer_addr])
                .await
                .map_err(err)
        }));
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not register the node's address yet; the \
                next heartbeat does");
        }
    }
}

impl Drop for NodeCore {
    fn drop(&mut self) {
        // Never waits: this may run on one of the runtime's own threads (the last store
        // dropped by a hook, say).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A node of a PostgreSQL cluster: one per process, cheap to clone (see the module docs).
/// The server settings of each of the node's sessions (after any `options` in the URL).
/// A session that stops in the middle of a transaction (its node frozen: SIGSTOP, a paused
/// VM) is ended by the server once it has been idle for a lease TTL, so the row locks it
/// holds (a commit's fence, a renewal's) cannot keep the other nodes from taking its
/// partitions; its transaction rolls back, and the node finds its leases gone when it
/// wakes. A statement waits for a lock at most that long too, so no tick waits on such a
/// session forever.
fn session_options(user: Option<&str>, ttl: Duration) -> String {
    let ms = ttl.as_millis().clamp(1, i32::MAX as u128);
    let ours = format!("-c idle_in_transaction_session_timeout={ms} -c lock_timeout={ms}");
    match user {
        Some(u) if !u.trim().is_empty() => format!("{u} {ours}"),
        _ => ours,
    }
}

#[derive(Clone)]
pub struct PgNode {
    core: Arc<NodeCore>,
}

impl PgNode {
    /// Connect, create or migrate the schema, register the node and start its tick
    /// (heartbeat and renewals; the balancer once [`PgNode::run`] is called).
    pub fn open(opts: &PostgresOptions) -> StoreResult<PgNode> {
        let want = check_partitions(opts.partitions)?;
        let s = quote_schema(&opts.schema)?;
        let mut pg: tokio_postgres::Config = opts
            .url
            .parse()
            .map_err(|e| StoreError::Other(format!("--postgres-url: {e}")))?;
        let session = session_options(pg.get_options(), opts.lease_ttl);
        pg.options(&session);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ojsd-pg")
            .enable_all()
            .build()?;
        let mgr = Manager::from_config(
            pg,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(pool_size(want))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .create_timeout(Some(STATEMENT_TIMEOUT))
            .wait_timeout(Some(STATEMENT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Other(format!("postgres pool: {e}")))?;
        let sql = NodeSql::new(&s);
        let partitions = rt.block_on(async {
            let parts = migrate(&pool, &s, &opts.schema, want).await?;
            let client = pool.get().await.map_err(pool_err)?;
            client
                .execute(&sql.heartbeat, &[&opts.node, &opts.addr, &opts.peer_addr])
                .await
                .map_err(err)?;
            Ok::<_, StoreError>(parts)
        })?;
        if partitions != want {
            pool.resize(pool_size(partitions));
        }
        let cluster = Arc::new(PgClusterView::new(
            pool.clone(),
            rt.handle().clone(),
            &s,
            &opts.node,
            opts.lease_ttl,
        ));
        let commits = CommitQueue::new(&s, opts.commits_in_flight);
        let ctx = Arc::new(NodeCtx {
            pool,
            sql,
            schema: s,
            node: opts.node.clone(),
            addr: Mutex::new(opts.addr.clone()),
            peer_addr: opts.peer_addr.clone(),
            ttl: opts.lease_ttl,
            renew_every: opts.renew_every.max(Duration::from_millis(10)),
            partitions,
            cache_bytes: opts.read_cache_bytes / u64::from(partitions),
            held: Mutex::new(BTreeMap::new()),
            tick: AtomicU64::new(0),
            kick: tokio::sync::Notify::new(),
            hooks: Mutex::new(None),
            paused: AtomicBool::new(false),
            cluster,
            commits,
        });
        let core = Arc::new(NodeCore {
            rt: Some(rt),
            ctx: ctx.clone(),
        });
        core.handle().spawn(tick_loop(ctx, Arc::downgrade(&core)));
        Ok(PgNode { core })
    }

    /// The cluster's partition count (fixed when its schema was created).
    pub fn partitions(&self) -> u32 {
        self.core.ctx.partitions
    }

    /// This node's id (`--node-id`).
    pub fn node(&self) -> &str {
        &self.core.ctx.node
    }

    /// Register the client address this node serves on (its listener is bound), now and
    /// with every heartbeat from then on.
    pub fn announce(&self, client_addr: &str) {
        self.core.announce(client_addr)
    }

    /// Take partition `part` once, now, if it is free, expired or already this node's, and
    /// return its store; `Ok(None)` while another node holds a live lease on it. Call it
    /// from a plain thread, not inside a tokio runtime.
    pub fn take(&self, part: u32) -> StoreResult<Option<PostgresStore>> {
        outside_runtime("PgNode::take")?;
        let ctx = &self.core.ctx;
        let lease = self
            .core
            .block_on(timed("taking a partition", ctx.take_once(part)))?;
        Ok(lease.map(|lease| {
            tracing::info!(part, epoch = lease.epoch, node = %ctx.node, "took the partition's lease");
            PostgresStore::from_node(self.core.clone(), lease)
        }))
    }

    /// Take partition `opts.part`, waiting as a standby for up to `opts.acquire_wait` while
    /// another node holds it (telling `opts.standby` who does, on each try), then
    /// [`StoreError::Leased`]: the single-partition start-up (`open_postgres`).
    pub fn acquire(&self, opts: &PostgresOptions) -> StoreResult<PostgresStore> {
        outside_runtime("PgNode::acquire")?;
        let ctx = &self.core.ctx;
        let part = ctx.part(opts.part)?;
        let (epoch, sent) = self.core.block_on(acquire(
            &ctx.pool,
            &ctx.schema,
            part,
            &ctx.node,
            (opts.addr.as_deref(), opts.peer_addr.as_deref()),
            ctx.ttl,
            ctx.renew_every,
            opts.acquire_wait,
            opts.standby.as_ref(),
        ))?;
        tracing::info!(part, epoch, node = %ctx.node, "took the partition's lease");
        let lease = Arc::new(Lease::new(part, &ctx.node, epoch, ctx.ttl, sent));
        ctx.register(&lease);
        Ok(PostgresStore::from_node(self.core.clone(), lease))
    }

    /// Start balancing (see the module docs): from now on each tick also reads the routes,
    /// hands them to `hooks.routes`, and takes or asks to give up partitions. A second call
    /// replaces the hooks.
    pub fn run(&self, hooks: NodeHooks) {
        *self.core.ctx.hooks.lock().unwrap() = Some(hooks);
        self.core.ctx.kick.notify_one();
    }

    /// Which partition holds the committed record `key` of `space` (see the module docs).
    /// The query runs on the node's runtime; the future may be awaited on any runtime.
    pub fn locate(
        &self,
        space: Space,
        key: Vec<u8>,
    ) -> impl Future<Output = StoreResult<Option<u32>>> + Send + 'static {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ctx = self.core.ctx.clone();
        self.core.handle().spawn(async move {
            let _ = tx.send(timed("a lookup", ctx.locate(space, &key)).await);
        });
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "postgres: the node stopped before the lookup was answered".into(),
                ))
            })
        }
    }

    /// The cluster's state (CLUSTER), read on the node's runtime.
    pub fn cluster_view(&self) -> Arc<dyn ClusterView> {
        self.core.ctx.cluster.clone()
    }

    /// Test hook: a frozen node (no heartbeat, renewal or balance) until thawed.
    #[cfg(test)]
    pub(crate) fn freeze_for_test(&self, frozen: bool) {
        self.core.ctx.paused.store(frozen, Ordering::SeqCst);
    }

    /// Test hooks: the transactions the node's group commit committed so far; make its next
    /// round wait until `gather` syncs are queued (0: no waiting).
    #[cfg(test)]
    pub(crate) fn commits_for_test(&self, gather: usize) -> u64 {
        let c = &self.core.ctx.commits;
        if gather > 0 {
            c.gather_for_test(gather);
        }
        c.rounds()
    }

    /// Test hook: syncs queued for the node's next commit round.
    #[cfg(test)]
    pub(crate) fn queued_for_test(&self) -> usize {
        self.core.ctx.commits.queued_for_test()
    }

    /// Test hook: the partitions this node holds.
    #[cfg(test)]
    pub(crate) fn held_for_test(&self) -> Vec<u32> {
        self.core.ctx.held.lock().unwrap().keys().copied().collect()
    }
}

fn outside_runtime(what: &str) -> StoreResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(StoreError::Other(format!(
            "{what} waits for PostgreSQL: call it from a plain thread, not inside a tokio runtime"
        )));
    }
    Ok(())
}

/// The node's tick (see the module docs). It holds the node's runtime only weakly, and
/// only while it builds the stores it takes.
async fn tick_loop(ctx: Arc<NodeCtx>, core: Weak<NodeCore>) {
    let mut failing: Option<Instant> = None;
    let mut unowned_since: HashMap<u32, Instant> = HashMap::new();
    let mut last = Instant::now();
    loop {
        let wake = ctx.hooks.lock().unwrap().as_ref().map(|h| h.wake.clone());
        let woken = tokio::select! {
            _ = tokio::time::sleep(ctx.renew_every) => false,
            _ = ctx.kick.notified() => true,
            _ = async {
                match &wake {
                    Some(w) => w.notified().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        if woken {
            if let Some(rest) = MIN_TICK.checked_sub(last.elapsed()) {
                tokio::time::sleep(rest).await;
            }
        }
        last = Instant::now();
        if ctx.paused.load(Ordering::SeqCst) {
            continue;
        }
        let tick = ctx.tick.fetch_add(1, Ordering::SeqCst) + 1;
        let sent = Instant::now();
        match tokio::time::timeout(ctx.ttl, renew_held(&ctx)).await {
            Ok(Ok(_)) => {
                if let Some(since) = failing.take() {
                    tracing::warn!(
                        failing_ms = since.elapsed().as_millis() as u64,
                        "renewed the node's leases again (those at the same epoch: no other \
                         node took them meanwhile)"
                    );
                }
            }
            Ok(Err(e)) => {
                failing.get_or_insert(sent);
                tracing::warn!(error = %e, "lease renewal failed");
                continue;
            }
            Err(_) => {
                failing.get_or_insert(sent);
                tracing::warn!("lease renewal timed out");
                continue;
            }
        }
        let hooks = ctx.hooks.lock().unwrap().clone();
        let Some(hooks) = hooks else { continue };
        let Some(core) = core.upgrade() else { return };
        let balanced = balance(&ctx, &core, &hooks, tick, &mut unowned_since);
        match tokio::time::timeout(ctx.ttl, balanced).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "balancing the partitions failed"),
            Err(_) => tracing::warn!("balancing the partitions timed out"),
        }
    }
}

/// One round of the balancer: routes to the hooks, then take or ask to give up partitions.
async fn balance(
    ctx: &NodeCtx,
    core: &Arc<NodeCore>,
    hooks: &NodeHooks,
    tick: u64,
    unowned_since: &mut HashMap<u32, Instant>,
) -> StoreResult<()> {
    let (routes, live_nodes) = ctx.routes().await?;
    (hooks.routes)(&routes);
    let now = Instant::now();
    for r in &routes {
        if r.live {
            unowned_since.remove(&r.part);
        } else {
            unowned_since.entry(r.part).or_insert(now);
        }
    }
    let long_unowned: BTreeSet<u32> = unowned_since
        .iter()
        .filter(|(_, since)| now.duration_since(**since) > ctx.ttl * 2)
        .map(|(p, _)| *p)
        .collect();
    let held: BTreeMap<u32, HeldInfo> = ctx
        .held
        .lock()
        .unwrap()
        .iter()
        .map(|(p, h)| (*p, h.info))
        .collect();
    let plan = plan(&View {
        me: &ctx.node,
        routes: &routes,
        live_nodes: &live_nodes,
        held: &held,
        tick,
        long_unowned: &long_unowned,
    });
    let mut holding = held.len();
    let wanted = plan
        .urgent
        .iter()
        .map(|p| (*p, true))
        .chain(plan.candidates.iter().map(|p| (*p, false)));
    for (part, urgent) in wanted {
        if !urgent && holding >= plan.share {
            break;
        }
        let Some(lease) = ctx.take_once(part).await? else {
            continue;
        };
        holding += 1;
        unowned_since.remove(&part);
        tracing::info!(
            part,
            epoch = lease.epoch,
            node = %ctx.node,
            share = plan.share,
            why = if urgent { "unowned for more than two lease TTLs" } else { "below its share" },
            "took a partition"
        );
        (hooks.acquired)(part, PostgresStore::from_node(core.clone(), lease));
    }
    for part in plan.release {
        match ctx.held.lock().unwrap().get_mut(&part) {
            Some(h) => h.info.release_asked = true,
            None => continue,
        }
        tracing::info!(part, node = %ctx.node, share = plan.share,
            "giving up a partition for balance (another node holds less than its share)");
        (hooks.release)(part);
    }
    Ok(())
}

#[cfg(test)]
#[path = "postgres_node_tests.rs"]
mod tests;
