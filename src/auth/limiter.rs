//! Wrong passwords per client address (PROTOCOL.md §13.4): one allowance for every
//! listener that checks a secret (the TCP ports' HELLO, HTTP bearer tokens, the peer
//! listener's handshake).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
}
