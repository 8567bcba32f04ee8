//! A cluster of several partitions (`--partitions 4`, PROTOCOL.md §16): three `ojsd
//! --store postgres` nodes share the partitions out, each serving its share from an
//! engine per partition, and every node serves every client by routing each request to
//! the partition of its queue (or job), here or at the node holding it.
//!
//! - the nodes balance to a fair share (2/1/1), as CLUSTER on any node shows;
//! - jobs pushed to eight queues through one node, fetched through another with one FETCH
//!   over all eight queues, ACKed there: each completes once; INFO on the third node
//!   counts them all, and a JOB by id finds each from any node;
//! - kill -9 of the node holding the most partitions under load (producers and workers on
//!   the other two nodes, eight queues): its partitions are served again by the others,
//!   every push answered +OK completes, and no ACK is answered +OK twice;
//! - a node that joins gets partitions handed over (released by the others, not by a
//!   lease running out);
//! - the zombie: a node holding two partitions frozen (SIGSTOP) under load past its
//!   leases, the others take its partitions, then it wakes (SIGCONT) with pushes of its
//!   own clients in flight: its engines' next commits are refused by the fence, and every
//!   push answered +OK, through it or the others, completes once;
//! - workflows whose steps are in queues of several partitions complete each step once
//!   across a kill -9 of the node holding the most partitions (their letters between
//!   partitions are in PostgreSQL, and the new holders relay them).
//!
//! Needs `OJSD_TEST_POSTGRES_URL` (.ci/run sets it); skipped with a notice otherwise.

mod common;

use common::cluster::{
    acking_worker, assert_each_step_once, connect, json_when_served, stop_acking, wait_until,
    Cluster, Load, Proc, NAMES,
};
use common::{id_of, test_job};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(40);
const PARTS: usize = 4;

fn url() -> Option<String> {
    common::cluster::pg_url()
}

/// One cluster at a time: three nodes per test on two cores are enough (the leases are
/// short, and starved nodes would let them run out).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn cluster(n: usize) -> Cluster {
    let mut c = Cluster::new(url().unwrap(), n);
    c.extra = vec!["--partitions".into(), PARTS.to_string()];
    c
}

/// Live partitions per node, as CLUSTER on `addr` says.
fn held(addr: &str) -> Option<HashMap<String, Vec<u64>>> {
    let mut cl = connect(addr, None)?;
    let v: Value = cl.cluster().ok()?;
    if v["partitions"] != json!(PARTS) {
        return None;
    }
    let mut out = HashMap::new();
    for n in v["nodes"].as_array()? {
        let parts: Vec<u64> = n["partitions"]
            .as_array()?
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        out.insert(n["id"].as_str()?.to_string(), parts);
    }
    Some(out)
}

/// Every partition held, by `nodes` nodes, none holding more than its fair share.
fn balanced(addr: &str, nodes: usize) -> bool {
    let Some(h) = held(addr) else { return false };
    let share = PARTS.div_ceil(nodes);
    let total: usize = h.values().map(Vec::len).sum();
    total == PARTS
        && h.values().filter(|p| !p.is_empty()).count() == nodes
        && h.values().all(|p| p.len() <= share)
}

fn start(c: &Cluster, n: usize) -> Vec<Proc> {
    let nodes: Vec<Proc> = (0..n).map(|i| c.node(i)).collect();
    wait_until("the nodes to share the partitions out", LIMIT, || {
        balanced(&c.nodes[0].0, n)
    });
    // A node that won a partition's lease serves it once its engine is rebuilt; until
    // then it answers BACKEND_UNAVAILABLE for it (PROTOCOL.md §16). INFO asks every
    // partition, through every node.
    wait_until(
        "every node to reach every partition's engine",
        LIMIT,
        || {
            c.nodes[..n]
                .iter()
                .all(|node| connect(&node.0, None).is_some_and(|mut cl| cl.info().is_ok()))
        },
    );
    nodes
}

/// The node of three holding the most partitions.
fn busiest(c: &Cluster) -> usize {
    let h = held(&c.nodes[0].0).unwrap();
    NAMES[..3]
        .iter()
        .position(|n| h.get(*n).map_or(0, Vec::len) == PARTS.div_ceil(3))
        .unwrap()
}

fn queues() -> Vec<String> {
    (0..8).map(|i| format!("pq{i}")).collect()
}

#[test]
fn jobs_of_many_queues_through_any_node() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let _nodes = start(&c, 3);
    let (a, b, cc) = (&c.nodes[0].0, &c.nodes[1].0, &c.nodes[2].0);
    let qs = queues();
    let mut producer = connect(b, None).unwrap();
    let mut pushed = Vec::new();
    for i in 0..40 {
        let j = producer
            .push(&test_job(&qs[i % qs.len()], json!({"args": [i]})))
            .unwrap();
        pushed.push(id_of(&j));
    }
    let mut worker = connect(cc, Some("w-parts".into())).unwrap();
    let all: Vec<&str> = qs.iter().map(String::as_str).collect();
    let mut fetched = Vec::new();
    while let Some(job) = worker.fetch(&all).unwrap() {
        let id = id_of(&job);
        worker.ack(&id, None).unwrap();
        fetched.push(id);
    }
    fetched.sort();
    let mut want = pushed.clone();
    want.sort();
    assert_eq!(fetched, want, "each job fetched once");
    let mut observer = connect(a, None).unwrap();
    let info: Value = observer.info().unwrap();
    assert_eq!(info["totals"]["completed"], json!(40), "{info}");
    for id in &pushed {
        let j: Value = observer.job(id).unwrap();
        assert_eq!(j["state"], "completed");
    }
}

#[test]
fn kill9_of_the_busiest_node_under_load() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let mut nodes = start(&c, 3);
    let busiest = busiest(&c);
    let others: Vec<usize> = (0..3).filter(|i| *i != busiest).collect();
    let (to_p, to_w) = (&c.nodes[others[0]].0, &c.nodes[others[1]].0);
    let load = Load::over(to_p, to_w, 4, 4, queues());
    wait_until("jobs to flow", LIMIT, || load.acked() > 50);
    nodes[busiest].kill9();
    let killed = Instant::now();
    wait_until("the survivors to serve every partition", LIMIT, || {
        balanced(to_p, 2)
    });
    let served = killed.elapsed();
    let before = load.acked();
    wait_until("jobs to flow again", LIMIT, || load.acked() > before + 50);
    let (pushed, refused) = load.finish_and_check(to_p);
    eprintln!(
        "partitions served again {} ms after the kill (lease TTL {} ms); {pushed} pushes \
         answered +OK, {refused} refused or cut",
        served.as_millis(),
        c.ttl_ms
    );
}

#[test]
fn a_joining_node_is_handed_partitions() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let _two = start(&c, 2);
    let third = c.node(2);
    let t0 = Instant::now();
    wait_until("the third node to be handed its share", LIMIT, || {
        balanced(&c.nodes[0].0, 3)
    });
    // Handed over, not waited out: well within a lease's expiry plus the 2-TTL rule.
    assert!(
        t0.elapsed() < Duration::from_millis(c.ttl_ms * 2),
        "{:?}",
        t0.elapsed()
    );
    // The moved partitions serve: a job to each queue, pushed and fetched via the new node.
    let mut cl = connect(&c.nodes[2].0, Some("w-new".into())).unwrap();
    for q in queues() {
        let j = cl.push(&test_job(&q, json!({}))).unwrap();
        let got = cl.fetch(&[q.as_str()]).unwrap().expect("the job");
        assert_eq!(id_of(&got), id_of(&j));
        cl.ack(&id_of(&got), None).unwrap();
    }
    drop(third);
}

/// While a dead node's partitions wait for their lease to run out, the surviving nodes
/// stay healthy (`GET /ojs/v1/health` 200: they serve their own partitions), so a load
/// balancer keeps sending them clients instead of marking every node down at once.
#[test]
fn survivors_stay_healthy_while_a_dead_nodes_partitions_wait() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let mut c = cluster(3);
    c.ttl_ms = 8000;
    let mut nodes = start(&c, 3);
    let busiest = busiest(&c);
    nodes[busiest].kill9();
    let killed = Instant::now();
    for i in (0..3).filter(|i| *i != busiest) {
        let (status, body) = health(&c.nodes[i].1);
        assert_eq!(status, 200, "{}: {body}", NAMES[i]);
    }
    assert!(
        killed.elapsed() < Duration::from_millis(c.ttl_ms),
        "checked before the lease ran out"
    );
}

fn health(addr: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /ojs/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    (text[9..12].parse().unwrap(), text)
}

/// Partitions move under load: a third node joins (the others hand it its share), then
/// one of the first two stops cleanly (SIGTERM: its engines finish their batches and its
/// leases are released), with producers and workers on the node that stays throughout.
/// Every push answered +OK completes, and no ACK is answered +OK twice.
#[test]
fn a_node_added_and_one_stopped_under_load() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let mut nodes = start(&c, 2);
    let to = &c.nodes[0].0;
    let load = Load::over(to, to, 3, 3, queues());
    wait_until("jobs to flow", LIMIT, || load.acked() > 50);
    nodes.push(c.node(2));
    wait_until("the new node to get its share", LIMIT, || balanced(to, 3));
    let before = load.acked();
    wait_until("jobs to flow after the move", LIMIT, || {
        load.acked() > before + 50
    });
    nodes[1].signal("-TERM");
    assert_eq!(nodes[1].wait_exit(LIMIT), Some(0), "a clean stop");
    wait_until("the two left to share every partition", LIMIT, || {
        balanced(to, 2)
    });
    let before = load.acked();
    wait_until("jobs to flow after the stop", LIMIT, || {
        load.acked() > before + 50
    });
    let (pushed, refused) = load.finish_and_check(to);
    eprintln!("{pushed} pushes answered +OK, {refused} refused or cut");
}

/// A node that has just won a partition's lease refuses requests for it until its
/// engine is rebuilt; a node forwarding to it asks again until it serves (for a few
/// seconds at most), so that a partition's move shows to no client: pushes through a node
/// that gives partitions up to a joining node, whose rebuild of a backlog takes a while,
/// are all answered +OK.
#[test]
fn pushes_through_a_node_giving_partitions_up_are_never_refused() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(2);
    let mut nodes = start(&c, 1);
    let to = &c.nodes[0].0;
    // A backlog in queues of every partition, other than the load's.
    let mut filler = connect(to, None).unwrap();
    for q in 0..32 {
        let jobs: Vec<Value> = (0..1000)
            .map(|i| test_job(&format!("backlog{q}"), json!({"args": [i]})))
            .collect();
        filler.push_bulk(&jobs).unwrap();
    }
    let mut load = Load::over(to, to, 3, 2, queues());
    wait_until("jobs to flow", LIMIT, || load.acked() > 50);
    nodes.push(c.node(1));
    wait_until("the new node to get its share", LIMIT, || balanced(to, 2));
    let before = load.pushed();
    wait_until("pushes to flow after the move", LIMIT, || {
        load.pushed() > before + 100
    });
    load.stop_pushing();
    let refused = load.ledger.push_error_codes.lock().unwrap().clone();
    assert!(refused.is_empty(), "pushes refused: {refused:?}");
    let (pushed, _) = load.finish_and_check(to);
    eprintln!("{pushed} pushes answered +OK, none refused");
}

#[test]
fn a_frozen_node_is_fenced_and_nothing_it_answered_is_lost() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let nodes = start(&c, 3);
    let frozen = busiest(&c);
    let others: Vec<usize> = (0..3).filter(|i| *i != frozen).collect();
    let (to_p, to_w) = (&c.nodes[others[0]].0, &c.nodes[others[1]].0);
    let mut load = Load::over(to_p, to_w, 3, 3, queues());
    // Clients of the node that will freeze: their pushes to its own partitions are in its
    // engines' batches, or in its socket buffers, when it stops.
    let own = &c.nodes[frozen].0;
    let load_own = Load::over(own, own, 2, 1, queues());
    wait_until("jobs to flow", LIMIT, || {
        load.acked() > 50 && load_own.acked() > 10
    });
    nodes[frozen].signal("-STOP");
    wait_until("the others to take every partition", LIMIT, || {
        balanced(to_p, 2)
    });
    let before = load.acked();
    wait_until("jobs to flow without it", LIMIT, || {
        load.acked() > before + 50
    });
    nodes[frozen].signal("-CONT");
    wait_until("the woken node's engines to be fenced", LIMIT, || {
        nodes[frozen].logged("the partition's engine ended; another node serves it")
    });
    wait_until("the woken node to get its share again", LIMIT, || {
        balanced(to_p, 3)
    });
    let before = load_own.acked();
    wait_until("its clients to be served again", LIMIT, || {
        load_own.acked() > before + 10
    });
    // Both loads' producers stop before either's pushes are checked: the workers take
    // the queues in order, so while anyone pushes, the last queues' jobs may wait.
    load.stop_pushing();
    let (own_pushed, own_refused) = load_own.finish_and_check(to_p);
    let (pushed, refused) = load.finish_and_check(to_p);
    eprintln!(
        "zombie: {pushed} pushes answered +OK through the others ({refused} refused or cut), \
         {own_pushed} through the frozen node ({own_refused} refused or cut); every one \
         completed, none twice"
    );
}

/// An SSE stream on one node over every partition (no queue filter): each job enqueued
/// through another node, whichever partition its queue is in; its ids are positions, and
/// a stream resumed from one (`Last-Event-ID`) sends what followed it, and nothing twice.
#[test]
fn an_event_stream_over_every_partition_resumes_from_its_position() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let c = cluster(3);
    let mut nodes = start(&c, 3);
    let http = &c.nodes[2].1;
    let mut stream = sse(http, None);
    let mut producer = connect(&c.nodes[0].0, None).unwrap();
    let mut pushed = Vec::new();
    for q in queues() {
        pushed.push(id_of(&producer.push(&test_job(&q, json!({}))).unwrap()));
    }
    let first: Vec<(String, String)> = (0..pushed.len()).map(|_| next_event(&mut stream)).collect();
    let mut seen: Vec<String> = first.iter().map(|(_, j)| j.clone()).collect();
    seen.sort();
    let mut want = pushed.clone();
    want.sort();
    assert_eq!(seen, want, "every enqueue, once");
    assert!(
        first.iter().all(|(id, _)| id.starts_with("p4:")),
        "{first:?}"
    );
    // Resume after the third: the other five, no repeat.
    let mut resumed = sse(http, Some(&first[2].0));
    let rest: Vec<String> = (3..pushed.len())
        .map(|_| next_event(&mut resumed).1)
        .collect();
    let mut rest_sorted = rest.clone();
    rest_sorted.sort();
    let mut want: Vec<String> = first[3..].iter().map(|(_, j)| j.clone()).collect();
    want.sort();
    assert_eq!(rest_sorted, want);
    // The first stream outlives a kill -9 of another node: once that node's partitions
    // are served again, their events come too.
    nodes[1].kill9();
    let mut producer = connect(&c.nodes[2].0, None).unwrap();
    let mut later = Vec::new();
    for q in queues() {
        let deadline = std::time::Instant::now() + LIMIT;
        let j = loop {
            match producer.push(&test_job(&q, json!({}))) {
                Ok(j) => break j,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                    producer = connect(&c.nodes[2].0, None).unwrap();
                }
                Err(e) => panic!("push to {q}: {e}"),
            }
        };
        later.push(id_of(&j));
    }
    let mut got: Vec<String> = (0..later.len())
        .map(|_| next_event(&mut stream).1)
        .collect();
    got.sort();
    later.sort();
    assert_eq!(got, later);
}

/// An SSE stream of `job.enqueued` events on `addr`, optionally resumed.
fn sse(addr: &str, last: Option<&str>) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let resume = last.map_or(String::new(), |l| format!("Last-Event-ID: {l}\r\n"));
    write!(
        s,
        "GET /ojs/v1/events/stream?types=job.enqueued HTTP/1.1\r\nHost: x\r\n\
         Accept: text/event-stream\r\n{resume}\r\n"
    )
    .unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut status = String::new();
    std::io::BufRead::read_line(&mut r, &mut status).unwrap();
    assert!(status.contains(" 200 "), "{status}");
    r
}

/// The next event of an SSE stream: (its id, its job id).
fn next_event(r: &mut std::io::BufReader<std::net::TcpStream>) -> (String, String) {
    let mut id = String::new();
    // Keep-alive comments come every few seconds: bound the whole wait, not each read.
    let deadline = Instant::now() + LIMIT;
    loop {
        assert!(Instant::now() < deadline, "no event within {LIMIT:?}");
        let mut line = String::new();
        let n = std::io::BufRead::read_line(r, &mut line).expect("an event in time");
        assert!(n > 0, "the stream ended");
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.trim().to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d.trim()).unwrap();
            if let Some(j) = v["data"]["job_id"].as_str() {
                return (id, j.to_string());
            }
        }
    }
}

/// A chain of a job, a group of two, a batch of two with two callbacks, and a job, each
/// in another of the eight queues (rotated by `i`, so the workflows' homes differ too).
fn spanning(i: usize, qs: &[String]) -> Value {
    let job = |k: usize, t: &str, args: Value| {
        json!({"type": t, "args": args,
        "options": {"queue": qs[(k + i) % qs.len()], "timeout": 5}})
    };
    json!({"type": "chain", "id": format!("pwf-{i}"), "steps": [
        job(0, "wf.first", json!([i])),
        {"type": "group", "jobs": [job(1, "wf.fan", json!([i, 0])), job(2, "wf.fan", json!([i, 1]))]},
        {"type": "batch", "jobs": [job(3, "wf.part", json!([i, 0])), job(4, "wf.part", json!([i, 1]))],
         "callbacks": {"on_complete": job(5, "wf.done", json!([i])),
                       "on_success": job(6, "wf.ok", json!([i]))}},
        job(7, "wf.last", json!([i]))]})
}
const STEPS: usize = 8;

#[test]
fn a_workflow_spanning_partitions_completes_each_step_once_across_a_kill9() {
    if url().is_none() {
        return;
    }
    let _one = serial();
    let qs = queues();
    let spread: HashSet<u32> = qs
        .iter()
        .map(|q| ojsd::cluster::route::partition_of(q, PARTS as u32))
        .collect();
    assert!(
        spread.len() >= 3,
        "the queues span the partitions: {spread:?}"
    );
    let c = cluster(3);
    let mut nodes = start(&c, 3);
    let busiest = busiest(&c);
    let others: Vec<String> = (0..3)
        .filter(|i| *i != busiest)
        .map(|i| c.nodes[i].0.clone())
        .collect();
    let entry = others[0].clone();
    let n = 8;
    for i in 0..n {
        let wf = json_when_served(
            &entry,
            &format!("WORKFLOW CREATE {}", spanning(i, &qs)),
            LIMIT,
        );
        assert_eq!(wf["id"], format!("pwf-{i}"));
    }
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, stop, wid) = (acked.clone(), stop.clone(), format!("pwfw-{w}"));
            let work = Duration::from_millis(20);
            acking_worker(others[w].clone(), wid, qs.clone(), work, acked, stop)
        })
        .collect();
    let total = n * STEPS;
    wait_until("some steps done", LIMIT, || {
        acked.lock().unwrap().len() >= total / 4
    });
    let at_kill = acked.lock().unwrap().len();
    nodes[busiest].kill9();
    let killed = Instant::now();
    let get = |i: usize| json_when_served(&entry, &format!("WORKFLOW GET pwf-{i}"), LIMIT);
    wait_until("every workflow to complete", LIMIT * 2, || {
        (0..n).all(|i| get(i)["state"] == "completed")
    });
    let took = killed.elapsed();
    let acked = stop_acking(&stop, workers, &acked);
    assert!(at_kill < total, "the kill came mid-way");
    // Exactly one job per step (callbacks included), each completed, in its own queue.
    let mut jobs = Vec::new();
    for q in &qs {
        let page = json_when_served(
            &entry,
            &format!("JOBS {}", json!({"queue": q, "limit": 1000})),
            LIMIT,
        );
        for j in page["jobs"].as_array().expect("jobs") {
            assert_eq!(&j["queue"], q);
            jobs.push(j.clone());
        }
    }
    let docs: Vec<Value> = (0..n).map(get).collect();
    assert_each_step_once(&jobs, &docs, total);
    eprintln!(
        "workflows across partitions: {n} workflows of {STEPS} jobs in {} partitions, \
         {at_kill} ACKs before the kill -9, {} after; all completed {} ms after the kill; \
         every step enqueued and completed once",
        spread.len(),
        acked.len() - at_kill,
        took.as_millis()
    );
}
