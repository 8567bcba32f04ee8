//! The benchmark's job envelope and the minimal parsing of what comes back.
//!
//! Lines are rendered from a template with `format!` rather than built as `serde_json::Value`s:
//! the load generator shares two cores with the server, so its own per-job cost matters.

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

/// Renders job envelopes of one run: `~payload` bytes of `args`, plus `meta` with the run id,
/// the job's sequence number (for the exactly-once check) and the producer's send time.
pub struct Envelope {
    queue: String,
    run: u64,
    padding: String,
}

impl Envelope {
    pub fn new(queue: &str, run: u64, payload: usize) -> Envelope {
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
        format!(
            r#"{{"type":"bench.work","queue":"{q}","args":{args},"meta":{{"bench_run":{run},"bench_seq":{seq},"bench_ts":{ts}}}}}"#,
            q = self.queue,
            run = self.run,
            ts = unix_nanos(),
        )
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

    pub fn args_bytes(&self) -> usize {
        Envelope::render_args(123_456, &self.padding).len()
    }
}

/// The parts of a fetched envelope the benchmark needs; everything else is skipped.
#[derive(Debug, Deserialize)]
pub struct Fetched {
    pub id: String,
    #[serde(default)]
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
}
