//! redb 4 behind ojsd's `Store` trait, for `--store-floor --store redb` only: ojsd cannot
//! run on it. It was a candidate for the default store (bench/RESULTS.md, round 4), and
//! stays here so the comparison can be run again. Built only with `--features redb`.
//!
//! As its authors intend: one table per space in one file, one write transaction per
//! commit with the default `Durability::Immediate` (the commit returns after fsync), a
//! bounded page cache.

use ojsd::store::{Batch, Bounds, Op, Space, Store, StoreError, StoreResult, Syncer};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

const TABLES: [Def; 5] = [
    TableDefinition::new("jobs"),
    TableDefinition::new("meta"),
    TableDefinition::new("events"),
    TableDefinition::new("cron"),
    TableDefinition::new("workflows"),
];

pub struct RedbStore {
    db: Database,
    file: std::path::PathBuf,
}

fn err(e: impl Into<redb::Error>) -> StoreError {
    StoreError::Backend(format!("redb: {}", e.into()))
}

impl RedbStore {
    pub fn open(dir: &Path, cache_bytes: u64) -> StoreResult<RedbStore> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("ojsd.redb");
        let db = Database::builder()
            .set_cache_size(cache_bytes as usize)
            .create(&file)
            .map_err(err)?;
        // Create every table once, so readers find them.
        let txn = db.begin_write().map_err(err)?;
        for t in TABLES {
            txn.open_table(t).map_err(err)?;
        }
        txn.commit().map_err(err)?;
        Ok(RedbStore { db, file })
    }

    fn read(&self, space: Space) -> StoreResult<redb::ReadOnlyTable<&'static [u8], &'static [u8]>> {
        let txn = self.db.begin_read().map_err(err)?;
        txn.open_table(TABLES[space.index()]).map_err(err)
    }
}

/// `write` already commits durably here, so there is nothing left to sync.
struct Synced;

impl Syncer for Synced {
    fn sync(&mut self) -> StoreResult<()> {
        Ok(())
    }
}

impl Store for RedbStore {
    fn write(&mut self, batch: Batch) -> StoreResult<()> {
        self.commit(batch)
    }

    fn syncer(&self) -> StoreResult<Box<dyn Syncer>> {
        Ok(Box::new(Synced))
    }

    fn commit(&mut self, batch: Batch) -> StoreResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(err)?;
        {
            let mut tables: Vec<Option<redb::Table<&[u8], &[u8]>>> =
                (0..TABLES.len()).map(|_| None).collect();
            for op in &batch.ops {
                let (Op::Put(k, _) | Op::Delete(k)) = op;
                let (space, key) = Space::split(k)
                    .ok_or_else(|| StoreError::Backend("a key without a space".into()))?;
                let slot = &mut tables[space.index()];
                if slot.is_none() {
                    *slot = Some(txn.open_table(TABLES[space.index()]).map_err(err)?);
                }
                let table = slot.as_mut().expect("opened above");
                match op {
                    Op::Put(_, v) => {
                        table.insert(key, v.as_slice()).map_err(err)?;
                    }
                    Op::Delete(_) => {
                        table.remove(key).map_err(err)?;
                    }
                }
            }
        }
        txn.commit().map_err(err)
    }

    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let t = self.read(space)?;
        Ok(t.get(key).map_err(err)?.map(|v| v.value().to_vec()))
    }

    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()> {
        self.scan_from(space, b"", f)
    }

    fn scan_from(
        &self,
        space: Space,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()> {
        let t = self.read(space)?;
        for item in t.range::<&[u8]>(from..).map_err(err)? {
            let (k, v) = item.map_err(err)?;
            if !f(k.value(), v.value()) {
                break;
            }
        }
        Ok(())
    }

    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let t = self.read(space)?;
        let last = t.range::<&[u8]>(..=key).map_err(err)?.next_back();
        Ok(match last {
            Some(item) => Some(item.map_err(err)?.0.value().to_vec()),
            None => None,
        })
    }

    fn bounds(&self, space: Space) -> StoreResult<Bounds> {
        let t = self.read(space)?;
        let first = t.first().map_err(err)?.map(|(k, _)| k.value().to_vec());
        let last = t.last().map_err(err)?.map(|(k, _)| k.value().to_vec());
        Ok((first, last))
    }

    fn size_on_disk(&self) -> StoreResult<u64> {
        Ok(std::fs::metadata(&self.file)?.len())
    }

    fn name(&self) -> &'static str {
        "redb"
    }
}
