//! A subscriber's view of the event stream, shared by the TCP `SUBSCRIBE`, SSE and
//! WebSocket front ends: replay from the log, then live events, and back to the log
//! whenever the live feed is cut because the reader fell behind. Events are delivered in
//! cursor order with no gap and no repeat.

use super::{Event, EventFilter, Start};
use crate::engine::EngineHandle;
use crate::error::OjsError;
use std::collections::VecDeque;
use tokio::sync::mpsc;

const PAGE: usize = 1000;

pub struct Subscription {
    engine: EngineHandle,
    filter: EventFilter,
    start: Start,
    backlog: VecDeque<Event>,
    live: Option<mpsc::Receiver<Event>>,
    /// Cursor of the last event handed out (or scanned past).
    last: Option<u64>,
}

impl Subscription {
    pub fn new(engine: EngineHandle, filter: EventFilter, start: Start) -> Subscription {
        Subscription {
            engine,
            filter,
            start,
            backlog: VecDeque::new(),
            live: None,
            last: None,
        }
    }

    /// The next event. An error (the start cursor was pruned, the engine stopped) ends
    /// the subscription.
    pub async fn next(&mut self) -> Result<Event, OjsError> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                self.last = Some(e.cursor);
                return Ok(e);
            }
            if let Some(rx) = &mut self.live {
                match rx.recv().await {
                    Some(e) => {
                        self.last = Some(e.cursor);
                        return Ok(e);
                    }
                    None => {
                        // Cut off for falling behind: resume from the log after the last event.
                        self.live = None;
                        if let Some(c) = self.last {
                            self.start = Start::After(c);
                        }
                        continue;
                    }
                }
            }
            self.read_page().await?;
        }
    }

    /// Run the first read of the log now, so a start that cannot be served (a cursor
    /// already pruned, the engine stopped) is reported before the caller commits to a
    /// stream, e.g. before an HTTP response is sent. When it succeeds and the read reached
    /// the head, the live feed is already registered: every event committed after this
    /// returns is delivered by `next`. Does nothing once the subscription has started.
    pub async fn open(&mut self) -> Result<(), OjsError> {
        if self.live.is_some() || !self.backlog.is_empty() || self.last.is_some() {
            return Ok(());
        }
        self.read_page().await
    }

    /// One page from the log (and the live feed when the page reaches the head).
    async fn read_page(&mut self) -> Result<(), OjsError> {
        let page = self
            .engine
            .events(self.filter.clone(), self.start, PAGE, true)
            .await?;
        self.start = Start::After(page.last);
        if page.live.is_none() && page.events.is_empty() {
            // Scanned a stretch of non-matching events; remember how far we got.
            self.last = Some(page.last);
        }
        self.backlog.extend(page.events);
        self.live = page.live;
        Ok(())
    }
}
