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
    allocated_bytes, ensure_dir, Batch, Bounds, Op, Space, Store, StoreError, StoreResult, Syncer,
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
}
