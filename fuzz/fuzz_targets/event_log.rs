//! Event-log records read back from disk: any bytes decode to consecutive events that lie
//! inside the record, or to `None`; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let first = 1_000;
    if let Some(entries) = ojsd::events::decode_chunk(first, data) {
        for (expect, (cursor, json)) in (first..).zip(&entries) {
            assert_eq!(*cursor, expect);
            assert!(json.len() <= data.len());
        }
    }
});
