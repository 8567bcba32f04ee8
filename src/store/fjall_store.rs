//! The fjall implementation of `Store`: ojsd's default store.
//!
//! # Layout
//!
//! One fjall [`Database`] per data directory, with one keyspace (an LSM tree of its own)
//! per [`Space`]: `jobs`, `meta`, `events`, `cron`, `workflows`. A key is stored without
//! its space prefix. Separate trees let each be maintained on its own: the event log, which
//! only grows at its end and is pruned from its start by range, never makes the jobs tree
//! compact, and the jobs tree's churn (every job is written at PUSH, FETCH and ACK and
//! deleted after retention) does not slow scans of the small trees.
//!
//! # Durability
//!
//! fjall writes every change to a journal (write-ahead log, `*.jnl` in the data dir) and
//! applies it to the keyspaces' in-memory memtables; full memtables are flushed to sorted
//! table files in the background, and a journal is deleted once every keyspace has flushed
//! what it holds. A commit here is one [`fjall::OwnedWriteBatch`] over all the spaces it
//! touches, with durability [`PersistMode::SyncAll`]: `WriteBatch::commit` (fjall 3.1,
//! `src/batch/mod.rs`) takes the journal lock, writes the whole batch as one journal entry
//! framed by a start marker (item count, sequence number) and an end marker (xxh3 checksum),
//! flushes the journal's write buffer and calls `fsync` on the journal file (`Writer::
//! persist`, `src/journal/writer.rs`), and only then inserts the items into the memtables
//! and publishes the batch to readers. So `commit` returns only once the batch is on disk,
//! and the engine sends replies only after that. A crash mid-write leaves a batch without a
//! valid end marker at the journal's tail, which recovery discards whole (fjall's only
//! recovery mode, "tolerate corrupt tail"): a batch is all or nothing. Journal rotation
//! fsyncs the old journal, preallocates and fsyncs the new one and fsyncs the directory;
//! table files are fsynced before the version that names them is written.
//!
//! Reads go through a snapshot, so a reader never sees half of a batch that is being
//! applied (fjall's plain keyspace reads would read at the newest sequence number).
//!
//! # Limits, and what they mean for ojsd
//!
//! - **Journal size before flush.** Data lives in the journal until its memtable is
//!   flushed, and a journal file is deleted only when every keyspace has flushed what it
//!   holds. The active journal is sealed at ~64 MB; past [`JOURNAL_MAX_BYTES`] of sealed
//!   journals (64 MiB here, fjall's minimum; its default is 512 MiB) fjall flushes the
//!   keyspaces that pin the oldest one (the rarely written ones, like `meta` and `cron`).
//!   Memtables are [`BIG_MEMTABLE_BYTES`] for jobs and events, [`SMALL_MEMTABLE_BYTES`]
//!   for the rest. So up to ~130 MB of journal sit on disk even when every job has been
//!   deleted (bench/RESULTS.md, round 4: 40–140 MB in a delete-churn run), and opening the
//!   store replays them into memtables: 0.2–1.1 s in the floor runs, part of every restart.
//!   Journal files are preallocated to 64 MiB; [`Store::size_on_disk`] counts allocated
//!   blocks (what `du` shows), not that length.
//! - **Write stalls.** When flushing or compaction falls behind, a commit waits: with 20
//!   or more level-0 runs in a keyspace fjall spins a little per commit, at 30 it sleeps in
//!   10 ms steps until compaction catches up, and with 4 sealed memtables waiting to be
//!   flushed it sleeps in 100 ms steps (`Keyspace::local_backpressure`). The engine thread
//!   is blocked meanwhile, so a sustained write rate above what the two background workers
//!   can flush and compact shows up as commit latency (and backpressure to clients), not
//!   as unbounded memory.
//! - **Tombstones under churn.** A delete writes a tombstone; the space is reclaimed only
//!   when compaction merges the tombstone with the value below it and then drops it at the
//!   last level. Until then deleted jobs and pruned events still take disk, and scans
//!   step over their tombstones (the rebuild at start scans the jobs tree). Reads that
//!   seek to a key (get, `scan_from`, `floor_key`) are not slowed by tombstones below it.
//! - **Memory.** The block cache is bounded by `--cache-mb`; memtables add their sizes
//!   above per keyspace, and up to four sealed ones per keyspace wait for the background
//!   flush before writes halt (so bursts are bounded too). Values of any
//!   size go through the journal and the trees (no key-value separation): a large job is
//!   rewritten by compaction like a small one.
//!
//! # Copying a live data directory
//!
//! A copy of the directory taken while ojsd runs is not a backup: the journal, the table
//! files and each tree's version file change independently (compaction deletes tables
//! that a version the copy did not catch still names). Stop ojsd (SIGTERM; a commit in
//! progress finishes and fjall fsyncs its journal on close) and copy the whole directory,
//! or copy a filesystem snapshot (LVM, ZFS, btrfs) taken in one instant, which recovers
//! like a crash does. The `lock` file is released when the process ends.

use super::{
    allocated_bytes, ensure_dir, lock_file, sync_dir, Batch, Bounds, Compactor, Op, Space, Store,
    StoreError, StoreResult, Syncer, MARKER_FILE,
};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use std::path::{Path, PathBuf};

/// Most bytes of sealed journals kept before fjall flushes the keyspaces that pin the
/// oldest one (fjall's minimum: it bounds the disk and the replay at start).
pub const JOURNAL_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Memtable size of the busy keyspaces (jobs, events).
pub const BIG_MEMTABLE_BYTES: u64 = 32 * 1024 * 1024;
/// Memtable size of the others (meta, cron, workflows).
pub const SMALL_MEMTABLE_BYTES: u64 = 8 * 1024 * 1024;

pub struct FjallStore {
    db: Database,
    dir: PathBuf,
    /// In the order of [`Space::ALL`].
    spaces: Vec<Keyspace>,
}

fn keyspace_name(space: Space) -> &'static str {
    match space {
        Space::Job => "jobs",
        Space::Meta => "meta",
        Space::Event => "events",
        Space::Cron => "cron",
        Space::Workflow => "workflows",
        Space::Outbox => "outbox",
    }
}

fn err(e: fjall::Error) -> StoreError {
    use fjall::Error as F;
    match e {
        F::Io(e) => StoreError::Io(e),
        F::Storage(fjall::LsmError::Io(e)) => StoreError::Io(e),
        F::Storage(e) => StoreError::Corrupt(format!("fjall: {e:?}")),
        F::JournalRecovery(e) => StoreError::Corrupt(format!("fjall journal: {e:?}")),
        F::Decompress(_) | F::InvalidTrailer | F::InvalidTag(_) | F::Unrecoverable => {
            StoreError::Corrupt(format!("fjall: {e:?}"))
        }
        F::InvalidVersion(v) => StoreError::Backend(format!(
            "fjall: the data dir has a database format this fjall cannot read ({v:?})"
        )),
        F::Poisoned => StoreError::Backend(
            "fjall: an earlier write or sync failed; no write is accepted until ojsd restarts"
                .into(),
        ),
        e => StoreError::Backend(format!("fjall: {e:?}")),
    }
}

/// What fjall 3's `Database::create_new` (`src/db.rs`) creates before its `version` file is
/// durable, in this order: `lock`, the empty `keyspaces/`, the journal `0.jnl` (zeros,
/// preallocated), then `version` (4 bytes, `FJL` and the format), fsynced, then both
/// directories fsynced. Only after that does it create a tree or accept a write, and ojsd
/// writes its marker only after that again. `ojsd-store.tmp` is a marker being written.
const SETUP_FILES: [&str; 5] = ["lock", "keyspaces", "0.jnl", "version", "ojsd-store.tmp"];

/// Why `dir`, which has no `ojsd-store` marker, is what a fjall set-up cut short leaves,
/// naming what it holds; `None` when it is anything else (empty, a complete database, or
/// files this check does not account for, which are left to fjall to open or refuse).
///
/// A power cut in the first milliseconds of a new data dir can leave `0.jnl` and `lock`
/// without `version`, or `version` empty or zeroed (its data not yet synced): fjall then
/// refuses the dir (`create_new` finds `0.jnl` and fails with "File exists"; `recover` reads
/// no format in `version`). Such a dir provably holds no write: `version` is fsynced before
/// anything else happens, so a dir whose `version` is not whole never got past
/// `create_new`, and nothing beyond the files it makes (with `keyspaces/` still empty) is
/// there. A `version` that names any fjall format, or any other file, and the dir is not
/// this case.
pub(super) fn unfinished_setup(dir: &Path) -> StoreResult<Option<String>> {
    if dir.join(MARKER_FILE).try_exists()? {
        return Ok(None);
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| SETUP_FILES.contains(n)) else {
            return Ok(None);
        };
        let kind = entry.file_type()?;
        let expected_dir = name == "keyspaces";
        if kind.is_dir() != expected_dir || (!expected_dir && !kind.is_file()) {
            return Ok(None);
        }
        if expected_dir && std::fs::read_dir(entry.path())?.next().is_some() {
            return Ok(None);
        }
        names.push(name.to_string());
    }
    if !names.iter().any(|n| n == "0.jnl" || n == "version") {
        // Empty, or only a lock or an empty `keyspaces/`: fjall sets it up as it is.
        return Ok(None);
    }
    let version = match std::fs::read(dir.join("version")) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    // fjall's `FormatVersion::parse_file_header`: `FJL` then a format byte (1, 2 or 3).
    if version.len() >= 4 && &version[..3] == b"FJL" && (1..=3).contains(&version[3]) {
        return Ok(None);
    }
    names.sort();
    let why = if names.iter().any(|n| n == "version") {
        format!(
            "its version file holds {} bytes and no format",
            version.len()
        )
    } else {
        "it has no version file".to_string()
    };
    Ok(Some(format!("{}: {why}", names.join(", "))))
}

/// Start afresh a fjall set-up that a power cut interrupted (see [`unfinished_setup`]):
/// with the lock held, remove what it left (the lock file stays, held) and fsync the dir,
/// so that fjall creates the database anew. Anything else is left as it is.
pub(super) fn restart_unfinished_setup(dir: &Path) -> StoreResult<()> {
    if unfinished_setup(dir)?.is_none() {
        return Ok(());
    }
    let _lock = lock_file(dir, &dir.join("lock"))?;
    // Decided again under the lock: another ojsd may have finished the set-up meanwhile.
    let Some(what) = unfinished_setup(dir)? else {
        return Ok(());
    };
    tracing::warn!(
        dir = %dir.display(),
        found = %what,
        "the data dir holds an unfinished fjall set-up (a power cut while it was created) \
         and no data; starting it afresh"
    );
    for name in SETUP_FILES.iter().filter(|n| **n != "lock") {
        let path = dir.join(name);
        let removed = if *name == "keyspaces" {
            std::fs::remove_dir(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    sync_dir(dir)
}

impl FjallStore {
    /// Open or create the database in `dir` (prefer [`super::open`], which also checks and
    /// writes the data dir's store marker). Another process holding it is `Locked`.
    pub fn open(dir: &Path, cache_bytes: u64) -> StoreResult<FjallStore> {
        ensure_dir(dir)?;
        let db = Database::builder(dir)
            .cache_size(cache_bytes)
            .max_journaling_size(JOURNAL_MAX_BYTES)
            .open()
            .map_err(|e| match e {
                // fjall takes an exclusive `flock` on `<dir>/lock` (`File::try_lock`, retried
                // three times 100 ms apart) and returns `Error::Locked` when it stays taken.
                fjall::Error::Locked => StoreError::Locked {
                    dir: dir.to_path_buf(),
                },
                e => err(e),
            })?;
        let mut spaces = Vec::with_capacity(Space::ALL.len());
        for space in Space::ALL {
            let memtable = match space {
                Space::Job | Space::Event => BIG_MEMTABLE_BYTES,
                _ => SMALL_MEMTABLE_BYTES,
            };
            let ks = db
                .keyspace(keyspace_name(space), || {
                    KeyspaceCreateOptions::default()
                        .max_memtable_size(memtable)
                        // Point reads are of keys the engine knows exist, so the last
                        // level needs no Bloom filter (fjall's advice for that case).
                        .expect_point_read_hits(true)
                })
                .map_err(err)?;
            spaces.push(ks);
        }
        // Keyspace creation is journalled by fjall; make a new database's layout durable now.
        db.persist(PersistMode::SyncAll).map_err(err)?;
        Ok(FjallStore {
            db,
            dir: dir.to_path_buf(),
            spaces,
        })
    }

    fn ks(&self, space: Space) -> &Keyspace {
        &self.spaces[space.index()]
    }

    /// One fjall write batch of `batch`'s ops, synced when `durability` says so.
    fn apply(&mut self, batch: Batch, durability: Option<PersistMode>) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut b = self.db.batch().durability(durability);
        // The items of one fjall batch share one sequence number, so two writes of a key in
        // a batch would be two versions that no order tells apart. Keep only the last op on
        // each key, which is what applying the ops in order means.
        let mut seen = std::collections::HashSet::with_capacity(batch.ops.len());
        let mut last = vec![false; batch.ops.len()];
        for (i, op) in batch.ops.iter().enumerate().rev() {
            let (Op::Put(k, _) | Op::Delete(k)) = op;
            last[i] = seen.insert(k.as_slice());
        }
        drop(seen);
        for (op, last) in batch.ops.into_iter().zip(last) {
            if !last {
                continue;
            }
            match op {
                Op::Put(k, v) => {
                    let (space, key) = split(&k)?;
                    b.insert(self.ks(space), key, v);
                }
                Op::Delete(k) => {
                    let (space, key) = split(&k)?;
                    b.remove(self.ks(space), key);
                }
            }
        }
        b.commit().map_err(err)
    }
}

/// `persist(SyncAll)` of the journal from another thread. fjall holds its journal lock
/// while it syncs, so a `write` in the meantime waits for the sync to end; what overlaps
/// is the writer's work before its next `write`.
struct FjallSyncer(Database);

impl Syncer for FjallSyncer {
    fn sync(&mut self) -> StoreResult<()> {
        self.0.persist(PersistMode::SyncAll).map_err(err)
    }
}

/// Major compaction of one keyspace (fjall's `Keyspace::major_compact`, documented as
/// hidden but public): every table of the keyspace is merged and rewritten, dropping
/// tombstones and the versions they cover. It runs beside writes and reads.
struct FjallCompactor(Vec<Keyspace>);

impl Compactor for FjallCompactor {
    fn compact(&mut self, space: Space) -> StoreResult<()> {
        self.0[space.index()].major_compact().map_err(err)
    }
}

/// The space and the key within it; fjall takes keys of 1 to 65,535 bytes (and panics on
/// others), which every key ojsd writes is.
fn split(key: &[u8]) -> StoreResult<(Space, &[u8])> {
    match Space::split(key) {
        Some((space, k)) if !k.is_empty() && k.len() <= usize::from(u16::MAX) => Ok((space, k)),
        Some((space, k)) => Err(StoreError::Backend(format!(
            "a {space:?} key of {} bytes; keys are 1 to 65535 bytes",
            k.len()
        ))),
        None => Err(StoreError::Backend(format!(
            "a key without a known space prefix: {key:?}"
        ))),
    }
}

impl Store for FjallStore {
    fn write(&mut self, batch: Batch) -> StoreResult<()> {
        self.apply(batch, None)
    }

    fn commit(&mut self, batch: Batch) -> StoreResult<()> {
        self.apply(batch, Some(PersistMode::SyncAll))
    }

    fn syncer(&self) -> StoreResult<Box<dyn Syncer>> {
        Ok(Box::new(FjallSyncer(self.db.clone())))
    }

    fn compactor(&self) -> Option<Box<dyn Compactor>> {
        Some(Box::new(FjallCompactor(self.spaces.clone())))
    }

    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let snap = self.db.snapshot();
        Ok(snap
            .get(self.ks(space), key)
            .map_err(err)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()> {
        let snap = self.db.snapshot();
        for guard in snap.iter(self.ks(space)) {
            let (k, v) = guard.into_inner().map_err(err)?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn scan_from(
        &self,
        space: Space,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        let snap = self.db.snapshot();
        for guard in snap.range::<&[u8], _>(self.ks(space), from..) {
            let (k, v) = guard.into_inner().map_err(err)?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let snap = self.db.snapshot();
        let last = snap.range::<&[u8], _>(self.ks(space), ..=key).next_back();
        match last {
            Some(guard) => Ok(Some(guard.key().map_err(err)?.to_vec())),
            None => Ok(None),
        }
    }

    fn bounds(&self, space: Space) -> StoreResult<Bounds> {
        let snap = self.db.snapshot();
        let ks = self.ks(space);
        let key = |g: Option<fjall::Guard>| -> StoreResult<Option<Vec<u8>>> {
            g.map(|g| g.key().map(|k| k.to_vec()).map_err(err))
                .transpose()
        };
        Ok((
            key(snap.first_key_value(ks))?,
            key(snap.last_key_value(ks))?,
        ))
    }

    fn name(&self) -> &'static str {
        super::StoreKind::Fjall.name()
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        Ok(allocated_bytes(&self.dir)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_space_is_its_own_keyspace_holding_keys_without_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FjallStore::open(dir.path(), 1 << 20).unwrap();
        let mut b = Batch::default();
        b.put(Space::Job, b"k1", b"j".to_vec());
        b.put(Space::Event, b"k2", b"e".to_vec());
        s.commit(b).unwrap();
        let jobs: Vec<_> = s
            .ks(Space::Job)
            .iter()
            .map(|g| g.key().unwrap().to_vec())
            .collect();
        assert_eq!(jobs, vec![b"k1".to_vec()]);
        assert_eq!(
            s.ks(Space::Event).get(b"k2").unwrap().unwrap().as_ref(),
            b"e"
        );
        assert!(s.ks(Space::Meta).is_empty().unwrap());
        assert!(s.db.keyspace_exists("workflows"));
    }

    #[test]
    fn a_key_fjall_cannot_hold_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = FjallStore::open(dir.path(), 1 << 20).unwrap();
        for bad in [b"x".to_vec(), b"j/".to_vec(), Space::Job.key(&[0; 65536])] {
            let mut b = Batch::default();
            b.put(Space::Job, b"a", b"1".to_vec());
            b.ops.push(Op::Put(bad, b"2".to_vec()));
            assert!(matches!(s.commit(b), Err(StoreError::Backend(_))));
            assert_eq!(s.get(Space::Job, b"a").unwrap(), None);
        }
    }

    /// What fjall's `create_new` leaves when a power cut stops it before `version` is
    /// durable: `lock`, an empty `keyspaces/`, a preallocated `0.jnl` of zeros, and
    /// `version` as given (absent, empty, zeroed).
    fn cut_setup(dir: &Path, version: Option<&[u8]>) {
        std::fs::create_dir_all(dir.join("keyspaces")).unwrap();
        std::fs::write(dir.join("lock"), b"").unwrap();
        let jnl = std::fs::File::create(dir.join("0.jnl")).unwrap();
        jnl.set_len(1 << 20).unwrap();
        if let Some(v) = version {
            std::fs::write(dir.join("version"), v).unwrap();
        }
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_setup_cut_before_version_was_durable_is_started_afresh() {
        for version in [None, Some(&b""[..]), Some(&[0u8; 4][..]), Some(&b"FJ"[..])] {
            let dir = tempfile::tempdir().unwrap();
            cut_setup(dir.path(), version);
            assert!(
                unfinished_setup(dir.path()).unwrap().is_some(),
                "{version:?}"
            );
            // As it was, fjall refuses it ("File exists", or no format in `version`).
            assert!(
                FjallStore::open(dir.path(), 1 << 20).is_err(),
                "{version:?}"
            );
            let mut s = super::super::open(super::super::StoreKind::Fjall, dir.path(), 1 << 20)
                .unwrap_or_else(|e| panic!("{version:?}: {e}"));
            let mut b = Batch::default();
            b.put(Space::Job, b"k", b"v".to_vec());
            s.commit(b).unwrap();
            drop(s);
            assert_eq!(
                std::fs::read_to_string(dir.path().join(MARKER_FILE)).unwrap(),
                "fjall 2\n"
            );
            let s =
                super::super::open(super::super::StoreKind::Fjall, dir.path(), 1 << 20).unwrap();
            assert_eq!(s.get(Space::Job, b"k").unwrap(), Some(b"v".to_vec()));
        }
    }

    #[test]
    fn what_a_cut_setup_cannot_leave_is_never_removed() {
        // Each of these is the cut set-up plus something fjall writes only after
        // `version` is durable, or that is not fjall's: left as it is, and refused as before.
        type Extra = fn(&Path);
        let extras: [(&str, Extra); 4] = [
            ("a file of someone else", |d| {
                std::fs::write(d.join("keep.me"), b"x").unwrap()
            }),
            ("a keyspace", |d| {
                std::fs::create_dir_all(d.join("keyspaces/0")).unwrap()
            }),
            ("a second journal", |d| {
                std::fs::write(d.join("1.jnl"), b"x").unwrap()
            }),
            ("a marker", |d| {
                std::fs::write(d.join(MARKER_FILE), b"fjall 2\n").unwrap()
            }),
        ];
        for (what, extra) in extras {
            let dir = tempfile::tempdir().unwrap();
            cut_setup(dir.path(), None);
            extra(dir.path());
            assert_eq!(unfinished_setup(dir.path()).unwrap(), None, "{what}");
            let before = listing(dir.path());
            restart_unfinished_setup(dir.path()).unwrap();
            assert_eq!(listing(dir.path()), before, "{what}: nothing removed");
        }
        // A whole `version` (of any fjall format) means `create_new` finished.
        for v in [&b"FJL\x03"[..], b"FJL\x02"] {
            let dir = tempfile::tempdir().unwrap();
            cut_setup(dir.path(), Some(v));
            assert_eq!(unfinished_setup(dir.path()).unwrap(), None, "{v:?}");
        }
        // An empty dir, or one holding only a lock, is simply set up.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(unfinished_setup(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join("lock"), b"").unwrap();
        assert_eq!(unfinished_setup(dir.path()).unwrap(), None);
    }

    #[test]
    fn a_cut_setup_whose_lock_is_held_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        cut_setup(dir.path(), None);
        let before = listing(dir.path());
        let _held = lock_file(dir.path(), &dir.path().join("lock")).unwrap();
        match super::super::open(super::super::StoreKind::Fjall, dir.path(), 1 << 20) {
            Err(StoreError::Locked { .. }) => {}
            Err(e) => panic!("expected Locked, got {e:?}"),
            Ok(_) => panic!("opened a dir whose lock is held"),
        }
        assert_eq!(listing(dir.path()), before);
    }

    #[test]
    fn a_complete_store_without_a_marker_keeps_its_data_and_is_marked() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = FjallStore::open(dir.path(), 1 << 20).unwrap();
            let mut b = Batch::default();
            b.put(Space::Job, b"old", b"job".to_vec());
            s.commit(b).unwrap();
        }
        assert!(!dir.path().join(MARKER_FILE).exists());
        assert_eq!(unfinished_setup(dir.path()).unwrap(), None);
        let s = super::super::open(super::super::StoreKind::Fjall, dir.path(), 1 << 20).unwrap();
        assert_eq!(s.get(Space::Job, b"old").unwrap(), Some(b"job".to_vec()));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(MARKER_FILE)).unwrap(),
            "fjall 2\n"
        );
    }
}
