//! The benchmark's job envelope and the minimal parsing of what comes back.
//!
//! Lines are rendered from a template with `format!` rather than built as `serde_json::Value`s:
//! the load generator shares two cores with the server, so its own per-job cost matters.

use ojs_client::Reply;
use serde::Deserialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock nanoseconds; producer and worker run on the same machine, so pickup latency is
/// the difference of two readings of this clock.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The wire dialect a run speaks: the OJS port's, or the Faktory port's (`--faktory-listen`).
/// Connections, pacing, pipelining and bookkeeping are the same; only the lines and the
/// replies they expect differ, and all of that is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `PUSH`/`PUSHB` of OJS envelopes (`meta` carries the bench fields), `FETCH [COUNT n]`,
    /// `ACK {"id"}`; PUSH answers the stored envelope (bulk).
    Ojs,
    /// `PUSH`/`PUSHB` of Faktory job JSON (`jid`, `jobtype`, `custom` carries the bench
    /// fields), `FETCH q` (one job: Faktory has no COUNT), `ACK {"jid"}`; PUSH answers `+OK`,
    /// PUSHB a bulk `{jid: error}` of the refused jobs.
    Faktory,
}

/// Renders job envelopes of one run: `~payload` bytes of `args`, plus `meta` with the run id,
/// the job's sequence number (for the exactly-once check) and the producer's send time.
pub struct Envelope {
    /// The queues of the run: jobs are spread over them command by command (`queue`).
    queues: Vec<String>,
    /// Every worker fetches from every queue (otherwise worker `w` from queue `w % n`).
    fetch_all: bool,
    run: u64,
    padding: String,
    dialect: Dialect,
}

/// The queue names of a run over `n` queues: `base` alone for one (the default), else
/// `base-0` .. `base-{n-1}`. With `spread` (a cluster's partition count), queue `k` is
/// chosen in partition `k % spread` instead (PROTOCOL.md §16): `base-k` if it is there,
/// else `base-k-j` for the first `j` that is, so that every partition gets its share.
pub fn queue_names(base: &str, n: usize, spread: Option<u32>) -> Vec<String> {
    if n <= 1 {
        return vec![base.to_string()];
    }
    let Some(parts) = spread.filter(|p| *p > 1) else {
        return (0..n).map(|i| format!("{base}-{i}")).collect();
    };
    (0..n)
        .map(|k| {
            let want = k as u32 % parts;
            let plain = format!("{base}-{k}");
            if ojsd::cluster::route::partition_of(&plain, parts) == want {
                return plain;
            }
            (1u64..)
                .map(|j| format!("{base}-{k}-{j}"))
                .find(|q| ojsd::cluster::route::partition_of(q, parts) == want)
                .expect("some name lands in every partition")
        })
        .collect()
}

impl Envelope {
    pub fn new(queue: &str, run: u64, payload: usize) -> Envelope {
        Envelope::with_dialect(queue, run, payload, Dialect::Ojs)
    }

    pub fn with_dialect(queue: &str, run: u64, payload: usize, dialect: Dialect) -> Envelope {
        Envelope::with_queues(vec![queue.to_string()], false, run, payload, dialect)
    }

    /// Jobs spread over `queues` (at least one); `fetch_all`: each worker fetches from all.
    pub fn with_queues(
        queues: Vec<String>,
        fetch_all: bool,
        run: u64,
        payload: usize,
        dialect: Dialect,
    ) -> Envelope {
        assert!(!queues.is_empty(), "a run needs a queue");
        // The args array without its padding string is about 150 bytes for a 6-digit seq;
        // the rest of the requested size is a filler string.
        let fixed = Envelope::render_args(123_456, "").len();
        let pad_len = payload.saturating_sub(fixed);
        let words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod ";
        let padding: String = words.chars().cycle().take(pad_len).collect();
        Envelope {
            queues,
            fetch_all,
            run,
            padding,
            dialect,
        }
    }

    fn render_args(seq: u64, padding: &str) -> String {
        format!(
            r#"[{seq},{{"user_id":{seq},"email":"user{seq}@example.com","template":"welcome_email","locale":"en-US","plan":"pro","trial":false}},"{padding}"]"#
        )
    }

    #[cfg(test)]
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// One job as JSON, stamped with the current time, in the run's first queue.
    #[cfg(test)]
    pub fn job(&self, seq: u64) -> String {
        self.job_in(0, seq)
    }

    /// One job as JSON in queue `q` (modulo the run's queues), stamped with the current time.
    pub fn job_in(&self, q: usize, seq: u64) -> String {
        let queue = &self.queues[q % self.queues.len()];
        let args = Envelope::render_args(seq, &self.padding);
        match self.dialect {
            Dialect::Ojs => format!(
                r#"{{"type":"bench.work","queue":"{q}","args":{args},"meta":{{"bench_run":{run},"bench_seq":{seq},"bench_ts":{ts}}}}}"#,
                q = queue,
                run = self.run,
                ts = unix_nanos(),
            ),
            // A jid like a Faktory client's (random-looking, not a UUID), unique per run.
            Dialect::Faktory => format!(
                r#"{{"jid":"b{run:08x}-{seq:010}","jobtype":"bench.work","queue":"{q}","args":{args},"custom":{{"bench_run":{run},"bench_seq":{seq},"bench_ts":{ts}}}}}"#,
                q = queue,
                run = self.run,
                ts = unix_nanos(),
            ),
        }
    }

    /// `PUSH <job>` into queue `q`.
    pub fn push_line(&self, q: usize, seq: u64) -> String {
        format!("PUSH {}", self.job_in(q, seq))
    }

    /// `PUSHB [<job>,...]` for the sequence numbers `from..to`, all into queue `q` (a batch
    /// over queues of several partitions is refused in cluster mode, PROTOCOL.md §16).
    pub fn pushb_line(&self, q: usize, from: u64, to: u64) -> String {
        let mut line = String::with_capacity(((to - from) as usize) * 512 + 8);
        line.push_str("PUSHB [");
        for seq in from..to {
            if seq > from {
                line.push(',');
            }
            line.push_str(&self.job_in(q, seq));
        }
        line.push(']');
        line
    }

    /// The queues worker `w` fetches from, space-separated: its own one (`w` modulo the
    /// run's queues), or all of them with `fetch_all`.
    fn worker_queues(&self, w: usize) -> String {
        if self.fetch_all {
            self.queues.join(" ")
        } else {
            self.queues[w % self.queues.len()].clone()
        }
    }

    /// The FETCH worker `w` sends: `FETCH q COUNT n` for more than one job on the OJS port;
    /// the Faktory dialect fetches one job per command whatever `count` is.
    pub fn fetch_line(&self, w: usize, count: usize) -> String {
        let qs = self.worker_queues(w);
        match self.dialect {
            Dialect::Ojs if count > 1 => format!("FETCH {qs} COUNT {count}"),
            _ => format!("FETCH {qs}"),
        }
    }

    /// The ACK of a fetched job by its id (`id` on the OJS port, `jid` on Faktory's).
    pub fn ack_line(&self, id: &str) -> String {
        match self.dialect {
            Dialect::Ojs => ack_line(id),
            Dialect::Faktory => format!(r#"ACK {{"jid":"{id}"}}"#),
        }
    }

    /// ACK and take the next job of the bench queue in the same reply (OJS port only). The
    /// wait for that job is short (100 ms, then the worker FETCHes as usual): the reply,
    /// which is what tells the worker its ACK is done, would otherwise come only after
    /// the whole fetch wait at the end of a run, when no job is left to take.
    pub fn ack_fetch_line(&self, w: usize, id: &str) -> String {
        let qs = self.worker_queues(w).replace(' ', "\",\"");
        format!(r#"ACK {{"id":"{id}","fetch":["{qs}"],"wait_ms":100}}"#)
    }

    /// Whether a PUSH or PUSHB reply says every job went in: OJS answers the stored
    /// envelope(s) in a bulk; Faktory answers `+OK` to PUSH and a bulk `{}` to PUSHB (the
    /// refused jobs by jid otherwise).
    pub fn push_accepted(&self, reply: &Reply) -> bool {
        match (self.dialect, reply) {
            (Dialect::Ojs, Reply::Bulk(_)) => true,
            (Dialect::Faktory, Reply::Simple(s)) => s == "OK",
            (Dialect::Faktory, Reply::Bulk(b)) => b.trim_ascii() == b"{}",
            _ => false,
        }
    }

    pub fn args_bytes(&self) -> usize {
        Envelope::render_args(123_456, &self.padding).len()
    }
}

/// The parts of a fetched envelope the benchmark needs; everything else is skipped. A job
/// fetched from the Faktory port has `jid` and `custom` where OJS has `id` and `meta`.
#[derive(Debug, Deserialize)]
pub struct Fetched {
    #[serde(alias = "jid")]
    pub id: String,
    #[serde(default, alias = "custom")]
    pub meta: BenchMeta,
}

#[derive(Debug, Default, Deserialize)]
pub struct BenchMeta {
    #[serde(default)]
    pub bench_run: u64,
    #[serde(default)]
    pub bench_seq: Option<u64>,
    #[serde(default)]
    pub bench_ts: u64,
}

/// A FETCH reply body: one envelope, or an array of them for `FETCH ... COUNT n`.
pub fn parse_fetched(body: &[u8]) -> Result<Vec<Fetched>, String> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let parsed = if first == Some(&b'[') {
        serde_json::from_slice::<Vec<Fetched>>(body)
    } else {
        serde_json::from_slice::<Fetched>(body).map(|f| vec![f])
    };
    parsed.map_err(|e| format!("cannot parse fetched job: {e}"))
}

/// `ACK {"id":"..."}`; ids are UUIDs, so no escaping is needed.
pub fn ack_line(id: &str) -> String {
    format!(r#"ACK {{"id":"{id}"}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_through_the_parser() {
        let env = Envelope::new("bench", 7, 300);
        assert!(
            (290..=310).contains(&env.args_bytes()),
            "{}",
            env.args_bytes()
        );
        let job: serde_json::Value = serde_json::from_str(&env.job(42)).unwrap();
        assert_eq!(job["meta"]["bench_seq"], 42);
        let mut stored = job.clone();
        stored["id"] = "0193a0b0-0000-7000-8000-000000000000".into();
        let one = parse_fetched(stored.to_string().as_bytes()).unwrap();
        assert_eq!(one[0].meta.bench_seq, Some(42));
        assert_eq!(one[0].meta.bench_run, 7);
        let many = serde_json::json!([stored, stored]).to_string();
        assert_eq!(parse_fetched(many.as_bytes()).unwrap().len(), 2);
        let line = env.pushb_line(0, 0, 3);
        let arr: serde_json::Value = serde_json::from_str(&line["PUSHB ".len()..]).unwrap();
        assert_eq!(arr.as_array().unwrap().len(), 3);
    }

    #[test]
    fn faktory_lines_and_replies() {
        let env = Envelope::with_dialect("bench", 7, 300, Dialect::Faktory);
        let job: serde_json::Value = serde_json::from_str(&env.job(42)).unwrap();
        assert_eq!(job["custom"]["bench_seq"], 42);
        assert_eq!(job["jobtype"], "bench.work");
        let jid = job["jid"].as_str().unwrap().to_string();
        assert!(jid.len() >= 8, "{jid}");
        // What the Faktory port's FETCH gives back: the pushed fields, plus the server's.
        let mut fetched = job.clone();
        fetched["enqueued_at"] = "2026-11-26T00:00:00Z".into();
        let got = parse_fetched(fetched.to_string().as_bytes()).unwrap();
        assert_eq!(got[0].id, jid);
        assert_eq!(got[0].meta.bench_seq, Some(42));
        assert_eq!(got[0].meta.bench_run, 7);
        assert_eq!(env.fetch_line(0, 100), "FETCH bench");
        assert_eq!(env.ack_line(&jid), format!(r#"ACK {{"jid":"{jid}"}}"#));
        assert!(env.push_accepted(&Reply::Simple("OK".into())));
        assert!(env.push_accepted(&Reply::Bulk(b"{}".to_vec())));
        assert!(!env.push_accepted(&Reply::Bulk(br#"{"x":"bad"}"#.to_vec())));
        let ojs = Envelope::new("bench", 7, 300);
        assert_eq!(ojs.fetch_line(3, 100), "FETCH bench COUNT 100");
        assert_eq!(ojs.fetch_line(0, 1), "FETCH bench");
        assert!(ojs.push_accepted(&Reply::Bulk(b"{}".to_vec())));
        assert!(!ojs.push_accepted(&Reply::Simple("OK".into())));
    }

    #[test]
    fn jobs_spread_over_queues() {
        assert_eq!(queue_names("bench", 1, None), vec!["bench"]);
        assert_eq!(queue_names("bench", 1, Some(8)), vec!["bench"]);
        let plain = queue_names("bench", 3, None);
        assert_eq!(plain, vec!["bench-0", "bench-1", "bench-2"]);
        let spread = queue_names("bench", 16, Some(8));
        assert_eq!(spread.len(), 16);
        for (k, q) in spread.iter().enumerate() {
            assert!(q.starts_with(&format!("bench-{k}")), "{q}");
            assert_eq!(
                ojsd::cluster::route::partition_of(q, 8),
                k as u32 % 8,
                "{q}"
            );
        }
        let env = Envelope::with_queues(queue_names("q", 3, None), false, 7, 300, Dialect::Ojs);
        assert_eq!(env.queue_count(), 3);
        let job: serde_json::Value = serde_json::from_str(&env.job_in(4, 9)).unwrap();
        assert_eq!(job["queue"], "q-1");
        let line = env.pushb_line(2, 0, 3);
        let arr: serde_json::Value = serde_json::from_str(&line["PUSHB ".len()..]).unwrap();
        assert!(arr.as_array().unwrap().iter().all(|j| j["queue"] == "q-2"));
        assert_eq!(env.fetch_line(5, 1), "FETCH q-2");
        assert_eq!(env.fetch_line(3, 10), "FETCH q-0 COUNT 10");
        let ack: serde_json::Value =
            serde_json::from_str(&env.ack_fetch_line(1, "x")["ACK ".len()..]).unwrap();
        assert_eq!(ack["fetch"], serde_json::json!(["q-1"]));
        let all = Envelope::with_queues(queue_names("q", 3, None), true, 7, 300, Dialect::Ojs);
        assert_eq!(all.fetch_line(1, 1), "FETCH q-0 q-1 q-2");
        let ack: serde_json::Value =
            serde_json::from_str(&all.ack_fetch_line(1, "x")["ACK ".len()..]).unwrap();
        assert_eq!(ack["fetch"], serde_json::json!(["q-0", "q-1", "q-2"]));
    }
}
