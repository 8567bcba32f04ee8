//! The admin subcommands of the `ojsd` binary (`ojsd push`, `ojsd queues`, `ojsd dead`,
//! `ojsd tail`, ...) run as a user would run them, against a real server.

mod common;

use common::*;
use serde_json::{json, Value};
use std::process::{Command, Output};

struct Run {
    code: i32,
    out: String,
    err: String,
}

fn ojsd(srv: &Server, args: &[&str]) -> Run {
    run_at(&srv.addr, args)
}

fn run_at(addr: &str, args: &[&str]) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_ojsd"))
        .args(args)
        .env("OJSD_ADDR", addr)
        .env_remove("OJSD_PASSWORD")
        .output()
        .expect("run ojsd");
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ok(srv: &Server, args: &[&str]) -> String {
    let r = ojsd(srv, args);
    assert_eq!(r.code, 0, "ojsd {args:?}: {}{}", r.out, r.err);
    r.out
}

fn ok_json(srv: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = ok(srv, &a);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} --json: {e}: {out}"))
}

#[test]
fn push_job_queues_and_stats_show_what_the_server_holds() {
    let srv = Server::start();
    let line = ok(
        &srv,
        &[
            "push",
            "email.send",
            r#"[1, {"to": "a@b.c"}]"#,
            "--queue",
            "mail",
            "--priority",
            "5",
        ],
    );
    let id = line.split_whitespace().next().unwrap().to_string();
    let mut c = srv.client();
    let job = c.job(&id).unwrap();
    assert_eq!(job["queue"], "mail");
    assert_eq!(job["priority"], 5);
    assert_eq!(job["args"], json!([1, {"to": "a@b.c"}]));
    // A single non-array value becomes the one argument.
    let j = ok_json(&srv, &["push", "report.build", "42", "--queue", "mail"]);
    assert_eq!(j["args"], json!([42]));

    let shown = ok(&srv, &["job", &id]);
    assert!(
        shown.contains("email.send") && shown.contains("available"),
        "{shown}"
    );
    assert_eq!(ok_json(&srv, &["job", &id])["id"], id.as_str());

    let table = ok(&srv, &["queues"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("mail"))
        .expect("mail row");
    assert_eq!(row.split_whitespace().nth(2), Some("2"), "{table}");
    // The states' own names as column heads (not "dead" for discarded), as in `stats`.
    let head = table.lines().next().unwrap_or_default().to_lowercase();
    assert!(
        head.contains("discarded") && !head.contains("dead"),
        "{table}"
    );
    let stats = ok(&srv, &["stats"]);
    assert!(stats.contains("jobs 2"), "{stats}");
    // A queue's state in the binding's words (active/paused), as `ojsd queues` says it.
    let mail = stats
        .lines()
        .find(|l| l.starts_with("mail"))
        .expect("mail in stats");
    assert_eq!(mail.split_whitespace().nth(1), Some("active"), "{stats}");
    assert_eq!(ok_json(&srv, &["stats"])["totals"]["enqueued"], 2);

    let r = ojsd(&srv, &["job", "no-such-job"]);
    assert_eq!(r.code, 1);
    assert!(r.err.contains("NOT_FOUND"), "{}", r.err);
}

/// A typo does not leave a ghost queue (issue 22): pausing a name the server has never
/// seen is refused with exit 2 and nothing is created, unless `--new` says it is meant.
#[test]
fn pausing_an_unknown_queue_needs_new() {
    let srv = Server::start();
    let mut c = srv.client();
    push_id(&mut c, &test_job("real", json!({})));
    let r = ojsd(&srv, &["queue", "pause", "real", "nosuchq"]);
    assert_eq!(r.code, 2, "{}{}", r.out, r.err);
    assert!(
        r.err.contains("nosuchq") && r.err.contains("--new"),
        "{}",
        r.err
    );
    let names = |c: &mut ojs_client::Client| -> Vec<String> {
        call_json(c, "QUEUE LIST")["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(!names(&mut c).contains(&"nosuchq".to_string()));
    assert_eq!(
        call_json(&mut c, "QUEUE STATS real")["paused"],
        false,
        "all or nothing"
    );
    ok(&srv, &["queue", "pause", "real"]);
    ok(&srv, &["queue", "pause", "later", "--new"]);
    assert_eq!(call_json(&mut c, "QUEUE STATS later")["paused"], true);
}

#[test]
fn queue_pause_resume_and_purge_with_confirmation() {
    let srv = Server::start();
    let mut c = srv.client();
    for _ in 0..3 {
        push_id(&mut c, &test_job("bulk", json!({})));
    }
    ok(&srv, &["queue", "pause", "bulk"]);
    let q = call_json(&mut c, "QUEUE STATS bulk");
    assert_eq!(q["paused"], true);
    ok(&srv, &["queue", "resume", "bulk"]);
    assert_eq!(call_json(&mut c, "QUEUE STATS bulk")["paused"], false);

    // Without --yes nothing is deleted, and the exit code says it was refused.
    let r = ojsd(&srv, &["queue", "purge", "bulk"]);
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(r.err.contains("up to 3 jobs"), "{}", r.err);
    assert_eq!(
        call_json(&mut c, "QUEUE STATS bulk")["counts"]["available"],
        3
    );

    let r = ojsd(&srv, &["queue", "purge", "bulk", "--yes"]);
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.out.contains("purged 3 jobs"), "{}", r.out);
    assert!(r.err.contains("purged available: 3"), "progress: {}", r.err);
    assert_eq!(
        call_json(&mut c, "QUEUE STATS bulk")["counts"]["available"],
        0
    );
}

/// `count` dead letters in `queue`: jobs with one attempt, fetched and failed.
fn make_dead(srv: &Server, queue: &str, count: usize) -> Vec<String> {
    let mut c = srv.client();
    let jobs: Vec<Value> = (0..count)
        .map(|_| test_job(queue, json!({"retry": {"max_attempts": 1}})))
        .collect();
    let ids: Vec<String> = c.push_bulk(&jobs).unwrap().iter().map(id_of).collect();
    let mut w = srv.worker("dead-maker");
    let mut left = count;
    while left > 0 {
        let got = w.fetch_many(&[queue], left.min(1000)).unwrap();
        for j in &got {
            w.fail(&id_of(j), "boom", "it broke", &[]).unwrap();
        }
        left -= got.len();
    }
    ids
}

#[test]
fn dead_list_and_bulk_retry_and_delete_show_progress() {
    let srv = Server::start();
    let ids = make_dead(&srv, "d", 450);
    make_dead(&srv, "other", 5);
    let list = ok_json(&srv, &["dead", "list", "--queue", "d", "--limit", "10"]);
    assert_eq!(list["total"], 450);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 10);
    let table = ok(&srv, &["dead", "list", "--queue", "other"]);
    assert!(table.contains("boom: it broke"), "{table}");

    // One by id.
    ok(&srv, &["dead", "retry", &ids[0]]);
    let mut c = srv.client();
    assert_eq!(state_of(&mut c, &ids[0]), "available");

    // Bulk needs --yes, then goes page by page.
    let r = ojsd(&srv, &["dead", "retry", "--all", "--queue", "d"]);
    assert_eq!(r.code, 2);
    assert!(r.err.contains("449 dead letters"), "{}", r.err);
    let r = ojsd(
        &srv,
        &["dead", "retry", "--all", "--queue", "d", "--yes", "--json"],
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let v: Value = serde_json::from_str(&r.out).unwrap();
    assert_eq!(v["retried"], 449);
    assert!(r.err.contains("retried 200/449"), "progress: {}", r.err);
    assert!(r.err.contains("retried 449/449"), "progress: {}", r.err);
    for id in ids.iter().step_by(50) {
        assert_eq!(state_of(&mut c, id), "available");
    }
    // The other queue's dead letters were not touched; delete them.
    assert_eq!(call_json(&mut c, "DEAD STATS")["total"], 5);
    let r = ojsd(
        &srv,
        &["dead", "delete", "--all", "--queue", "other", "--yes"],
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(call_json(&mut c, "DEAD STATS")["total"], 0);
}

#[test]
fn workers_cron_workflow_and_tail() {
    let srv = Server::start();
    let mut w = srv.worker("w-cli");
    w.beat("w-cli", &[]).unwrap();
    let table = ok(&srv, &["workers"]);
    assert!(table.lines().any(|l| l.starts_with("w-cli")), "{table}");
    ok(&srv, &["workers", "quiet", "w-cli"]);
    assert_eq!(
        w.beat("w-cli", &[]).unwrap(),
        ojs_client::Directive::Quiet,
        "the quiet directive reaches the worker"
    );

    let def = r#"{"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "type": "report.build", "args": []}"#;
    let out = ok(&srv, &["cron", "add", def]);
    assert!(out.contains("registered nightly"), "{out}");
    let list = ok_json(&srv, &["cron", "list"]);
    assert_eq!(list["cron_jobs"][0]["name"], "nightly");
    assert!(ok(&srv, &["cron", "list"]).contains("0 3 * * *"));
    ok(&srv, &["cron", "del", "nightly"]);
    assert_eq!(ok_json(&srv, &["cron", "list"])["count"], 0);

    let mut c = srv.client();
    let wf = call_json(
        &mut c,
        r#"WORKFLOW CREATE {"type": "chain", "id": "wf-cli", "steps": [{"type": "a.one", "args": []}, {"type": "a.two", "args": []}]}"#,
    );
    assert_eq!(wf["id"], "wf-cli");
    let shown = ok(&srv, &["workflow", "get", "wf-cli"]);
    assert!(shown.starts_with("wf-cli chain"), "{shown}");
    assert_eq!(shown.lines().count(), 3, "{shown}");

    // tail replays from a cursor and stops after --count events.
    let id = push_id(&mut c, &test_job("t", json!({})));
    let r = ojsd(
        &srv,
        &[
            "tail", "--after", "0", "--type", "job.*", "--queue", "t", "--count", "1", "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let e: Value = serde_json::from_str(r.out.trim()).unwrap();
    assert_eq!(e["type"], "job.enqueued");
    assert_eq!(e["subject"], id.as_str());
}

#[test]
fn a_server_that_is_down_or_a_wrong_password_is_one_clear_line() {
    let r = run_at("127.0.0.1:1", &["queues"]);
    assert_eq!(r.code, 3);
    assert!(
        r.err.starts_with("ojsd: cannot reach ojsd at 127.0.0.1:1"),
        "{}",
        r.err
    );
    assert_eq!(r.err.lines().count(), 1, "{}", r.err);

    let srv = Server::start_with(&["--password", "s3cret"]);
    let r = ojsd(&srv, &["queues"]);
    assert_eq!(r.code, 3);
    assert!(r.err.contains("requires a password"), "{}", r.err);
    let r = ojsd(&srv, &["queues", "--password", "nope"]);
    assert_eq!(r.code, 3);
    assert!(r.err.contains("refused the password"), "{}", r.err);
    let r = ojsd(&srv, &["queues", "--password", "s3cret"]);
    assert_eq!(r.code, 0, "{}", r.err);
}

#[test]
fn a_bad_push_time_is_refused_by_the_flag_not_the_server() {
    // No server is needed: the flag itself is refused, exit 2, naming it.
    let r = run_at("127.0.0.1:1", &["push", "--at", "tomorrow", "t.x"]);
    assert_eq!(r.code, 2, "{}{}", r.out, r.err);
    assert!(r.err.contains("--at"), "{}", r.err);
}

#[test]
fn stats_counts_in_words_a_person_reads() {
    let srv = Server::start();
    let _w = srv.worker("only-one");
    let out = ok(&srv, &["stats"]);
    let first = out.lines().next().unwrap();
    assert!(
        first.contains(" connections, ") || first.contains(" 1 connection, "),
        "{out}"
    );
    assert!(!first.contains(" 1 connections"), "{out}");
    assert_eq!(out.lines().last(), Some("1 worker"), "{out}");
}

/// The CLI covers what an operator reaches for (issue 22): jobs of a queue or state,
/// cancel, cron get/enable/disable, workflow list/cancel, dead stats and get.
#[test]
fn jobs_cancel_cron_toggles_workflow_list_cancel_and_dead_stats() {
    let srv = Server::start();
    let mut c = srv.client();
    let a = push_id(&mut c, &test_job("listed", json!({})));
    let b = push_id(&mut c, &test_job("listed", json!({})));
    let listed = ok_json(&srv, &["jobs", "--queue", "listed"]);
    assert_eq!(listed["total"], 2, "{listed}");
    assert!(ok(&srv, &["jobs", "--queue", "listed", "--state", "available"]).contains(&a));
    let out = ok(&srv, &["cancel", &b]);
    assert!(out.contains("cancelled"), "{out}");
    assert_eq!(state_of(&mut c, &b), "cancelled");
    let only = ok_json(&srv, &["jobs", "--state", "cancelled"]);
    assert_eq!(only["jobs"][0]["id"], b.as_str());

    let def = r#"{"name": "hourly", "cron": "0 * * * *", "type": "t.x", "args": []}"#;
    ok(&srv, &["cron", "add", def]);
    assert_eq!(ok_json(&srv, &["cron", "get", "hourly"])["enabled"], true);
    assert!(ok(&srv, &["cron", "disable", "hourly"]).contains("disabled hourly"));
    assert_eq!(ok_json(&srv, &["cron", "get", "hourly"])["enabled"], false);
    assert!(ok(&srv, &["cron", "enable", "hourly"]).contains("next run"));
    assert_eq!(ok_json(&srv, &["cron", "get", "hourly"])["enabled"], true);

    call_json(
        &mut c,
        r#"WORKFLOW CREATE {"type": "chain", "id": "wf-list", "steps": [{"type": "a.one", "args": []}, {"type": "a.two", "args": []}]}"#,
    );
    assert!(ok(&srv, &["workflow", "list"]).contains("wf-list"));
    let out = ok(&srv, &["workflow", "cancel", "wf-list"]);
    assert!(out.contains("cancelled wf-list"), "{out}");
    let listed = ok_json(&srv, &["workflow", "list", "--state", "cancelled"]);
    assert_eq!(listed["workflows"][0]["id"], "wf-list", "{listed}");

    let stats = ok_json(&srv, &["dead", "stats"]);
    assert!(stats.is_object(), "{stats}");
    let r = ojsd(&srv, &["dead", "get", &a]);
    assert_eq!(r.code, 1, "not a dead letter: {}", r.err);
}
