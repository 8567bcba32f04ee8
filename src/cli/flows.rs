//! The admin subcommands for jobs, cron registrations and workflows beyond one job's
//! envelope: `ojsd jobs`, `ojsd cancel`, `ojsd cron ...`, `ojsd workflow ...`.

use super::table::Table;
use super::{connect, done, json_arg, print_json, s, Conn, CronAction, Page, Res, WorkflowAction};
use serde_json::{json, Value};

/// `ojsd jobs`: JOBS with a queue and/or state, as a table.
pub(super) fn jobs(conn: &Conn, queue: Option<String>, state: Option<String>, page: Page) -> Res {
    let mut c = connect(conn)?;
    let mut q = json!({"limit": page.limit, "offset": page.offset});
    if let Some(name) = queue {
        q["queue"] = json!(name);
    }
    if let Some(st) = state {
        q["state"] = json!(st);
    }
    let v = c.request(&format!("JOBS {q}"))?.unwrap_or(Value::Null);
    if conn.json {
        print_json(&v);
        return Ok(());
    }
    let mut t = Table::new(&["id", "type", "queue", "state", "attempt", "created"]);
    for j in v["jobs"].as_array().into_iter().flatten() {
        // Names as their clients wrote them (a Faktory client's `SendEmail`).
        t.row(vec![
            s(&j["id"]),
            crate::protocol::faktory::faktory_type(&s(&j["type"])),
            crate::protocol::faktory::faktory_queue(&s(&j["queue"])),
            s(&j["state"]),
            s(&j["attempt"]),
            s(&j["created_at"]),
        ]);
    }
    t.print();
    println!(
        "{} of {}",
        v["jobs"].as_array().map_or(0, Vec::len),
        s(&v["total"])
    );
    Ok(())
}

/// `ojsd cancel <id>`.
pub(super) fn cancel(conn: &Conn, id: &str) -> Res {
    let mut c = connect(conn)?;
    c.request(&format!("CANCEL {id}"))?;
    let v = c.request(&format!("JOB {id}"))?.unwrap_or(Value::Null);
    done(conn, v.clone(), || {
        format!("{} is {}", s(&v["id"]), s(&v["state"]))
    })
}

/// One registration, for `cron get`.
fn show_cron(conn: &Conn, e: &Value) -> Res {
    if conn.json {
        print_json(e);
        return Ok(());
    }
    for k in [
        "name",
        "cron",
        "timezone",
        "type",
        "args",
        "options",
        "enabled",
        "overlap_policy",
        "next_run_at",
        "last_run_at",
        "run_count",
        "description",
    ] {
        println!("{k:15} {}", s(&e[k]));
    }
    Ok(())
}

pub(super) fn cron(conn: &Conn, action: CronAction) -> Res {
    let mut c = connect(conn)?;
    let action_kind = match &action {
        CronAction::Enable { .. } => "ENABLE",
        _ => "DISABLE",
    };
    match action {
        CronAction::List => {
            let v = c
                .request(r#"CRON LIST {"limit": 1000}"#)?
                .unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
                return Ok(());
            }
            let mut t = Table::new(&[
                "name", "cron", "timezone", "type", "enabled", "next run", "last run", "runs",
            ]);
            for e in v["cron_jobs"].as_array().into_iter().flatten() {
                t.row(vec![
                    s(&e["name"]),
                    s(&e["cron"]),
                    s(&e["timezone"]),
                    s(&e["type"]),
                    s(&e["enabled"]),
                    s(&e["next_run_at"]),
                    s(&e["last_run_at"]),
                    s(&e["run_count"]),
                ]);
            }
            t.print();
            Ok(())
        }
        CronAction::Add { definition } => {
            let def = json_arg("the definition", &definition)?;
            let v = c
                .request(&format!("CRON ADD {def}"))?
                .unwrap_or(Value::Null);
            done(conn, v.clone(), || {
                let what = if v["created"].as_bool() == Some(true) {
                    "registered"
                } else {
                    "updated"
                };
                format!(
                    "{what} {}; next run {}",
                    s(&v["cron_job"]["name"]),
                    s(&v["cron_job"]["next_run_at"])
                )
            })
        }
        CronAction::Get { name } => {
            let v = c
                .request(&format!("CRON GET {name}"))?
                .unwrap_or(Value::Null);
            show_cron(conn, &v["cron_job"])
        }
        CronAction::Enable { name } | CronAction::Disable { name } => {
            let on = matches!(action_kind, "ENABLE");
            let v = c
                .request(&format!("CRON {action_kind} {name}"))?
                .unwrap_or(Value::Null);
            done(conn, v.clone(), || {
                let e = &v["cron_job"];
                if on {
                    format!("enabled {name}; next run {}", s(&e["next_run_at"]))
                } else {
                    format!("disabled {name}")
                }
            })
        }
        CronAction::Del { name } => {
            c.request(&format!("CRON DEL {name}"))?;
            done(conn, json!({"name": name, "deleted": true}), || {
                format!("deleted {name}")
            })
        }
    }
}

pub(super) fn workflow(conn: &Conn, action: WorkflowAction) -> Res {
    let mut c = connect(conn)?;
    let id = match action {
        WorkflowAction::Get { id } => id,
        WorkflowAction::Cancel { id } => {
            let v = c
                .request(&format!("WORKFLOW CANCEL {id}"))?
                .unwrap_or(Value::Null);
            return done(conn, v.clone(), || {
                format!("cancelled {id} ({})", s(&v["state"]))
            });
        }
        WorkflowAction::List { state, page } => {
            let mut q = json!({"limit": page.limit, "offset": page.offset});
            if let Some(st) = state {
                q["state"] = json!(st);
            }
            let v = c
                .request(&format!("WORKFLOW LIST {q}"))?
                .unwrap_or(Value::Null);
            if conn.json {
                print_json(&v);
                return Ok(());
            }
            let mut t = Table::new(&["id", "name", "type", "state", "created"]);
            for w in v["workflows"].as_array().into_iter().flatten() {
                t.row(vec![
                    s(&w["id"]),
                    s(&w["name"]),
                    s(&w["type"]),
                    s(&w["state"]),
                    s(&w["created_at"]),
                ]);
            }
            t.print();
            return Ok(());
        }
    };
    let v = c
        .request(&format!("WORKFLOW GET {id}"))?
        .unwrap_or(Value::Null);
    if conn.json {
        print_json(&v);
        return Ok(());
    }
    println!("{} {} {}", s(&v["id"]), s(&v["type"]), s(&v["state"]));
    fn walk(v: &Value, depth: usize) {
        let steps = v["steps"].as_array().or_else(|| v["jobs"].as_array());
        for st in steps.into_iter().flatten() {
            let label = st["name"]
                .as_str()
                .or_else(|| st["type"].as_str())
                .unwrap_or("?");
            println!(
                "{}- {label} [{}]{}",
                "  ".repeat(depth + 1),
                s(&st["state"]),
                st["job_id"]
                    .as_str()
                    .map(|j| format!(" job {j}"))
                    .unwrap_or_default()
            );
            walk(st, depth + 1);
        }
    }
    walk(&v, 0);
    Ok(())
}
