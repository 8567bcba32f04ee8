//! Who gets in: the connection cap with its handshake pool ([`Gate`]), and the throttle on
//! password guessing ([`AuthLimiter`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
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

/// Failed credentials per client address, as token buckets: `burst` failures are allowed,
/// and the allowance refills at `burst` per `window`. An address with no allowance left is
/// refused before its password is checked. One limiter serves every listener (the OJS and
/// Faktory TCP ports' HELLO, the HTTP bearer token), so an address cannot try its
/// allowance once per front end. At most `cap` addresses are tracked; a full
/// bucket is the same as no entry and is dropped, and when the map is full of live
/// entries the least recently failed eighth is forgotten.
pub struct AuthLimiter {
    burst: f64,
    window: Duration,
    cap: usize,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// How many client addresses the limiter remembers.
pub const MAX_TRACKED_ADDRESSES: usize = 10_000;

impl std::fmt::Debug for AuthLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthLimiter")
            .field("burst", &self.burst)
            .field("window", &self.window)
            .field("tracked", &self.tracked())
            .finish()
    }
}

impl AuthLimiter {
    /// The one limiter of a server: `--max-auth-failures` per `--auth-failure-window-ms`,
    /// remembering at most [`MAX_TRACKED_ADDRESSES`].
    pub fn shared(max_failures: u32, window: Duration) -> Arc<AuthLimiter> {
        Arc::new(AuthLimiter::new(
            max_failures,
            window,
            MAX_TRACKED_ADDRESSES,
        ))
    }

    /// `burst` of 0 turns the limiter off.
    pub fn new(burst: u32, window: Duration, cap: usize) -> AuthLimiter {
        AuthLimiter {
            burst: f64::from(burst),
            window: window.max(Duration::from_millis(1)),
            cap: cap.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn refilled(&self, b: Bucket, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + elapsed * self.burst / self.window.as_secs_f64()).min(self.burst)
    }

    /// `Ok` if `ip` may try a password now; otherwise how long until it may.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.burst <= 0.0 {
            return Ok(());
        }
        let buckets = lock(&self.buckets);
        let Some(b) = buckets.get(&key(ip)) else {
            return Ok(());
        };
        let tokens = self.refilled(*b, now);
        if tokens >= 1.0 {
            Ok(())
        } else {
            let per_token = self.window.as_secs_f64() / self.burst;
            Err(Duration::try_from_secs_f64((1.0 - tokens) * per_token).unwrap_or(self.window))
        }
    }

    /// `ip` sent a wrong password (or bearer token).
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        if self.burst <= 0.0 {
            return;
        }
        let ip = key(ip);
        let mut buckets = lock(&self.buckets);
        if !buckets.contains_key(&ip) && buckets.len() >= self.cap {
            self.make_room(&mut buckets, now);
        }
        let b = buckets.entry(ip).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = self.refilled(*b, now);
        *b = Bucket {
            tokens: (tokens - 1.0).max(0.0),
            at: now,
        };
    }

    fn make_room(&self, buckets: &mut HashMap<IpAddr, Bucket>, now: Instant) {
        buckets.retain(|_, b| self.refilled(*b, now) < self.burst);
        if buckets.len() < self.cap {
            return;
        }
        let mut ages: Vec<Instant> = buckets.values().map(|b| b.at).collect();
        let n = (self.cap / 8).max(1).min(ages.len());
        let (_, cut, _) = ages.select_nth_unstable(n - 1);
        let cut = *cut;
        let mut dropped = 0;
        buckets.retain(|_, b| {
            if dropped < n && b.at <= cut {
                dropped += 1;
                false
            } else {
                true
            }
        });
    }

    /// Addresses tracked right now.
    pub fn tracked(&self) -> usize {
        lock(&self.buckets).len()
    }
}

/// IPv6 clients are counted per /64 (one host usually has a whole /64 to pick from); an
/// IPv4-mapped address counts as the IPv4 one.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn v4(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn failures_past_the_burst_are_refused_until_the_window_refills() {
        let l = AuthLimiter::new(3, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        let ip = v4(1);
        for _ in 0..3 {
            assert!(l.check(ip, t0).is_ok());
            l.failed(ip, t0);
        }
        let wait = l.check(ip, t0).unwrap_err();
        assert!(wait <= Duration::from_secs(20) && wait > Duration::from_secs(19));
        assert!(
            l.check(v4(2), t0).is_ok(),
            "another address is not affected"
        );
        // One token back after a third of the window.
        assert!(l.check(ip, t0 + Duration::from_secs(19)).is_err());
        assert!(l.check(ip, t0 + Duration::from_secs(20)).is_ok());
    }

    #[test]
    fn zero_burst_turns_it_off() {
        let l = AuthLimiter::new(0, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        for _ in 0..100 {
            l.failed(v4(1), t0);
        }
        assert!(l.check(v4(1), t0).is_ok());
        assert_eq!(l.tracked(), 0);
    }

    #[test]
    fn the_map_of_addresses_stays_bounded() {
        let cap = 64;
        let l = AuthLimiter::new(2, Duration::from_secs(60), cap);
        let t0 = Instant::now();
        // Many distinct addresses, each failing twice (a live, empty bucket).
        for i in 0..10 * cap as u32 {
            let now = t0 + Duration::from_millis(u64::from(i));
            l.failed(v4(i), now);
            l.failed(v4(i), now);
            assert!(l.tracked() <= cap, "{} entries after {i}", l.tracked());
        }
        // The newest are still throttled; the oldest were forgotten.
        let end = t0 + Duration::from_millis(10 * cap as u64);
        assert!(l.check(v4(10 * cap as u32 - 1), end).is_err());
        assert!(l.check(v4(0), end).is_ok());
        // Refilled buckets are dropped first when room is needed.
        let later = end + Duration::from_secs(120);
        l.failed(v4(u32::MAX), later);
        assert_eq!(l.tracked(), 1);
    }

    #[test]
    fn ipv6_counts_per_64() {
        let l = AuthLimiter::new(1, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        l.failed("2001:db8::1".parse().unwrap(), t0);
        assert!(l.check("2001:db8::ffff:1".parse().unwrap(), t0).is_err());
        assert!(l.check("2001:db8:0:1::1".parse().unwrap(), t0).is_ok());
        l.failed("::ffff:10.0.0.1".parse().unwrap(), t0);
        assert!(l.check("10.0.0.1".parse().unwrap(), t0).is_err());
    }

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
