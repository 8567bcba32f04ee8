//! Unique jobs in the engine (ojs-unique-jobs). Every job carrying a `unique` policy is
//! indexed under its uniqueness key for as long as the job exists. A PUSH checks the key
//! against the index with the new job's policy — a holder counts when it is in one of the
//! policy's `states` and inside its `period` — so a key is released the moment its holder
//! leaves those states or the period runs out, with no timer. The check and the insert
//! happen in the single writer, in one batch: the guarantee is strong (§8.1).
//!
//! The index is memory only; the rebuild at start recomputes it from the stored jobs.
//! PUSH and PUSHB themselves live here too: validate, check the key, store.

use crate::engine::api::{Answer, Answered, JobView};
use crate::engine::jobs::Prepared;
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::parts::Parts;
use crate::job::template::check_len;
use crate::job::unique::{OnConflict, UniqueKey, UniquePolicy};
use crate::job::validate::NewJob;
use crate::job::{Job, State};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// The jobs of a PUSH, PUSHB (all or nothing) or Faktory PUSHB (each on its own), prepared
/// on the caller's thread (`Work::of`).
pub(in crate::engine) enum PushWork {
    One(Box<OjsResult<Prepared>>),
    Batch(Vec<OjsResult<Prepared>>),
    Each(Vec<OjsResult<Prepared>>),
}

impl Engine {
    /// Enqueue a PUSH's jobs. The reply is the envelope as accepted, even if a waiting FETCH
    /// claims the job later in this same batch.
    pub(in crate::engine) fn push_work(
        &mut self,
        txn: &mut Txn,
        work: PushWork,
    ) -> OjsResult<crate::engine::txn::Out> {
        use crate::engine::txn::Out;
        match work {
            PushWork::One(job) => self
                .push_one(txn, *job)
                .map(|p| Out::Answer(self.pushed_reply(txn, &[p], false))),
            PushWork::Batch(jobs) => self
                .push_batch_all(txn, jobs)
                .map(|p| Out::Answer(self.pushed_reply(txn, &p, true))),
            PushWork::Each(jobs) => {
                let mut pushed = crate::engine::api::Each::default();
                for (i, job) in jobs.into_iter().enumerate() {
                    match self.push_one(txn, job) {
                        Ok(_) => pushed.accepted += 1,
                        Err(e) => pushed.rejected.push((i, e)),
                    }
                }
                Ok(crate::engine::answer_of(Answer::PushedEach(pushed)))
            }
        }
    }
}

#[derive(Default)]
pub struct UniqueIndex {
    /// Jobs holding each key, oldest first.
    by_key: HashMap<UniqueKey, Vec<Uuid>>,
    /// Each indexed job's key and `created_at` (ms).
    of_job: HashMap<Uuid, (UniqueKey, i64)>,
}

impl UniqueIndex {
    pub fn add(&mut self, id: Uuid, key: UniqueKey, created_ms: i64) {
        self.by_key.entry(key).or_default().push(id);
        self.of_job.insert(id, (key, created_ms));
    }

    pub fn forget(&mut self, id: Uuid) {
        let Some((key, _)) = self.of_job.remove(&id) else {
            return;
        };
        if let Some(ids) = self.by_key.get_mut(&key) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }

    /// The jobs holding `key`, with their creation time.
    fn holders(&self, key: &UniqueKey) -> impl Iterator<Item = (Uuid, i64)> + '_ {
        self.by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| self.of_job.get(id).map(|(_, c)| (*id, *c)))
    }
}

/// The policy and key of a job, if it has a valid `unique` attribute.
pub(in crate::engine) fn policy_of(job: &Job) -> Option<(UniquePolicy, UniqueKey)> {
    let policy = UniquePolicy::parse(job.unique.as_ref()?, &job.args).ok()?;
    let key = policy.key(&job.job_type, &job.queue, &job.args, &job.meta);
    Some((policy, key))
}

/// The outcome of one PUSHed job.
#[derive(Debug, Clone, Copy)]
pub struct Pushed {
    pub id: Uuid,
    /// `on_conflict: ignore` met a duplicate: `id` is the existing job, nothing was stored.
    pub deduplicated: bool,
}

/// What to do with a validated job once its key has been checked.
pub(in crate::engine) enum Admit {
    /// Store it (with its key), cancelling these jobs first (`replace`, §5.2).
    Insert {
        cancel: Vec<Uuid>,
        key: Option<UniqueKey>,
    },
    /// Answer with this existing job instead (`ignore`, §5.4).
    Existing(Uuid),
}

/// Jobs of one PUSHB admitted so far, seen by the checks of the jobs after them, so a
/// batch is decided in full before anything in it is applied (all or nothing).
#[derive(Default)]
pub(in crate::engine) struct Overlay {
    /// (id, key, state it will start in, scheduled_at)
    added: Vec<(Uuid, UniqueKey, State, Option<String>)>,
    cancelled: HashSet<Uuid>,
}

/// `DUPLICATE_JOB job <existing id> is <state> and holds the same unique key (<hex>)...`:
/// the existing id is always the second word, for clients that want it.
fn duplicate(holder: Uuid, state: State, key: &UniqueKey, why: &str) -> OjsError {
    OjsError::new(
        ErrorCode::DuplicateJob,
        format!(
            "job {holder} is {} and holds the same unique key ({}){why}",
            state.as_str(),
            hex::encode(key)
        ),
    )
}

impl Engine {
    /// The id of the job that answers the PUSH: the new one, or the existing one when a
    /// `unique` policy with `on_conflict: ignore` met a duplicate.
    /// A job the server made from a template (cron, workflows), checked for size here.
    pub(in crate::engine) fn push_typed(
        &mut self,
        txn: &mut Txn,
        new: NewJob,
        len: usize,
    ) -> OjsResult<Uuid> {
        check_len(len, &self.cfg.limits)?;
        Ok(self.push_one(txn, Prepared::typed(new, len))?.id)
    }

    /// PUSH: validate, check the uniqueness key, store.
    pub(in crate::engine) fn push_one(
        &mut self,
        txn: &mut Txn,
        job: OjsResult<Prepared>,
    ) -> OjsResult<Pushed> {
        if let Ok(p) = &job {
            if let Some(id) = self.resent(txn, p)? {
                return Ok(Pushed {
                    id,
                    deduplicated: true,
                });
            }
        }
        let (id, mut p) = self.validate_new(job)?;
        let admit = self.admit(txn, id, &mut p.new, &mut Overlay::default())?;
        self.apply_admit(txn, id, p, admit)
    }

    /// A PUSH that may be a resend (`Command::Push::resend`) of a job stored under the same
    /// id with the same client-supplied attributes: that job answers it, whatever its state
    /// now. A different job under the id is still refused as a duplicate.
    fn resent(&self, txn: &Txn, p: &Prepared) -> OjsResult<Option<Uuid>> {
        if !p.resend || !self.index.jobs.contains_key(&p.id) {
            return Ok(None);
        }
        let Some(stored) = txn.job(self.store.as_ref(), p.id)? else {
            return Ok(None);
        };
        let mine = p.parts.clone().unwrap_or_else(|| Parts::of(&p.new.job));
        Ok((Parts::of(&stored) == mine).then_some(p.id))
    }

    /// All or nothing: every job is validated and its uniqueness decided before any is
    /// inserted.
    pub(in crate::engine) fn push_batch_all(
        &mut self,
        txn: &mut Txn,
        jobs: Vec<OjsResult<Prepared>>,
    ) -> OjsResult<Vec<Pushed>> {
        let mut valid = Vec::with_capacity(jobs.len());
        let mut seen = HashSet::with_capacity(jobs.len());
        for (i, job) in jobs.into_iter().enumerate() {
            let (id, new) = self.validate_new(job).map_err(|e| OjsError {
                message: format!("job {i}: {}; no job was enqueued", e.message),
                ..e
            })?;
            if !seen.insert(id) {
                return Err(OjsError::new(
                    ErrorCode::DuplicateJob,
                    format!("job {i}: id {id} appears twice in the batch; no job was enqueued"),
                ));
            }
            valid.push((id, new));
        }
        let total: u64 = valid.iter().map(|(_, p)| p.len as u64).sum();
        self.check_queued_bytes(total).map_err(|e| OjsError {
            message: format!("{}; no job was enqueued", e.message),
            ..e
        })?;
        let mut overlay = Overlay::default();
        let mut planned = Vec::with_capacity(valid.len());
        for (i, (id, mut new)) in valid.into_iter().enumerate() {
            let admit = self
                .admit(txn, id, &mut new.new, &mut overlay)
                .map_err(|e| OjsError {
                    message: format!("job {i}: {}; no job was enqueued", e.message),
                    ..e
                })?;
            planned.push((id, new, admit));
        }
        planned
            .into_iter()
            .map(|(id, new, admit)| self.apply_admit(txn, id, new, admit))
            .collect()
    }

    /// Check a new job's uniqueness key (read only; the PUSH applies the result).
    pub(in crate::engine) fn admit(
        &self,
        txn: &Txn,
        id: Uuid,
        new: &mut NewJob,
        overlay: &mut Overlay,
    ) -> OjsResult<Admit> {
        let Some(u) = &new.job.unique else {
            return Ok(Admit::Insert {
                cancel: Vec::new(),
                key: None,
            });
        };
        let policy = UniquePolicy::parse(u, &new.job.args)?;
        let job = &new.job;
        let key = policy.key(&job.job_type, &job.queue, &job.args, &job.meta);
        let now_ms = self.now_ms();
        // (id, state, created_ms, scheduled_at of a batch job)
        let mut found: Vec<(Uuid, State, i64, Option<String>)> = Vec::new();
        for (hid, created) in self.index.unique.holders(&key) {
            let Some(e) = self.index.jobs.get(&hid) else {
                continue;
            };
            if !overlay.cancelled.contains(&hid) && policy.counts(e.state, created, now_ms) {
                found.push((hid, e.state, created, None));
            }
        }
        for (bid, bkey, state, at) in &overlay.added {
            if *bkey == key
                && !overlay.cancelled.contains(bid)
                && policy.counts(*state, now_ms, now_ms)
            {
                found.push((*bid, *state, now_ms, at.clone()));
            }
        }
        // The newest holder answers for the key.
        let Some((holder, hstate, _, hsched)) = found.iter().max_by_key(|f| f.2).cloned() else {
            overlay.added.push((
                id,
                key,
                start_state(new, now_ms),
                new.job.scheduled_at.clone(),
            ));
            return Ok(Admit::Insert {
                cancel: Vec::new(),
                key: Some(key),
            });
        };
        match policy.on_conflict {
            OnConflict::Reject => Err(duplicate(holder, hstate, &key, "")),
            OnConflict::Ignore => Ok(Admit::Existing(holder)),
            OnConflict::Replace | OnConflict::ReplaceExceptSchedule => {
                // An active job may have side effects under way: it is never replaced.
                if let Some(a) = found.iter().find(|f| f.1 == State::Active) {
                    let why = "; an active job is never replaced";
                    return Err(duplicate(a.0, a.1, &key, why));
                }
                if policy.on_conflict == OnConflict::ReplaceExceptSchedule
                    && hstate == State::Scheduled
                {
                    // §5.3: the replacement keeps the schedule of the job it replaces.
                    new.job.scheduled_at = match hsched {
                        Some(at) => Some(at),
                        None => txn
                            .job(self.store.as_ref(), holder)?
                            .and_then(|j| j.scheduled_at),
                    };
                }
                let cancel: Vec<Uuid> = found.iter().map(|f| f.0).collect();
                overlay.cancelled.extend(cancel.iter().copied());
                overlay.added.push((
                    id,
                    key,
                    start_state(new, now_ms),
                    new.job.scheduled_at.clone(),
                ));
                Ok(Admit::Insert {
                    cancel,
                    key: Some(key),
                })
            }
        }
    }

    /// Apply a decision of `admit`: cancel what is replaced (before the insert, §5.2),
    /// then store the job and index its key.
    pub(in crate::engine) fn apply_admit(
        &mut self,
        txn: &mut Txn,
        id: Uuid,
        new: Prepared,
        admit: Admit,
    ) -> OjsResult<Pushed> {
        match admit {
            Admit::Existing(holder) => Ok(Pushed {
                id: holder,
                deduplicated: true,
            }),
            Admit::Insert { cancel, key } => {
                for old in cancel {
                    self.cancel(txn, old, None)?;
                }
                self.insert_new(txn, id, new);
                if let Some(key) = key {
                    let created = self.now_ms();
                    self.index.unique.add(id, key, created);
                }
                Ok(Pushed {
                    id,
                    deduplicated: false,
                })
            }
        }
    }

    /// A job coming back from the dead-letter set must not make a second holder of a key
    /// another job holds now (judged by the retried job's own policy).
    pub(in crate::engine) fn unique_clear_for(&self, txn: &Txn, uid: Uuid) -> OjsResult<()> {
        let Some(job) = txn.job(self.store.as_ref(), uid)? else {
            return Ok(());
        };
        let Some((policy, key)) = policy_of(&job) else {
            return Ok(());
        };
        let now_ms = self.now_ms();
        for (hid, created) in self.index.unique.holders(&key) {
            let Some(e) = self.index.jobs.get(&hid) else {
                continue;
            };
            if hid != uid && policy.counts(e.state, created, now_ms) {
                return Err(duplicate(hid, e.state, &key, ""));
            }
        }
        Ok(())
    }

    /// The PUSH/PUSHB reply: the stored envelopes, with an existing job (plus
    /// `"deduplicated": true`, not stored) standing in for each ignored duplicate.
    pub(in crate::engine) fn pushed_reply(
        &self,
        txn: &mut Txn,
        pushed: &[Pushed],
        array: bool,
    ) -> Answered {
        let views = if !pushed.iter().any(|p| p.deduplicated) {
            let ids: Vec<Uuid> = pushed.iter().map(|p| p.id).collect();
            txn.snapshot(&ids)
        } else {
            let mut out = Vec::with_capacity(pushed.len());
            for p in pushed {
                let job = txn
                    .job(self.store.as_ref(), p.id)?
                    .ok_or_else(|| crate::engine::jobs::not_found(&p.id.to_string()))?;
                let mut v = serde_json::to_value(&job).unwrap_or_default();
                if let (true, Some(m)) = (p.deduplicated, v.as_object_mut()) {
                    m.insert("deduplicated".into(), serde_json::Value::Bool(true));
                }
                let bytes = serde_json::to_vec(&v).unwrap_or_default();
                out.push(JobView::encoded(bytes.into()));
            }
            out
        };
        Ok(match (array, <[JobView; 1]>::try_from(views)) {
            (false, Ok([one])) => Answer::Job(one),
            (_, Ok(one)) => Answer::Jobs(one.into()),
            (_, Err(all)) => Answer::Jobs(all),
        })
    }

    /// Index the keys of stored jobs (the rebuild at start).
    pub(in crate::engine) fn index_unique(&mut self, found: Vec<(Uuid, UniqueKey, i64)>) {
        for (id, key, created) in found {
            if self.index.jobs.contains_key(&id) {
                self.index.unique.add(id, key, created);
            }
        }
    }
}

/// The state `insert_new` will give a job (for the checks of later jobs in a batch).
fn start_state(new: &NewJob, now_ms: i64) -> State {
    let at = new.job.scheduled_time().map(|t| t.timestamp_millis());
    match at {
        _ if new.pending => State::Pending,
        Some(at) if at > now_ms => State::Scheduled,
        _ => State::Available,
    }
}

impl UniqueIndex {
    /// For INFO: how many jobs hold a key.
    pub fn jobs(&self) -> usize {
        self.of_job.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_releases_the_key() {
        let mut ix = UniqueIndex::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        ix.add(a, [1; 32], 10);
        ix.add(b, [1; 32], 20);
        assert_eq!(
            ix.holders(&[1; 32]).collect::<Vec<_>>(),
            vec![(a, 10), (b, 20)]
        );
        ix.forget(a);
        ix.forget(a);
        assert_eq!(ix.holders(&[1; 32]).collect::<Vec<_>>(), vec![(b, 20)]);
        ix.forget(b);
        assert!(ix.jobs() == 0 && ix.by_key.is_empty());
    }
}
