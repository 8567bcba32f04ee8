//! A node's connection to the partition's holder: one TCP (or TLS) connection, multiplexed.
//! Each request gets an id and a slot in `pending`; a reader task hands every answer to
//! its slot in whatever order they come, and a writer task sends the frames. When the
//! connection ends, every request still waiting is answered `BACKEND_UNAVAILABLE` (a
//! state change "may still take effect": it may have been committed before the cut).

use super::proto::{encode, FromOwner, Limits, ToOwner, ITERATIONS, VERSION};
use crate::engine::metrics::MetricsView;
use crate::engine::request::Command;
use crate::engine::{Answered, Page};
use crate::error::{ErrorCode, OjsError};
use crate::events::{EventFilter, Start};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio_util::codec::Framed;

/// How a node connects to holders.
#[derive(Clone)]
pub struct LinkConfig {
    /// This node's id (the holder logs it).
    pub node: String,
    /// The secret this node answers a challenge with: `--password`, or an admin
    /// `--token` (a peer acts for clients of every role).
    pub secret: Option<String>,
    /// With TLS on: how to reach the holder (it presents the cluster's certificate).
    pub tls: Option<tokio_rustls::TlsConnector>,
    pub limits: Limits,
    /// Time to connect, handshake and authenticate.
    pub connect_timeout: Duration,
    /// Told when a connection to a holder ends, so that the holder is looked up again.
    pub lost: Arc<tokio::sync::Notify>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

enum Waiting {
    Answer(oneshot::Sender<Answered>),
    Events(oneshot::Sender<Result<Page, OjsError>>),
    Metrics(oneshot::Sender<Option<MetricsView>>),
}

struct Slots {
    open: bool,
    waiting: HashMap<u64, Waiting>,
}

/// One connection to a holder.
pub struct Link {
    /// The holder's node id, as its challenge said.
    pub owner: String,
    /// This node's id.
    node: String,
    pub addr: String,
    tx: mpsc::UnboundedSender<(Bytes, Option<OwnedSemaphorePermit>)>,
    slots: Mutex<Slots>,
    next: AtomicU64,
    /// Bytes of requests not yet written (KiB permits), so a stalled holder holds back
    /// the front ends instead of filling memory here.
    unsent: Arc<Semaphore>,
    limits: Limits,
    lost: Arc<tokio::sync::Notify>,
    /// The reader and writer tasks, ended by [`Link::shutdown`].
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

fn lock(m: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The error a request gets when the connection to the holder is lost with it in flight.
pub fn lost(owner: &str) -> OjsError {
    OjsError::new(
        ErrorCode::BackendUnavailable,
        format!(
            "the connection to node {owner}, which holds the partition, was lost; the \
             command may still take effect: retry it"
        ),
    )
}

impl Link {
    /// Connect to `addr`, pass the handshake, and start the reader and writer tasks.
    pub async fn connect(addr: &str, cfg: &LinkConfig) -> Result<Arc<Link>, String> {
        tokio::time::timeout(cfg.connect_timeout, Self::open(addr, cfg))
            .await
            .map_err(|_| format!("node {addr} did not complete the peer handshake in time"))?
    }

    async fn open(addr: &str, cfg: &LinkConfig) -> Result<Arc<Link>, String> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &cfg.tls {
            Some(connector) => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr, |(h, _)| h)
                    .trim_matches(|c| c == '[' || c == ']');
                let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("peer address {addr}: {e}"))?;
                Box::new(
                    connector
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS with {addr}: {e}"))?,
                )
            }
            None => Box::new(tcp),
        };
        let mut framed = Framed::new(io, cfg.limits.node_codec());
        let first = framed
            .next()
            .await
            .ok_or_else(|| format!("{addr} closed the connection"))?
            .map_err(|e| format!("{addr}: {e}"))?;
        let (owner, salt, auth) = match serde_json::from_slice(&first) {
            Ok(FromOwner::Challenge {
                version,
                node,
                salt,
                auth,
            }) if version == VERSION => (node, salt, auth),
            Ok(FromOwner::Challenge { version, .. }) => {
                return Err(format!(
                    "{addr} speaks peer protocol {version}, this node {VERSION}"
                ))
            }
            _ => return Err(format!("{addr} is not an ojsd peer listener")),
        };
        let pwdhash = match (auth, &cfg.secret) {
            (false, _) => None,
            (true, None) => {
                return Err(format!(
                    "node {owner} ({addr}) asks for a password and this node has none \
                     (--password or an admin --token)"
                ))
            }
            (true, Some(secret)) => {
                let secret = secret.clone();
                Some(
                    tokio::task::spawn_blocking(move || {
                        crate::auth::password_hash(&secret, &salt, ITERATIONS)
                    })
                    .await
                    .map_err(|e| e.to_string())?,
                )
            }
        };
        let hello = encode(&ToOwner::Auth {
            version: VERSION,
            node: cfg.node.clone(),
            pwdhash,
        })?;
        framed
            .send(hello)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let reply = framed
            .next()
            .await
            .ok_or_else(|| format!("node {owner} ({addr}) closed the connection"))?
            .map_err(|e| format!("{addr}: {e}"))?;
        match serde_json::from_slice(&reply) {
            Ok(FromOwner::Welcome) => {}
            Ok(FromOwner::Refused(e)) => {
                return Err(format!(
                    "node {owner} ({addr}) refused this node: {}",
                    e.message
                ))
            }
            _ => {
                return Err(format!(
                    "node {owner} ({addr}) answered the handshake oddly"
                ))
            }
        }
        let (sink, stream) = framed.split();
        let (tx, rx) = mpsc::unbounded_channel();
        let permits = (cfg.limits.per_peer / 1024).clamp(1, Semaphore::MAX_PERMITS) as u32;
        let link = Arc::new(Link {
            owner,
            node: cfg.node.clone(),
            addr: addr.to_string(),
            tx,
            slots: Mutex::new(Slots {
                open: true,
                waiting: HashMap::new(),
            }),
            next: AtomicU64::new(1),
            unsent: Arc::new(Semaphore::new(permits as usize)),
            limits: cfg.limits,
            lost: cfg.lost.clone(),
            tasks: Mutex::new(Vec::new()),
        });
        let w = tokio::spawn(write_frames(sink, rx)).abort_handle();
        let r = tokio::spawn(read_answers(link.clone(), stream)).abort_handle();
        *link.tasks.lock().unwrap_or_else(|p| p.into_inner()) = vec![w, r];
        Ok(link)
    }

    /// False once the connection has ended.
    pub fn is_open(&self) -> bool {
        lock(&self.slots).open && !self.tx.is_closed()
    }

    /// Send a message that needs no answer (a worker's registration, a closed connection).
    pub fn tell(&self, msg: &ToOwner) {
        match encode(msg) {
            Ok(frame) => {
                let _ = self.tx.send((frame, None));
            }
            Err(e) => tracing::warn!(error = %e, "peer message dropped"),
        }
    }

    /// Take a request id and its slot, then send `msg` made with that id. Answers `Err`
    /// (to be sent to the waiting client) if it cannot go.
    async fn request(
        &self,
        waiting: impl FnOnce(u64) -> (Waiting, ToOwner),
    ) -> Result<(), (Waiting, OjsError)> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (slot, msg) = waiting(id);
        let frame = match encode(&msg) {
            Ok(f) => f,
            Err(e) => return Err((slot, OjsError::new(ErrorCode::BackendError, e))),
        };
        if frame.len() > self.limits.request_frame {
            return Err((
                slot,
                OjsError::new(
                    ErrorCode::InvalidPayload,
                    format!(
                        "the request is {} bytes as a peer message, over the {} a peer \
                         connection takes",
                        frame.len(),
                        self.limits.request_frame
                    ),
                ),
            ));
        }
        let weight = (frame.len() / 1024 + 1)
            .min(self.limits.per_peer / 1024)
            .max(1) as u32;
        let permit = self.unsent.clone().acquire_many_owned(weight).await.ok();
        {
            let mut slots = lock(&self.slots);
            if !slots.open {
                drop(slots);
                return Err((slot, lost(&self.owner)));
            }
            slots.waiting.insert(id, slot);
        }
        if self.tx.send((frame, permit)).is_err() {
            if let Some(slot) = lock(&self.slots).waiting.remove(&id) {
                return Err((slot, lost(&self.owner)));
            }
        }
        Ok(())
    }

    /// Forward a command; the receiver resolves with the holder's answer.
    #[allow(clippy::too_many_arguments)]
    pub async fn submit(
        &self,
        part: u32,
        conn: Option<u64>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    ) -> (u64, oneshot::Receiver<Answered>) {
        let (reply, rx) = oneshot::channel();
        let mut asked = 0;
        let sent = self
            .request(|id| {
                asked = id;
                (
                    Waiting::Answer(reply),
                    ToOwner::Submit {
                        id,
                        part,
                        conn,
                        wid: wid.map(|w| w.to_string()),
                        cmd,
                        bytes,
                        viewed,
                    },
                )
            })
            .await;
        if let Err((Waiting::Answer(reply), e)) = sent {
            let _ = reply.send(Err(e));
        }
        (asked, rx)
    }

    /// Stop waiting for request `id` (see [`ToOwner::Cancel`]); its answer is dropped.
    pub fn cancel(&self, id: u64) {
        if lock(&self.slots).waiting.remove(&id).is_some() {
            self.tell(&ToOwner::Cancel { id });
        }
    }

    /// One page of the holder's event log.
    #[allow(clippy::too_many_arguments)]
    pub async fn events(
        &self,
        part: u32,
        filter: EventFilter,
        start: Start,
        limit: usize,
        bytes: usize,
        wait_ms: u64,
    ) -> Result<Page, OjsError> {
        let (reply, rx) = oneshot::channel();
        let sent = self
            .request(|id| {
                (
                    Waiting::Events(reply),
                    ToOwner::Events {
                        id,
                        part,
                        filter,
                        start,
                        limit,
                        bytes,
                        wait_ms,
                    },
                )
            })
            .await;
        if let Err((_, e)) = sent {
            return Err(e);
        }
        rx.await.unwrap_or_else(|_| Err(lost(&self.owner)))
    }

    /// The holder's metrics (none while it runs no engine).
    pub async fn metrics(&self, part: u32) -> Result<Option<MetricsView>, OjsError> {
        let (reply, rx) = oneshot::channel();
        let sent = self
            .request(|id| (Waiting::Metrics(reply), ToOwner::Metrics { id, part }))
            .await;
        if let Err((_, e)) = sent {
            return Err(e);
        }
        rx.await.map_err(|_| lost(&self.owner))
    }

    /// Drop the connection (the holder moved, or this node took the partition): every
    /// waiting request is answered as lost.
    pub fn shutdown(&self) {
        for t in std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner())) {
            t.abort();
        }
        self.close();
    }

    /// The connection ended: nothing more can be sent, and every waiting request is
    /// answered as lost.
    fn close(&self) {
        let waiting = {
            let mut slots = lock(&self.slots);
            slots.open = false;
            std::mem::take(&mut slots.waiting)
        };
        self.lost.notify_one();
        for (_, w) in waiting {
            match w {
                Waiting::Answer(tx) => {
                    let _ = tx.send(Err(lost(&self.owner)));
                }
                Waiting::Events(tx) => {
                    let _ = tx.send(Err(lost(&self.owner)));
                }
                // Dropped: `metrics` answers the lost connection.
                Waiting::Metrics(_) => {}
            }
        }
    }
}

async fn write_frames(
    mut sink: futures_util::stream::SplitSink<
        Framed<Box<dyn Io>, tokio_util::codec::LengthDelimitedCodec>,
        Bytes,
    >,
    mut rx: mpsc::UnboundedReceiver<(Bytes, Option<OwnedSemaphorePermit>)>,
) {
    if let Err(e) = super::proto::write_frames(&mut sink, &mut rx).await {
        tracing::debug!(error = %e, "peer connection: write failed");
    }
    let _ = sink.close().await;
}

async fn read_answers(
    link: Arc<Link>,
    mut stream: futures_util::stream::SplitStream<
        Framed<Box<dyn Io>, tokio_util::codec::LengthDelimitedCodec>,
    >,
) {
    while let Some(frame) = stream.next().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(owner = %link.owner, error = %e, "peer connection: read failed");
                break;
            }
        };
        let msg = match serde_json::from_slice::<FromOwner>(&frame) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(owner = %link.owner, error = %e,
                    "peer connection: an answer could not be decoded; closing it");
                break;
            }
        };
        match msg {
            FromOwner::Answer { id, mut answered } => {
                // CLUSTER's `local` is the node the client asked, not the holder.
                if let Ok(crate::engine::Answer::Cluster(c)) = &mut answered {
                    for n in c.nodes.iter_mut() {
                        n.local = n.id == link.node;
                    }
                }
                if let Some(Waiting::Answer(tx)) = lock(&link.slots).waiting.remove(&id) {
                    let _ = tx.send(answered);
                }
            }
            FromOwner::Events { id, page } => {
                if let Some(Waiting::Events(tx)) = lock(&link.slots).waiting.remove(&id) {
                    let _ = tx.send(page.map(Page::from));
                }
            }
            FromOwner::Metrics { id, view } => {
                if let Some(Waiting::Metrics(tx)) = lock(&link.slots).waiting.remove(&id) {
                    let _ = tx.send(view);
                }
            }
            other => {
                tracing::warn!(owner = %link.owner, "peer connection: unexpected {other:?}");
                break;
            }
        }
    }
    link.close();
    tracing::info!(owner = %link.owner, addr = %link.addr, "peer connection to the holder closed");
}
