//! Tests of [`PgNode`]: many partitions per node, the balancer, the renewal of all leases
//! in one statement, the key → partition lookup and the partition count fixed at creation.
//! They need `OJSD_TEST_POSTGRES_URL` (.ci/run sets it) and are skipped with a notice
//! without it; each uses a schema of its own.

use super::*;
use crate::store::conformance::{pg_options, pg_url};
use crate::store::postgres_schema::SCHEMA_VERSION;
use crate::store::{Batch, Store};
use std::path::Path;
use std::sync::mpsc;

const TTL: Duration = Duration::from_millis(1000);
const EVERY: Duration = Duration::from_millis(200);

fn options(dir: &Path, node: &str, parts: u32) -> Option<PostgresOptions> {
    let mut o = pg_options(dir)?;
    o.node = node.into();
    o.partitions = parts;
    o.lease_ttl = TTL;
    o.renew_every = EVERY;
    o.acquire_wait = Duration::ZERO;
    Some(o)
}

fn skipped() -> bool {
    let skip = pg_url().is_none();
    if skip {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
    }
    skip
}

/// What a node's balancer told the test.
struct Told {
    acquired: mpsc::Receiver<(u32, PostgresStore)>,
    release: mpsc::Receiver<u32>,
    routes: Arc<Mutex<Vec<PartRoute>>>,
    /// The stores received so far, by partition.
    stores: BTreeMap<u32, PostgresStore>,
}

impl Told {
    /// Receive what was acquired meanwhile.
    fn take_in(&mut self) -> Vec<u32> {
        let mut got = vec![];
        while let Ok((part, store)) = self.acquired.try_recv() {
            assert_eq!(store.part(), part);
            assert!(
                self.stores.insert(part, store).is_none(),
                "taken twice: {part}"
            );
            got.push(part);
        }
        got
    }

    fn held(&mut self) -> Vec<u32> {
        self.take_in();
        self.stores.keys().copied().collect()
    }

    fn owners(&self) -> Vec<Option<String>> {
        let routes = self.routes.lock().unwrap();
        routes
            .iter()
            .map(|r| r.live.then(|| r.owner.clone()).flatten())
            .collect()
    }
}

/// Run `node`'s balancer with hooks that hand everything to the test (the stores through
/// a channel, so that the hooks hold none and the node can stop).
fn run(node: &PgNode) -> Told {
    let (acq_tx, acquired) = mpsc::channel();
    let (rel_tx, release) = mpsc::channel();
    let acq_tx = Mutex::new(acq_tx);
    let rel_tx = Mutex::new(rel_tx);
    let routes = Arc::new(Mutex::new(vec![]));
    let r = routes.clone();
    node.run(NodeHooks {
        acquired: Arc::new(move |part, store| {
            let _ = acq_tx.lock().unwrap().send((part, store));
        }),
        release: Arc::new(move |part| {
            let _ = rel_tx.lock().unwrap().send(part);
        }),
        routes: Arc::new(move |routes| *r.lock().unwrap() = routes.to_vec()),
        wake: Arc::new(tokio::sync::Notify::new()),
    });
    Told {
        acquired,
        release,
        routes,
        stores: BTreeMap::new(),
    }
}

/// Poll `f` every 50 ms until it holds or `limit` passed; whether it held.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn some(node: &str, n: usize) -> Vec<Option<String>> {
    vec![Some(node.to_string()); n]
}

fn put(key: &[u8]) -> Batch {
    let mut b = Batch::default();
    b.put(Space::Job, key, key.to_vec());
    b
}

/// P = 4 and one node: its balancer takes every partition, hands each store over once,
/// and the routes it reports name it as the owner of all; each store commits.
#[test]
fn a_lone_node_takes_every_partition() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    assert_eq!(a.partitions(), 4);
    let mut told = run(&a);
    // At once (run wakes the tick), not by the two-TTL rule for unowned partitions.
    assert!(
        eventually(TTL, || told.held().len() == 4),
        "held {:?}",
        told.held()
    );
    assert!(eventually(Duration::from_secs(2), || told.owners()
        == some("node-a", 4)));
    let routes = told.routes.lock().unwrap().clone();
    assert_eq!(
        routes.iter().map(|r| r.part).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(routes.iter().all(|r| r.epoch == 1));
    for (part, s) in told.stores.iter_mut() {
        s.commit(put(&[*part as u8; 16])).unwrap();
    }
    // Several ticks later, nothing more is taken or given up.
    std::thread::sleep(EVERY * 4);
    assert!(told.take_in().is_empty());
    assert!(told.release.try_recv().is_err());
    assert_eq!(a.held_for_test(), vec![0, 1, 2, 3]);
}

/// A second node joins a node holding all 4: the first is asked to give up 2 (the highest
/// ones, once each), the second takes nothing held; once the first drops those stores
/// (which releases them) the second takes them, and both nodes' routes agree on 2 and 2.
#[test]
fn a_joining_node_gets_its_share_once_the_first_gives_it_up() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    let mut told_a = run(&a);
    assert!(eventually(Duration::from_secs(5), || told_a.held().len() == 4));
    let b = PgNode::open(&options(dir.path(), "node-b", 4).unwrap()).unwrap();
    let mut told_b = run(&b);
    let mut asked = vec![];
    assert!(
        eventually(Duration::from_secs(5), || {
            asked.extend(told_a.release.try_iter());
            asked.len() >= 2
        }),
        "asked {asked:?}"
    );
    assert_eq!(asked, vec![3, 2]);
    // Asked once only, and B took nothing while A held everything.
    std::thread::sleep(EVERY * 4);
    assert!(told_a.release.try_recv().is_err(), "asked again");
    assert!(told_b.held().is_empty());
    for part in &asked {
        drop(told_a.stores.remove(part));
    }
    assert!(
        eventually(Duration::from_secs(5), || told_b.held() == vec![2, 3]),
        "B holds {:?}",
        told_b.held()
    );
    let want = vec![
        Some("node-a".to_string()),
        Some("node-a".to_string()),
        Some("node-b".to_string()),
        Some("node-b".to_string()),
    ];
    assert!(eventually(Duration::from_secs(3), || told_a.owners()
        == want
        && told_b.owners() == want));
    // Balanced: nothing moves any more.
    std::thread::sleep(EVERY * 5);
    assert!(told_a.release.try_recv().is_err() && told_b.release.try_recv().is_err());
    assert!(told_a.take_in().is_empty() && told_b.take_in().is_empty());
    // B's stores write under their new epochs; A's two still do under theirs.
    for (part, s) in told_b.stores.iter_mut().chain(told_a.stores.iter_mut()) {
        s.commit(put(&[*part as u8; 16])).unwrap();
    }
    assert_eq!(b.held_for_test(), vec![2, 3]);
    assert_eq!(a.held_for_test(), vec![0, 1]);
}

/// Two nodes hold 2 partitions each; A's two stores stop renewing (a node whose renewals
/// for them do not get through) while A itself keeps heartbeating, so B sees two live
/// nodes and is at its share. Availability beats balance: once the leases have been
/// expired for more than two TTLs, B takes them anyway, and A's stores are fenced on their
/// next sync (their own clock check off, so that the database's fence alone stands).
#[test]
fn partitions_expired_for_two_ttls_are_taken_beyond_the_share_and_fence_their_old_owner() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    let mut a_stores: Vec<PostgresStore> = (0..2).map(|p| a.take(p).unwrap().unwrap()).collect();
    let b = PgNode::open(&options(dir.path(), "node-b", 4).unwrap()).unwrap();
    let mut told_b = run(&b);
    assert!(eventually(Duration::from_secs(5), || told_b.held() == vec![2, 3]));
    let mut syncers: Vec<_> = a_stores.iter().map(|s| s.syncer().unwrap()).collect();
    for s in &a_stores {
        s.freeze_for_test(true, false);
    }
    let frozen = Instant::now();
    for s in a_stores.iter_mut() {
        s.write(put(b"written-while-frozen")).unwrap();
    }
    // Expired after about a TTL, but not for two more: B stays at its share.
    std::thread::sleep(TTL * 2);
    assert_eq!(told_b.held(), vec![2, 3], "taken before two TTLs of expiry");
    assert!(
        eventually(Duration::from_secs(5), || told_b.held() == vec![0, 1, 2, 3]),
        "B holds {:?}",
        told_b.held()
    );
    assert!(frozen.elapsed() >= TTL * 3, "{:?}", frozen.elapsed());
    for (s, syncer) in a_stores.iter_mut().zip(syncers.iter_mut()) {
        assert!(matches!(syncer.sync(), Err(StoreError::Fenced(_))));
        assert!(matches!(
            s.commit(put(b"after")),
            Err(StoreError::Fenced(_))
        ));
    }
    for s in told_b.stores.values() {
        assert_eq!(s.get(Space::Job, b"written-while-frozen").unwrap(), None);
    }
}

/// A node that goes silent altogether (no heartbeat, no renewal: a frozen process) stops
/// counting as live once its heartbeat is a TTL old, so the other node's share becomes
/// every partition and it takes the silent node's as soon as their leases expire; the
/// silent node's stores are fenced on their next sync, and its renewal, once it wakes,
/// finds them lost.
#[test]
fn a_silent_node_is_taken_over_and_fenced() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    let mut a_stores: Vec<PostgresStore> = (0..2).map(|p| a.take(p).unwrap().unwrap()).collect();
    let b = PgNode::open(&options(dir.path(), "node-b", 4).unwrap()).unwrap();
    let mut told_b = run(&b);
    assert!(eventually(Duration::from_secs(5), || told_b.held() == vec![2, 3]));
    a.freeze_for_test(true);
    for s in &a_stores {
        s.freeze_for_test(false, false);
    }
    // Within two TTLs: A's leases and heartbeat run out after at most a TTL, and
    // B's next tick takes them (well before the two-TTL rule for live owners would).
    assert!(
        eventually(TTL * 2, || told_b.held() == vec![0, 1, 2, 3]),
        "B holds {:?}",
        told_b.held()
    );
    for s in a_stores.iter_mut() {
        assert!(matches!(s.commit(put(b"late")), Err(StoreError::Fenced(_))));
    }
    a.freeze_for_test(false);
    assert!(eventually(Duration::from_secs(3), || a
        .held_for_test()
        .is_empty()));
}

/// `locate` finds the partition of a job committed by partition 2's store, by its id (the
/// job record) and on any runtime; `None` for an unknown key and for one written but not
/// yet committed. Other spaces are found too (through the primary key).
#[test]
fn locate_finds_the_partition_holding_a_committed_key() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    let mut s2 = node.take(2).unwrap().unwrap();
    let mut s1 = node.take(1).unwrap().unwrap();
    let id = *uuid::Uuid::now_v7().as_bytes();
    let mut state = id.to_vec();
    state.push(1);
    let mut b = Batch::default();
    b.put(Space::Job, &id, b"job".to_vec());
    b.put(Space::Job, &state, b"state".to_vec());
    b.put(Space::Meta, b"name", b"m".to_vec());
    s2.commit(b).unwrap();
    s1.commit(put(b"elsewhere")).unwrap();
    let unsynced = *uuid::Uuid::now_v7().as_bytes();
    s2.write(put(&unsynced)).unwrap();
    // Awaited on a runtime of the caller's own, not the node's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let locate = |space, key: &[u8]| rt.block_on(node.locate(space, key.to_vec())).unwrap();
    assert_eq!(locate(Space::Job, &id), Some(2));
    assert_eq!(locate(Space::Job, b"elsewhere"), Some(1));
    assert_eq!(locate(Space::Job, &[7; 16]), None);
    assert_eq!(locate(Space::Job, &unsynced), None, "not committed yet");
    assert_eq!(locate(Space::Meta, b"name"), Some(2));
    assert_eq!(locate(Space::Meta, b"other"), None);
    assert_eq!(locate(Space::Cron, &id), None);
    // From a thread inside the caller's runtime too.
    let fut = node.locate(Space::Job, id.to_vec());
    assert_eq!(
        rt.block_on(async { tokio::spawn(fut).await.unwrap() })
            .unwrap(),
        Some(2)
    );
}

/// The partition count is fixed when the cluster's schema is created: a later open asking
/// for another uses the stored one; out-of-range counts and partitions are refused; a
/// schema from before version 3 gets rows for all its partitions and the lookup's index.
#[test]
fn the_partition_count_is_fixed_when_the_schema_is_created() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a", 4).unwrap();
    let s = opts.schema.clone();
    let a = PgNode::open(&opts).unwrap();
    assert_eq!(a.partitions(), 4);
    let count = |store: &PostgresStore| -> Vec<String> {
        let rows = store.sql_for_test(&format!(
            "SELECT (SELECT value FROM {s}.ojs_meta WHERE key = 'partitions') || '/' || \
             (SELECT count(*) FROM {s}.ojs_partitions)::text || '/' || \
             (SELECT value FROM {s}.ojs_meta WHERE key = 'schema_version')"
        ));
        rows.iter().map(|r| r.get(0)).collect()
    };
    let s3 = a.take(3).unwrap().unwrap();
    assert_eq!(count(&s3), vec![format!("4/4/{SCHEMA_VERSION}")]);
    assert!(a.take(4).is_err(), "partition 4 of 4");
    let b = PgNode::open(&options(dir.path(), "node-b", 8).unwrap()).unwrap();
    assert_eq!(b.partitions(), 4, "the stored count wins");
    assert!(b.take(3).unwrap().is_none(), "held by node-a");
    assert_eq!(b.take(1).unwrap().unwrap().part(), 1);
    for bad in [0, 1025] {
        match PgNode::open(&options(dir.path(), "node-c", bad).unwrap()) {
            Err(StoreError::Other(m)) => assert!(m.contains("1 to 1024"), "{m}"),
            Err(e) => panic!("{bad} partitions: {e}"),
            Ok(_) => panic!("opened with {bad} partitions"),
        }
    }
    // Back to a version-2 schema with three partitions recorded and no rows: opening
    // migrates it and creates the rows.
    for sql in [
        format!("DROP INDEX {s}.ojs_kv_job_key"),
        format!("DELETE FROM {s}.ojs_partitions"),
        format!("UPDATE {s}.ojs_meta SET value = CASE key WHEN 'partitions' THEN '3' ELSE '2' END"),
    ] {
        s3.sql_for_test(&sql);
    }
    drop((s3, a, b));
    let c = PgNode::open(&options(dir.path(), "node-c", 1).unwrap()).unwrap();
    assert_eq!(c.partitions(), 3);
    let s0 = c.take(0).unwrap().unwrap();
    assert_eq!(count(&s0), vec![format!("3/3/{SCHEMA_VERSION}")]);
    let index = s0.sql_for_test(&format!(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = '{s}' AND indexname = 'ojs_kv_job_key'"
    ));
    assert_eq!(index.len(), 1);
}

/// Commit one batch in each of `stores` from a thread of its own, all at once; the
/// outcomes by store.
fn commit_together(stores: &mut [PostgresStore], key: &[u8]) -> Vec<StoreResult<()>> {
    std::thread::scope(|sc| {
        let handles: Vec<_> = stores
            .iter_mut()
            .map(|s| sc.spawn(move || s.commit(put(key))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Group commit: four partitions of one node syncing at once commit in one transaction
/// (the round waits for all four: a test hook), and every partition's rows are there;
/// then, left to themselves, many concurrent syncs still share transactions.
#[test]
fn concurrent_syncs_of_a_nodes_partitions_share_a_transaction() {
    share_a_transaction(super::super::IN_FLIGHT_INLINE);
}

/// The same with one round in flight at a time (engines that commit pipelined).
#[test]
fn concurrent_syncs_share_a_transaction_with_one_round_in_flight() {
    share_a_transaction(super::super::IN_FLIGHT_PIPELINED);
}

fn share_a_transaction(in_flight: usize) {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path(), "node-a", 4).unwrap();
    opts.commits_in_flight = in_flight;
    let sch = opts.schema.clone();
    let a = PgNode::open(&opts).unwrap();
    let mut stores: Vec<PostgresStore> = (0..4).map(|p| a.take(p).unwrap().unwrap()).collect();
    let before = a.commits_for_test(4);
    for r in commit_together(&mut stores, b"together-0000000") {
        r.unwrap();
    }
    assert_eq!(
        a.commits_for_test(0) - before,
        1,
        "four syncs, one transaction"
    );
    for s in &stores {
        let rows = s.sql_for_test(&format!(
            "SELECT count(*) FROM {sch}.ojs_kv WHERE part = {} AND key = '\\x{}'::bytea",
            s.part(),
            hex(b"together-0000000")
        ));
        assert_eq!(rows[0].get::<_, i64>(0), 1, "partition {}", s.part());
    }
    // No hook: 4 x 50 syncs, fewer transactions.
    let before = a.commits_for_test(0);
    std::thread::scope(|sc| {
        for s in stores.iter_mut() {
            sc.spawn(move || {
                for i in 0..50u32 {
                    let key = format!("free-{i:011}");
                    s.commit(put(key.as_bytes())).unwrap();
                }
            });
        }
    });
    let rounds = a.commits_for_test(0) - before;
    assert!(rounds < 200, "{rounds} transactions for 200 syncs");
    for s in &stores {
        let rows = s.sql_for_test(&format!(
            "SELECT count(*) FROM {sch}.ojs_kv WHERE part = {} AND key LIKE 'free-%'",
            s.part()
        ));
        assert_eq!(rows[0].get::<_, i64>(0), 50, "partition {}", s.part());
    }
    eprintln!("200 concurrent syncs in {rounds} transactions ({in_flight} in flight)");
}

/// One node holding partitions 0 and 1 of two, committing pipelined (one round in flight).
struct Two {
    sch: String,
    a: PgNode,
    s0: PostgresStore,
    s1: PostgresStore,
    _dir: tempfile::TempDir,
}

fn two_partitions() -> Option<Two> {
    if skipped() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path(), "node-a", 2).unwrap();
    opts.commits_in_flight = super::super::IN_FLIGHT_PIPELINED;
    let sch = opts.schema.clone();
    let a = PgNode::open(&opts).unwrap();
    let s0 = a.take(0).unwrap().unwrap();
    let s1 = a.take(1).unwrap().unwrap();
    Some(Two {
        sch,
        a,
        s0,
        s1,
        _dir: dir,
    })
}

/// A sync's writes are taken when its round starts, not when it was asked for: what the
/// store wrote while its request waited goes in the same transaction, and the sync of that
/// later write then finds it durable without a transaction of its own.
#[test]
fn a_sync_commits_what_was_written_while_it_waited_for_its_round() {
    let Some(t) = two_partitions() else { return };
    let (sch, a, mut s0, mut s1) = (t.sch, t.a, t.s0, t.s1);
    let mut sync0 = s0.syncer().unwrap();
    // The next round waits until two syncs are queued.
    let before = a.commits_for_test(2);
    s0.write(put(b"asked-0000000000")).unwrap();
    let asked = s0.written();
    std::thread::scope(|sc| {
        let waiting = sc.spawn(move || {
            let r = sync0.sync_to(asked);
            (r, sync0)
        });
        assert!(eventually(Duration::from_secs(5), || a.queued_for_test() == 1));
        // Written after partition 0's sync was queued, before its round starts.
        s0.write(put(b"later-0000000000")).unwrap();
        let later = s0.written();
        assert!(later > asked);
        s1.commit(put(b"other-0000000000")).unwrap();
        let (r, mut sync0) = waiting.join().unwrap();
        r.unwrap();
        assert_eq!(a.commits_for_test(0) - before, 1, "one transaction");
        let rows = s0.sql_for_test(&format!(
            "SELECT count(*) FROM {sch}.ojs_kv WHERE part = 0 AND key IN ('\\x{}'::bytea, \
             '\\x{}'::bytea)",
            hex(b"asked-0000000000"),
            hex(b"later-0000000000")
        ));
        assert_eq!(
            rows[0].get::<_, i64>(0),
            2,
            "both writes committed in that round"
        );
        // The later write's own sync: durable already, no transaction.
        sync0.sync_to(later).unwrap();
        assert_eq!(a.commits_for_test(0) - before, 1);
        // A write after the round still needs one.
        s0.write(put(b"after-0000000000")).unwrap();
        sync0.sync_to(s0.written()).unwrap();
        assert_eq!(a.commits_for_test(0) - before, 2);
    });
}

/// A round takes what every store of the node has pending, also a store that asked for
/// no sync: its writes ride along, and its own sync of them then takes no transaction.
#[test]
fn a_round_takes_the_pending_writes_of_stores_that_did_not_ask() {
    let Some(t) = two_partitions() else { return };
    let (sch, a, mut s0, mut s1) = (t.sch, t.a, t.s0, t.s1);
    let before = a.commits_for_test(0);
    s1.write(put(b"rider-0000000000")).unwrap();
    let rider = s1.written();
    s0.commit(put(b"asker-0000000000")).unwrap();
    assert_eq!(a.commits_for_test(0) - before, 1);
    let rows = s0.sql_for_test(&format!(
        "SELECT part FROM {sch}.ojs_kv WHERE key IN ('\\x{}'::bytea, '\\x{}'::bytea) \
         ORDER BY part",
        hex(b"asker-0000000000"),
        hex(b"rider-0000000000")
    ));
    let parts: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(parts, vec![0, 1], "both partitions' writes in that round");
    s1.syncer().unwrap().sync_to(rider).unwrap();
    assert_eq!(
        a.commits_for_test(0) - before,
        1,
        "the rider's sync: no transaction"
    );
    // The rider's store serves its committed write from the table as before.
    assert!(s1.get(Space::Job, b"rider-0000000000").unwrap().is_some());
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// A round of three partitions' syncs, one of them taken over by another node meanwhile:
/// that one fails as fenced (and refuses writes from then on), the other two commit in the
/// same transaction.
#[test]
fn a_fenced_partition_fails_alone_in_its_round() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a", 4).unwrap();
    let sch = opts.schema.clone();
    let a = PgNode::open(&opts).unwrap();
    let mut stores: Vec<PostgresStore> = (0..3).map(|p| a.take(p).unwrap().unwrap()).collect();
    // Partition 1's lease is no longer renewed, and only the database's fence stands.
    stores[1].freeze_for_test(true, false);
    let b = PgNode::open(&options(dir.path(), "node-b", 4).unwrap()).unwrap();
    let mut b1 = None;
    assert!(eventually(TTL * 3, || {
        b1 = b.take(1).unwrap();
        b1.is_some()
    }));
    let before = a.commits_for_test(3);
    let outcomes = commit_together(&mut stores, b"round-000000000a");
    assert_eq!(a.commits_for_test(0) - before, 1, "one transaction");
    assert!(outcomes[0].is_ok(), "{:?}", outcomes[0]);
    assert!(
        matches!(outcomes[1], Err(StoreError::Fenced(_))),
        "{:?}",
        outcomes[1]
    );
    assert!(outcomes[2].is_ok(), "{:?}", outcomes[2]);
    let rows = stores[0].sql_for_test(&format!(
        "SELECT part FROM {sch}.ojs_kv WHERE key = '\\x{}'::bytea ORDER BY part",
        hex(b"round-000000000a")
    ));
    let parts: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(parts, vec![0, 2]);
    assert!(matches!(
        stores[1].commit(put(b"after-0000000000")),
        Err(StoreError::Fenced(_))
    ));
    stores[0].commit(put(b"after-0000000000")).unwrap();
    drop(b1);
}

/// A node's session that stops inside a transaction (the node frozen between two
/// statements of a commit) is ended by the server after a lease TTL, so the row locks it
/// held cannot keep other nodes from taking the node's partitions.
#[test]
fn a_session_silent_inside_a_transaction_is_ended_after_a_lease_ttl() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = PgNode::open(&options(dir.path(), "node-a", 4).unwrap()).unwrap();
    let ctx = a.core.ctx.clone();
    a.core.block_on(async move {
        let mut client = ctx.pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        let row = tx
            .query_one("SELECT current_setting('lock_timeout')", &[])
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, String>(0),
            "1s",
            "lock_timeout is the lease TTL"
        );
        tokio::time::sleep(TTL * 2).await;
        assert!(
            tx.query_one("SELECT 1", &[]).await.is_err(),
            "the server ended the silent transaction's session"
        );
    });
}

#[test]
fn session_settings_follow_the_urls_own() {
    let ttl = Duration::from_millis(2500);
    assert_eq!(
        session_options(None, ttl),
        "-c idle_in_transaction_session_timeout=2500 -c lock_timeout=2500"
    );
    assert_eq!(
        session_options(Some("-c search_path=x"), ttl),
        "-c search_path=x -c idle_in_transaction_session_timeout=2500 -c lock_timeout=2500"
    );
}
