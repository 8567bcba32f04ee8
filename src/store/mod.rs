//! Persistence behind one narrow trait. Only `sled_store.rs` names sled, so another engine
//! could replace it without touching the engine.
//!
//! The key space is flat and prefixed so that one atomic batch can cover every kind of
//! record: `j/<16-byte uuid>` job bodies, `m/<name>` small engine metadata, and further
//! prefixes added by later features (the event log).

mod sled_store;

pub use sled_store::{SledStore, DEFAULT_CACHE_MB};

use std::fmt;
use std::path::PathBuf;

/// What can go wrong in the store, by kind, so that callers (the binary, above all) can
/// tell an operator's mistake from a broken disk without reading message text.
#[derive(Debug)]
pub enum StoreError {
    /// Another process holds the data directory's lock (another ojsd is running on it).
    Locked { dir: PathBuf },
    /// `path` (the data directory, or a path it lies under) exists and is not a directory.
    NotADirectory { path: PathBuf },
    /// The operating system refused a read, write, sync or open.
    Io(std::io::Error),
    /// The database detected damaged data, or a record ojsd wrote cannot be read back.
    Corrupt(String),
    /// The database engine failed in a way of its own (unsupported use, internal bug).
    Backend(String),
    /// Anything else on the way to or from the store (e.g. a rebuild reader thread panicked).
    Other(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked { dir } => write!(f, "another ojsd is using {}", dir.display()),
            StoreError::NotADirectory { path } => {
                write!(f, "{} is not a directory", path.display())
            }
            StoreError::Io(e) => write!(f, "store: {e}"),
            StoreError::Corrupt(m) => write!(f, "store: corrupt data: {m}"),
            StoreError::Backend(m) | StoreError::Other(m) => write!(f, "store: {m}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The first and last key of a space, without prefix.
pub type Bounds = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Record kinds, each its own key prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Job,
    Meta,
    Event,
    /// `c/<name>`: cron registrations and their firing state.
    Cron,
    /// `w/<workflow id>\0...`: workflow headers and nodes.
    Workflow,
}

impl Space {
    pub fn prefix(self) -> &'static [u8] {
        match self {
            Space::Job => b"j/",
            Space::Meta => b"m/",
            Space::Event => b"e/",
            Space::Cron => b"c/",
            Space::Workflow => b"w/",
        }
    }

    pub fn key(self, suffix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(2 + suffix.len());
        k.extend_from_slice(self.prefix());
        k.extend_from_slice(suffix);
        k
    }
}

#[derive(Debug, Clone)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

/// The writes of one group commit, applied atomically.
#[derive(Debug, Default)]
pub struct Batch {
    pub ops: Vec<Op>,
}

impl Batch {
    pub fn put(&mut self, space: Space, key: &[u8], value: Vec<u8>) {
        self.ops.push(Op::Put(space.key(key), value));
    }

    pub fn delete(&mut self, space: Space, key: &[u8]) {
        self.ops.push(Op::Delete(space.key(key)));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// `Sync` because the index rebuild at start reads the store from several threads at once.
pub trait Store: Send + Sync {
    /// Apply every op atomically and make it durable before returning.
    fn commit(&mut self, batch: Batch) -> StoreResult<()>;
    fn get(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>>;
    /// Visit every record of a space in key order; the callback gets the key without prefix.
    fn scan(&self, space: Space, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> StoreResult<()>;
    /// Visit records of a space whose key (without prefix) is >= `from`, in key order, until
    /// the callback returns false.
    fn scan_from(
        &self,
        space: Space,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> StoreResult<()>;
    /// The greatest key (without prefix) of a space that is <= `key`: where a read that
    /// starts inside a record holding a range of positions must begin.
    fn floor_key(&self, space: Space, key: &[u8]) -> StoreResult<Option<Vec<u8>>>;
    /// The first and last key (without prefix) of a space.
    fn bounds(&self, space: Space) -> StoreResult<Bounds>;
    /// Bytes the store occupies on disk.
    fn size_on_disk(&self) -> StoreResult<u64>;
}
