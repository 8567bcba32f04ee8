//! Command parsing over arbitrary lines: it returns a command or a coded error, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    if let Err(e) = ojsd::protocol::parse_command(line) {
        assert!(!e.message.is_empty());
    }
});
