//! The admin subcommands of the `ojsd` binary (`ojsd push`, `ojsd queues`, `ojsd tail`, ...):
//! a client of a running server over its TCP protocol, using the Rust client
//! (`clients/rust`). Human tables by default, the server's JSON with `--json`.
//!
//! Exit codes: 0 done, 1 the server refused or failed the request, 2 bad usage (including
//! a destructive bulk action without `--yes`), 3 the server cannot be reached or the
//! password is wrong.

mod args;
mod cluster;
mod flows;
mod table;

pub use args::*;
use ojs_client::{Client, ConnectOptions, Error};
use serde_json::{json, Map, Value};
use std::io::{IsTerminal, Write};
use std::time::Duration;
use table::Table;

/// Why a subcommand stopped, with its exit code.
enum Fail {
    Usage(String),
    Unreachable(String),
    Server(String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e {
            Error::Server { code, message } => Fail::Server(format!("{code}: {message}")),
            Error::Io(e) => Fail::Unreachable(format!("connection lost: {e}")),
            Error::Protocol(m) => Fail::Server(format!("unexpected reply: {m}")),
        }
    }
}

type Res<T = ()> = Result<T, Fail>;

/// Run one admin subcommand; returns the process exit code.
pub fn run(cmd: Command) -> i32 {
    let outcome = match cmd {
        Command::Push(p) => push(&p),
        Command::Job { id, conn } => job(&conn, &id),
        Command::Jobs {
            queue,
            state,
            page,
            conn,
        } => flows::jobs(&conn, queue, state, page),
        Command::Cancel { id, conn } => flows::cancel(&conn, &id),
        Command::Queues { conn } => queues(&conn),
        Command::Queue { action, conn } => queue(&conn, action),
        Command::Dead { action, conn } => dead(&conn, action),
        Command::Workers { action, conn } => workers(&conn, action),
        Command::Cron { action, conn } => flows::cron(&conn, action),
        Command::Workflow { action, conn } => flows::workflow(&conn, action),
        Command::Tail(t) => tail(&t),
        Command::Stats { conn } => stats(&conn),
        Command::Cluster { conn } => cluster::cluster(&conn),
    };
    match outcome {
        Ok(()) => 0,
        Err(Fail::Usage(m)) => {
            eprintln!("ojsd: {m}");
            2
        }
        Err(Fail::Server(m)) => {
            eprintln!("ojsd: {m}");
            1
        }
        Err(Fail::Unreachable(m)) => {
            eprintln!("ojsd: {m}");
            3
        }
    }
}

fn connect(conn: &Conn) -> Res<Client> {
    let opts = ConnectOptions {
        password: conn.password.clone(),
        timeout: Some(Duration::from_secs(10)),
        ..ConnectOptions::default()
    };
    Client::connect_with(&conn.addr, &opts).map_err(|e| match e {
        Error::Io(io) => Fail::Unreachable(format!(
            "cannot reach ojsd at {} ({io}); is it running? (--addr, OJSD_ADDR)",
            conn.addr
        )),
        Error::Server { code, message } if code == "UNAUTHENTICATED" || code == "RATE_LIMITED" => {
            Fail::Unreachable(format!(
                "ojsd at {} refused the password: {message} (--password, OJSD_PASSWORD)",
                conn.addr
            ))
        }
        Error::Protocol(m) if m.contains("password") => Fail::Unreachable(format!(
            "ojsd at {} requires a password: give --password or set OJSD_PASSWORD",
            conn.addr
        )),
        e => Fail::Unreachable(format!("cannot talk to ojsd at {}: {e}", conn.addr)),
    })
}

/// A JSON argument, `@file`, or `-` for stdin.
fn json_arg(what: &str, text: &str) -> Res<Value> {
    let raw = if text == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Fail::Usage(format!("{what}: cannot read stdin: {e}")))?;
        s
    } else if let Some(path) = text.strip_prefix('@') {
        std::fs::read_to_string(path)
            .map_err(|e| Fail::Usage(format!("{what}: cannot read {path}: {e}")))?
    } else {
        text.to_string()
    };
    serde_json::from_str(&raw).map_err(|e| Fail::Usage(format!("{what} is not JSON: {e}")))
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn push(p: &Push) -> Res {
    let mut job = match &p.envelope {
        Some(e) => match json_arg("--envelope", e)? {
            Value::Object(m) => m,
            _ => return Err(Fail::Usage("--envelope must be a JSON object".into())),
        },
        None => Map::new(),
    };
    if let Some(t) = &p.job_type {
        job.insert("type".into(), json!(t));
    }
    match &p.args {
        Some(a) => {
            let v = json_arg("args", a)?;
            let v = if v.is_array() { v } else { json!([v]) };
            job.insert("args".into(), v);
        }
        None => {
            job.entry("args").or_insert(json!([]));
        }
    }
    if let Some(q) = &p.queue {
        job.insert("queue".into(), json!(q));
    }
    if let Some(n) = p.priority {
        job.insert("priority".into(), json!(n));
    }
    if let Some(at) = &p.at {
        job.insert("scheduled_at".into(), json!(at));
    }
    if let Some(m) = &p.meta {
        job.insert("meta".into(), json_arg("--meta", m)?);
    }
    let mut c = connect(&p.conn)?;
    let stored = c.push(&Value::Object(job))?;
    if p.conn.json {
        print_json(&stored);
    } else {
        println!(
            "{} {} queue={} state={}",
            s(&stored["id"]),
            s(&stored["type"]),
            s(&stored["queue"]),
            s(&stored["state"])
        );
    }
    Ok(())
}

fn job(conn: &Conn, id: &str) -> Res {
    let mut c = connect(conn)?;
    let j = c.job(id)?;
    if conn.json {
        print_json(&j);
        return Ok(());
    }
    let mut t = Table::new(&["field", "value"]);
    for k in [
        "id",
        "type",
        "queue",
        "state",
        "priority",
        "attempt",
        "created_at",
        "enqueued_at",
        "scheduled_at",
        "started_at",
        "completed_at",
        "next_retry_at",
        "worker_id",
    ] {
        if let Some(v) = j.get(k).filter(|v| !v.is_null()) {
            t.row(vec![k.into(), s(v)]);
        }
    }
    t.row(vec!["args".into(), j["args"].to_string()]);
    if let Some(e) = j.get("error").filter(|v| !v.is_null()) {
        t.row(vec![
            "error".into(),
            format!("{}: {}", s(&e["type"]), s(&e["message"])),
        ]);
    }
    if let Some(r) = j.get("result").filter(|v| !v.is_null()) {
        t.row(vec!["result".into(), r.to_string()]);
    }
    t.print();
    Ok(())
}

fn queues(conn: &Conn) -> Res {
    let mut c = connect(conn)?;
    let v = c.request("QUEUE LIST")?.unwrap_or(Value::Null);
    if conn.json {
        print_json(&v);
        return Ok(());
    }
    let mut t = Table::new(&[
        "queue",
        "state",
        "available",
        "active",
        "scheduled",
        "retryable",
        "discarded",
        "done/min",
        "failed/min",
    ]);
    for q in v["queues"].as_array().into_iter().flatten() {
        let n = |k: &str| s(&q["counts"][k]);
        t.row(vec![
            s(&q["name"]),
            s(&q["state"]),
            n("available"),
            n("active"),
            n("scheduled"),
            n("retryable"),
            n("discarded"),
            s(&q["throughput"]["processed_per_minute"]),
            s(&q["throughput"]["failed_per_minute"]),
        ]);
    }
    t.print();
    Ok(())
}

fn queue(conn: &Conn, action: QueueAction) -> Res {
    let mut c = connect(conn)?;
    match action {
        QueueAction::Pause { queues, .. } | QueueAction::Resume { queues } if queues.is_empty() => {
            Err(Fail::Usage("name at least one queue".into()))
        }
        QueueAction::Pause { queues, new } => {
            if !new {
                let known = c.request("QUEUE LIST")?.unwrap_or(Value::Null);
                let names: Vec<&str> = known["queues"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|q| q["name"].as_str())
                    .collect();
                let unknown: Vec<&String> = queues
                    .iter()
                    .filter(|q| !names.contains(&q.as_str()))
                    .collect();
                if !unknown.is_empty() {
                    let list: Vec<&str> = unknown.iter().map(|q| q.as_str()).collect();
                    return Err(Fail::Usage(format!(
                        "the server knows no queue {} (no job was ever pushed to it); check \
                         the name, or add --new to pause it before its first job",
                        list.join(", ")
                    )));
                }
            }
            c.request(&format!("QUEUE PAUSE {}", queues.join(" ")))?;
            done(conn, json!({"paused": queues}), || {
                format!("paused {}", queues.join(", "))
            })
        }
        QueueAction::Resume { queues } => {
            c.request(&format!("QUEUE RESUME {}", queues.join(" ")))?;
            done(conn, json!({"resumed": queues}), || {
                format!("resumed {}", queues.join(", "))
            })
        }
        QueueAction::Purge {
            queue,
            states,
            older_than,
            yes,
        } => {
            let states = if states.is_empty() {
                vec!["available".to_string(), "scheduled".to_string()]
            } else {
                states
            };
            let stats = c
                .request(&format!("QUEUE STATS {queue}"))?
                .unwrap_or(Value::Null);
            let total: u64 = states
                .iter()
                .filter_map(|st| stats["counts"][st.as_str()].as_u64())
                .sum();
            if !yes {
                return Err(Fail::Usage(format!(
                    "this would delete up to {total} jobs ({}) from queue {queue}; add --yes to do it",
                    states.join(", ")
                )));
            }
            // One state at a time, so a long purge shows where it is.
            let mut purged = 0u64;
            for st in &states {
                let mut body = json!({"states": [st], "confirm": true});
                if let Some(t) = &older_than {
                    body["older_than"] = json!(t);
                }
                let r = c
                    .request(&format!("QUEUE PURGE {queue} {body}"))?
                    .unwrap_or(Value::Null);
                let n = r["purged_count"].as_u64().unwrap_or(0);
                purged += n;
                progress(&format!("purged {st}: {n} ({purged} so far)"));
            }
            done(
                conn,
                json!({"queue": queue, "purged_count": purged, "states": states}),
                || format!("purged {purged} jobs from {queue}"),
            )
        }
    }
}

/// A progress line on stderr (stdout stays clean for `--json`).
fn progress(line: &str) {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "{line}");
}

/// Finish a command that changed something: its JSON, or one line for a person.
fn done(conn: &Conn, v: Value, human: impl FnOnce() -> String) -> Res {
    if conn.json {
        println!("{v}");
    } else {
        println!("{}", human());
    }
    Ok(())
}

/// Dead letters fetched and acted on per round trip in a bulk retry or delete.
const BULK_PAGE: usize = 200;

fn dead(conn: &Conn, action: DeadAction) -> Res {
    let mut c = connect(conn)?;
    match action {
        DeadAction::Stats => {
            let v = c.request("DEAD STATS")?.unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
            } else {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            Ok(())
        }
        DeadAction::Get { id } => {
            let v = c.request(&format!("DEAD GET {id}"))?.unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
            } else {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            Ok(())
        }
        DeadAction::List {
            filter,
            limit,
            offset,
        } => {
            let mut q = filter.to_json();
            q.insert("limit".into(), json!(limit.clamp(1, 1000)));
            q.insert("offset".into(), json!(offset));
            let v = c
                .request(&format!("DEAD LIST {}", Value::Object(q)))?
                .unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
                return Ok(());
            }
            let mut t = Table::new(&["id", "type", "queue", "attempt", "discarded_at", "error"]);
            for j in v["jobs"].as_array().into_iter().flatten() {
                let e = &j["error"];
                t.row(vec![
                    s(&j["id"]),
                    crate::protocol::faktory::faktory_type(&s(&j["type"])),
                    crate::protocol::faktory::faktory_queue(&s(&j["queue"])),
                    s(&j["attempt"]),
                    s(&j["discarded_at"]),
                    format!("{}: {}", s(&e["type"]), s(&e["message"])),
                ]);
            }
            t.print();
            println!("{} dead letters match", s(&v["total"]));
            Ok(())
        }
        DeadAction::Retry {
            id,
            all,
            filter,
            yes,
        } => dead_bulk(conn, &mut c, "RETRY", id, all, &filter, yes),
        DeadAction::Delete {
            id,
            all,
            filter,
            yes,
        } => dead_bulk(conn, &mut c, "DELETE", id, all, &filter, yes),
    }
}

/// DEAD RETRY / DEAD DELETE of one id, or of every match page by page with progress.
fn dead_bulk(
    conn: &Conn,
    c: &mut Client,
    verb: &str,
    id: Option<String>,
    all: bool,
    filter: &DeadFilter,
    yes: bool,
) -> Res {
    let past = if verb == "RETRY" {
        "retried"
    } else {
        "deleted"
    };
    if let Some(id) = id {
        c.request(&format!("DEAD {verb} {id}"))?;
        return done(conn, json!({"id": id, past: true}), || {
            format!("{past} {id}")
        });
    }
    if !all {
        return Err(Fail::Usage(
            "give a job id, or --all (with --queue/--type/--error-type) for every match".into(),
        ));
    }
    let page = |c: &mut Client, limit: usize| -> Res<Value> {
        let mut q = filter.to_json();
        q.insert("limit".into(), json!(limit));
        Ok(c.request(&format!("DEAD LIST {}", Value::Object(q)))?
            .unwrap_or(Value::Null))
    };
    let total = page(c, 1)?["total"].as_u64().unwrap_or(0);
    if !yes {
        return Err(Fail::Usage(format!(
            "this would {} {total} dead letters; add --yes to do it",
            verb.to_lowercase()
        )));
    }
    let (mut acted, mut failed) = (0u64, Vec::<String>::new());
    let mut skipped = std::collections::HashSet::new();
    loop {
        let v = page(c, BULK_PAGE + skipped.len())?;
        let ids: Vec<String> = v["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| j["id"].as_str().map(str::to_string))
            .filter(|id| !skipped.contains(id))
            .take(BULK_PAGE)
            .collect();
        if ids.is_empty() {
            break;
        }
        // Pipelined: one round trip per page.
        for id in &ids {
            c.send_line(&format!("DEAD {verb} {id}"))?;
        }
        c.flush()?;
        for id in ids {
            match c.read_reply()?.into_result() {
                Ok(_) => acted += 1,
                Err(Error::Server { code, message }) => {
                    // A job that cannot be retried stays dead; skip it from now on.
                    failed.push(format!("{id}: {code} {message}"));
                    skipped.insert(id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        progress(&format!("{past} {acted}/{total}"));
    }
    for f in failed.iter().take(20) {
        eprintln!("ojsd: not {past}: {f}");
    }
    done(
        conn,
        json!({"matched": total, past: acted, "failed": failed.len()}),
        || format!("{past} {acted} of {total} dead letters"),
    )?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Fail::Server(format!(
            "{} dead letters were not {past}",
            failed.len()
        )))
    }
}

fn workers(conn: &Conn, action: Option<WorkerAction>) -> Res {
    let mut c = connect(conn)?;
    match action {
        Some(WorkerAction::Quiet { wid }) => {
            c.quiet_worker(&wid)?;
            done(conn, json!({"id": wid, "directive": "quiet"}), || {
                format!("{wid} will go quiet on its next heartbeat")
            })
        }
        Some(WorkerAction::Terminate { wid }) => {
            c.terminate_worker(&wid)?;
            done(conn, json!({"id": wid, "directive": "terminate"}), || {
                format!("{wid} will terminate on its next heartbeat")
            })
        }
        None => {
            let v = c.request("WORKERS")?.unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
                return Ok(());
            }
            let mut t = Table::new(&[
                "worker",
                "state",
                "host",
                "pid",
                "queues",
                "active",
                "done",
                "last beat",
            ]);
            for w in v["workers"].as_array().into_iter().flatten() {
                let queues: Vec<String> = w["queues"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(s)
                    .collect();
                let state = if w["stale"].as_bool() == Some(true) {
                    format!("{} (stale)", s(&w["state"]))
                } else {
                    s(&w["state"])
                };
                t.row(vec![
                    s(&w["id"]),
                    state,
                    s(&w["hostname"]),
                    s(&w["info"]["pid"]),
                    queues.join(","),
                    s(&w["active_jobs"]),
                    s(&w["jobs_completed"]),
                    s(&w["last_heartbeat_at"]),
                ]);
            }
            t.print();
            Ok(())
        }
    }
}

fn tail(t: &Tail) -> Res {
    let mut c = connect(&t.conn)?;
    let mut filter = Map::new();
    for (k, v) in [
        ("event_types", &t.types),
        ("queues", &t.queues),
        ("job_types", &t.job_types),
    ] {
        if !v.is_empty() {
            filter.insert(k.into(), json!(v));
        }
    }
    if let Some(a) = t.after {
        filter.insert("after".into(), json!(a));
    }
    if let Some(since) = &t.since {
        filter.insert("since".into(), json!(since));
    }
    c.request(&format!("SUBSCRIBE {}", Value::Object(filter)))?;
    let tty = std::io::stdout().is_terminal();
    let mut seen = 0u64;
    while t.count.is_none_or(|n| seen < n) {
        let reply = match c.read_reply() {
            Ok(r) => r.into_result()?,
            // Events can be rare: a quiet stream is not an error.
            Err(Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        };
        let ojs_client::Reply::Bulk(bytes) = reply else {
            continue;
        };
        seen += 1;
        let text = String::from_utf8_lossy(&bytes);
        if t.conn.json {
            println!("{text}");
        } else {
            let e: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let d = &e["data"];
            let mut extra = String::new();
            for k in ["queue", "job_type", "worker_id", "attempt"] {
                if let Some(v) = d.get(k).filter(|v| !v.is_null()) {
                    extra.push_str(&format!(" {k}={}", s(v)));
                }
            }
            if let Some(m) = d["error"]["message"].as_str() {
                extra.push_str(&format!(" error={m:?}"));
            }
            println!(
                "{} #{} {:<16} {}{extra}",
                s(&e["time"]),
                s(&e["cursor"]),
                s(&e["type"]),
                s(&e["subject"])
            );
        }
        if !tty {
            let _ = std::io::stdout().flush();
        }
    }
    Ok(())
}

fn stats(conn: &Conn) -> Res {
    let mut c = connect(conn)?;
    let v = c.info()?;
    if conn.json {
        print_json(&v);
        return Ok(());
    }
    let sv = &v["server"];
    let tot = &v["totals"];
    println!(
        "ojsd {} on {} store, up {}s, {}, {} on disk",
        s(&sv["version"]),
        s(&sv["store"]),
        s(&sv["uptime_s"]),
        counted(sv["connections"].as_u64().unwrap_or(0), "connection"),
        human_bytes(sv["store_bytes"].as_u64().unwrap_or(0))
    );
    println!(
        "jobs {}  enqueued {}  completed {}  failed {}  dead {}  waiting fetches {}",
        s(&tot["jobs"]),
        s(&tot["enqueued"]),
        s(&tot["completed"]),
        s(&tot["failed"]),
        s(&tot["dead"]),
        s(&tot["waiting_fetches"])
    );
    let states = [
        "scheduled",
        "available",
        "pending",
        "active",
        "retryable",
        "completed",
        "cancelled",
        "discarded",
    ];
    // A queue's state in the one vocabulary of the binding and `ojsd queues`.
    let mut head = vec!["queue", "state"];
    head.extend(states);
    let mut t = Table::new(&head);
    if let Some(qs) = v["queues"].as_object() {
        for (name, q) in qs {
            let state = if q["paused"] == true {
                "paused"
            } else {
                "active"
            };
            let mut row = vec![name.clone(), state.to_string()];
            row.extend(states.iter().map(|st| s(&q[*st])));
            t.row(row);
        }
    }
    t.print();
    let workers = v["workers"].as_array().map_or(0, |w| w.len());
    println!("{}", counted(workers as u64, "worker"));
    Ok(())
}

/// "1 worker", "2 workers".
fn counted(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
