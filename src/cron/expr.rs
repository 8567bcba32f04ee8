//! Cron expression syntax (ojs-cron §3, §4): five fields, or six with seconds first;
//! `*` `,` `-` `/` everywhere; month and weekday names; `L` and `W` in the day of month;
//! `L` and `#` in the day of week; the `@yearly`... aliases; and `@every <duration>`.
//!
//! Parsing produces bit sets, so matching a date is a few mask tests.

use chrono::{Datelike, NaiveDate, Weekday};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Calendar(Calendar),
    /// `@every <duration>`, in milliseconds (at least one second).
    Every(u64),
}

/// A calendar expression: each field as the set of values it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub seconds: u64,
    pub minutes: u64,
    pub hours: u32,
    pub dom: DaySpec,
    /// Bits 1..=12.
    pub months: u16,
    pub dow: WeekSpec,
}

/// The day-of-month field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaySpec {
    /// Bits 1..=31.
    pub days: u32,
    /// `L`: the last day of the month.
    pub last: bool,
    /// `LW`: the last weekday (Mon-Fri) of the month.
    pub last_weekday: bool,
    /// `nW`: bit n set for the weekday nearest to day n.
    pub nearest: u32,
    /// The field began with `*` or `?` (see `Calendar::day_matches`).
    pub star: bool,
}

/// The day-of-week field, days counted from Sunday = 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeekSpec {
    /// Bits 0..=6.
    pub days: u8,
    /// `dL`: bit d set for the last such weekday of the month.
    pub last: u8,
    /// `d#k`: bit k-1 of `nth[d]` set for the k-th such weekday of the month.
    pub nth: [u8; 7],
    pub star: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The shortest `@every` interval: schedules are evaluated at most once a second
/// (ojs-cron §7.3).
pub const MIN_EVERY_MS: u64 = 1000;
/// The longest `@every` interval accepted (ten years).
pub const MAX_EVERY_MS: u64 = 10 * 366 * 24 * 3600 * 1000;

#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// Value of the first name (JAN = 1, SUN = 0).
    first_name: u32,
}

const SECOND: Field = Field::plain("second", 0, 59);
const MINUTE: Field = Field::plain("minute", 0, 59);
const HOUR: Field = Field::plain("hour", 0, 23);
const DOM: Field = Field::plain("day-of-month", 1, 31);
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTHS,
    first_name: 1,
};
const DOW: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &DAYS,
    first_name: 0,
};

impl Field {
    const fn plain(name: &'static str, min: u32, max: u32) -> Field {
        Field {
            name,
            min,
            max,
            names: &[],
            first_name: 0,
        }
    }

    fn value(&self, s: &str) -> Result<u32, String> {
        if let Some(i) = self.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + self.first_name);
        }
        let v: u32 = s
            .parse()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("{}: {s:?} is not a number", self.name))?;
        if v < self.min || v > self.max {
            return Err(format!(
                "{}: {v} is out of range {}-{}",
                self.name, self.min, self.max
            ));
        }
        Ok(v)
    }

    /// One list element without `L`/`W`/`#`: `*`, `n`, `a-b`, each with an optional `/step`.
    fn element(&self, s: &str) -> Result<u64, String> {
        let (base, step) = match s.split_once('/') {
            Some((b, st)) => {
                let span = self.max - self.min + 1;
                let step: u32 = st
                    .parse()
                    .ok()
                    .filter(|n| (1..=span).contains(n) && st.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| {
                        format!(
                            "{}: step {st:?} must be a number from 1 to {span}",
                            self.name
                        )
                    })?;
                (b, Some(step))
            }
            None => (s, None),
        };
        let (lo, hi) = if base == "*" || base == "?" {
            (self.min, self.max)
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, mut b) = (self.value(a)?, self.value(b)?);
            if self.name == DOW.name && b == 0 && a > 0 {
                b = 7; // FRI-SUN
            }
            if a > b {
                return Err(format!("{}: range {base} runs backwards", self.name));
            }
            (a, b)
        } else {
            let a = self.value(base)?;
            // `a/step` runs from a to the end of the field.
            (a, if step.is_some() { self.max } else { a })
        };
        let mut bits = 0u64;
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step.unwrap_or(1);
        }
        Ok(bits)
    }

    fn list(&self, s: &str) -> Result<u64, String> {
        let mut bits = 0;
        for part in s.split(',') {
            if part.is_empty() {
                return Err(format!("{}: empty list element in {s:?}", self.name));
            }
            bits |= self.element(part)?;
        }
        Ok(bits)
    }
}

fn day_of_month(s: &str) -> Result<DaySpec, String> {
    let mut spec = DaySpec {
        star: s.starts_with('*') || s.starts_with('?'),
        ..DaySpec::default()
    };
    for part in s.split(',') {
        let upper = part.to_ascii_uppercase();
        if upper == "L" {
            spec.last = true;
        } else if upper == "LW" {
            spec.last_weekday = true;
        } else if let Some(n) = upper.strip_suffix('W') {
            spec.nearest |= DOM
                .value(n)
                .map(|d| 1 << d)
                .map_err(|e| format!("{e} (in {part:?})"))?;
        } else if part.is_empty() {
            return Err(format!("day-of-month: empty list element in {s:?}"));
        } else {
            spec.days |= DOM.element(part)? as u32;
        }
    }
    Ok(spec)
}

fn day_of_week(s: &str) -> Result<WeekSpec, String> {
    let mut spec = WeekSpec {
        star: s.starts_with('*') || s.starts_with('?'),
        ..WeekSpec::default()
    };
    let day = |d: &str| DOW.value(d).map(|v| (v % 7) as usize);
    for part in s.split(',') {
        let upper = part.to_ascii_uppercase();
        if let Some((d, k)) = upper.split_once('#') {
            let k: u8 = k
                .parse()
                .ok()
                .filter(|k| (1..=5).contains(k))
                .ok_or_else(|| format!("day-of-week: {part:?}: the n of d#n must be 1 to 5"))?;
            spec.nth[day(d)?] |= 1 << (k - 1);
        } else if upper == "L" {
            return Err("day-of-week: L needs a weekday before it, e.g. 5L".into());
        } else if let Some(d) = upper.strip_suffix('L') {
            spec.last |= 1 << day(d)?;
        } else if part.is_empty() {
            return Err(format!("day-of-week: empty list element in {s:?}"));
        } else {
            let bits = DOW.element(part)?;
            // 7 is Sunday too.
            spec.days |= ((bits | (bits >> 7)) & 0x7f) as u8;
        }
    }
    Ok(spec)
}

/// `@every` durations in Go's `time.Duration` form: `1h30m`, `45s`, `1.5h`, `1500ms`.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?} is not a duration such as 30s, 5m, 1h30m or 500ms");
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return Err(bad()),
        };
        total += number * factor;
        rest = &rest[unit_end..];
    }
    if total.fract() != 0.0 {
        return Err(format!("{s:?} is not a whole number of milliseconds"));
    }
    if total < MIN_EVERY_MS as f64 {
        return Err(format!("@every {s}: the interval must be at least 1s"));
    }
    if total > MAX_EVERY_MS as f64 {
        return Err(format!(
            "@every {s}: the interval must be at most ten years"
        ));
    }
    Ok(total as u64)
}

/// Parse an expression. The message of an error says what is wrong, for the client.
pub fn parse(expr: &str) -> Result<Expr, String> {
    let expr = expr.trim();
    if expr.is_empty() {
        return Err("the expression is empty".into());
    }
    if let Some(alias) = expr.strip_prefix('@') {
        let (word, arg) = match alias.split_once(char::is_whitespace) {
            Some((w, a)) => (w, a.trim()),
            None => (alias, ""),
        };
        let standard = match word.to_ascii_lowercase().as_str() {
            "yearly" | "annually" => "0 0 1 1 *",
            "monthly" => "0 0 1 * *",
            "weekly" => "0 0 * * 0",
            "daily" | "midnight" => "0 0 * * *",
            "hourly" => "0 * * * *",
            "every" if !arg.is_empty() => return parse_duration_ms(arg).map(Expr::Every),
            "every" => return Err("@every needs a duration, e.g. @every 5m".into()),
            _ => return Err(format!("unknown special expression @{word}")),
        };
        if !arg.is_empty() {
            return Err(format!("@{word} takes no argument"));
        }
        return parse(standard);
    }
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let (seconds, rest) = match fields.len() {
        5 => (1u64, &fields[..]),
        6 => (SECOND.list(fields[0])?, &fields[1..]),
        n => {
            return Err(format!(
                "expected 5 fields (or 6 with seconds first), got {n}"
            ))
        }
    };
    Ok(Expr::Calendar(Calendar {
        seconds,
        minutes: MINUTE.list(rest[0])?,
        hours: HOUR.list(rest[1])? as u32,
        dom: day_of_month(rest[2])?,
        months: MONTH.list(rest[3])? as u16,
        dow: day_of_week(rest[4])?,
    }))
}

pub fn days_in_month(year: i32, month: u32) -> u32 {
    let (y, m) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    NaiveDate::from_ymd_opt(y, m, 1)
        .and_then(|d| d.pred_opt())
        .map(|d| d.day())
        .unwrap_or(28)
}

fn weekday_of(year: i32, month: u32, day: u32) -> Option<Weekday> {
    NaiveDate::from_ymd_opt(year, month, day).map(|d| d.weekday())
}

/// Quartz's `nW`: day n if it is a weekday, else the nearest weekday in the same month.
fn nearest_weekday(year: i32, month: u32, n: u32) -> Option<u32> {
    let last = days_in_month(year, month);
    if n > last {
        return None; // `31W` in a 30-day month: no such day, no fire
    }
    Some(match weekday_of(year, month, n)? {
        Weekday::Sat if n == 1 => 3,
        Weekday::Sat => n - 1,
        Weekday::Sun if n == last => n - 2,
        Weekday::Sun => n + 1,
        _ => n,
    })
}

impl DaySpec {
    fn matches(&self, date: NaiveDate) -> bool {
        let (y, m, d) = (date.year(), date.month(), date.day());
        if self.days & (1 << d) != 0 {
            return true;
        }
        let last = days_in_month(y, m);
        if self.last && d == last {
            return true;
        }
        if self.last_weekday {
            let lw = match weekday_of(y, m, last) {
                Some(Weekday::Sat) => last - 1,
                Some(Weekday::Sun) => last - 2,
                _ => last,
            };
            if d == lw {
                return true;
            }
        }
        let mut bits = self.nearest;
        while bits != 0 {
            let n = bits.trailing_zeros();
            bits &= bits - 1;
            if nearest_weekday(y, m, n) == Some(d) {
                return true;
            }
        }
        false
    }
}

impl WeekSpec {
    fn matches(&self, date: NaiveDate) -> bool {
        let wd = date.weekday().num_days_from_sunday() as usize;
        let d = date.day();
        if self.days & (1 << wd) != 0 {
            return true;
        }
        if self.last & (1 << wd) != 0 && d + 7 > days_in_month(date.year(), date.month()) {
            return true;
        }
        self.nth[wd] & (1 << ((d - 1) / 7)) != 0
    }
}

impl Calendar {
    pub fn month_matches(&self, month: u32) -> bool {
        self.months & (1 << month) != 0
    }

    /// Vixie cron's rule: when both day fields are restricted, either may match; when one
    /// of them starts with `*` (or `?`), both must.
    pub fn day_matches(&self, date: NaiveDate) -> bool {
        let (dom, dow) = (self.dom.matches(date), self.dow.matches(date));
        if self.dom.star || self.dow.star {
            dom && dow
        } else {
            dom || dow
        }
    }
}
