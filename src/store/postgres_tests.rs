//! Tests of what only the PostgreSQL store has: the lease and its fence, and reads that
//! merge the overlay over pages of the table. They need `OJSD_TEST_POSTGRES_URL` (.ci/run
//! sets it) and are skipped with a notice without it. The store's behaviour as a `Store`
//! is checked by the conformance suite (conformance.rs), which runs against it too.

use super::*;
use crate::store::conformance::pg_options;
use crate::store::postgres_schema::SCHEMA_VERSION;
use std::path::Path;

fn options(dir: &Path, node: &str) -> Option<PostgresOptions> {
    let mut o = pg_options(dir)?;
    o.node = node.into();
    o.lease_ttl = Duration::from_millis(1000);
    o.renew_every = Duration::from_millis(200);
    o.acquire_wait = Duration::ZERO;
    Some(o)
}

fn skipped() -> bool {
    let skip = crate::store::conformance::pg_url().is_none();
    if skip {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
    }
    skip
}

fn put(key: &str) -> Batch {
    let mut b = Batch::default();
    b.put(Space::Job, key.as_bytes(), key.as_bytes().to_vec());
    b
}

fn rows(s: &PostgresStore, schema: &str) -> Vec<String> {
    s.sql_for_test(&format!(
        "SELECT convert_from(key, 'UTF8') FROM {schema}.ojs_kv ORDER BY key"
    ))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn is_fenced<T>(r: StoreResult<T>) -> bool {
    matches!(r, Err(StoreError::Fenced(_)))
}

fn is_unavailable<T>(r: StoreResult<T>) -> bool {
    matches!(r, Err(StoreError::Unavailable(_)))
}

/// A frozen owner (no renewals, and a clock that did not run meanwhile, as in a paused VM)
/// loses its partition to a node that takes it over once the lease expired in database
/// time; its next sync is refused by the fence in the commit's own transaction, and
/// nothing it wrote after the takeover reaches the table.
#[test]
fn a_frozen_owner_is_fenced_once_another_node_took_its_partition() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a_opts = options(dir.path(), "node-a").unwrap();
    let mut a = PostgresStore::open(&a_opts).unwrap();
    let mut a_syncer = a.syncer().unwrap();
    a.commit(put("before")).unwrap();
    // While A's lease holds, B cannot take the partition.
    let b_opts = options(dir.path(), "node-b").unwrap();
    assert!(matches!(
        PostgresStore::open(&b_opts),
        Err(StoreError::Leased { part: 0, ref owner }) if owner == "node-a"
    ));

    // A freezes: no renewals, and its own clock check off, so that only the database's
    // fence stands between it and the table.
    a.freeze_for_test(true, false);
    a.write(put("written-while-frozen")).unwrap();
    std::thread::sleep(a_opts.lease_ttl + Duration::from_millis(300));
    let b = PostgresStore::open(&b_opts).unwrap();
    assert_eq!(b.epoch(), a.epoch() + 1, "the takeover moved the epoch on");

    // A wakes up and syncs what it wrote: refused, and refused for good.
    assert!(is_fenced(a_syncer.sync()), "A's sync after the takeover");
    assert!(is_fenced(a.commit(put("after"))), "A's next commit");
    assert!(is_fenced(a.write(put("later"))), "A's next write");
    assert_eq!(rows(&b, &a_opts.schema), vec!["before".to_string()]);
    assert_eq!(b.get(Space::Job, b"written-while-frozen").unwrap(), None);

    // B writes under its epoch.
    let mut b = b;
    b.commit(put("by-b")).unwrap();
    assert_eq!(rows(&b, &a_opts.schema), vec!["before", "by-b"]);
}

/// A frozen owner whose own monotonic clock did run stops committing before its lease can
/// have expired in the database (a margin of a fifth of the TTL), without asking the
/// database: its writes stay pending (`Unavailable`), readable but not in the table. A
/// renewal that gets through again at the same epoch (no other node took the partition)
/// lets them commit, in order, with the next sync.
#[test]
fn an_owner_stops_committing_when_its_lease_lapses_on_its_own_clock() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let mut a = PostgresStore::open(&opts).unwrap();
    a.freeze_for_test(true, true);
    a.commit(put("early")).unwrap();
    std::thread::sleep(opts.lease_ttl * 4 / 5 + Duration::from_millis(50));
    assert!(is_unavailable(a.commit(put("late"))));
    assert!(is_unavailable(a.ready()));
    assert_eq!(a.get(Space::Job, b"late").unwrap(), Some(b"late".to_vec()));
    assert_eq!(rows(&a, &opts.schema), vec!["early".to_string()]);
    a.freeze_for_test(false, true);
    std::thread::sleep(opts.renew_every * 3);
    a.ready().unwrap();
    a.commit(put("later")).unwrap();
    assert_eq!(rows(&a, &opts.schema), vec!["early", "late", "later"]);
}

/// A lapse while the store has nothing to commit: once a renewal gets through, `ready` says
/// so, and keeps saying so (it once answered the lapse's old error between its retries, as
/// no commit came to clear it: an idle partition's engine then refused commands on and
/// off until its next write).
#[test]
fn an_idle_store_is_ready_for_good_once_its_lease_is_renewed() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let a = PostgresStore::open(&opts).unwrap();
    a.freeze_for_test(true, true);
    std::thread::sleep(opts.lease_ttl * 4 / 5 + Duration::from_millis(50));
    assert!(is_unavailable(a.ready()));
    a.freeze_for_test(false, true);
    std::thread::sleep(opts.renew_every * 3);
    for _ in 0..3 {
        a.ready().unwrap();
    }
}

/// The same lapse, but another node takes the partition meanwhile: the owner's renewal
/// finds it taken, its store is fenced for good, and what it had pending never lands.
#[test]
fn a_lapsed_owner_whose_partition_was_taken_is_fenced() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let mut a = PostgresStore::open(&opts).unwrap();
    a.freeze_for_test(true, true);
    a.commit(put("early")).unwrap();
    std::thread::sleep(opts.lease_ttl + Duration::from_millis(300));
    assert!(is_unavailable(a.commit(put("pending"))));
    let b = PostgresStore::open(&options(dir.path(), "node-b").unwrap()).unwrap();
    a.freeze_for_test(false, true);
    std::thread::sleep(opts.renew_every * 3);
    assert!(is_fenced(a.ready()));
    assert!(is_fenced(a.syncer().unwrap().sync()));
    assert!(is_fenced(a.write(put("refused"))));
    assert_eq!(rows(&b, &opts.schema), vec!["early".to_string()]);
}

/// The holder prunes `ojs_nodes` rows whose heartbeat is older than
/// `PRUNE_AFTER_TTLS` leases, and keeps the others (a node gone a short while is still
/// listed, as `gone`).
#[test]
fn the_holder_forgets_nodes_gone_for_long() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let a = PostgresStore::open(&opts).unwrap();
    let s = &opts.schema;
    a.sql_for_test(&format!(
        "INSERT INTO {s}.ojs_nodes (node, client_addr, heartbeat_at) VALUES \
         ('long-gone', '10.0.0.1:7419', now() - interval '1 hour'), \
         ('just-gone', '10.0.0.2:7419', now() - interval '3 seconds'), \
         ('never-beat', NULL, NULL)"
    ));
    std::thread::sleep(opts.renew_every * 3);
    let nodes: Vec<String> = a
        .sql_for_test(&format!("SELECT node FROM {s}.ojs_nodes ORDER BY node"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(nodes, vec!["just-gone", "node-a"]);
    // Its own address, once announced, is what it registers from then on.
    a.announce("127.0.0.1:27599");
    std::thread::sleep(opts.renew_every * 2);
    let addr: Vec<Option<String>> = a
        .sql_for_test(&format!(
            "SELECT client_addr FROM {s}.ojs_nodes WHERE node = 'node-a'"
        ))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(addr, vec![Some("127.0.0.1:27599".to_string())]);
}

/// Schema version 2 gives `ojs_nodes` a `client_addr` column and keeps `peer_addr` for the
/// peer listener: a version-1 schema's client addresses move over when a node of this
/// build opens it, and the node registers both of its addresses.
#[test]
fn version_1_nodes_get_their_client_address_moved_and_peer_addresses_register() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path(), "node-a").unwrap();
    let s = opts.schema.clone();
    let a = PostgresStore::open(&opts).unwrap();
    // Back to version 1's layout, with a node registered as version 1 did it.
    a.sql_for_test(&format!(
        "ALTER TABLE {s}.ojs_nodes DROP COLUMN client_addr"
    ));
    a.sql_for_test(&format!(
        "UPDATE {s}.ojs_meta SET value = '1' WHERE key = 'schema_version'"
    ));
    a.sql_for_test(&format!(
        "INSERT INTO {s}.ojs_nodes (node, peer_addr, heartbeat_at) \
         VALUES ('old', '10.0.0.9:7419', now())"
    ));
    drop(a);
    opts.addr = Some("127.0.0.1:7419".into());
    opts.peer_addr = Some("127.0.0.1:7500".into());
    let b = PostgresStore::open(&opts).unwrap();
    let rows: Vec<(String, Option<String>, Option<String>)> = b
        .sql_for_test(&format!(
            "SELECT node, client_addr, peer_addr FROM {s}.ojs_nodes ORDER BY node"
        ))
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "node-a".to_string(),
                Some("127.0.0.1:7419".to_string()),
                Some("127.0.0.1:7500".to_string())
            ),
            ("old".to_string(), Some("10.0.0.9:7419".to_string()), None),
        ]
    );
    let v: Vec<String> = b
        .sql_for_test(&format!(
            "SELECT value FROM {s}.ojs_meta WHERE key = 'schema_version'"
        ))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(v, vec![SCHEMA_VERSION.to_string()]);
    assert_eq!(SCHEMA_VERSION, 4);
    // Version 4: the job-key index leaves the state records out; pages keep room for HOT
    // updates.
    let schema = s.trim_matches('"');
    let def: Vec<String> = b
        .sql_for_test(&format!(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = '{schema}' \
             AND indexname = 'ojs_kv_job_key'"
        ))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(def.len(), 1, "{def:?}");
    assert!(def[0].contains("octet_length(key) = 16"), "{def:?}");
    let opts: Vec<Option<Vec<String>>> = b
        .sql_for_test(&format!(
            "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{schema}' AND c.relname = 'ojs_kv'"
        ))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(opts, vec![Some(vec!["fillfactor=80".to_string()])]);
}

/// Renewals keep the lease: past several TTLs the owner still commits, and another node is
/// still refused. A renewal that finds the epoch moved on (an operator forced it, or a
/// takeover) stops the owner's writes.
#[test]
fn renewals_keep_the_lease_and_a_lost_renewal_fences() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let mut a = PostgresStore::open(&opts).unwrap();
    std::thread::sleep(opts.lease_ttl * 5 / 2);
    a.commit(put("still-mine")).unwrap();
    assert!(matches!(
        PostgresStore::open(&options(dir.path(), "node-b").unwrap()),
        Err(StoreError::Leased { .. })
    ));
    a.sql_for_test(&format!(
        "UPDATE {}.ojs_partitions SET epoch = epoch + 1 WHERE part = 0",
        opts.schema
    ));
    std::thread::sleep(opts.renew_every * 3);
    assert!(is_fenced(a.write(put("refused"))));
    assert_eq!(rows(&a, &opts.schema), vec!["still-mine".to_string()]);
}

/// Reads merge written-but-unsynced batches over more than one page of the table, in both
/// directions, and agree with a model; after the sync the table alone gives the same. The
/// batches are `still_pending` until the sync's round takes them.
#[test]
fn reads_merge_the_overlay_over_pages_of_the_table() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-a").unwrap();
    let mut s = PostgresStore::open(&opts).unwrap();
    let mut syncer = s.syncer().unwrap();
    let mut model = BTreeMap::new();
    let key = |i: u32| format!("k{i:05}").into_bytes();
    let n = PAGE_ROWS as u32 * 3 + 17;
    let mut b = Batch::default();
    for i in (0..n).map(|i| i * 2) {
        b.put(Space::Event, &key(i), vec![1]);
        model.insert(key(i), vec![1]);
    }
    b.put(Space::Meta, b"neighbour", vec![9]);
    s.commit(b).unwrap();
    // Unsynced: delete a whole page's worth in the middle and the first key, add odd keys
    // between, overwrite some; a second batch undoes part of the first.
    let mut b = Batch::default();
    for i in (0..n).map(|i| i * 2) {
        if i == 0 || (300..700).contains(&i) {
            b.delete(Space::Event, &key(i));
            model.remove(&key(i));
        } else if i % 10 == 0 {
            b.put(Space::Event, &key(i), vec![2]);
            model.insert(key(i), vec![2]);
        }
        if i % 6 == 0 {
            b.put(Space::Event, &key(i + 1), vec![3]);
            model.insert(key(i + 1), vec![3]);
        }
    }
    s.write(b).unwrap();
    let first = s.written();
    assert!(s.still_pending(first), "held until a round takes it");
    let mut b = Batch::default();
    b.put(Space::Event, &key(400), vec![4]);
    model.insert(key(400), vec![4]);
    b.delete(Space::Event, &key(n * 2 - 2));
    model.remove(&key(n * 2 - 2));
    s.write(b).unwrap();
    let second = s.written();
    assert!(second > first && s.still_pending(first) && s.still_pending(second));
    assert!(!s.still_pending(second + 1), "not written yet");

    let check = |s: &PostgresStore, when: &str| {
        let mut all = vec![];
        s.scan(Space::Event, &mut |k, v| {
            all.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert!(
            all == want,
            "{when}: scan ({} vs {} records)",
            all.len(),
            want.len()
        );
        for probe in [0, 1, 299, 300, 401, 650, 699, 700, 1000, n * 2] {
            let p = key(probe);
            let mut from = vec![];
            s.scan_from(Space::Event, &p, &mut |k, _| {
                from.push(k.to_vec());
                true
            })
            .unwrap();
            let want: Vec<_> = model.range(p.clone()..).map(|(k, _)| k.clone()).collect();
            assert!(from == want, "{when}: scan_from {probe}");
            let floor = model
                .range(..=p.clone())
                .next_back()
                .map(|(k, _)| k.clone());
            assert_eq!(
                s.floor_key(Space::Event, &p).unwrap(),
                floor,
                "{when}: floor {probe}"
            );
            assert_eq!(
                s.get(Space::Event, &p).unwrap(),
                model.get(&p).cloned(),
                "{when}: get {probe}"
            );
        }
        let bounds = (
            model.keys().next().cloned(),
            model.keys().next_back().cloned(),
        );
        assert_eq!(s.bounds(Space::Event).unwrap(), bounds, "{when}");
        assert_eq!(s.get(Space::Meta, b"neighbour").unwrap(), Some(vec![9]));
    };
    check(&s, "before the sync");
    syncer.sync().unwrap();
    assert!(
        !s.still_pending(first) && !s.still_pending(second),
        "taken and committed"
    );
    assert!(s
        .shared
        .overlay
        .read()
        .unwrap()
        .spaces
        .iter()
        .all(|m| m.is_empty()));
    check(&s, "after the sync");
    drop(s);
    let s = PostgresStore::open(&opts).unwrap();
    check(&s, "after a reopen");
}

/// Nodes starting at once on a new schema: the migration runs once (under its advisory
/// lock, no "already exists" error for anyone), exactly one node gets the partition, and
/// the others are told who holds it.
#[test]
fn nodes_starting_at_once_migrate_once_and_one_takes_the_partition() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let opened: Vec<_> = (0..4)
        .map(|i| {
            let opts = options(dir.path(), &format!("node-{i}")).unwrap();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                PostgresStore::open(&opts)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let owners: Vec<_> = opened.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(owners.len(), 1, "one owner");
    for r in &opened {
        match r {
            Ok(s) => assert_eq!(s.epoch(), 1),
            Err(StoreError::Leased { part: 0, owner }) => assert!(owner.starts_with("node-")),
            Err(e) => panic!("a node starting at once failed: {e}"),
        }
    }
    let s = opened.into_iter().find_map(Result::ok).unwrap();
    let schema = pg_options(dir.path()).unwrap().schema;
    let meta = s.sql_for_test(&format!(
        "SELECT key, value FROM {schema}.ojs_meta ORDER BY key"
    ));
    let meta: Vec<(String, String)> = meta.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        meta,
        vec![
            ("partitions".to_string(), "1".to_string()),
            ("schema_version".to_string(), SCHEMA_VERSION.to_string()),
        ]
    );
}

/// The read cache answers committed records without PostgreSQL, and stays coherent: a row
/// changed behind the store's back (which the fenced lease rules out in production) is not
/// seen while cached, a committed delete drops the key, and a new value is written through.
/// With the cache off, every read goes to the table.
#[test]
fn the_read_cache_serves_committed_records_and_follows_commits() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), "node-cache").unwrap();
    let mut s = PostgresStore::open(&opts).unwrap();
    let tamper = |s: &PostgresStore| {
        s.sql_for_test(&format!(
            "UPDATE {}.ojs_kv SET value = 'tampered' WHERE key = 'k'",
            opts.schema
        ));
    };
    s.commit(put("k")).unwrap();
    tamper(&s);
    assert_eq!(
        s.get(Space::Job, b"k").unwrap().as_deref(),
        Some(&b"k"[..]),
        "answered from the cache (written through by the commit)"
    );
    let mut del = Batch::default();
    del.delete(Space::Job, b"k");
    s.commit(del).unwrap();
    assert_eq!(s.get(Space::Job, b"k").unwrap(), None, "a delete drops it");
    let mut b = Batch::default();
    b.put(Space::Job, b"k", b"v2".to_vec());
    s.commit(b).unwrap();
    assert_eq!(
        s.get(Space::Job, b"k").unwrap().as_deref(),
        Some(&b"v2"[..])
    );
    // A miss fills it too: a record no commit of this store wrote.
    s.sql_for_test(&format!(
        "INSERT INTO {}.ojs_kv VALUES (0, 0, 'other', 'o1')",
        opts.schema
    ));
    assert_eq!(
        s.get(Space::Job, b"other").unwrap().as_deref(),
        Some(&b"o1"[..])
    );
    s.sql_for_test(&format!(
        "UPDATE {}.ojs_kv SET value = 'o2' WHERE key = 'other'",
        opts.schema
    ));
    assert_eq!(
        s.get(Space::Job, b"other").unwrap().as_deref(),
        Some(&b"o1"[..])
    );
    drop(s);

    let mut off = opts.clone();
    off.read_cache_bytes = 0;
    let mut s = PostgresStore::open(&off).unwrap();
    s.commit(put("k")).unwrap();
    tamper(&s);
    assert_eq!(
        s.get(Space::Job, b"k").unwrap().as_deref(),
        Some(&b"tampered"[..]),
        "without the cache the table answers"
    );
}
