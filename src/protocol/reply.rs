use crate::engine::api::directive_name;
use crate::engine::request::Command;
use crate::engine::{Answer, JobView};
use crate::error::OjsError;
use bytes::Bytes;
use serde::Serialize;

/// One server reply, in the RESP subset Faktory uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Ok,
    Simple(String),
    Bulk(Bytes),
    Null,
    Error(OjsError),
}

impl Reply {
    pub fn json(v: &serde_json::Value) -> Reply {
        // Serializing a Value cannot fail (keys are strings).
        Reply::Bulk(Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
    }
}

impl From<OjsError> for Reply {
    fn from(e: OjsError) -> Self {
        Reply::Error(e)
    }
}

/// The RESP form of an engine answer in the OJS dialect: `+OK`, a bulk JSON document, a
/// null bulk for nothing, or `-ERR CODE message`.
impl From<crate::engine::Answered> for Reply {
    fn from(a: crate::engine::Answered) -> Self {
        match a {
            Err(e) => Reply::Error(e),
            Ok(Answer::Ok) => Reply::Ok,
            Ok(Answer::Nothing) => Reply::Null,
            Ok(a) => document(&a).map_or(Reply::Ok, Reply::Bulk),
        }
    }
}

/// `[envelope, ...]`, spliced from the engine's encoded envelopes (no re-encoding); the
/// HTTP binding's job lists use it too.
pub fn envelopes(views: &[JobView]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + views.iter().map(|j| j.json().len() + 1).sum::<usize>());
    out.push(b'[');
    for (i, j) in views.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(j.json());
    }
    out.push(b']');
    out
}

/// The JSON document the OJS TCP dialect sends for an engine answer; `None` for `Ok` and
/// `Nothing`, which carry no document. (The engine answers typed values; this is the one
/// place that renders them for the OJS port.)
pub fn document(answer: &Answer) -> Option<Bytes> {
    fn ser<T: Serialize>(v: &T) -> Option<Bytes> {
        // The documents hold strings, numbers and JSON values only: this cannot fail.
        serde_json::to_vec(v).ok().map(Bytes::from)
    }
    match answer {
        Answer::Ok | Answer::Nothing => None,
        Answer::Job(j) => Some(j.json().clone()),
        Answer::Jobs(js) => Some(Bytes::from(envelopes(js))),
        Answer::Directive(d) => ser(&serde_json::json!({"state": directive_name(Some(*d))})),
        Answer::Info(v) => ser(v),
        Answer::Cluster(v) => ser(v),
        Answer::Queues(v) => ser(&super::faktory::shown_queues(v.clone())),
        Answer::QueueStats(v) => ser(&super::faktory::shown_stats((**v).clone())),
        Answer::Purged(v) => ser(v),
        Answer::History(v) => ser(v),
        Answer::Workers(v) => ser(v),
        Answer::JobPage(v) => ser(v),
        Answer::Overview(v) => ser(v),
        Answer::DeadPage(v) => ser(v),
        Answer::DeadStats(v) => ser(v),
        Answer::DeadRetried(v) => ser(v),
        Answer::DeadDeleted(v) => ser(v),
        Answer::CronPage(v) => ser(v),
        Answer::CronJob(v) => ser(v),
        Answer::Workflow(v) => ser(v),
        Answer::WorkflowPage(v) => ser(v),
        Answer::Letters(v) => ser(v),
        Answer::PushedEach(v) => {
            ser(&serde_json::json!({"accepted": v.accepted, "rejected": refused(v)}))
        }
        Answer::Acked(v) => ser(&serde_json::json!({"acked": v.accepted, "rejected": refused(v)})),
        Answer::Mutated(v) => ser(v),
        Answer::Flushed(v) => ser(v),
        Answer::Latencies(v) => {
            let map: serde_json::Map<String, serde_json::Value> = v
                .iter()
                .map(|l| (l.queue.clone(), serde_json::json!(l.seconds)))
                .collect();
            ser(&map)
        }
    }
}

/// The refused items of an [`Each`](crate::engine::api::Each), by position.
fn refused(v: &crate::engine::api::Each) -> Vec<serde_json::Value> {
    v.rejected
        .iter()
        .map(
            |(i, e)| serde_json::json!({"index": i, "code": e.code.as_str(), "message": e.message}),
        )
        .collect()
}

/// `+OK`, `$-1`, an error line or a small directive, with room for an id echoed back.
const SMALL_REPLY: usize = 1024;
/// What the server adds to a pushed envelope in its reply (id, state, timestamps, ...).
const PER_JOB_OVERHEAD: usize = 1024;
/// Room for the server's fields and an error history on top of a job's envelope.
const JOB_SLACK: usize = 64 * 1024;

/// The largest reply `cmd` (a line of `line_len` bytes) can get, as far as the connection
/// (or, for a forwarded request, the holder's peer server) can tell without asking the
/// engine. `max_job` is `--max-job-bytes`.
pub fn worst_case(cmd: &Command, line_len: usize, max_job: usize) -> usize {
    let job = max_job.saturating_add(JOB_SLACK);
    match cmd {
        // +OK, an error, or a small JSON object (BEAT's directive).
        Command::Ack { .. }
        | Command::Fail { .. }
        | Command::Cancel { .. }
        | Command::Activate { .. }
        | Command::Progress { .. }
        | Command::Unclaim { .. }
        | Command::Worker { .. }
        | Command::Beat { .. }
        | Command::ClockAdvance { .. }
        | Command::Hello(_)
        | Command::End => SMALL_REPLY.saturating_add(line_len),
        // A count, and a short error per refused ACK.
        Command::AckBatch(acks) => SMALL_REPLY
            .saturating_add(line_len)
            .saturating_add(acks.len().saturating_mul(SMALL_REPLY)),
        // The accepted envelope(s), as sent plus the server's fields.
        Command::Push { .. } => line_len.saturating_add(PER_JOB_OVERHEAD),
        Command::PushBatch(jobs) | Command::PushEach(jobs) => {
            line_len.saturating_add(jobs.len().saturating_mul(PER_JOB_OVERHEAD))
        }
        Command::Fetch { count, .. } => count.unwrap_or(1).max(1).saturating_mul(job),
        Command::AckFetch { .. } => job.saturating_add(line_len),
        // A job with its result (JOB), or a list (INFO, DEAD LIST, WORKERS, ...). Named one
        // by one, so that a new command must be placed here to build.
        Command::Job { .. }
        | Command::Info
        | Command::Cluster
        | Command::Queue(_)
        | Command::Dead(_)
        | Command::Workers
        | Command::Jobs(_)
        | Command::Overview
        | Command::StatsHistory { .. }
        | Command::Cron(_)
        | Command::Workflow(_)
        | Command::Mutate(_)
        | Command::Flush
        | Command::Subscribe { .. } => job.saturating_mul(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::DeadPage;

    #[test]
    fn jobs_render_as_an_array_of_the_stored_envelopes() {
        let a = JobView::encoded(Bytes::from_static(br#"{"id":"a"}"#));
        let b = JobView::encoded(Bytes::from_static(br#"{"id":"b"}"#));
        let out = document(&Answer::Jobs(vec![a.clone(), b])).unwrap();
        assert_eq!(&out[..], br#"[{"id":"a"},{"id":"b"}]"#);
        let page = DeadPage {
            total: 1,
            jobs: vec![a],
        };
        assert_eq!(
            serde_json::to_string(&page).unwrap(),
            r#"{"total":1,"jobs":[{"id":"a"}]}"#
        );
        assert_eq!(document(&Answer::Ok), None);
    }
}
