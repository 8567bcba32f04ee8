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
        match client.fetch(&[queue]).map_err(|e| format!("FETCH: {e}"))? {
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
