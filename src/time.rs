//! Checked time arithmetic. Every sum of a timestamp and a duration in the server goes
//! through here, so no client value (a retry interval, a timeout, a period, a clock
//! advance) can overflow chrono's range and panic the engine thread, or wrap an integer.
//!
//! Two rules:
//! - **Inputs are bounded where they enter.** A duration a client gives is at most
//!   [`MAX_DURATION`] (100 years) and a timeout at most [`MAX_TIMEOUT_SECS`]; anything
//!   larger is refused with a clear error at PUSH (or cron/workflow registration), so the
//!   server never stores a policy it cannot apply.
//! - **Sums saturate.** A sum that would pass [`max_time`] (the last millisecond of year
//!   9999, the latest instant RFC 3339 can write) is that instant; one before the epoch is
//!   the epoch. Saturation is a second line of defence: with the bounds above, and the
//!   engine clock itself kept in range, no sum in normal use gets near either end.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;

/// The longest duration a client may give anywhere (retry intervals, unique periods,
/// timeouts): 100 years of 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// [`MAX_DURATION`] as ISO 8601, for error messages.
pub const MAX_DURATION_ISO: &str = "P36500D";

/// The longest visibility timeout, seconds (the same 100 years).
pub const MAX_TIMEOUT_SECS: u64 = MAX_DURATION.as_secs();

/// The latest instant the server represents: 9999-12-31T23:59:59.999Z.
pub fn max_time() -> DateTime<Utc> {
    // A constant date: the unwrap-free fallback can never be taken.
    Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
        .single()
        .and_then(|t| t.checked_add_signed(chrono::Duration::milliseconds(999)))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The earliest instant the server represents: the Unix epoch.
pub fn min_time() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

/// `max_time()` in milliseconds since the epoch.
pub fn max_ms() -> i64 {
    max_time().timestamp_millis()
}

/// A duration in whole milliseconds as an `i64`, saturating at `i64::MAX`.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Clamp to `[min_time, max_time]`.
pub fn clamp(t: DateTime<Utc>) -> DateTime<Utc> {
    t.clamp(min_time(), max_time())
}

/// `t + d`, saturating at [`max_time`].
pub fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    add_signed_ms(t, ms(d))
}

/// `t - d`, saturating at [`min_time`].
pub fn sub(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    add_signed_ms(t, ms(d).saturating_neg())
}

/// `t + ms` for a signed number of milliseconds, saturating at both ends.
pub fn add_signed_ms(t: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
    let sum = chrono::Duration::try_milliseconds(ms).and_then(|d| t.checked_add_signed(d));
    match sum {
        Some(s) => clamp(s),
        None if ms < 0 => min_time(),
        None => max_time(),
    }
}

/// A visibility timeout of `secs` seconds in milliseconds, saturating. PUSH refuses more
/// than [`MAX_TIMEOUT_SECS`]; the engine and the rebuild both convert with this one
/// function, so a job behaves the same before and after a restart.
pub fn timeout_ms(secs: u64) -> i64 {
    i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000)
}

/// Milliseconds since the epoch plus a duration, saturating at [`max_ms`].
pub fn add_ms(at_ms: i64, d: Duration) -> i64 {
    at_ms.saturating_add(ms(d)).min(max_ms())
}

/// Milliseconds since the epoch plus signed milliseconds, kept in `[0, max_ms]`.
pub fn offset_ms(at_ms: i64, delta_ms: i64) -> i64 {
    at_ms.saturating_add(delta_ms).clamp(0, max_ms())
}

/// The number of milliseconds from `a` to `b` (negative when `b` is earlier), saturating.
pub fn between_ms(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    b.timestamp_millis().saturating_sub(a.timestamp_millis())
}

/// Refuse a client duration longer than [`MAX_DURATION`]. `what` names the field.
pub fn check_duration(what: &str, d: Duration) -> Result<(), String> {
    if d > MAX_DURATION {
        Err(format!(
            "{what} must be at most {MAX_DURATION_ISO} (100 years)"
        ))
    } else {
        Ok(())
    }
}

/// Refuse a timestamp the server cannot add to or write back: after [`max_time`] once in
/// UTC (`9999-12-31T23:59:59-05:00` is in year 10000). Earlier ones are fine: a past
/// `scheduled_at` means "now".
pub fn check_timestamp(what: &str, t: DateTime<Utc>) -> Result<(), String> {
    if t > max_time() {
        Err(format!(
            "{what} must be no later than 9999-12-31T23:59:59.999Z"
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate_instead_of_panicking() {
        let now = Utc::now();
        assert_eq!(add(now, Duration::MAX), max_time());
        assert_eq!(add(max_time(), Duration::from_millis(1)), max_time());
        assert_eq!(sub(now, Duration::MAX), min_time());
        assert_eq!(add_signed_ms(now, i64::MAX), max_time());
        assert_eq!(add_signed_ms(now, i64::MIN), min_time());
        assert_eq!(add_ms(i64::MAX, Duration::MAX), max_ms());
        assert_eq!(offset_ms(0, i64::MIN), 0);
        assert_eq!(ms(Duration::MAX), i64::MAX);
        assert_eq!(between_ms(min_time(), max_time()), max_ms());
        let d = Duration::from_secs(90);
        assert_eq!(add(now, d), now + chrono::Duration::seconds(90));
        assert_eq!(sub(now, d), now - chrono::Duration::seconds(90));
    }

    #[test]
    fn the_bounds_are_printable_and_parse_back() {
        let s = crate::job::format_ts(max_time());
        assert_eq!(crate::job::parse_ts(&s), Some(max_time()), "{s}");
        assert!(check_duration("x", MAX_DURATION).is_ok());
        assert!(check_duration("x", MAX_DURATION + Duration::from_nanos(1)).is_err());
        assert!(check_timestamp("t", max_time()).is_ok());
        assert!(check_timestamp("t", max_time() + chrono::Duration::milliseconds(1)).is_err());
    }
}
