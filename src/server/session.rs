//! One TCP connection after accept, in three parts:
//! - [`establish`]: the greeting and HELLO, within `--hello-timeout-ms` and the handshake
//!   pool; it settles who is on the other end (role, worker id);
//! - [`read_commands`]: lines → role check → typed request → engine; each request's reply
//!   (or the channel it will come on) is queued for the writer in request order;
//! - [`write_replies`]: waits for each reply in order, renders it in the listener's
//!   dialect and writes it, flushing when nothing more is ready.
//!
//! Between the reader and the writer, [`ReplyBudget`] bounds the bytes of replies the
//! client has not read: past it the reader stops taking commands.

use super::budget::{wire_len, worst_case, ReplyBudget};
use super::limits::Ticket;
use super::{
    err, handshake, parse_line, Pending, Queued, Render, Shared, FLUSH_EVERY, HELLO_MAX_LINE,
    NOTICE_TIMEOUT, PIPELINE_DEPTH,
};
use crate::auth::Role;
use crate::cluster::Router;
use crate::engine::{unavailable, Answer, Answered, ConnId};
use crate::error::{ErrorCode, OjsError};
use crate::protocol::command::authorize;
use crate::protocol::{Command, Frame, LineCodec, Reply};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::Framed;

type Sink<S> = SplitSink<Framed<S, LineCodec>, Reply>;
type Lines<S> = SplitStream<Framed<S, LineCodec>>;

/// What a completed handshake settled.
struct Session<S> {
    framed: Framed<S, LineCodec>,
    role: Role,
    /// The HELLO's worker id: the connection is a worker whose heartbeats keep its jobs.
    wid: Option<Arc<str>>,
    /// Without a worker id, the connection itself holds the jobs it fetches.
    conn: Option<ConnId>,
    /// The connection's slot among `--max-connections`: held until it closes.
    ticket: Ticket,
}

pub(super) async fn connection<S>(
    stream: S,
    peer: SocketAddr,
    ticket: Ticket,
    shared: &Shared,
    deadline: Instant,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(session) = establish(stream, peer, ticket, shared, deadline).await? else {
        return Ok(());
    };
    let cfg = &shared.cfg;
    let engine = &shared.engine;
    let faktory = cfg.dialect == super::Dialect::Faktory;
    let Session {
        framed,
        role,
        wid,
        conn,
        ticket: _slot,
    } = session;
    let framed = framed.map_codec(|_| LineCodec::new(cfg.max_line).with_bare_errors(faktory));
    let (sink, lines) = framed.split();
    let (tx, rx) = mpsc::channel::<Queued>(PIPELINE_DEPTH);
    let budget = Arc::new(ReplyBudget::new(cfg.max_pending_reply_bytes));
    // Set when the client has gone: a parked FETCH must then stop waiting, so the engine
    // does not claim a job for a connection that can no longer receive it.
    let (gone_tx, gone) = watch::channel(false);
    let writer = tokio::spawn(write_replies(
        sink,
        rx,
        budget.clone(),
        gone,
        engine.clone(),
    ));
    let who = Who {
        peer,
        role,
        wid: wid.clone(),
        conn,
    };
    read_commands(lines, &tx, &budget, shared, &who).await;
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

/// Greeting and HELLO within the deadline, holding a slot of the handshake pool; `None`
/// when the connection is to close (timeout, eviction, END, a refused password: each
/// already answered where the client should hear of it). On success the worker is
/// registered and `+OK` sent.
async fn establish<S>(
    stream: S,
    peer: SocketAddr,
    mut ticket: Ticket,
    shared: &Shared,
    deadline: Instant,
) -> std::io::Result<Option<Session<S>>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &shared.cfg;
    let engine = &shared.engine;
    let faktory = cfg.dialect == super::Dialect::Faktory;
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
            return Ok(None);
        }
    };
    let hello = match shaken {
        Ok(r) => r?,
        Err(_) => {
            tracing::debug!(%peer, "no HELLO before --hello-timeout-ms: closing");
            return Ok(None);
        }
    };
    let Some((hello, role)) = hello else {
        return Ok(None);
    };
    // Dropped from the handshake pool (for a newer connection, when it was full) between
    // HELLO and here, or before: the slot is gone.
    if !ticket.establish() {
        let notice = err(
            ErrorCode::TooManyConnections,
            "too many connections waiting for HELLO; try again",
        );
        let _ = tokio::time::timeout(NOTICE_TIMEOUT, framed.send(notice)).await;
        return Ok(None);
    }
    let wid = hello
        .get("wid")
        .and_then(Value::as_str)
        .filter(|w| !w.is_empty())
        .map(Arc::<str>::from);
    if let Some(w) = &wid {
        engine.register_worker(w.clone(), hello.clone(), faktory);
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
    Ok(Some(Session {
        framed,
        role,
        wid,
        conn,
        ticket,
    }))
}

/// Who a connection is, for the reader.
struct Who {
    peer: SocketAddr,
    role: Role,
    wid: Option<Arc<str>>,
    conn: Option<ConnId>,
}

/// Read lines until END, the socket closes, the idle timeout passes or the writer fails;
/// queue each command's pending reply for the writer, in order.
async fn read_commands<S>(
    mut lines: Lines<S>,
    tx: &mpsc::Sender<Queued>,
    budget: &ReplyBudget,
    shared: &Shared,
    who: &Who,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let cfg = &shared.cfg;
    let engine = &shared.engine;
    let intake = engine.intake();
    // Workers heartbeat, and an event stream may be quiet for long: neither times out.
    let idle = Some(cfg.idle_timeout).filter(|t| who.wid.is_none() && !t.is_zero());
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
                            tracing::debug!(peer = %who.peer, "idle for --idle-timeout-ms: closing");
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        last_read = Instant::now();
        recheck = None;
        let Some(frame) = frame else {
            return;
        };
        if streaming {
            // An event stream only listens for END (or the socket closing).
            if let Ok(Frame::Line(line)) = &frame {
                if matches!(parse_line(cfg.dialect, line, intake), Ok((Command::End, _))) {
                    return;
                }
            }
            continue;
        }
        let (cmd, render, line_len) = match frame {
            Err(e) => {
                tracing::debug!(error = %e, "read error");
                return;
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
            Ok(Frame::Line(line)) => match parse_line(cfg.dialect, &line, intake) {
                Ok((c, r)) => match authorize(who.role, &c) {
                    Ok(()) => (Ok(c), r, line.len()),
                    Err(e) => (Err(e), Render::Ojs, line.len()),
                },
                Err(e) => (Err(e), Render::Ojs, line.len()),
            },
        };
        let want = match &cmd {
            Ok(Command::End) => return,
            Ok(Command::Subscribe { .. }) => 0,
            Ok(c) => worst_case(c, line_len, cfg.max_job_bytes),
            Err(e) => wire_len(&Reply::Error(e.clone())),
        };
        // Backpressure: while the replies this client has not read add up to the budget,
        // take no more commands from it.
        let Some(reserved) = budget.reserve(want).await else {
            return; // the writer failed: the peer is gone
        };
        let pending = match cmd {
            Ok(Command::End) => return,
            Ok(Command::Subscribe { filter, start }) => {
                streaming = true;
                Pending::Subscribe(filter, start)
            }
            Ok(Command::Hello(_)) => {
                Pending::Ready(err(ErrorCode::MalformedCommand, "HELLO was already sent"))
            }
            Ok(cmd @ Command::Fetch { .. }) => Pending::Fetch(
                engine
                    .submit_on(who.conn, who.wid.clone(), cmd, line_len)
                    .await,
                render,
            ),
            Ok(cmd) => Pending::Wait(engine.submit(who.wid.clone(), cmd, line_len).await, render),
            Err(e) => Pending::Ready(Reply::Error(e)),
        };
        if tx.send((pending, reserved)).await.is_err() {
            return; // the writer failed: the peer is gone
        }
    }
}

/// Write each queued reply in order, waiting for those not answered yet; flush when
/// nothing more is ready or a good amount is buffered. A SUBSCRIBE turns the rest of the
/// connection into an event stream.
async fn write_replies<S>(
    mut sink: Sink<S>,
    mut rx: mpsc::Receiver<Queued>,
    budget: Arc<ReplyBudget>,
    gone: watch::Receiver<bool>,
    engine: Router,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
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
                return stream_events(&mut sink, &mut rx, engine, filter, start).await;
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
}

/// `at + d`, or far in the future when that is past what the clock can hold.
pub(super) fn later(at: Instant, d: Duration) -> Instant {
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

/// Send `+OK`, then every matching event as a bulk string, until the client leaves.
async fn stream_events<S>(
    sink: &mut Sink<S>,
    rx: &mut mpsc::Receiver<Queued>,
    engine: Router,
    filter: crate::events::EventFilter,
    start: crate::events::Start,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut sub = engine.subscription(filter, start);
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
