//! What one engine batch changes, before it is committed: decoded job bodies that were
//! touched (so several changes to one job cost one write), metadata writes, and the replies
//! that may only be sent once the commit is durable.

use super::api::{Answer, Answered, JobView};
use super::lean::{JobMut, Lean};
pub use super::stored::{backend, read_job};
use super::stored::{load_body, load_job, load_lean, Loaded};
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::parts::Parts;
use crate::job::Job;
use crate::store::{Batch, Store};
use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};
use tokio::sync::oneshot;
use uuid::Uuid;

/// A reply whose body may be a job written by this same batch.
pub enum Out {
    Answer(Answered),
    Job(Uuid),
    /// Jobs claimed by a FETCH (one object, or an array when `array`). If this reply
    /// cannot be delivered, the claim is undone. `early`: the reply may leave before its
    /// batch is durable (see `commit.rs`); false when it also confirms a change that must
    /// be durable first (ACK with `fetch`).
    Claimed {
        ids: Vec<Uuid>,
        array: bool,
        early: bool,
    },
}

/// A job as the batch or the cache holds it: decoded, or lean (its records, for the
/// transitions that change only the state record: `lean.rs`). Boxed: it moves between the
/// batch and the cache, and the maps that hold it rehash, so it should be a pointer.
enum Held {
    Full(Box<Job>),
    Lean(Box<Lean>),
}

impl Held {
    /// The job decoded (a lean one from its records).
    fn decoded(&self, parts: &Parts) -> OjsResult<Job> {
        match self {
            Held::Full(j) => Ok((**j).clone()),
            Held::Lean(l) => l.decode(parts),
        }
    }

    /// What the cache keeps of it: lean where the job's records would load lean (a decoded
    /// job's `Value` trees cost ~4x its encoded size; the hot path's claim and ACK work on
    /// a lean job, and anything else decodes it again from the same parts).
    fn for_cache(self, parts: &Parts) -> Held {
        match self {
            Held::Full(j) => match Lean::of_job(&j, parts) {
                Some(l) => Held::Lean(Box::new(l)),
                None => Held::Full(j),
            },
            lean => lean,
        }
    }

    fn is_terminal(&self) -> bool {
        match self {
            Held::Full(j) => j.state.is_terminal(),
            Held::Lean(l) => l.st.state.is_terminal(),
        }
    }

    /// The envelope clients see.
    fn compose(&self, parts: &Parts, out: &mut Vec<u8>) {
        match self {
            Held::Full(j) => parts.compose(j, out),
            Held::Lean(l) => l.compose(parts, out),
        }
    }
}

/// A job this batch touched, with its client-supplied part already encoded once known
/// (always, for a lean job).
struct Touched {
    job: Held,
    parts: Option<Parts>,
    /// The job's JSON as a reply of this batch already composed it, while the job has not
    /// changed since (PUSH replies): a later reply of the batch reuses it.
    body: Option<Bytes>,
    /// Whether the job record must be written (a new job, or one stored in an older
    /// format); otherwise only the state record is.
    record: bool,
    /// Whether the batch may have changed the job (`job_mut`, `insert_job`); a job only
    /// looked at (`job_lean` without `change`) is not written.
    changed: bool,
    /// Whether the job goes to the cache when the batch is sealed (if not finished).
    keep: bool,
}

/// The maps keyed by job id on the engine's hot path: foldhash (randomly seeded per map,
/// as hashbrown's own default) instead of SipHash, whose cost showed in every touch.
pub type IdMap<V> = HashMap<Uuid, V, foldhash::fast::RandomState>;

#[derive(Default)]
pub struct Txn {
    /// `None` marks a deletion. Taken from the cache's spare map, so that a batch does
    /// not grow a fresh one from nothing (its rehashes were ~5% of the engine's time).
    jobs: IdMap<Option<Touched>>,
    /// The engine's job cache, lent to the batch: jobs are taken from it on first
    /// touch and put back when the batch is sealed.
    pub cache: JobCache,
    pub batch: Batch,
    pub out: Vec<(oneshot::Sender<Answered>, Out)>,
    /// Events of this batch, in cursor order; written to the log when the batch is sealed.
    pub events: Vec<crate::events::Event>,
}

/// Recently written, not yet finished jobs, decoded, with their encoded client part: a
/// FETCH shortly after PUSH, or an ACK shortly after FETCH, neither reads nor decodes the
/// stored record nor re-encodes the envelope. Bounded in jobs and in bytes; the oldest
/// insertions go first. Large jobs are never kept: decoded, a JSON payload takes several
/// times its encoded size, and a queue of 1 MiB jobs held that way took 4.3x the payload
/// in memory. Those are read from the store when touched.
pub struct JobCache {
    map: IdMap<(u64, Held, Parts)>,
    /// Insertion order as (id, tick); an entry whose tick no longer matches is stale.
    order: VecDeque<(Uuid, u64)>,
    tick: u64,
    cap: usize,
    /// Encoded bytes of the cached jobs' client parts, and the most kept.
    bytes: usize,
    max_bytes: usize,
    /// The batch's job map, emptied, lent back and forth with the cache (`Txn::jobs`).
    spare: IdMap<Option<Touched>>,
}

/// A batch map larger than this (a bulk action's) is not kept for the next batch.
const SPARE_MAX: usize = 4096;

/// Jobs kept: one per KiB of `CACHE_BYTES`.
pub(super) const CACHE_JOBS: usize = 65_536;

/// Most encoded client bytes kept in all: the default of `--job-cache-mb`. A job that
/// would load lean is kept lean (its parts and a few fields, ~1.5x its encoded size in
/// memory; a decoded one took ~4x): 64 MiB of them did 6-37% more jobs/s than 16 in
/// batch mode for +74 MiB of RSS with 1,000,000 queued (bench/RESULTS.md, round 12).
pub const CACHE_BYTES: usize = 64 << 20;

/// Encoded bytes per cached job the job count is sized by (`JobCache::sized`).
const BYTES_PER_JOB: usize = CACHE_BYTES / CACHE_JOBS;

/// Jobs larger than this (encoded client part) are not cached.
const CACHE_JOB_MAX_BYTES: usize = 16 << 10;

impl Default for JobCache {
    fn default() -> Self {
        JobCache::with_capacity(CACHE_JOBS)
    }
}

impl JobCache {
    pub fn with_capacity(cap: usize) -> JobCache {
        JobCache {
            map: IdMap::default(),
            order: VecDeque::new(),
            tick: 0,
            cap,
            bytes: 0,
            max_bytes: CACHE_BYTES,
            spare: IdMap::default(),
        }
    }

    /// A cache of at most `bytes` encoded bytes (`--job-cache-mb`), and one job per KiB of
    /// them (16 MiB: 16,384 jobs, the default).
    pub fn sized(bytes: usize) -> JobCache {
        let mut c = JobCache::with_capacity(bytes / BYTES_PER_JOB);
        c.max_bytes = bytes;
        c
    }

    fn put(&mut self, id: Uuid, job: Held, parts: Parts) {
        if self.cap == 0 || parts.len() > CACHE_JOB_MAX_BYTES {
            self.remove(id);
            return;
        }
        self.tick += 1;
        self.bytes += parts.len();
        if let Some((_, _, old)) = self.map.insert(id, (self.tick, job, parts)) {
            self.bytes -= old.len();
        }
        self.order.push_back((id, self.tick));
        while self.map.len() > self.cap || self.bytes > self.max_bytes {
            let Some((old, tick)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|e| e.0 == tick) {
                self.remove(old);
            }
        }
        // Jobs taken and put back leave stale order entries; drop them now and then.
        if self.order.len() > 4 * self.cap.max(1024) {
            let map = &self.map;
            self.order
                .retain(|(id, tick)| map.get(id).is_some_and(|e| e.0 == *tick));
        }
    }

    fn take(&mut self, id: Uuid) -> Option<(Held, Parts)> {
        let (_, job, parts) = self.map.remove(&id)?;
        self.bytes -= parts.len();
        Some((job, parts))
    }

    fn get(&self, id: Uuid) -> Option<(&Held, &Parts)> {
        self.map.get(&id).map(|(_, job, parts)| (job, parts))
    }

    fn remove(&mut self, id: Uuid) {
        if let Some((_, _, parts)) = self.map.remove(&id) {
            self.bytes -= parts.len();
        }
    }

    /// How many jobs it keeps at most.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

impl Txn {
    /// A batch that may use (and will refill) the engine's cache.
    pub fn with_cache(mut cache: JobCache) -> Txn {
        Txn {
            jobs: std::mem::take(&mut cache.spare),
            cache,
            ..Txn::default()
        }
    }

    /// The job's entry in this batch, loaded (from the cache or the store) on first use;
    /// with `lean`, left lean or loaded lean where it can be (`lean.rs`).
    fn entry(&mut self, store: &dyn Store, id: Uuid, lean: bool) -> OjsResult<&mut Touched> {
        let slot = match self.jobs.entry(id) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let touched = match self.cache.take(id) {
                    Some((job, parts)) => Touched {
                        job,
                        parts: Some(parts),
                        body: None,
                        record: false,
                        changed: false,
                        keep: true,
                    },
                    None => {
                        let missing = || backend(format!("job {id} is indexed but not stored"));
                        let loaded = if lean {
                            load_lean(store, id)?
                        } else {
                            load_job(store, id)?.map(|d| Loaded::Full(Box::new(d)))
                        };
                        match loaded.ok_or_else(missing)? {
                            Loaded::Lean(l, parts) => Touched {
                                job: Held::Lean(l),
                                parts: Some(parts),
                                body: None,
                                record: false,
                                changed: false,
                                keep: true,
                            },
                            Loaded::Full(f) => Touched {
                                job: Held::Full(Box::new(f.job)),
                                parts: Some(f.parts),
                                body: None,
                                record: f.rewrite,
                                changed: false,
                                keep: true,
                            },
                        }
                    }
                };
                v.insert(Some(touched))
            }
        };
        let t = slot
            .as_mut()
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} was deleted")))?;
        if !lean {
            if let Held::Lean(l) = &t.job {
                let parts = t
                    .parts
                    .as_ref()
                    .ok_or_else(|| backend("a lean job without parts"))?;
                t.job = Held::Full(Box::new(l.decode(parts)?));
            }
        }
        Ok(t)
    }

    /// The job's entry, decoded.
    fn slot(&mut self, store: &dyn Store, id: Uuid) -> OjsResult<&mut Touched> {
        self.entry(store, id, false)
    }

    /// The job body for modification, loaded into this batch on first touch.
    pub fn job_mut(&mut self, store: &dyn Store, id: Uuid) -> OjsResult<&mut Job> {
        let t = self.slot(store, id)?;
        t.body = None; // the caller may change the job
        t.changed = true;
        match &mut t.job {
            Held::Full(j) => Ok(j),
            Held::Lean(_) => Err(backend("a job left lean by slot")),
        }
    }

    /// The job for a FETCH's claim or an ACK, lean where it can be (`lean.rs`); with
    /// `change`, written at the end of the batch as `job_mut`'s is.
    pub fn job_lean(&mut self, store: &dyn Store, id: Uuid, change: bool) -> OjsResult<JobMut<'_>> {
        let t = self.entry(store, id, true)?;
        if change {
            t.body = None;
            t.changed = true;
        }
        Ok(match &mut t.job {
            Held::Full(j) => JobMut::Full(j),
            Held::Lean(l) => JobMut::Lean(l),
        })
    }

    /// A read-only view: this batch's copy if it has one, else the cache's or the store's.
    pub fn job(&self, store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
        let decoded = |job: &Held, parts: Option<&Parts>| match (job, parts) {
            (Held::Full(j), _) => Ok((**j).clone()),
            (held, Some(parts)) => held.decoded(parts),
            (Held::Lean(_), None) => Err(backend("a lean job without parts")),
        };
        match self.jobs.get(&id) {
            Some(Some(t)) => decoded(&t.job, t.parts.as_ref()).map(Some),
            Some(None) => Ok(None),
            None => match self.cache.get(id) {
                Some((job, parts)) => decoded(job, Some(parts)).map(Some),
                None => read_job(store, id),
            },
        }
    }

    /// The job as this batch left it, if the batch touched it, did not delete it, and
    /// holds it decoded (a job it created always is).
    pub fn touched(&self, id: Uuid) -> Option<&Job> {
        match &self.jobs.get(&id)?.as_ref()?.job {
            Held::Full(j) => Some(j),
            Held::Lean(_) => None,
        }
    }

    /// A job created by this batch, with its client part already encoded if the caller has it.
    /// `keep`: whether to cache it decoded (not worth it for a job that will be evicted
    /// before anyone touches it again, behind a deep backlog).
    pub fn insert_job(&mut self, id: Uuid, job: Job, parts: Option<Parts>, keep: bool) {
        let touched = Touched {
            job: Held::Full(Box::new(job)),
            parts,
            body: None,
            record: true,
            changed: true,
            keep,
        };
        self.jobs.insert(id, Some(touched));
    }

    pub fn delete_job(&mut self, id: Uuid) {
        self.jobs.insert(id, None);
        self.cache.remove(id);
    }

    pub fn reply(&mut self, to: oneshot::Sender<Answered>, out: Out) {
        self.out.push((to, out));
    }

    /// The current JSON of jobs in this batch, in order (jobs it does not hold are left
    /// out). Each body is kept for the store write while the job does not change again.
    pub fn snapshot(&mut self, ids: &[Uuid]) -> Vec<JobView> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(Some(t)) = self.jobs.get_mut(id) {
                let mut one = Vec::with_capacity(1024);
                let parts = match (&t.job, &mut t.parts) {
                    (_, Some(p)) => &*p,
                    (Held::Full(job), p) => &*p.insert(Parts::of(job)),
                    (Held::Lean(_), None) => continue, // never: a lean job has its parts
                };
                t.job.compose(parts, &mut one);
                let one = Bytes::from(one);
                t.body = Some(one.clone());
                out.push(JobView::encoded(one));
            }
        }
        out
    }

    /// Turn touched jobs into store writes: the state record of each, and the job record
    /// of new ones. Returns the JSON of each written job a reply of this batch shows, so
    /// replies need not read it back. Unfinished jobs go (back) to the cache.
    pub fn seal(&mut self, seq_of: impl Fn(Uuid) -> u64) -> HashMap<Uuid, Bytes> {
        let shown: HashSet<Uuid> = self
            .out
            .iter()
            .flat_map(|(_, out)| match out {
                Out::Job(id) => std::slice::from_ref(id),
                Out::Claimed { ids, .. } => ids.as_slice(),
                Out::Answer(_) => &[],
            })
            .copied()
            .collect();
        let mut written = HashMap::with_capacity(shown.len());
        for (id, touched) in self.jobs.drain() {
            match touched {
                Some(Touched {
                    job,
                    parts,
                    body,
                    record,
                    changed,
                    keep,
                }) => {
                    let parts = match (&job, parts) {
                        (_, Some(p)) => p,
                        (Held::Full(j), None) => Parts::of(j),
                        (Held::Lean(_), None) => continue, // never: a lean job has its parts
                    };
                    if changed {
                        let seq = seq_of(id);
                        match &job {
                            Held::Full(j) => {
                                debug_assert!(
                                    record || parts == Parts::of(j),
                                    "job {id}: a client-supplied attribute changed after PUSH; \
                                     only the state record would have been written"
                                );
                                super::stored::put(&mut self.batch, id, seq, j, &parts, record);
                            }
                            // Only the state record: a lean job's record is never rewritten.
                            Held::Lean(l) => super::stored::put_state(&mut self.batch, id, seq, l),
                        }
                    }
                    if shown.contains(&id) {
                        let body = body.unwrap_or_else(|| {
                            let mut v = Vec::with_capacity(1024);
                            job.compose(&parts, &mut v);
                            Bytes::from(v)
                        });
                        written.insert(id, body);
                    }
                    if job.is_terminal() || !keep {
                        self.cache.remove(id);
                    } else {
                        self.cache.put(id, job.for_cache(&parts), parts);
                    }
                }
                None => {
                    super::stored::delete(&mut self.batch, id);
                    self.cache.remove(id);
                }
            }
        }
        if self.jobs.capacity() <= SPARE_MAX {
            self.cache.spare = std::mem::take(&mut self.jobs);
        }
        written
    }
}

/// Resolve the replies of a committed batch.
pub fn resolve(
    out: Out,
    written: &HashMap<Uuid, Bytes>,
    cache: &JobCache,
    store: &dyn Store,
) -> Answered {
    let body = |id: &Uuid| -> OjsResult<Bytes> {
        if let Some(b) = written.get(id) {
            return Ok(b.clone());
        }
        if let Some((job, parts)) = cache.get(*id) {
            let mut buf = Vec::new();
            job.compose(parts, &mut buf);
            return Ok(Bytes::from(buf));
        }
        load_body(store, *id)?
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} not found")))
    };
    match out {
        Out::Answer(a) => a,
        Out::Job(id) => body(&id).map(|b| Answer::Job(JobView::encoded(b))),
        Out::Claimed {
            ids, array: false, ..
        } if ids.len() == 1 => body(&ids[0]).map(|b| Answer::Job(JobView::encoded(b))),
        Out::Claimed { ids, .. } => ids
            .iter()
            .map(|id| body(id).map(JobView::encoded))
            .collect::<OjsResult<Vec<_>>>()
            .map(Answer::Jobs),
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::job;
    use super::*;
    use crate::job::State;

    #[test]
    fn a_push_reply_body_is_reused_only_while_its_job_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::FjallStore::open(dir.path(), 1 << 20).unwrap();
        let (a, ja, pa) = job(1);
        let (b, jb, pb) = job(2);
        let mut txn = Txn::default();
        txn.insert_job(a, ja, Some(pa), true);
        txn.insert_job(b, jb, Some(pb), true);
        let replied: Vec<serde_json::Value> = txn
            .snapshot(&[a, b])
            .iter()
            .map(|v| serde_json::from_slice(v.json()).unwrap())
            .collect();
        // A waiting FETCH claims b later in the same batch.
        let claimed = txn.job_mut(&store, b).unwrap();
        claimed.state = State::Active;
        claimed.attempt = 1;
        for id in [a, b] {
            txn.reply(oneshot::channel().0, Out::Job(id));
        }
        let written = txn.seal(|_| 1);
        let json =
            |id: Uuid| -> serde_json::Value { serde_json::from_slice(&written[&id]).unwrap() };
        assert_eq!(json(a), replied[0]);
        assert_eq!(replied[1]["state"], "available");
        assert_eq!(
            (json(b)["state"].clone(), json(b)["attempt"].clone()),
            ("active".into(), 1.into())
        );
        // Two new jobs: a job record and a state record each.
        assert_eq!(txn.batch.ops.len(), 4);
        store.commit(std::mem::take(&mut txn.batch)).unwrap();
        // What is stored composes back to what `written` says, byte for byte.
        for id in [a, b] {
            let stored = load_body(&store, id).unwrap().unwrap();
            assert_eq!(stored, written[&id]);
        }
    }

    #[test]
    fn a_job_only_peeked_at_is_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::FjallStore::open(dir.path(), 1 << 20).unwrap();
        let (a, ja, pa) = job(1);
        let mut txn = Txn::default();
        txn.insert_job(a, ja, Some(pa), true);
        txn.seal(|_| 1);
        store.commit(std::mem::take(&mut txn.batch)).unwrap();
        // Peeked from the cache, then from the store: nothing to write either time.
        for cache in [txn.cache, JobCache::default()] {
            let mut t = Txn::with_cache(cache);
            assert_eq!(t.job_lean(&store, a, false).unwrap().attempt(), 0);
            assert_eq!(
                t.job(&store, a).unwrap().unwrap().args,
                vec![serde_json::json!(1)]
            );
            t.seal(|_| 1);
            assert!(t.batch.is_empty());
        }
        // A peek then a change: written once.
        let mut t = Txn::default();
        t.job_lean(&store, a, false).unwrap();
        t.job_mut(&store, a).unwrap().attempt = 1;
        t.seal(|_| 1);
        assert_eq!(t.batch.len(), 1, "the state record only");
    }

    #[test]
    fn cache_keeps_the_newest_insertions_within_its_bound() {
        let mut c = JobCache::with_capacity(3);
        let jobs: Vec<_> = (0..5).map(job).collect();
        for (id, j, p) in &jobs[..3] {
            c.put(*id, Held::Full(Box::new(j.clone())), p.clone());
        }
        // Taking and putting back the oldest makes it the newest.
        let (j, p) = c.take(jobs[0].0).unwrap();
        c.put(jobs[0].0, j, p);
        c.put(
            jobs[3].0,
            Held::Full(Box::new(jobs[3].1.clone())),
            jobs[3].2.clone(),
        );
        assert_eq!(c.len(), 3);
        assert!(
            c.get(jobs[1].0).is_none(),
            "the oldest insertion went first"
        );
        assert!(c.get(jobs[0].0).is_some());
        c.put(
            jobs[4].0,
            Held::Full(Box::new(jobs[4].1.clone())),
            jobs[4].2.clone(),
        );
        assert!(c.get(jobs[2].0).is_none());
        assert_eq!(
            c.get(jobs[4].0)
                .and_then(|(j, p)| j.decoded(p).ok())
                .map(|j| j.args),
            Some(vec![4.into()])
        );
        c.remove(jobs[4].0);
        assert!(c.take(jobs[4].0).is_none());
    }

    #[test]
    fn cache_keeps_no_large_job_and_bounds_its_bytes() {
        let mut c = JobCache::with_capacity(1 << 20);
        let (id, mut j, _) = job(0);
        j.args = vec![serde_json::Value::String(
            "x".repeat(CACHE_JOB_MAX_BYTES + 1),
        )];
        let p = Parts::of(&j);
        c.put(id, Held::Full(Box::new(j.clone())), p);
        assert!(
            c.get(id).is_none(),
            "a large job is read from the store instead"
        );
        // Many mid-sized jobs: the byte bound holds however many fit the count bound.
        j.args = vec![serde_json::Value::String(
            "x".repeat(CACHE_JOB_MAX_BYTES / 2),
        )];
        for _ in 0..(4 * CACHE_BYTES / CACHE_JOB_MAX_BYTES) {
            c.put(
                Uuid::now_v7(),
                Held::Full(Box::new(j.clone())),
                Parts::of(&j),
            );
        }
        assert!(c.bytes <= CACHE_BYTES, "{} bytes cached", c.bytes);
        let counted: usize = c.map.values().map(|(_, _, p)| p.len()).sum();
        assert_eq!(counted, c.bytes);
    }

    /// `--job-cache-mb`: the byte bound given, and one job per KiB of it.
    #[test]
    fn a_sized_cache_holds_its_bytes_and_its_jobs() {
        let d = JobCache::sized(CACHE_BYTES);
        assert_eq!((d.cap, d.max_bytes), (CACHE_JOBS, CACHE_BYTES));
        let mut c = JobCache::sized(8 * 1024);
        assert_eq!(c.cap, 8);
        let (_, mut j, _) = job(0);
        j.args = vec![serde_json::Value::String("x".repeat(3000))];
        for _ in 0..10 {
            c.put(
                Uuid::now_v7(),
                Held::Full(Box::new(j.clone())),
                Parts::of(&j),
            );
        }
        assert!(
            c.bytes <= 8 * 1024 && c.len() == 2,
            "{} bytes, {} jobs",
            c.bytes,
            c.len()
        );
        let mut none = JobCache::sized(0);
        let (id, j, p) = job(1);
        none.put(id, Held::Full(Box::new(j)), p);
        assert_eq!(none.len(), 0);
    }

    #[test]
    fn cache_order_does_not_grow_with_churn() {
        let mut c = JobCache::with_capacity(2);
        let (id, j, p) = job(0);
        c.put(id, Held::Full(Box::new(j)), p);
        for _ in 0..100_000 {
            let (j, p) = c.take(id).unwrap();
            c.put(id, j, p);
        }
        assert!(
            c.order.len() <= 4 * 1024 + 1,
            "order holds {}",
            c.order.len()
        );
        assert_eq!(c.len(), 1);
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod cache_tests;
