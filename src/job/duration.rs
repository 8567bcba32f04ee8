//! ISO 8601 durations (ojs-retry §4) for retry intervals.
//!
//! Accepted form: `P[n]Y[n]M[n]W[n]DT[n]H[n]M[n]S`, designators upper case and in that
//! order, at least one component, and at least one time component after a `T`. Date
//! components have no fixed length, so we fix them: a year is 365 days, a month 30 days,
//! a week 7 days and a day 24 hours. Only the last component may carry a fraction
//! (`.` or `,` separator), as ISO 8601 allows; signs are rejected.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;
const SEC: u128 = NANOS_PER_SEC;
const MIN: u128 = 60 * SEC;
const HOUR: u128 = 60 * MIN;
const DAY: u128 = 24 * HOUR;

/// Designators in the order they must appear, with their length in nanoseconds.
const DATE_UNITS: [(char, u128); 4] = [
    ('Y', 365 * DAY),
    ('M', 30 * DAY),
    ('W', 7 * DAY),
    ('D', DAY),
];
const TIME_UNITS: [(char, u128); 3] = [('H', HOUR), ('M', MIN), ('S', SEC)];

/// Digits past this in a fraction are below a nanosecond even for years; dropped.
const MAX_FRACTION_DIGITS: usize = 18;

/// Parse an ISO 8601 duration such as `PT1S`, `PT0.5S`, `PT5M` or `P1DT12H`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("invalid ISO 8601 duration {s:?}: {why}");
    let rest = s
        .strip_prefix('P')
        .ok_or_else(|| bad("must start with 'P'"))?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    if date.is_empty() && time.is_none() {
        return Err(bad("no components"));
    }
    if time == Some("") {
        return Err(bad("'T' must be followed by a time component"));
    }

    let mut total: u128 = 0;
    let mut fraction_seen = false;
    for (part, units) in [
        (date, &DATE_UNITS[..]),
        (time.unwrap_or(""), &TIME_UNITS[..]),
    ] {
        let mut next_unit = 0;
        let mut chars = part;
        while !chars.is_empty() {
            if fraction_seen {
                return Err(bad("only the last component may have a fraction"));
            }
            let (number, designator, tail) = split_component(chars).map_err(&bad)?;
            let offset = units[next_unit..]
                .iter()
                .position(|(d, _)| *d == designator)
                .ok_or_else(|| {
                    bad(&format!(
                        "unexpected or out-of-order designator '{designator}'"
                    ))
                })?;
            let unit = units[next_unit + offset].1;
            next_unit += offset + 1;
            let (nanos, has_fraction) = component_nanos(number, unit).map_err(&bad)?;
            fraction_seen = has_fraction;
            total = total.checked_add(nanos).ok_or_else(|| bad("too large"))?;
            chars = tail;
        }
    }

    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| bad("too large"))?;
    // The remainder is < 1e9, so it fits in u32.
    let nanos = (total % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Split `"12.5S..."` into (`"12.5"`, `'S'`, `"..."`).
fn split_component(s: &str) -> Result<(&str, char, &str), &'static str> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .ok_or("number without a designator")?;
    let number = &s[..end];
    if number.is_empty() {
        return Err("expected a number");
    }
    let mut tail = s[end..].chars();
    let designator = tail.next().ok_or("number without a designator")?;
    Ok((number, designator, tail.as_str()))
}

/// `number` times `unit` nanoseconds, and whether it had a fraction.
fn component_nanos(number: &str, unit: u128) -> Result<(u128, bool), &'static str> {
    let (int, frac) = match number.split_once(['.', ',']) {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || !frac.is_none_or(all_digits) {
        return Err("malformed number");
    }
    let too_large = "too large";
    let mut nanos = digits_value(int)
        .and_then(|v| v.checked_mul(unit))
        .ok_or(too_large)?;
    if let Some(f) = frac {
        let f = &f[..f.len().min(MAX_FRACTION_DIGITS)];
        let scale = 10u128.pow(f.len() as u32);
        let part = digits_value(f)
            .and_then(|v| v.checked_mul(unit))
            .ok_or(too_large)?
            / scale;
        nanos = nanos.checked_add(part).ok_or(too_large)?;
    }
    Ok((nanos, frac.is_some()))
}

fn digits_value(digits: &str) -> Option<u128> {
    digits.bytes().try_fold(0u128, |acc, b| {
        acc.checked_mul(10)?.checked_add(u128::from(b - b'0'))
    })
}

/// Canonical form in hours, minutes and seconds only, as the retry spec's own examples
/// write them (`PT24H`, not `P1D`): `PT1S`, `PT5M`, `PT1M30S`, `PT0.5S`, `PT0S`.
pub fn format_duration(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s, nanos) = (
        total / 3600,
        (total % 3600) / 60,
        total % 60,
        d.subsec_nanos(),
    );
    let mut out = String::from("PT");
    if h > 0 {
        out.push_str(&format!("{h}H"));
    }
    if m > 0 {
        out.push_str(&format!("{m}M"));
    }
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push_str(&format!("{s}.{}S", frac.trim_end_matches('0')));
    } else if s > 0 || (h == 0 && m == 0) {
        out.push_str(&format!("{s}S"));
    }
    out
}

/// `#[serde(with = "...")]` helper: a `Duration` as an ISO 8601 string on the wire.
pub mod serde_iso {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn parses_time_components() {
        assert_eq!(parse_duration("PT1S"), Ok(secs(1)));
        assert_eq!(parse_duration("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("PT0,25S"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("PT5M"), Ok(secs(300)));
        assert_eq!(parse_duration("PT1H"), Ok(secs(3600)));
        assert_eq!(parse_duration("PT24H"), Ok(secs(86_400)));
        assert_eq!(parse_duration("PT1H30M15S"), Ok(secs(5415)));
        assert_eq!(parse_duration("PT1.5H"), Ok(secs(5400)));
        assert_eq!(parse_duration("PT0S"), Ok(secs(0)));
        assert_eq!(
            parse_duration("PT0.000000001S"),
            Ok(Duration::from_nanos(1))
        );
    }

    #[test]
    fn parses_date_components() {
        assert_eq!(parse_duration("P1D"), Ok(secs(86_400)));
        assert_eq!(parse_duration("P2W"), Ok(secs(14 * 86_400)));
        assert_eq!(parse_duration("P1M"), Ok(secs(30 * 86_400)));
        assert_eq!(parse_duration("P1Y"), Ok(secs(365 * 86_400)));
        assert_eq!(parse_duration("P1DT1M"), Ok(secs(86_400 + 60)));
        assert_eq!(
            parse_duration("P1Y1M1W1DT1H1M1S"),
            Ok(secs(((365 + 30 + 7 + 1) * 24 + 1) * 3600 + 61))
        );
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "P",
            "PT",
            "P1DT",
            "1S",
            "pt1s",
            "PT1s",
            "T1S",
            "-PT1S",
            "PT-1S",
            "PT+1S",
            "PT1",
            "PTS",
            "PT.5S",
            "PT1.S",
            "PT1.2.3S",
            "PT1X",
            "P1H",
            "PT1D",
            "PT1S1M",
            "PT1M1H",
            "PT1S1S",
            "P1D1Y",
            "P1DT1H ",
            " PT1S",
            "PT1.5M1S",
            "P1.5DT1H",
            "PTT1S",
            "P1DTT1S",
            "PT1H2",
            "garbage",
            "PT99999999999999999999999999999999999999999S",
            "P99999999999999Y",
        ] {
            assert!(parse_duration(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(format_duration(secs(1)), "PT1S");
        assert_eq!(format_duration(secs(300)), "PT5M");
        assert_eq!(format_duration(Duration::from_millis(500)), "PT0.5S");
        assert_eq!(format_duration(secs(3600)), "PT1H");
        assert_eq!(format_duration(secs(90)), "PT1M30S");
        assert_eq!(format_duration(secs(0)), "PT0S");
        assert_eq!(format_duration(secs(86_400)), "PT24H");
        assert_eq!(
            format_duration(Duration::new(3661, 1)),
            "PT1H1M1.000000001S"
        );
    }

    #[test]
    fn round_trips() {
        for d in [
            secs(0),
            secs(1),
            secs(59),
            secs(61),
            secs(3599),
            secs(3600),
            secs(90_061),
            Duration::from_millis(1500),
            Duration::new(7200, 250_000_000),
            Duration::from_nanos(1),
            Duration::new(u64::MAX / 2, 999_999_999),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{d:?}");
        }
    }

    #[test]
    fn serde_helper_uses_strings() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct W {
            #[serde(with = "super::serde_iso")]
            d: Duration,
        }
        let w = W { d: secs(90) };
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, r#"{"d":"PT1M30S"}"#);
        assert_eq!(serde_json::from_str::<W>(&json).unwrap(), w);
        assert!(serde_json::from_str::<W>(r#"{"d":"1s"}"#).is_err());
        assert!(serde_json::from_str::<W>(r#"{"d":5}"#).is_err());
    }
}
