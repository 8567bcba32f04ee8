//! Requests that concern several partitions (cluster mode with more than one): a FETCH
//! over queues of several partitions, an ACK-and-FETCH whose job and queues are in
//! different ones, and what every partition answers (INFO, BEAT, worker directives).
//!
//! **A FETCH over several partitions** first asks each partition once without waiting, in
//! the order of the queues that name them, and hands out the first job found; the queue
//! order is kept within a partition, and across partitions as far as this first pass
//! goes. If none has a job and the FETCH may wait, it waits on all of them at once and
//! takes the first job offered; the others are cancelled, and a job one of them claimed
//! meanwhile goes back to its queue without spending an attempt (`Command::Unclaim`, or
//! the holder's side of a cancelled peer request). PROTOCOL.md §16 documents it.

use super::merge::{merge, per_partition};
use super::router::{claimed_ids, ready, Cluster, Target};
use crate::engine::request::{Command, CronCmd};
use crate::engine::{Answer, Answered, ConnId};
use crate::error::OjsError;
use futures_util::future::select_all;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// One partition's parked FETCH.
struct Parked {
    part: u32,
    rx: oneshot::Receiver<Answered>,
    /// Set when it was forwarded: the link and the request's id there, to cancel it.
    remote: Option<(Arc<super::link::Link>, u64)>,
}

fn has_jobs(a: &Answered) -> bool {
    match a {
        Ok(Answer::Job(_)) => true,
        Ok(Answer::Jobs(v)) => !v.is_empty(),
        _ => false,
    }
}

impl Cluster {
    /// A FETCH over queues of the partitions `parts`, answered through the receiver.
    pub(super) fn spawn_fetch(
        self: &Arc<Self>,
        parts: Vec<u32>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
    ) -> oneshot::Receiver<Answered> {
        let Command::Fetch {
            queues,
            count,
            wait,
        } = cmd
        else {
            return ready(Ok(Answer::Nothing));
        };
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let (part, a) = me
                .fetch_across(&parts, conn, wid.clone(), &queues, count, wait)
                .await;
            me.placed_from(part, &a);
            me.deliver(part, conn, wid, tx, a).await;
        });
        rx
    }

    /// The FETCH of `queues` (those of several partitions): the answer and the partition
    /// it came from.
    async fn fetch_across(
        self: &Arc<Self>,
        parts: &[u32],
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        queues: &[String],
        count: Option<usize>,
        wait: Option<Duration>,
    ) -> (u32, Answered) {
        let total = self.parts();
        let of = |p: u32| -> Vec<String> {
            queues
                .iter()
                .filter(|q| super::route::partition_of(q, total) == p)
                .cloned()
                .collect()
        };
        let fetch = |p: u32, wait| Command::Fetch {
            queues: of(p),
            count,
            wait,
        };
        // First pass: each partition once, without waiting.
        let mut first_err: Option<OjsError> = None;
        for &p in parts {
            let a = self
                .on(
                    p,
                    conn,
                    wid.clone(),
                    fetch(p, Some(Duration::ZERO)),
                    0,
                    false,
                )
                .await
                .await
                .unwrap_or_else(|_| Err(self.unreachable(Some(p), "no answer")));
            match a {
                Ok(Answer::Nothing) => {}
                Ok(Answer::Jobs(ref v)) if v.is_empty() => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
                a => return (p, a),
            }
        }
        if wait == Some(Duration::ZERO) {
            return (parts[0], first_err.map_or(Ok(Answer::Nothing), Err));
        }
        // Then wait on all of them; the first job offered wins.
        let mut parked = Vec::with_capacity(parts.len());
        for &p in parts {
            let cmd = fetch(p, wait);
            match self.target(p).await {
                Ok(Target::Local(h)) => parked.push(Parked {
                    part: p,
                    rx: h.submit_with(conn, wid.clone(), cmd, 0, false).await,
                    remote: None,
                }),
                Ok(Target::Remote(l)) => {
                    let (id, rx) = l.submit(p, conn, wid.clone(), cmd, 0, false).await;
                    parked.push(Parked {
                        part: p,
                        rx,
                        remote: Some((l, id)),
                    });
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        while !parked.is_empty() {
            let (a, i, _) = select_all(parked.iter_mut().map(|w| &mut w.rx)).await;
            let w = parked.swap_remove(i);
            let a = a.unwrap_or_else(|_| Err(self.unreachable(Some(w.part), "no answer")));
            if has_jobs(&a) {
                self.cancel(parked, conn, wid).await;
                return (w.part, a);
            }
            if let Err(e) = a {
                first_err.get_or_insert(e);
            }
        }
        (parts[0], first_err.map_or(Ok(Answer::Nothing), Err))
    }

    /// Stop waiting on `parked`; what a local engine handed out meanwhile goes back (a
    /// holder does the same for a cancelled peer request).
    async fn cancel(
        self: &Arc<Self>,
        parked: Vec<Parked>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
    ) {
        for mut w in parked {
            match w.remote {
                Some((l, id)) => l.cancel(id),
                None => {
                    w.rx.close();
                    if let Ok(Ok(a)) = w.rx.try_recv() {
                        let ids = claimed_ids(&a);
                        if !ids.is_empty() {
                            let _ = self
                                .on(
                                    w.part,
                                    conn,
                                    wid.clone(),
                                    Command::Unclaim { ids },
                                    0,
                                    false,
                                )
                                .await
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// An ACK-and-FETCH whose job is in partition `part`: one engine answers both when its
    /// queues are in the same partition; otherwise the ACK, once durable, then the FETCH.
    pub(super) async fn ack_fetch(
        self: &Arc<Self>,
        part: u32,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
    ) -> oneshot::Receiver<Answered> {
        let Command::AckFetch {
            id,
            result,
            queues,
            wait,
        } = cmd
        else {
            return ready(Ok(Answer::Nothing));
        };
        let total = self.parts();
        let mut fetch_parts: Vec<u32> = Vec::new();
        for q in &queues {
            let p = super::route::partition_of(q, total);
            if !fetch_parts.contains(&p) {
                fetch_parts.push(p);
            }
        }
        if fetch_parts == [part] {
            let cmd = Command::AckFetch {
                id,
                result,
                queues,
                wait,
            };
            let rx = self.on(part, conn, wid.clone(), cmd, 0, false).await;
            return self.placing(part, conn, wid, rx);
        }
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let ack = Command::Ack {
                id,
                result,
                handed_out: false,
            };
            let acked = me
                .on(part, conn, wid.clone(), ack, 0, false)
                .await
                .await
                .unwrap_or_else(|_| Err(me.unreachable(Some(part), "no answer")));
            if let Err(e) = acked {
                let _ = tx.send(Err(e));
                return;
            }
            let (p, a) = match fetch_parts.as_slice() {
                [] => (part, Ok(Answer::Nothing)),
                _ => {
                    me.fetch_across(&fetch_parts, conn, wid.clone(), &queues, None, wait)
                        .await
                }
            };
            me.placed_from(p, &a);
            me.deliver(p, conn, wid, tx, a).await;
        });
        rx
    }

    /// A request every partition answers (INFO, BEAT, WORKER, CLOCK ADVANCE), merged.
    pub(super) fn spawn_all(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
    ) -> oneshot::Receiver<Answered> {
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let answers = me.ask_all(conn, wid, &per_partition(&cmd)).await;
            let _ = tx.send(merge(&cmd, answers));
        });
        rx
    }

    /// `cmd` on every partition, their answers in partition order.
    async fn ask_all(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: &Command,
    ) -> Vec<Answered> {
        let mut asked = Vec::new();
        for p in 0..self.parts() {
            asked.push(self.on(p, conn, wid.clone(), cmd.clone(), 0, false).await);
        }
        let mut answers = Vec::with_capacity(asked.len());
        for (p, rx) in asked.into_iter().enumerate() {
            answers.push(
                rx.await
                    .unwrap_or_else(|_| Err(self.unreachable(Some(p as u32), "no answer"))),
            );
        }
        answers
    }

    /// A request about a named thing that lives in one partition (a cron registration, a
    /// workflow): the first answer that is neither `NOT_FOUND` nor an error of a partition
    /// that could not answer; else the first such error (the thing may be in that
    /// partition), or `NOT_FOUND`.
    pub(super) fn spawn_find(
        self: &Arc<Self>,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        viewed: bool,
    ) -> oneshot::Receiver<Answered> {
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            use crate::error::ErrorCode;
            let mut out = Err(OjsError::new(ErrorCode::NotFound, "not found"));
            let mut unanswered = None;
            for p in 0..me.parts() {
                let a = me
                    .on(p, conn, wid.clone(), cmd.clone(), 0, viewed)
                    .await
                    .await
                    .unwrap_or_else(|_| Err(me.unreachable(Some(p), "no answer")));
                match a {
                    Err(e) if e.code == ErrorCode::NotFound => out = Err(e),
                    Err(e) if e.code == ErrorCode::BackendUnavailable => {
                        unanswered.get_or_insert(e);
                    }
                    a => {
                        out = a;
                        unanswered = None;
                        break;
                    }
                }
            }
            let _ = tx.send(unanswered.map_or(out, Err));
        });
        rx
    }

    /// CRON ADD on its queue's partition `part`; a registration of the same name in
    /// another partition (its queue changed) is removed once the new one is in.
    pub(super) fn spawn_cron_add(
        self: &Arc<Self>,
        part: u32,
        wid: Option<Arc<str>>,
        cmd: Command,
    ) -> oneshot::Receiver<Answered> {
        let Command::Cron(CronCmd::Add(def)) = &cmd else {
            return ready(Ok(Answer::Nothing));
        };
        let name = def.name.clone();
        let (tx, rx) = oneshot::channel();
        let me = self.clone();
        tokio::spawn(async move {
            let mut a = me
                .on(part, None, wid.clone(), cmd, 0, false)
                .await
                .await
                .unwrap_or_else(|_| Err(me.unreachable(Some(part), "no answer")));
            if a.is_ok() {
                for p in (0..me.parts()).filter(|p| *p != part) {
                    let del = Command::Cron(CronCmd::Del(name.clone()));
                    let gone = me.on(p, None, wid.clone(), del, 0, false).await.await;
                    if let (Ok(Ok(_)), Ok(Answer::CronJob(j))) = (&gone, &mut a) {
                        // It replaced the one in the other partition.
                        j.created = Some(false);
                    }
                }
            }
            let _ = tx.send(a);
        });
        rx
    }
}
