//! Like `decode_snapshot`, but the input is a payload only: it is wrapped in a valid
//! envelope (magic, version, its length, its crc32), so that every input reaches
//! postcard, the consistency checks and the restore instead of stopping at the
//! checksum. Seed it with the payloads of real snapshots (their bytes after the
//! 22-byte header).

#![no_main]

use libfuzzer_sys::fuzz_target;
use spool_core::{FORMAT_VERSION, MAGIC, Snapshot};

#[path = "common.rs"]
mod common;

fuzz_target!(|payload: &[u8]| {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    let Ok(snapshot) = Snapshot::decode(&bytes) else {
        return;
    };
    common::exercise(&snapshot);
});
