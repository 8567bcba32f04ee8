//! Workflows across partitions (`engine/workflow/outbox.rs`, `relay.rs`), on four
//! partitions' engines of one node: a chain whose steps alternate between two partitions
//! runs each step once, in its queue's partition, with its parent's result; letters
//! delivered twice take effect once; a cancelled workflow cancels its job in another
//! partition. Across real nodes and a kill -9: tests/partitions.rs.

use super::route::partition_of;
use super::spread_tests::{ack, fetch, node, node_full, node_with, on_conn, two_queues, PARTS};
use super::Router;
use crate::engine::intake::Intake;
use crate::engine::request::{Command, Letter, Posted, WorkflowCmd};
use crate::engine::{Answer, EngineHandle};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

async fn create(r: &Router, def: Value) -> String {
    let def = Intake::default().workflow(&def).unwrap();
    let cmd = Command::Workflow(WorkflowCmd::Create {
        definition: Box::new(def),
    });
    match r.call(None, cmd).await.unwrap() {
        Answer::Workflow(w) => w.id,
        a => panic!("{a:?}"),
    }
}

async fn workflow(r: &Router, id: &str) -> Value {
    let cmd = Command::Workflow(WorkflowCmd::Get(id.into()));
    match r.call(None, cmd).await.unwrap() {
        Answer::Workflow(w) => w.doc,
        a => panic!("{a:?}"),
    }
}

async fn wait_state(r: &Router, id: &str, want: &str) {
    let t0 = Instant::now();
    loop {
        let doc = workflow(r, id).await;
        if doc["state"] == want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{doc}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ack_with(r: &Router, id: &str, result: Value) {
    let cmd = Command::Ack {
        id: id.to_string(),
        result: Some(result),
        handed_out: false,
    };
    on_conn(r, 1, cmd).await;
}

async fn job(r: &Router, id: &str) -> crate::job::Job {
    job_opt(r, id).await.expect("no such job")
}

/// The job, or `None` while its letter is on its way.
async fn job_opt(r: &Router, id: &str) -> Option<crate::job::Job> {
    match r.call(None, Command::Job { id: id.into() }).await {
        Ok(Answer::Job(v)) => Some(v.job().unwrap()),
        Err(e) if e.code == crate::error::ErrorCode::NotFound => None,
        a => panic!("{a:?}"),
    }
}

/// Every `job_id` in a workflow's document.
fn job_ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("job_id", Value::String(s)) => out.push(s.clone()),
                    _ => job_ids(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| job_ids(x, out)),
        _ => {}
    }
}

fn chain(qa: &str, qb: &str) -> Value {
    json!({"type": "chain", "name": "across", "steps": [
        {"type": "s1", "args": [], "options": {"queue": qa}},
        {"type": "s2", "args": [], "options": {"queue": qb}},
        {"type": "s3", "args": [], "options": {"queue": qa}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_across_partitions_runs_each_step_once_in_its_queues_partition() {
    run_chain(&node()).await;
}

/// Engines that keep no letter in memory: each is read back from the store when relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_kept_in_the_store_only_are_relayed_the_same() {
    run_chain(&node_full(true, 0)).await;
}

async fn run_chain(n: &super::spread_tests::Node) {
    let r = &n.router;
    let (qa, qb) = two_queues();
    let wf = create(r, chain(&qa, &qb)).await;
    let both = [qa.as_str(), qb.as_str()];
    let (j1, q1) = fetch(r, 1, &both, 2000).await.unwrap();
    assert_eq!(q1, qa);
    ack_with(r, &j1, json!({"marker": "from-step-1"})).await;
    // Step 2 is enqueued in the other partition, through the outbox.
    let (j2, q2) = fetch(r, 1, &both, 5000).await.unwrap();
    assert_eq!(q2, qb);
    let parents = serde_json::to_string(&job(r, &j2).await.extra["parent_results"]).unwrap();
    assert!(parents.contains("from-step-1"), "{parents}");
    assert_eq!(workflow(r, &wf).await["state"], "running");
    ack(r, 1, &j2).await;
    // Its end comes back home, which enqueues step 3.
    let (j3, q3) = fetch(r, 1, &both, 5000).await.unwrap();
    assert_eq!(q3, qa);
    ack(r, 1, &j3).await;
    wait_state(r, &wf, "completed").await;
    assert_eq!(fetch(r, 1, &both, 300).await, None, "a step ran twice");
    let mut ids = Vec::new();
    job_ids(&workflow(r, &wf).await, &mut ids);
    for j in [&j1, &j2, &j3] {
        assert!(ids.contains(j), "{j} not in {ids:?}");
    }
}

async fn take(e: &EngineHandle) -> Vec<Posted> {
    let cmd = Command::Workflow(WorkflowCmd::Outbox { limit: 100 });
    match e.call(None, cmd).await.unwrap() {
        Answer::Letters(l) => l,
        a => panic!("{a:?}"),
    }
}

async fn deliver(r: &Router, part: u32, letters: &[Posted]) {
    let letters: Vec<Letter> = letters.iter().map(|p| p.letter.clone()).collect();
    let cmd = Command::Workflow(WorkflowCmd::Deliver { part, letters });
    r.call(None, cmd).await.unwrap();
}

async fn delivered(e: &EngineHandle, letters: &[Posted]) {
    let seqs = letters.iter().map(|p| p.seq).collect();
    let cmd = Command::Workflow(WorkflowCmd::Delivered(seqs));
    e.call(None, cmd).await.unwrap();
}

/// The test hands the letters over itself, each twice: as a relay whose node died between
/// the receiver's commit and its own delete would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letters_delivered_twice_take_effect_once() {
    let n = node_with(false);
    let r = &n.router;
    let (qa, qb) = two_queues();
    let (pa, pb) = (partition_of(&qa, PARTS), partition_of(&qb, PARTS));
    let engine = |p: u32| n.engines[p as usize].0.clone();
    let wf = create(r, chain(&qa, &qb)).await;
    let (j1, _) = fetch(r, 1, &[&qa], 2000).await.unwrap();
    ack(r, 1, &j1).await;
    let out = take(&engine(pa)).await;
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].to, pb);
    assert!(matches!(out[0].letter, Letter::Enqueue { .. }));
    deliver(r, pb, &out).await;
    deliver(r, pb, &out).await;
    delivered(&engine(pa), &out).await;
    assert!(take(&engine(pa)).await.is_empty());
    let (j2, _) = fetch(r, 1, &[&qb], 1000).await.unwrap();
    assert_eq!(fetch(r, 2, &[&qb], 200).await, None, "enqueued twice");
    ack(r, 1, &j2).await;
    let back = take(&engine(pb)).await;
    let kinds: Vec<_> = back
        .iter()
        .map(|p| match p.letter {
            Letter::Started { .. } => "started",
            Letter::Settled { .. } => "settled",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["started", "settled"]);
    assert!(back.iter().all(|p| p.to == pa));
    deliver(r, pa, &back).await;
    deliver(r, pa, &back).await;
    delivered(&engine(pb), &back).await;
    // Step 3 is in the home partition's queue: enqueued once, no letter.
    assert!(take(&engine(pa)).await.is_empty());
    let (j3, _) = fetch(r, 1, &[&qa], 1000).await.unwrap();
    assert_eq!(fetch(r, 2, &[&qa], 200).await, None, "advanced twice");
    ack(r, 1, &j3).await;
    wait_state(r, &wf, "completed").await;
    let doc = workflow(r, &wf).await;
    assert_eq!(doc["metadata"]["completed_count"], 3, "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_workflow_cancels_its_job_in_another_partition() {
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let wf = create(
        r,
        json!({"type": "group", "name": "g", "jobs": [
            {"type": "a", "args": [], "options": {"queue": qa}},
            {"type": "b", "args": [], "options": {"queue": qb}}]}),
    )
    .await;
    // Wait until the job in the other partition exists.
    let mut ids = Vec::new();
    let t0 = Instant::now();
    let remote = loop {
        ids.clear();
        job_ids(&workflow(r, &wf).await, &mut ids);
        let mut found = None;
        for id in &ids {
            if job_opt(r, id).await.is_some_and(|j| j.queue == qb) {
                found = Some(id.clone());
            }
        }
        if let Some(id) = found {
            break id;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{ids:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cmd = Command::Workflow(WorkflowCmd::Cancel(wf.clone()));
    r.call(None, cmd).await.unwrap();
    let t0 = Instant::now();
    while job(r, &remote).await.state.as_str() != "cancelled" {
        assert!(t0.elapsed() < Duration::from_secs(5), "not cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fetch(r, 1, &[&qa, &qb], 300).await, None);
    wait_state(r, &wf, "cancelled").await;
}

/// FLUSH empties the outboxes with everything else: no letter of a deleted workflow is
/// delivered afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_empties_the_outboxes() {
    let mut n = node_with(false);
    let r = n.router.clone();
    let r = &r;
    let (qa, qb) = two_queues();
    let pa = partition_of(&qa, PARTS);
    create(
        r,
        json!({"type": "group", "name": "g", "jobs": [
            {"type": "a", "args": [], "options": {"queue": qa}},
            {"type": "b", "args": [], "options": {"queue": qb}}]}),
    )
    .await;
    let home = n.engines[pa as usize].0.clone();
    assert_eq!(take(&home).await.len(), 1);
    r.call(None, Command::Flush).await.unwrap();
    assert!(take(&home).await.is_empty());
    // Nor do they come back from the store when the partition's engine starts again.
    let (h, t) = n.engines.remove(pa as usize);
    h.shutdown();
    t.join().unwrap().unwrap();
    let st = crate::store::open(
        crate::store::StoreKind::Fjall,
        n.dirs[pa as usize].path(),
        1 << 20,
    )
    .unwrap();
    let cfg = crate::engine::Config {
        partition: crate::engine::partition::Partition {
            index: pa,
            count: PARTS,
        },
        ..Default::default()
    };
    let shared = crate::engine::Shared::new(Default::default());
    let (h, t) = crate::engine::start_with(st, cfg, shared).unwrap();
    let left = take(&h).await;
    h.shutdown();
    t.join().unwrap().unwrap();
    assert!(left.is_empty(), "{left:?}");
}
