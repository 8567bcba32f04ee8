//! The way into one engine: its channel and, for an engine run by a host (`host.rs`),
//! the host's doorbell.

use super::Msg;
use crossbeam_channel::{SendError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone)]
pub(crate) struct Inbox {
    tx: Sender<Msg>,
    bell: Option<Arc<Bell>>,
}

/// One hosted engine's doorbell.
pub(crate) struct Bell {
    slot: u64,
    /// Rung and not yet taken up by the host: further sends need not ring.
    rung: AtomicBool,
    ring: Box<dyn Fn() + Send + Sync>,
}

impl Bell {
    /// The doorbell of the engine in `slot`; `ring` tells its host.
    pub(super) fn new(slot: u64, ring: impl Fn() + Send + Sync + 'static) -> Bell {
        Bell {
            slot,
            rung: AtomicBool::new(false),
            ring: Box::new(ring),
        }
    }

    pub(super) fn slot(&self) -> u64 {
        self.slot
    }

    /// The host takes the ring up, before it drains the engine's channel (see
    /// [`Inbox::send`]): the next send rings again.
    pub(super) fn take_up(&self) {
        self.rung.swap(false, Ordering::AcqRel);
    }
}

impl Inbox {
    /// An engine's inbox on a thread of its own.
    pub(super) fn alone(tx: Sender<Msg>) -> Inbox {
        Inbox { tx, bell: None }
    }

    /// A hosted engine's inbox, ringing `bell`.
    pub(super) fn rung(tx: Sender<Msg>, bell: Arc<Bell>) -> Inbox {
        Inbox {
            tx,
            bell: Some(bell),
        }
    }

    /// As crossbeam's `Sender::send`: a message the engine can no longer take comes back.
    #[allow(clippy::result_large_err)]
    pub(super) fn send(&self, msg: Msg) -> Result<(), SendError<Msg>> {
        self.tx.send(msg)?;
        if let Some(b) = &self.bell {
            // The message is queued before the flag is read, and the host takes the ring
            // up before it drains the channel: either this send rings, or the drain that
            // follows the taking up sees the message.
            if !b.rung.swap(true, Ordering::AcqRel) {
                (b.ring)();
            }
        }
        Ok(())
    }

    pub(super) fn same_channel(&self, other: &Inbox) -> bool {
        self.tx.same_channel(&other.tx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A burst of messages rings the host once; once the host has taken the ring up, the
    /// next message rings again. An engine alone on its thread has no bell.
    #[test]
    fn an_inbox_rings_its_host_once_until_the_ring_is_taken_up() {
        let rings = Arc::new(AtomicUsize::new(0));
        let counted = rings.clone();
        let bell = Arc::new(Bell::new(7, move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        let (tx, rx) = crossbeam_channel::unbounded();
        let inbox = Inbox::rung(tx, bell.clone());
        for _ in 0..3 {
            inbox.send(Msg::Shutdown).unwrap();
        }
        assert_eq!(rings.load(Ordering::SeqCst), 1);
        assert_eq!(rx.try_iter().count(), 3);
        bell.take_up();
        inbox.send(Msg::Shutdown).unwrap();
        assert_eq!(rings.load(Ordering::SeqCst), 2);

        let (tx, rx) = crossbeam_channel::unbounded();
        Inbox::alone(tx).send(Msg::Shutdown).unwrap();
        assert_eq!(rx.try_iter().count(), 1);
        assert_eq!(rings.load(Ordering::SeqCst), 2);
    }
}
