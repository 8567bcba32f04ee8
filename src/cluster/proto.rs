//! The peer protocol's messages and bounds. A connection opens with the holder's
//! [`FromOwner::Challenge`] and the connecting node's [`ToOwner::Auth`] (the server's
//! password, hashed as a HELLO's `pwdhash` is); then the connecting node sends requests and
//! the holder answers each by its id, in whatever order they finish. Every message is one
//! serde_json value in a frame of `tokio_util`'s `LengthDelimitedCodec` (a 4-byte length,
//! then the bytes), bounded by [`Limits`].

use crate::engine::request::Command;
use crate::engine::{Answered, Page};
use crate::error::OjsError;
use crate::events::{Event, EventFilter, Start};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// The protocol's version, checked in the handshake.
/// 2: requests name their partition; `Cancel`.
pub const VERSION: u32 = 2;

/// SHA-256 rounds of the handshake's password hash.
pub const ITERATIONS: u32 = 5000;

/// What a node sends to the holder.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToOwner {
    /// The answer to the challenge: who is asking, and the password's hash for the salt
    /// (none when the holder said it needs none).
    Auth {
        version: u32,
        node: String,
        pwdhash: Option<String>,
    },
    /// A command of a client of the sending node: `conn` is the sender's id for a client
    /// connection without a worker id, `bytes` its size on the wire (the engine's queue
    /// weight), `viewed` asks for the job as a state change left it (`call_viewed`).
    Submit {
        id: u64,
        /// The partition whose engine runs it.
        part: u32,
        conn: Option<u64>,
        wid: Option<String>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    },
    /// A client HELLO with a worker id.
    Register {
        wid: String,
        info: serde_json::Value,
        reserve: bool,
    },
    /// That worker's connection closed.
    Disconnect { wid: String },
    /// The sender's client connection `conn` closed.
    Closed { conn: u64 },
    /// The sender no longer waits for request `id` (a FETCH over several partitions got
    /// its job elsewhere): a job it claims after all goes back to its queue, and it is
    /// answered with nothing.
    Cancel { id: u64 },
    /// The holder's metrics (`GET /metrics` on the sending node).
    Metrics { id: u64, part: u32 },
    /// One page of the event log: at most `limit` events and `bytes` bytes of them.
    Events {
        id: u64,
        part: u32,
        filter: EventFilter,
        start: Start,
        limit: usize,
        bytes: usize,
        /// When nothing matches after `start` yet: wait up to this long for an event
        /// before answering the empty page (a subscriber's long poll; 0 answers at once).
        #[serde(default)]
        wait_ms: u64,
    },
}

/// What the holder sends back.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromOwner {
    /// The first frame: the holder's node id, a salt for the password hash, and whether
    /// one is needed at all (no `--password`/`--token`: none).
    Challenge {
        version: u32,
        node: String,
        salt: String,
        auth: bool,
    },
    Welcome,
    /// The handshake failed (wrong password, too many failures, another version); the
    /// connection closes.
    Refused(OjsError),
    /// The holder's metrics; none while it runs no engine.
    Metrics {
        id: u64,
        view: Option<crate::engine::metrics::MetricsView>,
    },
    Answer {
        id: u64,
        answered: Answered,
    },
    Events {
        id: u64,
        page: Result<WirePage, OjsError>,
    },
}

/// An events page as it travels (the engine's [`Page`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct WirePage {
    pub events: Vec<Event>,
    pub count: usize,
    pub last: u64,
    pub has_more: bool,
    /// `Page::from` (0 from a node that does not send it: nothing is assumed skipped).
    #[serde(default)]
    pub from: u64,
}

impl From<Page> for WirePage {
    fn from(p: Page) -> WirePage {
        WirePage {
            events: p.events,
            count: p.count,
            last: p.last,
            has_more: p.has_more,
            from: p.from,
        }
    }
}

impl From<WirePage> for Page {
    fn from(p: WirePage) -> Page {
        Page {
            position: None,
            events: p.events,
            count: p.count,
            last: p.last,
            from: p.from,
            has_more: p.has_more,
        }
    }
}

/// The sizes a peer connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest frame a node sends to the holder: a request carries at most one client
    /// line or HTTP body, re-encoded as JSON (twice its size covers the escapes), plus
    /// room for the rest of the message.
    pub request_frame: usize,
    /// Longest frame of an answer (a page of jobs may be large); the holder answers an
    /// error instead of a larger one.
    pub reply_frame: usize,
    /// Bytes of requests one peer connection may have in flight at the holder (the
    /// holder stops reading it past them) ...
    pub per_peer: usize,
    /// ... and all peer connections together.
    pub total: usize,
    /// Client connections and workers one peer connection may have open at the holder.
    pub max_conns: usize,
}

impl Limits {
    /// The bounds for a node whose longest client line is `max_line` and longest HTTP
    /// body `max_body`.
    pub fn new(max_line: usize, max_body: usize) -> Limits {
        let request_frame = max_line
            .max(max_body)
            .saturating_mul(2)
            .saturating_add(64 * 1024)
            .min(u32::MAX as usize);
        let reply_frame = request_frame.max(64 << 20).min(u32::MAX as usize);
        let per_peer = request_frame.saturating_mul(4).max(64 << 20);
        Limits {
            request_frame,
            reply_frame,
            per_peer,
            total: per_peer.saturating_mul(4),
            max_conns: 1 << 20,
        }
    }

    /// The codec of the holder's side (it reads requests).
    pub fn owner_codec(&self) -> LengthDelimitedCodec {
        LengthDelimitedCodec::builder()
            .max_frame_length(self.request_frame)
            .new_codec()
    }

    /// The codec of the forwarding side (it reads answers).
    pub fn node_codec(&self) -> LengthDelimitedCodec {
        LengthDelimitedCodec::builder()
            .max_frame_length(self.reply_frame)
            .new_codec()
    }
}

/// One message as a frame's bytes.
pub fn encode<T: Serialize>(msg: &T) -> Result<Bytes, String> {
    serde_json::to_vec(msg)
        .map(Bytes::from)
        .map_err(|e| format!("cannot encode a peer message: {e}"))
}

/// Frames written to the socket at most between two flushes, in bytes.
const FLUSH_BYTES: usize = 64 * 1024;

/// Write each frame `rx` gives to `sink`, with one flush (one write to the socket) for all
/// that queued up meanwhile, as a client connection's replies are (`server/session.rs`):
/// under load a link carries many commands at once, and a write per frame was a third of a
/// forwarding node's runtime samples (bench/RESULTS.md, round 16). `P` is what a frame
/// holds until it is written (its permits of the peer budget). Ends when `rx` does, or with
/// the first write error.
pub async fn write_frames<S, P>(
    sink: &mut S,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(Bytes, P)>,
) -> std::io::Result<()>
where
    S: futures_util::Sink<Bytes, Error = std::io::Error> + Unpin,
{
    use futures_util::SinkExt;
    let mut held = Vec::new();
    let mut unflushed = 0usize;
    while let Some((frame, hold)) = rx.recv().await {
        unflushed += frame.len();
        sink.feed(frame).await?;
        held.push(hold);
        if rx.is_empty() || unflushed >= FLUSH_BYTES {
            sink.flush().await?;
            held.clear();
            unflushed = 0;
        }
    }
    sink.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Writes {
        frames: Vec<Bytes>,
        buffered: usize,
        flushes: usize,
    }

    impl futures_util::Sink<Bytes> for Writes {
        type Error = std::io::Error;
        fn poll_ready(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn start_send(mut self: std::pin::Pin<&mut Self>, b: Bytes) -> std::io::Result<()> {
            self.frames.push(b);
            self.buffered += 1;
            Ok(())
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.buffered > 0 {
                self.flushes += 1;
                self.buffered = 0;
            }
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    #[tokio::test]
    async fn frames_queued_together_go_out_in_one_write_in_order() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..5u8 {
            tx.send((Bytes::from(vec![i]), ())).unwrap();
        }
        drop(tx);
        let mut w = Writes::default();
        write_frames(&mut w, &mut rx).await.unwrap();
        assert_eq!(
            w.frames,
            (0..5u8).map(|i| Bytes::from(vec![i])).collect::<Vec<_>>()
        );
        assert_eq!(w.flushes, 1);

        // Past FLUSH_BYTES a burst is written in parts; a lone frame at once.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            tx.send((Bytes::from(vec![0; FLUSH_BYTES / 2]), ()))
                .unwrap();
        }
        drop(tx);
        let mut w = Writes::default();
        write_frames(&mut w, &mut rx).await.unwrap();
        assert_eq!((w.frames.len(), w.flushes), (4, 2));
    }

    #[test]
    fn a_forwarded_push_fits_the_frame_of_its_line() {
        // A job of the largest size whose args are all characters JSON escapes.
        let limits = Limits::new(1024 * 1024 + 64 * 1024, 4 << 20);
        assert!(limits.request_frame > 8 << 20);
        assert!(limits.reply_frame >= limits.request_frame);
        let intake = crate::engine::intake::Intake::default();
        let args = "\"".repeat(300_000);
        let body = serde_json::json!({"type": "t", "args": [args]});
        let line_len = body.to_string().len();
        let job = intake.job(body, line_len).unwrap();
        let msg = ToOwner::Submit {
            id: 1,
            part: 0,
            conn: Some(2),
            wid: None,
            cmd: Command::Push {
                job: Box::new(job),
                len: line_len,
                resend: false,
            },
            bytes: line_len,
            viewed: false,
        };
        let frame = encode(&msg).unwrap();
        assert!(frame.len() < 2 * line_len + 64 * 1024, "{}", frame.len());
        let back: ToOwner = serde_json::from_slice(&frame).unwrap();
        assert!(matches!(back, ToOwner::Submit { id: 1, .. }));
    }
}
