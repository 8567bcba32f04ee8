//! The cron routes of the HTTP front end (ojs-http-binding §13, ojs-cron §8): register
//! (201 new, 200 update), list with `?enabled=`, get, PATCH `enabled`, delete, and errors
//! in the binding's shape. Each route is the same engine command as over TCP.

mod common;
mod cron_support;

use chrono::{Duration, Utc};
use common::*;
use cron_support::*;
use serde_json::{json, Value};
use std::io::{Read, Write};

/// One HTTP request with a JSON body; the response body parsed as JSON.
fn http_send(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect http");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("response");
    let (head, rest) = raw.split_once("\r\n\r\n").expect("headers");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, serde_json::from_str(rest).unwrap_or(Value::Null))
}

#[test]
fn http_routes() {
    let srv = Server::start();
    let a = srv.http_addr.as_str();
    let def = json!({"name": "web-report", "cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin",
                     "type": "report.generate", "args": [1]});
    let (status, body) = http_send(a, "POST", "/ojs/v1/cron", &def.to_string());
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["cron_job"]["name"], "web-report");
    assert!(body.get("created").is_none());
    let (status, _) = http_send(a, "POST", "/ojs/v1/cron", &def.to_string());
    assert_eq!(status, 200, "an update");

    let list = http::get(a, "/ojs/v1/cron");
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(
        (names(&list), list["pagination"]["total"].clone()),
        (vec!["web-report".to_string()], json!(1))
    );
    let one = http::get(a, "/ojs/v1/cron/web-report").json();
    assert!(ts(&one["cron_job"]["next_run_at"]) > Utc::now() - Duration::minutes(1));
    // The TCP view is the same registration.
    assert_eq!(
        get(&mut srv.client(), "web-report")["created_at"],
        one["cron_job"]["created_at"]
    );

    let (status, body) = http_send(
        a,
        "PATCH",
        "/ojs/v1/cron/web-report",
        r#"{"enabled": false}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(
        pick(&body["cron_job"], &["enabled", "next_run_at"]),
        json!([false, null])
    );
    assert_eq!(http::get(a, "/ojs/v1/cron?enabled=true").json()["count"], 0);
    assert_eq!(
        http::get(a, "/ojs/v1/cron?enabled=false").json()["count"],
        1
    );
    let (status, body) = http_send(
        a,
        "PATCH",
        "/ojs/v1/cron/web-report",
        r#"{"enabled": true}"#,
    );
    assert!(
        status == 200 && body["cron_job"]["next_run_at"].is_string(),
        "{body}"
    );

    let bad = json!({"name": "x", "cron": "0 25 * * *", "type": "a"}).to_string();
    let (status, body) = http_send(a, "POST", "/ojs/v1/cron", &bad);
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_payload"))
    );
    let (status, body) = http_send(a, "POST", "/ojs/v1/cron", "{nope");
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
    let (status, _) = http_send(
        a,
        "PATCH",
        "/ojs/v1/cron/web-report",
        r#"{"enabled": "no"}"#,
    );
    assert_eq!(status, 400);

    let del = http::request(a, "DELETE", "/ojs/v1/cron/web-report", &[]);
    let body = del.json();
    assert_eq!(
        (del.status, &body["deleted"], &body["name"]),
        (200, &json!(true), &json!("web-report"))
    );
    // Beside the binding's fields, the removed entry (PROTOCOL.md §14 reading 31).
    assert_eq!(body["cron"]["name"], "web-report", "{body}");
    let again = http::request(a, "DELETE", "/ojs/v1/cron/web-report", &[]);
    assert_eq!(
        (again.status, again.json()["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    assert_eq!(http::get(a, "/ojs/v1/cron/web-report").status, 404);
    let (status, _) = http_send(
        a,
        "PATCH",
        "/ojs/v1/cron/web-report",
        r#"{"enabled": true}"#,
    );
    assert_eq!(status, 404);
}

/// Every entry lists its next five runs (`next_runs`): the first is `next_run_at`, each is
/// one the schedule fires at (09:00 Berlin time on each weekday in turn; every 90 s from
/// `next_run_at` for `@every`), and none while disabled.
#[test]
fn entries_list_their_next_runs() {
    use chrono::{Datelike, Timelike, Weekday};
    let srv = Server::start();
    let a = srv.http_addr.as_str();
    let def = json!({"name": "weekday", "cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin",
                     "type": "report.generate", "args": []});
    let (status, body) = http_send(a, "POST", "/ojs/v1/cron", &def.to_string());
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["cron_job"]["next_runs"].as_array().map(Vec::len),
        Some(5)
    );
    let every = json!({"name": "often", "cron": "@every 90s", "type": "tick", "args": []});
    assert_eq!(
        http_send(a, "POST", "/ojs/v1/cron", &every.to_string()).0,
        201
    );

    let list = http::get(a, "/ojs/v1/cron").json();
    let entry = |name: &str| {
        list["cron_jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap()
    };
    let weekday = entry("weekday");
    let runs: Vec<_> = weekday["next_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(ts)
        .collect();
    assert_eq!(runs.len(), 5, "{weekday}");
    assert_eq!(runs[0], ts(&weekday["next_run_at"]));
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    for (i, r) in runs.iter().enumerate() {
        let local = r.with_timezone(&berlin);
        assert_eq!(
            (local.hour(), local.minute(), local.second()),
            (9, 0, 0),
            "{r}"
        );
        assert!(
            !matches!(local.weekday(), Weekday::Sat | Weekday::Sun),
            "{r}"
        );
        if i > 0 {
            assert!(runs[i - 1] < *r);
            // Consecutive weekdays: no weekday is left out.
            let gap =
                (local.date_naive() - runs[i - 1].with_timezone(&berlin).date_naive()).num_days();
            let expect = if local.weekday() == Weekday::Mon {
                3
            } else {
                1
            };
            assert_eq!(gap, expect, "{runs:?}");
        }
    }
    let often = entry("often");
    let runs: Vec<_> = often["next_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(ts)
        .collect();
    assert_eq!(runs.len(), 5, "{often}");
    assert_eq!(runs[0], ts(&often["next_run_at"]));
    for w in runs.windows(2) {
        assert_eq!((w[1] - w[0]).num_milliseconds(), 90_000, "{runs:?}");
    }

    let (_, body) = http_send(a, "PATCH", "/ojs/v1/cron/weekday", r#"{"enabled": false}"#);
    assert_eq!(body["cron_job"]["next_runs"], json!([]), "{body}");
    let one = http::get(a, "/ojs/v1/cron/often").json();
    assert_eq!(
        one["cron_job"]["next_runs"].as_array().map(Vec::len),
        Some(5)
    );
}
