//! The outbox relay: for each partition this node holds, a task that hands the letters
//! its engine wrote for other partitions (a workflow's jobs in their queues, and the ends
//! of those jobs coming back: `engine/workflow/outbox.rs`) to the engines of those
//! partitions, through the router (a local engine, or the holder over the peer protocol),
//! and deletes them from the outbox once the receiver has committed them. A letter that
//! cannot be delivered now (its partition is moving, a peer is unreachable) stays and is
//! tried again; the letters to one partition are delivered in the order they were written.
//! The task ends with its engine (the partition was given up or taken over: the new
//! holder's relay carries on from the letters in the store).

use super::Router;
use crate::engine::request::{Command, Letter, WorkflowCmd};
use crate::engine::{Answer, EngineHandle};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Letters taken from the outbox at once.
const TAKE: usize = 256;
/// How long an idle relay sleeps without being woken (a lost wake-up costs this).
const IDLE: Duration = Duration::from_millis(200);
/// The pause after a failed delivery.
const RETRY: Duration = Duration::from_millis(500);
/// Warnings about failed deliveries, at most one per this.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Relay partition `part`'s outbox while `engine` serves it; `wake` is the engine's
/// `Config::outbox_wake`.
pub fn spawn(
    rt: &tokio::runtime::Handle,
    part: u32,
    engine: EngineHandle,
    router: Router,
    wake: Arc<Notify>,
) {
    rt.spawn(run(part, engine, router, wake));
}

async fn run(part: u32, engine: EngineHandle, router: Router, wake: Arc<Notify>) {
    let mut warned: Option<Instant> = None;
    loop {
        let serving = router
            .engine_of(part)
            .is_some_and(|e| e.same_engine(&engine));
        if router.is_stopping() || !serving {
            return;
        }
        let taken = engine
            .call(None, Command::Workflow(WorkflowCmd::Outbox { limit: TAKE }))
            .await;
        let posted = match taken {
            Ok(Answer::Letters(l)) => l,
            // The engine is stopping or its store is down: look again in a while.
            _ => {
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if posted.is_empty() {
            let _ = tokio::time::timeout(IDLE, wake.notified()).await;
            continue;
        }
        let mut by_part: BTreeMap<u32, (Vec<u64>, Vec<Letter>)> = BTreeMap::new();
        for p in posted {
            let e = by_part.entry(p.to).or_default();
            e.0.push(p.seq);
            e.1.push(p.letter);
        }
        let mut done = Vec::new();
        let mut failed = false;
        for (to, (seqs, letters)) in by_part {
            let cmd = Command::Workflow(WorkflowCmd::Deliver { part: to, letters });
            match router.call(None, cmd).await {
                Ok(_) => done.extend(seqs),
                Err(e) => {
                    failed = true;
                    if warned.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(from = part, to, error = %e,
                            "workflow letters not delivered yet; trying again");
                    }
                }
            }
        }
        if !done.is_empty() {
            let _ = engine
                .call(None, Command::Workflow(WorkflowCmd::Delivered(done)))
                .await;
        }
        if failed {
            tokio::time::sleep(RETRY).await;
        }
    }
}
