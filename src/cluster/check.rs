//! What the holder checks of a request a peer sent before its engine runs it. A node
//! validates its clients' requests itself (parsers, `engine::intake`) and a peer has
//! authenticated as admin, but what arrives is still input: the bounds the parsers apply
//! that the engine relies on are applied again here, so that no peer message can make the
//! engine allocate without bound or overflow (a page of `usize::MAX` jobs, a FETCH of
//! every queue name in the world), and every job is validated again as a client's PUSH
//! would be.

use crate::engine::request::{Command, CronCmd, DeadCmd, WorkflowCmd};
use crate::error::{ErrorCode, OjsError};
use crate::job::validate::{parse_new_job, Limits, NewJob};
use crate::protocol::command::{MAX_ACK_BATCH, MAX_FETCH_COUNT, MAX_FETCH_QUEUES};
use chrono::{DateTime, Utc};

/// The largest page any listing takes (DEAD LIST, JOBS, CRON LIST, WORKFLOW LIST).
pub const MAX_PAGE: usize = 1000;

fn refused(what: String) -> OjsError {
    OjsError::new(
        ErrorCode::InvalidPayload,
        format!("a peer's request is out of bounds: {what}"),
    )
}

fn page(limit: usize) -> Result<(), OjsError> {
    if limit > MAX_PAGE {
        return Err(refused(format!("a page of {limit} (at most {MAX_PAGE})")));
    }
    Ok(())
}

fn queues(qs: &[String]) -> Result<(), OjsError> {
    if qs.len() > MAX_FETCH_QUEUES {
        return Err(refused(format!(
            "{} queues (at most {MAX_FETCH_QUEUES})",
            qs.len()
        )));
    }
    match qs.iter().find(|q| !crate::job::is_valid_queue(q)) {
        Some(q) => Err(refused(format!(
            "queue name {:?}",
            q.chars().take(64).collect::<String>()
        ))),
        None => Ok(()),
    }
}

/// The job validated again from its envelope, as a client's PUSH of it would be.
fn job(j: &NewJob, len: usize, limits: &Limits, now: DateTime<Utc>) -> Result<(), OjsError> {
    let mut v = serde_json::to_value(&j.job)
        .map_err(|e| refused(format!("a job that does not serialize: {e}")))?;
    if j.pending {
        v["pending"] = serde_json::Value::Bool(true);
    }
    parse_new_job(v, len, now, limits).map(|_| ())
}

/// The most bytes of a worker's HELLO a peer may register (a client's HELLO line is held
/// to 64 KiB).
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// A worker id a peer names (a client's is at most `MAX_WID_BYTES`), and the HELLO it
/// registers, if any.
pub fn worker(wid: &str, info: Option<&serde_json::Value>) -> Result<(), OjsError> {
    let max = crate::protocol::hello::MAX_WID_BYTES;
    if wid.is_empty() || wid.len() > max {
        return Err(refused(format!(
            "a worker id of {} bytes (1 to {max})",
            wid.len()
        )));
    }
    if let Some(info) = info {
        let len = serde_json::to_vec(info).map_or(usize::MAX, |b| b.len());
        if len > MAX_HELLO_BYTES {
            return Err(refused(format!("a HELLO of {len} bytes")));
        }
    }
    Ok(())
}

/// Whether the holder may run `cmd` from a peer.
pub fn forwarded(cmd: &Command, limits: &Limits, now: DateTime<Utc>) -> Result<(), OjsError> {
    match cmd {
        Command::Push { job: j, len, .. } => job(j, *len, limits, now),
        Command::PushBatch(jobs) | Command::PushEach(jobs) => {
            if jobs.len() > MAX_PAGE * 10 {
                return Err(refused(format!("a batch of {} jobs", jobs.len())));
            }
            jobs.iter()
                .try_for_each(|(j, len)| job(j, *len, limits, now))
        }
        Command::Fetch {
            queues: qs, count, ..
        } => {
            queues(qs)?;
            match count {
                Some(n) if *n > MAX_FETCH_COUNT => Err(refused(format!(
                    "FETCH of {n} jobs (at most {MAX_FETCH_COUNT})"
                ))),
                _ => Ok(()),
            }
        }
        Command::AckFetch { queues: qs, .. } => queues(qs),
        Command::AckBatch(acks) if acks.len() > MAX_ACK_BATCH => Err(refused(format!(
            "ACKB of {} ACKs (at most {MAX_ACK_BATCH})",
            acks.len()
        ))),
        Command::Jobs(q) => page(q.limit),
        Command::Dead(DeadCmd::List { limit, .. }) => page(*limit),
        Command::Cron(CronCmd::List { limit, .. }) => page(*limit),
        Command::Workflow(WorkflowCmd::List { limit, .. }) => page(*limit),
        // A workflow's jobs were built by its home engine from a definition a node
        // validated (with `parent_results`, which may nest deeper than a client's job):
        // held to the job size limit, and to the letters one outbox read hands out.
        Command::Workflow(WorkflowCmd::Deliver { letters, .. }) => {
            use crate::engine::request::Letter;
            let max = crate::engine::request::OUTBOX_TAKE_MAX;
            if letters.len() > max {
                return Err(refused(format!(
                    "{} letters (at most {max})",
                    letters.len()
                )));
            }
            letters.iter().try_for_each(|l| match l {
                Letter::Enqueue { len, .. } => crate::job::template::check_len(*len, limits),
                _ => Ok(()),
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::intake::Intake;
    use serde_json::json;

    fn push(body: serde_json::Value) -> Command {
        let len = body.to_string().len();
        let job = Intake::default().job(body, len).unwrap();
        Command::Push {
            job: Box::new(job),
            len,
            resend: false,
        }
    }

    #[test]
    fn a_job_a_node_accepted_passes_again_and_a_tampered_one_does_not() {
        let limits = Limits::default();
        let now = Utc::now();
        for body in [
            json!({"type": "t", "args": [1]}),
            json!({"type": "a.b", "args": [], "queue": "q-1", "priority": 5, "timeout": 30,
                   "meta": {"k": "v"}, "pending": true, "scheduled_at": "+PT5S",
                   "retry": {"max_attempts": 5, "backoff_coefficient": 3.0},
                   "unique": {"keys": ["type", "args"], "on_conflict": "reject"},
                   "x-ext": {"n": 1}}),
        ] {
            let cmd = push(body.clone());
            forwarded(&cmd, &limits, now).unwrap_or_else(|e| panic!("{body}: {e:?}"));
            // Through the wire and back, as a peer sends it.
            let back: Command =
                serde_json::from_str(&serde_json::to_string(&cmd).unwrap()).unwrap();
            forwarded(&back, &limits, now).unwrap();
        }
        let Command::Push {
            mut job,
            len,
            resend,
        } = push(json!({"type": "t", "args": []}))
        else {
            unreachable!()
        };
        job.job.queue = "NOT a queue".into();
        let bad = Command::Push { job, len, resend };
        assert_eq!(
            forwarded(&bad, &limits, now).unwrap_err().code,
            ErrorCode::InvalidQueue
        );
    }

    #[test]
    fn worker_ids_and_hellos_are_held_to_a_clients_bounds() {
        assert!(worker("w-1", Some(&json!({"hostname": "h"}))).is_ok());
        assert!(worker("", None).is_err());
        assert!(worker(&"w".repeat(257), None).is_err());
        let big = json!({"labels": ["x".repeat(MAX_HELLO_BYTES)]});
        assert!(worker("w-1", Some(&big)).is_err());
    }

    #[test]
    fn pages_fetches_and_queue_lists_past_the_parsers_bounds_are_refused() {
        let (limits, now) = (Limits::default(), Utc::now());
        let huge = Command::Jobs(crate::engine::request::JobsQuery {
            queue: None,
            state: None,
            limit: usize::MAX,
            offset: usize::MAX,
        });
        assert!(forwarded(&huge, &limits, now).is_err());
        let fetch = |qs: Vec<String>, count| Command::Fetch {
            queues: qs,
            count,
            wait: None,
        };
        assert!(forwarded(&fetch(vec!["q".into()], Some(1000)), &limits, now).is_ok());
        assert!(forwarded(&fetch(vec!["q".into()], Some(usize::MAX)), &limits, now).is_err());
        assert!(forwarded(&fetch(vec!["q".into(); 257], None), &limits, now).is_err());
        assert!(forwarded(&fetch(vec!["Bad Queue".into()], None), &limits, now).is_err());
        let acks = |n| {
            let ack = crate::engine::request::AckItem {
                id: "j".into(),
                result: None,
            };
            Command::AckBatch(vec![ack; n])
        };
        assert!(forwarded(&acks(MAX_ACK_BATCH), &limits, now).is_ok());
        assert!(forwarded(&acks(MAX_ACK_BATCH + 1), &limits, now).is_err());
    }
}
