//! The PostgreSQL store's read cache: committed records by (space, key), bounded in bytes.
//!
//! Without it every `get` of a record the engine does not hold in memory is a round trip to
//! PostgreSQL, taken on the engine thread (and under load, one slow statement stalls every
//! client). The node is the only writer of its partition while it holds the fenced lease,
//! so what it committed is what the table holds: the cache is filled by the values a sync
//! commits (write-through), by `get` misses (including "no such record") and by scans, and a
//! committed delete removes the key. The store consults it after its overlay of unsynced
//! writes and before PostgreSQL; see `postgres_store.rs` for why that order, with the
//! overlay lock held across the fill, never shows a stale value.
//!
//! quick_cache (S3-FIFO-like eviction, sharded, weighed per entry) is already built for
//! fjall's block cache, so it costs no new dependency in the build; a `HashMap` with an LRU
//! list of our own would be the same amount of code with a global lock.

use super::Space;
use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// Bytes of keys and values the cache holds by default.
pub const READ_CACHE_BYTES: u64 = 64 << 20;
/// What an entry costs beyond its key and value (the map's slot, the `Bytes` header).
const ENTRY_OVERHEAD: u64 = 64;

type Key = (u8, Vec<u8>);
/// A record's value, or `None`: PostgreSQL has no such record.
type Val = Option<Bytes>;

#[derive(Clone)]
struct ByBytes;

impl Weighter<Key, Val> for ByBytes {
    fn weight(&self, key: &Key, val: &Val) -> u64 {
        ENTRY_OVERHEAD + key.1.len() as u64 + val.as_ref().map_or(0, |v| v.len() as u64)
    }
}

pub(super) struct ReadCache {
    cache: Option<Cache<Key, Val, ByBytes>>,
}

impl ReadCache {
    /// A cache of at most `bytes` (0: none at all).
    pub(super) fn new(bytes: u64) -> ReadCache {
        let cache = (bytes > 0).then(|| {
            // quick_cache sizes its tables by the expected number of entries; job records
            // run about 1 KiB.
            let items = (bytes / 1024).clamp(64, 1 << 20) as usize;
            Cache::with_weighter(items, bytes, ByBytes)
        });
        ReadCache { cache }
    }

    /// `Some(v)` when the cache knows the committed value (`v` is `None` for "absent").
    pub(super) fn get(&self, space: Space, key: &[u8]) -> Option<Val> {
        // quick_cache's `Equivalent` would spare this copy, but a tuple key with a slice
        // inside has no borrowed form; keys are at most a few dozen bytes.
        self.cache
            .as_ref()?
            .get(&(space.index() as u8, key.to_vec()))
    }

    /// Remember the committed value of a key (`None`: absent).
    pub(super) fn put(&self, space: Space, key: &[u8], value: Val) {
        if let Some(c) = &self.cache {
            c.insert((space.index() as u8, key.to_vec()), value);
        }
    }

    /// Forget a key (its record was deleted).
    pub(super) fn forget(&self, space: Space, key: &[u8]) {
        if let Some(c) = &self.cache {
            c.remove(&(space.index() as u8, key.to_vec()));
        }
    }

    /// Bytes held (keys, values and the per-entry overhead).
    #[cfg(test)]
    pub(super) fn weight(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_bound_and_forgets_deletes() {
        let c = ReadCache::new(64 * 1024);
        for i in 0..10_000u32 {
            c.put(
                Space::Job,
                &i.to_be_bytes(),
                Some(Bytes::from(vec![7u8; 500])),
            );
        }
        assert!(c.weight() <= 64 * 1024, "weight {}", c.weight());
        c.put(Space::Job, b"k", Some(Bytes::from_static(b"v")));
        assert_eq!(
            c.get(Space::Job, b"k"),
            Some(Some(Bytes::from_static(b"v")))
        );
        assert_eq!(c.get(Space::Meta, b"k"), None, "spaces are apart");
        c.put(Space::Meta, b"k", None);
        assert_eq!(
            c.get(Space::Meta, b"k"),
            Some(None),
            "absence is remembered"
        );
        c.forget(Space::Job, b"k");
        assert_eq!(c.get(Space::Job, b"k"), None);
        let off = ReadCache::new(0);
        off.put(Space::Job, b"k", None);
        assert_eq!(off.get(Space::Job, b"k"), None);
    }
}
