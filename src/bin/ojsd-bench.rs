//! `ojsd-bench`: a load generator for a running ojsd.
//!
//! The default run drives P producer and C worker connections over N jobs with a ~300-byte
//! `args` payload and reports end-to-end jobs/s, the push rate and pickup latency (the time
//! from the producer sending a job to a worker receiving it from FETCH). Every job carries
//! its sequence number; the run fails (exit 1) unless each was delivered and acked exactly
//! once. Helpers for the other scenarios: `--fill N`, `--idle N`, `--probe-restart`, and
//! `--store-floor DIR` (the store alone, no server).

#[path = "ojsd_bench/envelope.rs"]
mod envelope;
#[path = "ojsd_bench/extra.rs"]
mod extra;
#[path = "ojsd_bench/floor.rs"]
mod floor;
#[path = "ojsd_bench/load.rs"]
mod load;
#[cfg(feature = "redb")]
#[path = "ojsd_bench/redb_floor.rs"]
mod redb_floor;
#[path = "ojsd_bench/report.rs"]
mod report;

use clap::{Parser, ValueEnum};
use load::{LoadConfig, Mode, Shared};
use report::{cpu_seconds, engine_cpu_seconds, fmt_rate, round3, status_kib, table, Latency};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    /// PUSH / FETCH / ACK one job per command.
    One,
    /// PUSHB of --batch jobs, FETCH ... COUNT --batch, ACKs pipelined.
    Batch,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DialectArg {
    /// The OJS port (`--listen`).
    Ojs,
    /// The Faktory port (`--faktory-listen`): Faktory job JSON, `+OK` replies, FETCH one
    /// job per command (no COUNT, so `batch` mode batches the pushes only), ACK by jid.
    Faktory,
}

/// Load generator for ojsd.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Server address; several, comma-separated, spread the load run's connections over
    /// them round-robin (producer i and worker i to address i mod n: the nodes of a
    /// cluster). The other modes use the first.
    #[arg(long, env = "OJSD_ADDR", default_value = "127.0.0.1:7419")]
    addr: String,
    #[arg(long, value_enum, default_value = "one")]
    mode: ModeArg,
    /// Wire dialect of --addr for the load run.
    #[arg(long, value_enum, default_value = "ojs")]
    dialect: DialectArg,
    /// Jobs to push, fetch and ack.
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    /// Producer connections [default: 16 in `one` mode, 4 in `batch` mode].
    #[arg(long)]
    producers: Option<usize>,
    /// Worker connections [default: 16 in `one` mode, 4 in `batch` mode].
    #[arg(long)]
    workers: Option<usize>,
    /// Jobs per PUSHB and per FETCH COUNT in `batch` mode (FETCH COUNT is capped at 1000).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Offered load in jobs/s over all producers (default: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Commands in flight per connection. At 1 a worker sends its ACKs (all of a batch at
    /// once in `batch` mode), reads their replies, then FETCHes. Above 1 it keeps several
    /// FETCHes open with ACKs in between; ojsd flushes an ACK reply only once the FETCH
    /// behind it answers, so the last ACKs may be read up to the fetch wait (2 s) late.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Commands in flight per worker connection [default: --pipeline]; `--pipeline 16
    /// --worker-pipeline 1` pipelines the producers only.
    #[arg(long)]
    worker_pipeline: Option<usize>,
    /// Workers ACK with `fetch` and take the next job from its reply: one round trip per
    /// job (OJS port, `one` mode; PROTOCOL.md §5.2), as the ojsd clients' workers do.
    #[arg(long)]
    ack_fetch: bool,
    /// In `batch` mode, ACK each job with its own command (pipelined) instead of one ACKB
    /// per fetched batch (OJS port; the Faktory port always ACKs one by one).
    #[arg(long)]
    ack_each: bool,
    /// Approximate bytes of `args` per job.
    #[arg(long, default_value_t = 300)]
    payload: usize,
    /// Queue the jobs go to.
    #[arg(long, default_value = "bench")]
    queue: String,
    /// Spread the jobs over N queues, `<queue>-0` .. `<queue>-<N-1>` (1: `<queue>` alone):
    /// each PUSH or PUSHB goes to the producer's next queue in turn, worker w fetches
    /// queue w mod N (see --fetch-all). With --probe-restart: probe each of them.
    #[arg(long, value_name = "N", default_value_t = 1)]
    queues: usize,
    /// With --queues: every worker fetches from all the queues (one FETCH over them all).
    #[arg(long)]
    fetch_all: bool,
    /// With --queues: name the queues so that queue k is in partition k mod P of a
    /// cluster with P partitions (`<queue>-k`, or `<queue>-k-j` for the first j that lands
    /// there), so that every partition gets work: a plain `<queue>-k` may leave some out.
    #[arg(long, value_name = "P")]
    spread: Option<u32>,
    /// Connect as a partition-aware client would (cluster mode, PROTOCOL.md §16): read
    /// CLUSTER from the first --addr, connect each worker to the node that holds its
    /// queue's partition, and send each PUSH over the producer's connection to the node
    /// that holds the PUSH's queue, so that no command is forwarded between nodes.
    #[arg(long)]
    to_holders: bool,
    /// With --probe-restart and --queues: also time until CLUSTER lists every partition
    /// under a live node other than this one (the node that was killed).
    #[arg(long, value_name = "ID")]
    dead_node: Option<String>,
    /// Give up after this many seconds (the run then fails).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Server process id: adds its CPU time and memory (from /proc) to the report.
    #[arg(long)]
    server_pid: Option<String>,
    /// Only push N jobs (PUSHB, --batch per command, --producers connections) and exit.
    #[arg(long, value_name = "N", conflicts_with_all = ["idle", "probe_restart"])]
    fill: Option<u64>,
    /// Hold N connections blocked in FETCH on an empty queue for --seconds.
    #[arg(long, value_name = "N", conflicts_with = "probe_restart")]
    idle: Option<usize>,
    /// How long --idle measures once every connection is up.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Wait for a (re)starting server: time to connect, first FETCH and --expect jobs visible.
    #[arg(long)]
    probe_restart: bool,
    /// Jobs the restarted server should show in --queue.
    #[arg(long, default_value_t = 1)]
    expect: u64,
    /// Start of the restart clock, unix nanoseconds (default: when the probe starts).
    #[arg(long)]
    since_ns: Option<u64>,
    /// No server: write the engine's store pattern for --jobs jobs, --batch per commit, to
    /// a new store at this path (removed afterwards) and report the rate the store allows.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["idle", "probe_restart", "fill"])]
    store_floor: Option<std::path::PathBuf>,
    /// The store --store-floor writes to (redb only in a build with `--features redb`).
    #[arg(long, value_enum, default_value = "fjall")]
    store: floor::FloorStore,
    /// --store-floor's write pattern: `full` (every transition rewrites the whole record,
    /// as ojsd does today) or `lean` (the record once, small state records after).
    #[arg(long, value_enum, default_value = "full")]
    pattern: floor::Pattern,
    /// Bytes of one stored job record for --store-floor [default: 860 full, 300 lean]
    /// (ojsd's are ~860 with ~300 bytes of args).
    #[arg(long)]
    record_bytes: Option<usize>,
    /// Bytes of one event for --store-floor [default: 350 full, 120 lean].
    #[arg(long)]
    event_bytes: Option<usize>,
    /// With --store-floor: append the same bytes to one plain file with one fdatasync per
    /// commit instead of writing them to a store, i.e. what the disk and kernel allow for
    /// this write pattern with no store in between.
    #[arg(long, requires = "store_floor")]
    raw_log: bool,
    /// With --store-floor: write the jobs, then delete them all, N times over, and report
    /// the disk after each phase (does the store give the space back?).
    #[arg(long, value_name = "N", default_value_t = 0, requires = "store_floor")]
    churn: u32,
    /// No server: open the (stopped) server's data dir and report the live bytes (keys and
    /// values) in each keyspace beside the directory's size on disk.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["idle", "probe_restart", "fill", "store_floor"])]
    store_stats: Option<std::path::PathBuf>,
}

fn main() {
    let args = Args::parse();
    let code = if let Some(n) = args.idle {
        let queue = format!("{}-idle", args.queue);
        let out = extra::idle(
            first_addr(&args.addr),
            &queue,
            n,
            args.seconds,
            args.server_pid.as_deref(),
        );
        emit(&args, "idle connections", &out);
        i32::from(out["failed"].as_u64() != Some(0))
    } else if let Some(dir) = &args.store_floor {
        let f = floor::Floor {
            store: args.store,
            pattern: args.pattern,
            jobs: args.jobs,
            batch: args.batch,
            record_bytes: args.record_bytes,
            event_bytes: args.event_bytes,
            raw_log: args.raw_log,
            churn: args.churn,
        };
        match floor::run(dir, &f) {
            Ok(out) => {
                emit(&args, "store floor", &out);
                0
            }
            Err(e) => {
                eprintln!("ojsd-bench: store floor failed: {e}");
                1
            }
        }
    } else if let Some(dir) = &args.store_stats {
        match extra::store_stats(dir) {
            Ok(out) => {
                emit(&args, "store stats", &out);
                0
            }
            Err(e) => {
                eprintln!("ojsd-bench: store stats failed: {e}");
                1
            }
        }
    } else if args.probe_restart {
        let timeout = Duration::from_secs(args.timeout);
        let addr = first_addr(&args.addr);
        let probe = if args.queues > 1 {
            let queues = envelope::queue_names(&args.queue, args.queues, args.spread);
            let p = extra::QueuesProbe {
                queues: &queues,
                expect: args.expect,
                since_ns: args.since_ns,
                timeout,
                dead_node: args.dead_node.as_deref(),
            };
            extra::probe_queues(addr, &p)
        } else {
            extra::probe_restart(addr, &args.queue, args.expect, args.since_ns, timeout)
        };
        match probe {
            Ok(out) => {
                emit(&args, "restart probe", &out);
                0
            }
            Err(e) => {
                eprintln!("ojsd-bench: restart probe failed: {e}");
                1
            }
        }
    } else {
        load_run(&args)
    };
    std::process::exit(code);
}

fn load_run(args: &Args) -> i32 {
    let mode = match args.mode {
        ModeArg::One => Mode::One,
        ModeArg::Batch => Mode::Batch,
    };
    let fill = args.fill.is_some();
    let default_conns = if mode == Mode::One { 16 } else { 4 };
    let mut cfg = LoadConfig {
        addrs: addr_list(&args.addr),
        mode: if fill { Mode::Batch } else { mode },
        jobs: args.fill.unwrap_or(args.jobs),
        producers: args.producers.unwrap_or(default_conns).max(1),
        workers: if fill {
            0
        } else {
            args.workers.unwrap_or(default_conns).max(1)
        },
        batch: args.batch.max(1),
        rate: args.rate.filter(|r| *r > 0.0),
        pipeline: args.pipeline.max(1),
        worker_pipeline: args.worker_pipeline.unwrap_or(args.pipeline).max(1),
        ack_fetch: args.ack_fetch,
        ack_each: args.ack_each,
        timeout: Duration::from_secs(args.timeout),
        payload: args.payload,
        queue: args.queue.clone(),
        queues: args.queues.max(1),
        fetch_all: args.fetch_all,
        spread: args.spread,
        holders: None,
        run: u64::from(rand::random::<u32>()),
        dialect: match args.dialect {
            DialectArg::Ojs => envelope::Dialect::Ojs,
            DialectArg::Faktory => envelope::Dialect::Faktory,
        },
    };
    if args.to_holders {
        let queues = envelope::queue_names(&cfg.queue, cfg.queues, cfg.spread);
        match load::holders(first_addr(&args.addr), &queues) {
            Ok(h) => cfg.holders = Some(h),
            Err(e) => {
                eprintln!("ojsd-bench: --to-holders: {e}");
                return 1;
            }
        }
    }
    let shared = Arc::new(Shared::new(cfg.jobs, cfg.timeout));
    let srv_cpu0 = args.server_pid.as_deref().and_then(cpu_seconds);
    let eng_cpu0 = args.server_pid.as_deref().and_then(engine_cpu_seconds);
    let lat = load::run(&cfg, &shared);
    let wall = shared.start.elapsed().as_secs_f64();
    let srv_cpu1 = args.server_pid.as_deref().and_then(cpu_seconds);
    let eng_cpu1 = args.server_pid.as_deref().and_then(engine_cpu_seconds);
    // An unfinished run (timeout, failure) is rated by what it did over the whole run.
    let secs = |ns: u64| if ns == 0 { wall } else { ns as f64 / 1e9 };
    let push_s = secs(shared.push_done_ns.load(Ordering::Relaxed));
    let end_s = secs(shared.all_acked_ns.load(Ordering::Relaxed));
    let pushed = shared.pushed.load(Ordering::Relaxed);
    let acked = shared.acked.load(Ordering::Relaxed);
    let errors = shared.errors.load(Ordering::Relaxed);
    let first_error = shared
        .first_error
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    let mut out = json!({
        "mode": if fill { "fill" } else if mode == Mode::One { "one" } else { "batch" },
        "dialect": if cfg.dialect == envelope::Dialect::Faktory { "faktory" } else { "ojs" },
        "jobs": cfg.jobs,
        "addrs": cfg.addrs.len(),
        "queues": cfg.queues,
        "fetch_all": cfg.fetch_all,
        "spread": cfg.spread,
        "to_holders": cfg.holders.is_some(),
        "producers": cfg.producers,
        "workers": cfg.workers,
        "batch": if mode == Mode::Batch || fill { json!(cfg.batch) } else { Value::Null },
        "pipeline": cfg.pipeline,
        "worker_pipeline": cfg.worker_pipeline,
        "ack_fetch": cfg.ack_fetch,
        "ack_batch": mode == Mode::Batch && !cfg.ack_each && cfg.dialect == envelope::Dialect::Ojs,
        "rate_offered": cfg.rate,
        "payload_args_bytes": envelope::Envelope::new(&cfg.queue, 0, cfg.payload).args_bytes(),
        "push_per_s": round3(pushed as f64 / push_s),
        "push_s": round3(push_s),
        "errors": errors,
        "first_error": first_error,
        "client_cpu_s": cpu_seconds("self").map(round3),
    });
    let mut ok = errors == 0 && pushed == cfg.jobs;
    if !fill {
        let tally = load::tally(&shared);
        let latency = Latency::from_nanos(lat);
        ok &= tally.missing == 0 && tally.duplicates == 0 && tally.unacked == 0;
        out["jobs_per_s"] = json!(round3(acked as f64 / end_s));
        out["elapsed_s"] = json!(round3(end_s));
        out["latency_ms"] = latency.json();
        // The same pickups counted from the push reply (the producer has read it) rather
        // than from the send: what the job waited once its push was acknowledged.
        out["latency_after_push_reply_ms"] =
            Latency::from_nanos(load::after_push_reply(&shared)).json();
        out["exactly_once"] = json!({
            "ok": tally.missing == 0 && tally.duplicates == 0 && tally.unacked == 0,
            "acked": acked,
            "missing": tally.missing,
            "duplicates": tally.duplicates,
            "unacked": tally.unacked,
            "foreign": shared.foreign.load(Ordering::Relaxed),
        });
    }
    if let (Some(a), Some(b)) = (srv_cpu0, srv_cpu1) {
        out["server_cpu_s"] = json!(round3(b - a));
        out["server_cpu_pct"] = json!(round3((b - a) / wall * 100.0));
    }
    if let (Some(a), Some(b)) = (eng_cpu0, eng_cpu1) {
        out["engine_cpu_s"] = json!(round3(b - a));
        // Per job end to end (PUSH, FETCH and ACK of it, with their commits).
        out["engine_us_per_job"] = json!(round3((b - a) * 1e6 / (cfg.jobs.max(1) as f64)));
    }
    if let Some(pid) = args.server_pid.as_deref() {
        out["server_vmrss_kib"] = json!(status_kib(pid, "VmRSS"));
        out["server_vmhwm_kib"] = json!(status_kib(pid, "VmHWM"));
    }
    out["ok"] = json!(ok);
    emit(
        args,
        &format!("ojsd-bench {}", out["mode"].as_str().unwrap_or("")),
        &out,
    );
    if !ok {
        eprintln!("ojsd-bench: FAILED (errors {errors}; first: {first_error:?})");
    }
    i32::from(!ok)
}

/// The addresses of a comma-separated `--addr` (blank entries dropped; at least one).
fn addr_list(addr: &str) -> Vec<String> {
    let v: Vec<String> = addr
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if v.is_empty() {
        vec![addr.to_string()]
    } else {
        v
    }
}

fn first_addr(addr: &str) -> &str {
    addr.split(',')
        .map(str::trim)
        .find(|a| !a.is_empty())
        .unwrap_or(addr)
}

/// The JSON object on one line, or a table with rates and latencies spelled out.
fn emit(args: &Args, title: &str, out: &Value) {
    if args.json {
        println!("{out}");
        return;
    }
    let mut rows = Vec::new();
    let Value::Object(map) = out else { return };
    for (k, v) in map {
        let shown = match (k.as_str(), v) {
            ("jobs_per_s" | "push_per_s", Value::Number(x)) => fmt_rate(x.as_f64().unwrap_or(0.0)),
            (
                "latency_ms" | "commit_ms" | "churn_commit_ms" | "delete_commit_ms",
                Value::Object(l),
            ) => format!(
                "p50 {} ms, p90 {} ms, p99 {} ms, max {} ms ({} samples)",
                l["p50"], l["p90"], l["p99"], l["max"], l["samples"]
            ),
            (_, Value::Null) => continue,
            (_, Value::String(s)) if s.is_empty() => continue,
            (_, Value::String(s)) => s.clone(),
            (_, other) => other.to_string(),
        };
        rows.push((k.clone(), shown));
    }
    table(title, &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_queue_goes_to_the_holder_of_its_partition() {
        // Four partitions, queue k in partition k mod 4 (--spread 4).
        let queues = envelope::queue_names("bench", 8, Some(4));
        let cluster = serde_json::json!({"partitions": 4, "nodes": [
            {"id": "a", "addr": "a:1", "partitions": [0, 2]},
            {"id": "b", "addr": "b:1", "partitions": [1]},
            {"id": "c", "addr": "c:1", "partitions": [3]},
            {"id": "d", "addr": "d:1", "partitions": []}]});
        let h = load::holders_of(&cluster, &queues).unwrap();
        assert_eq!(h, ["a:1", "b:1", "a:1", "c:1", "a:1", "b:1", "a:1", "c:1"]);
        // A partition nobody holds: refused, not guessed.
        let cluster = serde_json::json!({"partitions": 4, "nodes": [
            {"id": "a", "addr": "a:1", "partitions": [0, 1, 2]}]});
        let e = load::holders_of(&cluster, &queues).unwrap_err();
        assert!(e.contains("partition 3"), "{e}");
        assert!(load::holders_of(&serde_json::json!({}), &queues).is_err());
    }

    #[test]
    fn addresses_are_spread_round_robin() {
        let addrs = addr_list("a:1, b:2,,c:3");
        assert_eq!(addrs, vec!["a:1", "b:2", "c:3"]);
        let picked: Vec<&str> = (0..5).map(|i| load::addr_of(&addrs, i)).collect();
        assert_eq!(picked, vec!["a:1", "b:2", "c:3", "a:1", "b:2"]);
        assert_eq!(addr_list("127.0.0.1:7419"), vec!["127.0.0.1:7419"]);
        assert_eq!(first_addr(" x:1,y:2"), "x:1");
        assert_eq!(first_addr("x:1"), "x:1");
    }

    #[test]
    fn the_defaults_keep_one_queue_and_one_address() {
        let a = Args::parse_from(["ojsd-bench"]);
        assert_eq!(a.queues, 1);
        assert!(!a.fetch_all);
        assert_eq!(addr_list(&a.addr), vec!["127.0.0.1:7419"]);
    }
}
