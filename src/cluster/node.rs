//! A cluster node's engines (`--store postgres`): the store's node ([`PgNode`]) hands
//! this node partitions, and this module runs one engine over each and tells the
//! [`Router`] (its requests run there from then on), stops an engine when the balancer
//! asks for its partition back (the store, dropped with the engine, releases the lease),
//! and forgets one whose engine ended (fenced: another node took the partition).
//!
//! With one partition (`--partitions 1`, the default) the node waits as a standby for
//! the partition's lease and runs its one engine as before; the process ends when that
//! engine does.

use super::{Holding, Router};
use crate::engine::{self, Config, EngineHandle, Host, Shared};
use crate::store::{
    NodeHooks, PartRoute, PgNode, PostgresOptions, PostgresStore, Space, StoreError,
};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An engine's thread.
pub type EngineThread = JoinHandle<Result<(), StoreError>>;

enum Event {
    Acquired(u32, PostgresStore),
    Release(u32),
    /// A partition's engine (by its number) ended.
    Ended(u32, u64, Result<(), StoreError>),
}

/// Open the node, then serve: the returned thread ends when this node's engines have
/// stopped (one partition: its engine; several: after [`Router::shutdown`]).
pub fn serve(
    opts: PostgresOptions,
    router: Router,
    cfg: Config,
    shared: Shared,
    wake: Arc<tokio::sync::Notify>,
    opening: Instant,
    rt: tokio::runtime::Handle,
) -> Result<EngineThread, String> {
    let node = PgNode::open(&opts).map_err(|e| format!("cannot open the postgres store: {e}"))?;
    let parts = node.partitions();
    router.set_partitions(parts);
    let finder = node.clone();
    router.set_locator(Arc::new(move |id: uuid::Uuid| {
        let f = finder.locate(Space::Job, id.as_bytes().to_vec());
        Box::pin(async move { f.await.map_err(|e| e.to_string()) })
    }));
    if parts == 1 {
        let store = node.acquire(&opts).map_err(|e| match e {
            StoreError::Leased { .. } => e.to_string(),
            e => format!("cannot open the postgres store: {e}"),
        })?;
        tracing::info!(
            store = "postgres",
            ms = opening.elapsed().as_millis() as u64,
            "store opened"
        );
        let (handle, thread) = engine::start_with(Box::new(store), cfg, shared)
            .map_err(|e| format!("cannot start: {e}"))?;
        router.activate(0, handle);
        tracing::info!("this node holds the partition: serving from its own engine");
        return Ok(thread);
    }
    tracing::info!(
        partitions = parts,
        ms = opening.elapsed().as_millis() as u64,
        "postgres store opened: sharing the partitions out with the other nodes"
    );
    let (tx, rx) = mpsc::channel::<Event>();
    let routes = router.clone();
    let (t1, t2) = (tx.clone(), tx.clone());
    node.run(NodeHooks {
        acquired: Arc::new(move |p, store| {
            let _ = t1.send(Event::Acquired(p, store));
        }),
        release: Arc::new(move |p| {
            let _ = t2.send(Event::Release(p));
        }),
        routes: Arc::new(move |rs: &[PartRoute]| {
            let hs: Vec<Holding> = rs
                .iter()
                .map(|r| Holding {
                    part: r.part,
                    owner: r.owner.clone(),
                    addr: r.peer_addr.clone(),
                    live: r.live,
                })
                .collect();
            routes.set_routes(&hs);
        }),
        wake,
    });
    std::thread::Builder::new()
        .name("ojsd-partitions".into())
        .spawn(move || {
            let run = Engines {
                router,
                cfg,
                parts,
                rt,
                shared,
                tx,
                running: HashMap::new(),
                next: 0,
                hosts: Vec::new(),
            };
            let r = run.serve(rx);
            drop(node);
            r
        })
        .map_err(|e| e.to_string())
}

struct Engines {
    router: Router,
    cfg: Config,
    parts: u32,
    rt: tokio::runtime::Handle,
    shared: Shared,
    tx: mpsc::Sender<Event>,
    /// This node's engines by partition, each with a number (a partition taken again
    /// gets a new one, so the end of an old engine is not taken for the new one's).
    running: HashMap<u32, (u64, EngineHandle)>,
    next: u64,
    /// The threads that run the engines, up to `--engine-threads` (`engine/host.rs`).
    hosts: Vec<Host>,
}

impl Engines {
    fn serve(mut self, rx: mpsc::Receiver<Event>) -> Result<(), StoreError> {
        loop {
            let stopping = self.router.is_stopping();
            if stopping && self.running.is_empty() {
                return Ok(());
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Acquired(p, store)) if !stopping => self.start(p, store),
                // Stopping: the store is dropped, which gives the partition back.
                Ok(Event::Acquired(..)) => {}
                Ok(Event::Release(p)) => {
                    if let Some((_, h)) = self.running.get(&p) {
                        tracing::info!(part = p, "giving the partition up for balance");
                        self.router.deactivate(p);
                        h.shutdown();
                    }
                }
                Ok(Event::Ended(p, n, result)) => {
                    if self.running.get(&p).is_some_and(|(m, _)| *m == n) {
                        self.running.remove(&p);
                        self.router.deactivate(p);
                    }
                    match result {
                        Ok(()) => tracing::info!(part = p, "the partition's engine stopped"),
                        Err(e) => tracing::warn!(part = p, error = %e,
                            "the partition's engine ended; another node serves it"),
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if self.router.is_stopping() {
                for (_, h) in self.running.values() {
                    h.shutdown();
                }
            }
        }
    }

    fn start(&mut self, p: u32, store: PostgresStore) {
        let t0 = Instant::now();
        let wake = Arc::new(tokio::sync::Notify::new());
        let cfg = Config {
            partition: engine::partition::Partition {
                index: p,
                count: self.parts,
            },
            outbox_wake: Some(wake.clone()),
            ..self.cfg.clone()
        };
        let Some(host) = self.host() else {
            return; // logged; the store is dropped and the partition goes back
        };
        self.next += 1;
        let n = self.next;
        let tx = self.tx.clone();
        let ended: engine::Ended = Box::new(move |r| {
            let _ = tx.send(Event::Ended(p, n, r));
        });
        let hosting = &mut self.hosts[host];
        match engine::start_hosted(Box::new(store), cfg, self.shared.clone(), hosting, ended) {
            Ok(handle) => {
                self.router.activate(p, handle.clone());
                super::relay::spawn(&self.rt, p, handle.clone(), self.router.clone(), wake);
                self.running.insert(p, (n, handle));
                tracing::info!(
                    part = p,
                    ms = t0.elapsed().as_millis() as u64,
                    "serving the partition from this node's engine"
                );
            }
            // The store is dropped: the partition goes back, and a node takes it again.
            Err(e) => tracing::error!(part = p, error = %e, "cannot start the partition's engine"),
        }
    }

    /// The host for the next engine ([`pick_host`]), started if it is a new one.
    fn host(&mut self) -> Option<usize> {
        let (most, per_host) = threads(self.cfg.engine_threads);
        let engines: Vec<usize> = self.hosts.iter().map(Host::engines).collect();
        if let Some(i) = pick_host(&engines, most, per_host) {
            return Some(i);
        }
        match Host::start("ojsd-engine") {
            Ok(h) => {
                self.hosts.push(h);
                Some(self.hosts.len() - 1)
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start an engine thread");
                (0..engines.len()).min_by_key(|&i| engines[i])
            }
        }
    }
}

/// Engines a host thread runs before the node starts another, with `--engine-threads 0`
/// (automatic: up to one thread per core).
/// A thread per partition on a node holding a few made each of them sleep and wake per
/// batch, and three nodes of a few partitions each on one machine ran their commands
/// slower with two threads each than with one (bench/RESULTS.md, round 16).
pub const ENGINES_PER_HOST: usize = 4;

/// `--engine-threads` as (most threads, engines a thread runs before another starts).
/// 0, automatic: a thread per [`ENGINES_PER_HOST`] engines, up to one per core. Set: that
/// many threads, the engines spread over them.
fn threads(engine_threads: usize) -> (usize, usize) {
    match engine_threads {
        0 => (
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            ENGINES_PER_HOST,
        ),
        n => (n, 1),
    }
}

/// Where the next engine goes, given the engines each host runs: the host running fewest,
/// or `None` for a new host, while there are fewer than `most` and each runs `per_host`
/// already.
fn pick_host(engines: &[usize], most: usize, per_host: usize) -> Option<usize> {
    let least = (0..engines.len()).min_by_key(|&i| engines[i])?;
    (engines[least] < per_host.max(1) || engines.len() >= most.max(1)).then_some(least)
}

#[cfg(test)]
mod tests {
    use super::{pick_host, ENGINES_PER_HOST as K};

    #[test]
    fn a_new_host_only_once_each_runs_its_share() {
        let pick = |e: &[usize], most| pick_host(e, most, K);
        // The first engine needs a host; a few share it.
        assert_eq!(pick(&[], 2), None);
        assert_eq!(pick(&[1], 2), Some(0));
        assert_eq!(pick(&[K - 1], 2), Some(0));
        // Full: a second thread, then the emptier one.
        assert_eq!(pick(&[K], 2), None);
        assert_eq!(pick(&[K, 1], 2), Some(1));
        // At most `most` threads: past that, the one running fewest.
        assert_eq!(pick(&[K + 2, K], 2), Some(1));
        assert_eq!(pick(&[K, K], 1), Some(0));
        // A host whose engines all ended is used again before a new one starts.
        assert_eq!(pick(&[K, 0], 8), Some(1));
    }

    #[test]
    fn a_set_number_of_threads_spreads_the_engines_over_all_of_them() {
        assert_eq!(super::threads(3), (3, 1));
        assert_eq!(super::threads(0).1, K);
        // --engine-threads 3: a thread each for the first three, then the emptiest.
        assert_eq!(pick_host(&[], 3, 1), None);
        assert_eq!(pick_host(&[1], 3, 1), None);
        assert_eq!(pick_host(&[1, 1], 3, 1), None);
        assert_eq!(pick_host(&[1, 1, 1], 3, 1), Some(0));
        assert_eq!(pick_host(&[2, 1, 2], 3, 1), Some(1));
    }
}
