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
    queue: String,
    run: u64,
    padding: String,
    dialect: Dialect,
}

impl Envelope {
    pub fn new(queue: &str, run: u64, payload: usize) -> Envelope {
        Envelope::with_dialect(queue, run, payload, Dialect::Ojs)
    }

    pub fn with_dialect(queue: &str, run: u64, payload: usize, dialect: Dialect) -> Envelope {
        // The args array without its padding string is about 150 bytes for a 6-digit seq;
        // the rest of the requested size is a filler string.
        let fixed = Envelope::render_args(123_456, "").len();
        let pad_len = payload.saturating_sub(fixed);
        let words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod ";
        let padding: String = words.chars().cycle().take(pad_len).collect();
        Envelope {
            queue: queue.to_string(),
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

    /// One job as JSON, stamped with the current time.
    pub fn job(&self, seq: u64) -> String {
        let args = Envelope::render_args(seq, &self.padding);
        match self.dialect {
            Dialect::Ojs => format!(
                r#"{{"type":"bench.work","queue":"{q}","args":{args},"meta":{{"bench_run":{run},"bench_seq":{seq},"bench_ts":{ts}}}}}"#,
                q = self.queue,
                run = self.run,
                ts = unix_nanos(),
            ),
            // A jid like a Faktory client's (random-looking, not a UUID), unique per run.
            Dialect::Faktory => format!(
                r#"{{"jid":"b{run:08x}-{seq:010}","jobtype":"bench.work","queue":"{q}","args":{args},"custom":{{"bench_run":{run},"bench_seq":{seq},"bench_ts":{ts}}}}}"#,
                q = self.queue,
                run = self.run,
                ts = unix_nanos(),
            ),
        }
    }

    /// `PUSH <job>`.
    pub fn push_line(&self, seq: u64) -> String {
        format!("PUSH {}", self.job(seq))
    }

    /// `PUSHB [<job>,...]` for the sequence numbers `from..to`.
    pub fn pushb_line(&self, from: u64, to: u64) -> String {
        let mut line = String::with_capacity(((to - from) as usize) * 512 + 8);
        line.push_str("PUSHB [");
        for seq in from..to {
            if seq > from {
                line.push(',');
            }
            line.push_str(&self.job(seq));
        }
        line.push(']');
        line
    }

    /// The FETCH a worker sends: `FETCH q COUNT n` for more than one job on the OJS port;
    /// the Faktory dialect fetches one job per command whatever `count` is.
    pub fn fetch_line(&self, count: usize) -> String {
        match self.dialect {
            Dialect::Ojs if count > 1 => format!("FETCH {} COUNT {}", self.queue, count),
            _ => format!("FETCH {}", self.queue),
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
    pub fn ack_fetch_line(&self, id: &str) -> String {
        format!(
            r#"ACK {{"id":"{id}","fetch":["{}"],"wait_ms":100}}"#,
            self.queue
        )
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
        let line = env.pushb_line(0, 3);
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
        assert_eq!(env.fetch_line(100), "FETCH bench");
        assert_eq!(env.ack_line(&jid), format!(r#"ACK {{"jid":"{jid}"}}"#));
        assert!(env.push_accepted(&Reply::Simple("OK".into())));
        assert!(env.push_accepted(&Reply::Bulk(b"{}".to_vec())));
        assert!(!env.push_accepted(&Reply::Bulk(br#"{"x":"bad"}"#.to_vec())));
        let ojs = Envelope::new("bench", 7, 300);
        assert_eq!(ojs.fetch_line(100), "FETCH bench COUNT 100");
        assert_eq!(ojs.fetch_line(1), "FETCH bench");
        assert!(ojs.push_accepted(&Reply::Bulk(b"{}".to_vec())));
        assert!(!ojs.push_accepted(&Reply::Simple("OK".into())));
    }
}
