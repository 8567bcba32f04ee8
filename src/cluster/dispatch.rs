//! The routing state's inner workings: where a partition's requests go (this node's
//! engine or a link to its holder, made on first use and kept per node), a job's
//! partition (remembered, or looked up), and the dispatch of one request by its
//! [`Route`](super::route::Route).

use super::link::Link;
use super::route::{route, Route};
use super::router::{claimed_ids, ready, Cluster, Links, Slot, Target};
use super::serve::NOT_HOLDER;
use crate::engine::api::Each;
use crate::engine::request::{AckItem, Command};
use crate::engine::{Answer, Answered, ConnId};
use crate::error::{ErrorCode, OjsError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// After a failed connection to a node, requests fail at once for this long instead of
/// each trying again (the lease loop looks the holders up meanwhile).
const RETRY_CONNECT_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// How long a request for a partition that no live node holds waits for one to take it.
const MOVE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The pauses before asking a partition's holder again after it said it does not serve
/// the partition (yet): the first retry at once, then from this, doubling...
const MOVED_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(5);
/// ...up to this.
const MOVED_RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(200);

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    pub(super) fn parts(&self) -> u32 {
        self.parts.load(Ordering::Acquire)
    }

    pub(super) fn slot(&self, part: u32) -> Option<Slot> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(part as usize)
            .cloned()
    }

    /// The partition whose event log a subscription or poll with `filter` reads alone: with
    /// several partitions, a filter naming queues of one partition only (no wildcard). Any
    /// other reads a stream merging every partition's log (`feed.rs`).
    pub(super) fn events_part(&self, filter: &crate::events::EventFilter) -> Result<u32, OjsError> {
        let n = self.parts();
        if n <= 1 {
            return Ok(0);
        }
        let mut parts = filter
            .queues
            .iter()
            .map(|q| (!q.ends_with('*')).then(|| super::route::partition_of(q, n)));
        let first = parts.next().flatten();
        match first {
            Some(p) if parts.all(|x| x == Some(p)) => Ok(p),
            _ => Err(OjsError::new(
                ErrorCode::InvalidPayload,
                format!(
                    "in cluster mode (this cluster has {n} partitions) an event stream or \
                     poll reads one partition's log: filter by queues of one partition \
                     (no wildcard); a stream merging every partition is not built yet"
                ),
            )),
        }
    }

    pub(super) fn unreachable(&self, part: Option<u32>, why: &str) -> OjsError {
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
    pub(super) fn remote_addrs(&self) -> Vec<String> {
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
        // The common case, this node's engine, without copying the slot's strings.
        let local = self
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(part as usize)
            .and_then(|s| s.engine.clone());
        if let Some(e) = local {
            return Ok(Target::Local(e));
        }
        let Some(mut slot) = self.slot(part) else {
            return Err(self.unreachable(None, "no holder known yet"));
        };
        // With several partitions, one moves between nodes when the nodes rebalance (or
        // one dies): wait a little for the store's lease loop (woken now) to see its new
        // holder, rather than refusing the request at once.
        if self.parts() > 1 && slot.engine.is_none() && !slot.holding.live {
            let until = Instant::now() + MOVE_WAIT;
            while Instant::now() < until {
                self.link_cfg.lost.notify_one();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                match self.slot(part) {
                    Some(s) if s.engine.is_some() || s.holding.live => {
                        slot = s;
                        break;
                    }
                    _ => {}
                }
            }
        }
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
    pub(super) async fn link(self: &Arc<Self>, addr: &str) -> Result<Arc<Link>, String> {
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
            Ok(Target::Remote(l)) if self.parts() > 1 => {
                // The holder may have given the partition up since the routes were read, or
                // have just won its lease and not serve it yet (its engine is rebuilt
                // first): it then refuses the request before running it, and the request
                // goes to the partition's holder again, looked up anew, at growing intervals
                // for up to MOVE_WAIT.
                let again = cmd.clone();
                let first = l
                    .submit(part, conn, wid.clone(), cmd, bytes, viewed)
                    .await
                    .1;
                let (tx, rx) = oneshot::channel();
                let me = self.clone();
                tokio::spawn(async move {
                    let mut a = first
                        .await
                        .unwrap_or_else(|_| Err(super::link::lost(&l.owner)));
                    let mut addr = l.addr.clone();
                    let t0 = Instant::now();
                    let mut pause = std::time::Duration::ZERO;
                    while matches!(&a, Err(e) if e.message.starts_with(NOT_HOLDER))
                        && t0.elapsed() < MOVE_WAIT
                    {
                        me.moved(part, &addr);
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).clamp(MOVED_RETRY_FIRST, MOVED_RETRY_MAX);
                        let (wid, cmd) = (wid.clone(), again.clone());
                        let rx = match me.target(part).await {
                            Ok(Target::Local(h)) => {
                                h.submit_with(conn, wid, cmd, bytes, viewed).await
                            }
                            Ok(Target::Remote(l)) => {
                                addr.clone_from(&l.addr);
                                l.submit(part, conn, wid, cmd, bytes, viewed).await.1
                            }
                            Err(e) => ready(Err(e)),
                        };
                        a = rx
                            .await
                            .unwrap_or_else(|_| Err(me.unreachable(Some(part), "no answer")));
                    }
                    let _ = tx.send(a);
                });
                rx
            }
            Ok(Target::Remote(l)) => l.submit(part, conn, wid, cmd, bytes, viewed).await.1,
            Err(e) => ready(Err(e)),
        }
    }

    /// The node at `addr` said it does not hold `part`: not live there until the lease
    /// loop says otherwise.
    fn moved(&self, part: u32, addr: &str) {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slots.get_mut(part as usize) {
            if s.engine.is_none() && s.holding.addr.as_deref() == Some(addr) {
                s.holding.live = false;
            }
        }
        drop(slots);
        self.link_cfg.lost.notify_one();
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

    pub(super) async fn dispatch(
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
                        Command::Cron(crate::engine::request::CronCmd::Add(_)) => {
                            return self.spawn_cron_add(p, wid, cmd);
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
            Route::Jobs => match cmd {
                Command::AckBatch(acks) => self.spawn_ack_batch(conn, wid, acks),
                cmd => ready(Err(OjsError::new(
                    ErrorCode::BackendError,
                    format!("{} is not routed by job", cmd.verb()),
                ))),
            },
            Route::Fetch(ps) => match cmd {
                Command::AckFetch { .. } => match self.place(&ack_id(&cmd)).await {
                    Ok(p) => self.ack_fetch(p, conn, wid, cmd).await,
                    Err(e) => ready(Err(e)),
                },
                cmd => self.spawn_fetch(ps, conn, wid, cmd),
            },
            Route::All => self.spawn_all(conn, wid, cmd),
            Route::Find => self.spawn_find(conn, wid, cmd, viewed),
            Route::Refused(why) => ready(Err(OjsError::new(ErrorCode::InvalidPayload, why))),
        }
    }

    /// ACKB: each ACK to its job's partition, one sub-batch per partition; the answers
    /// merged back into one, refusals at their positions in the request. A partition that
    /// cannot answer refuses its ACKs with its error (they may be retried).
    fn spawn_ack_batch(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        acks: Vec<AckItem>,
    ) -> oneshot::Receiver<Answered> {
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let mut each = Each::default();
            // Partition -> (positions in the request, its ACKs), in the order first named.
            let mut groups: Vec<(u32, Vec<usize>, Vec<AckItem>)> = Vec::new();
            for (i, a) in acks.into_iter().enumerate() {
                match me.place(&a.id).await {
                    Ok(p) => match groups.iter_mut().find(|g| g.0 == p) {
                        Some(g) => {
                            g.1.push(i);
                            g.2.push(a);
                        }
                        None => groups.push((p, vec![i], vec![a])),
                    },
                    Err(e) => each.rejected.push((i, e)),
                }
            }
            let mut asked = Vec::with_capacity(groups.len());
            for (p, at, acks) in groups {
                let cmd = Command::AckBatch(acks);
                asked.push((p, at, me.on(p, conn, wid.clone(), cmd, 0, false).await));
            }
            for (p, at, rx) in asked {
                match rx
                    .await
                    .unwrap_or_else(|_| Err(me.unreachable(Some(p), "no answer")))
                {
                    Ok(Answer::Acked(got)) => {
                        each.accepted += got.accepted;
                        for (j, e) in got.rejected {
                            if let Some(&i) = at.get(j) {
                                each.rejected.push((i, e));
                            }
                        }
                    }
                    Ok(other) => {
                        let e = OjsError::new(
                            ErrorCode::BackendError,
                            format!("partition {p} answered ACKB with {other:?}"),
                        );
                        each.rejected.extend(at.into_iter().map(|i| (i, e.clone())));
                    }
                    Err(e) => each.rejected.extend(at.into_iter().map(|i| (i, e.clone()))),
                }
            }
            each.rejected.sort_by_key(|(i, _)| *i);
            let _ = tx.send(Ok(Answer::Acked(each)));
        });
        rx
    }

    /// `rx`, with the partition of the jobs it hands out remembered on the way.
    pub(super) fn placing(
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
