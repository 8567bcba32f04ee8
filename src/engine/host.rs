//! Several engines on one thread: a cluster node's partitions (`--engine-threads`).
//!
//! Each partition has an engine of its own (its index, timers, store and commits). Alone on
//! a thread, an engine sleeps when its channel is empty and is woken for the next message,
//! so a node with many partitions sleeps and wakes once per partition's batch: measured
//! (bench/RESULTS.md, rounds 14 and 15), 8 partitions on one node cost the engines 38 µs of
//! CPU per job against 27 for one, a third of it crossbeam's spinning and yielding before
//! each sleep. A host is one thread that runs several engines, so that what wakes it for one
//! partition's message also serves the others' that arrived meanwhile.
//!
//! - Each engine keeps its own channel. A hosted engine's [`Inbox`] also rings the host's
//!   doorbell after a send, once until the host takes the ring up (an atomic flag per
//!   engine, so a burst of messages costs one ring).
//! - The host thread waits for a ring or for the earliest engine's wait budget (its
//!   timers, FETCH deadlines), then runs one iteration of each engine rung or due, each
//!   draining its own channel as the lone engine thread does ([`Engine::iterate`]).
//! - An engine is driven by its host's thread only, so each partition keeps one writer.
//!   What an iteration blocks on (a store read, a full commit pipeline) holds up the other
//!   engines of that host for as long.
//! - An engine that stops (shutdown, or a store error such as a lost lease) or panics is
//!   dropped on the host thread, and its `ended` callback reports how it ended; the
//!   others go on.
//! - Pipelined engines (`--commit-pipeline`, PostgreSQL's default) also share one sync
//!   thread per host (`commit::SharedSync`) instead of one each.

use super::inbox::Bell;
use super::Engine;
use crate::store::StoreError;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a hosted engine reports when it ends.
pub type Ended = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

enum HostMsg {
    Rung(u64),
    Add(Box<Hosted>),
    /// The host's owner let it go: end once no engine is left.
    Close,
}

struct Hosted {
    engine: Engine,
    bell: Arc<Bell>,
    /// When the engine must run even without a message (its wait budget).
    due: Instant,
    ended: Ended,
}

/// A thread that runs engines. Dropping it lets the thread end once its engines have.
pub struct Host {
    tx: Sender<HostMsg>,
    next: u64,
    /// Engines handed over and not ended yet (the host thread counts the ends).
    engines: Arc<AtomicUsize>,
    /// The sync thread of its pipelined engines, once it has one.
    sync: Option<super::commit::SharedSync>,
}

impl Host {
    pub fn start(name: &str) -> std::io::Result<Host> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let engines = Arc::new(AtomicUsize::new(0));
        let count = engines.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || host_loop(rx, count))?;
        Ok(Host {
            tx,
            next: 0,
            engines,
            sync: None,
        })
    }

    /// The sync thread this host's pipelined engines share, started on first use.
    pub(super) fn sync(&mut self) -> std::io::Result<&mut super::commit::SharedSync> {
        let sync = match self.sync.take() {
            Some(s) => s,
            None => super::commit::SharedSync::start()?,
        };
        Ok(self.sync.insert(sync))
    }

    /// Engines handed to this host that have not ended.
    pub fn engines(&self) -> usize {
        self.engines.load(Ordering::SeqCst)
    }

    /// A doorbell for the next engine, and the slot it rings.
    pub(super) fn bell(&mut self) -> Arc<Bell> {
        self.next += 1;
        let (slot, host) = (self.next, self.tx.clone());
        Arc::new(Bell::new(slot, move || {
            let _ = host.send(HostMsg::Rung(slot));
        }))
    }

    /// Run `engine` (whose inbox rings `bell`) on this host from now on.
    pub(super) fn add(
        &mut self,
        engine: Engine,
        bell: Arc<Bell>,
        ended: Ended,
    ) -> Result<(), StoreError> {
        let hosted = Box::new(Hosted {
            engine,
            bell,
            due: Instant::now(),
            ended,
        });
        self.engines.fetch_add(1, Ordering::SeqCst);
        self.tx.send(HostMsg::Add(hosted)).map_err(|_| {
            self.engines.fetch_sub(1, Ordering::SeqCst);
            StoreError::Other("the engine host thread is gone".into())
        })
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.tx.send(HostMsg::Close);
    }
}

fn host_loop(rx: Receiver<HostMsg>, count: Arc<AtomicUsize>) {
    let mut engines: HashMap<u64, Hosted> = HashMap::new();
    // Engines to run next: rung, or with messages left over from their last batch.
    let mut ready: Vec<u64> = Vec::new();
    let mut closing = false;
    loop {
        if closing && engines.is_empty() {
            return;
        }
        let first = if ready.is_empty() {
            match engines.values().map(|h| h.due).min() {
                Some(due) => {
                    match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                        Ok(m) => Some(m),
                        Err(RecvTimeoutError::Timeout) => None,
                        // Not while an engine is hosted (its bell holds a sender); if
                        // ever, wait for the earliest engine instead of spinning.
                        Err(RecvTimeoutError::Disconnected) => {
                            std::thread::sleep(due.saturating_duration_since(Instant::now()));
                            None
                        }
                    }
                }
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                },
            }
        } else {
            None
        };
        for m in first.into_iter().chain(rx.try_iter()) {
            match m {
                HostMsg::Rung(slot) => ready.push(slot),
                HostMsg::Add(h) => {
                    ready.push(h.bell.slot());
                    engines.insert(h.bell.slot(), *h);
                }
                HostMsg::Close => closing = true,
            }
        }
        let now = Instant::now();
        ready.extend(
            engines
                .iter()
                .filter(|(_, h)| h.due <= now)
                .map(|(s, _)| *s),
        );
        ready.sort_unstable();
        ready.dedup();
        for slot in std::mem::take(&mut ready) {
            let Some(h) = engines.get_mut(&slot) else {
                continue; // ended since it rang
            };
            h.bell.take_up();
            let (batch, more, gone) = h.engine.take_batch(None);
            if more {
                ready.push(slot);
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| h.engine.iterate(batch, gone)));
            let end = match outcome {
                Ok(Ok(false)) => {
                    h.due = Instant::now() + h.engine.wait_budget();
                    continue;
                }
                Ok(Ok(true)) => Ok(()),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(StoreError::Other("the engine panicked".into())),
            };
            if let Some(h) = engines.remove(&slot) {
                let Hosted { engine, ended, .. } = h;
                // Its pipeline's syncer finishes and its store lets go, as when an
                // engine's own thread returns.
                let _ = catch_unwind(AssertUnwindSafe(move || drop(engine)));
                count.fetch_sub(1, Ordering::SeqCst);
                ended(end);
            }
        }
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod host_tests;
