//! Faktory names as OJS names, reversibly, so a `queue` or `jobtype` with capitals, `_` or
//! any other character round-trips byte for byte (PUSH → FETCH → INFO) while the engine
//! only ever holds names valid in OJS.
//!
//! A name that is already valid in OJS and does not start with `fk.` is kept as it is
//! (`default`, `send_email`), so both dialects share those queues. Any other name becomes
//! `fk.` (queues) or `fk.x` (types) followed by the name with every byte outside the OJS
//! alphabet written as an escape and two lowercase hex digits: `-` for queues
//! (`Critical_Q` → `fk.-43ritical-5f-51`), `_` for types (`SendEmail` → `fk.x_53end_45mail`).

use super::err;
use crate::error::OjsResult;

/// Names that start with this are always escaped, so an escaped name cannot collide. The
/// OJS validators give names in it room for the escape (`job::name_limit`), so the limits
/// below are on the name as the client wrote it.
const RESERVED: &str = crate::job::ESCAPED_NAME_PREFIX;
const QUEUE_PREFIX: &str = RESERVED;
const TYPE_PREFIX: &str = "fk.x";

fn escape(out: &mut String, name: &str, keep: fn(u8) -> bool, esc: char) {
    for b in name.bytes() {
        if keep(b) {
            out.push(char::from(b));
        } else {
            out.push(esc);
            out.push_str(&format!("{b:02x}"));
        }
    }
}

fn unescape(s: &str, esc: u8) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == esc {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One kind of name: the OJS alphabet kept as it is, the escape byte for the rest, and
/// the prefix of an escaped name.
struct Kind {
    what: &'static str,
    /// Longest name a client may write, in bytes: the OJS limit of this kind of name.
    max: usize,
    prefix: &'static str,
    keep: fn(u8) -> bool,
    esc: u8,
    valid: fn(&str) -> bool,
}

const QUEUE: Kind = Kind {
    what: "queue name",
    max: crate::job::MAX_QUEUE_BYTES,
    prefix: QUEUE_PREFIX,
    keep: |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.',
    esc: b'-',
    valid: crate::job::is_valid_queue,
};

const TYPE: Kind = Kind {
    what: "jobtype",
    max: crate::job::validate::MAX_TYPE_BYTES,
    prefix: TYPE_PREFIX,
    keep: |b| b.is_ascii_lowercase() || b.is_ascii_digit(),
    esc: b'_',
    valid: crate::job::validate::is_valid_job_type,
};

impl Kind {
    /// As is when valid in OJS and not starting with `fk.`; escaped otherwise.
    /// The length is checked on the name as written, before escaping, so capitals (three
    /// bytes each once escaped) do not shorten the limit.
    fn encode(&self, name: &str) -> OjsResult<String> {
        if name.len() > self.max {
            let shown: String = name.chars().take(32).collect();
            return Err(err(format!(
                "{} {shown:?}... is {} bytes; the limit is {}",
                self.what,
                name.len(),
                self.max
            )));
        }
        if (self.valid)(name) && !name.starts_with(RESERVED) {
            return Ok(name.to_owned());
        }
        let mut out = String::from(self.prefix);
        escape(&mut out, name, self.keep, char::from(self.esc));
        if !(self.valid)(&out) {
            return Err(err(format!("{} {name:?} cannot be stored", self.what)));
        }
        Ok(out)
    }

    fn decode(&self, ojs: &str) -> String {
        ojs.strip_prefix(self.prefix)
            .and_then(|rest| unescape(rest, self.esc))
            .unwrap_or_else(|| ojs.to_owned())
    }
}

/// The OJS queue of a Faktory queue name.
pub fn ojs_queue(name: &str) -> OjsResult<String> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(err(format!(
            "queue name {name:?} must be non-empty, without spaces"
        )));
    }
    QUEUE.encode(name)
}

/// The Faktory name of an OJS queue (the inverse of [`ojs_queue`]).
pub fn faktory_queue(ojs: &str) -> String {
    QUEUE.decode(ojs)
}

/// A queue as an operator names it on any port: an OJS queue name as it is; a name only
/// Faktory allows (`Critical_Q`) as the queue the Faktory port files it under; `*` (every
/// queue) and anything else unchanged, for the engine to judge.
pub fn queue_ref(name: String) -> String {
    if name == "*" || crate::job::is_valid_queue(&name) {
        return name;
    }
    ojs_queue(&name).unwrap_or(name)
}

/// A job type as an operator names it on any port: an OJS type as it is; a name only
/// Faktory allows (`SendEmail`) as the type the Faktory port files it under.
pub fn type_ref(name: String) -> String {
    if crate::job::validate::is_valid_job_type(&name) {
        return name;
    }
    ojs_type(&name).unwrap_or(name)
}

/// A job envelope's `type` and `queue` as the client wrote them: the Faktory names of the
/// escaped ones (`fk.x_53end_45mail` → `SendEmail`), others unchanged. For the admin
/// listings, the CLI and the dashboard; the job's own resource keeps its OJS names.
pub fn written_names(job: &mut serde_json::Map<String, serde_json::Value>) {
    use serde_json::Value;
    if let Some(Value::String(t)) = job.get_mut("type") {
        *t = faktory_type(t);
    }
    if let Some(Value::String(q)) = job.get_mut("queue") {
        *q = faktory_queue(q);
    }
}

/// The OJS job type of a Faktory jobtype.
pub fn ojs_type(jobtype: &str) -> OjsResult<String> {
    if jobtype.is_empty() {
        return Err(err("jobs must have a jobtype parameter"));
    }
    TYPE.encode(jobtype)
}

/// The Faktory jobtype of an OJS type (the inverse of [`ojs_type`]).
pub fn faktory_type(ojs: &str) -> String {
    TYPE.decode(ojs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_valid_in_ojs() {
        for q in [
            "default",
            "critical",
            "Critical_Q",
            "fk.x",
            "fk.-41",
            "a-b.c",
            "_x",
            "日本",
            "q\u{0}",
        ] {
            let o = ojs_queue(q).unwrap();
            assert!(crate::job::is_valid_queue(&o), "{q} -> {o}");
            assert_eq!(faktory_queue(&o), q);
        }
        assert_eq!(ojs_queue("default").unwrap(), "default");
        assert_eq!(ojs_queue("Critical_Q").unwrap(), "fk.-43ritical-5f-51");
        assert_eq!(ojs_queue("fk.a").unwrap(), "fk.fk.a");
        for t in [
            "send_email",
            "SendEmail_Job",
            "Some::Worker",
            "fk.x41",
            "a.b",
            "9lives",
            "x_41",
        ] {
            let o = ojs_type(t).unwrap();
            assert!(crate::job::validate::is_valid_job_type(&o), "{t} -> {o}");
            assert_eq!(faktory_type(&o), t);
        }
        assert_eq!(ojs_type("send_email").unwrap(), "send_email");
        assert_eq!(ojs_type("SendEmail").unwrap(), "fk.x_53end_45mail");
        // Distinct names stay distinct.
        assert_ne!(ojs_type("x_41").unwrap(), ojs_type("xA").unwrap());
        assert_ne!(ojs_queue("a-41").unwrap(), ojs_queue("aA").unwrap());
    }

    #[test]
    fn the_limit_is_on_the_name_as_written_not_its_escape() {
        for n in ["Q", "\u{7f}", "日"] {
            let q = n.repeat(128 / n.len());
            let o = ojs_queue(&q).unwrap();
            assert!(crate::job::is_valid_queue(&o), "{q} -> {o}");
            assert_eq!(faktory_queue(&o), q);
            let t = n.repeat(255 / n.len());
            let o = ojs_type(&t).unwrap();
            assert!(crate::job::validate::is_valid_job_type(&o), "{t} -> {o}");
            assert_eq!(faktory_type(&o), t);
        }
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(ojs_queue("").is_err());
        assert!(ojs_queue("a b").is_err());
        assert!(ojs_queue(&"q".repeat(129)).is_err());
        assert!(ojs_type("").is_err());
        assert!(ojs_type(&"t".repeat(256)).is_err());
        // Not an escape we wrote: shown as it is.
        assert_eq!(faktory_queue("fk.-zz"), "fk.-zz");
        assert_eq!(faktory_type("fk.x_4"), "fk.x_4");
    }
}
