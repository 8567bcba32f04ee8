//! Two `ojsd --store postgres` nodes behind a real haproxy running `deploy/haproxy.cfg`:
//! one active, one standby that forwards its clients to it (so haproxy sends connections to
//! both). Producers and workers talk to haproxy only and reconnect on any error. Under load
//! the active node is killed (kill -9): the standby's forwards fail (retryable errors) until
//! it takes the partition over once the lease has run out, rebuilds and serves from its own
//! engine, and the clients carry on. Checked: every push answered
//! +OK is completed in the end, and no job's ACK is answered +OK twice. Printed: the time
//! from the kill to the first command that succeeds through haproxy. A second test freezes
//! the active node (SIGSTOP) past its lease instead: the standby takes over and the old
//! node, woken, acknowledges nothing and stops.
//!
//! Needs `OJSD_TEST_POSTGRES_URL` and `haproxy` on PATH (.ci/run provides both); skipped
//! with a notice otherwise. The harness is tests/common/cluster.rs.

mod common;

use common::cluster::{
    connect, first_success, roles, setup, wait_until, Cluster, Load, LEASE_TTL_MS,
};
use common::{id_of, test_job};
use ojs_client::{Client, ConnectOptions};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn kill9_of_the_active_node_fails_over_through_haproxy() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url, 2);
    let (mut a, b, _lb) = c.start_pair();

    let load = Load::start(&c.lb_tcp, 2, 2);
    wait_until("load before the kill", Duration::from_secs(30), || {
        load.acked() >= 100
    });

    a.kill9();
    let took = first_success(&c.lb_tcp, Duration::from_secs(60));
    let pushed_at_kill = load.pushed();
    // Load on the new node for a while, then stop pushing and let the workers drain.
    wait_until("load after the takeover", Duration::from_secs(30), || {
        load.pushed() >= pushed_at_kill + 100
    });
    let (pushed, errors) = load.finish_and_check(&c.lb_tcp);
    let r = roles(&c.lb_tcp).expect("CLUSTER");
    assert_eq!(r.get("node-b").map(String::as_str), Some("active"));
    assert!(b.logged("took the partition's lease"));
    eprintln!(
        "failover: {pushed} pushes acknowledged ({errors} refused or cut), \
         all completed, none acked twice; from kill -9 to the first command through \
         haproxy: {} ms (lease TTL {} ms)",
        took.as_millis(),
        LEASE_TTL_MS
    );
}

/// The active node is frozen past its lease; the standby takes over and haproxy moves the
/// clients; the old node, woken, has its commits refused (it answers no push +OK) and
/// exits non-zero, to come back as a standby when restarted.
#[test]
fn a_frozen_active_node_is_fenced_after_the_standby_takes_over() {
    let Some(url) = setup() else { return };
    let c = Cluster::new(url, 2);
    let (a, b, _lb) = c.start_pair();
    let mut direct_a = connect(&c.nodes[0].0, None).expect("connect to node-a");
    let before = id_of(&direct_a.push(&test_job("zombie", json!({}))).unwrap());

    a.signal("-STOP");
    let t0 = Instant::now();
    wait_until("node-b to take over", Duration::from_secs(30), || {
        b.logged("took the partition's lease")
    });
    first_success(&c.lb_tcp, Duration::from_secs(30));
    let took = t0.elapsed();
    a.signal("-CONT");
    let mut a = a;
    let after = direct_a.push(&test_job("zombie", json!({"args": ["after"]})));
    assert!(
        after.is_err(),
        "a fenced node acknowledged a push: {after:?}"
    );
    assert!(
        a.wait_exit(Duration::from_secs(15))
            .is_some_and(|code| code != 0),
        "the fenced node stops with an error"
    );

    let mut cl = connect(&c.lb_tcp, None).expect("connect through haproxy");
    assert_eq!(cl.job(&before).unwrap()["state"], "available");
    let mut w = connect(&c.lb_tcp, Some("w-z".into())).unwrap();
    let job = w
        .fetch(&["zombie"])
        .unwrap()
        .expect("the job pushed before");
    assert_eq!(id_of(&job), before);
    assert!(w.fetch(&["zombie"]).unwrap().is_none(), "nothing else");
    eprintln!(
        "zombie: node-b served {} ms after node-a froze (lease TTL {LEASE_TTL_MS} ms); \
         node-a's push after waking was refused and it exited",
        took.as_millis()
    );
}

/// On an embedded store the server is the whole cluster: CLUSTER over TCP, the HTTP route
/// and `ojsd cluster --json` all name it, active, with partition 0 and its address; a
/// producer token may not ask, an observer may.
#[test]
fn cluster_on_an_embedded_store_is_this_node_alone() {
    let srv = common::Server::start_with(&[
        "--node-id",
        "solo",
        "--token",
        "observer:obs-secret",
        "--token",
        "producer:prod-secret",
    ]);
    let as_role = |secret: &str| {
        let opts = ConnectOptions {
            password: Some(secret.to_string()),
            ..Default::default()
        };
        Client::connect_with(&srv.addr, &opts).expect("connect")
    };
    let v = as_role("obs-secret")
        .cluster()
        .expect("CLUSTER as observer");
    assert_eq!(v["partitions"], 1);
    assert_eq!(v["unowned"], json!([]));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{v}");
    assert_eq!(nodes[0]["id"], "solo");
    assert_eq!(nodes[0]["addr"], srv.addr.as_str());
    assert_eq!(nodes[0]["partitions"], json!([0]));
    assert_eq!(nodes[0]["role"], "active");
    assert_eq!(nodes[0]["local"], true);
    let refused = as_role("prod-secret").cluster();
    assert!(
        format!("{refused:?}").contains("FORBIDDEN"),
        "a producer may not: {refused:?}"
    );

    let r = common::http::send_as(
        &srv.http_addr,
        "obs-secret",
        "GET",
        "/ojs/v1/admin/cluster",
        "",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["nodes"][0]["id"], "solo");

    let out = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args([
            "cluster",
            "--json",
            "--addr",
            &srv.addr,
            "--password",
            "obs-secret",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["nodes"][0]["addr"], srv.addr.as_str());
}
