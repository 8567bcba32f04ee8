//! The engine's notion of time. In production it is the system clock; a server started with
//! `--test-clock` lets tests move it forward (`CLOCK ADVANCE`) instead of sleeping.

//!
//! Clones share one offset: the engine moves it, and the front ends read the same time when
//! they build requests on their own tasks (relative times like `"+PT5S"`, see `intake.rs`).

use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

#[derive(Debug, Default, Clone)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
    adjustable: bool,
}

impl Clock {
    pub fn new(adjustable: bool) -> Clock {
        Clock {
            offset_ms: Arc::default(),
            adjustable,
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        crate::time::add_signed_ms(Utc::now(), self.offset_ms.load(Ordering::Relaxed))
    }

    /// Returns false when the clock is the real one. Only the engine thread advances it.
    pub fn advance(&mut self, ms: i64) -> bool {
        if self.adjustable {
            // Kept so that now() stays inside the representable range: a test may jump far
            // ahead, but never past year 9999 (or before the epoch).
            let real = Utc::now().timestamp_millis();
            let offset = self.offset_ms.load(Ordering::Relaxed);
            let target = crate::time::offset_ms(real.saturating_add(offset), ms);
            self.offset_ms
                .store(target.saturating_sub(real), Ordering::Relaxed);
        }
        self.adjustable
    }
}
