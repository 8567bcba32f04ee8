//! Which partition a queue belongs to when a cluster has more than one (`--partitions`),
//! and which one an engine serves. The engine needs it for the one thing it sends across
//! partitions itself: a workflow's jobs in queues of other partitions, and their outcomes
//! coming back (`workflow/outbox.rs`). The cluster's router routes by the same function.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The partition of `queue` among `parts`: the first four bytes of the SHA-256 of its name,
/// big-endian, modulo `parts` (stable across versions and platforms; never Rust's
/// `DefaultHasher`).
pub fn partition_of(queue: &str, parts: u32) -> u32 {
    if parts <= 1 {
        return 0;
    }
    let d = Sha256::digest(queue.as_bytes());
    u32::from_be_bytes([d[0], d[1], d[2], d[3]]) % parts
}

/// The partition an engine serves, of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl Default for Partition {
    fn default() -> Self {
        Partition { index: 0, count: 1 }
    }
}

impl Partition {
    /// The partition of `queue`, when it is not this one.
    pub fn elsewhere(&self, queue: &str) -> Option<u32> {
        let p = partition_of(queue, self.count);
        (p != self.index).then_some(p)
    }
}
