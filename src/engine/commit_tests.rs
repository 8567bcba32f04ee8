//! When replies leave: a FETCH's before its batch is durable, everything else (and an ACK
//! with `fetch`) after. A store whose syncs wait at a gate the test holds shows the order
//! without timing anything: while the gate is shut nothing can become durable.

use super::super::request::Command;
use super::super::test_store::Wrapped;
use super::super::{start, Answer, Answered, Config};
use crate::store::StoreKind;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

fn push(q: &str) -> Command {
    let job = json!({"type": "t", "queue": q, "args": []});
    let len = job.to_string().len();
    let job = crate::engine::intake::Intake::default()
        .job(job, len)
        .unwrap();
    Command::Push {
        job: Box::new(job),
        len,
        resend: false,
    }
}

fn id_of(a: &Answered) -> String {
    match a {
        Ok(Answer::Job(j)) => {
            let v: Value = serde_json::from_slice(j.json()).unwrap();
            v["id"].as_str().unwrap().to_owned()
        }
        other => panic!("expected a job, got {other:?}"),
    }
}

/// What arrived on `rx` within `d`, if anything.
fn within(
    rt: &tokio::runtime::Runtime,
    rx: &mut oneshot::Receiver<Answered>,
    d: Duration,
) -> Option<Answered> {
    rt.block_on(async { tokio::time::timeout(d, rx).await })
        .ok()
        .map(Result::unwrap)
}

#[test]
fn a_fetch_reply_leaves_before_its_batch_is_durable_and_an_ack_after() {
    for pipelined in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Wrapped::new(crate::store::open(StoreKind::Fjall, dir.path(), 1 << 20).unwrap());
        let gate = store.gate.clone();
        let cfg = Config {
            commit_pipeline: pipelined,
            fetch_wait: Duration::from_millis(200),
            ..Default::default()
        };
        let (handle, thread) = start(Box::new(store), cfg).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let wid: Arc<str> = Arc::from("w1");
        handle.register_worker(wid.clone(), json!({"wid": "w1"}), false);
        let call = |cmd: Command| rt.block_on(handle.submit(Some(wid.clone()), cmd, 100));
        let long = Duration::from_secs(20);
        let short = Duration::from_millis(300);

        let first = id_of(&within(&rt, &mut call(push("q")), long).unwrap());
        let second = id_of(&within(&rt, &mut call(push("q")), long).unwrap());

        gate.set(true);
        // The claim is answered though nothing can be made durable now.
        let fetched = within(&rt, &mut call(fetch("q")), long).expect("FETCH answered early");
        assert_eq!(id_of(&fetched), first, "pipelined={pipelined}");
        // ACK, plain or asking for the next job, waits for the disk.
        let mut ack_fetch = call(Command::AckFetch {
            id: first.clone(),
            result: None,
            queues: vec!["q".into()],
            wait: None,
        });
        assert!(
            within(&rt, &mut ack_fetch, short).is_none(),
            "ACK answered before its sync"
        );
        gate.set(false);
        let next = within(&rt, &mut ack_fetch, long).expect("answered after the sync");
        assert_eq!(id_of(&next), second, "the ACK's reply carries the next job");

        // The ACK took effect: the first job is completed.
        let got = within(&rt, &mut call(Command::Job { id: first.clone() }), long).unwrap();
        let Ok(Answer::Job(j)) = got else {
            panic!("{got:?}")
        };
        let v: Value = serde_json::from_slice(j.json()).unwrap();
        assert_eq!(v["state"], "completed");

        // Nothing left: an ACK with fetch and wait 0 answers nothing, the ACK done.
        let mut last = call(Command::AckFetch {
            id: second.clone(),
            result: Some(json!(1)),
            queues: vec!["q".into()],
            wait: Some(Duration::ZERO),
        });
        assert!(matches!(
            within(&rt, &mut last, long),
            Some(Ok(Answer::Nothing))
        ));
        // An ACK that fails fetches nothing and says why.
        let mut again = call(Command::AckFetch {
            id: second.clone(),
            result: None,
            queues: vec!["q".into()],
            wait: None,
        });
        assert!(matches!(within(&rt, &mut again, long), Some(Err(_))));

        handle.shutdown();
        thread.join().unwrap().unwrap();
    }
}

fn fetch(q: &str) -> Command {
    Command::Fetch {
        queues: vec![q.into()],
        count: None,
        wait: None,
    }
}
