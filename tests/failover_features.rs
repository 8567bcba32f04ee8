//! Issue 21's cluster feature tests that the one-partition design (one node holds the
//! lease and runs the engine, the others are standbys forwarding to it) can pass, on
//! `ojsd --store postgres` nodes behind a real haproxy running `deploy/haproxy.cfg`
//! (harness: tests/common/cluster.rs). Cron, workflows and unique keys live in the engine
//! of the lease holder; after a kill -9 the new holder rebuilds them from PostgreSQL:
//!
//! - a cron entry enqueues one job per occurrence across a kill -9 of its owner, and the
//!   occurrences that came due while no node served are the ones reported `missed` (one
//!   catch-up job for the latest, PROTOCOL.md §11.4);
//! - workflows worked through haproxy complete across a kill -9 with every step enqueued,
//!   and every callback fired, once;
//! - concurrent pushes of one unique job from several clients across a takeover end with
//!   one job (half the clients push through haproxy, half through the standby, which
//!   forwards to the holder and becomes it);
//! - a node added (a standby, in CLUSTER) and one stopped (SIGTERM; `gone` in CLUSTER) under
//!   load, then the holder killed: every push answered +OK completes, no ACK twice.
//!
//! Needs `OJSD_TEST_POSTGRES_URL` and `haproxy` on PATH (.ci/run provides both); skipped
//! with a notice otherwise.

mod common;

use chrono::{DateTime, Utc};
use common::cluster::{
    acking_worker, assert_each_step_once, connect, first_success, json_retrying, roles, setup,
    stop_acking, wait_until, Cluster, Load, HOLDS, LEASE_TTL_MS,
};
use common::{id_of, ts};
use ojs_client::{Client, Reply};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Every event of `types` in the log so far, replayed from the start through haproxy up to
/// a marker (a paused fresh queue), so the read never waits for events that will not come.
fn events(lb: &str, types: &[&str]) -> Vec<Value> {
    let mark = format!("mark-{}", uuid::Uuid::now_v7().simple());
    json_or_ok(lb, &format!("QUEUE PAUSE {mark}"));
    common::events_up_to_mark(lb, types, &mark)
}

/// A command that answers +OK, through haproxy, retried until answered.
fn json_or_ok(lb: &str, line: &str) {
    match common::cluster::call_retrying(lb, line, LIMIT) {
        Reply::Simple(s) if s == "OK" => {}
        other => panic!("{line}: {other:?}"),
    }
}

/// Every job of `queue` (up to 1000), whatever its state.
fn jobs_of(lb: &str, queue: &str) -> Vec<Value> {
    let q = json!({"queue": queue, "limit": 1000});
    let page = json_retrying(lb, &format!("JOBS {q}"), LIMIT);
    let jobs = page["jobs"].as_array().expect("jobs").clone();
    assert_eq!(page["total"], jobs.len(), "all of them on one page");
    jobs
}

#[test]
fn cron_enqueues_one_job_per_occurrence_across_a_kill9_of_its_owner() {
    let Some(url) = setup() else { return };
    let mut c = Cluster::new(url, 2);
    // A lease that outlasts several occurrences: node-a renews it every 0.8 s, so it runs
    // at least 3.2 s past the kill, and node-b finds at least three occurrences due at once.
    c.ttl_ms = 4000;
    let (mut a, _b, _lb) = c.start_pair();
    let lb = c.lb_tcp.as_str();
    // `allow`: every occurrence enqueues, whether or not the last job ran (none is worked).
    let def = json!({"name": "tick", "cron": "@every 1s", "type": "a.tick",
                     "options": {"queue": "ticks"}, "overlap_policy": "allow"});
    json_retrying(lb, &format!("CRON ADD {def}"), LIMIT);
    let run_count = || {
        json_retrying(lb, "CRON GET tick", LIMIT)["cron_job"]["run_count"]
            .as_u64()
            .expect("run_count")
    };
    wait_until("three fires on node-a", LIMIT, || run_count() >= 3);

    let killed_at = Utc::now();
    a.kill9();
    first_success(lb, LIMIT);
    let served_at = Utc::now();
    let after = run_count();
    wait_until("three fires on node-b", LIMIT, || run_count() >= after + 3);
    let entry = json_retrying(lb, "CRON DISABLE tick", LIMIT)["cron_job"].clone();
    assert_eq!(
        entry["next_run_at"],
        Value::Null,
        "disabled: no more occurrences"
    );

    let jobs = jobs_of(lb, "ticks");
    let evs = events(lb, &["cron.*"]);
    // One job per cron.triggered, and no other.
    let triggered: HashMap<String, DateTime<Utc>> = evs
        .iter()
        .filter(|e| e["type"] == "cron.triggered")
        .map(|e| {
            let id = e["data"]["job_id"].as_str().expect("job_id").to_string();
            (id, ts(&e["data"]["scheduled_at"]))
        })
        .collect();
    assert_eq!(triggered.len(), jobs.len(), "one cron.triggered per job");
    // No occurrence enqueued twice.
    let mut fired: BTreeMap<DateTime<Utc>, String> = BTreeMap::new();
    for j in &jobs {
        let at = ts(&j["meta"]["cron_triggered_at"]);
        assert_eq!(triggered.get(&id_of(j)), Some(&at), "its cron.triggered");
        if let Some(other) = fired.insert(at, id_of(j)) {
            panic!("occurrence {at} enqueued twice: {other} and {}", id_of(j));
        }
    }
    // Every occurrence from the first to the last is either a job or reported missed, and
    // not both; missed ones only came due while no node served.
    let first = *fired.keys().next().unwrap();
    let grid = |t: DateTime<Utc>| {
        let ms = (t - first).num_milliseconds();
        assert_eq!(
            ms.rem_euclid(1000),
            0,
            "{t} is not an occurrence of @every 1s"
        );
        ms / 1000
    };
    let mut covered: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (at, id) in &fired {
        covered
            .entry(grid(*at))
            .or_default()
            .push(format!("job {id}"));
    }
    let mut missed = 0;
    for e in evs.iter().filter(|e| e["type"] == "cron.skipped") {
        let d = &e["data"];
        assert_eq!(d["reason"], "missed", "no other skip under `allow`: {e}");
        let (from, to) = (ts(&d["scheduled_at"]), ts(&d["last_missed_at"]));
        let n = d["missed_count"].as_i64().expect("missed_count");
        assert_eq!(grid(to) - grid(from) + 1, n, "{e}");
        for k in grid(from)..=grid(to) {
            let at = first + chrono::Duration::seconds(k);
            assert!(
                at >= killed_at - chrono::Duration::seconds(2) && at <= served_at,
                "{at} was reported missed but a node served then (killed {killed_at}, \
                 served again {served_at})"
            );
            covered.entry(k).or_default().push("missed".into());
            missed += 1;
        }
    }
    let last = *covered.keys().last().unwrap();
    for k in 0..=last {
        let how = covered.get(&k).cloned().unwrap_or_default();
        assert_eq!(how.len(), 1, "occurrence {k} (from {first}): {how:?}");
    }
    let before = fired.keys().filter(|t| **t < killed_at).count();
    let later = fired.keys().filter(|t| **t > served_at).count();
    // Of the three fires counted after the takeover, one may be due just before
    // `served_at`, which waits for haproxy's health check.
    assert!(
        before >= 3 && later >= 2,
        "{before} fired before, {later} after"
    );
    assert_eq!(entry["run_count"], jobs.len(), "one job per run");
    // The catch-up (§11.4): one job for the latest occurrence due at the takeover, the
    // earlier ones reported missed.
    assert!(
        missed >= 1,
        "the occurrences due at the takeover were caught up"
    );
    eprintln!(
        "cron: {} occurrences, {} jobs ({before} before the kill, {later} after the takeover), \
         {missed} reported missed while no node served, none twice",
        last + 1,
        jobs.len()
    );
}

/// A chain of a job, a group of two, a batch of two with two callbacks, and a job.
fn workflow(i: usize) -> Value {
    let job = |t: &str, args: Value| {
        json!({"type": t, "args": args,
        "options": {"queue": "wf", "timeout": 3}})
    };
    json!({"type": "chain", "id": format!("wf-{i}"), "steps": [
        job("wf.first", json!([i])),
        {"type": "group", "jobs": [job("wf.fan", json!([i, 0])), job("wf.fan", json!([i, 1]))]},
        {"type": "batch", "jobs": [job("wf.part", json!([i, 0])), job("wf.part", json!([i, 1]))],
         "callbacks": {"on_complete": job("wf.done", json!([i])),
                       "on_success": job("wf.ok", json!([i]))}},
        job("wf.last", json!([i]))]})
}
const JOBS_PER_WORKFLOW: usize = 8;

#[test]
fn workflows_complete_each_step_once_across_a_kill9() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url, 2);
    let (mut a, _b, _lb) = c.start_pair();
    let lb = c.lb_tcp.clone();
    let n = 12;
    for i in 0..n {
        let wf = json_retrying(&lb, &format!("WORKFLOW CREATE {}", workflow(i)), LIMIT);
        assert_eq!(wf["id"], format!("wf-{i}"));
    }
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, stop) = (acked.clone(), stop.clone());
            let (wid, queues) = (format!("wfw-{w}"), vec!["wf".to_string()]);
            acking_worker(
                lb.clone(),
                wid,
                queues,
                Duration::from_millis(30),
                acked,
                stop,
            )
        })
        .collect();
    let total = n * JOBS_PER_WORKFLOW;
    wait_until("some steps done on node-a", LIMIT, || {
        acked.lock().unwrap().len() >= total / 4
    });
    let at_kill = acked.lock().unwrap().len();
    a.kill9();
    first_success(&lb, LIMIT);
    wait_until("every workflow to complete", LIMIT, || {
        (0..n).all(|i| {
            json_retrying(&lb, &format!("WORKFLOW GET wf-{i}"), LIMIT)["state"] == "completed"
        })
    });
    let acked = stop_acking(&stop, workers, &acked);
    assert!(at_kill < total, "the kill came mid-way");
    // Exactly one job per step (callbacks included), each completed.
    let jobs = jobs_of(&lb, "wf");
    let docs: Vec<Value> = (0..n)
        .map(|i| json_retrying(&lb, &format!("WORKFLOW GET wf-{i}"), LIMIT))
        .collect();
    assert_each_step_once(&jobs, &docs, total);
    // Each workflow event once: one callback_fired per callback, one completed per workflow.
    let evs = events(&lb, &["workflow.*"]);
    let mut counts: HashMap<String, usize> = HashMap::new();
    for e in &evs {
        let d = &e["data"];
        let what = format!(
            "{} {} {} {}",
            e["type"], e["subject"], d["step_id"], d["callback"]
        );
        *counts.entry(what).or_default() += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "workflow events repeated: {repeated:?}"
    );
    let fired = |t: &str| evs.iter().filter(|e| e["type"] == t).count();
    assert_eq!(fired("workflow.callback_fired"), 2 * n);
    assert_eq!(fired("workflow.completed"), n);
    eprintln!(
        "workflows: {n} workflows of {JOBS_PER_WORKFLOW} jobs, {at_kill} ACKs before the \
         kill -9, {} after; every step enqueued and completed once, callbacks fired once",
        acked.len() - at_kill
    );
}

/// What one PUSH of a unique job came to: accepted with this id, or refused as a duplicate
/// of this id.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Accepted(String),
    Duplicate(String),
    /// No answer within `LIMIT` (not a panic in the client's thread: the others would
    /// wait for it at the barrier).
    NoAnswer,
}

/// PUSH until answered for good: the envelope or DUPLICATE_JOB (a cut connection or a
/// refused one is retried on a fresh connection, as a client of the cluster must).
fn push_unique(addr: &str, c: &mut Option<Client>, job: &Value) -> Outcome {
    let t0 = std::time::Instant::now();
    loop {
        if t0.elapsed() > LIMIT {
            return Outcome::NoAnswer;
        }
        let Some(cl) = c.as_mut() else {
            *c = connect(addr, None);
            if c.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        match cl.push(job) {
            Ok(env) => return Outcome::Accepted(id_of(&env)),
            Err(ojs_client::Error::Server { code, message }) if code == "DUPLICATE_JOB" => {
                let id = message.split_whitespace().nth(1).expect("the existing id");
                return Outcome::Duplicate(id.to_string());
            }
            Err(_) => *c = None,
        }
    }
}

fn unique_job(k: usize) -> Value {
    json!({"type": "u.once", "args": [k], "queue": "uniq",
           "unique": {"keys": ["type", "args"], "on_conflict": "reject"}})
}

#[test]
fn concurrent_unique_pushes_across_a_takeover_make_one_job() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url, 2);
    let (mut a, _b, _lb) = c.start_pair();
    let lb = c.lb_tcp.clone();
    // Half the clients push through the standby itself, which forwards to the holder.
    let standby = c.nodes[1].0.clone();
    let (clients, keys) = (4, 40);
    let barrier = Arc::new(Barrier::new(clients));
    let done = Arc::new(Mutex::new(0usize));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let lb = if i % 2 == 0 {
                lb.clone()
            } else {
                standby.clone()
            };
            let (barrier, done) = (barrier.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = None;
                let mut out = Vec::new();
                for k in 0..keys {
                    // Every client pushes key k at once.
                    barrier.wait();
                    out.push(push_unique(&lb, &mut c, &unique_job(k)));
                    *done.lock().unwrap() += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                out
            })
        })
        .collect();
    wait_until("a quarter of the keys pushed", LIMIT, || {
        *done.lock().unwrap() >= clients * keys / 4
    });
    a.kill9();
    let answers: Vec<Vec<Outcome>> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    // Now directly to the node that took over (node-a's port is gone): each key once more.
    assert!(connect(&c.nodes[0].0, None).is_none(), "node-a is gone");
    let mut direct = None;
    let again: Vec<Outcome> = (0..keys)
        .map(|k| push_unique(&c.nodes[1].0, &mut direct, &unique_job(k)))
        .collect();
    let jobs = jobs_of(&lb, "uniq");
    let mut stored: HashMap<u64, Vec<String>> = HashMap::new();
    for j in &jobs {
        let k = j["args"][0].as_u64().expect("key");
        stored.entry(k).or_default().push(id_of(j));
    }
    let mut cut = 0;
    for k in 0..keys {
        let seen: Vec<&Outcome> = answers.iter().map(|a| &a[k]).collect();
        let ids = stored.get(&(k as u64)).cloned().unwrap_or_default();
        assert_eq!(ids.len(), 1, "key {k}: jobs {ids:?}, answers {seen:?}");
        let accepted = seen
            .iter()
            .filter(|o| matches!(o, Outcome::Accepted(_)))
            .count();
        assert!(accepted <= 1, "key {k} accepted {accepted} times: {seen:?}");
        // A push whose +OK was cut by the kill was retried into the duplicate answer.
        cut += usize::from(accepted == 0);
        for o in seen.iter().copied().chain([&again[k]]) {
            let (Outcome::Accepted(id) | Outcome::Duplicate(id)) = o else {
                panic!("key {k}: a push got no answer: {seen:?}");
            };
            assert_eq!(id, &ids[0], "key {k}: {seen:?}, then {:?}", again[k]);
        }
        assert_eq!(again[k], Outcome::Duplicate(ids[0].clone()));
    }
    assert_eq!(jobs.len(), keys, "one job per key, and no other");
    eprintln!(
        "unique: {keys} keys pushed by {clients} clients at once across the takeover: one job \
         each ({cut} keys whose accepting reply was lost to the kill, answered as duplicates \
         on retry)"
    );
}

#[test]
fn a_node_added_and_one_stopped_under_load_then_the_holder_killed() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url, 4);
    let a = c.node(0);
    wait_until("node-a to serve", LIMIT, || a.logged(HOLDS));
    let mut a = a;
    let b = c.standby(1, 0);
    let mut cc = c.standby(2, 0);
    let _lb = c.haproxy();
    let role = |id: &'static str, want: &'static str| {
        let lb = c.lb_tcp.clone();
        move || roles(&lb).is_some_and(|r| r.get(id).map(String::as_str) == Some(want))
    };
    wait_until(
        "haproxy to route to node-a",
        LIMIT,
        role("node-a", "active"),
    );
    wait_until("node-c in CLUSTER", LIMIT, role("node-c", "standby"));

    let load = Load::start(&c.lb_tcp, 2, 2);
    wait_until("load", LIMIT, || load.acked() >= 50);
    // A fourth node joins under load: a standby, in CLUSTER.
    let d = c.standby(3, 0);
    wait_until("node-d in CLUSTER", LIMIT, role("node-d", "standby"));
    let acked = load.acked();
    wait_until("load with node-d", LIMIT, || load.acked() >= acked + 50);
    // A standby leaves: SIGTERM ends it at once, and CLUSTER shows it gone once its
    // heartbeat is a lease TTL old (PROTOCOL.md §4.2a).
    cc.signal("-TERM");
    assert!(
        cc.wait_exit(Duration::from_secs(10)).is_some(),
        "a standby stops on SIGTERM"
    );
    wait_until("node-c gone in CLUSTER", LIMIT, role("node-c", "gone"));
    let acked = load.acked();
    wait_until("load without node-c", LIMIT, || load.acked() >= acked + 50);
    let r = roles(&c.lb_tcp).expect("CLUSTER");
    assert_eq!(r.get("node-a").map(String::as_str), Some("active"), "{r:?}");

    // The holder dies: node-b or node-d takes over, the other stays a standby.
    a.kill9();
    first_success(&c.lb_tcp, LIMIT);
    let pushed = load.pushed();
    wait_until("load after the takeover", LIMIT, || {
        load.pushed() >= pushed + 100
    });
    let (pushed, errors) = load.finish_and_check(&c.lb_tcp);
    wait_until("node-a gone in CLUSTER", LIMIT, role("node-a", "gone"));
    let r = roles(&c.lb_tcp).expect("CLUSTER");
    let new = if b.logged("took the partition's lease") {
        "node-b"
    } else {
        assert!(
            d.logged("took the partition's lease"),
            "node-b or node-d took over"
        );
        "node-d"
    };
    let other = if new == "node-b" { "node-d" } else { "node-b" };
    assert_eq!(r.get(new).map(String::as_str), Some("active"), "{r:?}");
    assert_eq!(r.get(other).map(String::as_str), Some("standby"), "{r:?}");
    assert_eq!(r.get("node-c").map(String::as_str), Some("gone"), "{r:?}");
    eprintln!(
        "membership: node-d joined and node-c left under load, node-a killed, {new} took \
         over (lease TTL {LEASE_TTL_MS} ms): {pushed} pushes acknowledged ({errors} refused \
         or cut), all completed, none acked twice"
    );
}
