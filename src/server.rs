//! The TCP front end: accept, TLS, greeting and HELLO here; then (`session.rs`) a reader
//! that turns lines into engine requests and a writer that sends replies in request order. Requests are pipelined: the
//! reader does not wait for one reply before submitting the next command.
//!
//! What a client can hold is bounded: a slot among `--max-connections` ([`limits::Gate`]),
//! `--hello-timeout-ms` to finish the handshake, `--idle-timeout-ms` of silence for
//! connections that are not workers, and `--max-pending-reply-bytes` of replies it has not
//! read ([`budget`]). Password checks run off the async threads, at most a few at a time,
//! and an address that keeps failing them is refused before any hashing
//! ([`crate::auth::AuthLimiter`]). The token a HELLO answered gives the connection its role, and
//! each command is checked against it in one place ([`crate::protocol::command::authorize`])
//! before it reaches the engine. With `--tls-cert`/`--tls-key` every connection is TLS.

mod budget;
pub mod limits;
mod session;

use crate::auth::AuthLimiter;
use crate::auth::{Role, Tokens};
use crate::cluster::Router;
use crate::engine::intake::Intake;
use crate::engine::Answered;
use crate::error::{ErrorCode, OjsError};
use crate::listen::accept_backoff;
use crate::protocol::{faktory, parse_command, Command, Frame, LineCodec, Reply};
use futures_util::{SinkExt, StreamExt};
use limits::{Gate, Ticket};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
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

/// A line in the listener's dialect, its bodies validated by `intake`.
fn parse_line(
    dialect: Dialect,
    line: &[u8],
    intake: &Intake,
) -> Result<(Command, Render), OjsError> {
    match dialect {
        Dialect::Ojs => parse_command(line, intake).map(|c| (c, Render::Ojs)),
        Dialect::Faktory => faktory::parse(line, intake).map(|(c, r)| (c, Render::Faktory(r))),
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
    engine: Router,
    gate: Arc<Gate>,
    auth: Arc<AuthLimiter>,
    /// Password checks running at once (each is thousands of SHA-256 rounds).
    hashing: Arc<Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// When a refusal was last logged (ms since `epoch`), so a flood logs once in a while.
    last_refusal_log: AtomicU64,
    epoch: std::time::Instant,
}

pub async fn accept_loop(listener: TcpListener, engine: Router, cfg: Arc<ServerConfig>) {
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
                    shared.engine.connections().fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = start(stream, peer, ticket, &shared).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    shared.engine.connections().fetch_sub(1, Ordering::Relaxed);
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
    let deadline = session::later(Instant::now(), shared.cfg.hello_timeout);
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = &shared.tls else {
        return session::connection(tcp, peer, ticket, shared, deadline).await;
    };
    let accepted = tokio::select! {
        r = tokio::time::timeout_at(deadline, acceptor.accept(tcp)) => r,
        _ = ticket.evicted() => return Ok(()),
    };
    match accepted {
        Ok(Ok(tls)) => session::connection(tls, peer, ticket, shared, deadline).await,
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
        match parse_line(shared.cfg.dialect, &line, shared.engine.intake()).map(|(c, _)| c) {
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
