//! The line codec over arbitrary bytes split at arbitrary points: it must never panic,
//! never return a line longer than its limit, and account for every newline it is given.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use ojsd::protocol::{Frame, LineCodec};
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let limit = 64;
    let mut codec = LineCodec::new(limit);
    let mut buf = BytesMut::new();
    let mut frames = 0usize;
    let cut = (split as usize).min(rest.len());
    for chunk in [&rest[..cut], &rest[cut..]] {
        buf.extend_from_slice(chunk);
        while let Ok(Some(f)) = codec.decode(&mut buf) {
            if let Frame::Line(l) = &f {
                assert!(l.len() <= limit);
            }
            frames += 1;
        }
    }
    let newlines = rest.iter().filter(|b| **b == b'\n').count();
    assert_eq!(frames, newlines, "one frame per newline");
});
