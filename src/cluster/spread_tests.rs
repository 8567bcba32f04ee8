//! The router over several partitions, each with an engine of its own on this node (fjall
//! stores in temporary dirs): routing by queue and by job id, a FETCH over queues of
//! several partitions, an ACK-and-FETCH across them, and INFO summed. Forwarding between
//! nodes is tested over real sockets and PostgreSQL in tests/partitions.rs.

use super::route::partition_of;
use super::Router;
use crate::engine::intake::Intake;
use crate::engine::request::Command;
use crate::engine::{Answer, Config, EngineHandle, Shared};
use crate::store::{self, StoreKind};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const PARTS: u32 = 4;

pub(super) struct Node {
    pub(super) router: Router,
    pub(super) engines: Vec<(
        EngineHandle,
        std::thread::JoinHandle<Result<(), crate::store::StoreError>>,
    )>,
    pub(super) dirs: Vec<tempfile::TempDir>,
}

impl Drop for Node {
    fn drop(&mut self) {
        for (h, _) in &self.engines {
            h.shutdown();
        }
        for (_, t) in self.engines.drain(..) {
            let _ = t.join();
        }
    }
}

pub(super) fn node() -> Node {
    node_with(true)
}

/// Four partitions' engines on one node; `relay`: their outboxes are relayed
/// (`relay.rs`), else a test hands letters over itself.
pub(super) fn node_with(relay: bool) -> Node {
    node_full(relay, crate::engine::DEFAULT_OUTBOX_MEMORY)
}

/// As `node_with`, the engines keeping `outbox_memory` bytes of letters in memory.
pub(super) fn node_full(relay: bool, outbox_memory: usize) -> Node {
    let shared = Shared::new(Default::default());
    let link_cfg = super::link::LinkConfig {
        node: "n1".into(),
        secret: None,
        tls: None,
        limits: super::proto::Limits::new(1 << 20, 1 << 20),
        connect_timeout: Duration::from_secs(1),
        lost: Arc::new(tokio::sync::Notify::new()),
    };
    let router = Router::cluster(Intake::default(), &shared, "fjall", link_cfg);
    router.set_partitions(PARTS);
    let mut engines = Vec::new();
    let mut dirs = Vec::new();
    for p in 0..PARTS {
        let dir = tempfile::tempdir().unwrap();
        let st = store::open(StoreKind::Fjall, dir.path(), 1 << 20).unwrap();
        let wake = Arc::new(tokio::sync::Notify::new());
        let cfg = Config {
            partition: crate::engine::partition::Partition {
                index: p,
                count: PARTS,
            },
            outbox_wake: Some(wake.clone()),
            outbox_memory,
            ..Config::default()
        };
        let (h, t) = crate::engine::start_with(st, cfg, shared.clone()).unwrap();
        router.activate(p, h.clone());
        if relay {
            let rt = tokio::runtime::Handle::current();
            super::relay::spawn(&rt, p, h.clone(), router.clone(), wake);
        }
        engines.push((h, t));
        dirs.push(dir);
    }
    // Finds a job's partition by asking each engine (a cluster asks PostgreSQL).
    let handles: Vec<EngineHandle> = engines.iter().map(|(h, _)| h.clone()).collect();
    router.set_locator(Arc::new(move |id: uuid::Uuid| {
        let handles = handles.clone();
        Box::pin(async move {
            for (p, h) in handles.iter().enumerate() {
                let cmd = Command::Job { id: id.to_string() };
                if h.call(None, cmd).await.is_ok() {
                    return Ok(Some(p as u32));
                }
            }
            Ok(None)
        })
    }));
    Node {
        router,
        engines,
        dirs,
    }
}

/// Two queue names in different partitions.
pub(super) fn two_queues() -> (String, String) {
    let a = "qa".to_string();
    let b = (0..)
        .map(|i| format!("qb{i}"))
        .find(|q| partition_of(q, PARTS) != partition_of(&a, PARTS))
        .unwrap();
    (a, b)
}

pub(super) async fn push(r: &Router, queue: &str) -> String {
    let job = Intake::default()
        .job(json!({"type": "t", "args": [], "queue": queue}), 40)
        .unwrap();
    let id = job.job.id.clone();
    let a = r
        .call(
            None,
            Command::Push {
                job: Box::new(job),
                len: 40,
                resend: false,
            },
        )
        .await
        .unwrap();
    assert!(matches!(a, Answer::Job(_)), "{a:?}");
    id
}

pub(super) async fn fetch(
    r: &Router,
    conn: u64,
    queues: &[&str],
    wait_ms: u64,
) -> Option<(String, String)> {
    let cmd = Command::Fetch {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        count: None,
        wait: Some(Duration::from_millis(wait_ms)),
    };
    match on_conn(r, conn, cmd).await {
        Answer::Job(v) => {
            let j = v.job().unwrap();
            Some((j.id, j.queue))
        }
        Answer::Nothing => None,
        a => panic!("{a:?}"),
    }
}

/// `cmd` on connection `conn`, as a front end submits it; its answer (which must be one).
pub(super) async fn on_conn(r: &Router, conn: u64, cmd: Command) -> Answer {
    r.submit_on(Some(conn), None, cmd, 0)
        .await
        .await
        .unwrap()
        .unwrap()
}

pub(super) async fn ack(r: &Router, conn: u64, id: &str) {
    let cmd = Command::Ack {
        id: id.to_string(),
        result: None,
        handed_out: false,
    };
    on_conn(r, conn, cmd).await;
}

pub(super) async fn state(r: &Router, id: &str) -> String {
    match r.call(None, Command::Job { id: id.into() }).await.unwrap() {
        Answer::Job(v) => v.job().unwrap().state.as_str().to_string(),
        a => panic!("{a:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_to_their_queues_partition_and_are_found_by_id() {
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let ida = push(r, &qa).await;
    let idb = push(r, &qb).await;
    // Each job is in its queue's partition's engine only.
    for (id, q) in [(&ida, &qa), (&idb, &qb)] {
        let p = partition_of(q, PARTS);
        for (i, (h, _)) in n.engines.iter().enumerate() {
            let a = h.call(None, Command::Job { id: id.clone() }).await;
            assert_eq!(
                a.is_ok(),
                i as u32 == p,
                "job of {q} in partition {i}: {a:?}"
            );
        }
    }
    // A FETCH over both takes the first queue's partition first.
    let conn = r.connection_id();
    let (got, queue) = fetch(r, conn, &[&qb, &qa], 0).await.unwrap();
    assert_eq!((&got, &queue), (&idb, &qb));
    ack(r, conn, &got).await;
    assert_eq!(state(r, &idb).await, "completed");
    let (got, _) = fetch(r, conn, &[&qb, &qa], 0).await.unwrap();
    assert_eq!(got, ida);
    assert!(fetch(r, conn, &[&qb, &qa], 0).await.is_none());
    // INFO counts both partitions' jobs.
    let Answer::Info(info) = r.call(None, Command::Info).await.unwrap() else {
        panic!()
    };
    assert_eq!(info.totals.jobs, 2);
    assert_eq!(info.queues.0.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fetch_over_partitions_takes_the_first_job_and_leaves_the_rest() {
    let n = node();
    let r = n.router.clone();
    let (qa, qb) = two_queues();
    let conn = r.connection_id();
    let waiting = {
        let (r, qa, qb) = (r.clone(), qa.clone(), qb.clone());
        tokio::spawn(async move { fetch(&r, conn, &[&qa, &qb], 5000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = Instant::now();
    let idb = push(&r, &qb).await;
    let (got, _) = waiting.await.unwrap().unwrap();
    assert_eq!(got, idb);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    // The cancelled wait on qa's partition claims nothing: a job pushed there now is
    // available to anyone at once.
    let ida = push(&r, &qa).await;
    assert_eq!(state(&r, &ida).await, "available");
    let other = r.connection_id();
    assert_eq!(fetch(&r, other, &[&qa], 0).await.unwrap().0, ida);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_and_fetch_across_partitions_acks_then_fetches() {
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let ida = push(r, &qa).await;
    let idb = push(r, &qb).await;
    let conn = r.connection_id();
    let (got, _) = fetch(r, conn, &[&qa], 0).await.unwrap();
    assert_eq!(got, ida);
    let cmd = Command::AckFetch {
        id: ida.clone(),
        result: None,
        queues: vec![qb.clone()],
        wait: Some(Duration::ZERO),
    };
    let a = on_conn(r, conn, cmd).await;
    let Answer::Job(v) = a else { panic!("{a:?}") };
    assert_eq!(v.job().unwrap().id, idb);
    assert_eq!(state(r, &ida).await, "completed");
    assert_eq!(state(r, &idb).await, "active");
    // A request that changes queues of two partitions at once is refused, not split.
    let a = r
        .call(
            None,
            Command::Queue(crate::engine::request::QueueCmd::Pause(vec![qa, qb])),
        )
        .await;
    assert!(a.is_err());
}

/// ACKB naming jobs of two partitions (and one that is not held): each ACK reaches its
/// job's partition, and the refusal comes back at its position in the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ackb_across_partitions_settles_each_job_in_its_partition() {
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let (a1, b1, a2) = (push(r, &qa).await, push(r, &qb).await, push(r, &qa).await);
    let conn = r.connection_id();
    let mut got = Vec::new();
    while let Some((id, _)) = fetch(r, conn, &[&qa, &qb], 0).await {
        got.push(id);
    }
    assert_eq!(got.len(), 3);
    let left = push(r, &qb).await;
    let item = |id: &str| crate::engine::request::AckItem {
        id: id.to_string(),
        result: Some(json!(id.len())),
    };
    let cmd = Command::AckBatch(vec![item(&b1), item(&left), item(&a1), item(&a2)]);
    let a = on_conn(r, conn, cmd).await;
    let Answer::Acked(each) = a else {
        panic!("{a:?}")
    };
    assert_eq!(each.accepted, 3);
    let refused: Vec<_> = each.rejected.iter().map(|(i, e)| (*i, e.code)).collect();
    assert_eq!(
        refused,
        vec![(1, crate::error::ErrorCode::InvalidStateTransition)]
    );
    for id in [&a1, &b1, &a2] {
        assert_eq!(state(r, id).await, "completed", "{id}");
    }
    assert_eq!(state(r, &left).await, "available");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_answer_nobody_waits_for_goes_back() {
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let ida = push(r, &qa).await;
    let conn = r.connection_id();
    // The front end drops the receiver before the answer: the job is given back.
    assert!(fetch(r, conn, &[&qb], 0).await.is_none());
    let cmd = Command::Fetch {
        queues: vec![qb.clone(), qa.clone()],
        count: None,
        wait: Some(Duration::ZERO),
    };
    drop(r.submit_on(Some(conn), None, cmd, 0).await);
    // It was claimed (its attempt counted) and is available again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let Answer::Job(v) = r
            .call(None, Command::Job { id: ida.clone() })
            .await
            .unwrap()
        else {
            panic!()
        };
        let j = v.job().unwrap();
        if j.attempt >= 1 && j.state.as_str() == "available" {
            break;
        }
        assert!(Instant::now() < deadline, "the job stayed claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_merge_the_partitions_pages() {
    use crate::engine::request::{CronCmd, JobsQuery, QueueCmd, WorkflowCmd};
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(push(r, if i % 2 == 0 { &qa } else { &qb }).await);
    }
    // JOBS over every queue: newest first across partitions, paged.
    let page = |offset, limit| {
        Command::Jobs(JobsQuery {
            queue: None,
            state: None,
            limit,
            offset,
        })
    };
    let Answer::JobPage(p) = r.call(None, page(1, 3)).await.unwrap() else {
        panic!()
    };
    assert_eq!(p.total, 6);
    let got: Vec<String> = p.jobs.iter().map(|j| j.job().unwrap().id).collect();
    let want: Vec<String> = ids.iter().rev().skip(1).take(3).cloned().collect();
    assert_eq!(got, want);
    // QUEUE LIST has both queues.
    let Answer::Queues(l) = r.call(None, Command::Queue(QueueCmd::List)).await.unwrap() else {
        panic!()
    };
    let names: Vec<&str> = l.queues.iter().map(|q| q.name.as_str()).collect();
    assert!(
        names.contains(&qa.as_str()) && names.contains(&qb.as_str()),
        "{names:?}"
    );
    // A cron registration lives in its queue's partition; moved when its queue changes.
    let add = |queue: &str| {
        let def = Intake::default()
            .cron(&json!({"name": "nightly", "cron": "0 3 * * *", "type": "t",
                "args": [], "options": {"queue": queue}}))
            .unwrap();
        Command::Cron(CronCmd::Add(Box::new(def)))
    };
    let held = |p: u32| {
        let h = n.engines[p as usize].0.clone();
        async move {
            h.call(None, Command::Cron(CronCmd::Get("nightly".into())))
                .await
                .is_ok()
        }
    };
    r.call(None, add(&qa)).await.unwrap();
    assert!(held(partition_of(&qa, PARTS)).await);
    r.call(None, add(&qb)).await.unwrap();
    assert!(held(partition_of(&qb, PARTS)).await);
    assert!(!held(partition_of(&qa, PARTS)).await);
    assert!(r
        .call(None, Command::Cron(CronCmd::Get("nightly".into())))
        .await
        .is_ok());
    let list = Command::Cron(CronCmd::List {
        enabled: None,
        limit: 10,
        offset: 0,
    });
    let Answer::CronPage(c) = r.call(None, list).await.unwrap() else {
        panic!()
    };
    assert_eq!(c.count, 1);
    // A workflow is served whether its jobs are in one partition or several
    // (relay_tests.rs runs one across partitions).
    let wf = |q1: &str, q2: &str| {
        let def = Intake::default()
            .workflow(&json!({"type": "chain", "name": "w", "steps": [
                {"type": "t", "args": [], "options": {"queue": q1}},
                {"type": "t", "args": [], "options": {"queue": q2}}]}))
            .unwrap();
        Command::Workflow(WorkflowCmd::Create {
            definition: Box::new(def),
        })
    };
    let Answer::Workflow(w) = r.call(None, wf(&qb, &qb)).await.unwrap() else {
        panic!()
    };
    assert!(r
        .call(None, Command::Workflow(WorkflowCmd::Get(w.id.clone())))
        .await
        .is_ok());
    assert!(r.call(None, wf(&qa, &qb)).await.is_ok());
}

/// A worker is known to every partition's engine, and its own events come from one of
/// them: a stream over every partition has each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_own_events_come_once_from_one_partition() {
    use crate::events::{EventFilter, Start};
    let n = node();
    let r = &n.router;
    let wid: std::sync::Arc<str> = "w-events".into();
    r.register_worker(wid.clone(), json!({"queues": ["q"]}), false);
    let beat = Command::Beat {
        wid: wid.to_string(),
        active_job_ids: None,
        report: Default::default(),
    };
    r.call(Some(wid.clone()), beat).await.unwrap();
    let quiet = Command::Worker {
        wid: wid.to_string(),
        directive: crate::engine::request::WorkerDirective::Quiet,
    };
    r.call(None, quiet).await.unwrap();
    r.disconnect_worker(wid.clone());
    let filter = EventFilter {
        event_types: vec!["worker.*".into()],
        ..Default::default()
    };
    let kinds = || async {
        let page = r
            .events(filter.clone(), Start::Each(vec![0; PARTS as usize]), 100)
            .await
            .unwrap();
        let mut kinds: Vec<String> = page
            .events
            .iter()
            .map(|e| {
                let v: serde_json::Value = serde_json::from_slice(&e.json()).unwrap();
                v["type"].as_str().unwrap().to_string()
            })
            .collect();
        kinds.sort();
        kinds
    };
    let t0 = Instant::now();
    while !kinds().await.contains(&"worker.stopped".to_string()) {
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", kinds().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every partition has applied the hang-up by now (each is asked in turn above).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        kinds().await,
        [
            "worker.heartbeat",
            "worker.quiet",
            "worker.started",
            "worker.stopped"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_one_partitions_queues_and_metrics_of_all() {
    use crate::events::{EventFilter, Start};
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let ida = push(r, &qa).await;
    push(r, &qb).await;
    let filter = |queues: Vec<String>| EventFilter {
        queues,
        ..Default::default()
    };
    let page = r
        .events(filter(vec![qa.clone()]), Start::After(0), 100)
        .await
        .unwrap();
    assert!(page.count >= 1);
    let ids: Vec<String> = page
        .events
        .iter()
        .filter_map(|e| {
            let v: serde_json::Value = serde_json::from_slice(&e.json()).unwrap();
            v["data"]["job_id"].as_str().map(String::from)
        })
        .collect();
    assert!(!ids.is_empty());
    assert!(ids.iter().all(|i| *i == ida), "{ids:?}");
    // Metrics: both partitions' series.
    let m = r.metrics().await.unwrap();
    let enq: u64 = m.series.iter().map(|s| s.enqueued).sum();
    assert_eq!(enq, 2);
    assert!(m.queues.iter().any(|q| q.queue == qa) && m.queues.iter().any(|q| q.queue == qb));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_every_partition_merges_their_logs_and_resumes_from_its_position() {
    use crate::events::{parse_position, Start};
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let filter = enqueued_only();
    // Started live: what is pushed from now on, from both partitions.
    let mut live = r.subscription(filter.clone(), Start::Live);
    live.open().await.unwrap();
    let ida = push(r, &qa).await;
    let idb = push(r, &qb).await;
    let job_of = |e: &crate::events::Event| {
        let v: serde_json::Value = serde_json::from_slice(&e.json()).unwrap();
        (
            v["data"]["job_id"].as_str().unwrap().to_string(),
            v["position"].as_str().unwrap().to_string(),
        )
    };
    let mut got = Vec::new();
    for _ in 0..2 {
        let e = tokio::time::timeout(Duration::from_secs(5), live.next())
            .await
            .unwrap()
            .unwrap();
        got.push(job_of(&e));
    }
    let mut ids: Vec<&String> = got.iter().map(|(i, _)| i).collect();
    ids.sort();
    let mut want = vec![&ida, &idb];
    want.sort();
    assert_eq!(ids, want);
    // Resuming from the first event's position gives the second, and nothing else.
    let (first, pos) = got[0].clone();
    let each = parse_position(&pos).unwrap();
    assert_eq!(each.len(), PARTS as usize);
    let mut resumed = r.subscription(filter.clone(), Start::Each(each.clone()));
    resumed.open().await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), resumed.next())
        .await
        .unwrap()
        .unwrap();
    let (second, _) = job_of(&e);
    assert_ne!(second, first);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), resumed.next())
            .await
            .is_err(),
        "nothing more"
    );
    // A poll over every partition: both, then nothing after its cursor.
    let page = r
        .events(
            filter.clone(),
            Start::Since(chrono::DateTime::<chrono::Utc>::MIN_UTC),
            100,
        )
        .await
        .unwrap();
    assert_eq!(page.count, 2);
    let next = parse_position(page.position.as_deref().unwrap()).unwrap();
    let page = r
        .events(filter.clone(), Start::Each(next), 100)
        .await
        .unwrap();
    assert_eq!(page.count, 0);
    // A poll of one event at a time walks both partitions without a repeat.
    let mut at = Start::Since(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    let mut walked = Vec::new();
    loop {
        let page = r.events(filter.clone(), at, 1).await.unwrap();
        walked.extend(page.events.iter().map(job_of_poll));
        at = Start::Each(parse_position(page.position.as_deref().unwrap()).unwrap());
        if !page.has_more && page.count == 0 {
            break;
        }
    }
    walked.sort();
    let mut want = vec![ida.clone(), idb.clone()];
    want.sort();
    assert_eq!(walked, want);
    // A single partition's cursor cannot resume a merged stream.
    let mut bad = r.subscription(filter, Start::After(1));
    assert!(bad.open().await.is_err());
}

/// A stream started at a time stands, in each partition, just before that partition's
/// first event at or after the time: resumed from its first event's position, it gives
/// the other partition's events from the time on, never those from before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_started_at_a_time_resumes_without_the_events_before_it() {
    use crate::events::{parse_position, Start};
    let n = node();
    let r = &n.router;
    let (qa, qb) = two_queues();
    let filter = enqueued_only();
    let old_a = push(r, &qa).await;
    let old_b = push(r, &qb).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let new_a = push(r, &qa).await;
    let new_b = push(r, &qb).await;
    let mut since = r.subscription(filter.clone(), Start::Since(t));
    since.open().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), since.next())
        .await
        .unwrap()
        .unwrap();
    let first_id = job_of_poll(&first);
    let each = parse_position(first.position.as_deref().unwrap()).unwrap();
    let mut resumed = r.subscription(filter.clone(), Start::Each(each));
    resumed.open().await.unwrap();
    let mut rest = Vec::new();
    while let Ok(e) = tokio::time::timeout(Duration::from_millis(300), resumed.next()).await {
        rest.push(job_of_poll(&e.unwrap()));
    }
    let want = if first_id == new_a { &new_b } else { &new_a };
    assert!(first_id == new_a || first_id == new_b, "{first_id}");
    assert_eq!(rest, vec![want.clone()], "old: {old_a} {old_b}");
    // A poll from the time, one event a page: the same two, nothing from before.
    let page = r.events(filter.clone(), Start::Since(t), 1).await.unwrap();
    let each = parse_position(page.position.as_deref().unwrap()).unwrap();
    let page2 = r.events(filter, Start::Each(each), 100).await.unwrap();
    let mut all: Vec<String> = page.events.iter().map(job_of_poll).collect();
    all.extend(page2.events.iter().map(job_of_poll));
    all.sort();
    let mut want = vec![new_a, new_b];
    want.sort();
    assert_eq!(all, want);
}

/// A filter of `job.enqueued` events only.
fn enqueued_only() -> crate::events::EventFilter {
    crate::events::EventFilter {
        event_types: vec!["job.enqueued".into()],
        ..Default::default()
    }
}

fn job_of_poll(e: &crate::events::Event) -> String {
    let v: serde_json::Value = serde_json::from_slice(&e.json()).unwrap();
    v["data"]["job_id"].as_str().unwrap().to_string()
}
