//! The [`Router`]: the engine's surface for the front ends, sending each request to the
//! engine of the partition it belongs to. On one node (fjall, sled) it is the
//! `EngineHandle` itself behind a `match` (no allocation, no extra task per command). In
//! cluster mode (`--store postgres`) the cluster has `P` partitions, each held by one node
//! at a time which runs an engine for it; the store's lease loop reports who holds which
//! ([`Router::set_routes`]) and hands this node the engines of the partitions it takes
//! ([`Router::activate`]). A request runs on this node's engine for its partition, or is
//! forwarded over one multiplexed peer connection per node (`link.rs`); which partition
//! that is, `route.rs` says, and `spread.rs` runs what concerns several (a FETCH over
//! queues of several partitions, INFO).

use super::link::{Link, LinkConfig};

use crate::engine::intake::Intake;
use crate::engine::request::Command;
use crate::engine::{Answer, Answered, ConnId, EngineHandle, Page, Subscription};
use crate::error::OjsError;
use crate::events::held::Pool;
use crate::events::{EventFilter, Start};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// A subscriber on a node that does not hold its partition reads the holder's log by long
/// polls: the holder answers as soon as an event matches, or after this long with none.
pub(super) const LONG_POLL_MS: u64 = 10_000;

/// How long such a subscriber waits before asking again after an empty page that came at
/// once (a holder that does not wait), so that it never loops busily.
pub const REMOTE_POLL: Duration = Duration::from_millis(250);

/// Job ids whose partition this node remembers (from the PUSHes and FETCHes it routed),
/// so that a worker's ACK needs no lookup: about 100 bytes each.
const PLACED_IDS: usize = 256 * 1024;

/// Finds the partition holding a job (the store's `job id -> partition` lookup): `None`
/// for a job no partition holds.
pub type Locator = Arc<
    dyn Fn(uuid::Uuid) -> Pin<Box<dyn Future<Output = Result<Option<u32>, String>> + Send>>
        + Send
        + Sync,
>;

/// What a front end sends its requests to.
#[derive(Clone)]
pub enum Router {
    /// One node: this engine, always.
    Local(EngineHandle),
    /// Cluster mode: each partition's engine, here or on the node that holds it.
    Cluster(Arc<Cluster>),
}

/// What a node is doing, for health reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// One node, no cluster.
    Single,
    /// Holds partitions (`held` of them) and runs their engines.
    Active { held: usize },
    /// Holds none; forwards to `owner` (the holder of partition 0), connected or not.
    Forwarding { owner: String, connected: bool },
    /// No holder known yet.
    Waiting,
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Active { .. } => "active",
            Role::Forwarding { .. } => "forwarding",
            Role::Waiting => "waiting",
        }
    }
}

/// Who holds a partition, as the store's lease loop read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    pub part: u32,
    pub owner: Option<String>,
    /// The owner's peer listener.
    pub addr: Option<String>,
    /// Its lease had not expired (database time).
    pub live: bool,
}

#[derive(Clone, Default)]
pub(super) struct Slot {
    pub(super) engine: Option<EngineHandle>,
    pub(super) holding: Holding,
}

#[derive(Default)]
pub(super) struct Links {
    /// By peer address.
    pub(super) open: HashMap<String, Arc<Link>>,
    /// When a connection to an address last failed, and why.
    pub(super) failed: HashMap<String, (Instant, String)>,
}

/// A worker of this node's clients, registered with every engine that may hold its jobs.
pub(super) struct Worker {
    pub(super) info: serde_json::Value,
    pub(super) reserve: bool,
    pub(super) conns: u32,
}

/// A cluster node's routing state.
pub struct Cluster {
    pub(super) intake: Intake,
    pub(super) subscribers: Arc<Pool>,
    pub(super) connections: Arc<AtomicUsize>,
    /// Connection ids, shared with this node's engines; ids of connections made for
    /// forwarding start at 2^62, apart from those the engines' own peers use.
    pub(super) next_conn: Arc<AtomicU64>,
    pub(super) store_kind: &'static str,
    /// Partitions in the cluster; 0 until the store has said.
    pub(super) parts: AtomicU32,
    pub(super) slots: RwLock<Vec<Slot>>,
    pub(super) links: Mutex<Links>,
    pub(super) connecting: tokio::sync::Mutex<()>,
    pub(super) link_cfg: LinkConfig,
    pub(super) placed: quick_cache::sync::Cache<String, u32>,
    pub(super) locator: OnceLock<Locator>,
    pub(super) workers: Mutex<HashMap<Arc<str>, Worker>>,
    /// Set by [`Router::shutdown`]: no engine is started any more.
    pub(super) stopping: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A receiver already holding `a`.
pub(super) fn ready(a: Answered) -> oneshot::Receiver<Answered> {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(a);
    rx
}

/// The ids of the jobs an answer hands out (FETCH's).
pub fn claimed_ids(a: &Answer) -> Vec<String> {
    match a {
        Answer::Job(v) => v.id().into_iter().collect(),
        Answer::Jobs(vs) => vs.iter().filter_map(|v| v.id()).collect(),
        _ => Vec::new(),
    }
}

/// Where one partition's requests go.
pub(super) enum Target {
    Local(EngineHandle),
    Remote(Arc<Link>),
}

impl Router {
    /// A node of a cluster that holds no partition yet. `link_cfg.lost` is the store's
    /// wake-up: told whenever the holders should be looked up again.
    pub fn cluster(
        intake: Intake,
        shared: &crate::engine::Shared,
        store_kind: &'static str,
        link_cfg: LinkConfig,
    ) -> Router {
        shared.next_conn.store(1 << 62, Ordering::Relaxed);
        Router::Cluster(Arc::new(Cluster {
            intake,
            subscribers: shared.subscribers.clone(),
            connections: shared.connections.clone(),
            next_conn: shared.next_conn.clone(),
            store_kind,
            parts: AtomicU32::new(0),
            slots: RwLock::new(Vec::new()),
            links: Mutex::new(Links::default()),
            connecting: tokio::sync::Mutex::new(()),
            link_cfg,
            placed: quick_cache::sync::Cache::new(PLACED_IDS),
            locator: OnceLock::new(),
            workers: Mutex::new(HashMap::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The cluster has `parts` partitions (fixed when it was created).
    pub fn set_partitions(&self, parts: u32) {
        let Router::Cluster(c) = self else { return };
        let mut slots = c.slots.write().unwrap_or_else(|p| p.into_inner());
        if slots.len() != parts as usize {
            slots.resize_with(parts as usize, Slot::default);
            for (i, s) in slots.iter_mut().enumerate() {
                s.holding.part = i as u32;
            }
        }
        c.parts.store(parts, Ordering::Release);
    }

    /// How jobs are found by id when the router does not remember their partition.
    pub fn set_locator(&self, locator: Locator) {
        if let Router::Cluster(c) = self {
            let _ = c.locator.set(locator);
        }
    }

    /// The store's lease loop read who holds which partition. A partition that moved to
    /// another node is forwarded there from now on.
    pub fn set_routes(&self, routes: &[Holding]) {
        let Router::Cluster(c) = self else { return };
        let mut slots = c.slots.write().unwrap_or_else(|p| p.into_inner());
        for h in routes {
            let Some(s) = slots.get_mut(h.part as usize) else {
                continue;
            };
            if s.holding != *h {
                if s.holding.owner != h.owner && h.owner.is_some() && s.engine.is_none() {
                    tracing::info!(
                        part = h.part,
                        owner = h.owner.as_deref().unwrap_or(""),
                        peer = h.addr.as_deref().unwrap_or("(none)"),
                        "forwarding to the partition's holder"
                    );
                }
                s.holding = h.clone();
            }
        }
    }

    /// One partition (`0`), held by `owner` at peer address `addr`, or by nobody (a
    /// standby's view before it holds the partition).
    pub fn set_holder(&self, owner: Option<String>, addr: Option<String>) {
        let Router::Cluster(c) = self else { return };
        if c.parts.load(Ordering::Acquire) == 0 {
            self.set_partitions(1);
        }
        let live = owner.is_some();
        self.set_routes(&[Holding {
            part: 0,
            owner,
            addr,
            live,
        }]);
    }

    /// The node took partition `part`: from now on its requests run on `engine`. The
    /// node's workers are registered with it.
    pub fn activate(&self, part: u32, engine: EngineHandle) {
        let Router::Cluster(c) = self else { return };
        if c.parts.load(Ordering::Acquire) == 0 {
            self.set_partitions(part + 1);
        }
        for (wid, w) in lock(&c.workers).iter() {
            for _ in 0..w.conns {
                engine.register_worker(wid.clone(), w.info.clone(), w.reserve);
            }
        }
        let mut slots = c.slots.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get_mut(part as usize) {
            s.engine = Some(engine);
        }
    }

    /// The node gave partition `part` up (or lost it): its engine, which the caller stops.
    pub fn deactivate(&self, part: u32) -> Option<EngineHandle> {
        let Router::Cluster(c) = self else {
            return None;
        };
        let mut slots = c.slots.write().unwrap_or_else(|p| p.into_inner());
        let s = slots.get_mut(part as usize)?;
        s.holding.live = false;
        s.engine.take()
    }

    /// This node's engine for `part`, if it runs one.
    pub fn engine_of(&self, part: u32) -> Option<EngineHandle> {
        match self {
            Router::Local(h) => (part == 0).then(|| h.clone()),
            Router::Cluster(c) => c
                .slots
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(part as usize)
                .and_then(|s| s.engine.clone()),
        }
    }

    /// Every engine this node runs, with its partition.
    pub fn locals(&self) -> Vec<(u32, EngineHandle)> {
        match self {
            Router::Local(h) => vec![(0, h.clone())],
            Router::Cluster(c) => c
                .slots
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.engine.clone().map(|e| (i as u32, e)))
                .collect(),
        }
    }

    /// One of this node's engines, when it runs any.
    pub fn local(&self) -> Option<EngineHandle> {
        self.locals().into_iter().next().map(|(_, e)| e)
    }

    pub fn role(&self) -> Role {
        match self {
            Router::Local(_) => Role::Single,
            Router::Cluster(c) => {
                let slots = c.slots.read().unwrap_or_else(|p| p.into_inner());
                let held = slots.iter().filter(|s| s.engine.is_some()).count();
                if held > 0 {
                    return Role::Active { held };
                }
                match slots.first().and_then(|s| s.holding.owner.clone()) {
                    Some(owner) => {
                        let addr = slots[0].holding.addr.clone();
                        drop(slots);
                        let connected = addr
                            .and_then(|a| lock(&c.links).open.get(&a).map(|l| l.is_open()))
                            .unwrap_or(false);
                        Role::Forwarding { owner, connected }
                    }
                    None => Role::Waiting,
                }
            }
        }
    }

    pub async fn submit(
        &self,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
    ) -> oneshot::Receiver<Answered> {
        match self {
            Router::Local(h) => h.submit(wid, cmd, bytes).await,
            Router::Cluster(c) => c.dispatch(None, wid, cmd, bytes, false).await,
        }
    }

    pub async fn submit_on(
        &self,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
    ) -> oneshot::Receiver<Answered> {
        match self {
            Router::Local(h) => h.submit_on(conn, wid, cmd, bytes).await,
            Router::Cluster(c) => c.dispatch(conn, wid, cmd, bytes, false).await,
        }
    }

    pub async fn call(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        match self {
            Router::Local(h) => h.call(wid, cmd).await,
            Router::Cluster(c) => {
                let bytes = match &cmd {
                    Command::Push { len, .. } => *len,
                    Command::PushBatch(jobs) | Command::PushEach(jobs) => {
                        jobs.iter().map(|(_, l)| *l).sum()
                    }
                    _ => 0,
                };
                c.dispatch(None, wid, cmd, bytes, false)
                    .await
                    .await
                    .unwrap_or_else(|_| Err(c.unreachable(None, "no answer")))
            }
        }
    }

    pub async fn call_viewed(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        match self {
            Router::Local(h) => h.call_viewed(wid, cmd).await,
            Router::Cluster(c) => c
                .dispatch(None, wid, cmd, 0, true)
                .await
                .await
                .unwrap_or_else(|_| Err(c.unreachable(None, "no answer"))),
        }
    }

    /// What a health check asks: INFO. With several partitions, of this node's own engines
    /// (each must answer), or of one live partition's holder when it runs none: a node is
    /// healthy while it can serve, and a partition moving between nodes (whose requests
    /// wait for its new holder) does not make every node unhealthy at once behind a load
    /// balancer.
    pub async fn probe(&self) -> Answered {
        let Router::Cluster(c) = self else {
            return self.call(None, Command::Info).await;
        };
        if c.parts() <= 1 {
            return self.call(None, Command::Info).await;
        }
        let locals = self.locals();
        if locals.is_empty() {
            let live = (0..c.parts()).find(|p| c.slot(*p).is_some_and(|s| s.holding.live));
            let Some(p) = live else {
                return Err(c.unreachable(None, "no partition has a live holder"));
            };
            return c
                .on(p, None, None, Command::Info, 0, false)
                .await
                .await
                .unwrap_or_else(|_| Err(c.unreachable(Some(p), "no answer")));
        }
        let mut first = None;
        for (_, h) in locals {
            let a = h.call(None, Command::Info).await?;
            first.get_or_insert(a);
        }
        Ok(first.unwrap_or(Answer::Nothing))
    }

    pub fn intake(&self) -> &Intake {
        match self {
            Router::Local(h) => h.intake(),
            Router::Cluster(c) => &c.intake,
        }
    }

    /// A HELLO with a worker id: registered with every engine that may hold its jobs
    /// (this node's, and every node this one forwards to).
    pub fn register_worker(&self, wid: Arc<str>, info: serde_json::Value, reserve: bool) {
        let Router::Cluster(c) = self else {
            if let Router::Local(h) = self {
                h.register_worker(wid, info, reserve);
            }
            return;
        };
        {
            let mut ws = lock(&c.workers);
            let w = ws.entry(wid.clone()).or_insert(Worker {
                info: info.clone(),
                reserve,
                conns: 0,
            });
            w.conns += 1;
            w.info = info.clone();
            w.reserve = reserve;
        }
        self.register_local_worker(wid.clone(), &info, reserve);
        let msg = super::proto::ToOwner::Register {
            wid: wid.to_string(),
            info,
            reserve,
        };
        let c = c.clone();
        tokio::spawn(async move {
            for addr in c.remote_addrs() {
                if let Ok(l) = c.link(&addr).await {
                    l.tell(&msg);
                }
            }
        });
    }

    pub fn disconnect_worker(&self, wid: Arc<str>) {
        let Router::Cluster(c) = self else {
            if let Router::Local(h) = self {
                h.disconnect_worker(wid);
            }
            return;
        };
        {
            let mut ws = lock(&c.workers);
            if let Some(w) = ws.get_mut(&wid) {
                w.conns = w.conns.saturating_sub(1);
                if w.conns == 0 {
                    ws.remove(&wid);
                }
            }
        }
        self.disconnect_local_worker(wid.clone());
        // Without a connection a node has already dropped what it carried.
        let msg = super::proto::ToOwner::Disconnect {
            wid: wid.to_string(),
        };
        for l in lock(&c.links).open.values() {
            l.tell(&msg);
        }
    }

    /// A worker of a peer's (or of this node's) clients, on this node's engines.
    pub fn register_local_worker(&self, wid: Arc<str>, info: &serde_json::Value, reserve: bool) {
        for (_, e) in self.locals() {
            e.register_worker(wid.clone(), info.clone(), reserve);
        }
    }

    pub fn disconnect_local_worker(&self, wid: Arc<str>) {
        for (_, e) in self.locals() {
            e.disconnect_worker(wid.clone());
        }
    }

    pub fn connection_id(&self) -> ConnId {
        match self {
            Router::Local(h) => h.connection_id(),
            Router::Cluster(c) => c.next_conn.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A client connection closed: the jobs it fetched and did not settle go back, on
    /// every engine that may hold some (this node's, and the nodes it forwarded to).
    pub fn connection_closed(&self, conn: ConnId) {
        match self {
            Router::Local(h) => h.connection_closed(conn),
            Router::Cluster(c) => {
                for l in lock(&c.links).open.values() {
                    l.tell(&super::proto::ToOwner::Closed { conn });
                }
                self.close_local_conn(conn);
            }
        }
    }

    /// A connection closed, on this node's engines only.
    pub fn close_local_conn(&self, conn: ConnId) {
        for (_, e) in self.locals() {
            e.connection_closed(conn);
        }
    }

    pub async fn events(
        &self,
        filter: EventFilter,
        start: Start,
        limit: usize,
    ) -> Result<Page, OjsError> {
        match self {
            Router::Local(h) => h.events(filter, start, limit).await,
            Router::Cluster(c) => {
                let p = match c.events_part(&filter) {
                    Ok(p) => p,
                    Err(_) => return c.merged_page(filter, start, limit).await,
                };
                match c.target(p).await? {
                    Target::Local(h) => h.events(filter, start, limit).await,
                    // A poll's page: a few MiB (a peer holds twice a page's bytes of its
                    // budget while the page is read and sent).
                    Target::Remote(l) => l.events(p, filter, start, limit, 4 << 20, 0).await,
                }
            }
        }
    }

    /// A subscription to the event stream: on a forwarding node it reads the holder's log
    /// page by page, polling every [`REMOTE_POLL`] at the head.
    pub fn subscription(&self, filter: EventFilter, start: Start) -> Subscription {
        match self {
            Router::Local(h) => h.subscription(filter, start),
            // Several partitions, and the filter does not name one: every partition's log.
            Router::Cluster(c) if c.parts() > 1 && c.events_part(&filter).is_err() => {
                c.merged_subscription(filter, start)
            }
            Router::Cluster(_) => Subscription::new(Arc::new(self.clone()), filter, start),
        }
    }

    pub fn subscribers(&self) -> &Arc<Pool> {
        match self {
            Router::Local(h) => h.subscribers(),
            Router::Cluster(c) => &c.subscribers,
        }
    }

    /// Client connections open on this node.
    pub fn connections(&self) -> &Arc<AtomicUsize> {
        match self {
            Router::Local(h) => &h.connections,
            Router::Cluster(c) => &c.connections,
        }
    }

    /// The metrics of the engines serving this node's clients: its own, or on a node that
    /// forwards, the holders'; with several partitions, all of them summed (none when a
    /// partition does not answer: a sum without it would look like counters going back).
    pub async fn metrics(&self) -> Option<crate::engine::metrics::MetricsView> {
        match self {
            Router::Local(h) => h.metrics().await,
            Router::Cluster(c) => {
                let mut views = Vec::new();
                for p in 0..c.parts() {
                    let v = match c.target(p).await.ok()? {
                        Target::Local(h) => h.metrics().await,
                        Target::Remote(l) => l.metrics(p).await.ok().flatten(),
                    };
                    views.push(v?);
                }
                match views.len() {
                    0 => None,
                    1 => views.pop(),
                    _ => Some(super::merge::merge_metrics(views)),
                }
            }
        }
    }

    pub fn store_kind(&self) -> &'static str {
        match self {
            Router::Local(h) => h.store_kind(),
            Router::Cluster(c) => c.store_kind,
        }
    }

    /// Ask every engine of this node to finish its batch and stop.
    pub fn shutdown(&self) {
        if let Router::Cluster(c) = self {
            c.stopping.store(true, Ordering::SeqCst);
        }
        for (_, h) in self.locals() {
            h.shutdown();
        }
    }

    /// [`shutdown`](Self::shutdown) was called.
    pub fn is_stopping(&self) -> bool {
        match self {
            Router::Local(_) => false,
            Router::Cluster(c) => c.stopping.load(Ordering::SeqCst),
        }
    }
}
