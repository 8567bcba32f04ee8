//! One set of behaviour tests run against every store: what the engine relies on must not
//! depend on which store holds the data. Each check is a function taking an opener, and
//! each store runs all of them.
//!
//! PostgreSQL runs them when `OJSD_TEST_POSTGRES_URL` names a database (.ci/run starts a
//! throw-away server and sets it); each test's "directory" then stands for a schema of its
//! own, named in `<dir>/pg-schema`, so tests never see each other's rows. Unset, the
//! PostgreSQL tests print that they were skipped and pass.

use super::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const KINDS: [StoreKind; 2] = [StoreKind::Fjall, StoreKind::Sled];

fn open_kind(kind: StoreKind, dir: &Path) -> Box<dyn Store> {
    match kind {
        StoreKind::Fjall => Box::new(FjallStore::open(dir, 1 << 20).unwrap()),
        // sled lets go of its file lock from a background thread after a drop, which on a
        // loaded machine can come after a reopen's first try (seen in CI-like runs).
        StoreKind::Sled => {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                match SledStore::open(dir, 1 << 20) {
                    Ok(s) => break Box::new(s),
                    Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("sled: open {}: {e}", dir.display()),
                }
            }
        }
        StoreKind::Postgres => {
            let opts = pg_options(dir).expect("OJSD_TEST_POSTGRES_URL");
            Box::new(PostgresStore::open(&opts).unwrap())
        }
    }
}

/// The test database, if one is configured.
pub(crate) fn pg_url() -> Option<String> {
    std::env::var("OJSD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Options for the PostgreSQL store that `dir` stands for: a schema of its own (made up on
/// first use and kept in `<dir>/pg-schema`), node `test-node`, and a short wait for a lease.
pub(crate) fn pg_options(dir: &Path) -> Option<PostgresOptions> {
    let url = pg_url()?;
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("pg-schema");
    let schema = match std::fs::read_to_string(&file) {
        Ok(s) => s.trim().to_string(),
        Err(_) => {
            let s = format!("t_{:016x}", rand::random::<u64>());
            std::fs::write(&file, &s).unwrap();
            s
        }
    };
    let mut opts = PostgresOptions::new(&url, "test-node");
    opts.schema = schema;
    opts.acquire_wait = Duration::from_millis(500);
    Some(opts)
}

/// Run a check unless it needs a PostgreSQL server that is not configured.
fn run(kind: StoreKind, check: fn(StoreKind)) {
    if kind == StoreKind::Postgres && pg_url().is_none() {
        eprintln!("skipped: OJSD_TEST_POSTGRES_URL is not set (.ci/run sets it)");
        return;
    }
    check(kind)
}

fn all(s: &dyn Store, space: Space) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = vec![];
    s.scan(space, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    out
}

fn from(s: &dyn Store, space: Space, start: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    s.scan_from(space, start, &mut |k, _| {
        out.push(k.to_vec());
        true
    })
    .unwrap();
    out
}

fn kv(k: &[u8], v: &[u8]) -> (Vec<u8>, Vec<u8>) {
    (k.to_vec(), v.to_vec())
}

/// Reads, scans, bounds and floors: the same answers from every store, including at the
/// edges of a space (the spaces' prefixes sort c/ < e/ < j/ < m/ < w/ in sled's one tree).
fn reads_and_scans(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open_kind(kind, dir.path());

    // Empty.
    for space in Space::ALL {
        assert_eq!(all(s.as_ref(), space), vec![], "{kind}: empty {space:?}");
        assert_eq!(s.bounds(space).unwrap(), (None, None), "{kind}");
        assert_eq!(s.floor_key(space, b"zz").unwrap(), None, "{kind}");
        assert_eq!(s.get(space, b"a").unwrap(), None, "{kind}");
    }
    s.commit(Batch::default()).unwrap();

    // One record: it is both bounds.
    let mut b = Batch::default();
    b.put(Space::Event, b"5", b"five".to_vec());
    s.commit(b).unwrap();
    let five = Some(b"5".to_vec());
    assert_eq!(
        s.bounds(Space::Event).unwrap(),
        (five.clone(), five.clone())
    );

    // Records in every space, with neighbours on both sides of the event space.
    let mut b = Batch::default();
    for k in [b"1", b"3", b"7", b"9"] {
        b.put(Space::Event, k, k.to_vec());
    }
    b.put(Space::Cron, b"0", b"c".to_vec());
    b.put(Space::Cron, b"\xff\xff", b"c".to_vec());
    b.put(Space::Job, b"\x00", b"j".to_vec());
    b.put(Space::Job, b"\x00\x00", b"j".to_vec());
    b.put(Space::Meta, b"x", b"m".to_vec());
    b.put(Space::Workflow, b"w\x001", b"n".to_vec());
    s.commit(b).unwrap();

    let events = all(s.as_ref(), Space::Event);
    assert_eq!(
        events,
        vec![
            kv(b"1", b"1"),
            kv(b"3", b"3"),
            kv(b"5", b"five"),
            kv(b"7", b"7"),
            kv(b"9", b"9"),
        ],
        "{kind}: scan gives the space's records in key order, keys without prefix"
    );
    assert_eq!(
        all(s.as_ref(), Space::Cron),
        vec![kv(b"0", b"c"), kv(b"\xff\xff", b"c")],
        "{kind}"
    );
    assert_eq!(
        all(s.as_ref(), Space::Job),
        vec![kv(b"\x00", b"j"), kv(b"\x00\x00", b"j")],
        "{kind}"
    );

    // A scan stops when told to.
    let mut seen = 0;
    s.scan(Space::Event, &mut |_, _| {
        seen += 1;
        seen < 2
    })
    .unwrap();
    assert_eq!(seen, 2, "{kind}: the callback's false stops the scan");

    // scan_from: inclusive, stays in its space, stops when told.
    assert_eq!(
        from(s.as_ref(), Space::Event, b"5"),
        vec![b"5".to_vec(), b"7".to_vec(), b"9".to_vec()],
        "{kind}"
    );
    assert_eq!(
        from(s.as_ref(), Space::Event, b"4"),
        vec![b"5".to_vec(), b"7".to_vec(), b"9".to_vec()],
        "{kind}"
    );
    assert_eq!(
        from(s.as_ref(), Space::Event, b"99"),
        Vec::<Vec<u8>>::new(),
        "{kind}"
    );
    assert_eq!(from(s.as_ref(), Space::Event, b"").len(), 5, "{kind}");
    assert_eq!(
        from(s.as_ref(), Space::Cron, b"1"),
        vec![b"\xff\xff".to_vec()],
        "{kind}: the last cron record, and nothing of the event space above it"
    );
    let mut firsts = vec![];
    s.scan_from(Space::Event, b"3", &mut |k, v| {
        firsts.push(kv(k, v));
        false
    })
    .unwrap();
    assert_eq!(firsts, vec![kv(b"3", b"3")], "{kind}");

    // floor_key: the greatest key <= the one asked, never from another space.
    let floor = |k: &[u8]| s.floor_key(Space::Event, k).unwrap();
    assert_eq!(floor(b"5"), Some(b"5".to_vec()), "{kind}: equal");
    assert_eq!(floor(b"6"), Some(b"5".to_vec()), "{kind}: below");
    assert_eq!(floor(b"55"), Some(b"5".to_vec()), "{kind}: longer key");
    assert_eq!(floor(b"\xff"), Some(b"9".to_vec()), "{kind}: above all");
    assert_eq!(floor(b"0"), None, "{kind}: nothing below the first key");
    assert_eq!(floor(b""), None, "{kind}");
    assert_eq!(
        s.floor_key(Space::Job, b"\x00\x00\x00").unwrap(),
        Some(b"\x00\x00".to_vec()),
        "{kind}"
    );
    assert_eq!(
        s.floor_key(Space::Meta, b"a").unwrap(),
        None,
        "{kind}: nothing of the job space below the meta space"
    );
    assert_eq!(
        s.floor_key(Space::Workflow, b"\xff").unwrap(),
        Some(b"w\x001".to_vec()),
        "{kind}"
    );

    // bounds: first and last of the space alone.
    assert_eq!(
        s.bounds(Space::Event).unwrap(),
        (Some(b"1".to_vec()), Some(b"9".to_vec())),
        "{kind}"
    );
    assert_eq!(
        s.bounds(Space::Cron).unwrap(),
        (Some(b"0".to_vec()), Some(b"\xff\xff".to_vec())),
        "{kind}"
    );
    assert_eq!(
        s.bounds(Space::Meta).unwrap(),
        (Some(b"x".to_vec()), Some(b"x".to_vec())),
        "{kind}"
    );

    // Deletes: gone from get, scans, floors and bounds (an LSM keeps tombstones for them).
    let mut b = Batch::default();
    b.delete(Space::Event, b"1");
    b.delete(Space::Event, b"9");
    b.delete(Space::Event, b"5");
    b.delete(Space::Event, b"never there");
    s.commit(b).unwrap();
    assert_eq!(
        s.bounds(Space::Event).unwrap(),
        (Some(b"3".to_vec()), Some(b"7".to_vec())),
        "{kind}"
    );
    let floor = |k: &[u8]| s.floor_key(Space::Event, k).unwrap();
    assert_eq!(floor(b"6"), Some(b"3".to_vec()), "{kind}");
    assert_eq!(floor(b"2"), None, "{kind}");
    assert_eq!(s.get(Space::Event, b"5").unwrap(), None, "{kind}");
    assert_eq!(
        from(s.as_ref(), Space::Event, b""),
        vec![b"3".to_vec(), b"7".to_vec()],
        "{kind}"
    );
    assert!(s.size_on_disk().unwrap() > 0, "{kind}");
}

/// Ops on one key within a batch apply in order: the last one wins.
fn ops_in_a_batch_apply_in_order(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open_kind(kind, dir.path());
    let mut b = Batch::default();
    b.put(Space::Meta, b"old", b"1".to_vec());
    s.commit(b).unwrap();
    let mut b = Batch::default();
    b.put(Space::Workflow, b"put put", b"1".to_vec());
    b.put(Space::Workflow, b"put put", b"2".to_vec());
    b.put(Space::Workflow, b"put delete", b"1".to_vec());
    b.delete(Space::Workflow, b"put delete");
    b.delete(Space::Workflow, b"delete put");
    b.put(Space::Workflow, b"delete put", b"3".to_vec());
    b.delete(Space::Meta, b"old");
    b.put(Space::Meta, b"old", b"4".to_vec());
    b.delete(Space::Meta, b"old");
    s.commit(b).unwrap();
    let check = |s: &dyn Store| {
        assert_eq!(
            all(s, Space::Workflow),
            vec![kv(b"delete put", b"3"), kv(b"put put", b"2")],
            "{kind}"
        );
        assert_eq!(s.get(Space::Meta, b"old").unwrap(), None, "{kind}");
    };
    check(s.as_ref());
    // ... and the same after a reopen, from the store's files and journal.
    drop(s);
    check(open_kind(kind, dir.path()).as_ref());
}

/// What a commit wrote is there after the store is closed and opened again.
fn commits_survive_reopen(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let mut expect = BTreeMap::new();
    {
        let mut s = open_kind(kind, dir.path());
        for i in 0u32..200 {
            let mut b = Batch::default();
            b.put(Space::Job, &i.to_be_bytes(), vec![i as u8; 500]);
            b.put(Space::Event, &i.to_be_bytes(), vec![1; 100]);
            if i % 3 == 0 && i > 0 {
                b.delete(Space::Job, &(i - 1).to_be_bytes());
                expect.remove(&(i - 1));
            }
            expect.insert(i, vec![i as u8; 500]);
            s.commit(b).unwrap();
        }
    }
    let s = open_kind(kind, dir.path());
    let jobs = all(s.as_ref(), Space::Job);
    let want: Vec<_> = expect
        .iter()
        .map(|(k, v)| (k.to_be_bytes().to_vec(), v.clone()))
        .collect();
    assert_eq!(jobs, want, "{kind}");
    assert_eq!(all(s.as_ref(), Space::Event).len(), 200, "{kind}");
}

/// Batches that write several spaces at once, big enough to take several writes to the
/// file, in a child process killed with SIGKILL at a random moment: after reopening, every
/// batch is there whole or not at all, in every space.
fn a_killed_writer_leaves_whole_batches(kind: StoreKind) {
    killed_writer(kind, "commit");
}

/// The same with `write` and a `Syncer` on another thread (a pipelined commit): batches
/// are whole and in order, and every batch written before a sync that returned survives.
fn a_killed_pipelined_writer_keeps_every_synced_batch(kind: StoreKind) {
    killed_writer(kind, "write");
}

fn killed_writer(kind: StoreKind, mode: &str) {
    const CHILD_TEST: &str = "store::conformance::crash_child";
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{kind}:{mode}:{}", dir.path().display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Let it write for a while (it marks its start), then kill it mid-stream.
        let started = dir.path().join("started");
        let t0 = std::time::Instant::now();
        while !started.exists() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // A pipelined writer outruns its syncer (nothing bounds it as MAX_UNSYNCED bounds
        // the engine), and PostgreSQL's first sync of what piled up can take longer than
        // the pause below: kill it only once a sync went through.
        let synced = dir.path().join("synced");
        while mode == "write" && !synced.exists() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(150 + 37 * round));
        child.kill().unwrap();
        child.wait().unwrap();

        let s = open_kind(kind, &dir.path().join("db"));
        let jobs = all(s.as_ref(), Space::Job);
        let events = all(s.as_ref(), Space::Event);
        let workflows = all(s.as_ref(), Space::Workflow);
        let meta = s.get(Space::Meta, b"last").unwrap();
        assert!(!jobs.is_empty(), "{kind}: the child committed nothing");
        let n = jobs.len();
        let keys = |v: &[(Vec<u8>, Vec<u8>)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(&jobs),
            keys(&events),
            "{kind}: jobs and events of whole batches"
        );
        assert_eq!(keys(&jobs), keys(&workflows), "{kind}");
        let expect: Vec<Vec<u8>> = (0..n as u32).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(keys(&jobs), expect, "{kind}: batches 0..{n} and no gap");
        assert_eq!(
            meta,
            Some((n as u32 - 1).to_be_bytes().to_vec()),
            "{kind}: the meta record of the last whole batch"
        );
        for (k, v) in jobs.iter().chain(&events).chain(&workflows) {
            assert!(v.iter().all(|b| *b == k[3]), "{kind}: a torn value");
        }
        if let Ok(synced) = std::fs::read_to_string(dir.path().join("synced")) {
            let synced: usize = synced.trim().parse().unwrap();
            assert!(
                n >= synced,
                "{kind} {mode}: {synced} batches were synced, {n} survived"
            );
        }
    }
}

const CHILD_ENV: &str = "OJSD_STORE_CRASH_CHILD";

/// The writer of `a_killed_writer_leaves_whole_batches`: does nothing unless that test
/// started this process. Batch i puts key i in jobs, events and workflows (24 KiB each, so
/// a batch takes several writes) and `m/last` = i.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let (kind, mode, dir) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let kind = StoreKind::from_name(kind).unwrap();
    let dir = PathBuf::from(dir);
    let mut s = open_kind(kind, &dir.join("db"));
    // `write` mode: a syncer thread syncs whenever told how many batches were written, then
    // records that count (written to a temporary file and renamed, so it is never torn).
    let (tx, rx) = std::sync::mpsc::sync_channel::<u32>(1);
    if mode == "write" {
        let mut syncer = s.syncer().unwrap();
        let dir = dir.clone();
        std::thread::spawn(move || {
            for written in rx {
                syncer.sync().unwrap();
                std::fs::write(dir.join("synced.tmp"), written.to_string()).unwrap();
                std::fs::rename(dir.join("synced.tmp"), dir.join("synced")).unwrap();
            }
        });
    }
    std::fs::write(dir.join("started"), b"").unwrap();
    for i in 0u32.. {
        let key = i.to_be_bytes();
        let mut b = Batch::default();
        for space in [Space::Job, Space::Event, Space::Workflow] {
            b.put(space, &key, vec![key[3]; 24 * 1024]);
        }
        b.put(Space::Meta, b"last", key.to_vec());
        if mode == "write" {
            s.write(b).unwrap();
            // Written batches are read at once, before any sync.
            assert!(s.get(Space::Meta, b"last").unwrap() == Some(key.to_vec()));
            let _ = tx.try_send(i + 1);
        } else {
            s.commit(b).unwrap();
        }
    }
}

/// Another ojsd holding the directory is `Locked`, for each store; for PostgreSQL, another
/// node while the partition's lease is held is `Leased`, and gets it once the first lets go.
fn a_second_open_is_locked(kind: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    if kind == StoreKind::Postgres {
        let first_opts = pg_options(dir.path()).unwrap();
        let first = PostgresStore::open(&first_opts).unwrap();
        let mut other = first_opts.clone();
        other.node = "another-node".into();
        match PostgresStore::open(&other) {
            Err(StoreError::Leased { part: 0, owner }) => assert_eq!(owner, "test-node"),
            Err(e) => panic!("expected Leased, got {e:?}"),
            Ok(_) => panic!("a second node took a partition whose lease is held"),
        }
        let epoch = first.epoch();
        drop(first);
        let second = PostgresStore::open(&other).unwrap();
        assert_eq!(second.epoch(), epoch + 1, "a takeover moves the epoch on");
        return;
    }
    let _first = super::open(kind, dir.path(), 1 << 20).unwrap();
    match super::open(kind, dir.path(), 1 << 20) {
        Err(StoreError::Locked { dir: d }) => assert_eq!(d, dir.path()),
        Err(e) => panic!("{kind}: expected Locked, got {e:?}"),
        Ok(_) => panic!("{kind}: a second open of a locked dir succeeded"),
    }
}

/// The marker: written on first open, checked on every open, and a directory of the other
/// store (with or without a marker) refused before anything is written to it.
fn the_marker_names_the_store(kind: StoreKind) {
    let other = match kind {
        StoreKind::Fjall => StoreKind::Sled,
        StoreKind::Sled => StoreKind::Fjall,
        StoreKind::Postgres => return a_newer_schema_is_refused(),
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let mut s = super::open(kind, &data, 1 << 20).unwrap();
        let mut b = Batch::default();
        b.put(Space::Job, b"a", b"1".to_vec());
        s.commit(b).unwrap();
    }
    let marker = std::fs::read_to_string(data.join(MARKER_FILE)).unwrap();
    assert_eq!(marker, format!("{kind} 2\n"));
    assert_eq!(written_by(&data).unwrap(), Some(kind));

    let listing = || {
        let mut v: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    match super::open(other, &data, 1 << 20) {
        Err(e @ StoreError::WrongStore { .. }) => assert_eq!(
            e.to_string(),
            format!(
                "{} was written by the {kind} store; start with --store {kind} (or use an \
                 empty data dir)",
                data.display()
            )
        ),
        Err(e) => panic!("{kind}: expected WrongStore, got {e:?}"),
        Ok(_) => panic!("{kind}: opened with {other}"),
    }
    assert_eq!(listing(), before, "{kind}: the refused open wrote nothing");

    // Without the marker (a data dir from before it), the files still tell.
    std::fs::remove_file(data.join(MARKER_FILE)).unwrap();
    assert_eq!(written_by(&data).unwrap(), Some(kind));
    assert!(matches!(
        super::open(other, &data, 1 << 20),
        Err(StoreError::WrongStore { found, .. }) if found == kind
    ));
    // The right store opens it, keeps its data, and writes the marker back. (sled lets go
    // of its own file lock from a background thread after a drop, which on a loaded
    // machine can come after this open's first try: retry for a while.)
    let s = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match super::open(kind, &data, 1 << 20) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => panic!("{kind}: reopen: {e}"),
            }
        }
    };
    assert_eq!(s.get(Space::Job, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(
        std::fs::read_to_string(data.join(MARKER_FILE)).unwrap(),
        format!("{kind} 2\n")
    );
    drop(s);

    // The previous layout is read, and marked with the current one once opened.
    std::fs::write(data.join(MARKER_FILE), format!("{kind} 1\n")).unwrap();
    assert_eq!(written_by(&data).unwrap(), Some(kind));
    drop(super::open(kind, &data, 1 << 20).unwrap());
    assert_eq!(
        std::fs::read_to_string(data.join(MARKER_FILE)).unwrap(),
        format!("{kind} 2\n")
    );

    // A marker this build does not understand is refused by both stores.
    for text in [
        "redb 1\n",
        &format!("{kind} 3\n"),
        &format!("{kind} 0\n"),
        "",
        "fjall one\n",
    ] {
        std::fs::write(data.join(MARKER_FILE), text).unwrap();
        for k in KINDS {
            match super::open(k, &data, 1 << 20) {
                Err(StoreError::UnknownMarker { .. }) => {}
                Err(e) => panic!("marker {text:?} with {k}: expected UnknownMarker, got {e:?}"),
                Ok(_) => panic!("marker {text:?}: opened with {k}"),
            }
        }
    }
}

/// PostgreSQL's counterpart of the marker: `ojs_meta.schema_version`. Opening creates the
/// schema at this build's version; a later version is refused untouched; the store has no
/// data dir, and a data dir marked "postgres" is refused by the file stores' open.
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = pg_options(dir.path()).unwrap();
    let s = PostgresStore::open(&opts).unwrap();
    let version = |s: &PostgresStore| -> String {
        let rows = s.sql_for_test(&format!(
            "SELECT value FROM {}.ojs_meta WHERE key = 'schema_version'",
            opts.schema
        ));
        rows[0].get(0)
    };
    assert_eq!(version(&s), postgres_store_version().to_string());
    // A second open migrates nothing and keeps the rows.
    drop(s);
    let s = PostgresStore::open(&opts).unwrap();
    s.sql_for_test(&format!(
        "UPDATE {}.ojs_meta SET value = '99' WHERE key = 'schema_version'",
        opts.schema
    ));
    drop(s);
    match PostgresStore::open(&opts) {
        Err(StoreError::Backend(m)) => assert!(m.contains("version 99"), "{m}"),
        Err(e) => panic!("expected a refusal of version 99, got {e:?}"),
        Ok(_) => panic!("opened a schema of a newer ojsd"),
    }
    assert!(super::open(StoreKind::Postgres, dir.path(), 1 << 20).is_err());
    std::fs::write(dir.path().join(MARKER_FILE), "postgres 2\n").unwrap();
    assert!(matches!(
        written_by(dir.path()),
        Err(StoreError::UnknownMarker { .. })
    ));
}

fn postgres_store_version() -> usize {
    super::postgres_schema::SCHEMA_VERSION
}

/// Every check above, as one test per store.
macro_rules! conformance {
    ($kind:ident: $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                super::run(StoreKind::$kind, super::$check);
            }
        )*
    };
}

macro_rules! each_check {
    ($kind:ident) => {
        conformance!(
            $kind: reads_and_scans,
            ops_in_a_batch_apply_in_order,
            commits_survive_reopen,
            a_killed_writer_leaves_whole_batches,
            a_killed_pipelined_writer_keeps_every_synced_batch,
            a_second_open_is_locked,
            the_marker_names_the_store,
        );
    };
}

mod fjall {
    use super::StoreKind;
    each_check!(Fjall);
}

mod sled {
    use super::StoreKind;
    each_check!(Sled);
}

mod postgres {
    use super::StoreKind;
    each_check!(Postgres);
}

#[test]
fn a_new_dir_gets_the_default_store_and_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(written_by(dir.path()).unwrap(), None);
    drop(super::open(StoreKind::DEFAULT, dir.path(), 1 << 20).unwrap());
    assert_eq!(written_by(dir.path()).unwrap(), Some(StoreKind::Fjall));
}
