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
use super::route::{route, Route};
use crate::engine::intake::Intake;
use crate::engine::request::Command;
use crate::engine::{Answer, Answered, ConnId, EngineHandle, Page, PageSource, Subscription};
use crate::error::{ErrorCode, OjsError};
use crate::events::held::{Buffer, Pool, Reservation};
use crate::events::{EventFilter, Start};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a forwarding node's subscriber waits before asking the holder for events
/// again once it has read up to the head (there is no live feed across nodes yet).
pub const REMOTE_POLL: Duration = Duration::from_millis(250);

/// After a failed connection to a node, requests fail at once for this long instead of
/// each trying again (the lease loop looks the holders up meanwhile).
const RETRY_CONNECT_AFTER: Duration = Duration::from_millis(200);

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
struct Slot {
    engine: Option<EngineHandle>,
    holding: Holding,
}

#[derive(Default)]
struct Links {
    /// By peer address.
    open: HashMap<String, Arc<Link>>,
    /// When a connection to an address last failed, and why.
    failed: HashMap<String, (Instant, String)>,
}

/// A worker of this node's clients, registered with every engine that may hold its jobs.
struct Worker {
    info: serde_json::Value,
    reserve: bool,
    conns: u32,
}

/// A cluster node's routing state.
pub struct Cluster {
    intake: Intake,
    subscribers: Arc<Pool>,
    connections: Arc<AtomicUsize>,
    /// Connection ids, shared with this node's engines; ids of connections made for
    /// forwarding start at 2^62, apart from those the engines' own peers use.
    next_conn: Arc<AtomicU64>,
    store_kind: &'static str,
    /// Partitions in the cluster; 0 until the store has said.
    parts: AtomicU32,
    slots: RwLock<Vec<Slot>>,
    links: Mutex<Links>,
    connecting: tokio::sync::Mutex<()>,
    link_cfg: LinkConfig,
    placed: quick_cache::sync::Cache<String, u32>,
    locator: OnceLock<Locator>,
    workers: Mutex<HashMap<Arc<str>, Worker>>,
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
            Router::Cluster(c) => c.slot(part).and_then(|s| s.engine),
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
                c.single("the event log")?;
                match c.target(0).await? {
                    Target::Local(h) => h.events(filter, start, limit).await,
                    // A poll's page: a few MiB (a peer holds twice a page's bytes of its
                    // budget while the page is read and sent).
                    Target::Remote(l) => l.events(0, filter, start, limit, 4 << 20).await,
                }
            }
        }
    }

    /// A subscription to the event stream: on a forwarding node it reads the holder's log
    /// page by page, polling every [`REMOTE_POLL`] at the head.
    pub fn subscription(&self, filter: EventFilter, start: Start) -> Subscription {
        match self {
            Router::Local(h) => h.subscription(filter, start),
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

    /// The metrics of the engine serving this node's clients: its own, or on a node that
    /// forwards, the holder's; none when neither answers (or the cluster has several
    /// partitions: their metrics are not summed yet).
    pub async fn metrics(&self) -> Option<crate::engine::metrics::MetricsView> {
        match self {
            Router::Local(h) => h.metrics().await,
            Router::Cluster(c) => {
                c.single("metrics").ok()?;
                match c.target(0).await.ok()? {
                    Target::Local(h) => h.metrics().await,
                    Target::Remote(l) => l.metrics(0).await.ok().flatten(),
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
        for (_, h) in self.locals() {
            h.shutdown();
        }
    }
}

impl PageSource for Router {
    fn pool(&self) -> &Arc<Pool> {
        self.subscribers()
    }

    fn read_page(
        &self,
        filter: EventFilter,
        start: Start,
        limit: usize,
        buf: Arc<Buffer>,
        reservation: Reservation,
    ) -> Pin<Box<dyn Future<Output = Result<Page, OjsError>> + Send + '_>> {
        Box::pin(async move {
            let c = match self {
                Router::Local(h) => {
                    return h.read_into(filter, start, limit, buf, reservation).await
                }
                Router::Cluster(c) => c,
            };
            c.single("the event stream")?;
            let link = match c.target(0).await? {
                Target::Local(h) => {
                    return h.read_into(filter, start, limit, buf, reservation).await
                }
                Target::Remote(l) => l,
            };
            let page = link
                .events(0, filter, start, limit, reservation.bytes())
                .await?;
            let (count, last, has_more) = (page.count, page.last, page.has_more);
            // No live feed across nodes: the reader comes back for the next page.
            buf.put_page(page.events, reservation, false);
            if count == 0 && !has_more {
                tokio::time::sleep(REMOTE_POLL).await;
            }
            Ok(Page {
                events: Vec::new(),
                count,
                last,
                has_more,
            })
        })
    }
}

impl Cluster {
    pub(super) fn parts(&self) -> u32 {
        self.parts.load(Ordering::Acquire)
    }

    fn slot(&self, part: u32) -> Option<Slot> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(part as usize)
            .cloned()
    }

    /// What is not served across partitions yet (the event log, metrics).
    fn single(&self, what: &str) -> Result<(), OjsError> {
        match self.parts() {
            0 | 1 => Ok(()),
            n => Err(OjsError::new(
                ErrorCode::BackendError,
                format!(
                    "{what} is not yet served across partitions in cluster mode (this \
                     cluster has {n}; one created with --partitions 1 serves it)"
                ),
            )),
        }
    }

    fn unreachable(&self, part: Option<u32>, why: &str) -> OjsError {
        let owner = part
            .and_then(|p| self.slot(p))
            .and_then(|s| s.holding.owner);
        let which = match part {
            Some(p) if self.parts() > 1 => format!("partition {p}"),
            _ => "the partition".to_string(),
        };
        OjsError::new(
            ErrorCode::BackendUnavailable,
            match owner {
                Some(o) => {
                    format!("the node holding {which} ({o}) cannot be reached: {why}; retry")
                }
                None => format!("no node holds {which} at the moment ({why}); retry"),
            },
        )
    }

    /// The peer addresses of the nodes holding partitions this node does not.
    fn remote_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.slots.read().unwrap_or_else(|p| p.into_inner()).iter() {
            if s.engine.is_some() || !s.holding.live {
                continue;
            }
            if let Some(a) = &s.holding.addr {
                if !out.contains(a) {
                    out.push(a.clone());
                }
            }
        }
        out
    }

    /// Where `part`'s requests go now.
    pub(super) async fn target(self: &Arc<Self>, part: u32) -> Result<Target, OjsError> {
        let Some(slot) = self.slot(part) else {
            return Err(self.unreachable(None, "no holder known yet"));
        };
        if let Some(e) = slot.engine {
            return Ok(Target::Local(e));
        }
        let h = slot.holding;
        let Some(addr) = h.addr else {
            self.link_cfg.lost.notify_one();
            return Err(match h.owner {
                Some(o) => self.unreachable(
                    Some(part),
                    &format!("node {o} has no --peer-listen address"),
                ),
                None => self.unreachable(Some(part), "no holder known yet"),
            });
        };
        self.link(&addr)
            .await
            .map(Target::Remote)
            .map_err(|e| self.unreachable(Some(part), &e))
    }

    /// The connection to the node at `addr`, made if needed (one attempt at a time).
    async fn link(self: &Arc<Self>, addr: &str) -> Result<Arc<Link>, String> {
        let open = |links: &Links| links.open.get(addr).filter(|l| l.is_open()).cloned();
        if let Some(l) = open(&lock(&self.links)) {
            return Ok(l);
        }
        let _one = self.connecting.lock().await;
        {
            let links = lock(&self.links);
            if let Some(l) = open(&links) {
                return Ok(l);
            }
            if let Some((at, why)) = links.failed.get(addr) {
                if at.elapsed() < RETRY_CONNECT_AFTER {
                    return Err(why.clone());
                }
            }
        }
        match Link::connect(addr, &self.link_cfg).await {
            Ok(l) => {
                tracing::info!(owner = %l.owner, %addr, "connected to the partition's holder");
                // The node's workers are known there too.
                for (wid, w) in lock(&self.workers).iter() {
                    for _ in 0..w.conns {
                        l.tell(&super::proto::ToOwner::Register {
                            wid: wid.to_string(),
                            info: w.info.clone(),
                            reserve: w.reserve,
                        });
                    }
                }
                let mut links = lock(&self.links);
                links.failed.remove(addr);
                if let Some(old) = links.open.insert(addr.to_string(), l.clone()) {
                    old.shutdown();
                }
                Ok(l)
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot reach a partition's holder");
                lock(&self.links)
                    .failed
                    .insert(addr.to_string(), (Instant::now(), e.clone()));
                self.link_cfg.lost.notify_one();
                Err(e)
            }
        }
    }

    /// Run `cmd` on `part`'s engine, here or at its holder.
    pub(super) async fn on(
        self: &Arc<Self>,
        part: u32,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    ) -> oneshot::Receiver<Answered> {
        match self.target(part).await {
            Ok(Target::Local(h)) => h.submit_with(conn, wid, cmd, bytes, viewed).await,
            Ok(Target::Remote(l)) => l.submit(part, conn, wid, cmd, bytes, viewed).await.1,
            Err(e) => ready(Err(e)),
        }
    }

    /// The partition holding job `id`: remembered, or looked up.
    pub(super) async fn place(&self, id: &str) -> Result<u32, OjsError> {
        if let Some(p) = self.placed.get(id) {
            return Ok(p);
        }
        let (Ok(uid), Some(locate)) = (uuid::Uuid::parse_str(id), self.locator.get()) else {
            // Not an id any partition holds: the engine there answers so.
            return Ok(0);
        };
        match locate(uid).await {
            Ok(Some(p)) if p < self.parts() => {
                self.placed.insert(id.to_string(), p);
                Ok(p)
            }
            Ok(_) => Ok(0),
            Err(e) => Err(OjsError::new(
                ErrorCode::BackendUnavailable,
                format!("cannot find the partition of job {id}: {e}; retry"),
            )),
        }
    }

    /// Remember the partition of the jobs an answer handed out.
    pub(super) fn placed_from(&self, part: u32, a: &Answered) {
        if let Ok(a) = a {
            for id in claimed_ids(a) {
                self.placed.insert(id, part);
            }
        }
    }

    async fn dispatch(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    ) -> oneshot::Receiver<Answered> {
        let parts = self.parts();
        if parts == 0 {
            self.link_cfg.lost.notify_one();
            return ready(Err(self.unreachable(None, "no holder known yet")));
        }
        match route(&cmd, parts) {
            Route::Part(p) => {
                if parts > 1 {
                    match &cmd {
                        Command::Push { job, .. } => {
                            self.placed.insert(job.job.id.clone(), p);
                        }
                        Command::PushBatch(jobs) | Command::PushEach(jobs) => {
                            for (j, _) in jobs {
                                self.placed.insert(j.job.id.clone(), p);
                            }
                        }
                        Command::Fetch { .. } => {
                            let rx = self.on(p, conn, wid.clone(), cmd, bytes, viewed).await;
                            return self.placing(p, conn, wid, rx);
                        }
                        _ => {}
                    }
                }
                self.on(p, conn, wid, cmd, bytes, viewed).await
            }
            Route::Job(id) => match self.place(&id).await {
                Ok(p) => match cmd {
                    Command::AckFetch { .. } => self.ack_fetch(p, conn, wid, cmd).await,
                    cmd => self.on(p, conn, wid, cmd, bytes, viewed).await,
                },
                Err(e) => ready(Err(e)),
            },
            Route::Fetch(ps) => match cmd {
                Command::AckFetch { .. } => match self.place(&ack_id(&cmd)).await {
                    Ok(p) => self.ack_fetch(p, conn, wid, cmd).await,
                    Err(e) => ready(Err(e)),
                },
                cmd => self.spawn_fetch(ps, conn, wid, cmd),
            },
            Route::All => self.spawn_all(conn, wid, cmd),
            Route::Refused(why) => ready(Err(OjsError::new(ErrorCode::InvalidPayload, why))),
        }
    }

    /// `rx`, with the partition of the jobs it hands out remembered on the way.
    fn placing(
        self: &Arc<Self>,
        part: u32,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        rx: oneshot::Receiver<Answered>,
    ) -> oneshot::Receiver<Answered> {
        let (tx, out) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let a = rx
                .await
                .unwrap_or_else(|_| Err(me.unreachable(Some(part), "no answer")));
            me.placed_from(part, &a);
            me.deliver(part, conn, wid, tx, a).await;
        });
        out
    }

    /// Send `a` to the waiting front end; jobs it handed out go back if nobody waits.
    pub(super) async fn deliver(
        self: &Arc<Self>,
        part: u32,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        tx: oneshot::Sender<Answered>,
        a: Answered,
    ) {
        if let Err(Ok(a)) = tx.send(a) {
            let ids = claimed_ids(&a);
            if !ids.is_empty() {
                let _ = self
                    .on(part, conn, wid, Command::Unclaim { ids }, 0, false)
                    .await
                    .await;
            }
        }
    }
}

/// The id of an ACK-and-FETCH.
fn ack_id(cmd: &Command) -> String {
    match cmd {
        Command::AckFetch { id, .. } => id.clone(),
        _ => String::new(),
    }
}
