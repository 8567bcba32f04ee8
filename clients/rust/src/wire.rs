//! Framing: one command line out, one RESP-subset reply in.
//!
//! Generic over `BufRead`/`Write` so it can be unit-tested on byte buffers.

use std::io::{self, BufRead, Read, Write};

use crate::{Error, Result};

/// Longest status/error/header line accepted; guards memory against a
/// misbehaving peer that never sends a newline.
pub const MAX_LINE: u64 = 64 * 1024;
/// Largest bulk payload accepted (jobs are JSON; this is generous).
pub const MAX_BULK: u64 = 512 * 1024 * 1024;

/// One reply from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+text`
    Simple(String),
    /// `$len` followed by `len` raw bytes (JSON in practice).
    Bulk(Vec<u8>),
    /// `$-1`
    Null,
    /// `-ERR CODE message` (or `-CODE message`).
    Error { code: String, message: String },
}

impl Reply {
    /// Turn an error reply into `Err(Error::Server)`, pass others through.
    pub fn into_result(self) -> Result<Reply> {
        match self {
            Reply::Error { code, message } => Err(Error::Server { code, message }),
            other => Ok(other),
        }
    }
}

/// Write `line` followed by CRLF. Rejects embedded CR/LF, which would let one
/// call smuggle a second command onto the wire.
pub fn write_line<W: Write>(w: &mut W, line: &str) -> Result<()> {
    check_line(line)?;
    w.write_all(line.as_bytes())?;
    w.write_all(b"\r\n")?;
    Ok(())
}

/// Validate a command line without writing it.
pub fn check_line(line: &str) -> Result<()> {
    if line.contains(['\r', '\n']) {
        return Err(Error::Protocol(
            "command line must not contain CR or LF".into(),
        ));
    }
    Ok(())
}

/// Read exactly one reply.
pub fn read_reply<R: BufRead>(r: &mut R) -> Result<Reply> {
    let line = read_line(r)?;
    let Some((&kind, rest)) = line.split_first() else {
        return Err(Error::Protocol("empty reply line".into()));
    };
    match kind {
        b'+' => Ok(Reply::Simple(utf8(rest)?)),
        b'-' => {
            let (code, message) = parse_error_text(&utf8(rest)?);
            Ok(Reply::Error { code, message })
        }
        b'$' => read_bulk(r, rest),
        other => Err(Error::Protocol(format!(
            "unexpected reply type byte {:?}",
            char::from(other)
        ))),
    }
}

/// Split server error text into (code, message).
///
/// `ERR NOT_FOUND job x not found` → (`NOT_FOUND`, `job x not found`);
/// `ERR something broke` → (`ERR`, `something broke`);
/// `NOAUTH bad password` → (`NOAUTH`, `bad password`).
pub fn parse_error_text(text: &str) -> (String, String) {
    let text = text.trim();
    // Only strip a whole-word "ERR" so e.g. "ERRATIC ..." is left alone.
    let rest = match text.strip_prefix("ERR") {
        Some(r) if r.is_empty() || r.starts_with(' ') => r.trim_start(),
        _ => text,
    };
    let (first, tail) = match rest.split_once(' ') {
        Some((a, b)) => (a, b.trim_start()),
        None => (rest, ""),
    };
    if looks_like_code(first) {
        (first.to_string(), tail.to_string())
    } else {
        ("ERR".to_string(), rest.to_string())
    }
}

/// SCREAMING_SNAKE, at least two chars so a sentence starting with "I" or
/// "A" is not mistaken for a code.
fn looks_like_code(word: &str) -> bool {
    let b = word.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Read one CRLF-terminated line (bounded), returning it without the CRLF.
fn read_line<R: BufRead>(r: &mut R) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    r.by_ref().take(MAX_LINE).read_until(b'\n', &mut buf)?;
    if buf.last() != Some(&b'\n') {
        if buf.len() as u64 >= MAX_LINE {
            return Err(Error::Protocol("reply line too long".into()));
        }
        return Err(eof("connection closed while reading a reply"));
    }
    buf.pop();
    // Be lenient about a bare LF terminator; the server sends CRLF.
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(buf)
}

fn read_bulk<R: BufRead>(r: &mut R, header: &[u8]) -> Result<Reply> {
    let header = utf8(header)?;
    let len: i64 = header
        .trim()
        .parse()
        .map_err(|_| Error::Protocol(format!("bad bulk length {header:?}")))?;
    if len == -1 {
        return Ok(Reply::Null);
    }
    if len < 0 || len as u64 > MAX_BULK {
        return Err(Error::Protocol(format!("bulk length {len} out of range")));
    }
    // The payload may itself contain CRLF, so read by length, never by line.
    // read_to_end on a Take grows as data arrives rather than trusting `len`
    // for one huge allocation up front.
    let want = len as u64 + 2;
    let mut buf = Vec::new();
    r.by_ref().take(want).read_to_end(&mut buf)?;
    if (buf.len() as u64) < want {
        return Err(eof("connection closed inside a bulk reply"));
    }
    if !buf.ends_with(b"\r\n") {
        return Err(Error::Protocol("bulk reply not terminated by CRLF".into()));
    }
    buf.truncate(len as usize);
    Ok(Reply::Bulk(buf))
}

fn utf8(b: &[u8]) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| Error::Protocol("reply is not valid UTF-8".into()))
}

fn eof(msg: &str) -> Error {
    Error::Io(io::Error::new(io::ErrorKind::UnexpectedEof, msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn parse(bytes: &[u8]) -> Result<Reply> {
        read_reply(&mut Cursor::new(bytes.to_vec()))
    }

    #[test]
    fn simple_null_and_bulk() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Simple("OK".into()));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Null);
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(vec![]));
        let payload = b"{\r\n\"a\": \"x\"\r\n}";
        let mut frame = format!("${}\r\n", payload.len()).into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n+NEXT\r\n");
        let mut cur = Cursor::new(frame);
        assert_eq!(read_reply(&mut cur).unwrap(), Reply::Bulk(payload.to_vec()));
        // The stream stays in sync after a bulk with embedded CRLF.
        assert_eq!(read_reply(&mut cur).unwrap(), Reply::Simple("NEXT".into()));
    }

    #[test]
    fn error_variants() {
        let e = |s: &str| match parse(s.as_bytes()).unwrap() {
            Reply::Error { code, message } => (code, message),
            other => panic!("not an error: {other:?}"),
        };
        assert_eq!(
            e("-ERR NOT_FOUND job 0193 not found\r\n"),
            ("NOT_FOUND".into(), "job 0193 not found".into())
        );
        assert_eq!(
            e("-ERR Unknown command\r\n"),
            ("ERR".into(), "Unknown command".into())
        );
        assert_eq!(
            e("-NOAUTH bad password\r\n"),
            ("NOAUTH".into(), "bad password".into())
        );
        assert_eq!(e("-ERR\r\n"), ("ERR".into(), "".into()));
        assert_eq!(
            e("-ERR QUEUE_PAUSED\r\n"),
            ("QUEUE_PAUSED".into(), "".into())
        );
        assert_eq!(e("-ERR I broke\r\n"), ("ERR".into(), "I broke".into()));
        // A whole-word "ERR" only: "ERRATIC" is itself a code-looking word.
        assert_eq!(e("-ERRATIC thing\r\n"), ("ERRATIC".into(), "thing".into()));
        assert_eq!(e("-ERR oops: Bad\r\n"), ("ERR".into(), "oops: Bad".into()));
    }

    #[test]
    fn malformed_replies() {
        assert!(matches!(parse(b"*1\r\n"), Err(Error::Protocol(_))));
        assert!(matches!(parse(b"$abc\r\n"), Err(Error::Protocol(_))));
        assert!(matches!(parse(b"$-2\r\n"), Err(Error::Protocol(_))));
        assert!(matches!(parse(b"$5\r\nab"), Err(Error::Io(_))));
        assert!(matches!(parse(b"$2\r\nabcd"), Err(Error::Protocol(_))));
        assert!(matches!(parse(b"+OK"), Err(Error::Io(_))));
        assert!(matches!(parse(b""), Err(Error::Io(_))));
    }

    #[test]
    fn write_line_frames_and_rejects_newlines() {
        let mut out = Vec::new();
        write_line(&mut out, "FETCH a b").unwrap();
        assert_eq!(out, b"FETCH a b\r\n");
        assert!(matches!(
            write_line(&mut out, "A\r\nEND"),
            Err(Error::Protocol(_))
        ));
        assert_eq!(out, b"FETCH a b\r\n");
    }
}
