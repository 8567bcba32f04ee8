//! The event stream in cluster mode. Each partition has a log of its own, with cursors of
//! its own. A stream (SUBSCRIBE, SSE, WebSocket) or poll whose filter names queues of one
//! partition reads that partition's log; any other merges every partition's log:
//!
//! - a task per partition reads its log (this node's engine, or the holder's by long poll)
//!   and hands its events on in that log's order; the stream interleaves them as they
//!   come. A job's events are all in its queue's partition, so they arrive in order; the
//!   events of different partitions have no order between them (ojs-events asks for
//!   per-job order).
//! - Where the stream stands is each partition's last cursor handed out: every event
//!   carries it as its `position` (`p<N>:<c0>,<c1>,...`), which is the SSE id and what a
//!   reader resumes from (`after`, `Last-Event-ID`): each partition then resumes after its
//!   own cursor, so nothing is lost or repeated. A stream started live stands at each
//!   partition's head until that partition's first event; one started at a time, just
//!   before each partition's first event at or after the time (`Page::from`).
//! - A poll reads a page from each partition and answers their events with the position
//!   after them as its `cursor` (a string).

use super::router::{Cluster, Router, Target, LONG_POLL_MS, REMOTE_POLL};
use crate::engine::{Page, PageSource, Subscription};
use crate::error::{ErrorCode, OjsError};
use crate::events::held::{Buffer, Pool, Reservation};
use crate::events::{EventFilter, Start};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Events read ahead of the merged stream's reader (each partition's reader also holds a
/// page in the subscribers' bounded buffers).
const MERGED_AHEAD: usize = 256;

/// One partition's log, as a subscription reads it.
pub(super) struct PartSource {
    pub(super) c: Arc<Cluster>,
    pub(super) part: u32,
}

impl PageSource for PartSource {
    fn pool(&self) -> &Arc<Pool> {
        &self.c.subscribers
    }

    fn read_page(
        &self,
        filter: EventFilter,
        start: Start,
        limit: usize,
        buf: Arc<Buffer>,
        reservation: Reservation,
        wait: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Page, OjsError>> + Send + '_>> {
        Box::pin(read_part(
            &self.c,
            self.part,
            filter,
            start,
            limit,
            buf,
            reservation,
            wait,
        ))
    }
}

/// A subscriber's page of partition `p`'s log: from this node's engine (joining its live
/// feed at the head), or from the holder's by long poll.
#[allow(clippy::too_many_arguments)]
pub(super) async fn read_part(
    c: &Arc<Cluster>,
    p: u32,
    filter: EventFilter,
    start: Start,
    limit: usize,
    buf: Arc<Buffer>,
    reservation: Reservation,
    wait: bool,
) -> Result<Page, OjsError> {
    let link = match c.target(p).await? {
        Target::Local(h) => return h.read_into(filter, start, limit, buf, reservation).await,
        Target::Remote(l) => l,
    };
    // A long poll: the holder answers once an event matches (or after a while).
    let asked = std::time::Instant::now();
    let page = link
        .events(
            p,
            filter,
            start,
            limit,
            reservation.bytes(),
            if wait { LONG_POLL_MS } else { 0 },
        )
        .await?;
    let (count, last, has_more, from) = (page.count, page.last, page.has_more, page.from);
    // No live feed across nodes: the reader comes back for the next page.
    buf.put_page(page.events, reservation, false);
    if wait && count == 0 && !has_more && asked.elapsed() < REMOTE_POLL {
        // An empty page at once (the holder did not wait): not a busy loop.
        tokio::time::sleep(REMOTE_POLL).await;
    }
    Ok(Page {
        position: None,
        events: Vec::new(),
        count,
        last,
        from,
        has_more,
    })
}

/// Each partition's start in a merged stream of `n`, and where the stream stands before
/// any event.
fn starts(start: Start, n: usize) -> Result<(Vec<Start>, Vec<u64>), OjsError> {
    match start {
        Start::Each(v) if v.len() == n => Ok((v.iter().map(|c| Start::After(*c)).collect(), v)),
        Start::Each(v) => Err(OjsError::new(
            ErrorCode::InvalidPayload,
            format!(
                "the position names {} partitions; this cluster has {n}",
                v.len()
            ),
        )),
        Start::After(c) => Err(OjsError::new(
            ErrorCode::InvalidPayload,
            format!(
                "cursor {c} is one partition's: a stream over several partitions resumes \
                 from an event's position (p{n}:...), PROTOCOL.md §16"
            ),
        )),
        s => Ok((vec![s; n], vec![0; n])),
    }
}

type Events = tokio::sync::mpsc::Sender<Result<(usize, crate::events::Event), OjsError>>;
type Opened = tokio::sync::mpsc::Sender<Result<(usize, Option<u64>), OjsError>>;

/// How long a merged stream's reader of a partition that cannot be reached (its holder
/// died, or it is moving between nodes) waits before it tries again.
const RETRY_PART: std::time::Duration = std::time::Duration::from_millis(500);

/// How much earlier than the stream's opening a live partition reader that had to be
/// retried starts (`Start::Since`): the nodes' clocks may differ by this much.
const LIVE_RETRY_MARGIN: chrono::Duration = chrono::Duration::milliseconds(500);

/// Partition `q`'s reader in a merged stream: its events, in its log's order, to `tx`,
/// until the stream's reader is gone. While the partition cannot be reached it tries
/// again, from after the last cursor it handed on, so the stream outlives a partition
/// moving between nodes; an error that retrying does not cure (a cursor already pruned)
/// ends the stream.
async fn follow(
    c: Arc<Cluster>,
    q: usize,
    filter: EventFilter,
    mut start: Start,
    tx: Events,
    otx: Opened,
) {
    let mut told_open = false;
    // A live start that has to be retried before the reader learned where the log's head
    // was (the partition could not be reached when the stream opened, or moved before its
    // first event) resumes from the time the stream opened instead: live again would
    // skip the events committed meanwhile. A little earlier, for the holders' clocks.
    let opened_at = chrono::Utc::now() - LIVE_RETRY_MARGIN;
    let retry_from = |start: Start| match start {
        Start::Live => Start::Since(opened_at),
        s => s,
    };
    loop {
        let source = Arc::new(PartSource {
            c: c.clone(),
            part: q as u32,
        });
        let mut sub = Subscription::new(source, filter.clone(), start.clone());
        let opened = tokio::select! {
            r = sub.open() => r,
            _ = tx.closed() => return,
        };
        match opened {
            Ok(()) => {
                if !told_open {
                    let covered = match &sub {
                        Subscription::Log(r) => r.covered(),
                        Subscription::Merged(_) => None,
                    };
                    told_open = true;
                    let _ = otx.send(Ok((q, covered))).await;
                }
            }
            Err(e) if e.code == ErrorCode::BackendUnavailable => {
                // Not a reason to hold the other partitions' events back: open, and
                // this partition's come once it is served again.
                if !told_open {
                    told_open = true;
                    let _ = otx.send(Ok((q, None))).await;
                }
                start = retry_from(start);
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_PART) => continue,
                    _ = tx.closed() => return,
                }
            }
            Err(e) => {
                let _ = otx.send(Err(e)).await;
                return;
            }
        }
        loop {
            let next = tokio::select! {
                e = sub.next() => e,
                // The stream's reader is gone.
                _ = tx.closed() => return,
            };
            match next {
                Ok(e) => {
                    let cursor = e.cursor;
                    if tx.send(Ok((q, e))).await.is_err() {
                        return;
                    }
                    start = Start::After(cursor);
                }
                Err(e) if e.code == ErrorCode::BackendUnavailable => {
                    if let Subscription::Log(r) = &sub {
                        if let Some(c) = r.covered() {
                            start = match start {
                                Start::After(s) => Start::After(s.max(c)),
                                _ => Start::After(c),
                            };
                        }
                    }
                    start = retry_from(start);
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_PART) => break,
                        _ = tx.closed() => return,
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
    }
}

impl Cluster {
    /// A stream merging every partition's log (see the module docs).
    pub(super) fn merged_subscription(
        self: &Arc<Self>,
        filter: EventFilter,
        start: Start,
    ) -> Subscription {
        let n = self.parts() as usize;
        let (tx, rx) = tokio::sync::mpsc::channel(MERGED_AHEAD);
        let (otx, orx) = tokio::sync::mpsc::channel(n.max(1));
        let (starts, positions) = match starts(start, n) {
            Ok(s) => s,
            Err(e) => {
                let _ = otx.try_send(Err(e));
                return Subscription::merged(rx, orx, vec![0; n.max(1)]);
            }
        };
        for (q, start) in starts.into_iter().enumerate() {
            let (c, tx, otx, filter) = (self.clone(), tx.clone(), otx.clone(), filter.clone());
            tokio::spawn(follow(c, q, filter, start, tx, otx));
        }
        Subscription::merged(rx, orx, positions)
    }

    /// A poll over every partition's log: a page from each, the events of as many as fit
    /// in `limit`, and the position after them.
    pub(super) async fn merged_page(
        self: &Arc<Self>,
        filter: EventFilter,
        start: Start,
        limit: usize,
    ) -> Result<Page, OjsError> {
        let n = self.parts() as usize;
        let (starts, mut positions) = starts(start, n)?;
        let mut pages = Vec::with_capacity(n);
        for (q, start) in starts.into_iter().enumerate() {
            let p = q as u32;
            let page = match self.target(p).await? {
                Target::Local(h) => h.events(filter.clone(), start, limit).await?,
                Target::Remote(l) => {
                    l.events(p, filter.clone(), start, limit, 4 << 20, 0)
                        .await?
                }
            };
            pages.push(page);
        }
        let mut events = Vec::new();
        let mut has_more = false;
        for (q, page) in pages.into_iter().enumerate() {
            let room = limit.saturating_sub(events.len());
            let all = page.events.len() <= room;
            let taken: Vec<_> = page.events.into_iter().take(room).collect();
            // Before the page's first cursor is before the poll's start: nothing owed.
            if let Some(before) = page.from.checked_sub(1) {
                positions[q] = positions[q].max(before);
            }
            if all {
                positions[q] = positions[q].max(page.last);
                has_more |= page.has_more;
            } else {
                has_more = true;
                if let Some(e) = taken.last() {
                    positions[q] = positions[q].max(e.cursor);
                }
            }
            events.extend(taken);
        }
        Ok(Page {
            count: events.len(),
            events,
            last: 0,
            from: 0,
            has_more,
            position: Some(crate::events::position_token(&positions)),
        })
    }
}

/// The stream of one partition's log (a filter naming its queues) through the router.
impl PageSource for Router {
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
        wait: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Page, OjsError>> + Send + '_>> {
        Box::pin(async move {
            let c = match self {
                Router::Local(h) => {
                    return h.read_into(filter, start, limit, buf, reservation).await
                }
                Router::Cluster(c) => c,
            };
            let p = c.events_part(&filter)?;
            read_part(c, p, filter, start, limit, buf, reservation, wait).await
        })
    }
}
