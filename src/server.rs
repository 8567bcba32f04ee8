//! The TCP front end: greeting and HELLO, then a reader that turns lines into engine
//! requests and a writer that sends replies in request order. Requests are pipelined: the
//! reader does not wait for one reply before submitting the next command.
//!
//! What a client can hold is bounded: a slot among `--max-connections` ([`limits::Gate`]),
//! `--hello-timeout-ms` to finish the handshake, `--idle-timeout-ms` of silence for
//! connections that are not workers, and `--max-pending-reply-bytes` of replies it has not
//! read ([`budget`]). Password checks run off the async threads, at most a few at a time,
//! and an address that keeps failing them is refused before any hashing
//! ([`limits::AuthLimiter`]). The token a HELLO answered gives the connection its role, and
//! each command is checked against it in one place ([`crate::protocol::command::authorize`])
//! before it reaches the engine. With `--tls-cert`/`--tls-key` every connection is TLS.

mod budget;
pub mod limits;

use crate::auth::{Role, Tokens};
use crate::engine::{unavailable, EngineHandle};
use crate::engine::{Answer, Answered};
use crate::error::{ErrorCode, OjsError};
use crate::protocol::command::authorize;
use crate::protocol::{faktory, parse_command, Command, Frame, LineCodec, Reply};
use budget::{wire_len, worst_case, ReplyBudget};
use futures_util::{SinkExt, StreamExt};
use limits::{AuthLimiter, Gate, Ticket};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::Framed;

pub const DEFAULT_MAX_PENDING_REPLY_BYTES: usize = 4 * 1024 * 1024;
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
pub const DEFAULT_MAX_HANDSHAKING: usize = 1_000;
pub const DEFAULT_HELLO_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
pub const DEFAULT_MAX_AUTH_FAILURES: u32 = 10;
pub const DEFAULT_AUTH_FAILURE_WINDOW_MS: u64 = 60_000;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `--password` and `--token`s; none: open, every connection is `admin`.
    pub tokens: Tokens,
    pub max_line: usize,
    /// `--max-job-bytes`: how large a job in a reply can be, for the reply budget.
    pub max_job_bytes: usize,
    /// Bytes of replies a connection may owe before its commands stop being read.
    pub max_pending_reply_bytes: usize,
    /// Connections at once, handshaking ones included.
    pub max_connections: usize,
    /// Connections at once that have not completed HELLO (the oldest is dropped for a
    /// newcomer when full).
    pub max_handshaking: usize,
    /// From accept to an accepted HELLO (TLS handshake included).
    pub hello_timeout: Duration,
    /// A connection without a `wid` that sends nothing and waits for nothing this long is
    /// closed; zero: never.
    pub idle_timeout: Duration,
    /// Wrong passwords per client address (`--max-auth-failures` per
    /// `--auth-failure-window-ms`), shared with the other listeners.
    pub auth_failures: Arc<AuthLimiter>,
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Which command language this listener speaks.
    pub dialect: Dialect,
}

/// The command language of one listener: HELLO, the password, TLS and the limits are the
/// same for both; commands and replies differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    #[default]
    Ojs,
    /// `--faktory-listen`: see `protocol::faktory`.
    Faktory,
}

/// How a reply is rendered from the engine's typed answer.
#[derive(Debug, Clone)]
enum Render {
    Ojs,
    Faktory(faktory::Render),
}

impl Render {
    fn reply(self, a: Answered) -> Reply {
        match self {
            Render::Ojs => Reply::from(a),
            Render::Faktory(how) => faktory::render(how, a),
        }
    }
}

/// A line in the listener's dialect.
fn parse_line(dialect: Dialect, line: &[u8]) -> Result<(Command, Render), OjsError> {
    match dialect {
        Dialect::Ojs => parse_command(line).map(|c| (c, Render::Ojs)),
        Dialect::Faktory => faktory::parse(line).map(|(c, r)| (c, Render::Faktory(r))),
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tokens: Tokens::default(),
            max_line: 1024 * 1024 + 64 * 1024,
            max_job_bytes: 1024 * 1024,
            max_pending_reply_bytes: DEFAULT_MAX_PENDING_REPLY_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_handshaking: DEFAULT_MAX_HANDSHAKING,
            hello_timeout: Duration::from_millis(DEFAULT_HELLO_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            auth_failures: AuthLimiter::shared(
                DEFAULT_MAX_AUTH_FAILURES,
                Duration::from_millis(DEFAULT_AUTH_FAILURE_WINDOW_MS),
            ),
            tls: None,
            dialect: Dialect::Ojs,
        }
    }
}

/// Most replies a connection may have outstanding before the reader waits (the byte
/// budget usually binds first for large replies).
const PIPELINE_DEPTH: usize = 256;
/// Longest line before HELLO: a HELLO is a few hundred bytes, and a connection that has
/// not identified itself should not make the server buffer a megabyte.
const HELLO_MAX_LINE: usize = 64 * 1024;
/// Flush at least this often while replies keep coming, so written bytes leave the budget.
const FLUSH_EVERY: usize = 64 * 1024;
/// How long a refused HELLO from a throttled address waits before its error.
const THROTTLED_DELAY: Duration = Duration::from_secs(1);
/// How long a dropped handshaking connection is given to receive its error line.
const NOTICE_TIMEOUT: Duration = Duration::from_millis(200);

enum Pending {
    Ready(Reply),
    Wait(oneshot::Receiver<Answered>, Render),
    /// A FETCH, which may wait up to the fetch timeout for a job.
    Fetch(oneshot::Receiver<Answered>, Render),
    /// From here on the connection is an event stream.
    Subscribe(crate::events::EventFilter, crate::events::Start),
}

/// A reply to come, with the bytes of the budget it reserved.
type Queued = (Pending, usize);

/// What every connection of one listener shares.
struct Shared {
    cfg: Arc<ServerConfig>,
    engine: EngineHandle,
    gate: Arc<Gate>,
    auth: Arc<AuthLimiter>,
    /// Password checks running at once (each is thousands of SHA-256 rounds).
    hashing: Arc<Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// When a refusal was last logged (ms since `epoch`), so a flood logs once in a while.
    last_refusal_log: AtomicU64,
    epoch: std::time::Instant,
}

/// A listener with a deep backlog, so a burst of a thousand connecting workers is not refused.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// Sleep after a failed accept: doubling from 5 ms up to 1 s while accepts keep failing
/// (out of file descriptors, say), so the loop neither spins nor stalls for long.
pub(crate) async fn accept_backoff(backoff: &mut Duration, e: &std::io::Error) {
    *backoff = (*backoff * 2).clamp(Duration::from_millis(5), Duration::from_secs(1));
    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "accept failed");
    tokio::time::sleep(*backoff).await;
}

pub async fn accept_loop(listener: TcpListener, engine: EngineHandle, cfg: Arc<ServerConfig>) {
    let hashers = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
    let shared = Arc::new(Shared {
        gate: Gate::new(cfg.max_connections, cfg.max_handshaking),
        auth: cfg.auth_failures.clone(),
        hashing: Arc::new(Semaphore::new(hashers)),
        tls: cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from),
        last_refusal_log: AtomicU64::new(0),
        epoch: std::time::Instant::now(),
        cfg,
        engine,
    });
    let mut backoff = Duration::ZERO;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = Duration::ZERO;
                let Some(ticket) = shared.gate.admit() else {
                    refuse(stream, &shared);
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    shared.engine.connections.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = start(stream, peer, ticket, &shared).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    shared.engine.connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
            Err(e) => accept_backoff(&mut backoff, &e).await,
        }
    }
}

/// Every slot is held by an established connection: say so (in plain text only; a TLS
/// client just sees the connection close) and close.
fn refuse(stream: TcpStream, shared: &Shared) {
    if shared.tls.is_none() {
        let mut line = bytes::BytesMut::new();
        err(
            ErrorCode::TooManyConnections,
            &format!(
                "the server is at --max-connections ({}); try again later",
                shared.cfg.max_connections
            ),
        )
        .write_to(&mut line);
        // A fresh socket's send buffer is empty: this never blocks, and a short write
        // only costs the client the message.
        let _ = stream.try_write(&line);
    }
    let now = shared.epoch.elapsed().as_millis() as u64;
    let last = shared.last_refusal_log.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 10_000
        && shared
            .last_refusal_log
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            max = shared.cfg.max_connections,
            "refusing connections: --max-connections reached"
        );
    }
}

/// TLS (when on), then the protocol; all of the handshake within `--hello-timeout-ms`.
async fn start(
    tcp: TcpStream,
    peer: SocketAddr,
    mut ticket: Ticket,
    shared: &Shared,
) -> std::io::Result<()> {
    // A deadline past what a clock can hold is no deadline (an absurd flag, not a panic).
    let deadline = later(Instant::now(), shared.cfg.hello_timeout);
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &shared.tls else {
        return connection(tcp, peer, ticket, shared, deadline).await;
    };
    let accepted = tokio::select! {
        r = tokio::time::timeout_at(deadline, acceptor.accept(tcp)) => r,
        _ = ticket.evicted() => return Ok(()),
    };
    match accepted {
        Ok(Ok(tls)) => connection(tls, peer, ticket, shared, deadline).await,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            Ok(())
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            Ok(())
        }
    }
}

fn err(code: ErrorCode, msg: &str) -> Reply {
    Reply::Error(OjsError::new(code, msg))
}

/// The salt and iteration count this connection's greeting offered.
struct Challenge {
    salt: String,
    iterations: u32,
}

/// Greeting and HELLO. `Some((hello, role))` once a HELLO passed (its `+OK` is not sent
/// yet), with the role of the token it answered (`admin` on an open server); `None` when
/// the connection should close (END, or a refused password, already answered).
async fn handshake<S>(
    framed: &mut Framed<S, LineCodec>,
    peer: IpAddr,
    shared: &Shared,
) -> std::io::Result<Option<(Value, Role)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let challenge = (!shared.cfg.tokens.is_open()).then(|| Challenge {
        salt: hex::encode(rand::random::<[u8; 8]>()),
        iterations: 5000 + rand::random::<u32>() % 5000,
    });
    let hi = match &challenge {
        Some(c) => json!({"v": 2, "i": c.iterations, "s": c.salt}),
        None => json!({"v": 2}),
    };
    framed.send(Reply::Simple(format!("HI {hi}"))).await?;

    // Nothing but HELLO (or END) is accepted first.
    loop {
        let Some(frame) = framed.next().await else {
            return Ok(None);
        };
        let line = match frame? {
            Frame::TooLong { limit } => {
                framed
                    .send(err(
                        ErrorCode::LineTooLong,
                        &format!("line longer than {limit} bytes"),
                    ))
                    .await?;
                continue;
            }
            Frame::Line(l) => l,
        };
        match parse_line(shared.cfg.dialect, &line).map(|(c, _)| c) {
            Ok(Command::Hello(v)) => {
                let Some(c) = &challenge else {
                    return Ok(Some((v, Role::Admin)));
                };
                return match check_password(shared, peer, &v, c).await {
                    Ok(role) => Ok(Some((v, role))),
                    Err(refusal) => {
                        framed.send(refusal).await?;
                        Ok(None)
                    }
                };
            }
            Ok(Command::End) => return Ok(None),
            Ok(_) => {
                framed
                    .send(err(ErrorCode::HelloRequired, "send HELLO first"))
                    .await?
            }
            Err(e) => framed.send(Reply::Error(e)).await?,
        }
    }
}

/// The role of the token whose hash HELLO's `pwdhash` is for this challenge; otherwise the
/// error to send before closing. An address over its failure allowance is refused, after a
/// delay, before any hashing; the hashing (one hash per configured token, so at most
/// `auth::MAX_TOKENS`) runs on the blocking pool, a few HELLOs at a time.
async fn check_password(
    shared: &Shared,
    peer: IpAddr,
    hello: &Value,
    c: &Challenge,
) -> Result<Role, Reply> {
    if let Err(wait) = shared.auth.check(peer, std::time::Instant::now()) {
        tracing::debug!(%peer, "HELLO refused: too many failed passwords");
        tokio::time::sleep(THROTTLED_DELAY).await;
        return Err(err(
            ErrorCode::RateLimited,
            &format!(
                "too many wrong passwords from {peer}; try again in {} s",
                wait.as_secs().max(1)
            ),
        ));
    }
    let given = hello
        .get("pwdhash")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    // A SHA-256 in hex is 64 characters: anything else cannot match, no need to hash.
    let role = if given.len() == 64 {
        let tokens = shared.cfg.tokens.clone();
        let (salt, iterations) = (c.salt.clone(), c.iterations);
        match shared.hashing.clone().acquire_owned().await {
            // The permit moves into the blocking task, so it counts hashing that goes on
            // even if this connection is dropped meanwhile.
            Ok(permit) => tokio::task::spawn_blocking(move || {
                let _permit = permit;
                tokens.pwdhash(&given, &salt, iterations)
            })
            .await
            .unwrap_or(None),
            Err(_) => None,
        }
    } else {
        None
    };
    if let Some(role) = role {
        return Ok(role);
    }
    shared.auth.failed(peer, std::time::Instant::now());
    Err(err(ErrorCode::Unauthenticated, "Invalid password"))
}

async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    mut ticket: Ticket,
    shared: &Shared,
    deadline: Instant,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &shared.cfg;
    let engine = &shared.engine;
    let faktory = cfg.dialect == Dialect::Faktory;
    let mut framed = Framed::new(
        stream,
        LineCodec::new(cfg.max_line.min(HELLO_MAX_LINE)).with_bare_errors(faktory),
    );
    // Biased: the handshake is polled first, so even a connection that is evicted at once
    // has its greeting queued before the notice (clients expect `+HI` first).
    let shaken = tokio::select! {
        biased;
        r = tokio::time::timeout_at(deadline, handshake(&mut framed, peer.ip(), shared)) => r,
        _ = ticket.evicted() => {
            let notice = err(
                ErrorCode::TooManyConnections,
                "too many connections waiting for HELLO; this one waited longest",
            );
            let _ = tokio::time::timeout(NOTICE_TIMEOUT, framed.send(notice)).await;
            return Ok(());
        }
    };
    let hello = match shaken {
        Ok(r) => r?,
        Err(_) => {
            tracing::debug!(%peer, "no HELLO before --hello-timeout-ms: closing");
            return Ok(());
        }
    };
    let Some((hello, role)) = hello else {
        return Ok(());
    };
    // Dropped from the handshake pool (for a newer connection, when it was full) between
    // HELLO and here, or before: the slot is gone.
    if !ticket.establish() {
        let notice = err(
            ErrorCode::TooManyConnections,
            "too many connections waiting for HELLO; try again",
        );
        let _ = tokio::time::timeout(NOTICE_TIMEOUT, framed.send(notice)).await;
        return Ok(());
    }
    let wid = hello
        .get("wid")
        .and_then(Value::as_str)
        .filter(|w| !w.is_empty())
        .map(Arc::<str>::from);
    if let Some(w) = &wid {
        engine.register_worker(w.clone(), hello.clone());
    }
    // Without a worker id there are no heartbeats to keep a reservation: the connection
    // itself holds the jobs it fetches, and they go back to their queues when it closes.
    let conn = wid.is_none().then(|| engine.connection_id());
    if let Err(e) = framed.send(Reply::Ok).await {
        if let Some(w) = wid {
            engine.disconnect_worker(w);
        }
        return Err(e);
    }
    let framed = framed.map_codec(|_| LineCodec::new(cfg.max_line).with_bare_errors(faktory));

    let (mut sink, mut lines) = framed.split();
    let (tx, mut rx) = mpsc::channel::<Queued>(PIPELINE_DEPTH);
    let budget = Arc::new(ReplyBudget::new(cfg.max_pending_reply_bytes));
    // Set when the client has gone: a parked FETCH must then stop waiting, so the engine
    // does not claim a job for a connection that can no longer receive it.
    let (gone_tx, gone) = tokio::sync::watch::channel(false);
    let stream_engine = engine.clone();
    let writer_budget = budget.clone();
    let writer = tokio::spawn(async move {
        let budget = writer_budget;
        // However the writer ends, a reader waiting for budget must not wait forever.
        let _close = CloseOnDrop(budget.clone());
        let mut unflushed = 0usize;
        while let Some((p, reserved)) = rx.recv().await {
            let reply = match p {
                Pending::Ready(r) => r,
                Pending::Wait(mut w, render) => render.reply(match take_ready(&mut w) {
                    Some(r) => r,
                    None => {
                        // Send what is already answered before waiting on this one.
                        flush(&mut sink, &budget, &mut unflushed).await?;
                        w.await.unwrap_or_else(|_| unavailable())
                    }
                }),
                Pending::Fetch(mut w, render) => render.reply(match take_ready(&mut w) {
                    Some(r) => r,
                    None => {
                        flush(&mut sink, &budget, &mut unflushed).await?;
                        let mut gone = gone.clone();
                        tokio::select! {
                            r = &mut w => r.unwrap_or_else(|_| unavailable()),
                            _ = gone.wait_for(|g| *g) => {
                                w.close();
                                // Already answered: still try to deliver it. Otherwise the
                                // engine now sees the FETCH abandoned and claims nothing for it.
                                w.try_recv().unwrap_or(Ok(Answer::Nothing))
                            }
                        }
                    }
                }),
                Pending::Subscribe(filter, start) => {
                    flush(&mut sink, &budget, &mut unflushed).await?;
                    return stream_events(&mut sink, &mut rx, stream_engine, filter, start).await;
                }
            };
            let len = wire_len(&reply);
            budget.settle(reserved, len);
            unflushed += len;
            sink.feed(reply).await?;
            if rx.is_empty() || unflushed >= FLUSH_EVERY {
                flush(&mut sink, &budget, &mut unflushed).await?;
            }
        }
        flush(&mut sink, &budget, &mut unflushed).await
    });

    // Workers heartbeat, and an event stream may be quiet for long: neither times out.
    let idle = Some(cfg.idle_timeout).filter(|t| wid.is_none() && !t.is_zero());
    let mut streaming = false;
    // Quiet means nothing read and nothing written for the whole idle time, and nothing
    // in flight (a FETCH waiting for a job, replies the client has not read yet).
    let mut last_read = Instant::now();
    let mut recheck: Option<Instant> = None;
    loop {
        let frame = match idle.filter(|_| !streaming) {
            None => lines.next().await,
            Some(t) => {
                let quiet_since = last_read.max(budget.written_at());
                let at = recheck.unwrap_or_else(|| later(quiet_since, t));
                match tokio::time::timeout_at(at, lines.next()).await {
                    Ok(frame) => frame,
                    Err(_) if budget.held() > 0 => {
                        recheck = Some(later(Instant::now(), t));
                        continue;
                    }
                    Err(_) => {
                        recheck = None;
                        if later(last_read.max(budget.written_at()), t) <= Instant::now() {
                            tracing::debug!(%peer, "idle for --idle-timeout-ms: closing");
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        last_read = Instant::now();
        recheck = None;
        let Some(frame) = frame else {
            break;
        };
        if streaming {
            // An event stream only listens for END (or the socket closing).
            if let Ok(Frame::Line(line)) = &frame {
                if matches!(parse_line(cfg.dialect, line), Ok((Command::End, _))) {
                    break;
                }
            }
            continue;
        }
        let (cmd, render, line_len) = match frame {
            Err(e) => {
                tracing::debug!(error = %e, "read error");
                break;
            }
            Ok(Frame::TooLong { limit }) => (
                Err(OjsError::new(
                    ErrorCode::LineTooLong,
                    format!(
                        "line longer than {limit} bytes (--max-line-bytes); it was discarded: \
                         send a PUSHB in smaller batches, or raise the limit"
                    ),
                )),
                Render::Ojs,
                0,
            ),
            // The one role check of this front end: a command the connection's token may
            // not run is answered FORBIDDEN here and never reaches the engine.
            Ok(Frame::Line(line)) => match parse_line(cfg.dialect, &line) {
                Ok((c, r)) => match authorize(role, &c) {
                    Ok(()) => (Ok(c), r, line.len()),
                    Err(e) => (Err(e), Render::Ojs, line.len()),
                },
                Err(e) => (Err(e), Render::Ojs, line.len()),
            },
        };
        let want = match &cmd {
            Ok(Command::End) => break,
            Ok(Command::Subscribe { .. }) => 0,
            Ok(c) => worst_case(c, line_len, cfg.max_job_bytes),
            Err(e) => wire_len(&Reply::Error(e.clone())),
        };
        // Backpressure: while the replies this client has not read add up to the budget,
        // take no more commands from it.
        let Some(reserved) = budget.reserve(want).await else {
            break; // the writer failed: the peer is gone
        };
        let pending = match cmd {
            Ok(Command::End) => break,
            Ok(Command::Subscribe { filter, start }) => {
                streaming = true;
                Pending::Subscribe(filter, start)
            }
            Ok(Command::Hello(_)) => {
                Pending::Ready(err(ErrorCode::MalformedCommand, "HELLO was already sent"))
            }
            Ok(cmd @ Command::Fetch { .. }) => Pending::Fetch(
                engine.submit_on(conn, wid.clone(), cmd, line_len).await,
                render,
            ),
            Ok(cmd) => Pending::Wait(engine.submit(wid.clone(), cmd, line_len).await, render),
            Err(e) => Pending::Ready(Reply::Error(e)),
        };
        if tx.send((pending, reserved)).await.is_err() {
            break; // the writer failed: the peer is gone
        }
    }
    let _ = gone_tx.send(true);
    drop(tx);
    if let Some(w) = wid {
        engine.disconnect_worker(w);
    }
    let written = writer.await;
    // Only now: every FETCH reply was written or dropped, so the engine has either
    // registered the claim (and puts it back now) or sees the reply undelivered.
    if let Some(c) = conn {
        engine.connection_closed(c);
    }
    match written {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// `at + d`, or far in the future when that is past what the clock can hold.
fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .unwrap_or_else(|| at + Duration::from_secs(86_400 * 365 * 30))
}

struct CloseOnDrop(Arc<ReplyBudget>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Flush the codec's buffer to the socket; the bytes written leave the budget.
async fn flush<S>(
    sink: &mut Sink<S>,
    budget: &ReplyBudget,
    unflushed: &mut usize,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    sink.flush().await?;
    budget.release(std::mem::take(unflushed));
    Ok(())
}

/// The reply if it has already arrived (or can never arrive); `None` while it is pending.
fn take_ready(w: &mut oneshot::Receiver<Answered>) -> Option<Answered> {
    match w.try_recv() {
        Ok(r) => Some(r),
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(oneshot::error::TryRecvError::Closed) => Some(unavailable()),
    }
}

type Sink<S> = futures_util::stream::SplitSink<Framed<S, LineCodec>, Reply>;

/// Send `+OK`, then every matching event as a bulk string, until the client leaves.
async fn stream_events<S>(
    sink: &mut Sink<S>,
    rx: &mut mpsc::Receiver<Queued>,
    engine: EngineHandle,
    filter: crate::events::EventFilter,
    start: crate::events::Start,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut sub = crate::engine::Subscription::new(engine, filter, start);
    // The first read (and the live registration) happens before `+OK`, so a live-only
    // stream covers every event committed after the client sees `+OK`, and a pruned
    // cursor is refused instead of confirmed.
    if let Err(e) = sub.open().await {
        sink.send(Reply::Error(e)).await?;
        return sink.close().await;
    }
    sink.send(Reply::Ok).await?;
    loop {
        tokio::select! {
            ev = sub.next() => match ev {
                Ok(e) => sink.send(Reply::Bulk(e.json())).await?,
                Err(e) => {
                    sink.send(Reply::Error(e)).await?;
                    return sink.close().await;
                }
            },
            // The reader dropped its end: END or the socket closed.
            msg = rx.recv() => if msg.is_none() {
                return Ok(());
            },
        }
    }
}
