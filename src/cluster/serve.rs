//! The holder's side of the peer protocol (`--peer-listen`): authenticate a node, then run
//! its requests on this node's engine. A peer's client connections get ids of this
//! engine's (`EngineHandle::connection_id`), kept per peer connection; when the peer
//! connection ends, once its requests in flight are answered, every client connection and
//! worker it carried is closed here as a local disconnect would be (the jobs they fetched
//! and did not settle go back to their queues at once). A node that does not run the
//! engine (a standby) answers every request `BACKEND_UNAVAILABLE`, and never forwards it
//! again: a request crosses at most one hop.

use super::proto::{encode, FromOwner, Limits, ToOwner, ITERATIONS, VERSION};
use super::Router;
use crate::auth::AuthLimiter;
use crate::auth::{Role, Tokens};
use crate::engine::request::Command;
use crate::engine::{unavailable, ConnId, EngineHandle};
use crate::error::{ErrorCode, OjsError};
use crate::protocol::reply::worst_case;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::codec::Framed;

/// What a metrics request holds of a peer's budget until its answer is written: the view
/// is bounded by `--max-metric-series` and `--max-queues`, well under this.
const METRICS_HOLD: usize = 4 << 20;

/// Most peer connections served at once (a cluster has a handful of nodes; each keeps
/// one connection to the holder).
const MAX_PEER_CONNECTIONS: usize = 256;

#[derive(Clone)]
pub struct PeerServerConfig {
    pub node: String,
    pub tokens: Tokens,
    pub auth_failures: Arc<AuthLimiter>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub limits: Limits,
    /// Time to complete TLS and the handshake.
    pub handshake_timeout: Duration,
}

/// Accept peer connections until the task is dropped.
pub async fn serve_peers(listener: TcpListener, router: Router, cfg: PeerServerConfig) {
    let total = Arc::new(Semaphore::new(kib(cfg.limits.total)));
    let open = Arc::new(AtomicUsize::new(0));
    let mut backoff = Duration::ZERO;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                crate::listen::accept_backoff(&mut backoff, &e).await;
                continue;
            }
        };
        backoff = Duration::ZERO;
        if open.load(Ordering::Relaxed) >= MAX_PEER_CONNECTIONS {
            tracing::warn!(%peer, "refusing a peer connection: {MAX_PEER_CONNECTIONS} are open");
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let (router, cfg, total, open) = (router.clone(), cfg.clone(), total.clone(), open.clone());
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            match &cfg.tls {
                Some(acceptor) => {
                    match tokio::time::timeout(cfg.handshake_timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => peer_connection(tls, peer, router, &cfg, total).await,
                        _ => tracing::debug!(%peer, "peer TLS handshake failed"),
                    }
                }
                None => peer_connection(tcp, peer, router, &cfg, total).await,
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Semaphore permits for `bytes` (one per KiB, at least one).
fn kib(bytes: usize) -> usize {
    (bytes / 1024).clamp(1, Semaphore::MAX_PERMITS)
}

type Out = mpsc::UnboundedSender<(Bytes, Vec<OwnedSemaphorePermit>)>;

/// One of the peer's client connections, as this engine knows it.
struct Remote {
    local: ConnId,
    /// Its requests not yet answered: a close waits for them, so that a FETCH still
    /// running cannot claim a job for a connection already closed.
    inflight: u32,
    closing: bool,
}

#[derive(Default)]
struct Carried {
    conns: HashMap<u64, Remote>,
    workers: HashMap<String, u32>,
}

fn lock(m: &Mutex<Carried>) -> std::sync::MutexGuard<'_, Carried> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn handshake<S>(
    framed: &mut Framed<S, tokio_util::codec::LengthDelimitedCodec>,
    peer: SocketAddr,
    cfg: &PeerServerConfig,
) -> Result<String, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let salt = hex::encode(rand::random::<[u8; 16]>());
    let challenge = FromOwner::Challenge {
        version: VERSION,
        node: cfg.node.clone(),
        salt: salt.clone(),
        auth: !cfg.tokens.is_open(),
    };
    framed
        .send(encode(&challenge)?)
        .await
        .map_err(|e| e.to_string())?;
    let frame = framed
        .next()
        .await
        .ok_or("closed before authenticating")?
        .map_err(|e| e.to_string())?;
    let (version, node, pwdhash) = match serde_json::from_slice(&frame) {
        Ok(ToOwner::Auth {
            version,
            node,
            pwdhash,
        }) => (version, node, pwdhash),
        _ => return Err("the first message was not Auth".into()),
    };
    let refuse =
        |code: ErrorCode, msg: String| (FromOwner::Refused(OjsError::new(code, msg.clone())), msg);
    let verdict = if version != VERSION {
        Err(refuse(
            ErrorCode::BackendError,
            format!("peer protocol {version}; this node speaks {VERSION}"),
        ))
    } else if cfg.tokens.is_open() {
        Ok(())
    } else if let Err(wait) = cfg.auth_failures.check(peer.ip(), Instant::now()) {
        Err(refuse(
            ErrorCode::RateLimited,
            format!(
                "too many failed authentications from {}; try again in {} ms",
                peer.ip(),
                wait.as_millis()
            ),
        ))
    } else {
        let tokens = cfg.tokens.clone();
        let given = pwdhash.unwrap_or_default();
        let role = tokio::task::spawn_blocking(move || tokens.pwdhash(&given, &salt, ITERATIONS))
            .await
            .ok()
            .flatten();
        match role {
            Some(Role::Admin) => Ok(()),
            Some(_) => Err(refuse(
                ErrorCode::Forbidden,
                "a peer must authenticate as admin (--password or an admin --token)".into(),
            )),
            None => {
                cfg.auth_failures.failed(peer.ip(), Instant::now());
                Err(refuse(
                    ErrorCode::Unauthenticated,
                    "wrong password for the peer listener".into(),
                ))
            }
        }
    };
    match verdict {
        Ok(()) => {
            framed
                .send(encode(&FromOwner::Welcome)?)
                .await
                .map_err(|e| e.to_string())?;
            Ok(node)
        }
        Err((msg, why)) => {
            let _ = framed.send(encode(&msg)?).await;
            Err(format!("refused node {node}: {why}"))
        }
    }
}

async fn peer_connection<S>(
    io: S,
    peer: SocketAddr,
    router: Router,
    cfg: &PeerServerConfig,
    total: Arc<Semaphore>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut framed = Framed::new(io, cfg.limits.owner_codec());
    let node = match tokio::time::timeout(cfg.handshake_timeout, handshake(&mut framed, peer, cfg))
        .await
    {
        Ok(Ok(node)) => node,
        Ok(Err(e)) => {
            tracing::warn!(%peer, "peer connection refused: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "peer handshake timed out");
            return;
        }
    };
    tracing::info!(%peer, %node, "peer connected");
    let (mut sink, mut stream) = framed.split();
    let (out, mut rx): (Out, _) = mpsc::unbounded_channel();
    let writer = tokio::spawn(async move {
        let _ = super::proto::write_frames(&mut sink, &mut rx).await;
    });
    let mine = Arc::new(Semaphore::new(kib(cfg.limits.per_peer)));
    // The job size limit of the engines that answer (replies of FETCH, JOB, listings).
    let max_job = router.intake().limits().max_job_bytes;
    let carried = Arc::new(Mutex::new(Carried::default()));
    // Bytes of this peer's budget held by events requests that wait for an event.
    let parked_polls = Arc::new(AtomicUsize::new(0));
    // Requests the peer may cancel (FETCHes), by id: told to give back what they claim.
    let cancels: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
    let mut tasks = JoinSet::new();
    loop {
        let frame = tokio::select! {
            f = stream.next() => f,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let frame = match frame {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                // A frame over the limit (or a broken stream): the connection ends, and
                // what it carried is closed below, as for any drop.
                tracing::warn!(%peer, %node, error = %e, "peer connection: bad frame; closing it");
                break;
            }
            None => break,
        };
        let msg = match serde_json::from_slice::<ToOwner>(&frame) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(%peer, %node, error = %e, "peer connection: a message could not be decoded; closing it");
                break;
            }
        };
        if let ToOwner::Cancel { id } = &msg {
            if let Some(c) = cancels.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
                let _ = c.send(());
            }
            continue;
        }
        // What this request may hold until its answer is written, here and across all
        // peers (the larger of the request and the largest answer it can get, as a client
        // connection reserves it): reading stops while either is spent, so a peer that
        // does not read its answers stops here instead of filling memory.
        let holds = match &msg {
            ToOwner::Submit { cmd, bytes, .. } => worst_case(cmd, *bytes, max_job),
            ToOwner::Events { bytes, .. } => page_bytes(*bytes, &cfg.limits).saturating_mul(2),
            ToOwner::Metrics { .. } => METRICS_HOLD,
            _ => 0,
        }
        .max(frame.len());
        drop(frame);
        let weight = kib(holds).min(kib(cfg.limits.per_peer)) as u32;
        let Ok(p1) = mine.clone().acquire_many_owned(weight).await else {
            break;
        };
        let weight_total = weight.min(kib(cfg.limits.total) as u32);
        let Ok(p2) = total.clone().acquire_many_owned(weight_total).await else {
            break;
        };
        let permits = vec![p1, p2];
        match msg {
            ToOwner::Auth { .. } => break,
            ToOwner::Cancel { .. } => {}
            ToOwner::Submit {
                id,
                part,
                conn,
                wid,
                cmd,
                bytes,
                viewed,
            } => {
                let Some(engine) = router.engine_of(part) else {
                    reply(
                        &out,
                        id,
                        Err(not_holder(&cfg.node, part)),
                        permits,
                        &cfg.limits,
                    );
                    continue;
                };
                let checked = match wid.as_deref() {
                    Some(w) => super::check::worker(w, None),
                    None => Ok(()),
                }
                .and_then(|()| {
                    super::check::forwarded(&cmd, engine.intake().limits(), engine.intake().now())
                });
                if let Err(e) = checked {
                    tracing::warn!(%peer, %node, error = %e.message, "refused a peer's request");
                    reply(&out, id, Err(e), permits, &cfg.limits);
                    continue;
                }
                let local = match conn {
                    None => None,
                    Some(rc) => match open_conn(&carried, rc, &router, cfg.limits.max_conns) {
                        Ok(l) => Some((rc, l)),
                        Err(e) => {
                            reply(&out, id, Err(e), permits, &cfg.limits);
                            continue;
                        }
                    },
                };
                let cancel = match cmd {
                    Command::Fetch { .. } | Command::AckFetch { .. } => {
                        let (tx, rx) = oneshot::channel();
                        cancels
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(id, tx);
                        Some(rx)
                    }
                    _ => None,
                };
                let (out, carried, limits, router) =
                    (out.clone(), carried.clone(), cfg.limits, router.clone());
                let cancels = cancels.clone();
                tasks.spawn(async move {
                    let wid = wid.map(Arc::<str>::from);
                    let conn = local.map(|(_, l)| l);
                    let mut rx = engine
                        .submit_with(conn, wid.clone(), cmd, bytes, viewed)
                        .await;
                    let answered = match cancel {
                        None => rx.await.unwrap_or_else(|_| unavailable()),
                        Some(mut cancelled) => {
                            let answered = tokio::select! {
                                a = &mut rx => a.unwrap_or_else(|_| unavailable()),
                                Ok(()) = &mut cancelled => {
                                    rx.close();
                                    let got = rx.try_recv().ok();
                                    give_back(&engine, conn, wid, got).await;
                                    Ok(crate::engine::Answer::Nothing)
                                }
                            };
                            cancels
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&id);
                            answered
                        }
                    };
                    reply(&out, id, answered, permits, &limits);
                    if let Some((rc, _)) = local {
                        finish_conn(&carried, rc, &router);
                    }
                });
            }
            ToOwner::Metrics { id, part } => {
                let out = out.clone();
                let limits = cfg.limits;
                let engine = router.engine_of(part);
                tasks.spawn(async move {
                    let view = match engine {
                        None => None,
                        Some(engine) => engine.metrics().await,
                    };
                    send(&out, &FromOwner::Metrics { id, view }, id, permits, &limits);
                });
            }
            ToOwner::Events {
                id,
                part,
                filter,
                start,
                limit,
                bytes,
                wait_ms,
            } => {
                let out = out.clone();
                let limits = cfg.limits;
                let holder = cfg.node.clone();
                let engine = router.engine_of(part);
                // A parked poll holds its share of this peer's budget while it waits: while
                // parked polls hold a quarter of it, the others are answered at once (their
                // subscribers ask again a little later), so that waiting polls cannot hold
                // up the peer's commands.
                let parked = parked_polls.clone();
                let share = holds.min(cfg.limits.per_peer);
                let may_wait = parked
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
                        (b + share <= cfg.limits.per_peer / 4).then_some(b + share)
                    })
                    .is_ok();
                tasks.spawn(async move {
                    let page = match engine {
                        None => Err(not_holder(&holder, part)),
                        Some(engine) => {
                            let wait = if may_wait {
                                Duration::from_millis(wait_ms).min(MAX_EVENTS_WAIT)
                            } else {
                                Duration::ZERO
                            };
                            let bytes = page_bytes(bytes, &limits);
                            long_poll(&engine, filter, start, limit.min(1000), bytes, wait)
                                .await
                                .map(super::proto::WirePage::from)
                        }
                    };
                    if may_wait {
                        parked.fetch_sub(share, Ordering::SeqCst);
                    }
                    let msg = FromOwner::Events { id, page };
                    send(&out, &msg, id, permits, &limits);
                });
            }
            ToOwner::Register { wid, info, reserve } => {
                if let Err(e) = super::check::worker(&wid, Some(&info)) {
                    tracing::warn!(%peer, %node, error = %e.message, "peer connection: closing it");
                    break;
                }
                let mut c = lock(&carried);
                if c.workers.len() >= cfg.limits.max_conns && !c.workers.contains_key(&wid) {
                    tracing::warn!(%peer, %node, "peer connection: too many workers; closing it");
                    break;
                }
                *c.workers.entry(wid.clone()).or_default() += 1;
                drop(c);
                router.register_local_worker(Arc::from(wid), &info, reserve);
            }
            ToOwner::Disconnect { wid } => {
                let mut c = lock(&carried);
                let gone = match c.workers.get_mut(&wid) {
                    Some(n) => {
                        *n -= 1;
                        *n == 0
                    }
                    None => continue,
                };
                if gone {
                    c.workers.remove(&wid);
                }
                drop(c);
                router.disconnect_local_worker(Arc::from(wid));
            }
            ToOwner::Closed { conn } => close_conn(&carried, conn, &router),
        }
    }
    // The peer is gone: once what it asked has been answered (a parked FETCH ends within
    // its wait), close everything it carried.
    drop(stream);
    while tasks.join_next().await.is_some() {}
    drop(out);
    writer.abort();
    let c = std::mem::take(&mut *lock(&carried));
    for (_, r) in c.conns {
        router.close_local_conn(r.local);
    }
    for (wid, n) in c.workers {
        let wid: Arc<str> = Arc::from(wid);
        for _ in 0..n {
            router.disconnect_local_worker(wid.clone());
        }
    }
    tracing::info!(%peer, %node, "peer disconnected; its connections are closed here");
}

/// Longest a peer's events request waits for an event (a subscriber's long poll).
const MAX_EVENTS_WAIT: Duration = Duration::from_secs(15);

/// One page of events after `start`; when none matches yet and `wait` is not zero, the
/// page once the first matching event is committed, or the empty page after `wait`. The
/// wait is a live subscription of this engine's (its buffer counted in the subscribers'
/// bounds); the page is read from the log, so it holds what a poll would.
async fn long_poll(
    engine: &EngineHandle,
    filter: crate::events::EventFilter,
    start: crate::events::Start,
    limit: usize,
    bytes: usize,
    wait: Duration,
) -> Result<crate::engine::Page, OjsError> {
    let page = engine
        .events_within(filter.clone(), start, limit, bytes)
        .await?;
    if wait.is_zero() || page.count > 0 || page.has_more {
        return Ok(page);
    }
    let after = crate::events::Start::After(page.last);
    let mut sub = engine.subscription(filter.clone(), after.clone());
    match tokio::time::timeout(wait, sub.next()).await {
        Ok(Ok(_)) => engine.events_within(filter, after, limit, bytes).await,
        _ => Ok(page),
    }
}

/// A cancelled FETCH's answer, if the engine sent one before the cancel: its jobs go back.
async fn give_back(
    engine: &EngineHandle,
    conn: Option<ConnId>,
    wid: Option<Arc<str>>,
    got: Option<crate::engine::Answered>,
) {
    let ids = match got {
        Some(Ok(a)) => super::router::claimed_ids(&a),
        _ => return,
    };
    if ids.is_empty() {
        return;
    }
    let rx = engine
        .submit_with(conn, wid, Command::Unclaim { ids }, 0, false)
        .await;
    if let Ok(Err(e)) = rx.await {
        tracing::warn!(error = %e.message, "could not give back a cancelled FETCH's jobs");
    }
}

/// The bytes of events a page for a peer may hold: what it asked, at most a quarter of an
/// answer frame.
fn page_bytes(asked: usize, limits: &Limits) -> usize {
    asked.min(limits.reply_frame / 4).max(1)
}

/// The error of a request for a partition this node does not serve; the sender looks
/// the holder up again and retries (see `router.rs`).
pub fn not_holder(node: &str, part: u32) -> OjsError {
    OjsError::new(
        ErrorCode::BackendUnavailable,
        format!("{NOT_HOLDER} {part} (node {node}); retry"),
    )
}

/// How [`not_holder`]'s message starts.
pub const NOT_HOLDER: &str = "this node does not hold partition";

/// This engine's id for the peer's connection `rc`, made on first use; one more request
/// in flight on it.
fn open_conn(
    carried: &Mutex<Carried>,
    rc: u64,
    router: &Router,
    max: usize,
) -> Result<ConnId, OjsError> {
    let mut c = lock(carried);
    let len = c.conns.len();
    match c.conns.get_mut(&rc) {
        Some(r) => {
            r.inflight += 1;
            Ok(r.local)
        }
        None if len >= max => Err(OjsError::new(
            ErrorCode::TooManyConnections,
            format!("the peer connection carries {max} client connections already"),
        )),
        None => {
            let local = router.connection_id();
            c.conns.insert(
                rc,
                Remote {
                    local,
                    inflight: 1,
                    closing: false,
                },
            );
            Ok(local)
        }
    }
}

/// A request on `rc` was answered; if the connection closed meanwhile, close it now.
fn finish_conn(carried: &Mutex<Carried>, rc: u64, router: &Router) {
    let mut c = lock(carried);
    let Some(r) = c.conns.get_mut(&rc) else {
        return;
    };
    r.inflight = r.inflight.saturating_sub(1);
    if r.closing && r.inflight == 0 {
        let local = r.local;
        c.conns.remove(&rc);
        drop(c);
        router.close_local_conn(local);
    }
}

/// The peer's connection `rc` closed: close it here once its requests are answered.
fn close_conn(carried: &Mutex<Carried>, rc: u64, router: &Router) {
    let mut c = lock(carried);
    let Some(r) = c.conns.get_mut(&rc) else {
        return;
    };
    if r.inflight > 0 {
        r.closing = true;
        return;
    }
    let local = r.local;
    c.conns.remove(&rc);
    drop(c);
    router.close_local_conn(local);
}

fn reply(
    out: &Out,
    id: u64,
    answered: crate::engine::Answered,
    permits: Vec<OwnedSemaphorePermit>,
    limits: &Limits,
) {
    send(
        out,
        &FromOwner::Answer { id, answered },
        id,
        permits,
        limits,
    )
}

/// Send an answer with the request's permits, given back once it is written.
fn send(out: &Out, msg: &FromOwner, id: u64, permits: Vec<OwnedSemaphorePermit>, limits: &Limits) {
    if let Some(frame) = frame_of(msg, id, limits) {
        let _ = out.send((frame, permits));
    }
}

/// An answer's frame; one larger than a frame may be is replaced by an error saying so.
fn frame_of(msg: &FromOwner, id: u64, limits: &Limits) -> Option<Bytes> {
    let frame = match encode(msg) {
        Ok(f) if f.len() <= limits.reply_frame => f,
        Ok(f) => {
            let e = OjsError::new(
                ErrorCode::BackendError,
                format!(
                    "the answer is {} bytes, over the {} a peer frame may hold: ask for a \
                     smaller page, or connect to node holding the partition",
                    f.len(),
                    limits.reply_frame
                ),
            );
            let m = match msg {
                FromOwner::Events { .. } => FromOwner::Events { id, page: Err(e) },
                // Metrics over a frame: none, as from a node without an engine.
                FromOwner::Metrics { .. } => FromOwner::Metrics { id, view: None },
                _ => FromOwner::Answer {
                    id,
                    answered: Err(e),
                },
            };
            encode(&m).ok()?
        }
        Err(e) => {
            tracing::warn!(error = %e, "an answer to a peer could not be encoded");
            encode(&FromOwner::Answer {
                id,
                answered: Err(OjsError::new(ErrorCode::BackendError, e)),
            })
            .ok()?
        }
    };
    Some(frame)
}
