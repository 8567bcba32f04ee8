//! When replies leave: a FETCH's before its batch is durable, everything else (and an ACK
//! with `fetch`) after. A store whose syncs wait at a gate the test holds shows the order
//! without timing anything: while the gate is shut nothing can become durable. And how a
//! batch's events join the last log record while the store still holds it.

use super::super::request::Command;
use super::super::test_cmds::{fetch, id_of, push, within};
use super::super::test_store::Wrapped;
use super::super::{start, Answer, Config};
use crate::store::StoreKind;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// An engine on a fjall store in `dir` wrapped as `test_store` does (its gate, and
/// whether it says its batches are still held), and a runtime to wait on its replies.
fn engine(
    dir: &std::path::Path,
    pipelined: bool,
    holding: bool,
) -> (
    crate::engine::EngineHandle,
    std::thread::JoinHandle<Result<(), crate::store::StoreError>>,
    tokio::runtime::Runtime,
    super::super::test_store::Gate,
) {
    let store = Wrapped::new(crate::store::open(StoreKind::Fjall, dir, 1 << 20).unwrap());
    let gate = store.gate.clone();
    store
        .holding
        .store(holding, std::sync::atomic::Ordering::SeqCst);
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
    (handle, thread, rt, gate)
}

#[test]
fn a_fetch_reply_leaves_before_its_batch_is_durable_and_an_ack_after() {
    for pipelined in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (handle, thread, rt, gate) = engine(dir.path(), pipelined, false);
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

/// While the store holds the batch that wrote the last log record (PostgreSQL between its
/// commit rounds; here the test store says so), the next batches' events join that record
/// instead of each writing one: a single record, read back whole and in order. Otherwise
/// each batch writes its own.
#[test]
fn while_the_store_holds_the_last_record_the_next_batches_events_join_it() {
    use crate::events::{decode_chunk, key_cursor, EventFilter, Start};
    use crate::store::Space;
    for holding in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (handle, thread, rt, _gate) = engine(dir.path(), true, holding);
        let long = Duration::from_secs(20);
        // One batch each: the next PUSH goes once the last is answered.
        let mut ids = Vec::new();
        for _ in 0..5 {
            let mut rx = rt.block_on(handle.submit(None, push("q"), 100));
            ids.push(id_of(&within(&rt, &mut rx, long).unwrap()));
        }
        let page = rt
            .block_on(handle.events(EventFilter::default(), Start::After(0), 100))
            .unwrap();
        let cursors: Vec<u64> = page.events.iter().map(|e| e.cursor).collect();
        let first = cursors[0];
        assert_eq!(
            cursors,
            (first..first + cursors.len() as u64).collect::<Vec<_>>(),
            "holding={holding}"
        );
        let enqueued: Vec<String> = page
            .events
            .iter()
            .filter(|e| e.kind == "job.enqueued")
            .map(|e| serde_json::from_slice::<Value>(&e.json()).unwrap()["subject"].to_string())
            .collect();
        let quoted: Vec<String> = ids.iter().map(|id| format!("{id:?}")).collect();
        assert_eq!(enqueued, quoted, "holding={holding}");
        handle.shutdown();
        thread.join().unwrap().unwrap();

        let store = crate::store::open(StoreKind::Fjall, dir.path(), 1 << 20).unwrap();
        let mut records = Vec::new();
        store
            .scan(Space::Event, &mut |k, v| {
                let first = key_cursor(k).unwrap();
                records.push((first, decode_chunk(first, v).unwrap().len()));
                true
            })
            .unwrap();
        let logged: usize = records.iter().map(|(_, n)| n).sum();
        assert_eq!(logged, cursors.len(), "holding={holding}: {records:?}");
        if holding {
            assert_eq!(records.len(), 1, "{records:?}");
        } else {
            assert!(records.len() >= 5, "{records:?}");
        }
    }
}
