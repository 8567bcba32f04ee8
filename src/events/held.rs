//! The memory held for event subscribers, bounded per subscriber and in total.
//!
//! Every subscriber (TCP `SUBSCRIBE`, an SSE stream, each WebSocket subscription) reads
//! through one [`Buffer`]: the engine appends the pages it reads from the log and, once the
//! reader has caught up, the live events of each commit. Every event in a buffer counts
//! against the buffer's own bound and the [`Pool`]'s total:
//!
//! - a live event that would take a buffer past its bound (or the pool past its total,
//!   once stalled buffers have been taken back) is not added: the live feed is cut and the
//!   reader, once it has drained what it holds, goes back to the log after the last event
//!   it handed out, as it always did after falling behind;
//! - a reader reserves a page's bytes before asking for the page, and waits while the pool
//!   has no room;
//! - a buffer whose reader has taken nothing from it for [`STALL`] (a client that does not
//!   read its socket) may be emptied by anyone who needs room. Its reader resumes from the
//!   log after the last event it handed out, so nothing is lost or repeated; the events a
//!   stalled reader would need are on disk, not in memory.
//!
//! So whatever subscribers do, the events held for them stay within the pool's total plus
//! one event per reader (a single event larger than a page is still delivered).

use super::Event;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, Semaphore};

/// Default bound of one subscriber's buffer (`--max-subscriber-bytes`).
pub const DEFAULT_PER_SUBSCRIBER: usize = 1 << 20;
/// Default bound of all subscribers' buffers together (`--max-subscriber-bytes-total`).
pub const DEFAULT_TOTAL: usize = 64 << 20;
/// Most bytes a reader asks for in one page from the log.
const MAX_PAGE: usize = 256 << 10;
/// A buffer not read from for this long may be emptied to make room for others.
pub const STALL: Duration = Duration::from_millis(500);

/// The bounds: bytes of events held per subscriber and for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLimits {
    pub per_subscriber: usize,
    pub total: usize,
}

impl Default for HeldLimits {
    fn default() -> Self {
        HeldLimits {
            per_subscriber: DEFAULT_PER_SUBSCRIBER,
            total: DEFAULT_TOTAL,
        }
    }
}

impl HeldLimits {
    /// The bytes a reader reserves for one page: its own bound, at most [`MAX_PAGE`], and
    /// at most 1/32 of the total, so that many readers page at once.
    fn page(&self) -> usize {
        self.per_subscriber
            .min(MAX_PAGE)
            .min(self.total / 32)
            .max(1)
    }
}

/// All subscribers' buffers and the bytes they hold.
pub struct Pool {
    limits: HeldLimits,
    /// One permit per byte not held. Fair: bytes given back go to readers waiting for a
    /// page, in the order they asked, before a live event can take them, so a reader is
    /// never starved by the engine refilling other buffers.
    free: Semaphore,
    buffers: Mutex<HashMap<u64, Weak<Buffer>>>,
    next_id: AtomicU64,
    epoch: Instant,
    reclaimed: AtomicU64,
}

/// What the pool reports: bytes held now and how many buffers were emptied so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub held_bytes: usize,
    pub limit_bytes: usize,
    pub buffers: usize,
    pub reclaimed: u64,
}

impl Pool {
    pub fn new(limits: HeldLimits) -> Arc<Pool> {
        Arc::new(Pool {
            limits,
            free: Semaphore::new(limits.total.min(Semaphore::MAX_PERMITS)),
            buffers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            reclaimed: AtomicU64::new(0),
        })
    }

    pub fn limits(&self) -> HeldLimits {
        self.limits
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            held_bytes: self
                .limits
                .total
                .saturating_sub(self.free.available_permits()),
            limit_bytes: self.limits.total,
            buffers: lock(&self.buffers).len(),
            reclaimed: self.reclaimed.load(Ordering::Relaxed),
        }
    }

    /// A new, empty buffer for one subscriber.
    pub fn buffer(self: &Arc<Pool>) -> Arc<Buffer> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let buf = Arc::new(Buffer {
            pool: self.clone(),
            id,
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            last_read: AtomicU64::new(self.now_ms()),
        });
        lock(&self.buffers).insert(id, Arc::downgrade(&buf));
        buf
    }

    /// Milliseconds on the pool's clock, which starts well past [`STALL`] so that "long
    /// ago" can be written as 0.
    fn now_ms(&self) -> u64 {
        (self.epoch.elapsed().as_millis() as u64).saturating_add(1 << 20)
    }

    /// Take `bytes` from the free bytes if they are there now.
    fn try_take(&self, bytes: usize) -> bool {
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        match self.free.try_acquire_many(n) {
            Ok(p) => {
                p.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Take `bytes`, emptying stalled buffers (never `me`'s) when they are not free.
    fn take_now(&self, bytes: usize, me: u64) -> bool {
        self.try_take(bytes) || (self.reclaim(me) > 0 && self.try_take(bytes))
    }

    /// Wait for `bytes`, in turn with other readers; stalled buffers are emptied each time
    /// the wait has lasted [`STALL`], since nobody else may be asking for room then.
    async fn take(&self, bytes: usize, me: u64) {
        let n = u32::try_from(bytes).unwrap_or(u32::MAX);
        loop {
            if self.take_now(n as usize, me) {
                return;
            }
            if let Ok(Ok(p)) = tokio::time::timeout(STALL, self.free.acquire_many(n)).await {
                p.forget();
                return;
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.free.add_permits(bytes);
        }
    }

    /// Empty every buffer (but `me`) whose reader has taken nothing for [`STALL`]; the
    /// bytes freed. A buffer whose lock is busy is passed over, so two callers never wait
    /// on each other.
    fn reclaim(&self, me: u64) -> usize {
        let now = self.now_ms();
        let stall = STALL.as_millis() as u64;
        // Upgraded only once the registry is unlocked: dropping the last handle of a
        // buffer takes that lock (Buffer::drop).
        let others: Vec<Weak<Buffer>> = lock(&self.buffers)
            .iter()
            .filter(|(&id, _)| id != me)
            .map(|(_, w)| w.clone())
            .collect();
        let (mut freed, mut counted) = (0, 0);
        for b in others.iter().filter_map(Weak::upgrade) {
            if now.saturating_sub(b.last_read.load(Ordering::Relaxed)) < stall {
                continue;
            }
            let Ok(mut inner) = b.inner.try_lock() else {
                continue;
            };
            if inner.bytes == 0 {
                continue;
            }
            freed += inner.bytes;
            counted += inner.counted;
            inner.counted = 0;
            inner.events = VecDeque::new();
            inner.bytes = 0;
            inner.reclaimed = true;
            inner.live = None;
            drop(inner);
            self.reclaimed.fetch_add(1, Ordering::Relaxed);
            b.notify.notify_one();
        }
        self.give_back(counted);
        if freed > 0 {
            tracing::debug!(freed, "emptied the buffers of stalled subscribers");
        }
        freed
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One subscriber's events, waiting for its reader.
pub struct Buffer {
    pool: Arc<Pool>,
    id: u64,
    inner: Mutex<Inner>,
    notify: Notify,
    /// When the reader last took an event (or was handed a page), in the pool's ms.
    last_read: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Each event with its size and the part of it taken from the pool (all of it, but
    /// for an event larger than the page it came in).
    events: VecDeque<(Event, usize, usize)>,
    bytes: usize,
    counted: usize,
    /// The live registration that may append, if any: the generation it was made in.
    live: Option<u64>,
    /// Bumped each time the reader starts over from the log, so an older live
    /// registration the engine still holds can no longer append.
    generation: u64,
    /// Emptied to make room: the reader must go back to the log.
    reclaimed: bool,
}

/// What a reader finds in its buffer.
// Returned by value and taken apart at once: boxing the event would cost an allocation per
// event delivered.
#[allow(clippy::large_enum_variant)]
pub enum Taken {
    Event(Event),
    /// Nothing yet; the live feed is in place: wait for [`Buffer::wait`].
    Wait,
    /// Nothing, and no live feed (never joined, or cut for falling behind): read the log
    /// after what was read. `emptied`: the buffer was emptied while its reader stalled, so
    /// the events it held were not handed out: read the log after the last one that was.
    ReadLog {
        emptied: bool,
    },
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let counted = lock(&self.inner).counted;
        self.pool.give_back(counted);
        lock(&self.pool.buffers).remove(&self.id);
    }
}

impl Buffer {
    pub fn limits(&self) -> HeldLimits {
        self.pool.limits
    }

    /// The reader takes the next event, or learns what to do instead.
    pub fn take(&self) -> Taken {
        let mut inner = lock(&self.inner);
        if let Some((e, size, counted)) = inner.events.pop_front() {
            inner.bytes -= size;
            inner.counted -= counted;
            drop(inner);
            self.pool.give_back(counted);
            self.last_read.store(self.pool.now_ms(), Ordering::Relaxed);
            return Taken::Event(e);
        }
        self.last_read.store(self.pool.now_ms(), Ordering::Relaxed);
        if inner.reclaimed {
            Taken::ReadLog { emptied: true }
        } else if inner.live.is_some() {
            Taken::Wait
        } else {
            Taken::ReadLog { emptied: false }
        }
    }

    /// Wait until the engine appends or the buffer is emptied.
    pub async fn wait(&self) {
        self.notify.notified().await
    }

    /// The reader starts over from the log: no live feed until the next page joins one.
    pub fn restart(&self) {
        let mut inner = lock(&self.inner);
        inner.generation += 1;
        inner.live = None;
        inner.reclaimed = false;
    }

    /// Reserve the bytes of one page before asking the engine for it, waiting in turn
    /// with other readers while the pool has no room.
    pub async fn reserve_page(&self) -> Reservation {
        let bytes = self.pool.limits.page();
        self.pool.take(bytes, self.id).await;
        Reservation {
            pool: self.pool.clone(),
            bytes,
        }
    }

    /// The engine's side, for a page read from the log: append `events` within the
    /// reservation, then join the live feed when `live` is set (the page reached the head).
    /// Returns the generation a live registration must present, if one was made.
    pub fn put_page(
        &self,
        events: Vec<Event>,
        mut reservation: Reservation,
        live: bool,
    ) -> Option<u64> {
        let mut inner = lock(&self.inner);
        for e in events {
            let size = e.held_bytes();
            // The page was sized to the reservation, save one event larger than a page,
            // which is held beyond it.
            let counted = size.min(reservation.bytes);
            reservation.bytes -= counted;
            inner.bytes += size;
            inner.counted += counted;
            inner.events.push_back((e, size, counted));
        }
        drop(reservation);
        let gen = inner.generation;
        inner.live = live.then_some(gen);
        drop(inner);
        self.last_read.store(self.pool.now_ms(), Ordering::Relaxed);
        self.notify.notify_one();
        live.then_some(gen)
    }

    /// The engine's side, for a live event: append it if this registration is still the
    /// buffer's and the event fits its bound and the total. False ends the registration:
    /// the reader drains what it holds and then reads the log.
    pub fn push_live(&self, generation: u64, e: &Event) -> bool {
        let size = e.held_bytes();
        {
            let inner = lock(&self.inner);
            if inner.live != Some(generation) || inner.reclaimed {
                return false;
            }
            if inner.bytes.saturating_add(size) > self.pool.limits.per_subscriber {
                drop(inner);
                return self.cut(generation);
            }
        }
        if !self.pool.take_now(size, self.id) {
            return self.cut(generation);
        }
        let mut inner = lock(&self.inner);
        if inner.live != Some(generation) || inner.reclaimed {
            drop(inner);
            self.pool.give_back(size);
            return false;
        }
        inner.bytes += size;
        inner.counted += size;
        inner.events.push_back((e.clone(), size, size));
        drop(inner);
        self.notify.notify_one();
        true
    }

    /// End the live registration `generation`; always false (for `push_live`).
    fn cut(&self, generation: u64) -> bool {
        let mut inner = lock(&self.inner);
        if inner.live == Some(generation) {
            inner.live = None;
        }
        drop(inner);
        self.notify.notify_one();
        false
    }

    /// True once the reader has gone (only the engine's registration holds the buffer).
    pub fn abandoned(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) == 1
    }

    /// Bytes of events this buffer holds now.
    pub fn held(&self) -> usize {
        lock(&self.inner).bytes
    }
}

/// Bytes counted in the pool for a page not yet read; given back when dropped.
pub struct Reservation {
    pool: Arc<Pool>,
    bytes: usize,
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cursor: u64) -> Event {
        Event::test_event(cursor, "job.completed", "q")
    }

    fn size() -> usize {
        event(0).held_bytes()
    }

    /// A buffer joined to the live feed, and its generation.
    async fn live(pool: &Arc<Pool>) -> (Arc<Buffer>, u64) {
        let buf = pool.buffer();
        let r = buf.reserve_page().await;
        let gen = buf.put_page(vec![], r, true).unwrap();
        (buf, gen)
    }

    #[tokio::test]
    async fn live_events_stop_at_the_subscriber_bound_and_the_reader_goes_back_to_the_log() {
        let pool = Pool::new(HeldLimits {
            per_subscriber: size() * 3,
            total: size() * 100,
        });
        let (buf, gen) = live(&pool).await;
        assert!(buf.push_live(gen, &event(1)));
        assert!(buf.push_live(gen, &event(2)));
        assert!(buf.push_live(gen, &event(3)));
        assert!(!buf.push_live(gen, &event(4)), "past the bound");
        assert!(!buf.push_live(gen, &event(5)), "the feed stays cut");
        assert_eq!(pool.stats().held_bytes, size() * 3);
        for c in 1..=3 {
            assert!(matches!(buf.take(), Taken::Event(e) if e.cursor == c));
        }
        assert!(matches!(buf.take(), Taken::ReadLog { emptied: false }));
        assert_eq!(pool.stats().held_bytes, 0);
    }

    #[tokio::test]
    async fn a_stalled_buffer_is_emptied_for_others_and_an_old_registration_cannot_append() {
        let pool = Pool::new(HeldLimits {
            per_subscriber: size() * 10,
            total: size() * 4,
        });
        let (stalled, old) = live(&pool).await;
        for c in 1..=4 {
            assert!(stalled.push_live(old, &event(c)));
        }
        let reader = pool.buffer();
        // The total is used up and nothing is stalled yet: no room.
        let wait = tokio::time::timeout(Duration::from_millis(50), reader.reserve_page());
        assert!(wait.await.is_err());
        stalled.last_read.store(0, Ordering::Relaxed);
        let r = reader.reserve_page().await;
        assert_eq!(stalled.held(), 0, "the stalled buffer was emptied");
        assert_eq!(pool.stats().reclaimed, 1);
        assert!(matches!(stalled.take(), Taken::ReadLog { emptied: true }));
        assert!(
            !stalled.push_live(old, &event(5)),
            "emptied: its feed ended"
        );
        stalled.restart();
        assert!(!stalled.push_live(old, &event(5)), "an older generation");
        drop((r, reader, stalled));
        let s = pool.stats();
        assert_eq!((s.held_bytes, s.buffers, s.reclaimed), (0, 0, 1));
    }

    #[tokio::test]
    async fn bytes_given_back_go_to_a_waiting_reader_before_live_events() {
        let pool = Pool::new(HeldLimits {
            per_subscriber: size() * 100,
            total: size() * 8,
        });
        let (busy, gen) = live(&pool).await;
        for c in 1..=8 {
            assert!(busy.push_live(gen, &event(c)));
        }
        let reader = pool.buffer();
        let waiting = {
            let reader = reader.clone();
            tokio::spawn(async move { reader.reserve_page().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The busy reader takes an event: its bytes go to the waiting reader's page.
        assert!(matches!(busy.take(), Taken::Event(_)));
        assert!(
            !busy.push_live(gen, &event(9)),
            "no room left for a live event"
        );
        let r = waiting.await.unwrap();
        assert_eq!(r.bytes(), pool.limits().page());
    }

    #[tokio::test]
    async fn a_page_gives_back_what_it_did_not_use_and_a_large_event_is_held_beyond_it() {
        let pool = Pool::new(HeldLimits::default());
        let buf = pool.buffer();
        let r = buf.reserve_page().await;
        assert_eq!(pool.stats().held_bytes, r.bytes());
        assert_eq!(buf.put_page(vec![event(1), event(2)], r, false), None);
        assert_eq!(pool.stats().held_bytes, 2 * size());
        assert!(matches!(buf.take(), Taken::Event(_)));
        assert!(matches!(buf.take(), Taken::Event(_)));
        assert!(matches!(buf.take(), Taken::ReadLog { emptied: false }));
        assert_eq!(pool.stats().held_bytes, 0);

        let small = Pool::new(HeldLimits {
            per_subscriber: 8,
            total: 64,
        });
        let buf = small.buffer();
        let r = buf.reserve_page().await;
        buf.put_page(vec![event(3)], r, false);
        assert_eq!(buf.held(), size());
        let page = small.limits().page();
        assert_eq!(small.stats().held_bytes, page, "only the page is counted");
        assert!(matches!(buf.take(), Taken::Event(e) if e.cursor == 3));
        assert_eq!(small.stats().held_bytes, 0);
    }
}
