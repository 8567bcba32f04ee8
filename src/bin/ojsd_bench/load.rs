//! The load itself: producer and worker connections, one thread each, and the shared
//! bookkeeping for exactly-once delivery, pickup latency and timing.

use super::envelope::{parse_fetched, unix_nanos, Dialect, Envelope};
use ojs_client::{Client, ConnectOptions, Reply};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// PUSH / FETCH / ACK, one job per command.
    One,
    /// PUSHB of `batch` jobs, FETCH ... COUNT `batch`, ACKs pipelined ahead of the next FETCH.
    Batch,
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Server addresses: producer `i` and worker `i` connect to `addrs[i % len]` each.
    pub addrs: Vec<String>,
    pub mode: Mode,
    pub jobs: u64,
    pub producers: usize,
    pub workers: usize,
    pub batch: usize,
    /// Offered load, jobs/s over all producers; `None` is as fast as possible.
    pub rate: Option<f64>,
    /// Commands in flight per producer connection.
    pub pipeline: usize,
    /// Commands in flight per worker connection.
    pub worker_pipeline: usize,
    pub timeout: Duration,
    pub payload: usize,
    pub queue: String,
    /// Queues the jobs are spread over (`queue` alone for 1, else `queue-0`..): command `k`
    /// of producer `i` goes to queue `(i + k) % queues`, worker `w` fetches queue `w % queues`
    /// (all of them with `fetch_all`).
    pub queues: usize,
    pub fetch_all: bool,
    /// Choose the queue names so that queue `k` is in partition `k % spread` (`--spread`).
    pub spread: Option<u32>,
    /// `--to-holders`: per queue (by index), the address of the node that holds its
    /// partition. Worker `w` then connects to the holder of its queue, and a producer
    /// sends each PUSH over its connection to the holder of the PUSH's queue.
    pub holders: Option<Vec<String>>,
    pub run: u64,
    /// The wire dialect: the OJS port, or the Faktory port (one job per FETCH).
    pub dialect: Dialect,
    /// Workers ACK with `fetch` (OJS port, one job per command): the ACK's reply is the next
    /// job, so a worker does one round trip per job (PROTOCOL.md §5.2).
    pub ack_fetch: bool,
    /// `batch` mode: one ACK per job instead of one ACKB per fetched batch.
    pub ack_each: bool,
}

/// State every thread of a run shares.
pub struct Shared {
    pub n: u64,
    pub start: Instant,
    pub deadline: Instant,
    /// Per job: how many times a FETCH delivered it, and how many ACKs succeeded (saturating).
    pub fetched: Vec<AtomicU8>,
    pub acks: Vec<AtomicU8>,
    /// Per job, unix ns: when its push reply was read, and when a FETCH first delivered it
    /// (0 until then), for the pickup latency counted from the push reply.
    pub push_reply_at: Vec<AtomicU64>,
    pub delivered_at: Vec<AtomicU64>,
    pub unique_delivered: AtomicU64,
    pub acked: AtomicU64,
    pub pushed: AtomicU64,
    /// Jobs of another run (or without bench metadata) that were fetched and acked.
    pub foreign: AtomicU64,
    pub errors: AtomicU64,
    pub first_error: Mutex<Option<String>>,
    /// Elapsed ns (since `start`) at the last push reply and at the ACK that completed the run.
    pub push_done_ns: AtomicU64,
    pub all_acked_ns: AtomicU64,
    pub abort: AtomicBool,
}

impl Shared {
    pub fn new(n: u64, timeout: Duration) -> Shared {
        let start = Instant::now();
        Shared {
            n,
            start,
            deadline: start + timeout,
            fetched: (0..n).map(|_| AtomicU8::new(0)).collect(),
            acks: (0..n).map(|_| AtomicU8::new(0)).collect(),
            push_reply_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            delivered_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            unique_delivered: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            push_done_ns: AtomicU64::new(0),
            all_acked_ns: AtomicU64::new(0),
            abort: AtomicBool::new(false),
        }
    }

    pub fn elapsed_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn error(&self, msg: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(msg);
        }
    }

    /// Stop everything: a connection failed or the run timed out.
    pub fn fatal(&self, msg: String) {
        self.error(msg);
        self.abort.store(true, Ordering::Relaxed);
    }

    fn should_stop(&self) -> bool {
        if self.abort.load(Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= self.deadline {
            self.abort.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn fetching_done(&self) -> bool {
        self.unique_delivered.load(Ordering::Relaxed) >= self.n
    }

    fn bump(slot: &AtomicU8) -> u8 {
        slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_add(1))
        })
        .unwrap_or(u8::MAX)
    }
}

/// The slice `[from, to)` of sequence numbers producer `i` of `p` is responsible for.
pub fn share(n: u64, p: usize, i: usize) -> (u64, u64) {
    let p = p as u64;
    let i = i as u64;
    (n * i / p, n * (i + 1) / p)
}

/// The address connection `idx` (of producers, or of workers) uses: round-robin.
pub fn addr_of(addrs: &[String], idx: usize) -> &str {
    &addrs[idx % addrs.len().max(1)]
}

fn connect(addr: &str, wid: Option<String>) -> ojs_client::Result<Client> {
    let opts = ConnectOptions {
        wid,
        // Above the server's FETCH block time, so an idle FETCH is not a timeout.
        timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    Client::connect_with(addr, &opts)
}

/// Per queue (by index), the client address of the node holding its partition, from
/// the CLUSTER answer of `addr` (PROTOCOL.md §4.2a, §16: a queue is in partition
/// SHA-256(name)[0..4] mod P). Fails while a partition has no holder.
pub fn holders(addr: &str, queues: &[String]) -> Result<Vec<String>, String> {
    let mut c = connect(addr, None).map_err(|e| format!("connect {addr}: {e}"))?;
    let cluster = c.cluster().map_err(|e| format!("CLUSTER: {e}"))?;
    let _ = c.end();
    holders_of(&cluster, queues)
}

/// [`holders`] from a CLUSTER answer.
pub fn holders_of(cluster: &serde_json::Value, queues: &[String]) -> Result<Vec<String>, String> {
    let parts = cluster["partitions"]
        .as_u64()
        .filter(|p| *p > 0 && *p <= u64::from(u32::MAX))
        .ok_or("CLUSTER has no partition count")? as u32;
    let mut by_part: Vec<Option<String>> = vec![None; parts as usize];
    for node in cluster["nodes"].as_array().into_iter().flatten() {
        let Some(addr) = node["addr"].as_str() else {
            continue;
        };
        for p in node["partitions"].as_array().into_iter().flatten() {
            if let Some(slot) = p.as_u64().and_then(|p| by_part.get_mut(p as usize)) {
                *slot = Some(addr.to_string());
            }
        }
    }
    queues
        .iter()
        .map(|q| {
            let p = ojsd::cluster::route::partition_of(q, parts);
            by_part[p as usize]
                .clone()
                .ok_or_else(|| format!("partition {p} (queue {q}) has no holder"))
        })
        .collect()
}

/// One producer connection: pushes its share, `unit` jobs per command, keeping up to
/// `pipeline` commands in flight, paced to its part of `rate`.
pub fn producer(cfg: &LoadConfig, shared: &Shared, env: &Envelope, idx: usize) {
    let (from, to) = share(shared.n, cfg.producers, idx);
    // One connection, or with `holders` one per holder (`route`: the queue's connection).
    let (addrs, route): (Vec<&str>, Vec<usize>) = match &cfg.holders {
        Some(h) => {
            let mut addrs: Vec<&str> = h.iter().map(String::as_str).collect();
            addrs.sort_unstable();
            addrs.dedup();
            let route = h
                .iter()
                .map(|a| addrs.iter().position(|b| b == a).unwrap_or(0))
                .collect();
            (addrs, route)
        }
        None => (vec![addr_of(&cfg.addrs, idx)], vec![0]),
    };
    let mut conns = Vec::with_capacity(addrs.len());
    for addr in &addrs {
        match connect(addr, None) {
            Ok(c) => conns.push(c),
            Err(e) => return shared.fatal(format!("producer {idx}: connect {addr}: {e}")),
        }
    }
    let unit = match cfg.mode {
        Mode::One => 1,
        Mode::Batch => cfg.batch.max(1) as u64,
    };
    // Seconds between two commands of this producer at the offered rate.
    let interval = cfg
        .rate
        .map(|r| unit as f64 * cfg.producers as f64 / r.max(1e-9));
    let depth = cfg.pipeline.max(1);
    let t0 = Instant::now();
    // Each command in flight, oldest first: its connection and the sequence numbers
    // `[from, to)` it pushes (each connection answers in order).
    let mut in_flight: VecDeque<(usize, u64, u64)> = VecDeque::new();
    let mut seq = from;
    let mut sent = 0u64;
    loop {
        if shared.should_stop() {
            return;
        }
        if seq >= to && in_flight.is_empty() {
            break;
        }
        if seq < to && in_flight.len() < depth {
            if let Some(iv) = interval {
                let due = t0 + Duration::from_secs_f64(iv * sent as f64);
                let now = Instant::now();
                if due > now && !in_flight.is_empty() {
                    // Collect a reply while waiting for the next slot.
                    if !read_push(&mut conns, shared, env, &mut in_flight, idx) {
                        return;
                    }
                    continue;
                }
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let end = (seq + unit).min(to);
            let q = idx.wrapping_add(sent as usize);
            let line = match cfg.mode {
                Mode::One => env.push_line(q, seq),
                Mode::Batch => env.pushb_line(q, seq, end),
            };
            let c = route[q % route.len()];
            if let Err(e) = conns[c].send_line(&line) {
                return shared.fatal(format!("producer {idx}: send: {e}"));
            }
            in_flight.push_back((c, seq, end));
            seq = end;
            sent += 1;
            let room = in_flight.len() < depth && seq < to;
            if room && interval.is_none() {
                continue; // fill the pipeline before flushing
            }
            for c in &mut conns {
                if let Err(e) = c.flush() {
                    return shared.fatal(format!("producer {idx}: flush: {e}"));
                }
            }
            if room {
                continue; // paced: send the next one on time, read replies meanwhile
            }
        }
        if !read_push(&mut conns, shared, env, &mut in_flight, idx) {
            return;
        }
    }
    for c in conns {
        let _ = c.end();
    }
}

/// Read the reply of the oldest command in flight (from its connection).
fn read_push(
    conns: &mut [Client],
    shared: &Shared,
    env: &Envelope,
    in_flight: &mut VecDeque<(usize, u64, u64)>,
    idx: usize,
) -> bool {
    let (c, from, to) = in_flight.pop_front().unwrap_or((0, 0, 0));
    let count = to - from;
    match conns[c].read_reply() {
        Ok(r) if env.push_accepted(&r) => {
            let now = unix_nanos();
            for s in from..to {
                shared.push_reply_at[s as usize].store(now, Ordering::Relaxed);
            }
            let total = shared.pushed.fetch_add(count, Ordering::Relaxed) + count;
            if total >= shared.n {
                shared
                    .push_done_ns
                    .store(shared.elapsed_ns(), Ordering::Relaxed);
            }
            true
        }
        Ok(other) => {
            shared.fatal(format!("producer {idx}: push refused: {other:?}"));
            false
        }
        Err(e) => {
            shared.fatal(format!("producer {idx}: read: {e}"));
            false
        }
    }
}

enum Cmd {
    Fetch,
    /// The ACK of this job sequence number (`None` for a foreign job).
    Ack(Option<u64>),
    /// An ACK with `fetch`: its reply is the next job (or null).
    AckFetch(Option<u64>),
    /// An ACKB of these jobs, in order.
    AckBatch(Vec<Option<u64>>),
}

/// One worker connection: FETCH (or FETCH COUNT), ACK every job, until every job of the run
/// has been delivered. Returns the pickup latencies it observed, in nanoseconds.
pub fn worker(cfg: &LoadConfig, shared: &Shared, env: &Envelope, idx: usize) -> Vec<u64> {
    let mut lat = Vec::with_capacity((shared.n as usize / cfg.workers.max(1)) + 16);
    let wid = format!("bench-{:x}-w{idx}", cfg.run);
    // With `holders`, the holder of the queue this worker fetches.
    let addr = match &cfg.holders {
        Some(h) if !cfg.fetch_all => &h[idx % h.len()],
        _ => addr_of(&cfg.addrs, idx),
    };
    let mut client = match connect(addr, Some(wid)) {
        Ok(c) => c,
        Err(e) => {
            shared.fatal(format!("worker {idx}: connect: {e}"));
            return lat;
        }
    };
    let fetch = match cfg.mode {
        Mode::One => env.fetch_line(idx, 1),
        Mode::Batch => env.fetch_line(idx, cfg.batch.clamp(1, 1000)),
    };
    let depth = cfg.worker_pipeline.max(1);
    let mut out: VecDeque<Cmd> = VecDeque::new();
    let mut fetches = 0usize;
    loop {
        // With one command in flight (the default), the next FETCH waits for the ACK replies:
        // the server holds a pipelined reply unflushed while a FETCH behind it blocks.
        let acks_pending = out
            .iter()
            .any(|c| matches!(c, Cmd::Ack(_) | Cmd::AckFetch(_) | Cmd::AckBatch(_)));
        while fetches < depth
            && (depth > 1 || !acks_pending)
            && !shared.fetching_done()
            && !shared.should_stop()
        {
            if let Err(e) = client.send_line(&fetch) {
                shared.fatal(format!("worker {idx}: send: {e}"));
                return lat;
            }
            out.push_back(Cmd::Fetch);
            fetches += 1;
        }
        if let Err(e) = client.flush() {
            shared.fatal(format!("worker {idx}: flush: {e}"));
            return lat;
        }
        // Only idle FETCHes left and nothing more to fetch: abandon them (they would block
        // until the server's fetch wait runs out) and hang up.
        let only_fetches = out.iter().all(|c| matches!(c, Cmd::Fetch));
        if out.is_empty() || (only_fetches && shared.fetching_done()) || shared.should_stop() {
            break;
        }
        let reply = match client.read_reply() {
            Ok(r) => r,
            Err(e) => {
                shared.fatal(format!("worker {idx}: read: {e}"));
                return lat;
            }
        };
        let ack_fetch = cfg.ack_fetch && cfg.mode == Mode::One && cfg.dialect == Dialect::Ojs;
        let body = match out.pop_front() {
            Some(Cmd::Fetch) => {
                fetches -= 1;
                match reply {
                    Reply::Null => continue,
                    Reply::Bulk(b) => b,
                    other => {
                        shared.error(format!("worker {idx}: FETCH answered {other:?}"));
                        continue;
                    }
                }
            }
            Some(Cmd::Ack(seq)) => {
                match reply {
                    Reply::Simple(_) => acked(shared, seq),
                    other => shared.error(format!("worker {idx}: ACK answered {other:?}")),
                }
                continue;
            }
            Some(Cmd::AckBatch(seqs)) => {
                match reply {
                    Reply::Bulk(b) => match ackb_refused(&b) {
                        Ok(refused) => {
                            for (i, seq) in seqs.into_iter().enumerate() {
                                if refused.contains(&i) {
                                    shared.error(format!("worker {idx}: ACKB refused ACK {i}"));
                                } else {
                                    acked(shared, seq);
                                }
                            }
                        }
                        Err(e) => shared.error(format!("worker {idx}: ACKB answered {e}")),
                    },
                    other => shared.error(format!("worker {idx}: ACKB answered {other:?}")),
                }
                continue;
            }
            Some(Cmd::AckFetch(seq)) => match reply {
                Reply::Null => {
                    acked(shared, seq);
                    continue;
                }
                Reply::Bulk(b) => {
                    acked(shared, seq);
                    b
                }
                other => {
                    shared.error(format!("worker {idx}: ACK with fetch answered {other:?}"));
                    continue;
                }
            },
            None => break,
        };
        let got = unix_nanos();
        let jobs = match parse_fetched(&body) {
            Ok(j) => j,
            Err(e) => {
                shared.fatal(format!("worker {idx}: {e}"));
                return lat;
            }
        };
        let ack_batch = cfg.mode == Mode::Batch && !cfg.ack_each && cfg.dialect == Dialect::Ojs;
        let mut batch_line = String::new();
        let mut batch_seqs = Vec::new();
        for job in jobs {
            let seq = job
                .meta
                .bench_seq
                .filter(|s| job.meta.bench_run == cfg.run && *s < shared.n);
            match seq {
                Some(s) => {
                    lat.push(got.saturating_sub(job.meta.bench_ts));
                    if Shared::bump(&shared.fetched[s as usize]) == 0 {
                        shared.delivered_at[s as usize].store(got, Ordering::Relaxed);
                        shared.unique_delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                None => {
                    shared.foreign.fetch_add(1, Ordering::Relaxed);
                }
            }
            if ack_batch {
                batch_line.push_str(if batch_seqs.is_empty() { "ACKB [" } else { "," });
                batch_line.push_str(&super::envelope::ack_line(&job.id)["ACK ".len()..]);
                batch_seqs.push(seq);
                continue;
            }
            // Take the next job with this ACK unless every job of the run is out already.
            let (line, cmd) = if ack_fetch && !shared.fetching_done() && !shared.should_stop() {
                (env.ack_fetch_line(idx, &job.id), Cmd::AckFetch(seq))
            } else {
                (env.ack_line(&job.id), Cmd::Ack(seq))
            };
            if let Err(e) = client.send_line(&line) {
                shared.fatal(format!("worker {idx}: send: {e}"));
                return lat;
            }
            out.push_back(cmd);
        }
        if !batch_seqs.is_empty() {
            batch_line.push(']');
            if let Err(e) = client.send_line(&batch_line) {
                shared.fatal(format!("worker {idx}: send: {e}"));
                return lat;
            }
            out.push_back(Cmd::AckBatch(batch_seqs));
        }
    }
    lat
}

/// The positions an ACKB reply (`{"acked": n, "rejected": [{"index", ...}]}`) refused.
fn ackb_refused(body: &[u8]) -> Result<Vec<usize>, String> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let rejected = v["rejected"]
        .as_array()
        .ok_or_else(|| format!("no rejected list: {v}"))?;
    Ok(rejected
        .iter()
        .filter_map(|r| r["index"].as_u64().map(|i| i as usize))
        .collect())
}

/// A successful ACK of job `seq` (`None`: a foreign job).
fn acked(shared: &Shared, seq: Option<u64>) {
    if let Some(s) = seq {
        Shared::bump(&shared.acks[s as usize]);
        let done = shared.acked.fetch_add(1, Ordering::Relaxed) + 1;
        if done == shared.n {
            shared
                .all_acked_ns
                .store(shared.elapsed_ns(), Ordering::Relaxed);
        }
    }
}

/// Pickup latency counted from the push reply instead of the send: per delivered job, its
/// first delivery minus the moment its producer read the push reply, in ns; 0 when the
/// worker had it before the producer read the reply (both happen after the same commit).
pub fn after_push_reply(shared: &Shared) -> Vec<u64> {
    shared
        .push_reply_at
        .iter()
        .zip(&shared.delivered_at)
        .filter_map(|(r, d)| {
            let (r, d) = (r.load(Ordering::Relaxed), d.load(Ordering::Relaxed));
            (r != 0 && d != 0).then(|| d.saturating_sub(r))
        })
        .collect()
}

/// Exactly-once tally: jobs never delivered, delivered more than once, never acked.
pub struct Tally {
    pub missing: u64,
    pub duplicates: u64,
    pub unacked: u64,
}

pub fn tally(shared: &Shared) -> Tally {
    let mut t = Tally {
        missing: 0,
        duplicates: 0,
        unacked: 0,
    };
    for (f, a) in shared.fetched.iter().zip(&shared.acks) {
        let (f, a) = (f.load(Ordering::Relaxed), a.load(Ordering::Relaxed));
        if f == 0 {
            t.missing += 1;
        }
        if f > 1 || a > 1 {
            t.duplicates += 1;
        }
        if a == 0 {
            t.unacked += 1;
        }
    }
    t
}

/// Run producers and workers to completion (or timeout); returns all pickup latencies.
pub fn run(cfg: &LoadConfig, shared: &Arc<Shared>) -> Vec<u64> {
    let env = Arc::new(Envelope::with_queues(
        super::envelope::queue_names(&cfg.queue, cfg.queues, cfg.spread),
        cfg.fetch_all,
        cfg.run,
        cfg.payload,
        cfg.dialect,
    ));
    let active = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for w in 0..cfg.workers {
        let (cfg, shared, active, env) = (cfg.clone(), shared.clone(), active.clone(), env.clone());
        handles.push(spawn(format!("w{w}"), move || {
            active.fetch_add(1, Ordering::Relaxed);
            worker(&cfg, &shared, &env, w)
        }));
    }
    let mut producers = Vec::new();
    for p in 0..cfg.producers {
        let (cfg, shared, env) = (cfg.clone(), shared.clone(), env.clone());
        producers.push(spawn(format!("p{p}"), move || {
            producer(&cfg, &shared, &env, p);
            Vec::new()
        }));
    }
    let mut lat = Vec::with_capacity(shared.n as usize);
    for h in producers.into_iter().chain(handles) {
        match h.join() {
            Ok(mut l) => lat.append(&mut l),
            Err(_) => shared.fatal("a load thread panicked".into()),
        }
    }
    if Instant::now() >= shared.deadline && shared.acked.load(Ordering::Relaxed) < shared.n {
        shared.error(format!(
            "timed out after {:?}",
            shared.deadline - shared.start
        ));
    }
    lat
}

pub fn spawn<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name)
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("spawn thread")
}
