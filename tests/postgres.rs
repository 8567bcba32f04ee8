//! The `ojsd` binary on `--store postgres`, end to end over TCP: acknowledged work survives
//! kill -9 (under a steady stream of pushes, in both commit modes), and a node frozen with
//! SIGSTOP past its lease, whose partition another node took, acknowledges nothing more.
//! They need `OJSD_TEST_POSTGRES_URL` (.ci/run starts a throw-away PostgreSQL and sets it)
//! and are skipped with a notice without it. Each test uses a schema of its own.
//! (`OJSD_TEST_STORE=postgres` runs the durability and crash suites on this store too.)

mod common;

use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn url() -> Option<String> {
    let url = std::env::var("OJSD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
    }
    url
}

fn schema() -> String {
    format!(
        "e2e_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

fn pg_args(url: &str, schema: &str, node: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--store",
        "postgres",
        "--postgres-url",
        url,
        "--postgres-schema",
        schema,
        "--node-id",
        node,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn start(args: &[String]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start_with(&args)
}

fn kill9_keeps_everything_acknowledged(pipeline: &str) {
    let Some(url) = url() else { return };
    let schema = schema();
    let mut srv = start(&pg_args(
        &url,
        &schema,
        "node-1",
        &["--commit-pipeline", pipeline],
    ));
    // Settled work first: pushed, fetched, some acknowledged.
    let mut c = srv.client();
    let mut w = srv.worker("w-pg");
    let ids: Vec<String> = (0..60)
        .map(|i| push_id(&mut c, &test_job("pg-e2e", json!({"args": [i]}))))
        .collect();
    let mut acked = vec![];
    for _ in 0..20 {
        let job = fetch_one(&mut w, "pg-e2e");
        if acked.len() < 12 {
            w.ack(&id_of(&job), None).unwrap();
            acked.push(id_of(&job));
        }
    }
    // Then a stream of pushes, killed in the middle: every push answered +OK must survive.
    let addr = srv.addr.clone();
    let ok = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (ok, stop) = (ok.clone(), stop.clone());
        std::thread::spawn(move || {
            let Ok(mut c) = ojs_client::Client::connect(&addr) else {
                return;
            };
            let t0 = Instant::now();
            while !stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(20) {
                match c.push(&test_job("pg-stream", json!({"args": ["x".repeat(2000)]}))) {
                    Ok(job) => ok.lock().unwrap().push(id_of(&job)),
                    Err(_) => return,
                }
            }
        })
    };
    let t0 = Instant::now();
    while ok.lock().unwrap().len() < 50 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    srv.kill9();
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();
    let streamed = ok.lock().unwrap().clone();
    assert!(
        streamed.len() >= 50,
        "the stream got {} pushes through",
        streamed.len()
    );

    srv.restart();
    let mut c = srv.client();
    let states = states_of(&mut c, &ids);
    for (id, state) in ids.iter().zip(&states) {
        let state = state.as_deref();
        if acked.contains(id) {
            assert_eq!(state, Some("completed"), "{id}");
        } else {
            assert!(
                matches!(state, Some("available") | Some("active")),
                "{id}: {state:?}"
            );
        }
    }
    let lost: Vec<_> = streamed
        .iter()
        .zip(states_of(&mut c, &streamed))
        .filter(|(_, s)| s.as_deref() != Some("available"))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged pushes lost or changed: {lost:?}"
    );
    // And the restarted server works on.
    let id = push_id(&mut c, &test_job("pg-after", json!({})));
    let mut w = srv.worker("w-pg-2");
    assert_eq!(id_of(&fetch_one(&mut w, "pg-after")), id);
    w.ack(&id, None).unwrap();
    eprintln!(
        "postgres kill -9 (pipeline {pipeline}): {} streamed pushes acknowledged, all kept",
        streamed.len()
    );
}

#[test]
fn kill9_keeps_everything_acknowledged_inline() {
    kill9_keeps_everything_acknowledged("false");
}

#[test]
fn kill9_keeps_everything_acknowledged_pipelined() {
    kill9_keeps_everything_acknowledged("true");
}

/// Node A is frozen (SIGSTOP) past its lease; node B takes the partition over; A wakes up
/// (SIGCONT) and must not acknowledge a push: its store refuses the write as fenced, the
/// client gets an error (or a closed connection), and A stops. B has A's acknowledged work
/// and nothing of what A was asked after the takeover.
#[test]
fn a_frozen_node_acknowledges_nothing_after_a_takeover() {
    let Some(url) = url() else { return };
    let schema = schema();
    let lease = ["--lease-ttl-ms", "1000"];
    let mut a = start(&pg_args(&url, &schema, "node-a", &lease));
    let mut ca = a.client();
    let before = push_id(&mut ca, &test_job("pg-fence", json!({})));

    a.signal("-STOP");
    std::thread::sleep(Duration::from_millis(1500));
    let b = start(&pg_args(&url, &schema, "node-b", &lease));
    a.signal("-CONT");

    let after = ca.push(&test_job("pg-fence", json!({"args": ["after"]})));
    assert!(
        after.is_err(),
        "a fenced node acknowledged a push: {after:?}"
    );
    assert!(
        a.wait_exit(Duration::from_secs(10))
            .is_some_and(|code| code != 0),
        "the fenced node stops, with an error"
    );

    let mut cb = b.client();
    assert_eq!(
        states_of(&mut cb, std::slice::from_ref(&before)),
        vec![Some("available".to_string())]
    );
    let mut w = b.worker("w-b");
    assert_eq!(id_of(&fetch_one(&mut w, "pg-fence")), before);
    fetch_none(&mut w, "pg-fence");
}

/// A node started with `--listen 127.0.0.1:0` (as every test server is) registers the port
/// it really bound in `ojs_nodes`, which CLUSTER shows.
#[test]
fn a_node_on_port_0_registers_the_port_it_bound() {
    let Some(url) = url() else { return };
    let schema = schema();
    let srv = start(&pg_args(&url, &schema, "node-p0", &[]));
    let mut c = srv.client();
    let cluster = c.cluster().unwrap();
    let nodes = cluster["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{cluster}");
    assert_eq!(nodes[0]["id"], "node-p0");
    assert_eq!(nodes[0]["addr"], srv.addr.as_str(), "{cluster}");
    assert!(!srv.addr.ends_with(":0"));
}
