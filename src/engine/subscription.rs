//! A subscriber's view of the event stream, shared by the TCP `SUBSCRIBE`, SSE and
//! WebSocket front ends (the engine's reading API, above the event model it reads): replay from the log, then live events, and back to the log
//! whenever the live feed is cut because the reader fell behind or its buffer was emptied
//! while it stalled (`held.rs`). Events are delivered in cursor order with no gap and no
//! repeat, and what waits for the reader counts against the subscribers' memory bounds.

use super::{EngineHandle, Page};
use crate::error::OjsError;
use crate::events::held::{Buffer, Pool, Reservation, Taken};
use crate::events::{Event, EventFilter, Start};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Where a subscription reads its pages: this node's engine, or (`cluster::Router`) the
/// engine of the node that holds the partition.
pub trait PageSource: Send + Sync + 'static {
    /// The subscribers' buffers and their bounds.
    fn pool(&self) -> &Arc<Pool>;
    /// Append one page from `start` (at most `limit` events, within `reservation`) to
    /// `buf`; join `buf` to the live feed if the source has one and the page reached the
    /// head. The answer's `events` is empty; `count` says how many were appended. A source
    /// without a live feed may, with `wait`, hold an empty page until an event comes (a
    /// long poll); the first read of a subscription never waits.
    fn read_page(
        &self,
        filter: EventFilter,
        start: Start,
        limit: usize,
        buf: Arc<Buffer>,
        reservation: Reservation,
        wait: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Page, OjsError>> + Send + '_>>;
}

impl PageSource for EngineHandle {
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
        _wait: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Page, OjsError>> + Send + '_>> {
        Box::pin(self.read_into(filter, start, limit, buf, reservation))
    }
}

/// Most events asked for in one page from the log (pages are also bounded in bytes).
const PAGE: usize = 1000;

/// One log's reader: replay, then the live feed.
pub struct Reader {
    engine: Arc<dyn PageSource>,
    filter: EventFilter,
    /// Where the next read of the log starts: the request's start until something has
    /// been read, then after `done`.
    start: Start,
    buf: Arc<Buffer>,
    /// Everything up to this cursor that matches has been handed out.
    done: Option<u64>,
    /// The last cursor the latest page covered; the events up to it are all handed out
    /// once the buffer is drained.
    page_end: Option<u64>,
    /// Cursor of the last event handed out.
    last: Option<u64>,
    opened: bool,
}

/// A subscription: one log's [`Reader`], or a stream merging several (cluster mode: each
/// partition's log, read by a task of the router's that sends its events here in order).
pub enum Subscription {
    Log(Box<Reader>),
    Merged(Merged),
}

/// Events of several logs, each in its own order, interleaved as they come. Where the
/// stream stands is each log's last cursor handed out; every event carries it as its
/// `position` (a token a reader resumes from with `Start::Each`).
pub struct Merged {
    rx: tokio::sync::mpsc::Receiver<Result<(usize, Event), OjsError>>,
    /// One answer per log once its first read is done (or failed), with the cursor up to
    /// which that read covered the log.
    opened: tokio::sync::mpsc::Receiver<Result<(usize, Option<u64>), OjsError>>,
    to_open: usize,
    positions: Vec<u64>,
}

impl Subscription {
    pub fn new(engine: Arc<dyn PageSource>, filter: EventFilter, start: Start) -> Subscription {
        Subscription::Log(Box::new(Reader::new(engine, filter, start)))
    }

    /// A merged stream of `positions.len()` logs, each starting after its entry of
    /// `positions`: `rx` brings each log's events (with the log's index), `opened` one
    /// answer per log once its first read is done.
    pub fn merged(
        rx: tokio::sync::mpsc::Receiver<Result<(usize, Event), OjsError>>,
        opened: tokio::sync::mpsc::Receiver<Result<(usize, Option<u64>), OjsError>>,
        positions: Vec<u64>,
    ) -> Subscription {
        Subscription::Merged(Merged {
            rx,
            opened,
            to_open: positions.len(),
            positions,
        })
    }

    /// The next event. An error (a start cursor was pruned, the engine stopped) ends the
    /// subscription.
    pub async fn next(&mut self) -> Result<Event, OjsError> {
        match self {
            Subscription::Log(r) => r.next().await,
            Subscription::Merged(m) => {
                let (i, mut e) = match m.rx.recv().await {
                    Some(r) => r?,
                    None => return Err(crate::engine::handle::unavailable().unwrap_err()),
                };
                if let Some(p) = m.positions.get_mut(i) {
                    *p = e.cursor;
                }
                e.position = Some(Arc::from(crate::events::position_token(&m.positions)));
                Ok(e)
            }
        }
    }

    /// See [`Reader::open`]; a merged stream is open once every log's first read is.
    pub async fn open(&mut self) -> Result<(), OjsError> {
        match self {
            Subscription::Log(r) => r.open().await,
            Subscription::Merged(m) => {
                while m.to_open > 0 {
                    let (i, covered) = match m.opened.recv().await {
                        Some(r) => r?,
                        None => return Err(crate::engine::handle::unavailable().unwrap_err()),
                    };
                    // A log read up to its head: the stream stands there until its next
                    // event (cursors only grow, so an event already seen is not undone).
                    if let (Some(p), Some(c)) = (m.positions.get_mut(i), covered) {
                        *p = (*p).max(c);
                    }
                    m.to_open -= 1;
                }
                Ok(())
            }
        }
    }
}

impl Reader {
    pub fn new(engine: Arc<dyn PageSource>, filter: EventFilter, start: Start) -> Reader {
        let buf = engine.pool().buffer();
        Reader {
            engine,
            filter,
            start,
            buf,
            done: None,
            page_end: None,
            last: None,
            opened: false,
        }
    }

    /// The next event. An error (the start cursor was pruned, the engine stopped) ends
    /// the subscription.
    pub async fn next(&mut self) -> Result<Event, OjsError> {
        loop {
            match self.buf.take() {
                Taken::Event(e) => {
                    self.last = Some(e.cursor);
                    return Ok(e);
                }
                Taken::Wait => {
                    self.drained();
                    self.buf.wait().await;
                }
                Taken::ReadLog { emptied } => {
                    if emptied {
                        // What the buffer held was not handed out: resume after the last
                        // event that was.
                        self.done = self.done.max(self.last);
                    } else {
                        self.drained();
                    }
                    if let Some(c) = self.done {
                        self.start = Start::After(c);
                    }
                    self.buf.restart();
                    self.read_page().await?;
                }
            }
        }
    }

    /// The cursor up to which every matching event has been handed out (or there was
    /// none), once known.
    pub fn covered(&self) -> Option<u64> {
        self.done
    }

    /// The buffer was drained by the reader: the whole latest page was handed out.
    fn drained(&mut self) {
        self.done = self.done.max(self.page_end).max(self.last);
    }

    /// Run the first read of the log now, so a start that cannot be served (a cursor
    /// already pruned, the engine stopped) is reported before the caller commits to a
    /// stream, e.g. before an HTTP response is sent. When it succeeds and the read reached
    /// the head, the live feed is already registered: every event committed after this
    /// returns is delivered by `next`. Does nothing once the subscription has started.
    pub async fn open(&mut self) -> Result<(), OjsError> {
        if self.opened {
            return Ok(());
        }
        self.read_page().await
    }

    /// One page from the log into the buffer (and the live feed when the page reaches
    /// the head). Its bytes are reserved first, waiting in turn with other readers while
    /// the subscribers' total is held.
    async fn read_page(&mut self) -> Result<(), OjsError> {
        let wait = self.opened;
        self.opened = true;
        let reservation = self.buf.reserve_page().await;
        let page = self
            .engine
            .read_page(
                self.filter.clone(),
                self.start.clone(),
                PAGE,
                self.buf.clone(),
                reservation,
                wait,
            )
            .await?;
        self.page_end = Some(page.last);
        // What lies before the read's first cursor is before its start: nothing owed
        // there (a stream started at a time covers the log up to its first event at or
        // after the time, events or not).
        if let Some(before) = page.from.checked_sub(1) {
            self.done = self.done.max(Some(before));
        }
        if page.count == 0 {
            // Nothing matched up to `last`: no need to read that stretch again.
            self.done = self.done.max(Some(page.last));
        }
        Ok(())
    }
}
