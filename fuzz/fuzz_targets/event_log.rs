//! Event-log records read back from disk: any bytes decode to consecutive events that lie
//! inside the record, or to `None`; every entry decodes to an event that renders, or to
//! `None`; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let first = 1_000;
    if let Some(entries) = ojsd::events::decode_chunk(first, data) {
        for (expect, (cursor, entry)) in (first..).zip(&entries) {
            assert_eq!(*cursor, expect);
            assert!(entry.len() <= data.len());
            if let Some((event, _)) = ojsd::events::decode(*cursor, *entry) {
                let json = event.json();
                assert!(!json.is_empty());
            }
        }
    }
    // The same bytes as one compact entry.
    if let Some((event, _)) =
        ojsd::events::decode(first, ojsd::events::Entry::Compact(data))
    {
        let _ = event.json();
    }
});
