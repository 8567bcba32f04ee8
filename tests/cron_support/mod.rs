//! Helpers shared by the cron suites (`cron.rs`, `cron_restart.rs`, `cron_http.rs`).
#![allow(dead_code)]

use crate::common::*;
use chrono::{DateTime, Utc};
use ojs_client::Client;
use serde_json::Value;

/// `CRON ADD`: `{"cron_job": {...}, "created": bool}`.
pub fn add(c: &mut Client, def: Value) -> Value {
    call_json(c, &format!("CRON ADD {def}"))
}

/// `CRON GET`: the registration with its system-managed fields.
pub fn get(c: &mut Client, name: &str) -> Value {
    call_json(c, &format!("CRON GET {name}"))["cron_job"].clone()
}

/// The names in a `CRON LIST` (or HTTP list) reply, in order.
pub fn names(list: &Value) -> Vec<String> {
    let jobs = list["cron_jobs"].as_array().expect("cron_jobs");
    jobs.iter()
        .map(|j| j["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Move the engine clock to half a second after `t`.
pub fn advance_to(c: &mut Client, t: DateTime<Utc>) {
    let secs = secs_between(server_now(c), t) + 0.5;
    assert!(secs > 0.0, "{t} is already past");
    advance(c, secs);
}

/// Every cron event in the log so far, in order: replayed from the start up to a marker
/// (pausing a fresh queue), so the read never waits on events that will not come.
pub fn cron_events(srv: &Server) -> Vec<Value> {
    let mark = format!("mark-{}", uuid::Uuid::now_v7().simple());
    call_ok(&mut srv.client(), &format!("QUEUE PAUSE {mark}"));
    crate::common::events_up_to_mark(&srv.addr, &["cron.*"], &mark)
}

pub fn of_type(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

/// The `type` of each event.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect()
}
