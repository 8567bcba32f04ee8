//! Command parsing over arbitrary lines, in both dialects, with the bodies of jobs, cron
//! registrations and workflows validated as the server does: it returns a command or a
//! coded error, never panics, and a command it returns survives the serde round trip a
//! node uses to hand requests to another.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ojsd::engine::intake::Intake;

fuzz_target!(|line: &[u8]| {
    let intake = Intake::default();
    match ojsd::protocol::parse_command(line, &intake) {
        Err(e) => assert!(!e.message.is_empty()),
        Ok(cmd) => {
            let bytes = serde_json::to_vec(&cmd).expect("a command serializes");
            let back: ojsd::protocol::Command =
                serde_json::from_slice(&bytes).expect("a serialized command reads back");
            assert_eq!(
                serde_json::to_vec(&back).expect("serializes again"),
                bytes,
                "round trip changed the command"
            );
        }
    }
    if let Err(e) = ojsd::protocol::faktory::parse(line, &intake) {
        assert!(!e.message.is_empty());
    }
});
