//! Workflows across partitions (cluster mode with `--partitions` > 1): a workflow lives in
//! one partition (its home: the partition of the queue of its first job), and its jobs in
//! the partitions of their queues. What one partition's engine needs of another's travels
//! as a [`Letter`] through a transactional outbox:
//!
//! - a letter is written into the sender's store **in the same commit as its cause** (the
//!   step that made the workflow enqueue a job; the ACK that finished a job), so a crash
//!   either keeps both or neither;
//! - the node that holds the sender's partition hands its letters to the receiving
//!   partition's engine (`cluster/relay.rs`: a local engine, or the holder over the peer
//!   protocol), which applies them in its own commit and answers after it; only then are
//!   they deleted from the outbox. A letter may so arrive twice (the sender crashed between
//!   the receiver's commit and its own delete), never not at all;
//! - the receiver applies each letter idempotently: a job enqueued twice under its id is
//!   enqueued once; a job settled twice advances its workflow once (the home forgets a job
//!   when it settles it). Exactly-once callbacks therefore hold across a failover of
//!   either side.
//!
//! Letters from one partition to another are delivered in the order they were written.
//! A partition that runs a workflow job for another partition's workflow keeps a small
//! record of it (`o/r<job id>`: home, workflow, node), written with the job and deleted
//! with the letter that reports its end.
//!
//! Store layout (space `o/`): `l<u64 BE>` a letter not yet delivered (JSON `[to,
//! letter]`), `r<16-byte job id>` a job run for another partition's workflow.
//!
//! Memory: the letters waiting for delivery are kept in memory, whole, up to
//! `Config::outbox_memory` bytes (their encoded size); past that a letter is kept only in
//! the store, with its number, receiver and size in memory, and read back from the store
//! when the relay takes it. A receiver that stays unreachable therefore costs disk, not
//! memory.

use super::records::{Outcome, Settle};
use crate::engine::txn::Txn;
use crate::engine::Engine;
use crate::error::OjsResult;
use crate::job::validate::NewJob;
use crate::job::State;
use crate::store::{Space, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// Most letters one `WorkflowCmd::Outbox` hands out.
pub const TAKE_MAX: usize = 1024;

/// What one partition's engine asks of another's about a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Letter {
    /// Home → the job's partition: enqueue this workflow job.
    Enqueue {
        job: Box<NewJob>,
        len: usize,
        home: u32,
        workflow: String,
        node: u32,
    },
    /// Home → the job's partition: its workflow was cancelled; cancel the job unless it
    /// is running (a running job finishes, and its end is reported as usual).
    Cancel { job: Uuid },
    /// The job's partition → home: the job was claimed (the first claim starts a
    /// workflow).
    Started { workflow: String, job: Uuid },
    /// The job's partition → home: the job finished, or could not be enqueued.
    Settled {
        workflow: String,
        node: u32,
        job: Uuid,
        settle: Settle,
    },
}

/// A letter in the outbox: its number there, and the partition it goes to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Posted {
    pub seq: u64,
    pub to: u32,
    pub letter: Letter,
}

/// A job this partition runs for another partition's workflow.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remote {
    home: u32,
    workflow: String,
    node: u32,
    /// Its claim was reported (not stored: reporting it again is harmless).
    #[serde(skip)]
    started: bool,
}

/// A letter not yet delivered: its receiver, its encoded size, and the letter itself
/// unless it is kept in the store only (the outbox's memory was full when it was written).
struct Held {
    to: u32,
    len: usize,
    letter: Option<Letter>,
}

#[derive(Default)]
pub(in crate::engine) struct Outbox {
    letters: BTreeMap<u64, Held>,
    /// The encoded size of the letters held in memory (`Held::letter` is `Some`).
    held_bytes: usize,
    next: u64,
    remote: HashMap<Uuid, Remote>,
}

impl Outbox {
    /// Keep letter `seq` of `len` encoded bytes, in memory while it fits in `cap`.
    fn keep(&mut self, seq: u64, to: u32, letter: Letter, len: usize, cap: usize) {
        let fits = self.held_bytes.saturating_add(len) <= cap;
        if fits {
            self.held_bytes = self.held_bytes.saturating_add(len);
        }
        let letter = fits.then_some(letter);
        if let Some(old) = self.letters.insert(seq, Held { to, len, letter }) {
            self.forget(&old);
        }
    }

    fn forget(&mut self, h: &Held) {
        if h.letter.is_some() {
            self.held_bytes = self.held_bytes.saturating_sub(h.len);
        }
    }

    /// Letters waiting, and the bytes of those held in memory.
    #[cfg(test)]
    pub(in crate::engine) fn usage(&self) -> (usize, usize) {
        (self.letters.len(), self.held_bytes)
    }
}

impl Outbox {
    /// FLUSH (of every partition): its letters and records go too.
    pub(super) fn flush(&self, batch: &mut crate::store::Batch) {
        for seq in self.letters.keys() {
            batch.delete(Space::Outbox, &letter_key(*seq));
        }
        for uid in self.remote.keys() {
            batch.delete(Space::Outbox, &remote_key(*uid));
        }
    }
}

fn letter_key(seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(b'l');
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn remote_key(uid: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.push(b'r');
    k.extend_from_slice(uid.as_bytes());
    k
}

impl Engine {
    /// Write `letter` to partition `to` into this batch.
    pub(super) fn post(&mut self, txn: &mut Txn, to: u32, letter: Letter) {
        let ob = &mut self.workflows.outbox;
        let seq = ob.next;
        ob.next = ob.next.saturating_add(1);
        // Serializing cannot fail: every map key is a string.
        let v = serde_json::to_vec(&(to, &letter)).unwrap_or_default();
        let len = v.len();
        txn.batch.put(Space::Outbox, &letter_key(seq), v);
        ob.keep(seq, to, letter, len, self.cfg.outbox_memory);
        if let Some(w) = &self.cfg.outbox_wake {
            w.notify_one();
        }
    }

    /// The oldest letters not yet delivered, at most `limit`. Every letter this returns
    /// is committed: the answer is sent after the batch it was read in. A letter kept in
    /// the store only is read from it; one that is not there yet (written in the batch
    /// being built) ends the list, so that letters stay in order: the relay, woken by its
    /// writing, takes it after this batch's commit. One that cannot be decoded is dropped
    /// (as the rebuild skips it), with a warning.
    pub(in crate::engine) fn outbox_take(&mut self, txn: &mut Txn, limit: usize) -> Vec<Posted> {
        let mut out = Vec::new();
        let mut unreadable = Vec::new();
        for (seq, held) in self.workflows.outbox.letters.iter().take(limit) {
            let letter = match &held.letter {
                Some(l) => l.clone(),
                None => match self.store.get(Space::Outbox, &letter_key(*seq)) {
                    Ok(Some(v)) => match serde_json::from_slice::<(u32, Letter)>(&v) {
                        Ok((_, l)) => l,
                        Err(e) => {
                            tracing::warn!(seq, error = %e, "an unreadable outbox letter is dropped");
                            unreadable.push(*seq);
                            continue;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(seq, error = %e, "an outbox letter could not be read");
                        break;
                    }
                },
            };
            out.push(Posted {
                seq: *seq,
                to: held.to,
                letter,
            });
        }
        self.outbox_delivered(txn, &unreadable);
        out
    }

    /// The receivers committed these letters: delete them.
    pub(in crate::engine) fn outbox_delivered(&mut self, txn: &mut Txn, seqs: &[u64]) {
        for seq in seqs {
            if let Some(h) = self.workflows.outbox.letters.remove(seq) {
                self.workflows.outbox.forget(&h);
                txn.batch.delete(Space::Outbox, &letter_key(*seq));
            }
        }
    }

    /// Apply letters another partition sent, in order, in this batch.
    pub(in crate::engine) fn outbox_deliver(&mut self, txn: &mut Txn, letters: Vec<Letter>) {
        for letter in letters {
            match letter {
                Letter::Enqueue {
                    job,
                    len,
                    home,
                    workflow,
                    node,
                } => self.enqueue_for(txn, *job, len, home, workflow, node),
                Letter::Cancel { job } => {
                    let cancellable =
                        self.workflows.outbox.remote.contains_key(&job)
                            && self.index.jobs.get(&job).is_some_and(|e| {
                                !e.state.is_terminal() && e.state != State::Active
                            });
                    // Its end comes back through `remote_settled`.
                    if cancellable {
                        let _ = self.cancel(txn, job, None);
                    }
                }
                Letter::Started { job, .. } => self.workflow_job_started(txn, job),
                Letter::Settled {
                    workflow,
                    node,
                    job,
                    settle,
                } => {
                    let ours = self.workflows.by_job.get(&job);
                    if ours.is_some_and(|(w, n)| *w == workflow && *n == node) {
                        self.workflow_node_settled(txn, job, settle);
                    }
                }
            }
        }
    }

    /// Enqueue a job of another partition's workflow; one already enqueued under the id
    /// for it is not enqueued again.
    fn enqueue_for(
        &mut self,
        txn: &mut Txn,
        new: NewJob,
        len: usize,
        home: u32,
        workflow: String,
        node: u32,
    ) {
        let Ok(uid) = Uuid::parse_str(&new.job.id) else {
            return;
        };
        if self.workflows.outbox.remote.contains_key(&uid) {
            return;
        }
        let pushed = if self.index.jobs.contains_key(&uid) {
            Err(crate::error::OjsError::new(
                crate::error::ErrorCode::DuplicateJob,
                format!("a job with id {uid} already exists"),
            ))
        } else {
            self.push_typed(txn, new, len)
        };
        match pushed {
            Ok(uid) => {
                let r = Remote {
                    home,
                    workflow,
                    node,
                    started: false,
                };
                let v = serde_json::to_vec(&r).unwrap_or_default();
                txn.batch.put(Space::Outbox, &remote_key(uid), v);
                self.workflows.outbox.remote.insert(uid, r);
            }
            Err(e) => {
                tracing::warn!(workflow = %workflow, node, error = %e,
                    "a workflow job of another partition could not be enqueued");
                let error = json!({"code": e.code.as_str(), "message": e.message, "attempt": 0});
                let settle = Settle {
                    outcome: Outcome::Failed(error),
                    attempt: 0,
                    started_at: None,
                };
                let letter = Letter::Settled {
                    workflow,
                    node,
                    job: uid,
                    settle,
                };
                self.post(txn, home, letter);
            }
        }
    }

    /// Home: enqueue node `node`'s job in partition `to` (through the outbox). The job
    /// counts as enqueued from now on; if `to` cannot enqueue it, its failure comes back.
    pub(super) fn enqueue_elsewhere(
        &mut self,
        txn: &mut Txn,
        workflow: &str,
        node: u32,
        to: u32,
        new: NewJob,
        len: usize,
    ) -> OjsResult<Uuid> {
        crate::job::template::check_len(len, &self.cfg.limits)?;
        let uid = Uuid::parse_str(&new.job.id).map_err(|_| {
            crate::error::OjsError::new(
                crate::error::ErrorCode::InvalidPayload,
                "the job's id is not a UUID",
            )
        })?;
        let letter = Letter::Enqueue {
            job: Box::new(new),
            len,
            home: self.cfg.partition.index,
            workflow: workflow.to_string(),
            node,
        };
        self.post(txn, to, letter);
        Ok(uid)
    }

    /// A job run for another partition's workflow reached a terminal state, or was
    /// deleted: report it home. Whether `uid` was one.
    pub(super) fn remote_settled(&mut self, txn: &mut Txn, uid: Uuid, state: State) -> bool {
        let Some(r) = self.workflows.outbox.remote.remove(&uid) else {
            return false;
        };
        txn.batch.delete(Space::Outbox, &remote_key(uid));
        let settle = self.settle_of_job(txn, uid, state);
        let letter = Letter::Settled {
            workflow: r.workflow,
            node: r.node,
            job: uid,
            settle,
        };
        self.post(txn, r.home, letter);
        true
    }

    /// A job run for another partition's workflow was claimed: report its first claim.
    pub(super) fn remote_started(&mut self, txn: &mut Txn, uid: Uuid) {
        let Some(r) = self.workflows.outbox.remote.get_mut(&uid) else {
            return;
        };
        if std::mem::replace(&mut r.started, true) {
            return;
        }
        let (home, workflow) = (r.home, r.workflow.clone());
        self.post(txn, home, Letter::Started { workflow, job: uid });
    }

    /// Whether `uid` is a job this partition runs for another partition's workflow.
    pub(super) fn is_remote_job(&self, uid: &Uuid) -> bool {
        self.workflows.outbox.remote.contains_key(uid)
    }

    /// Start-up: the letters not yet delivered and the jobs run for other partitions;
    /// a job among those that finished unseen is reported in `txn`.
    pub(super) fn rebuild_outbox(&mut self, txn: &mut Txn) -> Result<(), StoreError> {
        let mut ob = Outbox::default();
        let cap = self.cfg.outbox_memory;
        let mut bad = 0usize;
        self.store.scan(Space::Outbox, &mut |k, v| {
            match k.split_first() {
                Some((b'l', seq)) => {
                    let seq = <[u8; 8]>::try_from(seq).map(u64::from_be_bytes);
                    match (seq, serde_json::from_slice::<(u32, Letter)>(v)) {
                        (Ok(seq), Ok((to, l))) => {
                            ob.next = ob.next.max(seq.saturating_add(1));
                            ob.keep(seq, to, l, v.len(), cap);
                        }
                        _ => bad += 1,
                    }
                }
                Some((b'r', id)) => match (Uuid::from_slice(id), serde_json::from_slice(v)) {
                    (Ok(uid), Ok(r)) => {
                        ob.remote.insert(uid, r);
                    }
                    _ => bad += 1,
                },
                _ => bad += 1,
            }
            true
        })?;
        if bad > 0 {
            tracing::warn!(records = bad, "unreadable outbox records were skipped");
        }
        self.workflows.outbox = ob;
        let stale: Vec<(Uuid, State)> = self
            .workflows
            .outbox
            .remote
            .keys()
            .filter_map(|uid| match self.index.jobs.get(uid) {
                None => Some((*uid, State::Discarded)),
                Some(e) if e.state.is_terminal() => Some((*uid, e.state)),
                Some(_) => None,
            })
            .collect();
        for (uid, state) in stale {
            self.remote_settled(txn, uid, state);
        }
        let (letters, remote) = (
            self.workflows.outbox.letters.len(),
            self.workflows.outbox.remote.len(),
        );
        if letters + remote > 0 {
            tracing::info!(
                letters,
                jobs = remote,
                "workflow letters to other partitions rebuilt"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_letter(ob: &mut Outbox, seq: u64) {
        let h = ob.letters.remove(&seq).unwrap();
        ob.forget(&h);
    }

    /// Letters past the memory cap are kept by number only; delivering a letter held in
    /// memory frees its bytes for the next.
    #[test]
    fn letters_past_the_memory_cap_are_kept_in_the_store_only() {
        let mut ob = Outbox::default();
        let l = Letter::Cancel { job: Uuid::nil() };
        for seq in 0..10 {
            ob.keep(seq, 1, l.clone(), 100, 350);
        }
        assert_eq!(ob.usage(), (10, 300));
        let held: Vec<u64> = ob
            .letters
            .iter()
            .filter(|(_, h)| h.letter.is_some())
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(held, [0, 1, 2]);
        drop_letter(&mut ob, 0);
        assert_eq!(ob.usage(), (9, 200));
        ob.keep(10, 1, l.clone(), 100, 350);
        assert_eq!(ob.usage(), (10, 300));
        // One kept in the store only frees nothing.
        drop_letter(&mut ob, 5);
        assert_eq!(ob.usage(), (9, 300));
        // Nothing fits in no memory.
        let mut none = Outbox::default();
        none.keep(0, 1, l, 1, 0);
        assert_eq!(none.usage(), (1, 0));
    }
}
