//! The worker registry: who is connected under which `wid`, when it was last heard from,
//! which jobs it holds, and the quiet/terminate directive waiting for its next BEAT.

use super::ConnId;
use crate::engine::request::WorkerDirective;
use crate::error::{ErrorCode, OjsError, OjsResult};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

#[derive(Debug)]
pub struct WorkerRec {
    pub info: Value,
    pub last_seen: i64,
    pub directive: Option<WorkerDirective>,
    pub held: HashSet<Uuid>,
    /// Open connections that said HELLO with this id.
    pub conns: usize,
    pub started: i64,
    pub completed: u64,
    /// Said HELLO on the Faktory port: when its heartbeats stop, its jobs stay reserved
    /// until their own timeout (`reserve_for`), as on Faktory.
    pub reserve: bool,
}

#[derive(Default)]
pub struct Workers {
    map: HashMap<Arc<str>, WorkerRec>,
}

impl Workers {
    fn entry(&mut self, wid: &Arc<str>, now: i64) -> &mut WorkerRec {
        self.map.entry(wid.clone()).or_insert_with(|| WorkerRec {
            info: Value::Null,
            last_seen: now,
            directive: None,
            held: HashSet::new(),
            conns: 0,
            started: now,
            completed: 0,
            reserve: false,
        })
    }

    /// A HELLO. Returns true when the worker was not connected before (it just started).
    pub fn register(&mut self, wid: Arc<str>, info: Value, now: i64, reserve: bool) -> bool {
        let w = self.entry(&wid, now);
        w.reserve = reserve;
        let fresh = w.conns == 0;
        if fresh {
            w.started = now;
        }
        w.info = info;
        w.last_seen = now;
        w.conns += 1;
        fresh
    }

    /// A connection closed. When it was the worker's last one, returns (jobs completed,
    /// start time) for its stopped event. The record stays while it holds jobs, so the
    /// heartbeat timeout can still requeue them.
    pub fn disconnect(&mut self, wid: &str) -> Option<(u64, i64)> {
        let w = self.map.get_mut(wid)?;
        w.conns = w.conns.saturating_sub(1);
        if w.conns > 0 {
            return None;
        }
        let out = (w.completed, w.started);
        if w.held.is_empty() {
            self.map.remove(wid);
        }
        Some(out)
    }

    pub fn completed(&mut self, wid: &str) {
        if let Some(w) = self.map.get_mut(wid) {
            w.completed += 1;
        }
    }

    pub fn get(&self, wid: &str) -> Option<&WorkerRec> {
        self.map.get(wid)
    }

    /// Any command from a worker counts as a sign of life.
    pub fn touch(&mut self, wid: &Arc<str>, now: i64) {
        self.entry(wid, now).last_seen = now;
    }

    pub fn hold(&mut self, wid: &Arc<str>, job: Uuid) {
        let now = self.map.get(wid).map(|w| w.last_seen).unwrap_or(0);
        self.entry(wid, now).held.insert(job);
    }

    pub fn release(&mut self, wid: &Arc<str>, job: Uuid) {
        if let Some(w) = self.map.get_mut(wid) {
            w.held.remove(&job);
        }
    }

    pub fn held(&self, wid: &str) -> Vec<Uuid> {
        self.map
            .get(wid)
            .map(|w| w.held.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The resident memory a worker reported, shown with its HELLO info.
    pub fn set_rss_kb(&mut self, wid: &str, kb: u64) {
        if let Some(Value::Object(info)) = self.map.get_mut(wid).map(|w| &mut w.info) {
            info.insert("rss_kb".into(), Value::from(kb));
        }
    }

    pub fn directive(&self, wid: &str) -> Option<WorkerDirective> {
        self.map.get(wid).and_then(|w| w.directive)
    }

    /// Quiet may not undo terminate: a worker only moves forward (ojs-worker-protocol §2.3).
    pub fn direct(&mut self, wid: &str, d: WorkerDirective) -> OjsResult<()> {
        let w = self.map.get_mut(wid).ok_or_else(|| {
            OjsError::new(ErrorCode::NotFound, format!("no worker with id {wid}"))
        })?;
        if w.directive != Some(WorkerDirective::Terminate) {
            w.directive = Some(d);
        }
        Ok(())
    }

    /// Remove workers not heard from since `cutoff`; returns the jobs each was holding and
    /// whether it was still connected (a disconnected worker was already announced stopped).
    /// Whether `wid` said HELLO on the Faktory port (its jobs keep their `reserve_for`).
    pub fn reserves(&self, wid: &str) -> bool {
        self.map.get(wid).is_some_and(|w| w.reserve)
    }

    /// Workers not seen since `cutoff`, removed: (id, jobs held, still connected, reserve).
    pub fn reap(&mut self, cutoff: i64) -> Vec<(Arc<str>, Vec<Uuid>, bool, bool)> {
        let dead: Vec<Arc<str>> = self
            .map
            .iter()
            .filter(|(_, w)| w.last_seen < cutoff)
            .map(|(k, _)| k.clone())
            .collect();
        dead.into_iter()
            .filter_map(|wid| {
                let w = self.map.remove(&wid)?;
                Some((wid, w.held.into_iter().collect(), w.conns > 0, w.reserve))
            })
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &WorkerRec)> {
        self.map.iter()
    }
}

/// Who a FETCH claims a job for.
#[derive(Debug, Clone, Copy)]
pub enum Holder<'a> {
    /// A worker id: its connections share the jobs, heartbeats keep them.
    Worker(&'a Arc<str>),
    /// A TCP connection without a worker id: the jobs go back when it closes.
    Conn(ConnId),
    /// Nobody to follow (HTTP without `worker_id`): the visibility timeout ends the claim.
    Nobody,
}

impl<'a> Holder<'a> {
    /// A worker id wins over the connection: a worker's jobs follow its heartbeats.
    pub fn of(wid: Option<&'a Arc<str>>, conn: Option<ConnId>) -> Holder<'a> {
        match (wid, conn) {
            (Some(w), _) => Holder::Worker(w),
            (None, Some(c)) => Holder::Conn(c),
            (None, None) => Holder::Nobody,
        }
    }

    pub fn wid(self) -> Option<&'a Arc<str>> {
        match self {
            Holder::Worker(w) => Some(w),
            _ => None,
        }
    }
}

/// The jobs held by connections without a worker id, both ways: by connection, to put
/// them back when it closes, and by job, so a job that changed hands since (settled,
/// requeued, fetched by someone else) is not touched.
#[derive(Default)]
pub struct ConnHolds {
    by_conn: HashMap<ConnId, HashSet<Uuid>>,
    of_job: HashMap<Uuid, ConnId>,
}

impl ConnHolds {
    pub fn hold(&mut self, conn: ConnId, job: Uuid) {
        if let Some(old) = self.of_job.insert(job, conn) {
            if let Some(set) = self.by_conn.get_mut(&old) {
                set.remove(&job);
            }
        }
        self.by_conn.entry(conn).or_default().insert(job);
    }

    /// The job is no longer held by a connection (settled, requeued or deleted).
    pub fn release(&mut self, job: Uuid) {
        let Some(conn) = self.of_job.remove(&job) else {
            return;
        };
        if let Some(set) = self.by_conn.get_mut(&conn) {
            set.remove(&job);
            if set.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
    }

    /// The connection closed: the jobs it still held, forgotten here.
    pub fn close(&mut self, conn: ConnId) -> Vec<Uuid> {
        let held = self.by_conn.remove(&conn).unwrap_or_default();
        held.into_iter()
            .filter(|j| self.of_job.remove(j).is_some())
            .collect()
    }

    /// Forget everything (FLUSH deleted every job).
    pub fn clear(&mut self) {
        self.by_conn.clear();
        self.of_job.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_connection_gives_back_only_what_it_still_holds() {
        let mut h = ConnHolds::default();
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        h.hold(1, a);
        h.hold(1, b);
        h.hold(1, c);
        h.release(b); // settled
        h.hold(2, c); // requeued and fetched by another connection
        assert_eq!(h.close(1), vec![a]);
        assert_eq!(h.close(1), Vec::<Uuid>::new());
        assert_eq!(h.close(2), vec![c]);
        assert!(h.by_conn.is_empty() && h.of_job.is_empty());
    }
}
