//! CRLF (or bare LF) line framing with a length limit. An over-long line is skipped up to
//! its newline and reported as `Frame::TooLong`, so the connection can carry on.

use super::reply::Reply;
use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    Line(BytesMut),
    TooLong { limit: usize },
}

#[derive(Debug)]
pub struct LineCodec {
    max_len: usize,
    /// Bytes already searched for a newline, so a slow sender costs O(n) not O(n²).
    scanned: usize,
    discarding: bool,
    /// Errors as Faktory writes them, `-ERR <message>`, without the OJS error code.
    bare_errors: bool,
}

impl LineCodec {
    pub fn new(max_len: usize) -> Self {
        LineCodec {
            max_len,
            scanned: 0,
            discarding: false,
            bare_errors: false,
        }
    }

    /// The Faktory dialect's codec: errors are `-ERR <message>`.
    pub fn with_bare_errors(mut self, bare: bool) -> Self {
        self.bare_errors = bare;
        self
    }
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        let newline = buf[self.scanned..].iter().position(|b| *b == b'\n');
        match newline {
            Some(offset) => {
                let end = self.scanned + offset;
                self.scanned = 0;
                if self.discarding {
                    buf.advance(end + 1);
                    self.discarding = false;
                    return Ok(Some(Frame::TooLong {
                        limit: self.max_len,
                    }));
                }
                let mut line = buf.split_to(end + 1);
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                if line.len() > self.max_len {
                    return Ok(Some(Frame::TooLong {
                        limit: self.max_len,
                    }));
                }
                Ok(Some(Frame::Line(line)))
            }
            None => {
                if self.discarding || buf.len() > self.max_len + 1 {
                    // Keep memory bounded: drop what we have and wait for the newline.
                    self.discarding = true;
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        // A partial last line without newline is dropped, as Faktory does.
        let f = self.decode(buf)?;
        if f.is_none() {
            buf.clear();
        }
        Ok(f)
    }
}

impl Encoder<Reply> for LineCodec {
    type Error = std::io::Error;

    fn encode(&mut self, item: Reply, dst: &mut BytesMut) -> Result<(), Self::Error> {
        item.write_as(dst, self.bare_errors);
        Ok(())
    }
}

impl Reply {
    pub fn write_to(&self, dst: &mut BytesMut) {
        self.write_as(dst, false);
    }

    /// `bare_errors`: `-ERR <message>` (Faktory) instead of `-ERR <CODE> <message>`.
    pub fn write_as(&self, dst: &mut BytesMut, bare_errors: bool) {
        match self {
            Reply::Ok => dst.put_slice(b"+OK\r\n"),
            Reply::Simple(s) => {
                dst.put_u8(b'+');
                put_single_line(dst, s);
                dst.put_slice(b"\r\n");
            }
            Reply::Bulk(b) => {
                dst.reserve(b.len() + 16);
                dst.put_u8(b'$');
                dst.put_slice(b.len().to_string().as_bytes());
                dst.put_slice(b"\r\n");
                dst.put_slice(b);
                dst.put_slice(b"\r\n");
            }
            Reply::Null => dst.put_slice(b"$-1\r\n"),
            Reply::Error(e) => {
                dst.put_slice(b"-ERR ");
                if !bare_errors {
                    dst.put_slice(e.code.as_str().as_bytes());
                    dst.put_u8(b' ');
                }
                put_single_line(dst, &e.message);
                dst.put_slice(b"\r\n");
            }
        }
    }
}

/// Simple strings and errors must stay on one line whatever the message holds.
fn put_single_line(dst: &mut BytesMut, s: &str) {
    for b in s.bytes() {
        dst.put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, OjsError};

    fn lines(codec: &mut LineCodec, input: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(input);
        let mut out = vec![];
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn crlf_and_lf_lines() {
        let mut c = LineCodec::new(100);
        let f = lines(&mut c, b"INFO\r\nEND\nPUSH {}\r\n");
        assert_eq!(
            f,
            vec![
                Frame::Line(BytesMut::from(&b"INFO"[..])),
                Frame::Line(BytesMut::from(&b"END"[..])),
                Frame::Line(BytesMut::from(&b"PUSH {}"[..])),
            ]
        );
    }

    #[test]
    fn partial_line_waits_for_more() {
        let mut c = LineCodec::new(100);
        let mut buf = BytesMut::from(&b"PU"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"SH x\r\n");
        assert_eq!(
            c.decode(&mut buf).unwrap(),
            Some(Frame::Line(BytesMut::from(&b"PUSH x"[..])))
        );
    }

    #[test]
    fn over_long_line_is_skipped_and_the_next_line_is_read() {
        let mut c = LineCodec::new(8);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[b'a'; 20]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty(), "memory stays bounded while discarding");
        buf.extend_from_slice(b"aaaa\r\nINFO\r\n");
        assert_eq!(
            c.decode(&mut buf).unwrap(),
            Some(Frame::TooLong { limit: 8 })
        );
        assert_eq!(
            c.decode(&mut buf).unwrap(),
            Some(Frame::Line(BytesMut::from(&b"INFO"[..])))
        );
        // Over the limit but complete in one read.
        let f = lines(&mut c, b"0123456789\nEND\n");
        assert_eq!(
            f,
            vec![
                Frame::TooLong { limit: 8 },
                Frame::Line(BytesMut::from(&b"END"[..]))
            ]
        );
    }

    #[test]
    fn replies_are_resp_framed() {
        let mut out = BytesMut::new();
        Reply::Ok.write_to(&mut out);
        Reply::Null.write_to(&mut out);
        Reply::Bulk(b"{\"a\":1}".to_vec().into()).write_to(&mut out);
        Reply::Error(OjsError::new(ErrorCode::NotFound, "no\r\njob")).write_to(&mut out);
        assert_eq!(
            &out[..],
            &b"+OK\r\n$-1\r\n$7\r\n{\"a\":1}\r\n-ERR NOT_FOUND no  job\r\n"[..]
        );
    }
}
