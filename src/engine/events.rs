//! The engine side of events: every event is written to the log in the same batch as the
//! transition it describes, and handed to live subscribers only after that batch commits.
//! A subscriber whose buffer fills is dropped from the live set; its reader notices the
//! closed channel and catches up from the log, so a slow reader never slows the engine.

use super::txn::Txn;
use super::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::events::held::{Buffer, HeldLimits, Reservation};
use crate::events::{self, Component, Event, EventFilter, EventKind, Start};
use crate::job::Job;
use crate::store::Space;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

#[derive(Debug, Clone)]
pub struct EventConfig {
    pub service: String,
    pub retention: Duration,
    pub max_count: u64,
    /// Bytes of events held for subscribers, each and in all (`events/held.rs`).
    pub held: HeldLimits,
}

impl Default for EventConfig {
    fn default() -> Self {
        EventConfig {
            service: "ojsd".into(),
            retention: Duration::from_secs(7 * 24 * 3600),
            max_count: 1_000_000,
            held: HeldLimits::default(),
        }
    }
}

/// A subscriber's buffer joined to the live feed, with the generation it joined in.
struct LiveSub {
    filter: EventFilter,
    buf: Arc<Buffer>,
    generation: u64,
}

/// A read of the log: a poll's page, or a subscriber's page appended to its buffer.
pub struct Read {
    pub filter: EventFilter,
    pub start: Start,
    pub limit: usize,
    pub into: Option<(Arc<Buffer>, Reservation)>,
    /// Most bytes of events in a poll's page (at least one event); a subscriber's page is
    /// bounded by its reservation instead.
    pub budget: Option<usize>,
    pub reply: oneshot::Sender<OjsResult<Page>>,
}

#[derive(Default)]
pub(super) struct EventState {
    /// Cursor the next event gets.
    pub next: u64,
    /// Smallest cursor still in the log (== `next` when the log is empty).
    pub oldest: u64,
    subs: Vec<LiveSub>,
    /// The last log record written, while the store still holds its batch uncommitted
    /// (see [`Engine::log_events`]).
    open: Option<OpenRecord>,
    /// The time of the newest event in the log's oldest record, as the last prune that
    /// stopped there read it: until the retention passes it (and while the count is within
    /// its bound) there is nothing to prune, and [`Engine::prune_events`] does not read the
    /// log. Later events only go into the newest record, so a record's newest time only
    /// grows: the prune may look again early, never late.
    oldest_record_newest: Option<DateTime<Utc>>,
}

/// A log record the next batch may add its events to.
struct OpenRecord {
    /// Its key's cursor, and the cursor after its last event.
    first: u64,
    next: u64,
    record: Vec<u8>,
    /// The store's mark after the batch that wrote it (`Store::written`).
    mark: u64,
}

/// Most events and bytes a record grows to by later batches' events. Each batch that adds
/// to it puts a copy of the whole record in its batch, and the store holds every batch
/// until a round takes them, so a record's copies add up to at most about
/// `OPEN_MAX_EVENTS × OPEN_MAX_BYTES` (1 MiB) while a round is slow. A round at the
/// bench's load takes a few events per partition, so these bounds are rarely reached.
const OPEN_MAX_EVENTS: usize = 64;
const OPEN_MAX_BYTES: usize = 16 << 10;

/// What a read returns: a page of matching events (empty when they went into a
/// subscriber's buffer), how many there were, and the last cursor the read covered (resume
/// with `After(last)`).
pub struct Page {
    pub events: Vec<Event>,
    pub count: usize,
    pub last: u64,
    /// The first cursor the read considered: the events before it are before the read's
    /// start (a `Since` start's time, an `After` cursor), so none of them is owed.
    pub from: u64,
    pub has_more: bool,
    /// A page merged from several partitions' logs (cluster mode): where the next poll
    /// resumes, as a position token (`last` is then meaningless).
    pub position: Option<String>,
}

/// The data fields every job event carries: ids, type, queue, and the trace id of
/// ojs-events §8.3 when the job has one.
pub(super) fn job_data(job: &Job) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("job_id".into(), json!(job.id));
    m.insert("job_type".into(), json!(job.job_type));
    m.insert("queue".into(), json!(job.queue));
    if let Some(t) = job.trace_id() {
        m.insert("trace_id".into(), json!(t));
    }
    m
}

/// The fields `job_data` puts first, borrowed.
pub(super) fn fields_of(job: &Job) -> events::JobFields<'_> {
    events::JobFields {
        id: &job.id,
        job_type: &job.job_type,
        queue: &job.queue,
        trace_id: job.trace_id(),
    }
}

/// How often the event log is pruned, how often while a pruning stopped short (the log
/// grows faster than one slice a period removes), and how long one pruning may read.
pub(super) const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
pub(super) const PRUNE_EVERY_BEHIND: std::time::Duration = std::time::Duration::from_millis(10);
const PRUNE_BUDGET: std::time::Duration = std::time::Duration::from_millis(2);

impl Engine {
    /// Record an event in this batch.
    pub(super) fn emit(
        &mut self,
        txn: &mut Txn,
        kind: EventKind,
        from: Component<'_>,
        subject: &str,
        data: Map<String, Value>,
    ) {
        let cursor = self.events.next;
        self.events.next += 1;
        let source = events::source(&self.cfg.events.service, from);
        let e = events::build(cursor, kind.name(), source, self.now, subject, data);
        txn.events.push(e);
    }

    /// Write this batch's events to the log, a record per run of consecutive cursors.
    ///
    /// A store that holds batches until a commit takes them all (PostgreSQL, pipelined)
    /// would get a record per batch, and an engine writes several batches while one
    /// commit is out: as many rows. So while the store still holds the batch that wrote
    /// the last record, this batch's events are added to that record instead, written
    /// again whole under its key: the commit that takes both writes one row. A commit
    /// that took the old value meanwhile is followed by one writing the new; readers see
    /// the record grow, which they take as they would the next record (they read by
    /// cursor, up to the durable head).
    pub(super) fn log_events(&mut self, txn: &mut Txn) {
        let mut rest = &txn.events[..];
        if let Some(open) = self.events.open.as_mut() {
            let follows = rest.first().is_some_and(|e| e.cursor == open.next);
            if follows && open.first >= self.events.oldest && self.store.still_pending(open.mark) {
                let taken =
                    events::append_chunk(&mut open.record, rest, OPEN_MAX_EVENTS, OPEN_MAX_BYTES);
                if taken > 0 {
                    open.next += taken as u64;
                    txn.batch.put(
                        Space::Event,
                        &events::cursor_key(open.first),
                        open.record.clone(),
                    );
                    rest = &rest[taken..];
                }
            }
        }
        // Only a pipelined engine's store holds batches between its syncs.
        let keep = self.pipeline.is_some();
        let mut last = None;
        while let Some(first) = rest.first() {
            let (record, taken) = events::encode_chunk(rest);
            if taken == 0 {
                // Only an event read back from an old record has no compact form, and
                // the engine never logs one again; never loop on it.
                tracing::error!(
                    cursor = first.cursor,
                    "an event without a compact form was not logged"
                );
                rest = &rest[1..];
                last = None;
                continue;
            }
            rest = &rest[taken..];
            let key = events::cursor_key(first.cursor);
            if keep && rest.is_empty() {
                last = Some((first.cursor, taken, record.clone()));
            }
            txn.batch.put(Space::Event, &key, record);
        }
        if let Some((first, taken, record)) = last {
            self.events.open = Some(OpenRecord {
                first,
                next: first + taken as u64,
                record,
                mark: 0,
            });
        }
    }

    /// The batch that logged events is written, at the store's `mark`: the open record's
    /// latest value is in that batch.
    pub(super) fn logged(&mut self, mark: u64) {
        if let Some(open) = self.events.open.as_mut() {
            open.mark = mark;
        }
    }

    /// Visit logged events from cursor `from` on, in order, until `f` returns false.
    /// Records that cannot be read are reported with their first cursor and skipped.
    fn scan_log(
        &self,
        from: u64,
        f: &mut dyn FnMut(u64, events::Entry<'_>) -> bool,
    ) -> OjsResult<Option<u64>> {
        let start = self
            .store
            .floor_key(Space::Event, &events::cursor_key(from))
            .map_err(super::txn::backend)?
            .unwrap_or_else(|| events::cursor_key(from).to_vec());
        let mut bad = None;
        self.store
            .scan_from(Space::Event, &start, &mut |k, v| {
                let Some(first) = events::key_cursor(k) else {
                    return true;
                };
                let Some(entries) = events::decode_chunk(first, v) else {
                    bad = Some(first);
                    return true;
                };
                entries
                    .into_iter()
                    .filter(|(c, _)| *c >= from)
                    .all(|(c, entry)| f(c, entry))
            })
            .map_err(super::txn::backend)?;
        Ok(bad)
    }

    /// Emit a job event with the job's common fields plus `extra`.
    pub(super) fn emit_job(
        &mut self,
        txn: &mut Txn,
        kind: EventKind,
        from: Component<'_>,
        job: &Job,
        extra: Value,
    ) {
        let e = self.job_event(kind, from, &fields_of(job), &extra);
        txn.events.push(e);
    }

    /// Emit a non-job event whose data is a JSON object.
    pub(super) fn emit_plain(
        &mut self,
        txn: &mut Txn,
        kind: EventKind,
        from: Component<'_>,
        subject: &str,
        data: Value,
    ) {
        let Value::Object(map) = data else {
            return;
        };
        self.emit(txn, kind, from, subject, map);
    }

    /// Emit a job event from data built by `job_data` (the subject is the job id).
    pub(super) fn emit_with(
        &mut self,
        txn: &mut Txn,
        kind: EventKind,
        from: Component<'_>,
        mut data: Map<String, Value>,
        extra: Value,
    ) {
        if let Value::Object(m) = extra {
            data.extend(m);
        }
        let subject = data
            .get("job_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.emit(txn, kind, from, &subject, data);
    }

    pub(super) fn observe(&mut self, data: &Map<String, Value>, what: super::metrics::Observe) {
        let s = |k: &str| data.get(k).and_then(Value::as_str).unwrap_or("");
        self.observe_job(s("job_type"), s("queue"), what);
    }

    /// `observe` for a job of type `job_type` in `queue`.
    pub(super) fn observe_job(
        &mut self,
        job_type: &str,
        queue: &str,
        what: super::metrics::Observe,
    ) {
        // Per-queue throughput for QUEUE STATS: completions and failed attempts.
        let done = match &what {
            super::metrics::Observe::Completed { .. } => Some(true),
            super::metrics::Observe::Failed { .. } => Some(false),
            _ => None,
        };
        if let (Some(ok), Some(q)) = (done, self.index.find_queue(queue)) {
            let now = self.now_ms();
            self.index.queue_mut(q).throughput.record(now, ok);
        }
        let now = self.now_ms();
        self.overview.record(now, &what);
        self.metrics.observe(job_type, queue, what);
    }

    /// A job event from the job's fields and the rest of its data (a JSON object), the
    /// event `emit_with` makes of `job_data` + `extra`, without building that map. The
    /// caller pushes it to its batch (`txn.events`): it may still hold the job.
    pub(super) fn job_event(
        &mut self,
        kind: EventKind,
        from: Component<'_>,
        job: &events::JobFields<'_>,
        extra: &Value,
    ) -> events::Event {
        let cursor = self.events.next;
        self.events.next += 1;
        let source = events::source(&self.cfg.events.service, from);
        events::build_job(cursor, kind.name(), source, self.now, job, extra)
    }

    /// Hand committed events to live subscribers; drop the ones whose reader went away or
    /// whose buffer is full (they catch up from the log).
    pub(super) fn publish(&mut self, committed: &[Event]) {
        if committed.is_empty() || self.events.subs.is_empty() {
            return;
        }
        self.events.subs.retain(|s| {
            // A reader that went away is dropped even when nothing matches its filter;
            // otherwise a narrow filter's dead feed would stay here for good.
            if s.buf.abandoned() {
                return false;
            }
            committed
                .iter()
                .filter(|e| s.filter.matches(e))
                .all(|e| s.buf.push_live(s.generation, e))
        });
    }

    /// Answer a read, once the batch is in the log.
    pub(super) fn answer_read(&mut self, read: Read) {
        let Read {
            filter,
            start,
            limit,
            into,
            budget,
            reply,
        } = read;
        let budget = into.as_ref().map(|(_, r)| r.bytes()).or(budget);
        let page = match self.read_events(&filter, start, limit, budget) {
            Ok(p) => p,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let Some((buf, reservation)) = into else {
            let _ = reply.send(Ok(page));
            return;
        };
        let Page {
            events,
            count,
            last,
            from,
            has_more,
            ..
        } = page;
        if let Some(generation) = buf.put_page(events, reservation, !has_more) {
            self.events.subs.push(LiveSub {
                filter,
                buf,
                generation,
            });
        }
        let _ = reply.send(Ok(Page {
            position: None,
            events: Vec::new(),
            count,
            last,
            from,
            has_more,
        }));
    }

    /// Read matching events from the log from `start`: at most `limit`, and at most
    /// `bytes` of them (but at least one) when given. Runs between batches, so the log
    /// holds every event with a cursor below `next` and nothing is missed or repeated at
    /// the seam with a live feed joined now.
    fn read_events(
        &mut self,
        filter: &EventFilter,
        start: Start,
        limit: usize,
        bytes: Option<usize>,
    ) -> OjsResult<Page> {
        // Events past the head are logged but not yet durable (a pipelined commit): they
        // are neither read nor missed, since the live feed publishes them once durable.
        let head = self.event_head();
        let from = match start {
            Start::Live => head,
            Start::After(c) => {
                let from = c.saturating_add(1);
                if from < self.events.oldest {
                    return Err(OjsError::new(
                        ErrorCode::CursorExpired,
                        format!(
                            "events after cursor {c} were pruned by retention; the oldest kept is {}",
                            self.events.oldest
                        ),
                    ));
                }
                from.min(head)
            }
            Start::Since(t) => self.cursor_at(t)?.min(head),
            // A merged stream's position is the router's to split into its partitions'.
            Start::Each(_) => {
                return Err(OjsError::new(
                    ErrorCode::InvalidPayload,
                    "a position of a stream merging several partitions names no single log",
                ))
            }
        };
        let mut out = Vec::new();
        let mut held = 0usize;
        let budget = bytes.unwrap_or(usize::MAX);
        let mut last = from.saturating_sub(1);
        let mut scanned = 0usize;
        let mut unreadable = None;
        if from < head {
            let bad = self.scan_log(from, &mut |c, json| {
                if c >= head {
                    return false;
                }
                match events::decode(c, json) {
                    Some((e, _)) => {
                        if filter.matches(&e) {
                            let size = e.held_bytes();
                            if !out.is_empty() && held.saturating_add(size) > budget {
                                // Full: this event starts the next page.
                                return false;
                            }
                            held += size;
                            out.push(e);
                        }
                    }
                    None => unreadable = Some(c),
                }
                last = c;
                scanned += 1;
                out.len() < limit && scanned < limit * 20
            })?;
            unreadable = unreadable.or(bad);
        }
        if let Some(c) = unreadable {
            tracing::warn!(cursor = c, "unreadable event record skipped");
        }
        let at_head = last.saturating_add(1) >= head;
        Ok(Page {
            position: None,
            count: out.len(),
            events: out,
            last: if at_head {
                head.saturating_sub(1)
            } else {
                last
            },
            from,
            has_more: !at_head,
        })
    }

    /// The first cursor whose event time is at or after `t` (events are in time order).
    fn cursor_at(&self, t: chrono::DateTime<chrono::Utc>) -> OjsResult<u64> {
        let mut found = self.events.next;
        self.scan_log(
            self.events.oldest,
            &mut |c, json| match events::decode(c, json) {
                Some((_, time)) if time >= t => {
                    found = c;
                    false
                }
                _ => true,
            },
        )?;
        Ok(found)
    }

    /// Drop events past the retention age or count (ojs-events §9.3), oldest first, a slice
    /// at a time: at most 10,000 events and [`PRUNE_BUDGET`] of reading per call, every
    /// [`PRUNE_EVERY`] (every [`PRUNE_EVERY_BEHIND`] while a call stops short, which it
    /// returns true for), so that a log growing by tens of thousands of events a second is
    /// pruned without an iteration everyone waits for (it read up to 10,000 events once a
    /// second: 10 ms and more). Whole records go: one is dropped once its newest event is
    /// past the age or its last cursor is past the count, so the log may keep up to one
    /// commit's events beyond either limit.
    pub(super) fn prune_events(&mut self, txn: &mut Txn) -> bool {
        const MAX_PER_CALL: u64 = 10_000;
        let deadline = std::time::Instant::now() + PRUNE_BUDGET;
        let mut short = false;
        let count = self.events.next - self.events.oldest;
        let over = count.saturating_sub(self.cfg.events.max_count);
        let count_end = self.events.oldest + over;
        let cutoff = crate::time::sub(self.now, self.cfg.events.retention);
        // Reading the log is a database round trip on PostgreSQL, every PRUNE_EVERY per
        // partition: skip it when it cannot find anything.
        let waits = |t: &DateTime<Utc>| *t >= cutoff;
        if count == 0 || (over == 0 && self.events.oldest_record_newest.as_ref().is_some_and(waits))
        {
            return false;
        }
        let mut stopped_at = None;
        let mut drop = Vec::new();
        let mut end = self.events.oldest;
        let scan = self.store.scan_from(
            Space::Event,
            &events::cursor_key(self.events.oldest),
            &mut |k, v| {
                let Some(first) = events::key_cursor(k) else {
                    return false;
                };
                let Some(entries) = events::decode_chunk(first, v) else {
                    return false;
                };
                let Some(&(last, json)) = entries.last() else {
                    return false;
                };
                if last >= count_end {
                    let time = events::decode(last, json).map(|(_, time)| time);
                    if time.is_none_or(|t| t >= cutoff) {
                        stopped_at = time;
                        return false;
                    }
                }
                drop.push(first);
                end = last + 1;
                short = end - self.events.oldest >= MAX_PER_CALL
                    || std::time::Instant::now() >= deadline;
                !short
            },
        );
        self.events.oldest_record_newest = stopped_at;
        if let Err(e) = scan {
            tracing::error!(error = %e, "could not read the event log to prune it");
            return false;
        }
        if drop.is_empty() {
            return false;
        }
        if let Some(open) = &self.events.open {
            if drop.contains(&open.first) {
                self.events.open = None;
            }
        }
        for first in drop {
            txn.batch.delete(Space::Event, &events::cursor_key(first));
        }
        self.compaction
            .note(Space::Event, end.saturating_sub(self.events.oldest));
        self.events.oldest = end;
        // Remember where cursors stand, in case the log is now empty.
        txn.batch.put(
            Space::Meta,
            b"event_next",
            events::cursor_key(self.events.next).to_vec(),
        );
        short
    }

    /// Find the log's bounds at start-up.
    pub(super) fn rebuild_events(&mut self) -> Result<(), crate::store::StoreError> {
        let (first, last) = self.store.bounds(Space::Event)?;
        let first = first.as_deref().and_then(events::key_cursor);
        let last = last.as_deref().and_then(events::key_cursor);
        match (first, last) {
            (Some(f), Some(l)) => {
                let record = self.store.get(Space::Event, &events::cursor_key(l))?;
                let n = record
                    .and_then(|v| events::decode_chunk(l, &v).map(|e| e.len() as u64))
                    .ok_or_else(|| {
                        crate::store::StoreError::Corrupt(format!(
                            "event log record {l} is unreadable"
                        ))
                    })?;
                self.events.oldest = f;
                self.events.next = l + n;
            }
            _ => {
                // An empty log: keep cursors increasing across restarts anyway.
                let next = self
                    .store
                    .get(Space::Meta, b"event_next")?
                    .and_then(|v| events::key_cursor(&v))
                    .unwrap_or(1);
                self.events.oldest = next;
                self.events.next = next;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
