//! Engines sharing a host thread: each is woken by its own messages (the doorbell), serves
//! only its own jobs, and ends on its own while the others go on.

use super::super::request::Command;
use super::super::test_cmds::{fetch, id_of, push_job, within};
use super::super::{start_hosted, Config, EngineHandle, Host, Shared};
use crate::store::{StoreError, StoreKind};
use serde_json::json;
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn push(q: &str, id: &str) -> Command {
    push_job(json!({"id": id, "type": "t", "queue": q, "args": []}))
}

/// An engine over a fresh fjall store in `dir`, on `host`; its end is sent to `ended`.
fn hosted(
    dir: &std::path::Path,
    pipelined: bool,
    host: &mut Host,
    ended: mpsc::Sender<(&'static str, Result<(), StoreError>)>,
    name: &'static str,
) -> EngineHandle {
    let store = crate::store::open(StoreKind::Fjall, dir, 1 << 20).unwrap();
    let cfg = Config {
        commit_pipeline: pipelined,
        fetch_wait: Duration::from_secs(30),
        ..Default::default()
    };
    let shared = Shared::new(Default::default());
    let ended = Box::new(move |r| {
        let _ = ended.send((name, r));
    });
    start_hosted(store, cfg, shared, host, ended).unwrap()
}

#[test]
fn engines_on_one_host_are_each_woken_by_their_own_messages_and_end_alone() {
    for pipelined in [false, true] {
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut host = Host::start("test-host").unwrap();
        let (tx, ended) = mpsc::channel();
        let a = hosted(da.path(), pipelined, &mut host, tx.clone(), "a");
        let b = hosted(db.path(), pipelined, &mut host, tx, "b");
        assert_eq!(host.engines(), 2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let wid: Arc<str> = Arc::from("w1");
        a.register_worker(wid.clone(), json!({"wid": "w1"}), false);
        let long = Duration::from_secs(10);
        let call = |h: &EngineHandle, cmd| rt.block_on(h.submit(Some(wid.clone()), cmd, 100));

        // A FETCH waits on a's empty queue (for up to 30 s): the PUSH's message wakes a,
        // whose waiting FETCH takes the job.
        let mut waiting = call(&a, fetch("q"));
        let pushed = within(
            &rt,
            &mut call(&a, push("q", "019abcde-0000-7000-8000-00000000000a")),
            long,
        );
        assert!(
            matches!(pushed, Some(Ok(_))),
            "{pushed:?} pipelined={pipelined}"
        );
        let got = within(&rt, &mut waiting, long).expect("the waiting FETCH was answered");
        assert_eq!(id_of(&got), "019abcde-0000-7000-8000-00000000000a");

        // b holds its own jobs: a's queue of the same name is not b's.
        within(
            &rt,
            &mut call(&b, push("q", "019abcde-0000-7000-8000-00000000000b")),
            long,
        )
        .unwrap()
        .unwrap();
        let got = within(&rt, &mut call(&b, fetch("q")), long).unwrap();
        assert_eq!(id_of(&got), "019abcde-0000-7000-8000-00000000000b");

        // a stops; b goes on.
        a.shutdown();
        let (name, r) = ended.recv_timeout(long).expect("a's end reported");
        assert_eq!(name, "a");
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(host.engines(), 1);
        let pushed = within(
            &rt,
            &mut call(&b, push("q", "019abcde-0000-7000-8000-00000000000c")),
            long,
        );
        assert!(matches!(pushed, Some(Ok(_))), "b still serves: {pushed:?}");
        let gone = within(&rt, &mut call(&a, fetch("q")), long).unwrap();
        assert!(gone.is_err(), "a answers no more: {gone:?}");

        b.shutdown();
        let (name, r) = ended.recv_timeout(long).expect("b's end reported");
        assert_eq!((name, r.is_ok()), ("b", true));
        assert_eq!(host.engines(), 0);
    }
}
