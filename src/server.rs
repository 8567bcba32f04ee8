//! The TCP front end: greeting and HELLO, then a reader that turns lines into engine
//! requests and a writer that sends replies in request order. Requests are pipelined: the
//! reader does not wait for one reply before submitting the next command.

use crate::engine::{unavailable, EngineHandle};
use crate::error::{ErrorCode, OjsError};
use crate::protocol::{parse_command, Command, Frame, LineCodec, Reply};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub password: Option<String>,
    pub max_line: usize,
}

/// Most replies a connection may have outstanding before the reader waits.
const PIPELINE_DEPTH: usize = 256;

enum Pending {
    Ready(Reply),
    Wait(oneshot::Receiver<Reply>),
    /// A FETCH, which may wait up to the fetch timeout for a job.
    Fetch(oneshot::Receiver<Reply>),
    /// From here on the connection is an event stream.
    Subscribe(crate::events::EventFilter, crate::events::Start),
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

pub async fn accept_loop(listener: TcpListener, engine: EngineHandle, cfg: Arc<ServerConfig>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let engine = engine.clone();
                let cfg = cfg.clone();
                tokio::spawn(async move {
                    engine.connections.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = connection(stream, engine.clone(), cfg).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    engine.connections.fetch_sub(1, Ordering::Relaxed);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

fn password_hash(password: &str, salt: &str, iterations: u32) -> String {
    let mut h = Sha256::new();
    h.update(password.as_bytes());
    h.update(salt.as_bytes());
    let mut digest = h.finalize();
    for _ in 1..iterations {
        digest = Sha256::digest(digest);
    }
    hex::encode(digest)
}

/// Compare without an early exit, so timing does not reveal how much of a hash matched.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn err(code: ErrorCode, msg: &str) -> Reply {
    Reply::Error(OjsError::new(code, msg))
}

async fn connection(
    stream: TcpStream,
    engine: EngineHandle,
    cfg: Arc<ServerConfig>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, LineCodec::new(cfg.max_line));

    let auth = cfg.password.as_ref().map(|p| {
        let salt = hex::encode(rand::random::<[u8; 8]>());
        let iterations = 5000 + rand::random::<u32>() % 5000;
        (p.clone(), salt, iterations)
    });
    let hi = match &auth {
        Some((_, salt, i)) => json!({"v": 2, "i": i, "s": salt}),
        None => json!({"v": 2}),
    };
    framed.send(Reply::Simple(format!("HI {hi}"))).await?;

    // Handshake: nothing but HELLO (or END) is accepted first.
    let wid: Option<Arc<str>> = loop {
        let Some(frame) = framed.next().await else {
            return Ok(());
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
        match parse_command(&line) {
            Ok(Command::Hello(v)) => {
                if let Some((password, salt, iterations)) = &auth {
                    let given = v.get("pwdhash").and_then(Value::as_str).unwrap_or("");
                    if !same(given, &password_hash(password, salt, *iterations)) {
                        framed
                            .send(err(ErrorCode::Unauthenticated, "Invalid password"))
                            .await?;
                        return Ok(());
                    }
                }
                let wid = v
                    .get("wid")
                    .and_then(Value::as_str)
                    .filter(|w| !w.is_empty())
                    .map(Arc::<str>::from);
                if let Some(w) = &wid {
                    engine.register_worker(w.clone(), v.clone());
                }
                framed.send(Reply::Ok).await?;
                break wid;
            }
            Ok(Command::End) => return Ok(()),
            Ok(_) => {
                framed
                    .send(err(ErrorCode::HelloRequired, "send HELLO first"))
                    .await?
            }
            Err(e) => framed.send(Reply::Error(e)).await?,
        }
    };

    let (mut sink, mut lines) = framed.split();
    let (tx, mut rx) = mpsc::channel::<Pending>(PIPELINE_DEPTH);
    // Set when the client has gone: a parked FETCH must then stop waiting, so the engine
    // does not claim a job for a connection that can no longer receive it.
    let (gone_tx, gone) = tokio::sync::watch::channel(false);
    let stream_engine = engine.clone();
    let writer = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            let reply = match p {
                Pending::Ready(r) => r,
                Pending::Wait(mut w) => match take_ready(&mut w) {
                    Some(r) => r,
                    None => {
                        // Send what is already answered before waiting on this one.
                        sink.flush().await?;
                        w.await.unwrap_or_else(|_| unavailable())
                    }
                },
                Pending::Fetch(mut w) => match take_ready(&mut w) {
                    Some(r) => r,
                    None => {
                        sink.flush().await?;
                        let mut gone = gone.clone();
                        tokio::select! {
                            r = &mut w => r.unwrap_or_else(|_| unavailable()),
                            _ = gone.wait_for(|g| *g) => {
                                w.close();
                                // Already answered: still try to deliver it. Otherwise the
                                // engine now sees the FETCH abandoned and claims nothing for it.
                                w.try_recv().unwrap_or(Reply::Null)
                            }
                        }
                    }
                },
                Pending::Subscribe(filter, start) => {
                    return stream_events(&mut sink, &mut rx, stream_engine, filter, start).await;
                }
            };
            sink.feed(reply).await?;
            if rx.is_empty() {
                sink.flush().await?;
            }
        }
        sink.flush().await?;
        Ok::<_, std::io::Error>(())
    });

    let mut streaming = false;
    while let Some(frame) = lines.next().await {
        if streaming {
            // An event stream only listens for END (or the socket closing).
            if let Ok(Frame::Line(line)) = &frame {
                if matches!(parse_command(line), Ok(Command::End)) {
                    break;
                }
            }
            continue;
        }
        let pending = match frame {
            Err(e) => {
                tracing::debug!(error = %e, "read error");
                break;
            }
            Ok(Frame::TooLong { limit }) => Pending::Ready(err(
                ErrorCode::LineTooLong,
                &format!("line longer than {limit} bytes; it was discarded"),
            )),
            Ok(Frame::Line(line)) => match parse_command(&line) {
                Ok(Command::End) => break,
                Ok(Command::Subscribe { filter, start }) => {
                    streaming = true;
                    Pending::Subscribe(filter, start)
                }
                Ok(Command::Hello(_)) => {
                    Pending::Ready(err(ErrorCode::MalformedCommand, "HELLO was already sent"))
                }
                Ok(cmd @ Command::Fetch { .. }) => {
                    Pending::Fetch(engine.submit(wid.clone(), cmd, line.len()).await)
                }
                Ok(cmd) => Pending::Wait(engine.submit(wid.clone(), cmd, line.len()).await),
                Err(e) => Pending::Ready(Reply::Error(e)),
            },
        };
        if tx.send(pending).await.is_err() {
            break; // the writer failed: the peer is gone
        }
    }
    let _ = gone_tx.send(true);
    drop(tx);
    if let Some(w) = wid {
        engine.disconnect_worker(w);
    }
    match writer.await {
        Ok(r) => r,
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// The reply if it has already arrived (or can never arrive); `None` while it is pending.
fn take_ready(w: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
    match w.try_recv() {
        Ok(r) => Some(r),
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(oneshot::error::TryRecvError::Closed) => Some(unavailable()),
    }
}

type Sink = futures_util::stream::SplitSink<Framed<TcpStream, LineCodec>, Reply>;

/// Send `+OK`, then every matching event as a bulk string, until the client leaves.
async fn stream_events(
    sink: &mut Sink,
    rx: &mut mpsc::Receiver<Pending>,
    engine: EngineHandle,
    filter: crate::events::EventFilter,
    start: crate::events::Start,
) -> std::io::Result<()> {
    let mut sub = crate::events::Subscription::new(engine, filter, start);
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
                Ok(e) => sink.send(Reply::Bulk(e.json)).await?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hash_matches_faktory_scheme() {
        // sha256("secret" ++ "abc"), then sha256 over the raw digest, iterations-1 times.
        let once = hex::encode(Sha256::digest(b"secretabc"));
        assert_eq!(password_hash("secret", "abc", 1), once);
        let twice = hex::encode(Sha256::digest(Sha256::digest(b"secretabc")));
        assert_eq!(password_hash("secret", "abc", 2), twice);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
