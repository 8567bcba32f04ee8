//! The engine's notion of time. In production it is the system clock; a server started with
//! `--test-clock` lets tests move it forward (`CLOCK ADVANCE`) instead of sleeping.

use chrono::{DateTime, Duration, Utc};

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
        Utc::now() + Duration::milliseconds(self.offset_ms)
    }

    pub fn is_adjustable(&self) -> bool {
        self.adjustable
    }

    /// Returns false when the clock is the real one.
    pub fn advance(&mut self, ms: i64) -> bool {
        if self.adjustable {
            self.offset_ms = self.offset_ms.saturating_add(ms);
        }
        self.adjustable
    }
}
