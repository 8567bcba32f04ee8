//! What one engine batch changes, before it is committed: decoded job bodies that were
//! touched (so several changes to one job cost one write), metadata writes, and the replies
//! that may only be sent once the commit is durable.

use crate::error::{ErrorCode, OjsError, OjsResult};
use crate::job::Job;
use crate::protocol::Reply;
use crate::store::{Batch, Space, Store};
use bytes::Bytes;
use std::collections::HashMap;
use tokio::sync::oneshot;
use uuid::Uuid;

/// A reply whose body may be a job written by this same batch.
pub enum Out {
    Reply(Reply),
    Job(Uuid),
    /// Jobs claimed by a FETCH (one object, or an array when `array`). If this reply
    /// cannot be delivered, the claim is undone.
    Claimed {
        ids: Vec<Uuid>,
        array: bool,
    },
}

#[derive(Default)]
pub struct Txn {
    /// `None` marks a deletion.
    pub jobs: HashMap<Uuid, Option<Job>>,
    pub batch: Batch,
    pub out: Vec<(oneshot::Sender<Reply>, Out)>,
    /// Events of this batch, in cursor order; their log records are already in `batch`.
    pub events: Vec<crate::events::Event>,
}

const RECORD_VERSION: u8 = 1;
const HEADER: usize = 9;

/// A stored job record: version byte, FIFO sequence, then the envelope JSON clients see.
pub fn encode_record(seq: u64, job: &Job) -> Vec<u8> {
    let mut v = Vec::with_capacity(512);
    v.push(RECORD_VERSION);
    v.extend_from_slice(&seq.to_be_bytes());
    // Serializing a Job cannot fail: every map key is a string.
    let _ = serde_json::to_writer(&mut v, job);
    v
}

pub fn decode_record(bytes: &[u8]) -> Option<(u64, &[u8])> {
    if bytes.len() < HEADER || bytes[0] != RECORD_VERSION {
        return None;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&bytes[1..HEADER]);
    Some((u64::from_be_bytes(seq), &bytes[HEADER..]))
}

pub fn backend(msg: impl std::fmt::Display) -> OjsError {
    OjsError::new(ErrorCode::BackendError, msg.to_string())
}

pub fn read_job(store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
    let Some(raw) = store.get(Space::Job, id.as_bytes()).map_err(backend)? else {
        return Ok(None);
    };
    let (_, json) = decode_record(&raw).ok_or_else(|| backend(format!("job {id}: bad record")))?;
    serde_json::from_slice(json)
        .map(Some)
        .map_err(|e| backend(format!("job {id}: {e}")))
}

impl Txn {
    /// The job body for modification, loaded into this batch on first touch.
    pub fn job_mut(&mut self, store: &dyn Store, id: Uuid) -> OjsResult<&mut Job> {
        let slot = match self.jobs.entry(id) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let job = read_job(store, id)?
                    .ok_or_else(|| backend(format!("job {id} is indexed but not stored")))?;
                v.insert(Some(job))
            }
        };
        slot.as_mut()
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} was deleted")))
    }

    /// A read-only view: this batch's copy if it has one, else the store's.
    pub fn job(&self, store: &dyn Store, id: Uuid) -> OjsResult<Option<Job>> {
        match self.jobs.get(&id) {
            Some(j) => Ok(j.clone()),
            None => read_job(store, id),
        }
    }

    pub fn reply(&mut self, to: oneshot::Sender<Reply>, out: Out) {
        self.out.push((to, out));
    }

    /// The current JSON of jobs in this batch: one object, or an array when `array`.
    pub fn snapshot(&self, ids: &[Uuid], array: bool) -> Bytes {
        let mut buf = Vec::with_capacity(ids.len() * 512 + 2);
        if array {
            buf.push(b'[');
        }
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            if let Some(Some(job)) = self.jobs.get(id) {
                let _ = serde_json::to_writer(&mut buf, job);
            }
        }
        if array {
            buf.push(b']');
        }
        Bytes::from(buf)
    }

    /// Turn touched jobs into store writes; returns the JSON of each written job so replies
    /// can reuse it instead of serializing again.
    pub fn seal(&mut self, seq_of: impl Fn(Uuid) -> u64) -> HashMap<Uuid, Bytes> {
        let mut written = HashMap::with_capacity(self.jobs.len());
        for (id, job) in self.jobs.drain() {
            match job {
                Some(job) => {
                    let rec = encode_record(seq_of(id), &job);
                    written.insert(id, Bytes::copy_from_slice(&rec[HEADER..]));
                    self.batch.put(Space::Job, id.as_bytes(), rec);
                }
                None => self.batch.delete(Space::Job, id.as_bytes()),
            }
        }
        written
    }
}

/// Resolve the replies of a committed batch.
pub fn resolve(out: Out, written: &HashMap<Uuid, Bytes>, store: &dyn Store) -> Reply {
    let body = |id: &Uuid| -> OjsResult<Bytes> {
        if let Some(b) = written.get(id) {
            return Ok(b.clone());
        }
        let raw = store
            .get(Space::Job, id.as_bytes())
            .map_err(backend)?
            .ok_or_else(|| OjsError::new(ErrorCode::NotFound, format!("job {id} not found")))?;
        let (_, json) = decode_record(&raw).ok_or_else(|| backend("bad record"))?;
        Ok(Bytes::copy_from_slice(json))
    };
    match out {
        Out::Reply(r) => r,
        Out::Job(id) => match body(&id) {
            Ok(b) => Reply::Bulk(b),
            Err(e) => Reply::Error(e),
        },
        Out::Claimed { ids, array: false } if ids.len() == 1 => match body(&ids[0]) {
            Ok(b) => Reply::Bulk(b),
            Err(e) => Reply::Error(e),
        },
        Out::Claimed { ids, .. } => {
            let mut buf = Vec::with_capacity(ids.len() * 512 + 2);
            buf.push(b'[');
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                match body(id) {
                    Ok(b) => buf.extend_from_slice(&b),
                    Err(e) => return Reply::Error(e),
                }
            }
            buf.push(b']');
            Reply::Bulk(Bytes::from(buf))
        }
    }
}
