//! The [`Router`]: the engine's surface for the front ends, sending each request to the
//! engine of the node that holds the partition. On one node (fjall, sled) it is the
//! `EngineHandle` itself behind a `match` (no allocation, no extra task per command). In
//! cluster mode (`--store postgres`) the node starts forwarding to the holder that the
//! store's lease loop reports (`ojs_partitions ⋈ ojs_nodes`, looked up on each of its
//! tries and again as soon as a connection to the holder is lost), and runs everything on
//! its own engine from the moment it wins the lease ([`Router::activate`]).

use super::link::{Link, LinkConfig};
use crate::engine::intake::Intake;
use crate::engine::request::Command;
use crate::engine::{Answered, ConnId, EngineHandle, Page, PageSource, Subscription};
use crate::error::{ErrorCode, OjsError};
use crate::events::held::{Buffer, Pool, Reservation};
use crate::events::{EventFilter, Start};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a forwarding node's subscriber waits before asking the holder for events
/// again once it has read up to the head (there is no live feed across nodes yet).
pub const REMOTE_POLL: Duration = Duration::from_millis(250);

/// After a failed connection to a holder, requests fail at once for this long instead of
/// each trying again (the lease loop looks the holder up meanwhile).
const RETRY_CONNECT_AFTER: Duration = Duration::from_millis(200);

/// What a front end sends its requests to.
#[derive(Clone)]
pub enum Router {
    /// One node: this engine, always.
    Local(EngineHandle),
    /// Cluster mode: this engine once the node holds the partition, the holder until then.
    Cluster(Arc<Cluster>),
}

/// What a node is doing with the partition, for health reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// One node, no cluster.
    Single,
    /// Holds the partition and runs its engine.
    Active,
    /// Forwards to the holder, `owner`, connected or not.
    Forwarding { owner: String, connected: bool },
    /// No holder known yet.
    Waiting,
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Active => "active",
            Role::Forwarding { .. } => "forwarding",
            Role::Waiting => "waiting",
        }
    }
}

#[derive(Default)]
struct Holder {
    owner: Option<String>,
    addr: Option<String>,
    link: Option<Arc<Link>>,
    /// When a connection to `addr` last failed, and why.
    failed: Option<(Instant, String)>,
}

/// A cluster node's routing state.
pub struct Cluster {
    engine: OnceLock<EngineHandle>,
    intake: Intake,
    subscribers: Arc<Pool>,
    connections: Arc<AtomicUsize>,
    /// Ids of client connections made while forwarding: from 2^62 up, apart from the
    /// engine's own (which count from 1), so that one made before the switch to the local
    /// engine still names its connection there.
    next_conn: AtomicU64,
    store_kind: &'static str,
    holder: Mutex<Holder>,
    connecting: tokio::sync::Mutex<()>,
    link_cfg: LinkConfig,
}

fn lock(m: &Mutex<Holder>) -> std::sync::MutexGuard<'_, Holder> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Router {
    /// A node of a cluster that does not hold the partition yet. `link_cfg.lost` is the
    /// store's wake-up: told whenever the holder should be looked up again.
    pub fn cluster(
        intake: Intake,
        shared: &crate::engine::Shared,
        store_kind: &'static str,
        link_cfg: LinkConfig,
    ) -> Router {
        Router::Cluster(Arc::new(Cluster {
            engine: OnceLock::new(),
            intake,
            subscribers: shared.subscribers.clone(),
            connections: shared.connections.clone(),
            next_conn: AtomicU64::new(1 << 62),
            store_kind,
            holder: Mutex::new(Holder::default()),
            connecting: tokio::sync::Mutex::new(()),
            link_cfg,
        }))
    }

    /// The node took the partition: from now on every request runs on `engine`.
    pub fn activate(&self, engine: EngineHandle) {
        if let Router::Cluster(c) = self {
            let _ = c.engine.set(engine);
            let link = lock(&c.holder).link.take();
            if let Some(l) = link {
                l.shutdown();
            }
        }
    }

    /// The store's lease loop saw `owner` (at peer address `addr`) hold the partition, or
    /// nobody. A different holder drops the connection to the previous one.
    pub fn set_holder(&self, owner: Option<String>, addr: Option<String>) {
        let Router::Cluster(c) = self else { return };
        let old = {
            let mut h = lock(&c.holder);
            if h.owner == owner && h.addr == addr {
                return;
            }
            if owner.is_some() {
                tracing::info!(
                    owner = owner.as_deref().unwrap_or(""),
                    peer = addr.as_deref().unwrap_or("(none)"),
                    "forwarding to the partition's holder"
                );
            }
            h.owner = owner;
            h.addr = addr;
            h.failed = None;
            h.link.take()
        };
        if let Some(l) = old {
            l.shutdown();
        }
    }

    /// This node's engine, when it runs one.
    pub fn local(&self) -> Option<EngineHandle> {
        match self {
            Router::Local(h) => Some(h.clone()),
            Router::Cluster(c) => c.engine.get().cloned(),
        }
    }

    pub fn role(&self) -> Role {
        match self {
            Router::Local(_) => Role::Single,
            Router::Cluster(c) => {
                if c.engine.get().is_some() {
                    return Role::Active;
                }
                let h = lock(&c.holder);
                match &h.owner {
                    Some(owner) => Role::Forwarding {
                        owner: owner.clone(),
                        connected: h.link.as_ref().is_some_and(|l| l.is_open()),
                    },
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
            Router::Cluster(c) => c.submit(None, wid, cmd, bytes, false).await,
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
            Router::Cluster(c) => c.submit(conn, wid, cmd, bytes, false).await,
        }
    }

    pub async fn call(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        match self {
            Router::Local(h) => h.call(wid, cmd).await,
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.call(wid, cmd).await,
                None => {
                    let bytes = match &cmd {
                        Command::Push { len, .. } => *len,
                        Command::PushBatch(jobs) | Command::PushEach(jobs) => {
                            jobs.iter().map(|(_, l)| *l).sum()
                        }
                        _ => 0,
                    };
                    c.submit(None, wid, cmd, bytes, false)
                        .await
                        .await
                        .unwrap_or_else(|_| Err(c.unreachable("no answer")))
                }
            },
        }
    }

    pub async fn call_viewed(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        match self {
            Router::Local(h) => h.call_viewed(wid, cmd).await,
            Router::Cluster(c) => c
                .submit(None, wid, cmd, 0, true)
                .await
                .await
                .unwrap_or_else(|_| Err(c.unreachable("no answer"))),
        }
    }

    pub fn intake(&self) -> &Intake {
        match self {
            Router::Local(h) => h.intake(),
            Router::Cluster(c) => c.engine.get().map_or(&c.intake, |h| h.intake()),
        }
    }

    pub fn register_worker(&self, wid: Arc<str>, info: serde_json::Value, reserve: bool) {
        match self {
            Router::Local(h) => h.register_worker(wid, info, reserve),
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.register_worker(wid, info, reserve),
                None => {
                    let msg = super::proto::ToOwner::Register {
                        wid: wid.to_string(),
                        info,
                        reserve,
                    };
                    match c.current() {
                        Some(l) => l.tell(&msg),
                        None => {
                            // The first client of a node that has no connection yet.
                            let c = c.clone();
                            tokio::spawn(async move {
                                if let Ok(l) = c.link().await {
                                    l.tell(&msg);
                                }
                            });
                        }
                    }
                }
            },
        }
    }

    pub fn disconnect_worker(&self, wid: Arc<str>) {
        match self {
            Router::Local(h) => h.disconnect_worker(wid),
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.disconnect_worker(wid),
                // Without a connection the holder has already dropped what it carried.
                None => {
                    if let Some(l) = c.current() {
                        l.tell(&super::proto::ToOwner::Disconnect {
                            wid: wid.to_string(),
                        });
                    }
                }
            },
        }
    }

    pub fn connection_id(&self) -> ConnId {
        match self {
            Router::Local(h) => h.connection_id(),
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.connection_id(),
                None => c.next_conn.fetch_add(1, Ordering::Relaxed),
            },
        }
    }

    pub fn connection_closed(&self, conn: ConnId) {
        match self {
            Router::Local(h) => h.connection_closed(conn),
            Router::Cluster(c) => {
                // A connection of the forwarding days may hold jobs on either side: the
                // holder's if it still is one, this engine's if it has started since.
                if conn >= 1 << 62 {
                    if let Some(l) = c.current() {
                        l.tell(&super::proto::ToOwner::Closed { conn });
                    }
                }
                if let Some(h) = c.engine.get() {
                    h.connection_closed(conn);
                }
            }
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
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.events(filter, start, limit).await,
                None => {
                    // A poll's page: a few MiB (a peer holds twice a page's bytes of its
                    // budget while the page is read and sent).
                    let bytes = 4 << 20;
                    c.link().await?.events(filter, start, limit, bytes).await
                }
            },
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
    /// forwards, the holder's; none when neither answers.
    pub async fn metrics(&self) -> Option<crate::engine::metrics::MetricsView> {
        match self {
            Router::Local(h) => h.metrics().await,
            Router::Cluster(c) => match c.engine.get() {
                Some(h) => h.metrics().await,
                None => c.link().await.ok()?.metrics().await.ok().flatten(),
            },
        }
    }

    pub fn store_kind(&self) -> &'static str {
        match self {
            Router::Local(h) => h.store_kind(),
            Router::Cluster(c) => c.store_kind,
        }
    }

    pub fn shutdown(&self) {
        if let Some(h) = self.local() {
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
            if let Some(h) = c.engine.get() {
                return h.read_into(filter, start, limit, buf, reservation).await;
            }
            let link = c.link().await?;
            let page = link
                .events(filter, start, limit, reservation.bytes())
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
    fn unreachable(&self, why: &str) -> OjsError {
        let owner = lock(&self.holder).owner.clone();
        OjsError::new(
            ErrorCode::BackendUnavailable,
            match owner {
                Some(o) => {
                    format!("the node holding the partition ({o}) cannot be reached: {why}; retry")
                }
                None => format!("no node holds the partition at the moment ({why}); retry"),
            },
        )
    }

    /// The open connection to the holder, if there is one.
    fn current(&self) -> Option<Arc<Link>> {
        lock(&self.holder).link.clone().filter(|l| l.is_open())
    }

    /// The connection to the holder, made if needed (one attempt at a time).
    async fn link(self: &Arc<Self>) -> Result<Arc<Link>, OjsError> {
        if let Some(l) = self.current() {
            return Ok(l);
        }
        let _one = self.connecting.lock().await;
        if let Some(l) = self.current() {
            return Ok(l);
        }
        let (owner, addr) = {
            let h = lock(&self.holder);
            if let Some((at, why)) = &h.failed {
                if at.elapsed() < RETRY_CONNECT_AFTER {
                    let why = why.clone();
                    drop(h);
                    return Err(self.unreachable(&why));
                }
            }
            (h.owner.clone(), h.addr.clone())
        };
        let Some(addr) = addr else {
            self.link_cfg.lost.notify_one();
            return Err(match owner {
                Some(o) => self.unreachable(&format!("node {o} has no --peer-listen address")),
                None => self.unreachable("no holder known yet"),
            });
        };
        match Link::connect(&addr, &self.link_cfg).await {
            Ok(l) => {
                let mut h = lock(&self.holder);
                if h.addr.as_deref() == Some(&addr) {
                    h.link = Some(l.clone());
                    h.failed = None;
                    drop(h);
                    tracing::info!(owner = %l.owner, %addr, "connected to the partition's holder");
                    Ok(l)
                } else {
                    drop(h);
                    l.shutdown();
                    Err(self.unreachable("the holder moved while connecting"))
                }
            }
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot reach the partition's holder");
                lock(&self.holder).failed = Some((Instant::now(), e.clone()));
                self.link_cfg.lost.notify_one();
                Err(self.unreachable(&e))
            }
        }
    }

    async fn submit(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    ) -> oneshot::Receiver<Answered> {
        if let Some(h) = self.engine.get() {
            return h.submit_with(conn, wid, cmd, bytes, viewed).await;
        }
        match self.link().await {
            Ok(l) => l.submit(conn, wid, cmd, bytes, viewed).await,
            Err(e) => {
                let (tx, rx) = oneshot::channel();
                let _ = tx.send(Err(e));
                rx
            }
        }
    }
}
