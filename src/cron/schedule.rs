//! When an expression fires (ojs-cron §4.1, §5). Calendar expressions are matched against
//! wall-clock time in the entry's IANA zone and then placed on the UTC time line:
//!
//! - a wall-clock time that does not exist (spring forward) does not fire; the gap is
//!   reported once, as an occurrence of kind [`Kind::DstSkip`] at the instant the clocks
//!   jumped, so the engine can emit `cron.skipped` with reason `dst_skip`;
//! - a wall-clock time that happens twice (fall back) fires once, at the first of the two.
//!
//! `@every` intervals ignore the zone: they fire at `anchor + k * interval`.

use super::expr::{Calendar, Expr};
use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset,
    TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// How far ahead a search looks before deciding the expression never fires. The rarest
/// expressible dates (the fifth Monday of February) come round every 28 years.
const HORIZON_YEARS: i32 = 60;
/// A bound on candidates examined by one search (the repeated hour of a fall-back day
/// costs one per matching second, at most 86,400 for the longest known shift).
const MAX_CANDIDATES: usize = 200_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A job is due.
    Fire,
    /// Matching wall-clock times fell into a DST gap and do not exist: nothing fires.
    DstSkip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    pub at: DateTime<Utc>,
    pub kind: Kind,
    /// For a `DstSkip`: the first wall-clock time of the gap that matched.
    pub local: Option<NaiveDateTime>,
}

impl Occurrence {
    fn fire(at: DateTime<Utc>) -> Occurrence {
        Occurrence {
            at,
            kind: Kind::Fire,
            local: None,
        }
    }
}

/// A parsed expression with its zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub expr: Expr,
    pub tz: Tz,
}

/// IANA names only (ojs-cron §5.1): `UTC`, or `Area/Location`. Fixed offsets (`+05:00`,
/// `UTC+5`, `Etc/GMT+5`) and abbreviations or legacy zones (`EST`, `PST8PDT`) are refused.
pub fn parse_timezone(name: &str) -> Result<Tz, String> {
    let refuse = || {
        format!(
            "timezone {:?} is not an IANA time zone name such as \"UTC\" or \"America/New_York\" \
             (fixed offsets and abbreviations are not accepted)",
            name.chars().take(64).collect::<String>()
        )
    };
    let offset_like = name.starts_with("Etc/GMT") && name.len() > "Etc/GMT".len();
    if name != "UTC" && (!name.contains('/') || offset_like) {
        return Err(refuse());
    }
    name.parse::<Tz>().map_err(|_| refuse())
}

impl Schedule {
    pub fn parse(expr: &str, timezone: &str) -> Result<Schedule, ScheduleError> {
        let expr = super::expr::parse(expr).map_err(ScheduleError::Expression)?;
        let tz = parse_timezone(timezone).map_err(ScheduleError::Timezone)?;
        Ok(Schedule { expr, tz })
    }

    /// The first occurrence after `t` (at `t` too when `inclusive`). `anchor` is where an
    /// `@every` interval counts from. `None` when nothing fires within the horizon.
    pub fn next_after(
        &self,
        t: DateTime<Utc>,
        inclusive: bool,
        anchor: DateTime<Utc>,
    ) -> Option<Occurrence> {
        match &self.expr {
            Expr::Every(ms) => every_after(t, inclusive, anchor, *ms).map(Occurrence::fire),
            Expr::Calendar(cal) => calendar_after(cal, self.tz, t, inclusive),
        }
    }

    /// The next occurrence that fires, passing over DST gaps.
    pub fn next_fire(&self, after: Occurrence, anchor: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut occ = after;
        for _ in 0..8 {
            if occ.kind == Kind::Fire {
                return Some(occ.at);
            }
            occ = self.next_after(occ.at, true, anchor)?;
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    Expression(String),
    Timezone(String),
}

fn every_after(
    t: DateTime<Utc>,
    inclusive: bool,
    anchor: DateTime<Utc>,
    ms: u64,
) -> Option<DateTime<Utc>> {
    let step = i64::try_from(ms).ok().filter(|s| *s > 0)?;
    let since = (t - anchor).num_milliseconds();
    let k = if since < 0 {
        1
    } else if inclusive && since > 0 && since % step == 0 {
        since / step
    } else {
        since / step + 1
    };
    anchor.checked_add_signed(Duration::milliseconds(k.checked_mul(step)?))
}

/// The wall-clock time `t` shows in `tz`, rounded up to a whole second (and moved one
/// second on when `t` is itself a whole second and must be excluded).
fn first_candidate(tz: Tz, t: DateTime<Utc>, inclusive: bool) -> NaiveDateTime {
    let local = t.with_timezone(&tz).naive_local();
    let whole = local.with_nanosecond(0).unwrap_or(local);
    if whole < local || !inclusive {
        whole + Duration::seconds(1)
    } else {
        whole
    }
}

fn calendar_after(cal: &Calendar, tz: Tz, t: DateTime<Utc>, inclusive: bool) -> Option<Occurrence> {
    let after = |u: DateTime<Utc>| u > t || (inclusive && u == t);
    let mut cand = first_candidate(tz, t, inclusive);
    let horizon = NaiveDate::from_ymd_opt(cand.year().checked_add(HORIZON_YEARS)?, 1, 1)?;
    for _ in 0..MAX_CANDIDATES {
        let n = next_local(cal, cand, horizon)?;
        match tz.from_local_datetime(&n) {
            LocalResult::Single(u) => {
                let u = u.with_timezone(&Utc);
                if after(u) {
                    return Some(Occurrence::fire(u));
                }
            }
            // Fall back: the first of the two instants is the one that fires. When it has
            // passed, this is the second pass through the hour and nothing fires.
            LocalResult::Ambiguous(a, b) => {
                let first = a.min(b).with_timezone(&Utc);
                if after(first) {
                    return Some(Occurrence::fire(first));
                }
            }
            LocalResult::None => {
                let at = gap_end(tz, n);
                if after(at) {
                    return Some(Occurrence {
                        at,
                        kind: Kind::DstSkip,
                        local: Some(n),
                    });
                }
            }
        }
        cand = n + Duration::seconds(1);
    }
    None
}

fn offset_secs(tz: Tz, u: DateTime<Utc>) -> i64 {
    tz.offset_from_utc_datetime(&u.naive_utc())
        .fix()
        .local_minus_utc() as i64
}

/// The instant the clocks jumped over the non-existent wall-clock time `n`: the first
/// instant whose wall-clock time is later than `n`.
fn gap_end(tz: Tz, n: NaiveDateTime) -> DateTime<Utc> {
    let as_utc = n.and_utc();
    let before = offset_secs(tz, as_utc - Duration::days(1));
    let after = offset_secs(tz, as_utc + Duration::days(1));
    // With the offset before the jump `n` would be at `hi`; with the one after, at `lo`.
    let mut lo = (as_utc - Duration::seconds(after)).timestamp();
    let mut hi = (as_utc - Duration::seconds(before)).timestamp();
    let later = |s: i64| {
        DateTime::from_timestamp(s, 0).is_some_and(|u| u.with_timezone(&tz).naive_local() > n)
    };
    if hi <= lo || !later(hi) {
        return DateTime::from_timestamp(hi.max(lo), 0).unwrap_or(as_utc);
    }
    // Invariant: !later(lo) (or lo is below the range), later(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if later(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0).unwrap_or(as_utc)
}

fn next_bit(mask: u64, from: u32, max: u32) -> Option<u32> {
    (from..=max).find(|v| mask & (1 << v) != 0)
}

fn start_of_day(d: NaiveDate) -> NaiveDateTime {
    d.and_time(NaiveTime::MIN)
}

/// The first wall-clock second at or after `t` that the calendar matches, before `horizon`.
fn next_local(cal: &Calendar, mut t: NaiveDateTime, horizon: NaiveDate) -> Option<NaiveDateTime> {
    loop {
        let date = t.date();
        if date >= horizon {
            return None;
        }
        if !cal.month_matches(date.month()) {
            let (y, m) = if date.month() == 12 {
                (date.year() + 1, 1)
            } else {
                (date.year(), date.month() + 1)
            };
            t = start_of_day(NaiveDate::from_ymd_opt(y, m, 1)?);
            continue;
        }
        if !cal.day_matches(date) {
            t = start_of_day(date.succ_opt()?);
            continue;
        }
        let Some(h) = next_bit(cal.hours as u64, t.hour(), 23) else {
            t = start_of_day(date.succ_opt()?);
            continue;
        };
        if h != t.hour() {
            t = date.and_hms_opt(h, 0, 0)?;
        }
        let Some(m) = next_bit(cal.minutes, t.minute(), 59) else {
            t = date.and_hms_opt(h, 0, 0)? + Duration::hours(1);
            continue;
        };
        if m != t.minute() {
            t = date.and_hms_opt(h, m, 0)?;
        }
        let Some(s) = next_bit(cal.seconds, t.second(), 59) else {
            t = date.and_hms_opt(h, m, 0)? + Duration::minutes(1);
            continue;
        };
        return date.and_hms_opt(h, m, s);
    }
}
