//! The engine's in-memory index of every job: state, queue, ordering key and timers.
//! Job bodies stay in the store; this is what the engine needs to decide without reading them.

use crate::job::rate_limit::RateWindow;
use crate::job::State;
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use uuid::Uuid;

pub type QueueId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKind {
    /// scheduled/retryable → available
    Promote,
    /// active → available or discarded (visibility timeout)
    Visibility,
    /// a not-yet-started job passes `expires_at` → discarded
    Expire,
    /// a terminal job passes its retention → deleted
    Prune,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub state: State,
    pub queue: QueueId,
    pub priority: i64,
    /// FIFO order within a priority; renewed each time the job becomes available.
    pub seq: u64,
    /// The state timer (Promote, Visibility or Prune), in engine-clock ms.
    pub timer: Option<(i64, TimerKind)>,
    pub expires: Option<i64>,
    pub worker: Option<std::sync::Arc<str>>,
    pub timeout_ms: i64,
    /// The envelope's encoded size, counted in `Index::queued_bytes` while the job is not
    /// terminal.
    pub bytes: u32,
}

#[derive(Debug, PartialEq, Eq)]
struct HeapItem {
    priority: i64,
    seq: Reverse<u64>,
    id: Uuid,
}

impl Ord for HeapItem {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.priority, self.seq).cmp(&(other.priority, other.seq))
    }
}

impl PartialOrd for HeapItem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
pub struct Queue {
    pub name: String,
    pub paused: bool,
    /// Forgotten by QUEUE REMOVE or FLUSH: left out of the queue lists until a job or a
    /// command names it again.
    pub removed: bool,
    /// Jobs per state, indexed like `State::ALL`.
    pub counts: [usize; 8],
    /// Available jobs, highest priority then lowest seq first. Entries whose job has since
    /// left `available` (or was re-queued with a new seq) are stale and skipped on pop.
    heap: BinaryHeap<HeapItem>,
    /// Completions and failures of recent minutes (QUEUE STATS).
    pub throughput: super::throughput::Throughput,
    /// The queue's rate limit (QUEUE LIMIT), and the start times (engine ms) inside its
    /// rate window, oldest first, at most `rate.limit` of them.
    pub limit: Option<crate::engine::request::QueueLimit>,
    pub starts: Starts,
    /// Since when (engine ms) the queue has been seen holding nothing, by `retire_idle`.
    idle_since: Option<i64>,
    /// Forgotten after holding nothing for a while: the slot waits for a new name.
    pub retired: bool,
}

/// Start times (engine ms) inside a sliding rate window, oldest first, at most the
/// window's `limit` of them: shared by queue limits and `rate_limit` keys.
#[derive(Debug, Default)]
pub struct Starts(std::collections::VecDeque<i64>);

impl Starts {
    /// Forget the starts that have left the window ending at `now`.
    fn prune(&mut self, now: i64, w: RateWindow) {
        let from = now.saturating_sub(w.period_ms);
        while self.0.front().is_some_and(|t| *t <= from) {
            self.0.pop_front();
        }
    }

    fn record(&mut self, now: i64, w: RateWindow) {
        self.0.push_back(now);
        while self.0.len() > w.limit as usize {
            self.0.pop_front();
        }
    }

    fn full(&self, w: RateWindow) -> bool {
        self.0.len() >= w.limit as usize
    }

    /// When a full window lets one more start.
    fn frees_at(&self, w: RateWindow) -> Option<i64> {
        if !self.full(w) {
            return None;
        }
        self.0.front().map(|t| t.saturating_add(w.period_ms))
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn state_slot(s: State) -> usize {
    State::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

impl Queue {
    pub fn count(&self, s: State) -> usize {
        self.counts[state_slot(s)]
    }

    /// Whether the rate limit lets one more job of this queue start at `now` (engine ms).
    /// Drops the starts that have left the window.
    pub fn can_start(&mut self, now: i64) -> bool {
        self.prune_window(now);
        let Some(limit) = self.limit else {
            return true;
        };
        !self.busy() && !limit.rate.is_some_and(|r| self.starts.full(r))
    }

    /// At the concurrency cap.
    fn busy(&self) -> bool {
        self.limit
            .and_then(|l| l.concurrency)
            .is_some_and(|c| self.count(State::Active) >= c as usize)
    }

    /// Forget the starts that have left the rate window.
    pub fn prune_window(&mut self, now: i64) {
        if let Some(r) = self.limit.and_then(|l| l.rate) {
            self.starts.prune(now, r);
        }
    }

    /// A job of this queue started at `now`: counted in the rate window.
    pub fn started(&mut self, now: i64) {
        if let Some(r) = self.limit.and_then(|l| l.rate) {
            self.starts.record(now, r);
        }
    }

    /// When a job held back only by the rate window may start (engine ms). Held back by
    /// the concurrency cap, the window does not matter: a job leaving `active` wakes the
    /// waiters instead.
    pub fn window_frees_at(&self) -> Option<i64> {
        let r = self.limit?.rate?;
        if self.busy() || self.count(State::Available) == 0 {
            return None;
        }
        self.starts.frees_at(r)
    }

    /// Shown in queue lists: not forgotten, or holding unfinished jobs again.
    pub fn listed(&self) -> bool {
        !self.removed
            || State::ALL
                .iter()
                .any(|s| !s.is_terminal() && self.count(*s) > 0)
    }
}

#[derive(Default)]
pub struct Index {
    /// Every job the engine holds, ordered by id. A B-tree, not a hash map: under churn
    /// (jobs inserted, finished ones pruned) a hash map's deleted slots use up its free ones
    /// and it rehashes in place, moving every entry in one insert: 22 ms at 100,000 jobs,
    /// 88-121 ms at 300,000, every few million inserts (`bench/index_churn.rs`). A B-tree
    /// never moves more than a node, and server ids are UUIDv7, so inserts go to its right
    /// edge.
    pub jobs: std::collections::BTreeMap<Uuid, Entry>,
    pub queues: Vec<Queue>,
    queue_ids: HashMap<String, QueueId>,
    /// Slots of retired queues, given to the next new names.
    free_queues: Vec<QueueId>,
    timers: BTreeSet<(i64, Uuid, TimerKind)>,
    /// Discarded jobs by discard time (DEAD LIST walks it newest first; pruning takes the oldest).
    /// Change it through `add_dead`/`remove_dead`, which keep `dead_at` in step.
    pub dead: BTreeSet<(i64, Uuid)>,
    dead_at: HashMap<Uuid, i64>,
    /// Uniqueness keys of the jobs that carry a `unique` policy (ojs-unique-jobs).
    pub unique: super::jobs::unique::UniqueIndex,
    pub next_seq: u64,
    /// Whether this start has deleted the obsolete job count record (`drop_job_count_hint`).
    pub job_count_hint_dropped: bool,
    /// Encoded bytes of every job not yet terminal (`--max-queued-bytes`).
    pub queued_bytes: u64,
    /// A job left `active` in a queue with a rate limit, or holding a `rate_limit` key:
    /// waiting FETCHes may be served.
    pub limit_freed: bool,
    /// Active jobs that hold a `rate_limit` key, and each key's counters.
    pub keyed_active: HashMap<Uuid, std::sync::Arc<str>>,
    pub keys: HashMap<std::sync::Arc<str>, KeyState>,
}

/// The shared counters of one `rate_limit` key (ojs-rate-limiting §6).
#[derive(Debug, Default)]
pub struct KeyState {
    pub active: u32,
    /// Starts inside the last seen `rate` window.
    pub starts: Starts,
    pub window: Option<RateWindow>,
    /// `throttle`: no start before this time (engine ms).
    pub next_start: i64,
}

impl KeyState {
    fn prune(&mut self, now: i64) {
        if let Some(w) = self.window {
            self.starts.prune(now, w);
        }
    }
}

impl Index {
    pub fn queue_id(&mut self, name: &str) -> QueueId {
        if let Some(id) = self.queue_ids.get(name) {
            self.queues[*id as usize].removed = false;
            return *id;
        }
        let fresh = Queue {
            name: name.to_string(),
            ..Default::default()
        };
        let id = match self.free_queues.pop() {
            Some(id) => {
                self.queues[id as usize] = fresh;
                id
            }
            None => {
                self.queues.push(fresh);
                (self.queues.len() - 1) as QueueId
            }
        };
        self.queue_ids.insert(name.to_string(), id);
        id
    }

    /// Queues known now (retired ones left out): what `--max-queues` bounds.
    pub fn live_queues(&self) -> usize {
        self.queue_ids.len()
    }

    /// Forget the queues that have held no job (in any state, finished ones included) for
    /// `idle_ms`, and are neither paused nor rate limited: no job refers to them, so their
    /// slot can take a new name. Their names are returned.
    pub fn retire_idle(&mut self, now: i64, idle_ms: i64) -> Vec<String> {
        let mut retired = Vec::new();
        for (id, q) in self.queues.iter_mut().enumerate() {
            if q.retired {
                continue;
            }
            let empty = q.counts.iter().all(|c| *c == 0)
                && !q.paused
                && q.limit.is_none()
                && q.starts.is_empty();
            if !empty {
                q.idle_since = None;
                continue;
            }
            let since = *q.idle_since.get_or_insert(now);
            if now.saturating_sub(since) < idle_ms {
                continue;
            }
            let name = std::mem::take(&mut q.name);
            self.queue_ids.remove(&name);
            *q = Queue {
                retired: true,
                removed: true,
                ..Default::default()
            };
            self.free_queues.push(id as QueueId);
            retired.push(name);
        }
        retired
    }

    pub fn find_queue(&self, name: &str) -> Option<QueueId> {
        self.queue_ids.get(name).copied()
    }

    pub fn queue(&self, id: QueueId) -> &Queue {
        &self.queues[id as usize]
    }

    pub fn queue_mut(&mut self, id: QueueId) -> &mut Queue {
        &mut self.queues[id as usize]
    }

    pub fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Add a job to the index in the given state (used by PUSH and by the rebuild at start).
    pub fn insert(&mut self, id: Uuid, entry: Entry) {
        let q = entry.queue;
        let state = entry.state;
        if state == State::Available {
            self.queues[q as usize].heap.push(HeapItem {
                priority: entry.priority,
                seq: Reverse(entry.seq),
                id,
            });
        }
        if let Some((due, kind)) = entry.timer {
            self.timers.insert((due, id, kind));
        }
        if let Some(due) = entry.expires {
            if !state.is_terminal() && state != State::Active {
                self.timers.insert((due, id, TimerKind::Expire));
            }
        }
        self.queues[q as usize].counts[state_slot(state)] += 1;
        if !state.is_terminal() {
            self.queued_bytes = self.queued_bytes.saturating_add(entry.bytes.into());
        }
        self.jobs.insert(id, entry);
    }

    /// Move a job to `to`, keeping counts, heap and timers consistent. The caller has
    /// already checked that the transition is allowed.
    pub fn set_state(&mut self, id: Uuid, to: State, timer: Option<(i64, TimerKind)>) {
        let Some(e) = self.jobs.get_mut(&id) else {
            return;
        };
        let from = e.state;
        let q = e.queue as usize;
        match (from.is_terminal(), to.is_terminal()) {
            (false, true) => self.queued_bytes = self.queued_bytes.saturating_sub(e.bytes.into()),
            (true, false) => self.queued_bytes = self.queued_bytes.saturating_add(e.bytes.into()),
            _ => {}
        }
        if let Some((due, kind)) = e.timer.take() {
            self.timers.remove(&(due, id, kind));
        }
        e.state = to;
        e.timer = timer;
        if let Some((due, kind)) = timer {
            self.timers.insert((due, id, kind));
        }
        // The expiry timer only matters before a job starts.
        if let Some(due) = e.expires {
            if to.is_terminal() || to == State::Active {
                self.timers.remove(&(due, id, TimerKind::Expire));
            } else {
                self.timers.insert((due, id, TimerKind::Expire));
            }
        }
        if to == State::Available {
            let seq = self.next_seq;
            self.next_seq += 1;
            e.seq = seq;
            let item = HeapItem {
                priority: e.priority,
                seq: Reverse(seq),
                id,
            };
            self.queues[q].heap.push(item);
        }
        let queue = &mut self.queues[q];
        queue.counts[state_slot(from)] -= 1;
        queue.counts[state_slot(to)] += 1;
        if from == State::Active && to != State::Active {
            self.limit_freed |= queue.limit.is_some();
            self.key_released(id);
        }
        self.compact(q);
    }

    /// Re-arm the state timer of a job without changing its state (BEAT extending a reservation).
    pub fn set_timer(&mut self, id: Uuid, timer: Option<(i64, TimerKind)>) {
        if let Some(e) = self.jobs.get_mut(&id) {
            if let Some((due, kind)) = e.timer.take() {
                self.timers.remove(&(due, id, kind));
            }
            e.timer = timer;
            if let Some((due, kind)) = timer {
                self.timers.insert((due, id, kind));
            }
        }
    }

    pub fn remove(&mut self, id: Uuid) -> Option<Entry> {
        let e = self.jobs.remove(&id)?;
        // A deleted job holds no unique key and is no dead letter, however it was deleted.
        self.unique.forget(id);
        self.remove_dead(id);
        if let Some((due, kind)) = e.timer {
            self.timers.remove(&(due, id, kind));
        }
        if let Some(due) = e.expires {
            self.timers.remove(&(due, id, TimerKind::Expire));
        }
        if !e.state.is_terminal() {
            self.queued_bytes = self.queued_bytes.saturating_sub(e.bytes.into());
        }
        let q = &mut self.queues[e.queue as usize];
        q.counts[state_slot(e.state)] -= 1;
        if e.state == State::Active {
            self.limit_freed |= q.limit.is_some();
            self.key_released(id);
        }
        Some(e)
    }

    /// Record a job that became `discarded` at `at_ms` in the dead-letter set.
    pub fn add_dead(&mut self, at_ms: i64, id: Uuid) {
        if let Some(old) = self.dead_at.insert(id, at_ms) {
            self.dead.remove(&(old, id));
        }
        self.dead.insert((at_ms, id));
    }

    /// Take a job out of the dead-letter set (retried or deleted).
    pub fn remove_dead(&mut self, id: Uuid) {
        match self.dead_at.remove(&id) {
            Some(at) => {
                self.dead.remove(&(at, id));
            }
            // Only when something was inserted into `dead` directly: the slow way.
            None if self.dead.len() != self.dead_at.len() => self.dead.retain(|(_, d)| *d != id),
            None => {}
        }
    }

    /// The available job of a queue that has waited longest (lowest FIFO seq), found by a
    /// scan of the heap: for QUEUE STATS, not for the hot path.
    pub fn oldest_available(&self, q: QueueId) -> Option<Uuid> {
        self.queues[q as usize]
            .heap
            .iter()
            .filter(|it| {
                self.jobs
                    .get(&it.id)
                    .is_some_and(|e| e.state == State::Available && e.seq == it.seq.0)
            })
            .min_by_key(|it| it.seq.0)
            .map(|it| it.id)
    }

    /// Pop the best available job of a queue, skipping stale heap items.
    pub fn pop_available(&mut self, q: QueueId) -> Option<Uuid> {
        let queue = &mut self.queues[q as usize];
        while let Some(item) = queue.heap.pop() {
            if let Some(e) = self.jobs.get(&item.id) {
                if e.state == State::Available && e.seq == item.seq.0 {
                    return Some(item.id);
                }
            }
        }
        None
    }

    /// Put back an available job that a FETCH popped but did not take (its rate limit was
    /// reached), in its old place.
    pub fn unpop(&mut self, q: QueueId, id: Uuid) {
        if let Some(e) = self.jobs.get(&id).filter(|e| e.state == State::Available) {
            let item = HeapItem {
                priority: e.priority,
                seq: Reverse(e.seq),
                id,
            };
            self.queues[q as usize].heap.push(item);
        }
    }

    /// Whether the job's `rate_limit` lets it start at `now` (engine ms).
    pub fn key_can_start(&mut self, p: &crate::job::rate_limit::RateLimitPolicy, now: i64) -> bool {
        let Some(ks) = self.keys.get_mut(p.key.as_str()) else {
            return p.concurrency != Some(0);
        };
        if let Some(w) = p.rate {
            ks.window = Some(w);
            ks.prune(now);
        }
        let busy = p.concurrency.is_some_and(|c| ks.active >= c);
        let window_full = p.rate.is_some_and(|w| ks.starts.full(w));
        let too_soon = p.throttle.is_some() && now < ks.next_start;
        !busy && !window_full && !too_soon
    }

    /// A job with `rate_limit` started at `now`.
    pub fn key_started(&mut self, id: Uuid, p: &crate::job::rate_limit::RateLimitPolicy, now: i64) {
        let key: std::sync::Arc<str> = match self.keys.get_key_value(p.key.as_str()) {
            Some((k, _)) => k.clone(),
            None => std::sync::Arc::from(p.key.as_str()),
        };
        let ks = self.keys.entry(key.clone()).or_default();
        ks.active = ks.active.saturating_add(1);
        if let Some(w) = p.rate {
            ks.window = Some(w);
            ks.starts.record(now, w);
        }
        if let Some(gap) = p.spacing_ms() {
            ks.next_start = now.saturating_add(gap);
        }
        self.keyed_active.insert(id, key);
    }

    /// A job left `active`: its key's slot is free again.
    fn key_released(&mut self, id: Uuid) {
        if let Some(key) = self.keyed_active.remove(&id) {
            if let Some(ks) = self.keys.get_mut(&key) {
                ks.active = ks.active.saturating_sub(1);
            }
            self.limit_freed = true;
        }
    }

    /// Forget the key starts that left their windows, and the keys with nothing left.
    pub fn prune_keys(&mut self, now: i64) {
        self.keys.retain(|_, ks| {
            ks.prune(now);
            ks.active > 0 || !ks.starts.is_empty() || ks.next_start > now
        });
    }

    /// The soonest a key's window or spacing lets a start again, after `now`.
    pub fn key_frees_at(&self, now: i64) -> Option<i64> {
        self.keys
            .values()
            .flat_map(|ks| {
                [
                    ks.window.and_then(|w| ks.starts.frees_at(w)),
                    Some(ks.next_start),
                ]
            })
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// Drop stale heap items once they outnumber live ones, so cancel-heavy loads stay bounded.
    fn compact(&mut self, q: usize) {
        let live = self.queues[q].count(State::Available);
        let queue = &self.queues[q];
        if queue.heap.len() <= 2 * live + 1024 {
            return;
        }
        let jobs = &self.jobs;
        let queue = &mut self.queues[q];
        let items = std::mem::take(&mut queue.heap).into_vec();
        queue.heap = items
            .into_iter()
            .filter(|it| {
                jobs.get(&it.id)
                    .is_some_and(|e| e.state == State::Available && e.seq == it.seq.0)
            })
            .collect();
    }

    /// The earliest timer, if any.
    pub fn next_timer(&self) -> Option<i64> {
        self.timers.first().map(|t| t.0)
    }

    /// Remove and return every timer due at or before `now`.
    pub fn take_due(&mut self, now: i64) -> Vec<(i64, Uuid, TimerKind)> {
        let mut due = Vec::new();
        while let Some(first) = self.timers.first() {
            if first.0 > now {
                break;
            }
            if let Some(t) = self.timers.pop_first() {
                due.push(t);
            }
        }
        due
    }

    /// Put back a timer taken by `take_due` but not handled yet.
    pub fn rearm(&mut self, t: (i64, Uuid, TimerKind)) {
        self.timers.insert(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(q: QueueId, priority: i64, seq: u64) -> Entry {
        Entry {
            state: State::Available,
            queue: q,
            priority,
            seq,
            timer: None,
            expires: None,
            worker: None,
            timeout_ms: 1000,
            bytes: 0,
        }
    }

    #[test]
    fn pops_by_priority_then_fifo_and_skips_stale() {
        let mut ix = Index::default();
        let q = ix.queue_id("default");
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        ix.insert(ids[0], entry(q, 0, 1));
        ix.insert(ids[1], entry(q, 5, 2));
        ix.insert(ids[2], entry(q, 0, 3));
        ix.insert(ids[3], entry(q, 5, 4));
        ix.set_state(ids[3], State::Cancelled, None);
        assert_eq!(ix.pop_available(q), Some(ids[1]));
        assert_eq!(ix.pop_available(q), Some(ids[0]));
        assert_eq!(ix.pop_available(q), Some(ids[2]));
        assert_eq!(ix.pop_available(q), None);
        assert_eq!(ix.queue(q).count(State::Cancelled), 1);
    }

    #[test]
    fn timers_fire_in_order_and_are_replaced() {
        let mut ix = Index::default();
        let q = ix.queue_id("default");
        let a = Uuid::now_v7();
        let mut e = entry(q, 0, 1);
        e.state = State::Scheduled;
        e.timer = Some((100, TimerKind::Promote));
        ix.insert(a, e);
        ix.set_timer(a, Some((50, TimerKind::Promote)));
        assert_eq!(ix.next_timer(), Some(50));
        assert!(ix.take_due(49).is_empty());
        assert_eq!(ix.take_due(60), vec![(50, a, TimerKind::Promote)]);
    }
}
