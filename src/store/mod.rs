//! Persistence behind one narrow trait, with three implementations: fjall (the default, in
//! `fjall_store.rs`), sled (`--store sled`, in `sled_store.rs`) and PostgreSQL (`--store
//! postgres`, in `postgres_store.rs` and its `postgres_*.rs` neighbours: cluster mode).
//! Only those files name a database crate; the rest of ojsd opens a store with [`open`]
//! (or [`open_postgres`], or a [`PgNode`] that holds many partitions) and sees `dyn Store`.
//!
//! The engine addresses records by [`Space`] (jobs, metadata, the event log, cron,
//! workflows) and a key within it. A [`Batch`] carries each key with its space's two-byte
//! prefix (`j/<16-byte uuid>`, `m/<name>`, ...): sled keeps that flat prefixed key space in
//! one tree, fjall maps each prefix to a keyspace of its own and stores the rest of the key.
//! Either way one commit is one atomic, durable write covering every space it touches.
//!
//! A data directory records which store wrote it, in `ojsd-store` (see [`open`]), so that
//! starting with the other store is refused instead of serving an empty broker. The marker
//! is also the end of a new directory's set-up: it is written last, once the store's own
//! files are durable, and before anything is served. So a directory without one holds no
//! acknowledged data, and what a power cut in the middle of a set-up left is started afresh
//! rather than refused (see [`open`]).

mod fjall_store;
mod postgres_balance;
mod postgres_cache;
mod postgres_cluster;
mod postgres_commit;
mod postgres_errors;
mod postgres_lease;
mod postgres_node;
mod postgres_schema;
mod postgres_store;
mod sled_store;

#[cfg(test)]
pub(crate) mod conformance;

pub use fjall_store::FjallStore;
pub use postgres_commit::{IN_FLIGHT_INLINE, IN_FLIGHT_PIPELINED};
pub use postgres_node::PgNode;
pub use postgres_store::PostgresStore;
pub use sled_store::SledStore;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The default cache of the embedded database, MiB: fjall's block cache, or sled's page
/// cache. sled's memory use runs well above this figure; 128 keeps 1M queued jobs under
/// 1 GiB RSS with sled (bench/RESULTS.md).
pub const DEFAULT_CACHE_MB: u64 = 128;

/// The stores ojsd can keep its data in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// fjall 3: an LSM tree with a journal, one keyspace per record kind (the default).
    Fjall,
    /// sled 0.34: one B-tree-like log-structured tree (ojsd's store before fjall).
    Sled,
    /// PostgreSQL (--postgres-url): the records in table `ojs_kv` under a fenced lease
    /// on partition 0; the data dir is not used.
    Postgres,
}

impl StoreKind {
    /// The store a data directory gets unless told otherwise.
    pub const DEFAULT: StoreKind = StoreKind::Fjall;

    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Fjall => "fjall",
            StoreKind::Sled => "sled",
            StoreKind::Postgres => "postgres",
        }
    }

    /// The layout version of ojsd's data under this store, written into the marker. A later
    /// change of layout (keyspaces, key encoding, record versions) raises it, so that an
    /// older ojsd refuses a directory it would misread. 2: jobs are stored as a job record
    /// and a state record (an ojsd that knows only 1 would skip them as unreadable). Every
    /// format from [`StoreKind::OLDEST_FORMAT`] on is read; opening a directory of an older
    /// one marks it with this one.
    pub fn format(self) -> u32 {
        2
    }

    /// The oldest layout this build still reads.
    pub const OLDEST_FORMAT: u32 = 1;

    fn from_name(name: &str) -> Option<StoreKind> {
        match name {
            "fjall" => Some(StoreKind::Fjall),
            "sled" => Some(StoreKind::Sled),
            "postgres" => Some(StoreKind::Postgres),
            _ => None,
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    /// The data directory was written by another store than the one asked for.
    WrongStore { dir: PathBuf, found: StoreKind },
    /// The data directory's store marker names a store or a format this build does not know
    /// (a newer ojsd wrote it, or it was damaged).
    UnknownMarker { path: PathBuf, text: String },
    /// Anything else on the way to or from the store (e.g. a rebuild reader thread panicked).
    Other(String),
    /// This node no longer holds the partition it writes (PostgreSQL store): another node
    /// took it over (its epoch moved on), or the lease ran out on this node's clock. The
    /// write or sync did not happen, and no later one will.
    Fenced(String),
    /// Another node holds partition `part`'s lease and did not let it go in time.
    Leased { part: u32, owner: String },
    /// The store cannot make writes durable now, for a reason that passes (PostgreSQL
    /// restarting or unreachable, the lease not renewed in time while it was away). A write
    /// that returned stays applied and pending, and a later sync commits it with the others;
    /// a sync that failed this way may or may not have committed (the outcome of a COMMIT
    /// cut off is unknown), and committing its batches again is harmless (the net effect of
    /// the batches, written by the partition's only writer). The caller answers what waited
    /// for it as not done, and goes on.
    Unavailable(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked { dir } => write!(f, "another ojsd is using {}", dir.display()),
            StoreError::NotADirectory { path } => {
                write!(f, "{} is not a directory", path.display())
            }
            StoreError::Io(e) => write!(f, "store: {e}"),
            StoreError::WrongStore { dir, found } => write!(
                f,
                "{} was written by the {found} store; start with --store {found} (or use an \
                 empty data dir)",
                dir.display()
            ),
            StoreError::UnknownMarker { path, text } => write!(
                f,
                "{} says {text:?}, which this ojsd does not know (it knows {}); was the data \
                 dir written by a newer ojsd?",
                path.display(),
                known_markers()
            ),
            StoreError::Corrupt(m) => write!(f, "store: corrupt data: {m}"),
            StoreError::Backend(m) | StoreError::Other(m) => write!(f, "store: {m}"),
            StoreError::Fenced(m) => write!(f, "store: fenced: {m}"),
            StoreError::Unavailable(m) => write!(f, "store: unavailable: {m}"),
            StoreError::Leased { part, owner } => write!(
                f,
                "partition {part} is leased by node {owner:?}; it is released when that \
                 node stops, or expires once it stops renewing it"
            ),
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

/// Record kinds, each its own key prefix (and its own fjall keyspace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Job,
    Meta,
    Event,
    /// `c/<name>`: cron registrations and their firing state.
    Cron,
    /// `w/<workflow id>\0...`: workflow headers and nodes.
    Workflow,
    /// `o/...`: what an engine sends to other partitions and has not yet seen delivered
    /// (cluster mode), and the workflow jobs it runs for other partitions.
    Outbox,
}

impl Space {
    pub const ALL: [Space; 6] = [
        Space::Job,
        Space::Meta,
        Space::Event,
        Space::Cron,
        Space::Workflow,
        Space::Outbox,
    ];

    /// The space's position in [`Space::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The space a prefixed key (as a [`Batch`] holds it) belongs to, and the key within it.
    pub fn split(key: &[u8]) -> Option<(Space, &[u8])> {
        let space = Space::ALL
            .into_iter()
            .find(|s| key.starts_with(s.prefix()))?;
        Some((space, &key[2..]))
    }

    pub fn prefix(self) -> &'static [u8] {
        match self {
            Space::Job => b"j/",
            Space::Meta => b"m/",
            Space::Event => b"e/",
            Space::Cron => b"c/",
            Space::Workflow => b"w/",
            Space::Outbox => b"o/",
        }
    }

    pub fn key(self, suffix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(2 + suffix.len());
        k.extend_from_slice(self.prefix());
        k.extend_from_slice(suffix);
        k
    }
}

#[derive(Debug, Clone, PartialEq)]
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

    /// How many of the ops delete a record of `space`.
    pub fn deletes(&self, space: Space) -> usize {
        let prefix = space.prefix();
        self.ops
            .iter()
            .filter(|op| matches!(op, Op::Delete(k) if k.starts_with(prefix)))
            .count()
    }
}

/// `Sync` because the index rebuild at start reads the store from several threads at once.
pub trait Store: Send + Sync {
    /// Apply every op atomically and make it durable before returning.
    fn commit(&mut self, batch: Batch) -> StoreResult<()>;
    /// Apply every op atomically, visible to reads at once but durable only once a
    /// [`Syncer`] of this store has synced after it (a crash before that loses the batch
    /// whole, never part of it; later batches are never kept without earlier ones).
    fn write(&mut self, batch: Batch) -> StoreResult<()>;
    /// A handle with which another thread makes every write so far durable, so the writer
    /// can apply its next batch while the last one is being synced.
    fn syncer(&self) -> StoreResult<Box<dyn Syncer>>;
    /// A mark of the writes so far, for [`Syncer::sync_to`]: 0 where the store keeps none
    /// (its syncer then syncs every time).
    fn written(&self) -> u64 {
        0
    }
    /// Whether the batch of `mark` (what [`Store::written`] said right after it) is still
    /// held by the store, not yet taken into a commit: then writing one of its keys again
    /// replaces the value in the commit that takes both, and costs no extra row. Only a
    /// store whose commits take every batch written since the last (PostgreSQL) holds
    /// any; false by default.
    fn still_pending(&self, _mark: u64) -> bool {
        false
    }
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
    /// Which implementation this is (`fjall`, `sled`).
    fn name(&self) -> &'static str;
    /// A handle to compact a space from another thread, for a store whose own background
    /// work does not reclaim deleted data soon enough (fjall's leveled compaction rewrites
    /// a level only once it outgrows its target). `None`: nothing to do.
    fn compactor(&self) -> Option<Box<dyn Compactor>> {
        None
    }
    /// Where to read the cluster's nodes and partitions from, for a store shared by several
    /// nodes (PostgreSQL). `None`: this node is the whole cluster (fjall, sled).
    fn cluster_view(&self) -> Option<Arc<dyn ClusterView>> {
        None
    }
    /// Whether writes can be made durable now: `Err(Unavailable)` while the database is
    /// away (a store that failed a sync that way tries it again here, at most every
    /// [`READY_RETRY`]), `Err(Fenced)` once for good. Cheap when all is well; the engine
    /// asks before every batch. Embedded stores are always ready.
    fn ready(&self) -> StoreResult<()> {
        Ok(())
    }
    /// The client address this node serves on, once its listener is bound (a `--listen`
    /// port 0 is only known then), for a store that registers nodes (`ojs_nodes`).
    fn announce(&self, _addr: &str) {}
}

/// How often [`Store::ready`] tries again a sync that failed for want of the database.
pub const READY_RETRY: Duration = Duration::from_millis(100);

/// One node of the cluster as CLUSTER reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClusterNode {
    /// `--node-id`.
    pub id: String,
    /// The client address it registered (`--listen`), if any.
    pub addr: Option<String>,
    /// Its peer listener (`--peer-listen`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
    /// The partitions it holds a live lease on.
    pub partitions: Vec<u32>,
    /// The highest epoch of those leases.
    pub epoch: Option<i64>,
    /// When the latest of those leases runs out unless renewed (RFC 3339, UTC).
    pub lease_until: Option<String>,
    /// Its last heartbeat (RFC 3339, UTC), renewed with its lease or, as a standby, with
    /// each attempt to take one.
    pub heartbeat_at: Option<String>,
    /// `active` (holds partitions), `standby` (heartbeating, holds none) or `gone` (no
    /// heartbeat for a lease TTL of the node answering).
    #[serde(deserialize_with = "crate::wire::interned")]
    pub role: crate::wire::Name,
    /// This is the node that answered.
    pub local: bool,
}

/// The cluster: how many partitions, which node holds which.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClusterState {
    /// The store the cluster keeps its data in.
    #[serde(deserialize_with = "crate::wire::interned")]
    pub store: crate::wire::Name,
    pub partitions: u32,
    pub nodes: Vec<ClusterNode>,
    /// Partitions nobody holds a live lease on (between a node's death and a takeover).
    pub unowned: Vec<u32>,
}

/// Called once with the cluster's state (or why it could not be read).
pub type ClusterDone = Box<dyn FnOnce(StoreResult<ClusterState>) + Send>;

/// Reads the cluster's state without blocking the caller: `done` runs on another thread
/// once the answer is in (so the engine thread never waits for the database).
pub trait ClusterView: Send + Sync {
    fn read(&self, done: ClusterDone);
}

/// Rewrites a space's files so that what deletions left behind (old versions, tombstones)
/// stops taking disk, on a thread of its own: it may take seconds and blocks its caller.
pub trait Compactor: Send {
    fn compact(&mut self, space: Space) -> StoreResult<()>;
}

/// Makes a store's writes durable from another thread (see [`Store::write`]).
pub trait Syncer: Send {
    /// Make every write that returned before this call durable.
    fn sync(&mut self) -> StoreResult<()>;
    /// Make the writes up to `mark` (a [`Store::written`] taken after them) durable; Ok at
    /// once if an earlier sync already did, even with newer writes pending. A store that
    /// keeps no marks syncs.
    fn sync_to(&mut self, mark: u64) -> StoreResult<()> {
        let _ = mark;
        self.sync()
    }
}

/// The data directory's record of which store wrote it: one line, `<store> <format>`.
pub const MARKER_FILE: &str = "ojsd-store";

fn known_markers() -> String {
    [StoreKind::Fjall, StoreKind::Sled]
        .iter()
        .map(|k| format!("\"{k} {}\"", k.format()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which store wrote `dir`: its marker if it has one; else what its files show (a data
/// dir from before the marker existed is a sled one: `conf` and `db` files; a fjall
/// database has `version` and `keyspaces/`); `None` for an empty or new directory.
pub fn written_by(dir: &Path) -> StoreResult<Option<StoreKind>> {
    let path = dir.join(MARKER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let line = text.lines().next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let kind = words.next().and_then(StoreKind::from_name);
            let format = words.next().and_then(|v| v.parse::<u32>().ok());
            match (kind, format, words.next()) {
                (Some(kind), Some(format), None)
                    if kind != StoreKind::Postgres
                        && (StoreKind::OLDEST_FORMAT..=kind.format()).contains(&format) =>
                {
                    Ok(Some(kind))
                }
                _ => Err(StoreError::UnknownMarker {
                    path,
                    text: line.to_string(),
                }),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("conf").is_file() && dir.join("db").is_file() {
                Ok(Some(StoreKind::Sled))
            } else if dir.join("version").is_file() && dir.join("keyspaces").is_dir() {
                Ok(Some(StoreKind::Fjall))
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(StoreError::Io(e)),
    }
}

/// Write the marker atomically (temporary file, fsync, rename, fsync of the directory), so
/// that a crash leaves either no marker (the files still tell) or a whole one.
fn write_marker(dir: &Path, kind: StoreKind) -> StoreResult<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{MARKER_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{kind} {}", kind.format())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(MARKER_FILE))?;
    sync_dir(dir)
}

/// Open (creating if needed) the data directory `dir` with the store `kind`.
///
/// A directory written by the other store is refused with [`StoreError::WrongStore`]
/// before that store's files are touched; a directory whose marker names a store or format
/// this build does not know is refused with [`StoreError::UnknownMarker`]. A directory
/// without a marker (new, or from before markers) gets one once the store has opened it
/// and every file and directory under it has been fsynced: the marker is the last step of
/// a set-up, so that its presence means the store's files are whole.
///
/// Without a marker, what a set-up cut short by a power loss leaves is started afresh (the
/// store's own check, e.g. [`fjall_store::unfinished_setup`], decides from the files alone
/// and only when nothing there can hold a write; a warning names what was removed). A
/// directory without a marker that holds a complete store (an ojsd from before markers) is
/// opened as it is and marked.
pub fn open(kind: StoreKind, dir: &Path, cache_bytes: u64) -> StoreResult<Box<dyn Store>> {
    if kind == StoreKind::Postgres {
        return Err(StoreError::Other(
            "the postgres store has no data dir: open it with open_postgres".into(),
        ));
    }
    ensure_dir(dir)?;
    let found = written_by(dir)?;
    if let Some(found) = found.filter(|f| *f != kind) {
        return Err(StoreError::WrongStore {
            dir: dir.to_path_buf(),
            found,
        });
    }
    let unmarked = !dir.join(MARKER_FILE).try_exists()?;
    if unmarked && kind == StoreKind::Fjall {
        fjall_store::restart_unfinished_setup(dir)?;
    }
    let store: Box<dyn Store> = match kind {
        StoreKind::Fjall => Box::new(FjallStore::open(dir, cache_bytes)?),
        StoreKind::Sled => Box::new(SledStore::open(dir, cache_bytes)?),
        StoreKind::Postgres => unreachable!("refused above"),
    };
    // Only now, with the store's lock held: a second ojsd refused as Locked writes nothing.
    // An older format's marker is raised to this one, since what is written from now on
    // an older ojsd would misread.
    let current = format!("{kind} {}", kind.format());
    let marked = std::fs::read_to_string(dir.join(MARKER_FILE)).ok();
    if marked.as_deref().map(str::trim) != Some(current.as_str()) {
        if unmarked {
            // The end of a set-up: whatever the store created and did not sync itself
            // (directory entries above all) is made durable before the marker says so.
            sync_tree(dir)?;
        }
        write_marker(dir, kind)?;
    }
    Ok(store)
}

/// Where and as whom the PostgreSQL store runs (`--postgres-url` and its neighbours).
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// A libpq-style URL or key=value string (`postgres://user:pw@host:5432/db`).
    pub url: String,
    /// The schema holding ojsd's tables (created if missing).
    pub schema: String,
    /// This node's id in `ojs_partitions.owner` and `ojs_nodes`.
    pub node: String,
    /// The partition [`open_postgres`] serves (0 unless told otherwise).
    pub part: u32,
    /// The cluster's partition count, used when this node creates the cluster's schema
    /// (1 to 1024); a schema that exists keeps the count it was created with.
    pub partitions: u32,
    /// How long a lease lasts past its last renewal (database time).
    pub lease_ttl: Duration,
    /// How often it is renewed.
    pub renew_every: Duration,
    /// How long opening waits for another node's lease to be released or expire
    /// (`Duration::MAX`: for ever, as a standby); it tries again every `renew_every`.
    pub acquire_wait: Duration,
    /// The client address this node registers in `ojs_nodes.client_addr` (for CLUSTER).
    pub addr: Option<String>,
    /// The address of this node's peer listener (`--peer-listen`), registered in
    /// `ojs_nodes.peer_addr`: where the others forward to while it holds the partition.
    pub peer_addr: Option<String>,
    /// While the node waits as a standby: who holds the partition, on each try.
    pub standby: Option<StandbyHooks>,
    /// Bytes of committed records the store keeps in memory to answer reads (0: none).
    pub read_cache_bytes: u64,
    /// Commit rounds a node keeps in flight at once: `IN_FLIGHT_PIPELINED` when its
    /// engines commit pipelined, else `IN_FLIGHT_INLINE` (`postgres_commit.rs`).
    pub commits_in_flight: usize,
}

impl PostgresOptions {
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

    /// The defaults: schema `public`, partition 0 of 1, a 5 s lease renewed every second,
    /// and an open that waits up to twice the lease for a previous owner's to expire.
    pub fn new(url: &str, node: &str) -> PostgresOptions {
        PostgresOptions {
            url: url.to_string(),
            schema: "public".to_string(),
            node: node.to_string(),
            part: 0,
            partitions: 1,
            lease_ttl: Self::DEFAULT_LEASE_TTL,
            renew_every: Duration::from_secs(1),
            acquire_wait: Self::DEFAULT_LEASE_TTL * 2,
            addr: None,
            peer_addr: None,
            standby: None,
            read_cache_bytes: postgres_cache::READ_CACHE_BYTES,
            commits_in_flight: postgres_commit::IN_FLIGHT_INLINE,
        }
    }
}

/// What a standby tells the node it runs in (`cluster::Router`), and how it is woken.
#[derive(Clone)]
pub struct StandbyHooks {
    /// Called on each try with the partition's holder (its node id and peer address), or
    /// `None` when no live lease is held.
    pub holder: Arc<dyn Fn(Option<String>, Option<String>) + Send + Sync>,
    /// Notified to try again at once instead of after `renew_every` (a forwarded request
    /// found the holder gone).
    pub wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for StandbyHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StandbyHooks")
    }
}

/// One partition as the balancer of a [`PgNode`] sees it (`ojs_partitions ⋈ ojs_nodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRoute {
    pub part: u32,
    /// The node that took it last (it may have expired: see `live`).
    pub owner: Option<String>,
    pub epoch: i64,
    /// Whether the owner's lease runs (database time).
    pub live: bool,
    /// The owner's peer listener, if it registered one.
    pub peer_addr: Option<String>,
    /// The owner's client listener, if it registered one.
    pub client_addr: Option<String>,
}

/// `NodeHooks::routes`.
pub type RoutesHook = Arc<dyn Fn(&[PartRoute]) + Send + Sync>;

/// What a [`PgNode`]'s balancer tells the node it runs in (see `postgres_node.rs`). The
/// callbacks run on the store's runtime and must not block; none may hold the `PgNode`.
#[derive(Clone)]
pub struct NodeHooks {
    /// A partition taken, with its store: serve it (dropping the store gives it back).
    pub acquired: Arc<dyn Fn(u32, PostgresStore) + Send + Sync>,
    /// Give this partition up for balance: stop serving it and drop its store.
    pub release: Arc<dyn Fn(u32) + Send + Sync>,
    /// Every tick: one route per partition, in partition order.
    pub routes: RoutesHook,
    /// Notified to run the next tick at once (at least 50 ms after the last).
    pub wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for NodeHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeHooks")
    }
}

/// Open the PostgreSQL store (see `postgres_store.rs`): a [`PgNode`] of its own (migrate
/// the schema, register the node), then partition `opts.part`'s lease, waiting as a
/// standby up to `opts.acquire_wait`. Nothing is written to any local directory.
pub fn open_postgres(opts: &PostgresOptions) -> StoreResult<Box<dyn Store>> {
    Ok(Box::new(PostgresStore::open(opts)?))
}

/// A node id for `--node-id` when none is given: `<hostname>-<pid>`. It is persisted
/// nowhere, so a restarted ojsd is another node and waits for its predecessor's lease to
/// expire (at most the lease TTL after a crash; a clean stop releases it).
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ojsd".to_string());
    format!("{host}-{}", std::process::id())
}

/// fsync every file and directory under `dir` (directories after what they hold), skipping
/// entries that vanish meanwhile (a background flush or compaction may replace a file).
fn sync_tree(dir: &Path) -> StoreResult<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            sync_tree(&entry.path())?;
        } else if kind.is_file() {
            match std::fs::File::open(entry.path()) {
                Ok(f) => f.sync_all()?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    sync_dir(dir)
}

/// fsync a directory, so that the entries created, renamed or removed in it survive a
/// power cut (the data of a file and its name in a directory are made durable apart).
pub(crate) fn sync_dir(dir: &Path) -> StoreResult<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Take the exclusive `flock` a store holds on `path` while it runs (fjall's `lock`, sled's
/// `db`), creating the file if needed, so that removing or repairing files before the store
/// opens cannot race another ojsd starting on the same directory: `Locked` if it is held.
/// Released when the returned file is dropped, before the store takes it itself.
pub(crate) fn lock_file(dir: &Path, path: &Path) -> StoreResult<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Create `dir` if needed; a file (or a file on its path) standing where the directory
/// should be is `NotADirectory` naming that file, not a bare "File exists". The directories
/// it creates are made durable (each one's parent fsynced): without that a power cut can
/// take the whole new data dir, and whatever was acknowledged in it, with it.
pub(crate) fn ensure_dir(dir: &Path) -> StoreResult<()> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let existing = abs.ancestors().find(|p| p.is_dir()).map(Path::to_path_buf);
    match std::fs::create_dir_all(dir) {
        Ok(()) => {
            if let Some(existing) = existing {
                for created in abs.ancestors().take_while(|p| *p != existing) {
                    if let Some(parent) = created.parent() {
                        sync_dir(parent)?;
                    }
                }
            }
            Ok(())
        }
        Err(e) => {
            let not_dir = dir
                .ancestors()
                .find(|p| p.exists() && !p.is_dir())
                .map(Path::to_path_buf);
            match not_dir {
                Some(path) => Err(StoreError::NotADirectory { path }),
                None => Err(StoreError::Io(e)),
            }
        }
    }
}

/// Bytes allocated on disk to the files under `dir` (what `du` reports): preallocated but
/// unwritten space (fjall's journal) and holes in sparse files do not count.
pub fn allocated_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            // A file removed by a background compaction while we walk is not an error.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    Ok(total)
}
