//! Commands and answers for the engine's unit tests.

use super::request::Command;
use super::{Answer, Answered};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::oneshot;

/// A PUSH of `job` (an OJS job body), validated as a front end does.
pub(super) fn push_job(job: Value) -> Command {
    let len = job.to_string().len();
    let job = super::intake::Intake::default().job(job, len).unwrap();
    Command::Push {
        job: Box::new(job),
        len,
        resend: false,
    }
}

/// A PUSH of a job of type `t` to `q`.
pub(super) fn push(q: &str) -> Command {
    push_job(json!({"type": "t", "queue": q, "args": []}))
}

/// A FETCH from `q` that waits as long as the engine's default.
pub(super) fn fetch(q: &str) -> Command {
    Command::Fetch {
        queues: vec![q.into()],
        count: None,
        wait: None,
    }
}

/// The id of the job an answer carries.
pub(super) fn id_of(a: &Answered) -> String {
    match a {
        Ok(Answer::Job(j)) => {
            let v: Value = serde_json::from_slice(j.json()).unwrap();
            v["id"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a job, got {other:?}"),
    }
}

/// What arrived on `rx` within `d`, if anything.
pub(super) fn within(
    rt: &tokio::runtime::Runtime,
    rx: &mut oneshot::Receiver<Answered>,
    d: Duration,
) -> Option<Answered> {
    rt.block_on(async { tokio::time::timeout(d, rx).await })
        .ok()
        .map(Result::unwrap)
}
