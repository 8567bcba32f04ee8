//! Scenario helpers that are not a producer/worker run: holding idle FETCH connections and
//! probing a restarting server. (`--fill` is a producer-only run; see `main`.)

use super::load::spawn;
use super::report::{cpu_seconds, round3};
use ojs_client::{Client, ConnectOptions, Reply};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Hold `n` worker connections, each blocked in FETCH on an empty queue (re-issued whenever
/// the server's fetch wait runs out), for `seconds` once all are connected. With a server
/// pid, report its CPU use over that window.
pub fn idle(addr: &str, queue: &str, n: usize, seconds: f64, server_pid: Option<&str>) -> Value {
    let connected = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let fetches = Arc::new(AtomicU64::new(0));
    let jobs = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let run: u32 = rand::random();
    for i in 0..n {
        let (connected, failed, fetches, jobs, stop) = (
            connected.clone(),
            failed.clone(),
            fetches.clone(),
            jobs.clone(),
            stop.clone(),
        );
        let (addr, line) = (addr.to_string(), format!("FETCH {queue}"));
        spawn(format!("idle{i}"), move || {
            let opts = ConnectOptions {
                wid: Some(format!("idle-{run:x}-{i}")),
                timeout: Some(Duration::from_secs(15)),
                ..Default::default()
            };
            let mut c = match connect_retry(&addr, &opts) {
                Some(c) => c,
                None => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            connected.fetch_add(1, Ordering::Relaxed);
            while !stop.load(Ordering::Relaxed) {
                match c.call(&line) {
                    Ok(Reply::Null) => {}
                    Ok(Reply::Bulk(_)) => {
                        jobs.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                fetches.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let t0 = Instant::now();
    while connected.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < n
        && t0.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let connect_s = t0.elapsed().as_secs_f64();
    // Let the connection burst settle before measuring.
    std::thread::sleep(Duration::from_secs(2));
    let (srv0, me0, f0) = (
        server_pid.and_then(cpu_seconds),
        cpu_seconds("self"),
        fetches.load(Ordering::Relaxed),
    );
    let w0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let window = w0.elapsed().as_secs_f64();
    let (srv1, me1, f1) = (
        server_pid.and_then(cpu_seconds),
        cpu_seconds("self"),
        fetches.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    let pct = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => json!(round3((b - a) / window * 100.0)),
        _ => Value::Null,
    };
    json!({
        "connections": connected.load(Ordering::Relaxed),
        "failed": failed.load(Ordering::Relaxed),
        "connect_s": round3(connect_s),
        "window_s": round3(window),
        "fetch_replies_per_s": round3((f1 - f0) as f64 / window),
        "unexpected_jobs": jobs.load(Ordering::Relaxed),
        "server_cpu_pct": pct(srv0, srv1),
        "client_cpu_pct": pct(me0, me1),
    })
}

fn connect_retry(addr: &str, opts: &ConnectOptions) -> Option<Client> {
    for attempt in 0..50 {
        match Client::connect_with(addr, opts) {
            Ok(c) => return Some(c),
            Err(_) => std::thread::sleep(Duration::from_millis(20 + attempt * 10)),
        }
    }
    None
}

/// Against a server that is (re)starting: time from `since_ns` (unix ns; default now) until a
/// connection is accepted, the first FETCH returns a job, and INFO shows at least `expect`
/// jobs in the queue (available or active).
pub fn probe_restart(
    addr: &str,
    queue: &str,
    expect: u64,
    since_ns: Option<u64>,
    timeout: Duration,
) -> Result<Value, String> {
    let now_ns = super::envelope::unix_nanos();
    let since_ns = since_ns.unwrap_or(now_ns);
    // Elapsed seconds since `since_ns`, read on the wall clock like `since_ns` itself.
    let at = || (super::envelope::unix_nanos().saturating_sub(since_ns)) as f64 / 1e9;
    let deadline = Instant::now() + timeout;
    let opts = ConnectOptions {
        wid: Some(format!("probe-{:x}", rand::random::<u32>())),
        timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    let mut attempts = 0u64;
    let mut client = loop {
        attempts += 1;
        match Client::connect_with(addr, &opts) {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => return Err(format!("no server: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let connect_s = at();
    let first_fetch_s = loop {
        // A standby answers BACKEND_UNAVAILABLE until the partition has a holder again:
        // retried, as a client would.
        let fetched = match client.fetch(&[queue]) {
            Err(e) if e.code() == Some("BACKEND_UNAVAILABLE") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            r => r.map_err(|e| format!("FETCH: {e}"))?,
        };
        match fetched {
            Some(job) => {
                let id = job["id"].as_str().unwrap_or_default().to_string();
                let t = at();
                client.ack(&id, None).map_err(|e| format!("ACK: {e}"))?;
                break t;
            }
            None if Instant::now() >= deadline => return Err("FETCH found no job".into()),
            None => {}
        }
    };
    let (all_s, seen) = loop {
        let info = client.info().map_err(|e| format!("INFO: {e}"))?;
        let q = &info["queues"][queue];
        let n = ["available", "active", "completed"]
            .iter()
            .map(|s| q[*s].as_u64().unwrap_or(0))
            .sum::<u64>();
        if n >= expect {
            break (at(), n);
        }
        if Instant::now() >= deadline {
            return Err(format!("only {n} of {expect} jobs visible"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(json!({
        "connect_s": round3(connect_s),
        "first_fetch_s": round3(first_fetch_s),
        "all_fetchable_s": round3(all_s),
        "jobs_visible": seen,
        "connect_attempts": attempts,
    }))
}

/// What `probe_queues` waits for.
pub struct QueuesProbe<'a> {
    pub queues: &'a [String],
    /// Jobs that should be visible over all the queues together.
    pub expect: u64,
    /// Start of the clock, unix ns (default: when the probe starts).
    pub since_ns: Option<u64>,
    pub timeout: Duration,
    /// The node that was killed: also time until CLUSTER lists every partition under a
    /// live node other than it.
    pub dead_node: Option<&'a str>,
}

/// Against a cluster that is taking over a dead node's partitions: one connection per queue
/// (each retried on any error, as a client would) FETCHes until its queue hands out a job,
/// so the last of them is when every partition with work is served again; with
/// `dead_node`, a connection also polls CLUSTER until no partition is left to it or
/// unowned; then INFO until `expect` jobs are visible over the queues.
pub fn probe_queues(addr: &str, p: &QueuesProbe) -> Result<Value, String> {
    let since_ns = p.since_ns.unwrap_or_else(super::envelope::unix_nanos);
    let at = move || (super::envelope::unix_nanos().saturating_sub(since_ns)) as f64 / 1e9;
    let deadline = Instant::now() + p.timeout;
    let run: u32 = rand::random();
    let opts = move |i: usize| ConnectOptions {
        wid: Some(format!("probe-{run:x}-{i}")),
        timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    let connect = move |i: usize| loop {
        match Client::connect_with(addr, &opts(i)) {
            Ok(c) => return Some(c),
            Err(_) if Instant::now() >= deadline => return None,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let errors = AtomicU64::new(0);
    let (fetch_s, cluster_s) = std::thread::scope(|sc| {
        let handles: Vec<_> = p
            .queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let errors = &errors;
                sc.spawn(move || -> Option<f64> {
                    let mut client = connect(i)?;
                    loop {
                        if Instant::now() >= deadline {
                            return None;
                        }
                        match client.fetch(&[q.as_str()]) {
                            Ok(Some(job)) => {
                                let t = at();
                                let id = job["id"].as_str().unwrap_or_default();
                                let _ = client.ack(id, None);
                                return Some(t);
                            }
                            Ok(None) => {}
                            Err(_) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(5));
                                client = connect(i)?;
                            }
                        }
                    }
                })
            })
            .collect();
        let cluster = p.dead_node.map(|dead| {
            let n = p.queues.len();
            sc.spawn(move || -> Option<f64> {
                let mut client = connect(n)?;
                loop {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    match client.cluster() {
                        Ok(c) if all_served(&c, dead) => return Some(at()),
                        Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(5));
                            client = connect(n)?;
                        }
                    }
                }
            })
        });
        let fetch: Vec<Option<f64>> = handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect();
        let cluster = cluster.map(|h| h.join().ok().flatten());
        (fetch, cluster)
    });
    if let Some(i) = fetch_s.iter().position(Option::is_none) {
        return Err(format!("queue {} handed out no job", p.queues[i]));
    }
    let fetch_s: Vec<f64> = fetch_s.into_iter().flatten().collect();
    let mut client = connect(0).ok_or("no server")?;
    let (all_s, seen) = loop {
        let n = match client.info() {
            Ok(info) => p
                .queues
                .iter()
                .map(|q| {
                    ["available", "active", "completed"]
                        .iter()
                        .map(|s| info["queues"][q][*s].as_u64().unwrap_or(0))
                        .sum::<u64>()
                })
                .sum::<u64>(),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                client = connect(0).ok_or("no server")?;
                0
            }
        };
        if n >= p.expect {
            break (at(), n);
        }
        if Instant::now() >= deadline {
            return Err(format!("only {n} of {} jobs visible", p.expect));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let max = fetch_s.iter().cloned().fold(0.0, f64::max);
    let min = fetch_s.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(json!({
        "queues": p.queues.len(),
        "first_fetch_s": round3(min),
        "every_queue_fetch_s": round3(max),
        "per_queue_fetch_s": fetch_s.iter().map(|t| round3(*t)).collect::<Vec<_>>(),
        "cluster_all_served_s": match cluster_s {
            Some(Some(t)) => json!(round3(t)),
            _ => Value::Null,
        },
        "all_fetchable_s": round3(all_s),
        "jobs_visible": seen,
        "errors_retried": errors.load(Ordering::Relaxed),
    }))
}

/// Whether a CLUSTER answer has every partition held by a live node other than `dead`.
fn all_served(c: &Value, dead: &str) -> bool {
    let Some(n) = c["partitions"].as_u64() else {
        return false;
    };
    if c["unowned"].as_array().is_some_and(|u| !u.is_empty()) {
        return false;
    }
    let mut held = std::collections::BTreeSet::new();
    for node in c["nodes"].as_array().into_iter().flatten() {
        let parts = node["partitions"].as_array().into_iter().flatten();
        if node["id"] == dead || node["role"] == "gone" {
            if parts.count() > 0 {
                return false;
            }
            continue;
        }
        held.extend(parts.filter_map(Value::as_u64));
    }
    (0..n).all(|p| held.contains(&p))
}

/// Live records and bytes per keyspace of a stopped server's data dir, and the directory's
/// size on disk: how much of the disk is data and how much is the store's overhead.
pub fn store_stats(dir: &std::path::Path) -> Result<Value, String> {
    use ojsd::store::{self, Space, StoreKind};
    let kind = store::written_by(dir)
        .map_err(|e| e.to_string())?
        .unwrap_or(StoreKind::Sled);
    let disk = dir_bytes(dir);
    let st = store::open(kind, dir, 64 << 20).map_err(|e| e.to_string())?;
    let mut spaces = serde_json::Map::new();
    let mut live = 0u64;
    for space in Space::ALL {
        let (mut n, mut bytes) = (0u64, 0u64);
        st.scan(space, &mut |k, v| {
            n += 1;
            bytes = bytes.saturating_add((k.len() + v.len()) as u64);
            true
        })
        .map_err(|e| e.to_string())?;
        live = live.saturating_add(bytes);
        spaces.insert(
            format!("{space:?}").to_lowercase(),
            serde_json::json!({"records": n, "bytes": bytes}),
        );
    }
    Ok(serde_json::json!({
        "store": kind.name(),
        "disk_bytes": disk,
        "live_bytes": live,
        "disk_over_live": if live > 0 { disk as f64 / live as f64 } else { 0.0 },
        "spaces": spaces,
    }))
}

/// Bytes of the regular files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total = total.saturating_add(m.len()),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_served_wants_every_partition_under_a_live_node() {
        let c = |nodes: Value, unowned: Value| json!({"partitions": 3, "unowned": unowned, "nodes": nodes});
        let a = |id: &str, parts: Value, role: &str| json!({"id": id, "partitions": parts, "role": role});
        let ok = c(
            json!([
                a("a", json!([0, 1]), "active"),
                a("b", json!([2]), "active"),
                a("x", json!([]), "gone")
            ]),
            json!([]),
        );
        assert!(all_served(&ok, "x"));
        let dead_holds = c(
            json!([
                a("a", json!([0, 1]), "active"),
                a("x", json!([2]), "active")
            ]),
            json!([]),
        );
        assert!(!all_served(&dead_holds, "x"));
        let unowned = c(json!([a("a", json!([0, 1]), "active")]), json!([2]));
        assert!(!all_served(&unowned, "x"));
        let missing = c(json!([a("a", json!([0, 1]), "active")]), json!([]));
        assert!(!all_served(&missing, "x"));
    }
}
