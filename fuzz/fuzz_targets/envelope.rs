//! Envelope validation over arbitrary JSON: never panics, and an accepted job serializes
//! and parses back to the same job (what the store relies on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ojsd::job::validate::{parse_new_job, Limits};
use ojsd::job::Job;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let now = chrono::Utc::now();
    if let Ok(new) = parse_new_job(value, data.len(), now, &Limits::default()) {
        let bytes = serde_json::to_vec(&new.job).expect("a job serializes");
        let back: Job = serde_json::from_slice(&bytes).expect("a stored job parses back");
        assert_eq!(back, new.job);
    }
});
