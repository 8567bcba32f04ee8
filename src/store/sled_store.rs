//! The sled implementation of `Store`.
//!
//! Durability: sled 0.34's `flush` ends in `sync_file_range` on Linux (pagecache/iobuf.rs),
//! which neither flushes the drive's volatile cache nor file metadata, and values too large
//! for a segment go to blob files that sled never fsyncs (pagecache/blob_io.rs). So every
//! commit is `apply_batch` + `flush` + `fsync` of the log file and of any new blob file.
//! The segment size is raised so that values up to several MiB stay inline in the log.
//!
//! sled writes its `conf` file (its storage parameters, read back at every open) without
//! ever fsyncing it, so a power cut soon after a set-up can leave it torn, and sled then
//! refuses the directory although its data is whole. ojsd fsyncs `conf` after every open,
//! and repairs a torn one before opening (see [`repair_torn_conf`]).

use super::{
    ensure_dir, lock_file, sync_dir, Batch, Op, Space, Store, StoreError, StoreResult, Syncer,
};
use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

pub struct SledStore {
    db: sled::Db,
    dir: PathBuf,
    files: Files,
}

/// What a sled commit fsyncs after `flush`: the log file and every new blob file.
struct Files {
    dir: PathBuf,
    log_file: File,
    synced_blobs: HashSet<std::ffi::OsString>,
}

fn err(e: sled::Error) -> StoreError {
    match e {
        sled::Error::Io(e) => StoreError::Io(e),
        sled::Error::Corruption { at, .. } => StoreError::Corrupt(match at {
            Some(at) => format!("sled found damaged data at {at:?}"),
            None => "sled found damaged data".to_string(),
        }),
        sled::Error::Unsupported(m) => StoreError::Backend(format!("sled: unsupported: {m}")),
        sled::Error::ReportableBug(m) => StoreError::Backend(format!("sled bug: {m}")),
        sled::Error::CollectionNotFound(_) => StoreError::Backend("sled: tree not found".into()),
    }
}

/// An error of `sled::Config::open`, which also says when another process holds the lock.
/// sled 0.34 takes an exclusive `flock` (fs2's `try_lock_exclusive`) on `<dir>/db` and, when
/// that fails, returns `Error::Io` of kind `Other` whose text starts "could not acquire lock"
/// (config.rs, `try_lock`): the `WouldBlock` it got is only in the text, so the text is
/// what we can match. The conformance test `a_second_open_is_locked` pins this down.
fn open_err(dir: &Path, e: sled::Error) -> StoreError {
    match e {
        sled::Error::Io(io)
            if io.kind() == std::io::ErrorKind::WouldBlock
                || io.to_string().starts_with("could not acquire lock") =>
        {
            StoreError::Locked {
                dir: dir.to_path_buf(),
            }
        }
        e => err(e),
    }
}

/// sled's segment size for ojsd: 16 MiB segments make the blob threshold segment/4, far
/// above our largest value. Stored by sled in `conf`; a later open must use the same.
const SEGMENT_SIZE: usize = 16 * 1024 * 1024;

/// The text of the `conf` sled 0.34 writes for ojsd's config (`StorageParameters::
/// serialize`, `src/config.rs`): the segment size, `use_compression` (off: ojsd does not
/// enable sled's `compression` feature) and sled's version; the file is this text followed
/// by its CRC-32 (4 bytes). The test `conf_is_what_sled_writes` checks it against sled.
fn conf_text() -> String {
    format!("segment_size: {SEGMENT_SIZE}\nuse_compression: false\nversion: 0.34\n")
}

/// Whether `bytes`, a `conf` that is not whole, is what a cut write of ojsd's own `conf`
/// leaves: a proper prefix of its text and CRC, possibly followed by zeros (a file whose
/// length reached the disk before its data did), or zeros only.
fn is_torn_conf(bytes: &[u8]) -> bool {
    let text = conf_text().into_bytes();
    let whole = text.len() + 4;
    if bytes.len() == whole && bytes.starts_with(&text) {
        // Whole (sled only warns on a wrong CRC, and reads the text).
        return false;
    }
    let written = match bytes.iter().rposition(|b| *b != 0) {
        Some(last) => &bytes[..=last],
        None => &[][..],
    };
    let agreed = written.len().min(text.len());
    written.len() < whole && written[..agreed] == text[..agreed]
}

/// Repair a `conf` that a power cut tore, before sled reads it: sled refuses a `conf` it
/// cannot parse ("damaged data") or whose truncated segment size differs from ours, though
/// the data in `db` does not depend on that file being whole. A torn `conf` that is a piece
/// of the very text ojsd's config makes is removed (with the store's lock held, and the
/// directory fsynced), and sled writes it afresh from the same config when it opens. A
/// `conf` saying anything else (another segment size, compression, another sled version)
/// is left for sled to refuse, as it was written by another config and the data depends on
/// it. sled itself already rewrites a `conf` of 8 bytes or fewer.
fn repair_torn_conf(dir: &Path) -> StoreResult<()> {
    let path = dir.join("conf");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !is_torn_conf(&bytes) {
        return Ok(());
    }
    let _lock = lock_file(dir, &dir.join("db"))?;
    tracing::warn!(
        dir = %dir.display(),
        bytes = bytes.len(),
        "sled's conf file is torn (a power cut before it reached the disk); rewriting it"
    );
    std::fs::remove_file(&path)?;
    sync_dir(dir)
}

impl SledStore {
    pub fn open(dir: &Path, cache_bytes: u64) -> StoreResult<SledStore> {
        ensure_dir(dir)?;
        repair_torn_conf(dir)?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .segment_size(SEGMENT_SIZE)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|e| open_err(dir, e))?;
        let log_file = File::open(dir.join("db"))?;
        // sled never fsyncs `conf` (it may have just written it), and the directory entries
        // of a freshly created store (`conf`, `db`, `blobs/`) must survive a crash too.
        File::open(dir.join("conf"))?.sync_all()?;
        sync_dir(dir)?;
        let mut files = Files {
            dir: dir.to_path_buf(),
            log_file,
            synced_blobs: HashSet::new(),
        };
        files.sync()?;
        Ok(SledStore {
            db,
            dir: dir.to_path_buf(),
            files,
        })
    }
}

impl Files {
    fn sync(&mut self) -> StoreResult<()> {
        self.log_file.sync_all()?;
        let blobs = self.dir.join("blobs");
        let Ok(entries) = std::fs::read_dir(&blobs) else {
            return Ok(());
        };
        let mut new_blob = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !self.synced_blobs.contains(&name) {
                File::open(entry.path())?.sync_all()?;
                self.synced_blobs.insert(name);
                new_blob = true;
            }
        }
        if new_blob {
            File::open(&blobs)?.sync_all()?;
        }
        Ok(())
    }
}

/// `flush` + the fsyncs of a commit, from another thread.
struct SledSyncer {
    db: sled::Db,
    files: Files,
}

impl Syncer for SledSyncer {
    fn sync(&mut self) -> StoreResult<()> {
        self.db.flush().map_err(err)?;
        self.files.sync()
    }
}

impl Store for SledStore {
    fn commit(&mut self, batch: Batch) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write(batch)?;
        self.db.flush().map_err(err)?;
        self.files.sync()
    }

    fn write(&mut self, batch: Batch) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut b = sled::Batch::default();
        for op in batch.ops {
            match op {
                Op::Put(k, v) => b.insert(k, v),
                Op::Delete(k) => b.remove(k),
            }
        }
        self.db.apply_batch(b).map_err(err)
    }

    fn syncer(&self) -> StoreResult<Box<dyn Syncer>> {
        Ok(Box::new(SledSyncer {
            db: self.db.clone(),
            files: Files {
                dir: self.dir.clone(),
                log_file: self.files.log_file.try_clone()?,
                synced_blobs: HashSet::new(),
            },
        }))
    }

    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Ok(self
            .db
            .get(space.key(key))
            .map_err(err)?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()> {
        for item in self.db.scan_prefix(space.prefix()) {
            let (k, v) = item.map_err(err)?;
            if !f(&k[2..], &v) {
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
        let start = space.key(from);
        for item in self.db.range(start..) {
            let (k, v) = item.map_err(err)?;
            if !k.starts_with(space.prefix()) {
                break;
            }
            if !f(&k[2..], &v) {
                break;
            }
        }
        Ok(())
    }

    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let start = space.prefix().to_vec();
        let end = space.key(key);
        let last = self
            .db
            .range(start..=end)
            .next_back()
            .transpose()
            .map_err(err)?;
        Ok(last.map(|(k, _)| k[2..].to_vec()))
    }

    fn bounds(&self, space: Space) -> StoreResult<super::Bounds> {
        let mut it = self.db.scan_prefix(space.prefix());
        let first = it
            .next()
            .transpose()
            .map_err(err)?
            .map(|(k, _)| k[2..].to_vec());
        let last = it
            .next_back()
            .transpose()
            .map_err(err)?
            .map(|(k, _)| k[2..].to_vec());
        // With a single record, `next_back` has nothing left: first is also last.
        Ok((first.clone(), last.or(first)))
    }

    fn name(&self) -> &'static str {
        super::StoreKind::Sled.name()
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        self.db.size_on_disk().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_applied_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = SledStore::open(dir.path(), 1 << 20).unwrap();
            let mut b = Batch::default();
            b.put(Space::Job, b"a", b"1".to_vec());
            b.put(Space::Job, b"b", b"2".to_vec());
            b.put(Space::Meta, b"x", b"3".to_vec());
            s.commit(b).unwrap();
            let mut b = Batch::default();
            b.delete(Space::Job, b"a");
            s.commit(b).unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        let mut seen = vec![];
        s.scan(Space::Job, &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        assert_eq!(seen, vec![(b"b".to_vec(), b"2".to_vec())]);
        assert_eq!(s.get(Space::Meta, b"x").unwrap(), Some(b"3".to_vec()));
        assert_eq!(s.get(Space::Meta, b"b").unwrap(), None);
    }

    #[test]
    fn a_file_in_place_of_the_dir_is_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        for target in [file.clone(), file.join("sub")] {
            match SledStore::open(&target, 1 << 20) {
                Err(StoreError::NotADirectory { path }) => assert_eq!(path, file),
                Err(e) => panic!("{}: expected NotADirectory, got {e:?}", target.display()),
                Ok(_) => panic!("{}: opened a store under a file", target.display()),
            }
        }
    }

    #[test]
    fn scan_from_stays_inside_its_space() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SledStore::open(dir.path(), 1 << 20).unwrap();
        let mut b = Batch::default();
        for k in [b"1", b"2", b"3"] {
            b.put(Space::Event, k, k.to_vec());
        }
        b.put(Space::Job, b"0", b"j".to_vec());
        b.put(Space::Cron, b"0", b"c".to_vec()); // "c/" sorts just below "e/"
        s.commit(b).unwrap();
        let mut seen = vec![];
        s.scan_from(Space::Event, b"2", &mut |k, _| {
            seen.push(k.to_vec());
            true
        })
        .unwrap();
        assert_eq!(seen, vec![b"2".to_vec(), b"3".to_vec()]);
        let floor = |k: &[u8]| s.floor_key(Space::Event, k).unwrap();
        assert_eq!(floor(b"25"), Some(b"2".to_vec()));
        assert_eq!(floor(b"3"), Some(b"3".to_vec()));
        assert_eq!(floor(b"9"), Some(b"3".to_vec()));
        assert_eq!(
            floor(b"0"),
            None,
            "the cron record below the space is not returned"
        );
    }

    /// `SledStore::open` again right after a drop: sled's background threads may still
    /// hold the last `Db`'s file (and its lock) for a moment on a loaded machine.
    fn reopen(dir: &Path) -> StoreResult<SledStore> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match SledStore::open(dir, 1 << 20) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                r => return r,
            }
        }
    }

    fn store_with_a_record(dir: &Path) {
        let mut s = SledStore::open(dir, 1 << 20).unwrap();
        let mut b = Batch::default();
        b.put(Space::Job, b"k", b"v".to_vec());
        s.commit(b).unwrap();
    }

    #[test]
    fn conf_is_what_sled_writes() {
        let dir = tempfile::tempdir().unwrap();
        store_with_a_record(dir.path());
        let conf = std::fs::read(dir.path().join("conf")).unwrap();
        let text = conf_text();
        assert_eq!(&conf[..conf.len() - 4], text.as_bytes());
        assert_eq!(conf.len(), text.len() + 4);
        assert!(!is_torn_conf(&conf));
    }

    #[test]
    fn a_torn_conf_is_rewritten_and_the_data_kept() {
        let dir = tempfile::tempdir().unwrap();
        store_with_a_record(dir.path());
        let whole = std::fs::read(dir.path().join("conf")).unwrap();
        let mut torn: Vec<Vec<u8>> = vec![
            whole[..30].to_vec(),
            whole[..whole.len() - 2].to_vec(),
            vec![0; whole.len()],
        ];
        let mut zero_tail = whole[..20].to_vec();
        zero_tail.resize(whole.len(), 0);
        torn.push(zero_tail);
        for conf in torn {
            std::fs::write(dir.path().join("conf"), &conf).unwrap();
            assert!(is_torn_conf(&conf), "{conf:?}");
            // sled alone refuses it.
            let alone = sled::Config::new()
                .path(dir.path())
                .segment_size(SEGMENT_SIZE)
                .open();
            // (sled reads `conf` before it takes its lock: this is the conf's refusal.)
            match alone {
                Err(e) => assert!(!e.to_string().contains("lock"), "{e}"),
                Ok(_) => panic!("sled opened a torn conf {conf:?}"),
            }
            std::fs::write(dir.path().join("conf"), &conf).unwrap();
            let s = reopen(dir.path()).unwrap_or_else(|e| panic!("{conf:?}: {e}"));
            assert_eq!(s.get(Space::Job, b"k").unwrap(), Some(b"v".to_vec()));
            drop(s);
            assert_eq!(std::fs::read(dir.path().join("conf")).unwrap(), whole);
        }
    }

    #[test]
    fn a_conf_of_another_config_is_left_to_sled_to_refuse() {
        let dir = tempfile::tempdir().unwrap();
        drop(
            sled::Config::new()
                .path(dir.path())
                .segment_size(1 << 20)
                .open()
                .unwrap(),
        );
        let conf = std::fs::read(dir.path().join("conf")).unwrap();
        assert!(!is_torn_conf(&conf));
        assert!(
            !is_torn_conf(&conf[..conf.len() - 6]),
            "a torn piece of another conf"
        );
        match reopen(dir.path()) {
            Err(StoreError::Backend(m)) => assert!(m.contains("io buffer size"), "{m}"),
            Err(e) => panic!("expected sled's refusal, got {e:?}"),
            Ok(_) => panic!("opened a store of another segment size"),
        }
        assert_eq!(std::fs::read(dir.path().join("conf")).unwrap(), conf);
    }
}
