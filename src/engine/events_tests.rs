//! The event log's upkeep: what it reads.

use super::super::test_cmds::{push, within};
use super::super::test_store::Wrapped;
use super::super::{start, Config};
use crate::store::StoreKind;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The prune looks at the log every `PRUNE_EVERY` (100 ms); once it has read that the
/// oldest record is within the retention and the count within its bound, it does not read
/// the log again until that record's time has passed (a database round trip on
/// PostgreSQL, per partition). Pruning once the time passes is `tests/events.rs`'s
/// `pruned_cursor_is_refused_and_cursors_continue_after_restart`.
#[test]
fn the_prune_does_not_read_a_log_it_knows_has_nothing_to_drop() {
    let dir = tempfile::tempdir().unwrap();
    let store = Wrapped::new(crate::store::open(StoreKind::Fjall, dir.path(), 1 << 20).unwrap());
    let scans = store.event_scans.clone();
    let (handle, thread) = start(Box::new(store), Config::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    // Jobs pushed for a second: an engine iteration every 20 ms, ten prune periods, each
    // push's events in the log.
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(1) {
        let mut rx = rt.block_on(handle.submit(None, push("q"), 100));
        assert!(within(&rt, &mut rx, Duration::from_secs(20)).is_some());
        std::thread::sleep(Duration::from_millis(20));
    }
    // One read learns the oldest record's time. One more at most: a first look in the
    // iteration that applied the first push, before its record was written, finds none.
    let scans = scans.load(Ordering::SeqCst);
    assert!((1..=2).contains(&scans), "the log was read {scans} times");
    handle.shutdown();
    thread.join().unwrap().unwrap();
}
