//! Who gets in: the connection cap with its handshake pool ([`Gate`]). The throttle on
//! password guessing is `auth::AuthLimiter`, shared with the other listeners.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves its map consistent, so a poisoned lock is usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Admission to the TCP listener. Every connection holds one of `max` permits for its whole
/// life. Connections that have not finished HELLO also sit in a pool of at most
/// `max_handshaking`; when a newcomer finds that pool full, or all permits taken while some
/// are held by handshaking connections, the one that has waited longest for its HELLO is
/// dropped to make room. So sockets that never say HELLO can delay a client by at most one
/// pool's worth of newer arrivals, never lock it out; only connections that completed HELLO
/// can fill the server, and then a newcomer is refused.
pub struct Gate {
    permits: Arc<Semaphore>,
    max_handshaking: usize,
    /// Handshaking connections by arrival, each holding its permit: evicting one frees its
    /// permit at once, before its task has even noticed.
    handshaking: Mutex<BTreeMap<u64, Waiting>>,
    next: AtomicU64,
}

struct Waiting {
    permit: OwnedSemaphorePermit,
    /// Dropped on eviction, which the connection sees as its receiver closing.
    _evict: oneshot::Sender<()>,
}

impl Gate {
    pub fn new(max: usize, max_handshaking: usize) -> Arc<Gate> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Gate {
            permits: Arc::new(Semaphore::new(max)),
            max_handshaking: max_handshaking.clamp(1, max),
            handshaking: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A slot for a new connection, evicting the oldest handshaking one if need be; `None`
    /// when every slot belongs to a connection past HELLO.
    pub fn admit(self: &Arc<Gate>) -> Option<Ticket> {
        let mut hs = lock(&self.handshaking);
        if hs.len() >= self.max_handshaking {
            hs.pop_first();
        }
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // All taken: a handshaking connection makes room, if there is one. Only
                // `admit` takes permits and it holds the lock, so the freed one is ours.
                hs.pop_first()?;
                self.permits.clone().try_acquire_owned().ok()?
            }
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        hs.insert(id, Waiting { permit, _evict: tx });
        Some(Ticket {
            gate: self.clone(),
            id,
            evicted: rx,
            permit: None,
        })
    }

    /// Connections waiting for their HELLO.
    pub fn handshaking(&self) -> usize {
        lock(&self.handshaking).len()
    }
}

/// One admitted connection's slot. Dropping it frees the slot.
pub struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    evicted: oneshot::Receiver<()>,
    /// Set once the connection is established (HELLO accepted).
    permit: Option<OwnedSemaphorePermit>,
}

impl Ticket {
    /// Resolves when the gate dropped this connection from the handshake pool.
    pub async fn evicted(&mut self) {
        if self.permit.is_some() {
            return std::future::pending().await;
        }
        let _ = (&mut self.evicted).await;
    }

    /// HELLO was accepted: leave the handshake pool, keeping the slot. False if the
    /// connection was evicted in the meantime (it must then close).
    pub fn establish(&mut self) -> bool {
        if self.permit.is_some() {
            return true;
        }
        match lock(&self.gate.handshaking).remove(&self.id) {
            Some(w) => {
                self.permit = Some(w.permit);
                true
            }
            None => false,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.permit.is_none() {
            lock(&self.gate.handshaking).remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_handshake_pool_evicts_its_oldest() {
        let gate = Gate::new(10, 2);
        let mut a = gate.admit().unwrap();
        let b = gate.admit().unwrap();
        let c = gate.admit().unwrap();
        assert_eq!(gate.handshaking(), 2);
        // `a` was the oldest: evicted, and it cannot establish any more.
        a.evicted().await;
        assert!(!a.establish());
        drop((b, c));
        assert_eq!(gate.handshaking(), 0);
    }

    #[tokio::test]
    async fn established_connections_are_never_evicted_and_fill_the_server() {
        let gate = Gate::new(3, 3);
        let mut est: Vec<Ticket> = (0..2).map(|_| gate.admit().unwrap()).collect();
        for t in &mut est {
            assert!(t.establish());
        }
        // One slot left: a handshaker takes it, the next newcomer evicts that one.
        let mut h1 = gate.admit().unwrap();
        let h2 = gate.admit().unwrap();
        h1.evicted().await;
        assert!(!h1.establish());
        let mut h2 = h2;
        assert!(h2.establish());
        // Now all three are established: a newcomer is refused.
        assert!(gate.admit().is_none());
        drop(est);
        assert!(gate.admit().is_some());
    }
}
