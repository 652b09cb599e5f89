//! Feeds arbitrary bytes to `Snapshot::decode`; whatever decodes is restored with a
//! registry of a serde task type, and whatever restores is listed and snapshotted
//! again. Every step must return (a typed error or a value), never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use spool_core::Snapshot;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(snapshot) = Snapshot::decode(data) {
        common::exercise(&snapshot);
    }
});
