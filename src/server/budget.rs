//! The bytes of replies a connection owes its client, bounded.
//!
//! A client may pipeline commands and not read the replies. Every reply the engine has
//! produced for it is held until the socket takes it, so without a bound a client that
//! pipelines `JOB <id>` for large jobs and never reads pins hundreds of MiB. The reader
//! therefore reserves bytes here before it submits a command, and stops reading the socket
//! while the connection already owes `limit` bytes (TCP backpressure does the rest).
//!
//! A reply's size is only known once the engine has made it, so a command reserves the
//! largest reply it can get ([`worst_case`]); the writer replaces that with the real size
//! when it takes the reply ([`ReplyBudget::settle`]) and gives the bytes back once they
//! have been flushed to the socket ([`ReplyBudget::release`]). Bytes in the codec's write
//! buffer count until the flush that writes them returns.
//!
//! A command is admitted while fewer than `limit` bytes are held, so one command may take
//! the total past the limit: a connection holds at most about `2 * limit` (reservations are
//! capped at `limit`), plus whatever one reply is larger than its reservation.

pub use crate::protocol::reply::worst_case;
use crate::protocol::Reply;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

pub struct ReplyBudget {
    limit: usize,
    held: Mutex<Held>,
    freed: Notify,
    closed: AtomicBool,
}

struct Held {
    bytes: usize,
    /// When replies were last written to the socket.
    written_at: Instant,
}

impl ReplyBudget {
    pub fn new(limit: usize) -> ReplyBudget {
        ReplyBudget {
            limit: limit.max(1),
            held: Mutex::new(Held {
                bytes: 0,
                written_at: Instant::now(),
            }),
            freed: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn held_mut(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic elsewhere while holding this lock cannot leave the count inconsistent
        // (every update is one assignment), so a poisoned lock is still usable.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes reserved or owed right now.
    pub fn held(&self) -> usize {
        self.held_mut().bytes
    }

    /// When replies were last written to the socket (or the budget was made).
    pub fn written_at(&self) -> Instant {
        self.held_mut().written_at
    }

    /// Wait until fewer than `limit` bytes are held, then hold `n` more (capped at
    /// `limit`). Returns the amount reserved, or `None` once the writer has gone.
    pub async fn reserve(&self, n: usize) -> Option<usize> {
        let n = n.clamp(1, self.limit);
        loop {
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            {
                let mut held = self.held_mut();
                if held.bytes < self.limit {
                    held.bytes = held.bytes.saturating_add(n);
                    return Some(n);
                }
            }
            // Only the reader waits here; `notify_one` keeps a wake-up that arrives between
            // the check above and this await.
            self.freed.notified().await;
        }
    }

    /// A reply of `actual` bytes has arrived for a command that reserved `reserved`.
    pub fn settle(&self, reserved: usize, actual: usize) {
        let mut held = self.held_mut();
        held.bytes = held.bytes.saturating_sub(reserved).saturating_add(actual);
        if actual < reserved {
            self.freed.notify_one();
        }
    }

    /// `n` bytes of replies have been written to the socket.
    pub fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut held = self.held_mut();
        held.bytes = held.bytes.saturating_sub(n);
        held.written_at = Instant::now();
        self.freed.notify_one();
    }

    /// The writer has stopped: a reader waiting for room gives up.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.freed.notify_one();
    }
}

/// The bytes `reply` takes on the wire.
pub fn wire_len(reply: &Reply) -> usize {
    match reply {
        Reply::Ok | Reply::Null => 5,
        Reply::Simple(s) => s.len() + 3,
        Reply::Bulk(b) => b.len() + 24,
        Reply::Error(e) => e.message.len() + e.code.as_str().len() + 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Command;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn reader_waits_while_the_limit_is_held_and_resumes_on_release() {
        let b = Arc::new(ReplyBudget::new(100));
        assert_eq!(b.reserve(60).await, Some(60));
        assert_eq!(b.reserve(60).await, Some(60), "admitted below the limit");
        assert_eq!(b.held(), 120);
        // At the limit: the next reservation waits.
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(10).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        // The first reply turned out small: 65 held, room again.
        b.settle(60, 5);
        assert_eq!(waiting.await.unwrap(), Some(10));
        assert_eq!(b.held(), 75);
        // Both written: only the last reservation is left.
        b.release(5);
        b.settle(60, 60);
        b.release(60);
        assert_eq!(b.held(), 10);
    }

    #[tokio::test]
    async fn closing_wakes_a_waiting_reader() {
        let b = Arc::new(ReplyBudget::new(10));
        b.reserve(1000).await.unwrap();
        assert_eq!(b.held(), 10, "a reservation is capped at the limit");
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.reserve(1).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        b.close();
        assert_eq!(waiting.await.unwrap(), None);
    }

    #[test]
    fn counts_never_wrap() {
        let b = ReplyBudget::new(10);
        b.release(5);
        b.settle(100, usize::MAX);
        b.settle(0, usize::MAX);
        assert_eq!(b.held(), usize::MAX);
        assert_eq!(
            worst_case(&Command::Info, usize::MAX, usize::MAX),
            usize::MAX
        );
    }
}
