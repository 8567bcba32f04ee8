//! The engine's notion of time. In production it is the system clock; a server started with
//! `--test-clock` lets tests move it forward (`CLOCK ADVANCE`) instead of sleeping.

use chrono::{DateTime, Utc};

#[derive(Debug, Default)]
pub struct Clock {
    offset_ms: i64,
    adjustable: bool,
}

impl Clock {
    pub fn new(adjustable: bool) -> Clock {
        Clock {
            offset_ms: 0,
            adjustable,
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        crate::time::add_signed_ms(Utc::now(), self.offset_ms)
    }

    /// Returns false when the clock is the real one.
    pub fn advance(&mut self, ms: i64) -> bool {
        if self.adjustable {
            // Kept so that now() stays inside the representable range: a test may jump far
            // ahead, but never past year 9999 (or before the epoch).
            let real = Utc::now().timestamp_millis();
            let target = crate::time::offset_ms(real.saturating_add(self.offset_ms), ms);
            self.offset_ms = target.saturating_sub(real);
        }
        self.adjustable
    }
}
