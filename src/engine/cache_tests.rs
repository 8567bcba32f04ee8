//! Which new jobs the job cache keeps: one that may be fetched soon, not one pushed
//! behind more available jobs than the cache holds (it would be evicted unread). Seen
//! through the store: a cached job's FETCH reads no job record.

use super::super::request::Command;
use super::super::test_store::Wrapped;
use super::super::{start, Answer, Answered, Config};
use crate::store::StoreKind;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

fn new_job(q: &str, priority: i64) -> (crate::job::validate::NewJob, usize) {
    let job = json!({"type": "t", "queue": q, "args": [], "priority": priority});
    let len = job.to_string().len();
    let job = crate::engine::intake::Intake::default()
        .job(job, len)
        .unwrap();
    (job, len)
}

fn push(q: &str, priority: i64) -> Command {
    let (job, len) = new_job(q, priority);
    Command::Push {
        job: Box::new(job),
        len,
        resend: false,
    }
}

fn fetch(q: &str) -> Command {
    Command::Fetch {
        queues: vec![q.into()],
        count: None,
        wait: None,
    }
}

fn id_of(a: Answered) -> String {
    match a {
        Ok(Answer::Job(j)) => {
            let v: Value = serde_json::from_slice(j.json()).unwrap();
            v["id"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a job, got {other:?}"),
    }
}

#[test]
fn a_job_pushed_behind_a_backlog_deeper_than_the_cache_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let store = Wrapped::new(crate::store::open(StoreKind::Fjall, dir.path(), 1 << 20).unwrap());
    let job_reads = store.job_reads.clone();
    // A small cache, so that a backlog deeper than it is quick to push.
    let cfg = Config {
        job_cache_bytes: super::CACHE_BYTES / 4,
        ..Config::default()
    };
    let (handle, thread) = start(Box::new(store), cfg).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let call = |cmd: Command| rt.block_on(async { handle.submit(None, cmd, 100).await.await });

    // Into a short queue: cached, so its FETCH reads nothing.
    let hot = id_of(call(push("hot", 0)).unwrap());
    let before = job_reads.load(Ordering::SeqCst);
    assert_eq!(id_of(call(fetch("hot")).unwrap()), hot);
    assert_eq!(
        job_reads.load(Ordering::SeqCst),
        before,
        "a job pushed into a short queue is fetched from the cache"
    );

    // Behind a backlog as deep as the cache: not cached. (A higher priority makes it the
    // next job out, although it was pushed last.)
    let deep = super::CACHE_JOBS / 4;
    for _ in 0..deep / 1024 {
        let jobs = (0..1024).map(|_| new_job("deep", 0)).collect();
        assert!(call(Command::PushBatch(jobs)).unwrap().is_ok());
    }
    let late = id_of(call(push("deep", 100)).unwrap());
    let before = job_reads.load(Ordering::SeqCst);
    assert_eq!(id_of(call(fetch("deep")).unwrap()), late);
    assert!(
        job_reads.load(Ordering::SeqCst) > before,
        "a job pushed behind {deep} available ones is read from the store"
    );

    handle.shutdown();
    thread.join().unwrap().unwrap();
}
